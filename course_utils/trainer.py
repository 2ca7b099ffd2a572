"""The PPO loop: updates one after another, evaluations, stop rules, checkpoints and the report.

    evaluate()                                 held-out pass rate before training
    until total_updates, a stop rule or the time budget:
        metrics = ppo_update()                 one update: course_utils.update (the pseudocode)
        stop rules on the metrics              machinery.stop_rules
        every eval_every updates: evaluate()   greedy answers, checker pass rate per task
        checkpoint if the update was healthy   machinery.checkpoint: the last-known-good state
    adapter, report.md, summary.json

What one update computes is in ``course_utils.update``; this file runs it and keeps the books.
The loop runs on an ``accelerate.Accelerator``, the same on one process and on several (CPU:
``torchrun``, gloo; GPUs: ``accelerate launch``, NCCL), where DDP averages the gradients and
whitening and metric means are global.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from course_utils import models, tasks
from course_utils import ppo_math as pm
from course_utils import update as ppo
from course_utils.config import PPOConfig, load_config
from course_utils.device import default_dtype, pick_device, seed_everything, set_threads
from course_utils.family_sampling import SuccessVarianceStream
from course_utils.machinery import calibration, checkpoint, report, safe_files, stop_rules
from course_utils.machinery.distributed import (check_processes, gather_objects, global_max, make_accelerator,
                                                params_in_sync, rank_and_world_size)
from course_utils.machinery.faults import NaNRewardFrom
from course_utils.machinery.metrics import update_metrics
from course_utils.machinery.run_checks import task_outcomes
from course_utils.machinery.stop_rules import StopSignal
from course_utils.reward_model import make_reward
from course_utils.rollout import SamplingSettings, greedy_answers, longest_prompt, sampling_compute_dtype

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
        # Under several processes each one takes its share of the same global batch.
        return [self.records[i] for i in order[self.rank::self.world_size]]

    def state_dict(self) -> dict:
        return {"cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.cursor = state["cursor"]


def prompt_stream(train: list, config: PPOConfig, rank: int = 0, world_size: int = 1):
    """The training prompts' stream that ``config.prompt_sampling`` names."""
    prompts_per_batch = config.batch_size // config.samples_per_prompt  # distinct prompts per update
    if config.prompt_sampling == "success_variance":
        return SuccessVarianceStream(train, prompts_per_batch, config.seed, config.family_rate_decay,
                                     config.family_weight_floor, rank, world_size)
    return PromptStream(train, prompts_per_batch, config.seed, rank, world_size)


def load_prompts(config: PPOConfig, rank: int = 0, world_size: int = 1) -> tuple[list, list, list, object]:
    """``(train records, eval_records, sample_records, training stream)`` of ``config``: read
    before any model loads, so a broken data file or an empty selection is reported at once (and
    not as "lower batch_size", the fix for a batch larger than a non-empty split)."""
    # eval_families (when set) widens the evaluation beyond the trained families: forgetting shows there.
    selected = {}
    for role, split, name in (("train", config.train_split, "task_families"), ("eval", config.eval_split,
                                                                                evaluated_field(config))):
        families = set(getattr(config, name))
        selected[role] = [r for r in tasks.load_split(split) if not families or r.family in families]
        if not selected[role]:
            which = f" of {name} {sorted(families)}" if families else ""
            raise ValueError(f"{tasks.default_data_dir() / (split + '.jsonl')} has no prompts{which}. Fix: regenerate it with "
                             f"`python -m course_utils data`" + (f", or check {name}" if families else ""))
    train = selected["train"]
    eval_records = balanced_subset(selected["eval"], config.eval_prompts)
    return train, eval_records, balanced_subset(eval_records, config.num_sample_prompts), \
        prompt_stream(train, config, rank, world_size)


def evaluated_field(config: PPOConfig) -> str:
    """The config field that names the evaluated families: ``eval_families`` when set, else ``task_families``."""
    return "eval_families" if config.eval_families else "task_families"


def heldout_pass_rates(config: PPOConfig, records: list, passed: list[bool]) -> dict:
    """The checker's verdicts on the held-out ``records`` -> ``pass_rate`` (all of them),
    ``pass_rate_per_task`` and, when ``eval_families`` widens the evaluation beyond
    ``task_families``, ``pass_rate_trained``: the pass rate on the trained families' prompts only
    (otherwise every evaluated family is trained, and ``pass_rate`` already is that measure)."""
    per_task: dict[str, list[bool]] = {}
    for record, ok in zip(records, passed):
        per_task.setdefault(record.family, []).append(ok)
    trained = [ok for record, ok in zip(records, passed) if record.family in config.task_families]
    widened = bool(config.eval_families and config.task_families and trained)
    return {"pass_rate": float(np.mean(passed)), **({"pass_rate_trained": float(np.mean(trained))} if widened else {}),
            "pass_rate_per_task": {k: float(np.mean(v)) for k, v in sorted(per_task.items())}}


def best_record(evaluation: dict) -> dict:
    """What the summary says of the best policy so far. "Best" is the best at what is trained
    (``stop_rules.target_pass_rate``: pass_rate_trained when other families are evaluated too)."""
    keep = ("update", "pass_rate", "pass_rate_trained")
    return {**{k: evaluation[k] for k in keep if k in evaluation}, "folder": "best_policy"}


def observe_successes(stream, batch: ppo.RolloutBatch) -> dict:
    """success_variance: fold the checker's verdicts on this batch (every process's episodes)
    into the family estimates. Returns the weights the batch was drawn with, for the log."""
    if not isinstance(stream, SuccessVarianceStream):
        return {}
    drawn_with = stream.weights()
    verdicts = [(r.family, tasks.check(r, a).passed) for r, a in zip(batch.records, batch.rollout.response_texts)]
    everyone = [v for share in gather_objects(verdicts) for v in share]
    stream.observe([f for f, _ in everyone], [ok for _, ok in everyone])
    return {"family_weights": {f: round(w, 4) for f, w in drawn_with.items()}}


# ---------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------


def refuse_generation_logprobs_off_float32(config: PPOConfig, device) -> None:
    """The sampler's log-probs are π_old only in float32: refuse "generation" where models load in half precision."""
    if config.old_logprobs_from == "generation" and default_dtype(device) != torch.float32:
        raise ValueError(
            f"old_logprobs_from='generation' needs float32 weights, but on {device} the models load in "
            f"{default_dtype(device)}. Use the preset for this device (configs/cuda.yaml) or add "
            "--set old_logprobs_from=forward (or device=cpu)."
        )


def check_context(bundle, config: PPOConfig, records: list) -> None:
    """Every prompt the run will ask, plus ``max_new_tokens``, must fit the model's positions:
    checked once the tokenizer is there rather than at the first rollout, and answered with the
    largest ``max_new_tokens`` that fits (a fix the learner can apply)."""
    longest, positions = longest_prompt(bundle.tokenizer, [r.prompt for r in records], bundle.policy.base_model)
    if positions is None or longest + config.max_new_tokens <= positions:
        return
    if longest >= positions:
        raise ValueError(f"the longest prompt is {longest} tokens after the chat template, and the model has "
                         f"{positions} positions: no answer fits. Fix: use a model with a longer context")
    raise ValueError(f"max_new_tokens={config.max_new_tokens} does not fit: the longest prompt is {longest} tokens "
                     f"after the chat template and the model has {positions} positions. Fix: --set "
                     f"max_new_tokens={positions - longest} (the largest that fits) or less")


def no_step_note(metrics: dict, config: PPOConfig) -> str:
    """The log line of an update whose KL early stop fired before its first optimizer step."""
    return (f"update {metrics['update']} took no optimizer step: the approximate KL of its first minibatch "
            f"already passed 1.5 x target_kl ({config.target_kl:g}), so nothing was trained on this batch and its "
            "step statistics are not measured (null in metrics.jsonl). If this repeats, raise target_kl")


def interrupted_message(run_dir, update: int, command: str | None = None, phase: str = "training") -> str:
    """What a Ctrl-C kept and how to go on, read from the disk (the checkpoint there, a replaced run
    kept beside the folder), never assumed. The state of an update cut in the middle is half changed
    (the optimizer stepped, the log not written), so the last checkpoint is what is kept.
    ``command``: the command line's way on (``--resume``, ``--overwrite``); without it, a notebook's
    (run the cell again: ``train()`` continues from the checkpoint). ``phase``: "start", "training"
    or "report" (the run's ending being written)."""
    run_dir, saved = Path(run_dir), checkpoint.saved_update(run_dir)
    head = {"start": f"interrupted while the run was starting (at update {update})",
            "report": f"interrupted while the run's report was written, after {update} update(s)"
            }.get(phase, f"interrupted after {update} update(s)")
    aside = safe_files.replaced_run(run_dir)
    kept = f" The run this one replaces is kept in {aside} until a run in {run_dir} finishes." if aside.is_dir() else ""
    if safe_files.is_finished(run_dir):  # stopped while a finished run was being read back (or resumed)
        again = f"`{command} --resume`" if command else "this cell run again (it reads the run back)"
        return f"{head}; the finished run in {run_dir} is as it was. Go on with {again}.{kept}"
    if saved is None:
        again = f"`{command} --overwrite`" if command else "this cell run again"
        return f"{head}, before the first checkpoint: nothing to resume. Start again with {again}.{kept}"
    which = f"the checkpoint of update {saved}" if saved >= 0 else "a checkpoint"
    again = (f"`{command} --resume`" if command else
             'this cell run again: train() resumes from it (train(if_exists="overwrite") would start over)')
    return f"{head}; {which} is kept in {run_dir / checkpoint.CHECKPOINT}. Continue with {again}.{kept}"


# ---------------------------------------------------------------------------------------------
# The run folder: a run already there is read back, continued or replaced, never lost by accident
# ---------------------------------------------------------------------------------------------

IF_EXISTS = ("keep", "resume", "overwrite")
"""What ``PPOTrainer.train`` does with a run already in its folder (``run_folder_plan``)."""

SAME_RUN_IGNORES = ("run_name", "output_dir", "threads", "device", "packed_cpu_linears", "decode_loop",
                    "sampling_dtype")
"""Settings that decide how fast a run computes, not what: a finished run read back may differ in them."""


class RunLogs(NamedTuple):
    """A PPO run folder's logs, as ``read_run`` returns them (``summary`` is None until the run finished)."""
    config: dict
    history: list
    evals: list
    summary: dict | None


def read_run(run_dir, made_by: str = "the cell that trains it", min_updates: int = 1) -> RunLogs:
    """The config, per-update metrics, evaluations and (once finished) summary of the PPO run in
    ``run_dir``, checked before a later cell relies on them. Anything missing (no run, a run
    stopped before ``min_updates`` logged updates or before its first evaluation, a damaged line)
    is one ValueError that says what is missing and that ``made_by`` (e.g. "week 7's training
    cell") makes it: run again, it continues the run from its checkpoint."""
    run_dir = Path(run_dir)
    again = f"run {made_by} again (it continues the run from its checkpoint, or starts it)"
    if not (run_dir / "config.json").is_file():
        raise ValueError(f"{run_dir} holds no PPO run (no config.json): {made_by} makes it")

    def rows(name: str) -> list[dict]:
        path = run_dir / name
        lines = path.read_text().splitlines() if path.is_file() else []
        try:
            return [json.loads(line) for line in lines if line.strip()]
        except ValueError:
            raise ValueError(f"{path} holds a line that is not JSON (a damaged log): {again}") from None

    history, evals = rows(METRICS), rows("evals.jsonl")
    if len(history) < min_updates:
        raise ValueError(f"{run_dir} holds {len(history)} logged update(s) and this needs at least {min_updates}: "
                         f"its run was stopped before it logged {'one' if min_updates == 1 else 'them'}. Fix: {again}")
    if not evals:
        raise ValueError(f"{run_dir} holds no held-out evaluation (evals.jsonl): its run was stopped before the "
                         f"first one. Fix: {again}")
    summary = json.loads((run_dir / "summary.json").read_text()) if safe_files.is_finished(run_dir) else None
    config = json.loads((run_dir / "config.json").read_text())
    saved = saved_model_folder(run_dir)  # a relative model path written from another working folder:
    if saved is not None and saved.is_dir() and not Path(config["model"]).expanduser().exists():
        config["model"] = os.path.relpath(saved, Path.cwd())  # the same folder, named from here
    return RunLogs(config, history, evals, summary)


def check_same_run(run_dir: Path, config: PPOConfig) -> None:
    """Refuse to read back a finished run trained with other settings than ``config``: one line
    naming the differences and the ways on (a lab cell whose knob changed must not get the old run)."""
    try:
        saved = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{run_dir} holds a finished run whose config.json cannot be read ({type(error).__name__}): "
                         'start it over with train(if_exists="overwrite"), or give this run another run_name') from None
    changes = {name: change for name, change in checkpoint.config_changes(saved, config.to_dict()).items()
               if name not in SAME_RUN_IGNORES}
    if "model" in changes and same_model_folder(run_dir, config.model):
        del changes["model"]  # one folder named from two places (notebooks/ and notebooks/ko/)
    if changes:
        listed = ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changes.items())
        resumable = not set(changes) & set(checkpoint.SAME_ON_RESUME)
        raise ValueError(f"{run_dir} holds a finished run with other settings ({listed}): start it over with "
                         'train(if_exists="overwrite")'
                         + (', continue it under the new settings with train(if_exists="resume")' if resumable else "")
                         + ", or give this run another run_name")


def saved_model_folder(run_dir: Path) -> Path | None:
    """The absolute folder of the model a run in ``run_dir`` started from (its manifest's
    ``model_resolved``), or None where the run did not record one."""
    try:
        resolved = json.loads((Path(run_dir) / "manifest.json").read_text()).get("model_resolved")
    except (OSError, ValueError):
        return None
    return Path(resolved) if resolved else None


def same_model_folder(run_dir: Path, model: str) -> bool:
    """True when ``model``, a path relative to this process's working folder, names the folder the
    run in ``run_dir`` started from, though its config wrote it relative to another folder (week 7
    run from notebooks/, read again from notebooks/ko/)."""
    saved = saved_model_folder(run_dir)
    return saved is not None and Path(model).expanduser().exists() and Path(model).expanduser().resolve() == saved


def plan_on_disk(run_dir: Path, config: PPOConfig, if_exists: str) -> tuple[str, str | None]:
    """``run_folder_plan``'s decision from what ``run_dir`` holds, with the line that tells the
    learner (rank 0 only: "overwrite" moves the old run aside here)."""
    if if_exists == "overwrite":
        aside = safe_files.move_run_aside(run_dir)
        return "start", (f"starting afresh in {run_dir}; the run that was there is kept in {aside} until this one "
                         "finishes" if aside else None)
    if if_exists == "resume":
        if not safe_files.has_checkpoint(run_dir):
            raise ValueError(f'if_exists="resume": there is no checkpoint in {run_dir} to resume from. Fix: train() '
                             'starts the run (if_exists="keep", the default)')
        return "resume", None
    if safe_files.is_finished(run_dir):
        check_same_run(run_dir, config)
        return "read", (f"{run_dir} already holds this run, finished: it is read back and nothing is trained. To "
                        'train it again, call train(if_exists="overwrite")')
    if safe_files.has_checkpoint(run_dir):
        return "resume", (f"{run_dir} holds this run, interrupted: it continues from its checkpoint "
                          '(train(if_exists="overwrite") would start it over)')
    if safe_files.holds_run(run_dir):  # logged updates but no checkpoint: nothing to continue from
        safe_files.remove_run_state(run_dir, safe_files.RUN_OUTPUTS)
        return "start", f"{run_dir} held a run stopped before its first checkpoint: nothing to resume, it starts over"
    return "start", None


WRITABLE_FIX = "choose another output_dir (load_config(..., output_dir=DIR); on the command line --set output_dir=DIR)"
ONE_WRITER_FIX = "wait until it ends, then run this again (a finished run is read back), or give this run another run_name"


def run_folder_plan(trainer: "PPOTrainer", if_exists: str, resume: bool = False) -> str:
    """What ``PPOTrainer.train`` does with its run folder: "start", "resume" (from the checkpoint)
    or "read" (a finished run read back), decided on rank 0 and shared with every process.

    keep       (the default) a finished run with the same settings is read back and nothing is
               trained; an interrupted one continues from its checkpoint; one stopped before its
               first checkpoint starts over. Running a notebook cell again never loses a run.
    resume     continue from the checkpoint (there must be one), finished or not (e.g. with more
               total_updates); ``resume=True`` means this
    overwrite  start afresh: the old run moves aside at once (``safe_files.move_run_aside``: the
               folder never holds two runs) and is deleted only when the new run finishes
    """
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {', '.join(IF_EXISTS)}; got {if_exists!r}")
    if resume and if_exists == "overwrite":
        raise ValueError('resume=True and if_exists="overwrite" exclude each other: keep the one you mean')
    decided = None
    if trainer.rank == 0:
        try:
            decided = (*plan_on_disk(trainer.run_dir, trainer.config, "resume" if resume else if_exists), None)
        except ValueError as error:  # said on every process, so none waits for the others
            decided = (None, None, str(error))
    plan, note, error = gather_objects(decided)[0]
    if error:
        raise ValueError(error)
    if note and trainer.rank == 0:
        tqdm.write(note)  # quiet or not: what happened to the run in the folder must be seen
    return plan


def stop_signal(text: str | None) -> StopSignal | None:
    """``str(StopSignal)`` ("[rule] message", as summary.json keeps it) back into a StopSignal."""
    if not text:
        return None
    rule, _, message = text.partition("] ")
    return StopSignal(rule.lstrip("["), message)


def load_saved_policy(policy, folder: Path) -> None:
    """Put the weights that ``PPOTrainer.save_adapter`` wrote in ``folder`` (the LoRA adapter, or
    the whole model, and the value head) into ``policy``, exactly."""
    from safetensors.torch import load_file

    weights = folder / ("adapter_model.safetensors" if policy.is_lora else "model.safetensors")
    if not weights.is_file() or not (folder / "value_head.pt").is_file():
        raise ValueError(f"{folder} lacks {weights.name} or value_head.pt, the finished run's final weights: start it "
                         'over with train(if_exists="overwrite")')
    if policy.is_lora:
        from peft import set_peft_model_state_dict

        unexpected = set_peft_model_state_dict(policy.lm, load_file(weights)).unexpected_keys
    else:
        unexpected = policy.lm.load_state_dict(load_file(weights), strict=False).unexpected_keys
    if unexpected:
        raise ValueError(f"{weights} holds weights this model lacks ({unexpected[:3]}): it was saved by another model")
    policy.value_head.load_state_dict(torch.load(folder / "value_head.pt", map_location=policy.device))


def read_back(trainer: "PPOTrainer") -> dict:
    """A finished run read back into ``trainer`` as if it had just trained there: its logs,
    evaluations, minute checkpoints, best and stop, and its final weights (``policy/``) in the
    policy. Returns the run's summary."""
    logs = read_run(trainer.run_dir, 'this cell with train(if_exists="overwrite")', min_updates=0)
    minute_file = trainer.run_dir / "checkpoints.jsonl"
    trainer.history, trainer.evals, summary = logs.history, logs.evals, logs.summary
    trainer.checkpoints = [json.loads(line) for line in minute_file.read_text().splitlines() if line.strip()] \
        if minute_file.is_file() else []
    trainer.update, trainer.best = summary["updates"], summary.get("best")
    trainer.checkpoint_update, trainer.stop = summary.get("checkpoint_update"), stop_signal(summary.get("stop"))
    load_saved_policy(trainer.policy, trainer.run_dir / "policy")
    return summary


def model_resolved(model: str) -> dict:
    """``{"model_resolved": absolute folder}`` when ``model`` is a local path (a notebook's relative
    ``../runs/sft-cpu/model``), so that the run can be read from another working folder; else {}."""
    path = Path(model).expanduser()
    return {"model_resolved": str(path.resolve())} if path.is_dir() else {}


def start_run(trainer: "PPOTrainer", resume: bool) -> None:
    """Resume if asked (a finished run resumed loses its ending, ``safe_files.RUN_ENDING``, at once:
    an interrupted resume must not look finished), write the run's config and manifest, evaluate
    the starting policy."""
    if resume and trainer.load_checkpoint():
        trainer.log(f"resumed from update {trainer.update}")
        if trainer.rank == 0:
            safe_files.remove_run_state(trainer.run_dir, safe_files.RUN_ENDING)
    if trainer.rank == 0:
        safe_files.write_json(trainer.run_dir / "config.json", trainer.config.to_dict())
        safe_files.write_json(trainer.run_dir / "manifest.json", {**trainer.bundle.manifest,
                                                                    "fast_paths": trainer.fast_paths,
                                                                    **model_resolved(trainer.config.model)}, default=str)
    trainer._write_jsonl(METRICS, trainer.history)  # drops lines past the checkpoint after a kill
    if not trainer.evals:
        trainer._evaluate_and_keep_best()
        trainer.log(f"held-out pass rate before training: {trainer.evals[0]['pass_rate']:.2%}")


def minute_checkpoints(trainer: "PPOTrainer", final: bool = False) -> None:
    """``eval_at_minutes``: test and unseen phrasings at each mark the training clock has passed
    (and, with ``final``, at the end of the run), into ``checkpoints.jsonl``."""
    seconds = trainer.training_seconds()
    for mark in due_minute_marks(trainer.config.eval_at_minutes, trainer.checkpoints, seconds, final):
        trainer.checkpoints.append({"minutes": round(seconds / 60, 3) if mark is None else mark, "final": mark is None,
                                    "update": trainer.update, "train_seconds": seconds,
                                    **evaluate_splits(trainer.bundle, trainer.config, trainer.eval_records)})
        trainer._write_jsonl("checkpoints.jsonl", trainer.checkpoints)  # each one kept as soon as it is measured


def lr_factor(cfg: PPOConfig, updates_done: int, seconds_trained: float) -> float:
    """Learning-rate multiplier after ``updates_done`` updates: 1, or for the linear schedule
    1 - the run's progress, measured in updates or in the time budget (``seconds_trained``, a
    clock every process agrees on), whichever is further."""
    if cfg.lr_schedule != "linear":
        return 1.0
    progress = updates_done / cfg.total_updates
    if cfg.max_train_minutes > 0 and updates_done:
        progress = max(progress, seconds_trained / (60 * cfg.max_train_minutes))
    return max(0.0, 1.0 - progress)


def choose_fast_paths(bundle, config: PPOConfig, records: list) -> tuple[PPOConfig, dict]:
    """The config with ``packed_cpu_linears``, ``decode_loop`` and ``sampling_dtype`` decided
    (``machinery.calibration``: "auto" measured on this machine, or read from its cache), and the
    record of the choice for manifest.json. Under torchrun rank 0 decides, on one batch's share of
    the prompts, while the others wait (two processes timing at once would time each other), and
    every process takes its answer. A bfloat16 sampler that cannot run is refused here, before the
    first rollout. What it prints goes to stderr, quiet or not: a measurement takes seconds and a
    damaged cache file should be seen."""
    rank, world_size = rank_and_world_size()
    prompts = [r.prompt for r in records[:max(1, config.batch_size // world_size)]]
    record = calibration.resolve(config, bundle, prompts) if rank == 0 else None
    record = gather_objects(record)[0]
    config = dataclasses.replace(config, **record["chosen"])
    if config.sampling_dtype != "float32":
        sampling_compute_dtype(bundle.policy, config.sampling_dtype, config.packed_cpu_linears)
    return config, record


def due_minute_marks(marks: list, done: list[dict], seconds: float, final: bool = False) -> list:
    """The marks of ``eval_at_minutes`` the training clock (``seconds``) has passed and ``done``
    (the checkpoints so far) does not hold yet, in order; with ``final`` (and any marks asked for)
    also ``None``, the end of the run wherever the clock stands."""
    taken = {c["minutes"] for c in done}
    due = [m for m in sorted(marks) if m not in taken and seconds >= 60 * m]
    return due + [None] if final and marks else due


@torch.no_grad()
def evaluate_splits(bundle, config: PPOConfig, eval_records: list) -> dict:
    """Greedy pass rates (overall and per family) of ``bundle``'s policy on ``eval_split``'s prompts and
    on the same families' prompts in unseen phrasings: ``{split: {"pass_rate", "pass_rate_per_task"}}``."""
    families = getattr(config, evaluated_field(config))
    unseen = [r for r in tasks.load_split(tasks.UNSEEN_SPLIT) if not families or r.family in families]
    out = {}
    bundle.policy.eval()
    for name, records in ((config.eval_split, eval_records),
                          (tasks.UNSEEN_SPLIT, balanced_subset(unseen, config.eval_prompts))):
        answers = greedy_answers(bundle, [r.prompt for r in records], config.max_new_tokens,
                                 packed=config.packed_cpu_linears, decode_loop=config.decode_loop)
        out[name] = heldout_pass_rates(config, records, [tasks.check(r, a).passed for r, a in zip(records, answers)])
    bundle.policy.train()
    return out


def check_grouped(records: list, k: int) -> None:
    """``group_baseline`` needs each prompt ``k`` times in consecutive rows."""
    if len(records) % k or any(len({r.prompt for r in records[i:i + k]}) != 1 for i in range(0, len(records), k)):
        raise ValueError(f"group_baseline: records must hold each prompt {k} times in consecutive rows "
                         f"(samples_per_prompt); got {len(records)} records not grouped that way")


def run_summary(trainer: "PPOTrainer", finished: str | None) -> dict:
    """What ``summary.json`` holds: updates done, why the run ended, training minutes, pass rates before
    and after, the processes and engine, the best evaluation, the minute checkpoints and (when the
    evaluations kept their answers) per family whether training taught it, hacked it or neither
    (``run_checks.task_outcomes``)."""
    summary = {"updates": trainer.update, "stop": str(trainer.stop) if trainer.stop else None, "finished": finished,
               "training_minutes": trainer.training_seconds() / 60,
               "pass_rate_before": trainer.evals[0]["pass_rate"], "pass_rate_after": trainer.evals[-1]["pass_rate"],
               "world_size": trainer.world_size, "ranks_in_sync": params_in_sync(trainer.params),
               "engine": trainer.accelerator.distributed_type.value,
               "best": trainer.best, "checkpoint_update": trainer.checkpoint_update}
    if trainer.checkpoints:
        summary["checkpoints"] = trainer.checkpoints
    if "answers" in trainer.evals[0] and "answers" in trainer.evals[-1]:
        summary["task_outcomes"] = task_outcomes(trainer.eval_records, trainer.evals[0]["answers"],
                                                 trainer.evals[-1]["answers"])
    return summary


def progress_postfix(metrics: dict, config: PPOConfig, seconds: float) -> dict:
    """The progress bar's live numbers: score, KL per answer, answer length and, with a time budget, the
    training minutes used (the bar's own ETA, counted in updates, is then only an upper bound)."""
    shown = {"score": f"{metrics['score']:.3f}", "kl": f"{metrics['kl_per_sequence']:.2f}",
             "len": f"{metrics['response_length']:.1f}"}
    if config.max_train_minutes:
        shown["trained"] = f"{seconds / 60:.1f}/{config.max_train_minutes:g} min"
    return shown


class PPOTrainer:
    """Runs PPO from a :class:`PPOConfig`.

    ``callbacks`` are functions ``callback(trainer, metrics: dict)`` called after every update
    (the notebooks pass a live plot). ``bundle`` may be given to reuse loaded models,
    ``accelerator`` the engine (default: ``make_accelerator`` for the config's device).
    """

    def __init__(self, config: PPOConfig, bundle=None, callbacks=(), quiet: bool = False, accelerator=None):
        self.config = config.validate()
        self.callbacks, self.quiet = list(callbacks), quiet
        seed_everything(config.seed)
        self.device = pick_device(config.device)
        self.accelerator = accelerator or make_accelerator(self.device)  # joins a launcher's process group
        self.rank, self.world_size = rank_and_world_size()
        config.validate_processes(self.world_size)
        set_threads(config.threads or None)  # 0: $COURSE_THREADS, else the cores (at most 8)
        if self.world_size > 1 and self.device.type == "cuda":
            self.device = self.accelerator.device  # one GPU per process
        if bundle is None:  # refused here, before any model loads, rather than at the first rollout
            refuse_generation_logprobs_off_float32(config, self.device)
        train, self.eval_records, self.sample_records, self.prompts = load_prompts(config, self.rank, self.world_size)
        self.run_dir = config.run_dir
        if self.rank == 0 and not safe_files.is_finished(self.run_dir):  # a finished run may be read where it cannot be written
            safe_files.check_writable(self.run_dir, WRITABLE_FIX)
        lora = models.LoRASettings(rank=config.lora_rank, alpha=config.lora_alpha,
                                   target_modules=tuple(config.lora_target_modules)) if config.lora_rank else None
        self.bundle = bundle or models.load_bundle(model=config.model, lora=lora, reward=make_reward(config, self.device),
                                                   device=self.device, seed=config.seed)
        self.policy = self.bundle.policy
        check_context(self.bundle, config, train + self.eval_records)
        self.config, self.fast_paths = choose_fast_paths(self.bundle, config, train)  # "auto" -> measured
        # Training rollouts are scored through the fault injector (a no-op unless the config asks).
        self.train_reward = NaNRewardFrom(self.bundle.reward, config.inject_nan_reward_at, lambda: self.update)
        if self.world_size > 1:  # same initial weights everywhere (seeded above), different samples per process
            seed_everything(config.seed + 1000 * self.rank)
        self.params = self.policy.trainable_parameters()
        # Only the training forward goes through DDP; rollouts, evaluation and checkpoints use the policy.
        self.ddp_policy = self.accelerator.prepare_model(self.policy, device_placement=False)
        self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        # Not accelerator.prepare'd: accelerate would step a scheduler once per process per step.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.kl_controller = (pm.AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
                              if config.adaptive_kl else pm.FixedKLController(config.kl_coef))
        self.update = 0  # updates done so far
        self.history: list[dict] = []
        self.evals: list[dict] = []
        self.streaks = stop_rules.Streaks()
        self.stop: stop_rules.StopSignal | None = None
        self.best: dict | None = None  # the evaluation with the highest pass rate so far
        self.checkpoints: list[dict] = []  # eval_at_minutes: test and unseen phrasings at minute marks
        self.checkpoint_update: int | None = None

    def _lr_factor(self, updates_done: int) -> float:
        return lr_factor(self.config, updates_done, self.training_seconds() if updates_done else 0.0)  # 0: no history yet

    def sampling(self, greedy: bool = False) -> SamplingSettings:
        return SamplingSettings(temperature=self.config.temperature, top_k=0, top_p=1.0,
                                max_new_tokens=self.config.max_new_tokens, do_sample=not greedy)

    def log(self, message: str) -> None:
        if self.rank == 0 and not self.quiet:
            tqdm.write(message)

    # ------------------------------------------------------------------ one update

    def prepare_batch(self, records: list | None = None) -> ppo.RolloutBatch:
        """Steps 1-4 (``update.prepare_batch``) on the next batch of the prompt stream (each prompt
        ``samples_per_prompt`` times), or on ``records``, with the current β. Given ``records``
        are used as they are: with ``group_baseline`` they must hold each prompt
        ``samples_per_prompt`` times in consecutive rows."""
        if records is None:  # each prompt of the stream samples_per_prompt times, in consecutive rows
            records = [r for r in self.prompts.next_batch() for _ in range(self.config.samples_per_prompt)]
        elif self.config.group_baseline:
            check_grouped(records, self.config.samples_per_prompt)
        return ppo.prepare_batch(self.bundle, records, self.sampling(), self.train_reward,
                                 self.kl_controller.value, self.config)

    def ppo_update(self) -> dict:
        """One update: prepare a batch, optimise on it, log, adapt β. Returns the metrics."""
        t_start = time.perf_counter()
        batch = self.prepare_batch()                                        # steps 1-4
        t_prepared = time.perf_counter()
        learning_rate = self.scheduler.get_last_lr()[0]                     # the rate step 5 uses
        steps = ppo.optimise(self.policy, self.optimizer, batch, self.config,  # step 5
                             model=self.ddp_policy, accelerator=self.accelerator)
        self.scheduler.step()
        t_done = time.perf_counter()
        metrics = update_metrics(batch, steps, self.config, self.update + 1, self.world_size, learning_rate,
                                 times={"train_s": t_done - t_prepared, "update_s": global_max(t_done - t_start)})
        metrics.update(observe_successes(self.prompts, batch))
        if batch.trained_rows is not None:
            metrics["rows_trained"] = int(batch.trained_rows.sum())
        if steps["optimizer_steps"] and math.isfinite(metrics["kl_per_sequence"]):
            self.kl_controller.update(metrics["kl_per_sequence"], self.config.batch_size)  # adapt β
        self.update += 1
        return metrics

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Greedy answers to the held-out prompts: checker pass rate overall and per task, mean
        reward, and the answers to the fixed sample prompts."""
        self.policy.eval()
        records = self.eval_records
        answers = greedy_answers(self.bundle, [r.prompt for r in records], self.config.max_new_tokens,
                                 packed=self.config.packed_cpu_linears, decode_loop=self.config.decode_loop)
        passed = [tasks.check(r, a).passed for r, a in zip(records, answers)]
        rewards = self.bundle.reward.score([r.prompt for r in records], answers, records)
        sample_ids = {r.id for r in self.sample_records}
        result = {
            "update": self.update,
            **heldout_pass_rates(self.config, records, passed),
            "mean_reward": float(rewards.float().mean()),
            "samples": [{"id": r.id, "family": r.family, "prompt": r.prompt, "answer": a, "passed": ok}
                        for r, a, ok in zip(records, answers, passed) if r.id in sample_ids],
            "answers": answers,  # every held-out answer, in the order of eval_records (for the report)
        }
        self.policy.train()
        return result

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly where this one is."""
        return {
            "update": self.update,
            "trainable": {n: p.detach().clone() for n, p in self.policy.named_parameters() if p.requires_grad},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "kl_controller": self.kl_controller.state_dict(),
            "data_cursor": self.prompts.cursor,
            "prompt_sampler": self.prompts.state_dict(),  # the cursor, and success_variance's estimates
            "history": self.history,
            "evals": self.evals,
            "streaks": (self.streaks.nonfinite, self.streaks.clipfrac, self.streaks.hacking),
            "best": self.best,
            "checkpoints": self.checkpoints,
            # One RNG state per process: each rank samples its own share of the batch.
            "rng_per_rank": gather_objects(checkpoint.rng_state()),
            "config": self.config.to_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Put back what ``state_dict()`` saved: trainable weights, optimizer, scheduler, β,
        data position, logs, stop-rule streaks and the random-number generators. A checkpoint
        trained on other data, reward or model (``checkpoint.SAME_ON_RESUME``) is refused."""
        saved, now = state.get("config", {}), self.config.to_dict()
        if saved.get("model", now["model"]) != now["model"] and same_model_folder(self.run_dir, now["model"]):
            now["model"] = saved["model"]  # the same folder, named from another working folder (notebooks/ko/)
        if changes := checkpoint.check_resumed_config(saved, now, self.run_dir):
            self.log(f"resuming with changed settings: {changes}")
        params = dict(self.policy.named_parameters())
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.kl_controller.load_state_dict(state["kl_controller"])
        self.prompts.cursor = state["data_cursor"]
        if state.get("prompt_sampler"):
            self.prompts.load_state_dict(state["prompt_sampler"])
        self.update = state["update"]
        self.history, self.evals = state["history"], state["evals"]
        self.streaks = stop_rules.Streaks(*state["streaks"])
        self.best, self.checkpoint_update = state.get("best"), state["update"]
        self.checkpoints = state.get("checkpoints", [])
        per_rank = state["rng_per_rank"]
        if len(per_rank) != self.world_size:
            raise ValueError(f"the checkpoint was written by {len(per_rank)} process(es) and this run has "
                             f"{self.world_size}: resume with the same number of processes")
        checkpoint.restore_rng(per_rank[self.rank])

    def save_checkpoint(self) -> None:
        state = self.state_dict()  # on every process: it gathers each rank's RNG state
        if self.rank == 0:
            checkpoint.save(self.run_dir, state, self.update)
        self.checkpoint_update = self.update

    def load_checkpoint(self) -> bool:
        state = checkpoint.load(self.run_dir)
        if state is not None:
            self.load_state_dict(state)
        return state is not None

    # ------------------------------------------------------------------ the run

    def _write_jsonl(self, name: str, rows: list[dict]) -> None:
        if self.rank == 0:  # strict JSON (NaN -> null), atomic: a full disk leaves the old file
            safe_files.write_jsonl(self.run_dir / name, rows)

    def training_seconds(self) -> float:
        """Wall time of the updates so far (evaluations and checkpoints excluded); survives a resume.
        Each update counts its slowest process's time: one clock, the same on every process."""
        return float(sum(h.get("time_update_s", 0.0) for h in self.history))

    def budget_spent(self) -> bool:
        """True once ``max_train_minutes`` of training time are used up (never, when it is 0).
        Under several processes every one must give the same answer (one rank leaving the loop while
        another starts an update would hang the next collective): the clock's maximum decides."""
        budget = self.config.max_train_minutes
        return budget > 0 and global_max(self.training_seconds()) >= 60 * budget

    def train(self, resume: bool = False, if_exists: str = "keep") -> dict:
        """Run until ``total_updates``, a stop rule or the time budget; write metrics, checkpoints
        and the report. Returns the run's summary. A run already in the folder
        (``run_folder_plan``): ``if_exists="keep"``, the default, reads a finished one back
        (nothing trained) and continues an interrupted one from its checkpoint; "resume" (or
        ``resume=True``) continues from the checkpoint; "overwrite" starts afresh. Ctrl-C at any
        moment ends in ``safe_files.Interrupted``: its message says what was kept and the way on."""
        cfg, bar, self.phase, held = self.config, None, "start", contextlib.ExitStack()
        try:
            if self.rank == 0 and (resume or if_exists != "keep" or not safe_files.is_finished(self.run_dir)):
                safe_files.check_writable(self.run_dir, WRITABLE_FIX)  # only reading a finished run back needs no write
                held.enter_context(safe_files.one_writer(self.run_dir, ONE_WRITER_FIX))  # not two kernels at once
            plan = run_folder_plan(self, if_exists, resume)
            if plan == "read":
                return read_back(self)
            start_run(self, plan == "resume")
            self.phase = "training"
            bar = tqdm(total=cfg.total_updates, initial=self.update, desc="PPO updates",
                       disable=self.rank != 0 or self.quiet)
            while self.update < cfg.total_updates and self.stop is None and not self.budget_spent():
                metrics = self.ppo_update()
                self._after_update(metrics)
                bar.update(1)
                bar.set_postfix(progress_postfix(metrics, cfg, self.training_seconds()))
                for callback in self.callbacks:
                    callback(self, metrics)
                # Only a healthy update may overwrite the checkpoint: it stays the last-known-good state.
                healthy = self.stop is None and not stop_rules.is_nonfinite(metrics)
                if healthy and (self.update % cfg.save_every == 0 or self._last_update()):
                    self.save_checkpoint()
            self.phase = "report"
            return self._finish()
        except KeyboardInterrupt:  # mid-update state is half-changed: the checkpoint is what is kept
            raise safe_files.Interrupted(interrupted_message(self.run_dir, self.update, phase=self.phase)) from None
        finally:
            if bar is not None:
                bar.close()
            held.close()

    def _last_update(self) -> bool:
        return self.update == self.config.total_updates or self.budget_spent()

    def _after_update(self, metrics: dict) -> None:
        """Stop rules on the new metrics; an evaluation when one is due (then the held-out rule)."""
        self.stop, self.streaks = stop_rules.check_update(metrics, self.config, self.streaks)
        if self.stop is not None:
            metrics["stop"] = str(self.stop)
        if metrics["kl_stop_steps_skipped"] and not metrics["optimizer_steps"]:
            self.log(no_step_note(metrics, self.config))
        self.history.append(metrics)
        if self.stop is None and (self.update % self.config.eval_every == 0 or self._last_update()):
            self._evaluate_and_keep_best()
            self.stop, self.streaks = stop_rules.check_heldout(self.history, self.evals, self.config, self.streaks)
        self._write_jsonl(METRICS, self.history)
        minute_checkpoints(self)

    def _evaluate_and_keep_best(self) -> None:
        """Evaluate; when the pass rate beats every earlier one, save this policy as ``best_policy/``."""
        self.evals.append(self.evaluate())
        self._write_jsonl("evals.jsonl", self.evals)
        latest = self.evals[-1]
        if self.best is None or stop_rules.target_pass_rate(latest) > stop_rules.target_pass_rate(self.best):
            self.best = best_record(latest)
            if self.rank == 0:
                self.save_adapter(self.run_dir / "best_policy")

    def _finish(self) -> dict:
        """The summary; the adapter, report.md and summary.json on disk."""
        cfg = self.config
        if self.stop is not None:
            self.log(f"stopped: {self.stop} (last good checkpoint kept in {self.run_dir / checkpoint.CHECKPOINT})")
        finished = None
        if self.stop is None and self.budget_spent():
            finished = (f"training-time budget of {cfg.max_train_minutes:g} min spent after {self.update} updates "
                        f"({self.training_seconds() / 60:.1f} min)")
            self.log(finished)
        minute_checkpoints(self, final=True)
        summary = run_summary(self, finished)
        if self.rank == 0:
            self.save_adapter()
            report.write_report(self.run_dir, cfg, self.history, self.evals, summary, self.bundle.manifest)
            safe_files.write_json(self.run_dir / "summary.json", summary)  # last: it marks the run finished
            if (dropped := safe_files.drop_replaced_run(self.run_dir)) is not None:
                self.log(f"the run this one replaced ({dropped}) is deleted")
        return summary

    def save_adapter(self, folder=None) -> None:
        """Save the trained weights (the LoRA adapter, or the full model) and the value head
        (default folder: ``policy/`` in the run folder)."""
        folder = folder or self.run_dir / "policy"
        self.policy.lm.save_pretrained(folder)
        torch.save(self.policy.value_head.state_dict(), folder / "value_head.pt")


# ---------------------------------------------------------------------------------------------
# Command line: python -m course_utils ppo --config configs/cpu.yaml
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_utils ppo", description="Run PPO headless.")
    parser.add_argument("--config", default="configs/cpu.yaml", help="a preset in configs/ (YAML)")
    parser.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint (there must be one)")
    parser.add_argument("--resume-or-start", action="store_true",
                        help="continue from the run's checkpoint if it has one, else start the run")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh in a run folder that already holds a run (its checkpoint and logs are deleted)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="override config fields, e.g. --set total_updates=5 seed=1")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="refuse to run unless the launcher started N processes (e.g. torchrun --nproc_per_node N)")
    return parser


def parse_overrides(items: list[str]) -> dict:
    """``FIELD=VALUE`` strings -> {field: value}, each value read as YAML (numbers, true, lists)."""
    import yaml

    overrides = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ValueError(f"--set takes FIELD=VALUE pairs, got {item!r}; e.g. --set total_updates=5 seed=1")
        overrides[key] = yaml.safe_load(value)
    return overrides


def command_line(args) -> str:
    """The command that started this run, to quote in messages (``--resume`` appended by them)."""
    import shlex

    return shlex.join(["python", "-m", "course_utils", "ppo", "--config", args.config]
                      + (["--processes", str(args.processes)] if args.processes else [])
                      + (["--set", *args.set] if args.set else []))


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    config = load_config(args.config, **parse_overrides(args.set))
    command = command_line(args)
    resume = safe_files.check_run_folder(config.run_dir, args.resume, args.overwrite, args.resume_or_start, command)
    # The engine: under torchrun or accelerate launch this joins their process group (gloo, NCCL).
    accelerator = make_accelerator(pick_device(config.device))
    check_processes(accelerator, args.processes)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # let finally-blocks run on `kill`
    trainer = None
    try:
        trainer = PPOTrainer(config, accelerator=accelerator)  # every check passed and the model loaded: only now move an old run
        # check_run_folder refused a folder holding a run without a flag, so "keep" here only starts.
        summary = trainer.train(if_exists="resume" if resume else "overwrite" if args.overwrite else "keep")
        accelerator.wait_for_everyone()  # rank 0 writes the report last: nobody leaves before it is done
    except KeyboardInterrupt:  # the notebook's message from train() becomes the command's
        if trainer is None:
            raise safe_files.Interrupted(f"interrupted before training started; nothing was written. Rerun `{command}`")
        raise safe_files.Interrupted(interrupted_message(trainer.run_dir, trainer.update, command,
                                                         getattr(trainer, "phase", "start"))) from None
    finally:
        accelerator.end_training()  # leaves the process group (none on one process)
    if trainer.rank == 0:
        print("\n".join(report.summary_lines(summary, trainer.run_dir)))
    return summary
