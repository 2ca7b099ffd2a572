"""The SFT warm-up: a short LoRA fine-tune on gold answers, the first stage of RLHF.

PPO can only re-weight what the policy already samples: a task the model never answers right
gives PPO nothing to reinforce (the signal per prompt scales with p(1 - p)). So the pipeline
starts with supervised fine-tuning on demonstrations, sized as a warm-up that leaves PPO room:

    demonstrations   (prompt, gold answer) of the TRAIN split only, shuffled
    loss             -mean log π(answer token | prompt, answer so far) over the response mask:
                     the same mask as PPO's (answer tokens and the EOS, never the prompt)
    output           the LoRA update folded into the weights and saved as a model folder; PPO
                     loads it as its starting policy AND as its reference (a fresh PPO adapter on
                     top, switched off for the reference), so the KL anchor is the SFT model

``python -m course_utils sft`` runs it and writes ``runs/<run_name>/`` with ``model/``, ``report.md``,
``metrics.json`` and ``loss.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from tqdm.auto import tqdm

from course_utils import models, tasks
from course_utils import ppo_math as pm
from course_utils.config import AUTO_SWITCHES, field_docs
from course_utils.device import pick_device, seed_everything, set_threads
from course_utils.machinery import hub, safe_files
from course_utils.rewards import NoisyJudge
from course_utils.rollout import (ANSWER_CHUNK, greedy_answers, response_mask_from_ids, sampled_answers,
                                  sequence_forward, stop_token_ids, tokenize_prompts)


@dataclass
class SFTConfig:
    run_name: str = "sft-cpu"
    """Name of the run; its outputs go to ``<output_dir>/<run_name>/`` (the model in ``model/``)."""
    output_dir: str = "runs"
    """Folder holding one sub-folder per run."""
    model: str = "smollm2-135m-instruct"
    """The model to warm up: a preset name, a hub id or a local folder."""
    demos: int = 200
    """How many train-split demonstrations to learn from, in one pass (a warm-up, not convergence).
    0: none, the model's own passing answers only (needs ``self_samples`` and ``max_train_minutes``)."""
    demo_families: list = field(default_factory=list)
    """Task families that have demonstrations (empty: all). The others get none: SFT never sees
    them, though they are still evaluated (the "tasks no demonstration covers" design of lesson 11)."""
    demo_noise: float = 0.0
    """Share of the demonstrations replaced by a labeler's mistake (``noisy_teacher``), in [0, 1]:
    the "noisy teacher" design of lesson 11. 0: every demonstration is gold."""
    demo_noise_style: str = "habit"
    """How the noisy labelers err: "habit" (one mistake per family, always the same) or "mixed"."""
    demo_filter: bool = False
    """Keep only the demonstrations whose answer passes the checker (filtered SFT)."""
    self_samples: int = 0
    """Filtered SFT on the model's own answers (rejection sampling): every ``resample_every`` steps,
    sample this many answers (temperature 1) to each train prompt that has no demonstration and
    add the distinct ones the checker passes to the data. 0: off. Sampling time counts against
    ``max_train_minutes``."""
    resample_every: int = 25
    """SFT steps between two rounds of self-sampling (with ``self_samples`` > 0)."""
    self_sample_families: list = field(default_factory=list)
    """Self-sample only the train prompts of these families (empty: every train prompt without a
    demonstration). Lesson 11's design 2 trains on its two families' prompts only."""
    self_sample_pool: str = "cumulative"
    """"cumulative": every accepted answer stays in the data for good; "fresh": each round's accepted
    answers replace the previous round's (a round that accepts none keeps them, so training never
    runs out of data). The demonstrations always stay."""
    checker_noise: float = 0.0
    """Self-sampling's checks go through a judge that passes a wrong answer with this probability,
    independently per check and seeded by ``seed`` (``rewards.NoisyJudge``, the one PPO's
    ``checker_noise`` uses; lesson 11's design 2). Evaluation stays strict. 0: the checker itself."""
    accept_checks: int = 1
    """An answer joins the data only after passing this many checks in a row (each a judge call;
    the first failure ends them): re-checking against a noisy judge."""
    init_pool: str = ""
    """A ``pool.jsonl`` that an earlier filtered-SFT run saved: continue that run's data instead of
    building it anew. Its demonstrations and accepted self-samples are the data from the first
    step, its self-sampled answers count as already kept, and self-sampling works on the same
    prompts (those without a demonstration in the pool). Lesson 11's "filtered SFT continued"
    arm. Empty: the demonstrations of ``demos``, ``demo_noise`` and ``demo_filter``."""
    epochs: int = 1
    """Passes over the demonstrations (an upper bound when ``max_train_minutes`` is set)."""
    max_train_minutes: float = 0.0
    """Stop after the step that spends this many training minutes (0: no budget). With all 400
    demonstrations and many epochs this is the control arm "SFT for the whole budget"."""
    batch_size: int = 8
    """Demonstrations per optimizer step."""
    learning_rate: float = 2e-4
    """Adam learning rate of the LoRA matrices."""
    lora_rank: int = 16
    """LoRA rank (on every projection); folded into the weights at the end."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    eval_every: int = 0
    """Also evaluate (greedy, ``eval_split``, per family) every this many SFT steps, for a learning
    curve in metrics.json's ``curve``; its time is not counted as training time. 0: before and after only."""
    eval_at_minutes: list = field(default_factory=list)
    """Also evaluate greedily on ``eval_split`` and its unseen phrasings (per family) at the first step
    after each of these training minutes, into metrics.json's ``checkpoints`` (lesson 11's learning
    curves over a budget; not training time). Empty: none."""
    save_adapter: bool = False
    """Also save the LoRA matrices, unmerged and float32, in ``adapter/`` (about 20 MB for the default
    model, against 540 MB for ``model/``): with the base model they rebuild ``model/``
    (``merged_from_adapter``) where the merged folder cannot be kept."""
    eval_split: str = "test"
    """Held-out split for the pass rate before and after (the same one PPO reports on)."""
    eval_prompts: int = 100
    """Held-out prompts evaluated before and after (balanced over the task families)."""
    max_new_tokens: int = 16
    """Longest greedy answer in the evaluation."""
    # Declared bool like PPOConfig's: "auto" is resolved by machinery.calibration before evaluating.
    packed_cpu_linears: bool = "auto"
    """The evaluations' greedy answers through oneDNN-packed weights (true), PyTorch's default kernels
    (false), or whichever is faster on this machine (auto: measured once, as a PPO run does)."""
    decode_loop: bool = "auto"
    """The evaluations' greedy answers with the library's decode loop (true), transformers'
    ``generate`` (false), or whichever is faster on this machine (auto)."""
    seed: int = 0
    """Seeds the shuffling of the demonstrations and the LoRA initialisation."""
    threads: int = 0
    """torch CPU threads; 0: $COURSE_THREADS or the number of cores (at most 8)."""
    device: str = "cpu"
    """Where to train ("auto" picks cuda, then mps, then cpu)."""

    def validate(self) -> "SFTConfig":
        problems = [message for ok, message in (
            (self.demos >= 1 or (self.demos == 0 and self.self_samples > 0 and self.max_train_minutes > 0),
             f"demos must be >= 1, or 0 with self_samples > 0 and a max_train_minutes budget (the model's own "
             f"answers only), got {self.demos}"),
            (self.self_sample_pool in ("cumulative", "fresh"),
             f"self_sample_pool must be cumulative or fresh, got {self.self_sample_pool!r}"),
            (0 <= self.checker_noise < 1, f"checker_noise is a probability in [0, 1), got {self.checker_noise}"),
            (self.accept_checks >= 1, f"accept_checks must be >= 1 check per accepted answer, got {self.accept_checks}"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}"),
            (self.max_train_minutes >= 0, f"max_train_minutes must be >= 0 (0 = no budget), got {self.max_train_minutes}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}"),
            (self.lora_rank >= 1, f"lora_rank must be >= 1 (the warm-up is a LoRA fine-tune), got {self.lora_rank}"),
            (0.0 <= self.demo_noise <= 1.0, f"demo_noise is a share of the demonstrations, in [0, 1]; got {self.demo_noise}"),
            (self.demo_noise_style in ("habit", "mixed"),
             f"demo_noise_style must be habit or mixed, got {self.demo_noise_style!r}"),
            (self.self_samples >= 0, f"self_samples must be >= 0 (0 = no self-sampling), got {self.self_samples}"),
            (self.resample_every >= 1, f"resample_every must be >= 1 SFT step, got {self.resample_every}"),
            (not self.init_pool or Path(self.init_pool).is_file(),
             f"init_pool {self.init_pool!r} is not a file: give the pool.jsonl of an earlier filtered-SFT run"),
            (self.eval_every >= 0, f"eval_every must be >= 0 SFT steps (0 = before and after only), got {self.eval_every}"),
            (all(isinstance(m, (int, float)) and m > 0 for m in self.eval_at_minutes),
             f"eval_at_minutes must hold training minutes > 0, got {self.eval_at_minutes}"),
            (self.eval_split != "train", "eval_split must be a held-out split (validation or test), not train"),
            (self.eval_split in (*tasks.SPLITS, tasks.UNSEEN_SPLIT),
             f"eval_split must be one of {[*tasks.SPLITS, tasks.UNSEEN_SPLIT]}, got {self.eval_split!r}"),
            (self.eval_prompts >= 1, f"eval_prompts must be >= 1 (the pass rate of no prompt is undefined), "
                                     f"got {self.eval_prompts}"),
            (self.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {self.max_new_tokens}"),
            *((isinstance(getattr(self, name), bool) or getattr(self, name) == "auto",
               f"{name} must be true, false or auto, got {getattr(self, name)!r}") for name in AUTO_SWITCHES),
            (not set(self.demo_families) - set(tasks.TASK_FAMILIES),
             f"demo_families has unknown families {sorted(set(self.demo_families) - set(tasks.TASK_FAMILIES))}; "
             f"choose from {', '.join(tasks.TASK_FAMILIES)}"),
        ) if not ok]
        if problems:
            raise ValueError("Invalid SFT config: " + "; ".join(problems) + ".")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name


def demonstrations(n: int, seed: int, families=()) -> list[tasks.Prompt]:
    """``n`` train-split records (of ``families`` only, if given), shuffled with ``seed`` (never
    validation or test)."""
    records = [r for r in tasks.load_split("train") if not families or r.family in families]
    random.Random(seed).shuffle(records)
    if not records:
        which = f" of {', '.join(families)}" if families else ""
        raise ValueError(f"the train split has no prompts{which}: regenerate data/ with `python -m course_utils data`")
    if n > len(records):
        which = f" of {', '.join(families)}" if families else ""
        raise ValueError(f"demos={n} but the train split has {len(records)} prompts{which}; use at most {len(records)}")
    return records[:n]


def teacher_demonstrations(config: SFTConfig) -> list[tasks.Prompt]:
    """The SFT data a config asks for: ``demonstrations``, then the noisy teacher's mistakes
    (``demo_noise``), then the checker's filter (``demo_filter``), in that order."""
    from course_utils import noisy_teacher

    if config.demos == 0:  # the model's own answers only (validate: self-sampling under a budget)
        return []
    demos = demonstrations(config.demos, config.seed, config.demo_families)
    if config.demo_noise:
        demos = noisy_teacher.noisy_demonstrations(demos, config.demo_noise, config.demo_noise_style, config.seed)
    if config.demo_filter:
        demos = noisy_teacher.passing_only(demos)
    if not demos:
        raise ValueError("no demonstration is left after the filter: lower demo_noise or drop demo_filter")
    return demos


POOL_FILE = "pool.jsonl"
"""Where ``train_sft`` saves its data (the demonstrations and accepted self-samples), in the run folder."""


def read_pool(path: str | Path) -> tuple[list[tasks.Prompt], list[tasks.Prompt]]:
    """``(demonstrations, self_samples)`` of a ``pool.jsonl``, each in the file's order."""
    path = Path(path)
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(tasks.Prompt.from_dict(json.loads(line)))
            except (ValueError, TypeError, KeyError, AttributeError) as error:
                raise ValueError(f"{path}, line {number}: not a pool record ({error}); give the pool.jsonl "
                                 "that a filtered-SFT run saved") from None
    demos = [r for r in records if not r.meta.get("self_sample")]
    if not demos:
        raise ValueError(f"{path} holds no demonstration: give the pool.jsonl that a filtered-SFT run saved")
    return demos, [r for r in records if r.meta.get("self_sample")]


def kept_answers(self_samples: list) -> dict[str, set[str]]:
    """The answers already kept per prompt id, as ``passing_self_samples`` tracks them."""
    kept: dict[str, set[str]] = {}
    for record in self_samples:
        kept.setdefault(record.id, set()).add(record.target)
    return kept


def prompts_without_demonstration(demos: list, families=()) -> list[tasks.Prompt]:
    """The train prompts that no record of ``demos`` answers (of ``families`` only, if given):
    what self-sampling works on."""
    taught = {r.id for r in demos}
    return [r for r in tasks.load_split("train") if r.id not in taught and (not families or r.family in families)]


def passing_self_samples(bundle, records: list, samples: int, max_new_tokens: int, seed: int,
                         kept: dict[str, set[str]], judge=None, accept_checks: int = 1) -> list[tasks.Prompt]:
    """Rejection sampling: ``samples`` answers (temperature 1) to each of ``records``; keep the ones
    that pass ``accept_checks`` checks in a row and that ``kept[record.id]`` does not hold yet
    (distinct answers only, so a prompt the model already answers does not flood the data). The
    checks are ``judge.passes`` (a ``rewards.NoisyJudge``, which counts them) or, without a
    judge, the strict checker. Returns new SFT records (target = the kept answer,
    ``meta["self_sample"] = True``) and adds their answers to ``kept``."""
    from dataclasses import replace

    def passes(record, answer: str) -> bool:
        return judge.passes(record, answer) if judge is not None else tasks.check(record, answer).passed

    groups = sampled_answers(bundle, [r.prompt for r in records], samples, max_new_tokens, 1.0, seed=seed)
    accepted = []
    for record, answers in zip(records, groups):
        for answer in answers:
            if answer not in kept.get(record.id, ()) and all(passes(record, answer) for _ in range(accept_checks)):
                kept.setdefault(record.id, set()).add(answer)
                accepted.append(replace(record, target=answer, meta={**record.meta, "self_sample": True}))
    return accepted


def training_batches(data: list, batch_size: int, seed: int, epochs: int):
    """``(epoch, batch)`` over ``data``: the first pass in the given order, each later pass
    reshuffled. ``data`` may grow between passes (self-sampling appends to it): a new record joins
    at the next pass."""
    for epoch in range(epochs):
        order = list(data) if epoch == 0 else random.Random(f"{seed}-{epoch}").sample(data, len(data))
        for i in range(0, len(order), batch_size):
            yield epoch, order[i:i + batch_size]


def demo_batch(tokenizer, records: list, eos_id: int, device) -> dict[str, torch.Tensor]:
    """Prompts (chat template, left padded) and gold answers + EOS (right padded with the pad id),
    with the response mask of PPO: 1 on the answer tokens up to and including the EOS."""
    query_ids, query_mask = tokenize_prompts(tokenizer, [r.prompt for r in records])
    answers = [tokenizer(r.target, add_special_tokens=False)["input_ids"] + [eos_id] for r in records]
    width = max(map(len, answers))
    response_ids = torch.full((len(answers), width), tokenizer.pad_token_id, dtype=torch.long)
    for row, ids in enumerate(answers):
        response_ids[row, :len(ids)] = torch.tensor(ids)
    mask = response_mask_from_ids(response_ids, eos_id)[0]
    return {"query_ids": query_ids.to(device), "query_mask": query_mask.to(device),
            "response_ids": response_ids.to(device), "response_mask": mask.to(device)}


def sft_loss(policy, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Negative log-likelihood of the gold answers, averaged over the response tokens:

        loss = -masked_mean(log π(a_t | s_t), response_mask)

    Shapes: the batch's ``[B, Lq]`` prompts and ``[B, T]`` answers -> a scalar."""
    logprobs, _, _ = sequence_forward(policy, batch["query_ids"], batch["query_mask"], batch["response_ids"],
                                      batch["response_mask"], temperature=1.0)
    return -pm.masked_mean(logprobs, batch["response_mask"])


def pass_rates(bundle, records: list, max_new_tokens: int, packed: bool = True, decode_loop: bool = True) -> dict:
    """Greedy held-out answers: strict checker pass rate overall and per task family (``packed``
    and ``decode_loop``: the CPU fast paths, as in ``rollout.generate``)."""
    answers = greedy_answers(bundle, [r.prompt for r in records], max_new_tokens, packed=packed,
                             decode_loop=decode_loop)
    passed = [tasks.check(r, a).passed for r, a in zip(records, answers)]
    per_family: dict[str, list[bool]] = {}
    for record, ok in zip(records, passed):
        per_family.setdefault(record.family, []).append(ok)
    return {"pass_rate": float(np.mean(passed)),
            "per_family": {k: float(np.mean(v)) for k, v in sorted(per_family.items())}, "answers": answers}


def evaluation_fast_paths(config: SFTConfig, bundle, records: list) -> tuple[SFTConfig, dict]:
    """The config with its evaluations' CPU fast paths decided, and the record of how
    (``machinery.calibration.resolve``: "auto" is measured once on this machine, for greedy answers
    of ``ANSWER_CHUNK`` rows and no other forward, then cached; true/false are kept)."""
    from course_utils.machinery import calibration

    asked = SimpleNamespace(**{name: getattr(config, name) for name in AUTO_SWITCHES}, sampling_dtype="float32",
                            model=config.model, max_new_tokens=config.max_new_tokens)
    record = calibration.resolve(asked, bundle, [r.prompt for r in records[:ANSWER_CHUNK]], forwards=0)
    return replace(config, **{name: record["chosen"][name] for name in AUTO_SWITCHES}), record


def eval_switches(config: SFTConfig) -> dict:
    """``pass_rates``' fast-path arguments from a config whose switches are decided."""
    return {"packed": config.packed_cpu_linears, "decode_loop": config.decode_loop}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c passed (Chen et al. 2021):

        pass@k = 1 - C(n - c, k) / C(n, k)      (the chance that k of the n samples include a pass)

    With k = n it is 1 if any sample passed; with k = 1 it is c / n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sampled_pass_rates(bundle, records: list, samples: int = 16, max_new_tokens: int = 16,
                       temperature: float = 1.0, seed: int = 0, progress: bool = False) -> dict:
    """pass@1 and pass@``samples`` of answers sampled at ``temperature``, overall and per family:
    pass@1 is what the policy does on average, pass@k what it can do at all. RL on the policy's
    own samples can move pass@1 towards pass@k, but a family with pass@k = 0 gives it nothing."""
    answers = sampled_answers(bundle, [r.prompt for r in records], samples, max_new_tokens, temperature,
                              seed=seed, progress=progress)
    per_family: dict[str, list[tuple[float, float]]] = {}
    for record, group in zip(records, answers):
        c = sum(tasks.check(record, a).passed for a in group)
        per_family.setdefault(record.family, []).append((pass_at_k(samples, c, 1), pass_at_k(samples, c, samples)))
    every = [pair for pairs in per_family.values() for pair in pairs]
    return {"k": samples, "temperature": temperature,
            "pass_at_1": float(np.mean([a for a, _ in every])), "pass_at_k": float(np.mean([b for _, b in every])),
            "per_family": {f: {"pass_at_1": float(np.mean([a for a, _ in v])), "pass_at_k": float(np.mean([b for _, b in v]))}
                           for f, v in sorted(per_family.items())}}


def held_out_records(config: SFTConfig, split: str | None = None) -> list:
    """The held-out prompts ``train_sft`` evaluates on ``split`` (default ``config.eval_split``), in the order of
    its metrics' ``answers``: the first ``eval_prompts`` taken round-robin across families."""
    from course_utils.trainer import balanced_subset
    return balanced_subset(tasks.load_split(split or config.eval_split), config.eval_prompts)


SFT_OUTPUTS = ("model", "adapter", POOL_FILE,  # "adapter": ADAPTER_DIR, defined below
               "report.md", "loss.png", "metrics.json")
"""What ``train_sft`` writes into its run folder; any other entry there is the learner's and stays."""
SFT_IGNORES = ("run_name", "output_dir", "threads", "device", *AUTO_SWITCHES)
"""Settings that decide how fast a warm-up runs, not what it trains: a finished one read back may differ in them."""


def train_sft(config: SFTConfig, progress: bool = True, if_exists: str = "keep") -> dict:
    """Warm up ``config.model`` on demonstrations; save the merged model; return the metrics
    (``before``/``after``: the pass rates on ``eval_split`` and on its unseen phrasings).

    A warm-up already in ``config.run_dir`` (a notebook cell run again): ``if_exists="keep"``, the
    default, reads a finished one back (its metrics.json; nothing is trained) when it was made
    with these settings, and refuses in one line otherwise; "overwrite" trains anew. The new run is
    written into a folder beside the run folder and put in its place as a whole at the end
    (``safe_files.swap_in``): Ctrl-C or a full disk before that leave the earlier warm-up whole,
    never its model beside a new report. Ctrl-C ends in ``safe_files.Interrupted`` whose message
    names a notebook's way on (``main`` names the command's); its ``saved`` says whether the new
    model was in place."""
    if if_exists not in ("keep", "overwrite"):
        raise ValueError(f"if_exists must be keep or overwrite; got {if_exists!r}")
    config.validate()
    model_dir, staging = config.run_dir / "model", None
    if if_exists == "keep" and complete_model(model_dir):
        return read_finished_sft(config)
    had_model = complete_model(model_dir)
    try:
        bundle, metrics, data = warm_up(config, progress)
        staging = Path(tempfile.mkdtemp(prefix=f".{config.run_name}.partial-", dir=config.run_dir.parent))
        staging.chmod(0o755)  # mkdtemp's 0o700 would follow the folder into place
        write_sft_outputs(staging, bundle, config, metrics, data)
        safe_files.swap_in(staging, config.run_dir, SFT_OUTPUTS)
    except KeyboardInterrupt:
        saved = staging is not None and not staging.exists()  # renamed into place: the new run is there
        interrupted = safe_files.Interrupted(
            f"interrupted after the new SFT model was saved in {model_dir}; nothing to rerun: PPO can start from it"
            if saved else
            f"interrupted: the SFT warm-up keeps no checkpoint, and {model_dir} is as it was before this run"
            + ("" if had_model else " (there was none)") + ". Run this cell again to train it"
            + (' (with if_exists="overwrite": the earlier warm-up is kept otherwise)' if had_model else ""))
        interrupted.saved = saved
        raise interrupted from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return metrics


def read_finished_sft(config: SFTConfig) -> dict:
    """The metrics of the finished warm-up in ``config.run_dir`` (its metrics.json), read back instead
    of training again; refused in one line, with the ways on, when they are missing or were made
    with other settings than ``config`` (``SFT_IGNORES`` aside)."""
    run_dir, again = config.run_dir, 'train it again with sft.train_sft(config, if_exists="overwrite")'
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{run_dir / 'model'} holds an SFT model, but {run_dir / 'metrics.json'} is missing or "
                         f"unreadable, so there is nothing to read back: {again}, or use the model as it is "
                         "(sft.warm_start(config) returns its folder)") from None
    wanted, saved = asdict(config), metrics.get("config", {})
    changes = {name: (saved[name], value) for name, value in wanted.items()
               if name in saved and saved[name] != value and name not in SFT_IGNORES}
    if changes:
        listed = ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changes.items())
        raise ValueError(f"{run_dir} holds an SFT warm-up made with other settings ({listed}): {again} (the earlier "
                         "one stays until the new one is saved), or give this run another run_name")
    print(f"{run_dir} already holds this SFT warm-up: its metrics are read back and nothing is trained. To train "
          'it again: sft.train_sft(config, if_exists="overwrite")')
    return metrics


def warm_up(config: SFTConfig, progress: bool) -> tuple:
    """The warm-up itself, in memory: ``(bundle, metrics, data)``: the trained bundle, the metrics
    and the records trained on."""
    threads = set_threads(config.threads or None)
    seed_everything(config.seed)
    device = pick_device(config.device)
    # The data and the output folder are checked before the model loads.
    demos, earlier = read_pool(config.init_pool) if config.init_pool else (teacher_demonstrations(config), [])
    safe_files.check_writable(config.run_dir, "choose another --output-dir")
    safe_files.check_free_space(config.run_dir, weights_bytes(config.model), "the SFT model",
                                "free some space or choose another --output-dir")
    lora = models.LoRASettings(rank=config.lora_rank, alpha=config.lora_alpha)
    bundle = models.load_bundle(config.model, lora=lora, device=device, seed=config.seed)
    policy, tokenizer = bundle.policy, bundle.tokenizer
    eos_id = stop_token_ids(tokenizer, policy.base_model)[0]
    held_out = {name: held_out_records(config, name)
                for name in (config.eval_split, tasks.UNSEEN_SPLIT)}  # the same prompts, asked anew
    config, fast_paths = evaluation_fast_paths(config, bundle, held_out[config.eval_split])
    before = {name: pass_rates(bundle, records, config.max_new_tokens, **eval_switches(config))
              for name, records in held_out.items()}

    run = sft_steps(bundle, demos, config, eos_id, device, held_out[config.eval_split], progress, earlier)
    after = {name: pass_rates(bundle, records, config.max_new_tokens, **eval_switches(config))
             for name, records in held_out.items()}
    losses = run["loss"]
    metrics = {"config": asdict(config), "demos": len(demos), "steps": len(losses), "train_seconds": run["seconds"],
               "epochs_done": len(losses) * config.batch_size / len(demos) if demos else None,
               "threads": threads, "loss": losses, "before": before, "after": after, "fast_paths": fast_paths}
    if config.eval_every:
        metrics["curve"] = run["curve"]
    if config.demo_noise:
        metrics["noisy_demos"] = sum("noise" in r.meta for r in demos)  # the ones SFT trained on
    if config.demo_filter:
        metrics["demos_dropped_by_filter"] = config.demos - len(demos)
    if config.self_samples:
        metrics["self_sample_rounds"] = run["rounds"]
    if config.init_pool:
        metrics["init_pool"] = {"demos": len(demos), "self_samples": len(earlier)}
    metrics["pool"] = len(run["data"])
    if config.eval_at_minutes:
        metrics["checkpoints"] = run["checkpoints"]
    return bundle, metrics, run["data"]


def write_sft_outputs(folder: Path, bundle, config: SFTConfig, metrics: dict, data: list) -> None:
    """Everything a warm-up keeps, into ``folder``: the merged model, the adapter (``save_adapter``),
    the data pool, and the report with its metrics.json."""
    from course_utils.machinery import report

    if config.save_adapter:
        save_adapter(bundle, folder / ADAPTER_DIR)
    save_merged(bundle, folder / "model")
    safe_files.write_jsonl(folder / POOL_FILE, [r.to_dict() for r in data])
    report.write_sft_report(folder, metrics)


def sft_steps(bundle, demos: list, config: SFTConfig, eos_id: int, device, held_out: list, progress: bool,
              earlier: list = ()) -> dict:
    """The SFT loop: batches of ``demos`` and ``earlier`` self-samples (growing with self-sampling)
    until ``epochs`` or the budget. Returns ``loss`` (per step), ``seconds`` (training time: the steps
    and self-sampling, not the curve's evaluations), ``rounds`` (self-sampling), ``curve`` (with
    ``eval_every``: per-family greedy pass rates on ``held_out`` every ``eval_every`` steps) and
    ``data`` (the records trained on, the pool that ``pool.jsonl`` saves)."""
    policy, tokenizer = bundle.policy, bundle.tokenizer
    data = [*demos, *earlier]  # grows with self-sampling
    untaught = prompts_without_demonstration(demos, config.self_sample_families) if config.self_samples else []
    kept = kept_answers(earlier)
    judge = NoisyJudge(config.checker_noise, seed=config.seed)  # epsilon 0: the strict checker, calls counted
    rounds, curve = [], []
    lora_params = [p for n, p in policy.lm.named_parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(lora_params, lr=config.learning_rate)
    marks, checkpoints = sorted(config.eval_at_minutes), []
    losses, start = [], time.perf_counter()
    steps = config.epochs * -(-len(demos) // config.batch_size)
    policy.train()
    budget = config.max_train_minutes * 60 or float("inf")
    # Under a time budget (or a growing data set) the number of steps is not known in advance.
    total = None if config.max_train_minutes or config.self_samples else steps
    # No demonstrations (demos=0): the first data is a round of the model's own answers, sampled
    # again until one passes or the budget is spent (sampling time is training time).
    while untaught and not data and time.perf_counter() - start < budget:
        rounds.append(self_sample_round(bundle, untaught, data, kept, config, step=0, judge=judge))
    if not data:
        raise ValueError(f"no self-sampled answer passed the checks in {len(rounds)} round(s) of "
                         f"{config.max_train_minutes:g} training minutes: nothing to train on. Raise self_samples, "
                         "or give demonstrations (demos)")
    with tqdm(total=total, desc="SFT steps", disable=not progress) as bar:
        for _epoch, batch in training_batches(data, config.batch_size, config.seed, config.epochs):
            if losses and time.perf_counter() - start >= budget:
                break  # the budget is spent: stop after the step that spent it
            loss = sft_loss(policy, demo_batch(tokenizer, batch, eos_id, device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", data=len(data))
            if untaught and len(losses) % config.resample_every == 0:
                rounds.append(self_sample_round(bundle, untaught, data, kept, config, step=len(losses), judge=judge))
                policy.train()
            if config.eval_every and len(losses) % config.eval_every == 0:
                paused = time.perf_counter()  # evaluations are not training time (as in PPO)
                curve.append({"step": len(losses), "train_seconds": paused - start,
                              "per_family": pass_rates(bundle, held_out, config.max_new_tokens,
                                                       **eval_switches(config))["per_family"]})
                start += time.perf_counter() - paused
                policy.train()
            while marks and time.perf_counter() - start >= marks[0] * 60:
                paused = time.perf_counter()
                checkpoints.append({"minutes": marks.pop(0), "step": len(losses), "train_seconds": paused - start,
                                    **held_out_pass_rates(bundle, config)})
                start += time.perf_counter() - paused
                policy.train()
    return {"loss": losses, "seconds": time.perf_counter() - start, "rounds": rounds, "curve": curve, "data": data,
            "checkpoints": checkpoints}


def held_out_pass_rates(bundle, config: SFTConfig) -> dict:
    """Greedy pass rates, overall and per family, on ``eval_split`` and on its unseen phrasings."""
    bundle.policy.eval()
    return {name: {k: v for k, v in pass_rates(bundle, held_out_records(config, name), config.max_new_tokens,
                                               **eval_switches(config)).items() if k != "answers"}
            for name in (config.eval_split, tasks.UNSEEN_SPLIT)}


def self_sample_round(bundle, untaught: list, data: list, kept: dict, config: SFTConfig, step: int,
                      judge=None) -> dict:
    """One round of filtered SFT's self-sampling: add the accepted new answers to ``data`` (after
    the earlier ones, or in their place with ``self_sample_pool`` "fresh"); return what the round
    did (for ``metrics.json``): among it ``judge_calls`` (the checks made) and ``accepted_wrong``
    (accepted answers the strict checker fails: a noisy judge's lucky passes)."""
    t0 = time.perf_counter()
    fresh = config.self_sample_pool == "fresh"
    calls_before = judge.calls if judge is not None else 0
    bundle.policy.eval()
    with torch.no_grad():
        new = passing_self_samples(bundle, untaught, config.self_samples, config.max_new_tokens,
                                   seed=config.seed * 100_003 + step, kept={} if fresh else kept, judge=judge,
                                   accept_checks=config.accept_checks)
    if fresh and new:  # the latest round's answers only; an empty round keeps the pool it had
        data[:] = [r for r in data if not r.meta.get("self_sample")]
    data.extend(new)
    per_family: dict[str, int] = {}
    for record in new:
        per_family[record.family] = per_family.get(record.family, 0) + 1
    return {"step": step, "sampled": len(untaught) * config.self_samples, "accepted": len(new), "pool": len(data),
            "per_family": dict(sorted(per_family.items())),
            "judge_calls": (judge.calls if judge is not None else 0) - calls_before,
            "accepted_wrong": sum(not tasks.check(r, r.target).passed for r in new),
            "seconds": time.perf_counter() - t0}


def weights_bytes(model: str) -> int:
    """Bytes of ``model``'s weight files: about what ``save_merged`` writes (float32, LoRA folded in)."""
    folder = hub.resolve_model(model)
    return sum(f.stat().st_size for pattern in hub.WEIGHT_PATTERNS for f in folder.glob(pattern))


def complete_model(folder: Path) -> bool:
    """True when ``folder`` holds a whole model: its config.json and its weights. A config alone
    is what a save cut short (a full disk) leaves; PPO would fail on it much later."""
    return (folder / "config.json").is_file() and hub.has_weights(folder)


def warm_start(config: SFTConfig, progress: bool = True) -> Path:
    """PPO's starting model, ``<output_dir>/<run_name>/model``: kept if that folder already holds
    a complete model (lesson 6a or ``make sft`` wrote it), trained first by ``train_sft`` if not."""
    folder = config.run_dir / "model"
    if not complete_model(folder):
        found = "an incomplete model (no weights)" if folder.exists() else "no SFT model"
        print(f"Found {found} in {folder}: training the warm-up first ({config.demos} demonstrations).")
        train_sft(config, progress=progress)
    return folder


ADAPTER_DIR = "adapter"
"""Where ``save_adapter`` puts the unmerged LoRA matrices, in the run folder."""


def save_adapter(bundle, folder: Path) -> Path:
    """The LoRA matrices alone (peft's adapter folder, float32), written beside and renamed into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    tmp.chmod(0o755)
    try:
        bundle.policy.lm.save_pretrained(tmp)
        safe_files.replace_folder(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def merged_from_adapter(base: str, adapter: Path, folder: Path) -> Path:
    """Rebuild a saved SFT model folder from the base model and the run's ``adapter/``: the adapter's
    LoRA matrices folded into ``base``'s weights (W + (alpha / r) B A) and saved as ``save_merged`` does."""
    import peft
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = hub.resolve_model(base)
    lm = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32),
                                        str(adapter))
    bundle = SimpleNamespace(policy=SimpleNamespace(lm=lm), tokenizer=AutoTokenizer.from_pretrained(source))
    return save_merged(bundle, folder)


def save_merged(bundle, folder: Path) -> Path:
    """Fold the LoRA update into the weights (W <- W + (alpha/r) B A) and save a plain model
    folder with its tokenizer: PPO's starting policy and reference. Written into a temporary
    folder beside ``folder`` and renamed into place, so a save cut short (a full disk, a kill)
    leaves the previous model whole, never a config without weights."""
    merged = bundle.policy.lm.merge_and_unload()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    tmp.chmod(0o755)  # mkdtemp's 0o700 would follow the folder into place
    try:
        merged.save_pretrained(tmp)
        bundle.tokenizer.save_pretrained(tmp)
        safe_files.replace_folder(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


SWITCH_WORDS = {"auto": "auto", "true": True, "false": False}
"""The command line's words for a fast-path switch -> the config's value."""


def main(argv: list[str] | None = None) -> dict:
    """``python -m course_utils sft [--FIELD VALUE ...]``: every field of ``SFTConfig``."""
    parser = argparse.ArgumentParser(prog="python -m course_utils sft", description=__doc__.split("\n")[0])
    docs = field_docs(SFTConfig)
    for name, spec in SFTConfig.__dataclass_fields__.items():
        flag, doc = f"--{name.replace('_', '-')}", docs.get(name, "")
        if spec.default_factory is list:  # a list field: zero or more values after the flag
            minutes = name == "eval_at_minutes"
            parser.add_argument(flag, nargs="*", default=[], type=float if minutes else str,
                                metavar="MINUTES" if minutes else "NAME", help=f"{doc} (default: none)")
        elif name in AUTO_SWITCHES:  # true, false or auto
            parser.add_argument(flag, choices=SWITCH_WORDS, default="auto", help=f"{doc} (default: auto)")
        elif isinstance(spec.default, bool):  # --demo-filter / --no-demo-filter
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=spec.default,
                                help=f"{doc} (default: {spec.default})")
        else:
            parser.add_argument(flag, type=type(spec.default), default=spec.default,
                                help=f"{doc} (default: {spec.default})")
    parser.add_argument("--overwrite", action="store_true", help="replace the model this run_name already holds")
    args = parser.parse_args(argv)
    values = {name: getattr(args, name) for name in SFTConfig.__dataclass_fields__}
    values.update({name: SWITCH_WORDS[values[name]] for name in AUTO_SWITCHES})
    config = SFTConfig(**values).validate()
    if complete_model(config.run_dir / "model") and not args.overwrite:
        raise ValueError(f"{config.run_dir / 'model'} already holds an SFT model: replace it with --overwrite, "
                         "or give this run another --run-name")
    try:
        metrics = train_sft(config, if_exists="overwrite")  # a model there was refused above without --overwrite
    except KeyboardInterrupt as interrupted:  # train_sft's message names a notebook's way: the command's instead
        if getattr(interrupted, "saved", False):
            raise safe_files.Interrupted(f"interrupted after the new SFT model was saved in {config.run_dir / 'model'}; "
                                         "nothing to rerun: PPO can start from it") from None
        raise safe_files.Interrupted(f"interrupted: the SFT warm-up keeps no checkpoint, and {config.run_dir / 'model'} "
                                     "is as it was before this run. Rerun the same command to train it") from None
    for name in metrics["before"]:
        before, after = metrics["before"][name], metrics["after"][name]
        print(f"held-out pass rate ({name}): {before['pass_rate']:.0%} -> {after['pass_rate']:.0%}")
    print(f"{metrics['steps']} SFT steps on {metrics['demos']} demonstrations in {metrics['train_seconds']:.0f} s")
    print(f"model: {config.run_dir / 'model'}   report: {config.run_dir / 'report.md'}")
    return metrics

