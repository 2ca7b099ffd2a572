"""Lesson 10: one PPO configuration run by TRL 1.12.0's PPOTrainer and by ours, and scaling out.

    from course_utils.comparison import trl_compare as tc
    config = tc.lesson_config()                                   # our PPOConfig
    trl = tc.run_in_child("trl", config, updates=3, out_dir="runs/week10-trl")
    ours = tc.run_in_child("ours", config, updates=3, out_dir="runs/week10-ours")
    rows = tc.side_by_side(ours["metrics"], trl["metrics"])      # metric by metric, per update
    print(tc.side_by_side_markdown(rows))

TRL's PPOTrainer exists only up to TRL 1.12.0, in ``trl.experimental.ppo`` (later releases removed
it); this module needs exactly that version. ``bench.py`` builds the same trainer to time it; both
build and run it through ``trl_adapter`` (tokenizer, dataset, models, LoRA, PPOConfig, the one
monkeypatch context) and start their children through ``child``.

What both trainers get, so that their logs can be read side by side:

- the model and the LoRA adapter (rank, alpha, layers); the reference is the adapter switched off;
- the same prompts in the same order: our ``PromptStream`` batches, fed to TRL unshuffled;
- the same reward: our reward function (the task checker) scores TRL's decoded responses, because
  TRL 1.12.0 only accepts a reward *model* (``TextRewardModel`` below stands in for one);
- the same sampling (temperature, top-k 0, top-p 1, responses end at EOS: TRL ``stop_token="eos"``)
  and PPO settings (epochs, minibatches, one optimizer step per minibatch, constant learning rate,
  Adam epsilon, clip ranges, vf_coef, gamma, lambda, beta, the k1 estimator).

What stays different, because the trainers are built differently (lesson 10 shows each on a real
batch; ``docs/trl_differences.md`` lists them with the tests that check them):

- TRL's value model is a separate copy of the whole backbone with a random score head, all of it
  trained; ours is a linear head (starting at zero) on the policy's LoRA backbone;
- TRL puts the score one position after the last real token and trains the value there too;
- TRL averages approx-KL, the ratio and the entropy over padding positions;
- TRL never clips gradients and has no entropy bonus; its whitening is local to each process.

To read what TRL computed, ``run_trl`` looks into the running ``PPOTrainer.train``: at the end of
every update (a TrainerCallback) and at every backward pass it reads the local variables of that
function's frame (responses, masks, rewards, values, advantages, ...). Nothing in TRL's loop is
changed, except that its reward-model call is routed to our reward function.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.patches
import numpy as np
import torch
from matplotlib.figure import Figure

from course_utils import ppo_math as pm
from course_utils.comparison import child
from course_utils.config import PPOConfig

from course_utils.machinery.distributed import free_port
from course_utils.machinery.paths import REPO_ROOT as ROOT
from course_utils.machinery.versions import package_versions
ADAM_EPS = 1e-5  # the epsilon of our trainer's Adam (trainer.PPOTrainer); TRL gets the same


# ---------------------------------------------------------------------------------------------
# 1. The configuration, ours and TRL's
# ---------------------------------------------------------------------------------------------


def lesson_config(**overrides) -> PPOConfig:
    """The lesson's configuration (the benchmark's, with 2 epochs x 2 minibatches and natural EOS).

    SmolLM2-135M-Instruct in float32 on the CPU, LoRA rank 8 (alpha 16) on q_proj and v_proj, 8 episodes per
    update, at most 32 response tokens, temperature 0.8, 2 PPO epochs x 2 minibatches, learning
    rate 2e-4 (constant), beta 0.02 with k1, the task checker's partial credit as the reward.
    ``overrides`` change any field (e.g. ``total_updates=1``); the result is validated.
    """
    values = dict(
        # device: TRL's side is built with use_cpu=True (trl_adapter.trl_ppo_args); ours runs on the same device.
        run_name="week10-ours", output_dir=str(ROOT / "runs"), seed=0, device="cpu", model="smollm2-135m-instruct",
        lora_rank=8, lora_alpha=16, lora_target_modules=["q_proj", "v_proj"], reward="checker_partial",
        batch_size=8, max_new_tokens=32, temperature=0.8, total_updates=3, ppo_epochs=2, num_minibatches=2,
        learning_rate=2e-4, lr_schedule="constant", kl_coef=0.02, kl_estimator="k1",
    )
    values.update(overrides)
    return PPOConfig(**values).validate()


def trl_args_for(config: PPOConfig, output_dir: str, total_updates: int | None = None):
    """TRL 1.12.0's ``PPOConfig`` for our ``config`` (see ``docs/trl_config_mapping.md``).

    Raises ValueError for settings TRL's PPOTrainer cannot express: an entropy bonus
    (``ent_coef`` must be 0), an adaptive KL controller, advantages left unwhitened, a KL
    estimator other than k1/k3, a KL early stop (``target_kl``), or ``whiten_rewards`` (TRL whitens the per-token shaped rewards,
    we whiten the scores: a different operation).
    """
    from course_utils.comparison import trl_adapter as ta

    problems = []
    if config.ent_coef != 0:
        problems.append(f"ent_coef={config.ent_coef}: TRL's loss has no entropy bonus; set ent_coef=0")
    if config.adaptive_kl:
        problems.append("adaptive_kl=True: TRL 1.12.0 has a fixed kl_coef only; set adaptive_kl=False")
    if not config.whiten_advantages:
        problems.append("whiten_advantages=False: TRL always whitens advantages; set it True")
    if config.kl_estimator not in ("k1", "k3"):
        problems.append(f"kl_estimator={config.kl_estimator!r}: TRL accepts k1 or k3 only")
    if config.whiten_rewards:
        problems.append("whiten_rewards=True: TRL's whiten_rewards whitens per-token rewards, ours the scores; "
                        "set whiten_rewards=False to compare")
    if config.target_kl:
        problems.append(f"target_kl={config.target_kl}: TRL's PPOTrainer always runs every epoch; set target_kl=0")
    if config.samples_per_prompt != 1 or config.group_baseline:
        problems.append(f"samples_per_prompt={config.samples_per_prompt}, group_baseline={config.group_baseline}: "
                        "TRL's PPOTrainer samples one response per prompt; set samples_per_prompt=1, "
                        "group_baseline=False")
    if config.sampling_dtype != "float32":
        problems.append(f"sampling_dtype={config.sampling_dtype!r}: TRL samples in the model's dtype (float32 "
                        "here); set sampling_dtype=float32")
    if problems:
        raise ValueError("TRL's PPOTrainer cannot run this configuration: " + "; ".join(problems) + ".")
    return ta.trl_ppo_args(
        output_dir, seed=config.seed, batch_size=config.batch_size, num_minibatches=config.num_minibatches,
        ppo_epochs=config.ppo_epochs, total_updates=total_updates or config.total_updates,
        response_length=config.max_new_tokens, temperature=config.temperature,
        learning_rate=config.learning_rate, kl_coef=config.kl_coef,
        stop_token="eos",  # end responses at EOS, as ours do (TRL's default None never stops)
        lr_scheduler_type="linear" if config.lr_schedule == "linear" else "constant",
        adam_epsilon=ADAM_EPS, max_grad_norm=config.max_grad_norm, cliprange=config.cliprange,
        cliprange_value=config.cliprange_value, vf_coef=config.vf_coef, gamma=config.gamma, lam=config.lam,
        kl_estimator=config.kl_estimator, whiten_rewards=False,
    )


def config_mapping(config: PPOConfig, trl_args) -> list[dict]:
    """Our fields next to the TRL settings built from them, read back from both objects.

    Rows ``{"ours", "our_value", "trl", "trl_value", "same"}``; ``same`` says whether the two
    values are equal (``None`` where TRL has no such setting and only a fixed behaviour).
    """
    per_step = trl_args.per_device_train_batch_size * trl_args.gradient_accumulation_steps
    rows = [
        ("batch_size", config.batch_size, "per_device_train_batch_size x gradient_accumulation_steps", per_step),
        ("num_minibatches", config.num_minibatches, "num_mini_batches", trl_args.num_mini_batches),
        ("(optimizer steps per epoch)", config.num_minibatches, "gradient_accumulation_steps = 1: one per minibatch",
         trl_args.num_mini_batches if trl_args.gradient_accumulation_steps == 1 else 1),
        ("ppo_epochs", config.ppo_epochs, "num_ppo_epochs", trl_args.num_ppo_epochs),
        ("max_new_tokens", config.max_new_tokens, "response_length", trl_args.response_length),
        ("(stop at the first EOS)", True, "stop_token", trl_args.stop_token),
        ("temperature", config.temperature, "temperature", trl_args.temperature),
        ("learning_rate", config.learning_rate, "learning_rate", trl_args.learning_rate),
        ("lr_schedule", config.lr_schedule, "lr_scheduler_type", str(getattr(trl_args.lr_scheduler_type, "value",
                                                                             trl_args.lr_scheduler_type))),
        ("(Adam epsilon)", ADAM_EPS, "adam_epsilon", trl_args.adam_epsilon),
        ("max_grad_norm", config.max_grad_norm, "max_grad_norm (never applied by PPOTrainer)", trl_args.max_grad_norm),
        ("cliprange", config.cliprange, "cliprange", trl_args.cliprange),
        ("cliprange_value", config.cliprange_value, "cliprange_value", trl_args.cliprange_value),
        ("vf_coef", config.vf_coef, "vf_coef", trl_args.vf_coef),
        ("ent_coef", config.ent_coef, "(no entropy bonus)", None),
        ("gamma", config.gamma, "gamma", trl_args.gamma),
        ("lam", config.lam, "lam", trl_args.lam),
        ("kl_coef", config.kl_coef, "kl_coef", trl_args.kl_coef),
        ("kl_estimator", config.kl_estimator, "kl_estimator", trl_args.kl_estimator),
        ("whiten_advantages", config.whiten_advantages, "(always on)", None),
        ("whiten_rewards", config.whiten_rewards, "whiten_rewards", trl_args.whiten_rewards),
        ("seed", config.seed, "seed", trl_args.seed),
        ("lora_rank", config.lora_rank, "peft_config.r", config.lora_rank),
        ("lora_alpha", config.lora_alpha, "peft_config.lora_alpha", config.lora_alpha),
        ("lora_target_modules", list(config.lora_target_modules), "peft_config.target_modules",
         list(config.lora_target_modules)),
    ]
    out = []
    for ours, our_value, trl, trl_value in rows:
        if ours == "(stop at the first EOS)":
            same = trl_value == "eos"
        else:
            same = None if trl_value is None else (our_value == trl_value if not isinstance(our_value, float)
                                                    else math.isclose(our_value, trl_value))
        out.append({"ours": ours, "our_value": our_value, "trl": trl, "trl_value": trl_value, "same": same})
    return out


def mapping_doc_sections(names: list[str] | None = None) -> str:
    """The Markdown of ``docs/trl_config_mapping.md``: the sections whose ``## `` title starts
    with one of ``names`` (all sections when None), so a notebook can render the table."""
    text = (ROOT / "docs" / "trl_config_mapping.md").read_text()
    parts = text.split("\n## ")
    if names is None:
        return text
    chosen = [p for p in parts[1:] if any(p.startswith(name) for name in names)]
    if not chosen:
        titles = [p.splitlines()[0] for p in parts[1:]]
        raise ValueError(f"no section of docs/trl_config_mapping.md starts with {names}; sections: {titles}")
    return "\n\n".join("## " + p.strip() for p in chosen)


def prompt_batches(config: PPOConfig, updates: int) -> list[list]:
    """The training prompt records our trainer draws in its first ``updates`` updates, batch by
    batch: the same filtering and the same ``PromptStream`` (seeded by ``config.seed``) as
    ``PPOTrainer`` uses on one process. TRL gets these batches in this order."""
    from course_utils import tasks
    from course_utils.trainer import PromptStream

    families = set(config.task_families)
    records = [r for r in tasks.load_split(config.train_split) if not families or r.family in families]
    stream = PromptStream(records, config.batch_size, config.seed)
    return [stream.next_batch() for _ in range(updates)]


def reward_function(config: PPOConfig):
    """The reward function our trainer builds for ``config`` (checker, learned model or toy):
    the same factory, so that both sides use exactly the same reward."""
    from course_utils.reward_model import make_reward

    return make_reward(config, device=torch.device("cpu"))


# ---------------------------------------------------------------------------------------------
# 2. The reward: our reward function in the place of TRL's reward model
# ---------------------------------------------------------------------------------------------


class TextRewardModel(torch.nn.Module):
    """Stands in for TRL's reward model with one of our reward functions (``score(prompts,
    responses, records)``), so that both trainers are paid by the same rule.

    TRL 1.12.0's PPOTrainer calls ``get_reward(reward_model, query_responses, pad_token_id,
    context_length)`` and keeps the second output, one score per sequence. While ``run_trl`` runs,
    calls for this object come to ``trl_get_reward``: each response is cut at its first EOS (or
    pad), decoded without special tokens, and scored as text together with the record of its
    prompt, as our trainer scores (``rollout.decode_responses``). The score then lands wherever
    TRL's own code puts it.
    """

    def __init__(self, reward_fn, tokenizer, records: list, prompt_ids: list[list[int]]):
        super().__init__()
        if len(records) != len(prompt_ids):
            raise ValueError(f"{len(records)} records for {len(prompt_ids)} prompts: give one record per prompt")
        self.reward_fn, self.tokenizer = reward_fn, tokenizer
        self.by_prompt = {}
        for record, ids in zip(records, prompt_ids):
            self.by_prompt.setdefault(tuple(ids), record)
        self.calls = 0

    def forward(self, *args, **kwargs):  # pragma: no cover - TRL never calls it directly
        raise RuntimeError("TextRewardModel is only called through trl_compare's get_reward routing")

    def trl_get_reward(self, query_responses: torch.Tensor, pad_token_id: int, context_length: int):
        """``(None, scores [B], sequence_lengths [B])`` like TRL's ``get_reward`` (only the scores are used)."""
        from course_utils.rollout import decode_responses, response_mask_from_ids

        queries, responses = query_responses[:, :context_length], query_responses[:, context_length:]
        records, prompts = [], []
        for row in queries.tolist():
            key = tuple(t for t in row if t != pad_token_id)
            if key not in self.by_prompt:
                raise KeyError("a query TRL generated for is not one of the prompts given to TextRewardModel")
            records.append(self.by_prompt[key])
            prompts.append(self.by_prompt[key].prompt)
        stops = sorted({int(self.tokenizer.eos_token_id), int(pad_token_id)})
        mask, *_ = response_mask_from_ids(responses, stops)
        # A stop token that is the pad token is not part of the answer text; decode drops specials anyway.
        texts = decode_responses(self.tokenizer, responses, mask)
        scores = self.reward_fn.score(prompts, texts, records).to(query_responses.device)
        first_pad = _first_true_index(responses == pad_token_id)
        self.calls += 1
        return None, scores.float(), first_pad - 1 + context_length


def _first_true_index(x: torch.Tensor) -> torch.Tensor:
    """Index of the first True in each row of ``x [B, T]``; T where there is none (as TRL's
    ``first_true_indices``)."""
    positions = torch.arange(x.shape[1], device=x.device).expand_as(x)
    return torch.where(x, positions, torch.full_like(positions, x.shape[1])).min(dim=1).values


# ---------------------------------------------------------------------------------------------
# 3. Running TRL's PPOTrainer and reading what it computed
# ---------------------------------------------------------------------------------------------

# Local variables of PPOTrainer.train kept at the end of each update (all [B, T] or [B] tensors).
BATCH_LOCALS = ("queries", "responses", "postprocessed_responses", "logprobs", "ref_logprobs", "values", "scores",
                "sequence_lengths", "padding_mask", "padding_mask_p1", "rewards", "non_score_reward", "kl",
                "advantages", "returns", "actual_end", "contain_eos_token")


def _train_frame(code):
    """The innermost frame running ``code`` (PPOTrainer.train) on this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    if frame is None:
        raise RuntimeError("PPOTrainer.train is not on the call stack")
    return frame


def _cpu(x):
    return x.detach().to("cpu").clone() if torch.is_tensor(x) else x


def microbatch_stats(new_logprobs, old_logprobs, logits, padding_mask, padding_mask_p1, ratio=None) -> dict:
    """TRL's logged per-minibatch statistics next to the same statistics over real tokens only.

    Inputs as inside TRL's loop: log-probs ``[b, T]`` with ``INVALID_LOGPROB`` (1.0) at padding,
    ``logits [b, T, V]`` already divided by the temperature, ``padding_mask [b, T]`` True on
    padding (policy), ``padding_mask_p1`` True on padding for the value (one position later).

        approxkl_trl  = 0.5 · mean over ALL positions of (new - old)²        (TRL: policy/approxkl_avg)
        approxkl_real = 0.5 · mean over real tokens of (new - old)²          (= approx_kl(kind="k2"))
        approxkl_real_k3 = mean over real tokens of (r - 1) - log r, r = exp(new - old)
                        (our estimator, ``approx_kl(kind="k3")``: what our ``approx_kl`` logs)
        ratio_trl     = mean over all positions of exp(new - old)             (TRL: val/ratio)
        entropy_trl   = mean over all positions of H(softmax(logits))         (TRL: policy/entropy_avg)

    Padding positions have new = old = 1.0, so they add ratio 1 and log-ratio 0: TRL's approx-KL
    is the real-token one times n_real / n_all.
    """
    real = ~padding_mask
    diff = new_logprobs - old_logprobs
    ratio = torch.exp(diff) if ratio is None else ratio
    entropy = pm.entropy_from_logits(logits.float())
    n_real, n_all = int(real.sum()), real.numel()
    return {
        "n_real": n_real, "n_all": n_all, "n_value": int((~padding_mask_p1).sum()),
        "approxkl_trl": float(0.5 * (diff**2).mean()),
        "approxkl_real": float(pm.approx_kl(new_logprobs, old_logprobs, real, kind="k2")),
        "approxkl_real_k3": float(pm.approx_kl(new_logprobs, old_logprobs, real, kind="k3")),
        "ratio_trl": float(ratio.mean()), "ratio_real": float(pm.masked_mean(ratio, real)),
        "entropy_trl": float(entropy.mean()), "entropy_real": float(pm.masked_mean(entropy, real)),
    }


class _Recorder:
    """Collects what TRL's PPOTrainer computed: logs, the batch tensors of each update, statistics of
    each micro-batch (at its backward pass), the optimizer's real steps and their gradient norms."""

    def __init__(self, train_code, capture: bool):
        self.train_code, self.capture = train_code, capture
        self.logs, self.batches, self.micro, self.steps, self.grad_norms, self.times = [], [], [], [], [], []
        self._micro, self._norms, self._whiten_inputs = [], [], []
        self._start = None

    # TrainerCallback hooks (duck-typed: the callback handler only calls methods that exist)
    def on_train_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.logs.append({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))})

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.times.append(now - self._start)
        self._start = now
        if self.capture:
            local = _train_frame(self.train_code).f_locals
            batch = {name: _cpu(local[name]) for name in BATCH_LOCALS if name in local}
            batch["context_length"] = int(local["context_length"])
            raw = [x for x, shift in self._whiten_inputs if shift]
            if raw:
                batch["raw_advantages"] = raw[-1]
            self.batches.append(batch)
        self.micro.append(self._micro)
        self.steps.append(len(self._norms))
        self.grad_norms.append(self._norms)
        self._micro, self._norms, self._whiten_inputs = [], [], []

    def __getattr__(self, name):  # every other callback event: nothing to do
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    # wrappers put around TRL's functions while it trains
    def backward(self, original):
        def recorded_backward(loss, **kwargs):
            local = _train_frame(self.train_code).f_locals
            with torch.no_grad():
                inds = local["micro_batch_inds"]
                stats = microbatch_stats(local["new_logprobs"], local["mb_logprobs"], local["logits"],
                                         local["padding_mask"][inds], local["padding_mask_p1"][inds], local["ratio"])
                vf_coef = local["args"].vf_coef
                stats.update(loss=float(loss), pg_loss=float(local["pg_loss"]), vf_loss=float(local["vf_loss"]),
                             pg_plus_vf=float(local["pg_loss"] + vf_coef * local["vf_loss"]))
                if self.capture:
                    stats["logprobs_diff"] = _cpu(local["logprobs_diff"])
                    stats["padding_mask"] = _cpu(local["padding_mask"][inds])
            self._micro.append(stats)
            return original(loss, **kwargs)

        return recorded_backward

    def before_optimizer_step(self, optimizer, args, kwargs):
        """A step pre-hook of the torch optimizer: it runs only on real steps (accelerate skips
        the inner step while accumulating) and sees the gradients the step will use."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self._norms.append(float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0)

    def whiten(self, original):
        def recorded_whiten(values, mask, shift_mean=True):
            if self.capture:
                self._whiten_inputs.append((_cpu(values), shift_mean))
            return original(values, mask, shift_mean)

        return recorded_whiten


def run_trl(config: PPOConfig, updates: int | None = None, capture: bool = True) -> dict:
    """Run ``updates`` PPO updates of TRL 1.12.0's PPOTrainer on ``config``, in this process.

    Returns a dict:

        metrics         TRL's log of each update (its own names: objective/kl, loss/policy_avg, ...)
        mapped          the same logs under our metric names (``map_trl_metrics``)
        batches         per update, TRL's tensors at the end of the update (``BATCH_LOCALS``, plus
                        ``raw_advantages`` before whitening and ``context_length``); [] if not capture
        microbatches    per update, per micro-batch: ``microbatch_stats`` + TRL's loss, pg_loss,
                        vf_loss (and, with capture, its logprobs_diff and padding mask)
        optimizer_steps real optimizer steps per update
        grad_norms      per update, the global gradient norm at each real step, before the step
        info            versions, settings TRL used, timings, memory
    Needs about 7 GB of memory on SmolLM2-135M (``run_in_child`` keeps it out of a notebook).
    """
    from datasets import Dataset
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding
    from transformers.utils import logging as hf_logging

    from course_utils.comparison import trl_adapter as ta
    from course_utils.machinery import hub
    from course_utils.device import seed_everything, set_threads

    trl = ta.require_trl()  # before importing trl.experimental.ppo, which later versions do not have
    from trl.experimental.ppo import PPOTrainer
    from trl.experimental.ppo import ppo_trainer as trl_ppo

    updates = updates or config.total_updates
    hf_logging.disable_progress_bar()
    threads = set_threads(config.threads or None)
    seed_everything(config.seed)
    folder = hub.resolve_model(config.model)
    tokenizer = ta.trl_tokenizer(folder)
    batches = prompt_batches(config, updates)
    records = [r for batch in batches for r in batch]
    prompt_ids = ta.trl_prompt_ids(tokenizer, [r.prompt for r in records])
    dataset = Dataset.from_dict({"input_ids": prompt_ids})  # token ids only: TRL pads this column itself
    policy, value_model, _ = ta.load_trl_models(folder, tokenizer, reward_model=False)
    reward = TextRewardModel(reward_function(config), tokenizer, records, prompt_ids)
    lora = ta.trl_lora_config(config.lora_rank, config.lora_alpha, config.lora_target_modules) \
        if config.lora_rank else None
    recorder = _Recorder(PPOTrainer.train.__code__, capture)

    def route_reward(original):  # TRL calls get_reward(model, ...) for the value and the reward model
        def get_reward(model, query_responses, pad_token_id, context_length):
            if isinstance(model, TextRewardModel):
                return model.trl_get_reward(query_responses, pad_token_id, context_length)
            return original(model, query_responses, pad_token_id, context_length)
        return get_reward

    setup: dict = {}
    start = time.perf_counter()

    def before_train(trainer):
        # Our prompt order, unshuffled (TRL's own loader shuffles with its seed).
        trainer.dataloader = DataLoader(dataset, batch_size=config.batch_size, shuffle=False,
                                        collate_fn=DataCollatorWithPadding(tokenizer), drop_last=True)
        trainer.accelerator.backward = recorder.backward(trainer.accelerator.backward)
        hook = trainer.optimizer.optimizer.register_step_pre_hook(recorder.before_optimizer_step)
        setup["trainable"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        setup["seconds"] = time.perf_counter() - start
        return hook.remove

    built = ta.train_trl(lambda workdir: trl_args_for(config, workdir, updates), tokenizer=tokenizer, policy=policy,
                         value_model=value_model, reward_model=reward, dataset=dataset, lora=lora,
                         callbacks=[recorder], before_train=before_train,
                         wrappers={"get_reward": route_reward, "masked_whiten": recorder.whiten})
    trainer, args = built["trainer"], built["args"]
    trainable, setup_s = setup["trainable"], setup["seconds"]

    if len(recorder.logs) != updates:
        raise RuntimeError(f"TRL logged {len(recorder.logs)} updates, expected {updates}")
    return {
        "side": "trl",
        "metrics": recorder.logs,
        "mapped": [map_trl_metrics(log) for log in recorder.logs],
        "batches": recorder.batches,
        "microbatches": recorder.micro,
        "optimizer_steps": recorder.steps,
        "grad_norms": recorder.grad_norms,
        "prompts": [[r.prompt for r in batch] for batch in batches],
        "info": {
            "trainer": f"trl.experimental.ppo.PPOTrainer (trl {trl.__version__})",
            "versions": package_versions(), "threads": threads, "updates": updates,
            "update_times_s": recorder.times, "setup_s": setup_s, "peak_rss_gb": _peak_rss_gb(),
            "trainable_parameters": int(trainable), "reward_calls": reward.calls,
            "pad_token": tokenizer.pad_token, "pad_token_id": tokenizer.pad_token_id,
            "eos_token": tokenizer.eos_token, "eos_token_id": tokenizer.eos_token_id,
            "stop_token_id": trainer.stop_token_id, "max_grad_norm": args.max_grad_norm, "vf_coef": args.vf_coef,
            "kl_coef": args.kl_coef, "gamma": args.gamma, "lam": args.lam, "kl_estimator": args.kl_estimator,
            "temperature": args.temperature, "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "num_mini_batches": args.num_mini_batches, "invalid_logprob": trl_ppo.INVALID_LOGPROB,
        },
    }


def run_ours(config: PPOConfig, updates: int | None = None) -> dict:
    """Run ``updates`` calls of our ``PPOTrainer.ppo_update()`` on ``config`` (no evaluation, no
    checkpoint), in this process. Returns ``{"side", "metrics", "prompts", "info"}`` with our
    trainer's metrics dict of each update."""
    from course_utils.device import set_threads
    from course_utils.trainer import PPOTrainer

    updates = updates or config.total_updates
    start = time.perf_counter()
    trainer = PPOTrainer(config, quiet=True)
    threads = set_threads(config.threads or None)
    setup_s = time.perf_counter() - start
    metrics, prompts, times = [], [], []
    for _ in range(updates):
        cursor = trainer.prompts.cursor
        prompts.append([r.prompt for r in trainer.prompts.next_batch()])
        trainer.prompts.cursor = cursor  # only peeked: ppo_update draws the same batch
        start = time.perf_counter()
        metrics.append(trainer.ppo_update())
        times.append(time.perf_counter() - start)
    return {
        "side": "ours",
        "metrics": metrics,
        "prompts": prompts,
        "info": {"trainer": "course_utils.trainer.PPOTrainer.ppo_update", "versions": package_versions(),
                 "threads": threads, "updates": updates, "update_times_s": times, "setup_s": setup_s,
                 "peak_rss_gb": _peak_rss_gb(), "trainable_parameters": int(sum(p.numel() for p in trainer.params)),
                 "max_grad_norm": config.max_grad_norm},
    }


def _peak_rss_gb() -> float:
    from course_utils.comparison.bench import ru_maxrss_gb

    return ru_maxrss_gb()


# ---------------------------------------------------------------------------------------------
# 4. Child processes: one trainer at a time, its memory returned when it ends
# ---------------------------------------------------------------------------------------------

RESULT_JSON, TENSORS_PT, LOG = "result.json", "tensors.pt", "log.txt"


def save_result(result: dict, out_dir: str | os.PathLike) -> Path:
    """Write a ``run_trl``/``run_ours`` result: numbers to ``result.json``, tensors to ``tensors.pt``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {"batches": result.get("batches", []),
               "microbatches": [[{k: v for k, v in mb.items() if torch.is_tensor(v)} for mb in update]
                                for update in result.get("microbatches", [])]}
    numbers = {k: v for k, v in result.items() if k != "batches"}
    if "microbatches" in result:
        numbers["microbatches"] = [[{k: v for k, v in mb.items() if not torch.is_tensor(v)} for mb in update]
                                   for update in result["microbatches"]]
    (out / RESULT_JSON).write_text(json.dumps(numbers, indent=1, default=str) + "\n")
    torch.save(tensors, out / TENSORS_PT)
    return out


def load_result(out_dir: str | os.PathLike) -> dict:
    """Read a result written by ``save_result`` (tensors merged back in)."""
    out = Path(out_dir)
    result = json.loads((out / RESULT_JSON).read_text())
    if (out / TENSORS_PT).is_file():
        tensors = torch.load(out / TENSORS_PT, weights_only=False)
        result["batches"] = tensors["batches"]
        for update, extra in zip(result.get("microbatches", []), tensors["microbatches"]):
            for mb, more in zip(update, extra):
                mb.update(more)
    return result


def run_in_child(side: str, config: PPOConfig, updates: int | None = None, out_dir: str | os.PathLike = None,
                 timeout: float | None = None, capture: bool = True) -> dict:
    """``run_trl`` or ``run_ours`` in a fresh Python process (``side`` = "trl" or "ours"); its result
    is saved in ``out_dir`` and returned (``info["child_wall_s"]`` adds the process's wall time).
    The process's memory (about 7 GB for TRL on SmolLM2-135M) is freed when it ends. Raises
    RuntimeError with the end of the child's log when it fails."""
    if side not in ("trl", "ours"):
        raise ValueError(f'side must be "trl" or "ours", got {side!r}')
    out = Path(out_dir or (ROOT / "runs" / f"week10-{side}"))
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_JSON).unlink(missing_ok=True)
    command = child.python_command("course_utils.comparison.trl_compare", "run", side, "--config-json",
                                   json.dumps(config.to_dict()), "--updates", updates or config.total_updates,
                                   "--out", out)
    if not capture:
        command.append("--no-capture")
    code, wall = child.run_child(command, out / LOG, threads=config.threads, timeout=timeout)
    if code != 0 or not (out / RESULT_JSON).is_file():
        tail = "\n".join(child.log_tail(out / LOG))
        raise RuntimeError(f"the {side} child exited with {code} after {wall:.0f} s; end of {out / LOG}:\n{tail}")
    result = load_result(out)
    result["info"]["child_wall_s"] = wall
    return result


# ---------------------------------------------------------------------------------------------
# 5. Metrics side by side
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricPair:
    """One TRL metric, our metric for the same idea, and how the two relate."""

    trl: str
    ours: str | None
    relation: str
    """"same": the same formula; "padding": TRL averages over padding positions too; "value mask":
    TRL's value mask is one position longer; "different": not the same quantity."""
    note: str


METRIC_PAIRS = (
    MetricPair("objective/scores", "score", "same", "mean reward score per response"),
    MetricPair("objective/non_score_reward", "non_score_reward", "same",
               "-β · KL summed over each response, averaged over responses"),
    MetricPair("objective/rlhf_reward", "shaped_reward", "same", "score + non-score reward per response"),
    MetricPair("objective/kl", "kl_per_sequence", "same", "KL estimate summed over each response, averaged"),
    MetricPair("loss/policy_avg", "policy_loss", "same", "clipped surrogate over real tokens, mean over steps"),
    MetricPair("policy/clipfrac_avg", "policy_clipfrac", "same", "share of real tokens where the clip was active"),
    MetricPair("loss/value_avg", "value_loss", "value mask",
               "TRL also fits the value at the position after the last real token, where its score sits"),
    MetricPair("val/clipfrac_avg", "value_clipfrac", "value mask", "over TRL's value mask (one position longer)"),
    MetricPair("policy/approxkl_avg", "approx_kl", "padding",
               "TRL: 0.5·(log r)² (k2) averaged over ALL positions; ours: k3 over real tokens"),
    MetricPair("val/ratio", "ratio_mean", "padding", "TRL counts each padding position as ratio 1"),
    MetricPair("policy/entropy_avg", "entropy", "padding",
               "TRL averages the next-token entropy over padding positions too"),
    MetricPair("val/ratio_var", "ratio_var", "different",
               "TRL: variance of the mean ratios of every (epoch, minibatch, micro-batch) of the update (NaN when "
               "there is only one); ours: of the token ratios"),
    MetricPair("objective/entropy", None, "different",
               "TRL: -log π(sampled token) summed over each response (a per-response number); no metric of ours"),
    MetricPair("val/num_eos_tokens", "eos_rate", "different",
               "TRL: EOS ids in the raw responses (repeated after a response ends); ours: share of responses "
               "that ended with EOS"),
    MetricPair("lr", "learning_rate", "same", "learning rate after the update"),
    MetricPair("episode", "episodes", "same", "episodes seen so far"),
)


def map_trl_metrics(log: dict) -> dict:
    """TRL's log of one update under our metric names (pairs with ``ours=None`` are left out)."""
    return {p.ours: float(log[p.trl]) for p in METRIC_PAIRS if p.ours is not None and p.trl in log}


def side_by_side(ours: list[dict], trl: list[dict], pairs=METRIC_PAIRS) -> list[dict]:
    """One row per metric pair: the per-update values of both trainers and their means.

    ``ours``: our trainer's metrics dicts; ``trl``: TRL's logs (its own names). Row keys:
    ``trl``, ``ours``, ``relation``, ``note``, ``trl_values``, ``our_values``, ``trl_mean``,
    ``our_mean`` (NaN where a side has no such metric or the values are not finite).
    """
    rows = []
    for p in pairs:
        trl_values = [float(log.get(p.trl, math.nan)) for log in trl]
        our_values = [float(m.get(p.ours, math.nan)) if p.ours else math.nan for m in ours]
        rows.append({"trl": p.trl, "ours": p.ours, "relation": p.relation, "note": p.note,
                     "trl_values": trl_values, "our_values": our_values,
                     "trl_mean": _finite_mean(trl_values), "our_mean": _finite_mean(our_values)})
    return rows


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def side_by_side_markdown(rows: list[dict]) -> str:
    """A Markdown table of ``side_by_side`` rows: means over the updates, relation, note."""
    lines = ["| TRL metric | TRL (mean) | ours | ours (mean) | relation | what differs |",
             "|---|---:|---|---:|---|---|"]
    for r in rows:
        lines.append(f"| `{r['trl']}` | {_fmt(r['trl_mean'])} | {('`' + r['ours'] + '`') if r['ours'] else '–'} | "
                     f"{_fmt(r['our_mean'])} | {r['relation']} | {r['note']} |")
    return "\n".join(lines)


RELATION_WORDS = {"same": "same formula", "value mask": "TRL's value mask is one longer",
                  "padding": "TRL also averages over padding", "different": "different quantities"}
"""How each ``MetricPair.relation`` reads in a panel title of ``plot_side_by_side``."""
PANEL_NOTES = {"policy/approxkl_avg": "TRL: k2 over all positions; ours: k3 over real tokens"}
"""A second line for panels whose two bars differ by more than the relation says."""
CENTRED_AT_ONE = ("val/ratio",)
"""Metrics near 1 by construction: drawn as value - 1, or every bar would look like 1.0."""


def plot_side_by_side(rows: list[dict], names: list[str] | None = None, ncols: int = 4) -> Figure:
    """Small multiples: one panel per metric pair (TRL names, or ``names``), the value after each
    update as a pair of bars, TRL and ours side by side, over integer update ticks. Bars, not lines:
    a handful of updates with nothing between them, and each trainer on its own samples (a line
    between two updates, or a crossing of the two, would suggest more than there is).

    Each panel's title names both metrics, TRL's first (``TRL name / our name``), and how they
    relate (``RELATION_WORDS``, ``PANEL_NOTES``). A ratio (``CENTRED_AT_ONE``) is drawn as
    ratio - 1, so that deviations of 1e-3 are visible. One legend for the figure, above the panels,
    so that no legend covers a bar. Returns a matplotlib Figure (nothing is drawn on pyplot's
    current figure)."""
    chosen = [r for r in rows if (names is None and r["ours"]) or (names is not None and r["trl"] in names)]
    if not chosen:
        raise ValueError(f"no metric pair to plot; names must be TRL metric names, e.g. {rows[0]['trl']!r}")
    ncols = min(ncols, len(chosen))
    nrows = math.ceil(len(chosen) / ncols)
    fig = Figure(figsize=(3.6 * ncols, 2.9 * nrows + 0.5))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    width = 0.38
    for ax, r in zip(axes, chosen):
        n_updates = max(len(r["trl_values"]), len(r["our_values"]))
        offset = 1.0 if r["trl"] in CENTRED_AT_ONE else 0.0
        for values, label, shift, color in ((r["trl_values"], "TRL", -width / 2, "C0"),
                                            (r["our_values"], "ours", width / 2, "C1")):
            if any(math.isfinite(v) for v in values):
                ax.bar([u + shift for u in range(1, len(values) + 1)], [v - offset for v in values], width,
                       label=label, color=color)
        ax.axhline(0, color="0.4", lw=0.6)
        ax.set_xticks(range(1, n_updates + 1))
        ax.margins(y=0.1)
        title = f"{r['trl']} / {r['ours'] or '(none of ours)'}"
        relation = RELATION_WORDS.get(r["relation"], r["relation"])
        note = "; ".join(([PANEL_NOTES[r["trl"]]] if r["trl"] in PANEL_NOTES else [])
                         + (["drawn as ratio − 1"] if offset else []))
        ax.set_title(title + f"\n({relation})" + (f"\n{note}" if note else ""), fontsize=8)
        if offset:
            ax.set_ylabel("ratio − 1", fontsize=8)
        ax.set_xlabel("update", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(chosen):]:
        ax.set_visible(False)
    handles = [matplotlib.patches.Patch(color="C0", label="TRL"), matplotlib.patches.Patch(color="C1", label="ours")]
    fig.legend(handles=handles, loc="upper center", ncol=2, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig


# ---------------------------------------------------------------------------------------------
# 6. The two conventions on one batch
# ---------------------------------------------------------------------------------------------


def trl_masks(responses: torch.Tensor, pad_token_id: int, stop_token_id: int | None) -> dict:
    """TRL's masks for ``responses [B, T]``, computed with TRL's own ``truncate_response`` and
    ``first_true_indices`` and the expressions of ``PPOTrainer.train``:

        post            = truncate_response(stop, pad, responses)   (when stop is not None)
        sequence_length = first_true_indices(post == pad) - 1        (last real index; -1 if none)
        padding_mask    = t > sequence_length                        (policy, KL, advantages)
        padding_mask_p1 = t > sequence_length + 1                    (value: one position longer)
        score_index     = sequence_length + 1 if it is < T, else sequence_length

    Returns those tensors (``padding_mask*`` True on padding). With pad == EOS the EOS itself
    is padding to TRL, so its mask is one shorter than ours and an EOS-only answer gets none.
    """
    from trl.experimental.ppo.ppo_trainer import truncate_response
    from trl.experimental.utils import first_true_indices

    post = responses if stop_token_id is None else truncate_response(stop_token_id, pad_token_id, responses)
    sequence_length = first_true_indices(post == pad_token_id) - 1
    t = torch.arange(responses.shape[1], device=responses.device).repeat(responses.shape[0], 1)
    p1 = sequence_length + 1
    return {"postprocessed": post, "sequence_length": sequence_length,
            "padding_mask": t > sequence_length[:, None], "padding_mask_p1": t > p1[:, None],
            "score_index": torch.where(p1 < responses.shape[1], p1, sequence_length)}


def trl_attention_mask(query_responses: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """The attention mask TRL's ``forward`` builds for a sequence (``ids != pad_token_id``),
    obtained by calling TRL's ``forward`` with a model that only records its arguments."""
    from trl.experimental.ppo.ppo_trainer import forward

    seen = {}

    def recorder(**kwargs):
        seen.update(kwargs)

    forward(recorder, query_responses, pad_token_id)
    return seen["attention_mask"]


def our_view_of_trl_batch(batch: dict, eos_token_id, kl_coef: float, gamma: float, lam: float,
                          kl_estimator: str = "k1") -> dict:
    """TRL's rollout tensors of one update, processed by OUR conventions (``course_utils.ppo_math``).

    From TRL's raw ``responses``, ``logprobs``/``ref_logprobs`` (``INVALID_LOGPROB`` at padding),
    ``values`` and ``scores``: our mask (1 up to and including the first EOS,
    ``rollout.response_mask_from_ids``), log-probs and values set to 0 outside it, the shaped
    rewards with the score ON the last real token (``ppo_math.shaped_rewards``), and GAE advantages
    and returns (``ppo_math.masked_gae``, V = 0 after the last real token). Returns
    ``{"mask", "last_index", "rewards", "advantages", "returns", "values"}``.
    """
    from course_utils.rollout import response_mask_from_ids

    mask, last, _, _ = response_mask_from_ids(batch["responses"], eos_token_id)
    real = mask.bool()
    zero = torch.zeros((), dtype=batch["logprobs"].dtype)
    logprobs = torch.where(real, batch["logprobs"], zero)
    ref = torch.where(real, batch["ref_logprobs"], zero)
    values = torch.where(real, batch["values"], zero)
    rewards = pm.shaped_rewards(batch["scores"], logprobs, ref, mask, kl_coef, kl_estimator)
    advantages, returns = pm.masked_gae(rewards, values, mask, gamma, lam)
    return {"mask": mask, "last_index": last, "rewards": rewards, "advantages": advantages,
            "returns": returns, "values": values}


def row_table(tokens: list[str], columns: dict, start: int = 0, stop: int | None = None, digits: int = 3) -> str:
    """A Markdown table with one row per position ``start..stop-1``: the token and each column's
    value there (a column is a 1-D tensor or list; booleans print as 1/0)."""
    stop = len(tokens) if stop is None else min(stop, len(tokens))
    header = "| t | token | " + " | ".join(columns) + " |"
    lines = [header, "|" + "---|" * (2 + len(columns))]
    for t in range(start, stop):
        cells = []
        for values in columns.values():
            v = values[t]
            v = v.item() if torch.is_tensor(v) else v
            cells.append(str(int(v)) if isinstance(v, bool) else f"{v:+.{digits}f}" if isinstance(v, float) else str(v))
        token = tokens[t].replace("|", "\\|").replace("\n", "\\n")
        lines.append(f"| {t} | `{token}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 7. Several processes: whitening and the whole loop under torchrun
# ---------------------------------------------------------------------------------------------


def _gloo_env(env: dict) -> dict:
    import socket

    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    loopback = next((n for n in ("lo", "lo0") if n in names), None)
    if loopback and "GLOO_SOCKET_IFNAME" not in env:
        env["GLOO_SOCKET_IFNAME"] = loopback
    return env


def whiten_on_processes(x: torch.Tensor, mask: torch.Tensor, world_size: int = 2, timeout: float = 300) -> dict:
    """Whiten ``x [B, T]`` over ``mask`` with its rows split across ``world_size`` gloo processes.

    Each process holds a contiguous block of rows (as each would hold its share of a batch) and
    calls our ``ppo_math.masked_whiten``, which all-reduces count, sum and sum of squares. For
    comparison, TRL's ``masked_whiten`` is applied to each block on its own, as TRL's
    PPOTrainer does on each process (it has no all-reduce), then zeroed at padding as TRL does.

    Returns ``{"one_process", "global", "local_trl", "parts"}``: whitening of the whole batch in
    one process, our processes' results stacked back, TRL's per-block results stacked, and the
    row blocks.
    """
    from trl.experimental.ppo.ppo_trainer import masked_whiten as trl_masked_whiten

    if x.shape != mask.shape or x.dim() != 2:
        raise ValueError(f"x and mask must both be [B, T]; got {tuple(x.shape)} and {tuple(mask.shape)}")
    if world_size < 1 or x.shape[0] < world_size:
        raise ValueError(f"need at least one row per process: {x.shape[0]} rows for {world_size} processes")
    bounds = np.linspace(0, x.shape[0], world_size + 1).round().astype(int).tolist()
    parts = [(bounds[i], bounds[i + 1]) for i in range(world_size)]
    with tempfile.TemporaryDirectory(prefix="whiten-") as tmp:
        tmp = Path(tmp)
        torch.save({"x": x, "mask": mask, "parts": parts}, tmp / "data.pt")
        port = free_port()
        env = _gloo_env(child.child_env(1))
        procs = [subprocess.Popen([sys.executable, "-m", "course_utils.comparison.trl_compare", "whiten-worker", str(rank),
                                   str(world_size), str(port), str(tmp / "data.pt"), str(tmp / f"out{rank}.pt")],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(world_size)]
        logs = []
        try:
            for proc in procs:
                logs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for proc in procs:
                proc.kill()
            raise RuntimeError(f"the {world_size} whitening processes did not finish within {timeout} s")
        for rank, (proc, log) in enumerate(zip(procs, logs)):
            if proc.returncode != 0:
                raise RuntimeError(f"whitening process {rank} failed:\n{log[-3000:]}")
        stacked = torch.cat([torch.load(tmp / f"out{rank}.pt") for rank in range(world_size)])
    local = torch.cat([trl_masked_whiten(x[a:b], mask[a:b].bool()) * mask[a:b] for a, b in parts])
    return {"one_process": pm.masked_whiten(x, mask, distributed=False), "global": stacked,
            "local_trl": local, "parts": parts}


def _whiten_worker(rank: int, world_size: int, port: int, data_path: str, out_path: str) -> None:
    """One process of ``whiten_on_processes``: join the gloo group, whiten its rows, save them."""
    from datetime import timedelta

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                         world_size=world_size, timeout=timedelta(seconds=120))
    try:
        data = torch.load(data_path)
        a, b = data["parts"][rank]
        torch.save(pm.masked_whiten(data["x"][a:b], data["mask"][a:b]), out_path)  # global: all-reduced
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def run_ppo_processes(processes: int, overrides: dict, config_path: str | os.PathLike | None = None,
                      timeout: float | None = None) -> dict:
    """Our whole loop (``python -m course_utils ppo``) on ``processes`` CPU processes with
    torchrun (gloo), or plainly for 1 process. ``overrides`` are ``--set`` fields (include
    ``run_name`` and ``output_dir``). Returns ``{"summary", "metrics", "evals", "wall_s", "command"}``
    read from the run folder; raises RuntimeError with the output's end when the run fails.
    """
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    config_path = str(config_path or ROOT / "configs" / "cpu.yaml")
    sets = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in overrides.items()]
    # --overwrite: the lesson's cell run again replaces its own earlier run of the same name.
    module = ["-m", "course_utils", "ppo", "--config", config_path, "--overwrite", "--set", *sets]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                   f"--master_port={free_port()}", *module]
    else:
        command = [sys.executable, *module]
    env = _gloo_env(child.child_env(overrides.get("threads") or 1))
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the {processes}-process run exited with {done.returncode}:\n{done.stderr[-3000:]}")
    from course_utils.config import load_config

    run_dir = load_config(config_path, **overrides).run_dir
    read = lambda name: [json.loads(line) for line in (run_dir / name).read_text().splitlines()]  # noqa: E731
    return {"summary": json.loads((run_dir / "summary.json").read_text()), "metrics": read("metrics.jsonl"), "evals": read("evals.jsonl"),
            "wall_s": wall, "command": " ".join(["python", *command[1:]])}


# ---------------------------------------------------------------------------------------------
# 8. Beyond one machine: what the four models weigh
# ---------------------------------------------------------------------------------------------

BYTES_TRAINED = 16
"""Bytes per parameter of a model trained with Adam in mixed precision: 2 (bf16 weights) + 2 (bf16
gradients) + 12 (fp32 master weights, Adam's m and v). Rajbhandari et al. (2020), the ZeRO paper."""
BYTES_FROZEN = 2
"""Bytes per parameter of a frozen model kept in bf16 (weights only)."""


def ppo_memory_gb(n_params: float, critic_params: float | None = None) -> dict:
    """Model-state memory of full-parameter PPO with four models of ``n_params`` parameters
    (critic: ``critic_params``, default the same), in GB = 1e9 bytes, activations and the KV
    cache not counted:

        policy    (trained)  16 · n       reference (frozen)  2 · n
        critic    (trained)  16 · n_c     reward    (frozen)  2 · n_c
    """
    n_c = n_params if critic_params is None else critic_params
    parts = {"policy": BYTES_TRAINED * n_params, "critic": BYTES_TRAINED * n_c,
             "reference": BYTES_FROZEN * n_params, "reward": BYTES_FROZEN * n_c}
    parts = {k: v / 1e9 for k, v in parts.items()}
    parts["total"] = sum(parts.values())
    return parts


# ---------------------------------------------------------------------------------------------
# Command line (used by run_in_child and whiten_on_processes)
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils.comparison.trl_compare",
                                     description="Run one side of lesson 10's comparison, or a whitening worker.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run TRL's or our trainer and save its result")
    run.add_argument("side", choices=("trl", "ours"))
    run.add_argument("--config-json", required=True, help="our PPOConfig as JSON (PPOConfig.to_dict())")
    run.add_argument("--updates", type=int, required=True)
    run.add_argument("--out", required=True, help="folder for result.json and tensors.pt")
    run.add_argument("--no-capture", action="store_true", help="TRL: keep the logs only, not the batch tensors")
    worker = sub.add_parser("whiten-worker", help=argparse.SUPPRESS)
    for name in ("rank", "world_size", "port"):
        worker.add_argument(name, type=int)
    worker.add_argument("data")
    worker.add_argument("out")
    args = parser.parse_args(argv)
    if args.command == "whiten-worker":
        _whiten_worker(args.rank, args.world_size, args.port, args.data, args.out)
        return
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    config = PPOConfig(**json.loads(args.config_json)).validate()
    if args.side == "trl":
        result = run_trl(config, args.updates, capture=not args.no_capture)
    else:
        result = run_ours(config, args.updates)
    save_result(result, args.out)
    print(f"[trl_compare] {args.side}: {args.updates} updates, result in {args.out}", flush=True)


if __name__ == "__main__":
    main()
