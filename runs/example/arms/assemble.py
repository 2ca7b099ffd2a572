"""How runs/example/arms/ was made (kept so the numbers can be traced; run from the repository root).

1. The arm itself, seeds one after another on 2 threads, nothing else running:
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --seeds 0 1 2 \
           --minutes 15 --parallel 1 --out /tmp/arms/sft_ppo_checker.json
   (each seed: the 200-demo SFT warm-up, then PPO from it for 15 minutes minus the warm-up's
   training time; the run folders are in /tmp/arms/learning/, models and checkpoints not kept here)
2. This script: every seed's final policy (its last checkpoint) answers the unseen-phrasing set
   too, then the per-seed numbers go into rlhf_learning.json with mean and standard error.

    python runs/example/arms/assemble.py /tmp/arms
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from course_utils.config import PPOConfig
from course_utils.tasks import UNSEEN_SPLIT
from course_utils.trainer import PPOTrainer

HERE = Path(__file__).resolve().parent
KEEP = ("report.md", "curves.png", "metrics.jsonl", "evals.jsonl", "summary.json", "config.json", "samples.json")


def unseen_pass_rate(run_dir: Path) -> float:
    config = PPOConfig(**{**json.loads((run_dir / "config.json").read_text()), "eval_split": UNSEEN_SPLIT})
    trainer = PPOTrainer(config, quiet=True)
    assert trainer.load_checkpoint(), f"no checkpoint in {run_dir}"
    return trainer.evaluate()["pass_rate"]


def mean_se(values: list[float]) -> dict:
    x = np.array(values, dtype=float)
    return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0}


def main(source: Path) -> None:
    bench = json.loads((source / "sft_ppo_checker.json").read_text())
    arms = {"sft": {"test": [], UNSEEN_SPLIT: []}, "sft_ppo_checker": {"test": [], UNSEEN_SPLIT: []}}
    for seed in bench["seeds"]:
        run_dir = Path(seed["run_dir"])
        arms["sft"]["test"].append(100 * seed["pass_before"])  # PPO's own evaluation of its start
        arms["sft"][UNSEEN_SPLIT].append(100 * seed["sft"]["pass_after"][UNSEEN_SPLIT])
        arms["sft_ppo_checker"]["test"].append(100 * seed["pass_after"])
        arms["sft_ppo_checker"][UNSEEN_SPLIT].append(100 * unseen_pass_rate(run_dir))
        target = HERE / "learning" / run_dir.name
        target.mkdir(parents=True, exist_ok=True)
        for name in KEEP:
            if (run_dir / name).is_file():
                shutil.copy(run_dir / name, target / name)
        sft_dir = run_dir.parent / f"{run_dir.name}-sft"
        (target / "sft").mkdir(exist_ok=True)
        for name in ("report.md", "loss.png"):
            shutil.copy(sft_dir / name, target / "sft" / name)
    arms = {arm: {split: [round(v, 2) for v in values] for split, values in sets.items()} for arm, sets in arms.items()}
    instruct = json.loads((HERE.parent / "learning.json").read_text())
    arms["ppo_instruct"] = {"test": [round(100 * s["pass_after"], 2) for s in instruct["seeds"]]}
    record = {
        "arms": arms,
        "ceiling": {},  # the sampled pass@16 of the SFT start: not measured yet
        "summary": {arm: {split: mean_se(v) for split, v in sets.items()} for arm, sets in arms.items()},
        "gain_over_sft_points": mean_se([a - b for a, b in zip(arms["sft_ppo_checker"]["test"], arms["sft"]["test"])]),
        "per_seed_updates": [s["updates"] for s in bench["seeds"]],
        "per_seed_sft_train_minutes": [s["sft"]["train_minutes"] for s in bench["seeds"]],
        "bench_learning": {k: bench[k] for k in ("config", "minutes", "parallel", "threads_per_run", "machine",
                                                 "load_average_after", "wall_minutes_total", "versions")},
        "notes": "test: 100 held-out prompts (10 per family); test_unseen: the same prompts in unseen phrasings. "
                 "ppo_instruct: the cpu preset from the instruct model (runs/example/learning.json). "
                 "Arms base, sft_full and sft_ppo_learned_rm: not measured yet.",
    }
    (HERE.parent / "rlhf_learning.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["summary"], indent=1))
    print("gain over SFT:", record["gain_over_sft_points"])


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/arms"))
