"""Design (h) of lesson 11, retention: the PPO arm's settings and the measures taken after both arms.

    python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --train-families F ...   # PPO
    python -m course_utils bench-learning --sft-continue --train-families F ...                         # SFT

Both arms start from the same 200-demo warm-up (one per seed, the same seed) and spend the rest of
the 15 minutes on the families F only. PPO trains on F's prompts and evaluates on every family
(``eval_families``), so its evals.jsonl holds the gain and the forgetting along the run (the SFT
arm evaluates every ``SFT_EVAL_EVERY`` steps for the same curve). When an
arm ends, ``measure_seed`` takes, for each seed, the start (the warm-up) and the final policy and
writes per-family greedy pass rates on the test split for every family, the gain on F, the change
on the others, and the forward KL from the start, KL(π_start ‖ π), on the test prompts of F and of
the others (``retention.forward_kl_from_start``).
"""

from __future__ import annotations

import json
from pathlib import Path

from course_utils import retention, sft, tasks

KL_SAMPLES = 4
"""Answers sampled from the start per test prompt of each group (trained, others) for the KL."""
SFT_EVAL_EVERY = 60
"""The SFT arm's steps between two evaluations of its curve (about 3 minutes of training on 2 cores;
each evaluation, 100 greedy answers, is not counted as training time)."""
MAX_NEW_TOKENS = 16
"""The presets' answer length (cpu_sft.yaml and the SFT evaluation): pass rates and KL read as many tokens."""


def ppo_overrides(train_families) -> list[str]:
    """``--set`` items for PPO on ``train_families`` evaluated on every family."""
    return [f"task_families=[{','.join(train_families)}]", f"eval_families=[{','.join(tasks.TASK_FAMILIES)}]"]


def final_ppo_bundle(run_dir: Path):
    """The final policy of a finished PPO run (its last checkpoint: the budget's last update is saved)."""
    from course_utils.config import PPOConfig
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(PPOConfig(**json.loads((Path(run_dir) / "config.json").read_text())), quiet=True)
    if not trainer.load_checkpoint():
        raise FileNotFoundError(f"no checkpoint in {run_dir}: the final policy is not there to measure")
    return trainer.bundle


def measure_seed(start_model: str, final_bundle, train_families, seed: int, split: str = "test",
                 samples: int = KL_SAMPLES) -> dict:
    """Per-family greedy pass rates of the start and of the final policy on ``split`` (every family),
    the gain on the trained families and the change on the others (points), and KL(π_start ‖ π) on
    the split's prompts of each group (answers sampled from the start with ``seed``)."""
    from course_utils.models import load_bundle
    from course_utils.trainer import balanced_subset

    start = load_bundle(start_model, device="cpu", seed=seed)
    records = balanced_subset(tasks.load_split(split), 100)
    before = sft.pass_rates(start, records, MAX_NEW_TOKENS)["per_family"]
    after = sft.pass_rates(final_bundle, records, MAX_NEW_TOKENS)["per_family"]
    groups = {"trained": [r.prompt for r in records if r.family in train_families],
              "others": [r.prompt for r in records if r.family not in train_families]}
    kl = {group: retention.forward_kl_from_start(start, final_bundle, start.tokenizer, prompts, samples,
                                                 MAX_NEW_TOKENS, seed=seed)
          for group, prompts in groups.items()}
    return {"split": split, "before": before, "after": after,
            **retention.gain_and_change(before, after, train_families), "kl_from_start": kl}


def ppo_curve(run_dir: Path, train_families) -> list[dict]:
    """Gain on the trained families and change on the others at each evaluation of a PPO run
    (relative to its first, the warm-up), against its training minutes: one run's path in the
    gain-forgetting plane."""
    run_dir = Path(run_dir)
    evals = [json.loads(line) for line in open(run_dir / "evals.jsonl")]
    seconds = [json.loads(line)["time_update_s"] for line in open(run_dir / "metrics.jsonl")]
    first = evals[0]["pass_rate_per_task"]
    return [{"update": e["update"], "training_minutes": sum(seconds[:e["update"]]) / 60,
             **retention.gain_and_change(first, e["pass_rate_per_task"], train_families)} for e in evals]


def sft_curve(run_folder: Path, train_families) -> list[dict]:
    """The same path for an SFT run with ``eval_every`` (metrics.json's ``curve``), from its start
    (the warm-up: its "before") to its end ("after"), against training minutes."""
    metrics = json.loads((Path(run_folder) / "metrics.json").read_text())
    split = metrics["config"]["eval_split"]
    first = metrics["before"][split]["per_family"]
    points = [{"step": 0, "train_seconds": 0.0, "per_family": first}, *metrics.get("curve", []),
              {"step": metrics["steps"], "train_seconds": metrics["train_seconds"],
               "per_family": metrics["after"][split]["per_family"]}]
    return [{"step": p["step"], "training_minutes": p["train_seconds"] / 60,
             **retention.gain_and_change(first, p["per_family"], train_families)} for p in points]


def measure_arm(report: dict, train_families, samples: int = KL_SAMPLES) -> dict:
    """``measure_seed`` for every seed of a finished arm (``report`` as bench-learning writes it), and
    the PPO arm's curves: ``{"train_families", "seeds": [{"seed", ...measures, "curve"?}]}``."""
    seeds = []
    for s in report["seeds"]:
        if report.get("arm") == "sft_continue":
            from course_utils.models import load_bundle

            final = load_bundle(s["model"], device="cpu", seed=s["seed"])
            curve = sft_curve(Path(s["model"]).parent, train_families)
        else:
            final, curve = final_ppo_bundle(Path(s["run_dir"])), ppo_curve(Path(s["run_dir"]), train_families)
        measured = measure_seed(s["sft"]["model"], final, train_families, s["seed"], samples=samples)
        seeds.append({"seed": s["seed"], **measured, "curve": curve})
    return {"train_families": list(train_families), "kl_samples_per_prompt": samples, "seeds": seeds}
