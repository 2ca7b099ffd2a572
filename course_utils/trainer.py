"""The PPO loop, written to be read next to the pseudocode of lesson 7.

One update does, in order:

    1. rollout      sample responses; old log-probs, values (policy) and reference log-probs
    2. score        raw reward per response (checker or reward model)
    3. shape        per-token reward = -beta * KL_t, plus the score on the last real token
    4. advantages   GAE over the real tokens, returns = A + V, then whiten A
    5. optimise     epochs x minibatches of  clipped policy loss + vf_coef * value loss - ent_coef * entropy
    6. bookkeeping  adapt beta, log metrics, check the stop rules, save a checkpoint

Every formula comes from ``ppo_math``; this file only wires them together. The loop runs the same
on one process or under ``torchrun`` (CPU: gloo), where whitening and metric means are global.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from course_utils import ppo_math as pm
from course_utils.config import PPOConfig, load_config
from course_utils.device import default_dtype, pick_device, seed_everything, set_threads

if TYPE_CHECKING:
    from course_utils.rollout import Rollout

CHECKPOINT = "checkpoint"
METRICS = "metrics.jsonl"


# ---------------------------------------------------------------------------------------------
# Prompts: a deterministic, resumable stream of training batches
# ---------------------------------------------------------------------------------------------


def balanced_subset(records: list, n: int) -> list:
    """The first ``n`` records taken round-robin across task families (sorted by name), so a
    small evaluation set still covers every task."""
    by_family: dict[str, list] = {}
    for record in records:
        by_family.setdefault(record.family, []).append(record)
    queues = [by_family[name] for name in sorted(by_family)]
    chosen, i = [], 0
    while len(chosen) < min(n, len(records)):
        queue = queues[i % len(queues)]
        taken = sum(1 for r in chosen if r.family == queue[0].family)
        if taken < len(queue):
            chosen.append(queue[taken])
        i += 1
    return chosen


class PromptStream:
    """Yields batches of prompt records; reshuffles every pass. ``cursor`` is the data position
    saved in checkpoints, so a resumed run sees exactly the prompts it would have seen."""

    def __init__(self, records: list, batch_size: int, seed: int, rank: int = 0, world_size: int = 1):
        if len(records) < batch_size:
            raise ValueError(f"{len(records)} prompts cannot fill a batch of {batch_size}; lower batch_size")
        self.records, self.batch_size, self.seed = records, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.cursor = 0  # batches handed out so far

    def _order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1000 + epoch)
        return torch.randperm(len(self.records), generator=generator).tolist()

    def next_batch(self) -> list:
        per_pass = len(self.records) // self.batch_size
        epoch, position = divmod(self.cursor, per_pass)
        order = self._order(epoch)[position * self.batch_size:(position + 1) * self.batch_size]
        self.cursor += 1
        # Under torchrun each process takes its share of the same global batch.
        return [self.records[i] for i in order[self.rank::self.world_size]]


# ---------------------------------------------------------------------------------------------
# Distributed helpers (no-ops on one process)
# ---------------------------------------------------------------------------------------------


def _dist_on() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def all_reduce_mean_(tensors: list[torch.Tensor]) -> None:
    """Average tensors (e.g. gradients) across processes, in place."""
    if not _dist_on():
        return
    world = torch.distributed.get_world_size()
    for t in tensors:
        torch.distributed.all_reduce(t)
        t.div_(world)


def params_in_sync(params: list[torch.Tensor]) -> bool:
    """True if every process holds the same weights (compares a checksum across processes)."""
    if not _dist_on():
        return True
    checksum = torch.stack([p.detach().double().sum() for p in params]).sum().reshape(1)
    low, high = checksum.clone(), checksum.clone()
    torch.distributed.all_reduce(low, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.all_reduce(high, op=torch.distributed.ReduceOp.MAX)
    return bool(low == high)


def all_processes_agree(flag: bool) -> bool:
    """True only if ``flag`` is true on every process, so all of them take the same branch
    (one process skipping a step that the others take would deadlock the gradient all-reduce)."""
    if not _dist_on():
        return flag
    t = torch.tensor([0.0 if flag else 1.0])
    torch.distributed.all_reduce(t)
    return bool(t.item() == 0)


def global_mean(value: float) -> float:
    """Mean of a per-process number over all processes (e.g. a minibatch loss)."""
    if not _dist_on():
        return value
    return global_sum([value])[0] / torch.distributed.get_world_size()


def global_sum(values: list[float]) -> list[float]:
    if not _dist_on():
        return values
    t = torch.tensor(values, dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return t.tolist()


# ---------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------


@dataclass
class StopSignal:
    """Why a run stopped early: the rule's name and the numbers that tripped it."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


STEP_STATS = ("policy_loss", "value_loss", "entropy", "policy_clipfrac", "value_clipfrac", "approx_kl",
              "ratio_mean", "ratio_var", "ratio_max", "grad_norm")
"""Statistics of one optimizer step, logged as their mean over the steps of an update."""


@dataclass
class PreparedBatch:
    """Steps 1-4 of an update: one rollout batch and what the optimisation needs from it.

    Shapes (B episodes, T response columns): ``raw_scores [B]`` (the reward before any
    whitening); ``kl_per_token``, ``rewards``, ``raw_advantages``, ``advantages`` (whitened if the
    config says so: what the policy loss uses), ``returns`` (value targets) are ``[B, T]`` and 0
    outside ``rollout.response_mask``. ``kl_coef`` is the β the rewards were shaped with;
    ``timings`` holds ``rollout_s`` and ``advantage_s`` in seconds.
    """

    records: list
    rollout: "Rollout"
    raw_scores: torch.Tensor
    kl_coef: float
    kl_per_token: torch.Tensor
    rewards: torch.Tensor
    raw_advantages: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    timings: dict

    def __len__(self) -> int:
        return len(self.records)


class PPOTrainer:
    """Runs PPO from a :class:`PPOConfig`.

    ``callbacks`` are functions ``callback(trainer, metrics: dict)`` called after every update
    (the notebooks pass a live plot). ``bundle`` may be given to reuse loaded models.
    """

    def __init__(self, config: PPOConfig, bundle=None, callbacks=(), quiet: bool = False):
        from course_utils import models, tasks

        self.config = config.validate()
        self.callbacks = list(callbacks)
        self.quiet = quiet
        self.rank = torch.distributed.get_rank() if _dist_on() else 0
        self.world_size = torch.distributed.get_world_size() if _dist_on() else 1
        set_threads(config.threads or None)  # 0: $COURSE_THREADS, else the cores (at most 8)
        seed_everything(config.seed)
        self.device = pick_device(config.device)
        if config.old_logprobs_from == "generation" and bundle is None and default_dtype(self.device) != torch.float32:
            # Refused here, before any model loads, rather than at the first rollout.
            raise ValueError(
                f"old_logprobs_from='generation' needs float32 weights, but on {self.device} the models load in "
                f"{default_dtype(self.device)}. Use the preset for this device (configs/cuda.yaml) or add "
                "--set old_logprobs_from=forward (or device=cpu)."
            )
        self.run_dir = config.run_dir
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)

        self.bundle = bundle or models.load_bundle(
            model=config.model,
            lora=models.LoRASettings(rank=config.lora_rank, alpha=config.lora_alpha,
                                     target_modules=tuple(config.lora_target_modules)) if config.lora_rank else None,
            reward=self.make_reward(),
            device=self.device, seed=config.seed,
        )
        self.policy = self.bundle.policy
        if self.world_size > 1:
            # Same initial weights on every process (seeded above), different samples per process.
            seed_everything(config.seed + 1000 * self.rank)
        self.params = self.policy.trainable_parameters()
        self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        total = config.total_updates
        if config.lr_schedule == "linear":
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda u: max(0.0, 1 - u / total))
        else:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda u: 1.0)
        self.kl_controller = (pm.AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
                              if config.adaptive_kl else pm.FixedKLController(config.kl_coef))

        families = set(config.task_families)
        train = [r for r in tasks.load_split(config.train_split) if not families or r.family in families]
        self.eval_records = balanced_subset(
            [r for r in tasks.load_split(config.eval_split) if not families or r.family in families],
            config.eval_prompts)
        self.sample_records = balanced_subset(self.eval_records, config.num_sample_prompts)
        self.prompts = PromptStream(train, config.batch_size, config.seed, self.rank, self.world_size)

        self.update = 0
        self.history: list[dict] = []
        self.evals: list[dict] = []
        self.nonfinite_streak = 0
        self.clipfrac_streak = 0
        self.hacking_streak = 0
        self.stop: StopSignal | None = None

    # ------------------------------------------------------------------ set-up helpers

    def make_reward(self):
        """The reward function named by ``config.reward`` (checker, learned model or the toy)."""
        from course_utils import models

        if self.config.reward == "learned":
            return models.LearnedReward.from_folder(self.config.reward_model_path, device=self.device)
        if self.config.reward == "letters":
            return models.LetterFractionReward()
        kind = "binary" if self.config.reward == "checker_binary" else "partial"
        return models.CheckerReward(kind=kind)

    def sampling(self, greedy: bool = False):
        from course_utils.rollout import SamplingSettings

        return SamplingSettings(temperature=self.config.temperature, top_k=0, top_p=1.0,
                                max_new_tokens=self.config.max_new_tokens, do_sample=not greedy)

    def log(self, message: str) -> None:
        if self.rank == 0 and not self.quiet:
            from tqdm.auto import tqdm

            tqdm.write(message)

    # ------------------------------------------------------------------ one update

    def prepare_batch(self, records: list | None = None) -> "PreparedBatch":
        """Steps 1-4 on one batch of prompts (the next batch of the prompt stream when ``records``
        is None): sample, score, shape, advantages. Nothing is trained; the policy sampling the
        batch is the "old" policy π_old that every later ratio compares with."""
        from course_utils.rollout import collect_rollout

        cfg = self.config
        t_start = time.perf_counter()

        # 1. rollout: responses, old log-probs and values, reference log-probs (no gradients)
        records = self.prompts.next_batch() if records is None else list(records)
        rollout = collect_rollout(self.bundle, [r.prompt for r in records], self.sampling(), records=records,
                                  old_logprobs_from=cfg.old_logprobs_from)
        mask = rollout.response_mask
        t_rollout = time.perf_counter()

        # 2. score each response (raw reward-model / checker score, one number per sequence)
        scores = self.bundle.reward.score(rollout.prompts, rollout.response_texts, records).to(mask.device)
        if 0 <= cfg.inject_nan_reward_at <= self.update:
            scores = torch.full_like(scores, float("nan"))
        raw_scores = scores.clone()
        if cfg.whiten_rewards:
            ones = torch.ones_like(scores)
            scores = pm.masked_whiten(scores[:, None], ones[:, None], shift_mean=False)[:, 0]

        # 3. shaped per-token rewards: KL penalty on every token + the score on the last one
        kl_coef = self.kl_controller.value
        kl_per_token = pm.kl_estimate(rollout.old_logprobs, rollout.ref_logprobs, cfg.kl_estimator, mask=mask)
        rewards = pm.shaped_rewards(scores, rollout.old_logprobs, rollout.ref_logprobs, mask, kl_coef,
                                    cfg.kl_estimator)

        # 4. advantages by GAE, returns as value targets, whitened advantages for the policy loss
        advantages, returns = pm.masked_gae(rewards, rollout.values, mask, cfg.gamma, cfg.lam)
        raw_advantages = advantages
        if cfg.whiten_advantages:
            advantages = pm.masked_whiten(advantages, mask)
        t_advantage = time.perf_counter()
        return PreparedBatch(records=records, rollout=rollout, raw_scores=raw_scores, kl_coef=kl_coef,
                             kl_per_token=kl_per_token, rewards=rewards, raw_advantages=raw_advantages,
                             advantages=advantages, returns=returns,
                             timings={"rollout_s": t_rollout - t_start, "advantage_s": t_advantage - t_rollout})

    def minibatch_step(self, batch: "PreparedBatch", idx: torch.Tensor) -> dict | None:
        """One optimizer step on the rows ``idx`` of ``batch`` (step 5's inner body):

            loss = clipped policy loss + vf_coef * clipped value loss - ent_coef * entropy

        Returns this step's statistics (floats; the ratio statistics are measured on the forward
        that produced the gradient, i.e. *before* the step), or None when the step was skipped
        because the loss or the gradient was not finite (the weights are left untouched)."""
        from course_utils.rollout import sequence_forward

        cfg = self.config
        mb = batch.rollout.select(idx)
        logprobs, values, logits = sequence_forward(
            self.policy, mb.query_ids, mb.query_mask, mb.response_ids, mb.response_mask, cfg.temperature)
        m = mb.response_mask  # never all zero: every response has at least one token
        pg_loss, pg_clipfrac = pm.clipped_surrogate(logprobs, mb.old_logprobs, batch.advantages[idx], m,
                                                    cfg.cliprange)
        vf_loss, vf_clipfrac = pm.clipped_value_loss(values, mb.values, batch.returns[idx], m,
                                                     cfg.cliprange_value)
        # Without an entropy bonus the entropy is only logged: keep it out of the graph (its
        # backward through a softmax over the whole vocabulary would cost ~5% of the step).
        with torch.no_grad() if cfg.ent_coef == 0 else nullcontext():
            entropy = pm.masked_entropy(logits, m, temperature=cfg.temperature)
        loss = pg_loss + cfg.vf_coef * vf_loss - cfg.ent_coef * entropy

        self.optimizer.zero_grad(set_to_none=True)
        if not all_processes_agree(bool(torch.isfinite(loss))):
            return None  # never step on a NaN/inf loss: the weights stay good
        loss.backward()
        all_reduce_mean_([p.grad for p in self.params if p.grad is not None])
        if cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in self.params if p.grad is not None])
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer.step()
        with torch.no_grad():
            ratio = pm.ratio_stats(logprobs, mb.old_logprobs, m)
            return {key: float(value) for key, value in (
                ("policy_loss", pg_loss), ("value_loss", vf_loss), ("entropy", entropy),
                ("policy_clipfrac", pg_clipfrac), ("value_clipfrac", vf_clipfrac),
                ("approx_kl", pm.approx_kl(logprobs, mb.old_logprobs, m)),
                ("ratio_mean", ratio["mean"]), ("ratio_var", ratio["var"]),
                ("ratio_max", ratio["max"]), ("grad_norm", grad_norm))}

    def optimise(self, batch: "PreparedBatch", epochs: int | None = None, max_rollout_age: int | None = None,
                 after_epoch=None) -> dict:
        """Step 5: ``epochs`` passes (default ``ppo_epochs``) over the same batch, each in
        ``num_minibatches`` shuffled minibatches, one ``minibatch_step`` per minibatch.

        Rollout age: before the k-th step (k = 0, 1, ...) the policy has already taken k steps
        away from π_old, so the batch is k steps old. A step is skipped once more than
        ``max_rollout_age`` (default: the config's) steps were taken on the batch: the rest of
        the batch is stale. ``after_epoch(epoch, counts)`` is called after each pass (epoch
        counted from 1) with the running counts; it may measure the policy but must not change it.

        Returns ``{"stats": {name: [one float per step taken]}, "optimizer_steps",
        "stale_steps_skipped", "nonfinite_steps"}``.
        """
        cfg = self.config
        epochs = cfg.ppo_epochs if epochs is None else epochs
        max_age = cfg.max_rollout_age if max_rollout_age is None else max_rollout_age
        stats: dict[str, list[float]] = {k: [] for k in STEP_STATS}
        counts = {"optimizer_steps": 0, "stale_steps_skipped": 0, "nonfinite_steps": 0}
        size = len(batch)
        minibatch = max(1, size // cfg.num_minibatches)
        self.policy.train()
        for epoch in range(epochs):
            order = torch.randperm(size)
            for start in range(0, size, minibatch):
                if counts["optimizer_steps"] + counts["stale_steps_skipped"] > max_age:
                    counts["stale_steps_skipped"] += 1  # the rollout is too old for the current policy: skip
                    continue
                step = self.minibatch_step(batch, order[start:start + minibatch])
                if step is None:
                    counts["nonfinite_steps"] += 1
                    continue
                counts["optimizer_steps"] += 1
                for key, value in step.items():
                    stats[key].append(value)
            if after_epoch is not None:
                after_epoch(epoch + 1, dict(counts))
        return {"stats": stats, **counts}

    def ppo_update(self) -> dict:
        """Steps 1-6 of the module docstring on one batch. Returns the metrics of this update."""
        cfg = self.config
        t_start = time.perf_counter()
        prepared = self.prepare_batch()  # steps 1-4
        t_advantage = time.perf_counter()
        records, rollout, mask = prepared.records, prepared.rollout, prepared.rollout.response_mask
        raw_scores, kl_coef, kl_per_token = prepared.raw_scores, prepared.kl_coef, prepared.kl_per_token
        rewards, raw_advantages, returns = prepared.rewards, prepared.raw_advantages, prepared.returns

        # 5. optimise: epochs x minibatches over the same rollout
        result = self.optimise(prepared)
        stats = result["stats"]
        optimizer_steps, stale_skipped = result["optimizer_steps"], result["stale_steps_skipped"]
        nonfinite_steps = result["nonfinite_steps"]
        batch = len(records)
        self.scheduler.step()
        t_train = time.perf_counter()

        # 6. bookkeeping: beta, metrics
        seq_kl = (kl_per_token * mask).sum(1)
        lengths = mask.sum(1)
        n_seq, n_tok = global_sum([float(batch), float(mask.sum())])
        mean_seq_kl = global_sum([float(seq_kl.sum())])[0] / n_seq
        self.kl_controller.update(mean_seq_kl, int(n_seq))
        non_score = pm.kl_penalty_rewards(rollout.old_logprobs, rollout.ref_logprobs, mask, kl_coef,
                                          cfg.kl_estimator).sum(1)  # the reward that is not the score
        adv_mean, adv_var = pm.global_masked_mean_var(raw_advantages, mask, unbiased=False)
        scalar = lambda xs: global_mean(float(np.mean(xs)) if xs else float("nan"))  # noqa: E731
        metrics = {
            "update": self.update + 1,
            "episodes": int((self.update + 1) * cfg.batch_size),
            # reward side
            "score": global_sum([float(raw_scores.sum())])[0] / n_seq,
            "non_score_reward": global_sum([float(non_score.sum())])[0] / n_seq,
            "shaped_reward": global_sum([float((rewards * mask).sum())])[0] / n_seq,
            "kl_per_sequence": mean_seq_kl,
            "kl_per_token": global_sum([float((kl_per_token * mask).sum())])[0] / max(n_tok, 1),
            "kl_coef": kl_coef,
            # policy and value
            **{k: scalar(v) for k, v in stats.items()},
            "explained_variance": global_mean(_finite_or_nan(pm.explained_variance(rollout.values, returns, mask))),
            "advantage_mean": float(adv_mean),
            "advantage_std": float(adv_var.sqrt()),
            "value_mean": float(pm.global_masked_mean_var(rollout.values, mask, unbiased=False)[0]),
            # responses
            "response_length": global_sum([float(lengths.sum())])[0] / n_seq,
            "eos_rate": global_sum([float(rollout.ended_with_eos.sum())])[0] / n_seq,
            "truncation_rate": global_sum([float(rollout.truncated.sum())])[0] / n_seq,
            "padding_fraction": 1.0 - n_tok / global_sum([float(mask.numel())])[0],
            "world_size": self.world_size,
            # health
            "nonfinite_steps": nonfinite_steps,  # already the same on every process
            "nonfinite_scores": int(global_sum([float((~torch.isfinite(raw_scores)).sum())])[0]),
            "optimizer_steps": optimizer_steps,
            "stale_steps_skipped": stale_skipped,
            "policy_lag_max": max(0, optimizer_steps - 1),
            "learning_rate": self.scheduler.get_last_lr()[0],
            # speed
            "time_rollout_s": prepared.timings["rollout_s"],
            "time_advantage_s": prepared.timings["advantage_s"],
            "time_train_s": t_train - t_advantage,
            "time_update_s": t_train - t_start,
            "rollout_tokens_per_s": n_tok / max(prepared.timings["rollout_s"], 1e-9),
            "train_tokens_per_s": n_tok * cfg.ppo_epochs / max(t_train - t_advantage, 1e-9),
        }
        for key, value in getattr(rollout, "timings", {}).items():
            metrics[f"time_{key}"] = value
        return metrics

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Greedy answers to the held-out prompts: checker pass rate overall and per task, mean
        reward, and the answers to the fixed sample prompts."""
        from course_utils import tasks
        from course_utils.rollout import decode_responses, generate

        self.policy.eval()
        records = self.eval_records
        answers: list[str] = []
        chunk = 32
        for i in range(0, len(records), chunk):
            part = records[i:i + chunk]
            result = generate(self.bundle, prompts=[r.prompt for r in part], settings=self.sampling(greedy=True))
            answers.extend(decode_responses(self.bundle.tokenizer, result.response_ids, result.response_mask))
        passed = [tasks.check(r, a).passed for r, a in zip(records, answers)]
        rewards = self.bundle.reward.score([r.prompt for r in records], answers, records)
        per_task: dict[str, list[bool]] = {}
        for record, ok in zip(records, passed):
            per_task.setdefault(record.family, []).append(ok)
        sample_ids = {r.id for r in self.sample_records}
        result = {
            "update": self.update,
            "pass_rate": float(np.mean(passed)),
            "pass_rate_per_task": {k: float(np.mean(v)) for k, v in sorted(per_task.items())},
            "mean_reward": float(rewards.float().mean()),
            "samples": [{"id": r.id, "family": r.family, "prompt": r.prompt, "answer": a, "passed": ok}
                        for r, a, ok in zip(records, answers, passed) if r.id in sample_ids],
            "answers": answers,  # every held-out answer, in the order of eval_records (for the report)
        }
        self.policy.train()
        return result

    # ------------------------------------------------------------------ stop rules

    def check_stop_rules(self, m: dict) -> StopSignal | None:
        """Return the first rule this update broke (with its numbers), or None."""
        cfg = self.config
        self.nonfinite_streak = self.nonfinite_streak + 1 if (m["nonfinite_steps"] or m["nonfinite_scores"]) else 0
        if self.nonfinite_streak >= cfg.stop_nonfinite_patience:
            return StopSignal("nonfinite", f"{self.nonfinite_streak} updates in a row had non-finite values "
                              f"(scores: {m['nonfinite_scores']}, skipped steps: {m['nonfinite_steps']})")
        if self.nonfinite_streak:
            return None  # the other statistics of this update are not meaningful
        if m["value_loss"] > cfg.stop_max_value_loss:
            return StopSignal("value_divergence", f"value loss {m['value_loss']:.3g} > {cfg.stop_max_value_loss}")
        if m["kl_per_sequence"] > cfg.stop_max_kl:
            return StopSignal("kl_too_high", f"KL per response {m['kl_per_sequence']:.3g} nats > {cfg.stop_max_kl}")
        if not cfg.stop_min_entropy <= m["entropy"] <= cfg.stop_max_entropy:
            return StopSignal("entropy_out_of_range", f"entropy {m['entropy']:.3g} outside "
                              f"[{cfg.stop_min_entropy}, {cfg.stop_max_entropy}]")
        if m["response_length"] < cfg.stop_min_length:
            return StopSignal("length_collapse", f"mean response length {m['response_length']:.2f} tokens "
                              f"< {cfg.stop_min_length}")
        self.clipfrac_streak = self.clipfrac_streak + 1 if m["policy_clipfrac"] > cfg.stop_max_clipfrac else 0
        if self.clipfrac_streak >= cfg.stop_clipfrac_patience:
            return StopSignal("clipfrac_too_high", f"policy clip fraction {m['policy_clipfrac']:.2f} > "
                              f"{cfg.stop_max_clipfrac} for {self.clipfrac_streak} updates")
        return None

    def check_hacking(self) -> StopSignal | None:
        """Reward up while the held-out pass rate does not improve: the reward is being gamed."""
        cfg = self.config
        if cfg.stop_hacking_patience <= 0 or len(self.evals) < 2:
            return None
        best_before = max(e["pass_rate"] for e in self.evals[:-1])
        recent = [h["score"] for h in self.history[-cfg.eval_every:]]
        early = [h["score"] for h in self.history[:cfg.eval_every]]
        reward_rose = np.mean(recent) > np.mean(early)
        self.hacking_streak = self.hacking_streak + 1 if reward_rose and self.evals[-1]["pass_rate"] <= best_before else 0
        if self.hacking_streak >= cfg.stop_hacking_patience:
            return StopSignal("reward_without_heldout_gain",
                              f"training score rose {np.mean(early):.3f} -> {np.mean(recent):.3f} but held-out pass "
                              f"rate {self.evals[-1]['pass_rate']:.2f} has not beaten {best_before:.2f} "
                              f"for {self.hacking_streak} evaluations")
        return None

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        return {
            "update": self.update,
            "trainable": {n: p.detach().clone() for n, p in self.policy.named_parameters() if p.requires_grad},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "kl_controller": self.kl_controller.state_dict(),
            "data_cursor": self.prompts.cursor,
            "history": self.history,
            "evals": self.evals,
            "streaks": (self.nonfinite_streak, self.clipfrac_streak, self.hacking_streak),
            "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state()},
            "config": self.config.to_dict(),
        }

    def save_checkpoint(self) -> Path:
        """Write ``checkpoint/`` atomically: into a temporary folder, then rename over the old one.
        Only updates that passed every stop rule are saved, so this is the last-known-good state."""
        if self.rank != 0:
            return self.run_dir / CHECKPOINT
        final = self.run_dir / CHECKPOINT
        tmp = self.run_dir / f".{CHECKPOINT}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(self.state_dict(), tmp / "state.pt")
        (tmp / "meta.json").write_text(json.dumps({"update": self.update}) + "\n")
        old = self.run_dir / f".{CHECKPOINT}.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        return final

    def load_checkpoint(self, folder: Path | None = None) -> bool:
        folder = Path(folder or self.run_dir / CHECKPOINT)
        if not (folder / "state.pt").is_file():
            old = self.run_dir / f".{CHECKPOINT}.old"  # killed between the two renames
            if (old / "state.pt").is_file():
                folder = old
            else:
                return False
        self.load_state_dict(torch.load(folder / "state.pt", weights_only=False))
        return True

    def load_state_dict(self, state: dict) -> None:
        """Put back what ``state_dict()`` saved: trainable weights, optimizer, scheduler, β,
        data position, logs, stop-rule streaks and the random-number generators."""
        params = dict(self.policy.named_parameters())
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.kl_controller.load_state_dict(state["kl_controller"])
        self.prompts.cursor = state["data_cursor"]
        self.update = state["update"]
        self.history, self.evals = state["history"], state["evals"]
        self.nonfinite_streak, self.clipfrac_streak, self.hacking_streak = state["streaks"]
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])

    # ------------------------------------------------------------------ the run

    def _write_jsonl(self, name: str, rows: list[dict]) -> None:
        if self.rank == 0:
            with open(self.run_dir / name, "w") as f:
                for row in rows:
                    f.write(json.dumps(row) + "\n")

    def training_seconds(self) -> float:
        """Wall time of the updates so far (evaluations and checkpoints excluded); survives a resume."""
        return float(sum(h.get("time_update_s", 0.0) for h in self.history))

    def budget_spent(self) -> bool:
        """True once ``max_train_minutes`` of training time are used up (never, when it is 0)."""
        budget = self.config.max_train_minutes
        return budget > 0 and self.training_seconds() >= 60 * budget

    def train(self, resume: bool = False) -> dict:
        """Run until ``total_updates`` or a stop rule; write metrics, checkpoints and the report."""
        from tqdm.auto import tqdm

        from course_utils.machinery import report

        cfg = self.config
        if resume and self.load_checkpoint():
            self.log(f"resumed from update {self.update}")
        if self.rank == 0:
            (self.run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
            (self.run_dir / "manifest.json").write_text(json.dumps(self.bundle.manifest, indent=2, default=str) + "\n")
        self._write_jsonl(METRICS, self.history)  # drops lines past the checkpoint after a kill
        if not self.evals:
            self.evals.append(self.evaluate())
            self._write_jsonl("evals.jsonl", self.evals)
            self.log(f"held-out pass rate before training: {self.evals[0]['pass_rate']:.2%}")

        bar = tqdm(total=cfg.total_updates, initial=self.update, desc="PPO updates", disable=self.rank != 0 or self.quiet)
        while self.update < cfg.total_updates and self.stop is None and not self.budget_spent():
            metrics = self.ppo_update()
            self.update += 1
            self.stop = self.check_stop_rules(metrics)
            if self.stop is not None:
                metrics["stop"] = str(self.stop)
            self.history.append(metrics)
            last = self.update == cfg.total_updates or self.budget_spent()
            if self.stop is None and (self.update % cfg.eval_every == 0 or last):
                self.evals.append(self.evaluate())
                self._write_jsonl("evals.jsonl", self.evals)
                self.stop = self.check_hacking()
            self._write_jsonl(METRICS, self.history)
            bar.update(1)
            budget = {"trained": f"{self.training_seconds() / 60:.1f}/{cfg.max_train_minutes:g} min"} \
                if cfg.max_train_minutes else {}  # with a budget, the bar's own ETA (by updates) is an upper bound
            bar.set_postfix(score=f"{metrics['score']:.3f}", kl=f"{metrics['kl_per_sequence']:.2f}",
                            len=f"{metrics['response_length']:.1f}", **budget)
            for callback in self.callbacks:
                callback(self, metrics)
            # Only a healthy update may overwrite the checkpoint: it stays the last-known-good state.
            healthy = self.stop is None and not (metrics["nonfinite_steps"] or metrics["nonfinite_scores"])
            if healthy and (self.update % cfg.save_every == 0 or last):
                self.save_checkpoint()
        bar.close()
        if self.stop is not None:
            self.log(f"stopped: {self.stop} (last good checkpoint kept in {self.run_dir / CHECKPOINT})")
        finished = None
        if self.stop is None and self.budget_spent():
            finished = (f"training-time budget of {cfg.max_train_minutes:g} min spent after {self.update} updates "
                        f"({self.training_seconds() / 60:.1f} min)")
            self.log(finished)
        summary = {"updates": self.update, "stop": str(self.stop) if self.stop else None, "finished": finished,
                   "training_minutes": self.training_seconds() / 60,
                   "pass_rate_before": self.evals[0]["pass_rate"], "pass_rate_after": self.evals[-1]["pass_rate"],
                   "world_size": self.world_size, "ranks_in_sync": params_in_sync(self.params)}
        if "answers" in self.evals[0] and "answers" in self.evals[-1]:
            from course_utils.lesson_aids.diagnostics import task_outcomes

            summary["task_outcomes"] = task_outcomes(self.eval_records, self.evals[0]["answers"],
                                                     self.evals[-1]["answers"])
        if self.rank == 0:
            self.save_adapter()
            report.write_report(self.run_dir, cfg, self.history, self.evals, summary, self.bundle.manifest)
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def save_adapter(self) -> None:
        """Save the trained weights (the LoRA adapter, or the full model) and the value head."""
        self.policy.lm.save_pretrained(self.run_dir / "policy")
        torch.save(self.policy.value_head.state_dict(), self.run_dir / "policy" / "value_head.pt")


def _finite_or_nan(x: torch.Tensor) -> float:
    value = float(x)
    return value if math.isfinite(value) else float("nan")


# ---------------------------------------------------------------------------------------------
# Command line: python -m course_utils ppo --config configs/cpu.yaml
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m course_utils ppo", description="Run PPO headless.")
    parser.add_argument("--config", default="configs/cpu.yaml", help="a preset in configs/ (YAML)")
    parser.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="override config fields, e.g. --set total_updates=5 seed=1")
    args = parser.parse_args(argv)
    import yaml

    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    config = load_config(args.config, **overrides)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        torch.distributed.init_process_group("gloo")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # let finally-blocks run on `kill`
    try:
        summary = PPOTrainer(config).train(resume=args.resume)
    finally:
        if distributed:
            torch.distributed.destroy_process_group()
    print(json.dumps(summary, indent=2))
    return summary
