"""How runs/example/arms/ and runs/example/rlhf_learning.json were made (kept so every number can be
traced; run from the repository root after the arms below, each one alone on 2 threads).

1. The arms, seeds one after another, nothing else running (the folders are given to this script):
       # (d) SFT warm-up + PPO on the checker                                  -> <checker>/
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --out <checker>/sft_ppo_checker.json
       # (e) SFT warm-up + PPO on the learned reward model of week 6 (beta 0.05) -> <learned>/
       COURSE_RM_DIR=runs/week06/reward_model python -m course_utils bench-learning --config configs/rlhf_cpu.yaml \
           --sft --out <learned>/sft_ppo_learned_rm.json
       # (e') the same with a stronger KL anchor (beta 0.2), for the over-optimisation figure -> <anchored>/
       ... the same command with --set kl_coef=0.2 --out <anchored>/sft_ppo_learned_rm.json
       (seed 0 ran first, seeds 1 and 2 a session later with --seeds 1 2 into a second folder; both
       folders are given to --anchored)
       # (c) the control: SFT alone for the whole 15-minute budget, no PPO     -> <full>/
       python -m course_utils bench-learning --sft-full --out <full>/sft_full.json
       # (d') a lever for (d): 4 PPO epochs stopped early at 1.5 x target_kl 0.02 -> <target_kl>/
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --set ppo_epochs=4 target_kl=0.02 \
           --out <target_kl>/sft_ppo_checker_tkl.json
       # (d'') a lever for (d): family-balanced prompts, weight p(1-p) of each family's recent pass rate -> <fs>/
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --set prompt_sampling=success_variance \
           --out <fs>/sft_ppo_checker_fs.json
       # a third lever for (d): (d') sampled at temperature 0.7 instead of 1.0 -> <low_temperature>/
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft \
           --set ppo_epochs=4 target_kl=0.02 temperature=0.7 --out <low_temperature>/sft_ppo_checker_t07.json
       # (d') with each prompt sampled 4 times (4 prompts per batch of 16) and RLOO's leave-one-out baseline
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --set ppo_epochs=4 target_kl=0.02 \
           samples_per_prompt=4 group_baseline=true --out <four_samples_rloo>/sft_ppo_checker_g4b.json
       # (d') with a trust region 2.5 times wider: the early stop at 1.5 x target_kl 0.05
       python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --set ppo_epochs=4 target_kl=0.05 \
           --out <target_kl_wide>/sft_ppo_checker_tkl05.json
   (all: --seeds 0 1 2 --minutes 15 --parallel 1 unless the JSON says otherwise; the SFT warm-up's
   training time is taken out of PPO's 15 minutes.)
2. This script, with nothing else running: every final policy answers the unseen-phrasing set too;
   the SFT starts and the checker arm's final policies are sampled 16 times per main-set prompt
   (pass@1, pass@16); the answers the reward model overpays are scored and quoted; then the JSON
   and the figures.

    COURSE_RM_DIR=runs/week06/reward_model python runs/example/arms/assemble.py --checker /tmp/arms --learned /tmp/arms2 \
        --anchored /tmp/arms_kl02 /tmp/arms_kl02b --full /tmp/arms_full --target-kl /tmp/arms_tkl \
        --family-sampling /tmp/arms_fs --low-temperature /tmp/arms_t07

Post-hoc measurements are cached in <learned>/posthoc.json, so a second call only redraws.

3. A lever measured after the other arms' temporary folders are gone: --add reads the committed
   rlhf_learning.json back, evaluates only the levers given (cache: <folder>/posthoc.json), and
   rewrites the JSON, the lever's kept runs and arms.png (the other arms' numbers are read, not
   recomputed; the over-optimisation figure is left as it is):

    python runs/example/arms/assemble.py --add --four-samples-rloo /tmp/arms_g4b --target-kl-wide /tmp/arms_tkl05
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from course_utils import sft, tasks
from course_utils.config import PPOConfig
from course_utils.lesson_aids import pipeline_plots
from course_utils.tasks import UNSEEN_SPLIT
from course_utils.trainer import PPOTrainer, balanced_subset

HERE = Path(__file__).resolve().parent
KEEP = ("report.md", "curves.png", "metrics.jsonl", "evals.jsonl", "summary.json", "config.json", "samples.json")
SAMPLES = 16
SETS = ("test", UNSEEN_SPLIT)
NOT_KEPT = "(a run folder, not kept)"
LEVERS = (  # (option, the JSON bench-learning wrote, arm name, what differs from (d))
    ("target-kl", "sft_ppo_checker_tkl.json", "sft_ppo_checker_target_kl",
     "ppo_epochs=4 and target_kl=0.02 (Spinning Up's early stop)"),
    ("family-sampling", "sft_ppo_checker_fs.json", "sft_ppo_checker_family_sampling",
     "prompt_sampling=success_variance (task families drawn with weight p(1-p) + 0.02 of their recent "
     "training pass rate)"),
    ("low-temperature", "sft_ppo_checker_t07.json", "sft_ppo_checker_target_kl_t0.7",
     "ppo_epochs=4, target_kl=0.02 and rollouts sampled at temperature 0.7 instead of 1.0 (recorded a "
     "session later, with the faster unmerged sampling: compare its updates per seed)"),
    ("target-kl-wide", "sft_ppo_checker_tkl05.json", "sft_ppo_checker_target_kl_0.05",
     "ppo_epochs=4 and target_kl=0.05 (the early stop of sft_ppo_checker_target_kl with a trust region 2.5 times "
     "wider)"),
    ("four-samples", "sft_ppo_checker_g4.json", "sft_ppo_checker_target_kl_4samples",
     "ppo_epochs=4, target_kl=0.02 and samples_per_prompt=4 (4 distinct prompts per batch of 16, each sampled "
     "4 times; value head and GAE as before)"),
    ("four-samples-rloo", "sft_ppo_checker_g4b.json", "sft_ppo_checker_target_kl_4samples_rloo",
     "ppo_epochs=4, target_kl=0.02, samples_per_prompt=4 and group_baseline=true (each score minus the mean of "
     "the other three responses to its prompt, RLOO's baseline, before GAE)"),
)


def mean_se(values: list[float]) -> dict:
    x = np.array(values, dtype=float)
    return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0}


def trainer_at_end(run_dir: Path, split: str = "test") -> PPOTrainer:
    """The run's final policy (its last checkpoint), evaluating on ``split``."""
    config = PPOConfig(**{**json.loads((run_dir / "config.json").read_text()), "eval_split": split})
    trainer = PPOTrainer(config, quiet=True)
    assert trainer.load_checkpoint(), f"no checkpoint in {run_dir}"
    return trainer


def held_out(split: str) -> list:
    return balanced_subset(tasks.load_split(split), 100)


def sampled(bundle, split: str, seed: int) -> dict:
    return sft.sampled_pass_rates(bundle, held_out(split), samples=SAMPLES, max_new_tokens=16, seed=seed)


def ppo_posthoc(run_dir: Path, seed: int, sample: bool) -> dict:
    """Unseen-phrasing greedy pass rate of a final PPO policy and, if ``sample``, its pass@1 and
    pass@16 on the main set (2.5 minutes per policy on 2 cores, so only for the arm that learned)."""
    trainer = trainer_at_end(run_dir, UNSEEN_SPLIT)
    out = {"unseen_pass": trainer.evaluate()["pass_rate"]}
    if sample:
        out["sampled_test"] = sampled(trainer.bundle, "test", seed)
    return out


def sft_posthoc(model_dir: Path, seed: int) -> dict:
    """pass@1 and pass@16 of an SFT start on the main set."""
    from course_utils.models import load_bundle

    bundle = load_bundle(str(model_dir), device="cpu", seed=seed)
    return {"test": sampled(bundle, "test", seed)}


def overpaid_answers(run_dir: Path, reward_dir: Path, top: int = 8) -> list[dict]:
    """The final held-out answers that fail the checker, ranked by the reward model's score."""
    from course_utils.reward_model import load_reward_model

    records = held_out("test")
    answers = [json.loads(line) for line in open(run_dir / "evals.jsonl")][-1]["answers"]
    model = load_reward_model(reward_dir)
    scores = model.score([r.prompt for r in records], answers, records).tolist()
    rows = [{"family": r.family, "prompt": r.prompt, "answer": a, "target": r.target, "rm_score": round(s, 3)}
            for r, a, s in zip(records, answers, scores) if not tasks.check(r, a).passed]
    return sorted(rows, key=lambda row: -row["rm_score"])[:top]


def copy_run(run_dir: Path, name: str) -> None:
    target = HERE / "learning" / name
    target.mkdir(parents=True, exist_ok=True)
    for file in KEEP:
        if (run_dir / file).is_file():
            shutil.copy(run_dir / file, target / file)
    for file in ("config.json", "report.md"):  # provenance: the temporary run folder was not kept
        if (target / file).is_file():
            text = (target / file).read_text()
            (target / file).write_text(text.replace(str(run_dir.parent), NOT_KEPT))
    sft_dir = run_dir.parent / f"{run_dir.name}-sft"
    if sft_dir.is_dir():
        (target / "sft").mkdir(exist_ok=True)
        for file in ("report.md", "loss.png"):
            shutil.copy(sft_dir / file, target / "sft" / file)


def merged_bench(folders: list[Path], json_name: str) -> dict:
    """One bench JSON from the runs of several calls (seeds run in more than one session)."""
    benches = [json.loads((folder / json_name).read_text()) for folder in folders]
    merged = {**benches[0], "seeds": [seed for bench in benches for seed in bench["seeds"]]}
    if len(benches) > 1:
        merged["summary"] = {"note": "summaries of the separate calls", "calls": [b["summary"] for b in benches]}
    return merged


def ppo_arm(folders: Path | list[Path], json_name: str, arm: str, cache: dict,
            sample: bool = False) -> tuple[dict, list[dict]]:
    bench = merged_bench(folders if isinstance(folders, list) else [folders], json_name)
    values = {"test": [], UNSEEN_SPLIT: []}
    for seed in bench["seeds"]:
        run_dir = Path(seed["run_dir"])
        key = f"{arm}/{run_dir.name}"
        if key not in cache:
            cache[key] = ppo_posthoc(run_dir, seed["seed"], sample)
        values["test"].append(100 * seed["pass_after"])
        values[UNSEEN_SPLIT].append(100 * cache[key]["unseen_pass"])
        copy_run(run_dir, f"{arm}-seed{seed['seed']}")
    kept_json(bench, arm)
    return values, bench["seeds"]


def kept_json(bench: dict, arm: str) -> None:
    """The bench JSON next to the kept runs, its paths pointing at what is kept here."""
    kept = json.loads(json.dumps(bench))
    for seed in kept["seeds"]:
        if "run_dir" in seed:
            seed["run_dir"] = f"runs/example/arms/learning/{arm}-seed{seed['seed']}"
        if "sft" in seed or "model" in seed:
            (seed.get("sft") or seed)["model"] = "(not kept: a 540 MB model folder; rerun the command to rebuild it)"
    (HERE / f"{arm}.json").write_text(json.dumps(kept, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("checker", "learned", "full", *(lever[0] for lever in LEVERS)):
        p.add_argument(f"--{name}", type=Path)
    p.add_argument("--anchored", type=Path, nargs="+", help="the folder(s) of the beta 0.2 arm's seeds")
    p.add_argument("--reward-model", type=Path, default=Path("runs/week06/reward_model"))
    p.add_argument("--add", action="store_true", help="only merge the levers given into the committed report")
    args = p.parse_args()
    if args.add:
        return add_levers(args)
    cache_file = args.learned / "posthoc.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}

    def save_cache():
        cache_file.write_text(json.dumps(cache, indent=1) + "\n")

    arms: dict[str, dict[str, list[float]]] = {}
    checker, checker_seeds = ppo_arm(args.checker, "sft_ppo_checker.json", "sft_ppo_checker", cache, sample=True)
    save_cache()
    # (a) and (b) from the warm-ups' own before/after evaluations (greedy, so the base model is one number).
    warm = [s["sft"] for s in checker_seeds]
    arms["base"] = {split: [100 * warm[0]["pass_before"][split]] for split in SETS}
    arms["sft"] = {split: [100 * w["pass_after"][split] for w in warm] for split in SETS}
    if args.full and (args.full / "sft_full.json").is_file():
        full = json.loads((args.full / "sft_full.json").read_text())
        arms["sft_full"] = {split: [100 * s["pass_after"][split] for s in full["seeds"]] for split in SETS}
        kept_json(full, "sft_full")
    arms["sft_ppo_checker"] = checker
    learned, learned_seeds = ppo_arm(args.learned, "sft_ppo_learned_rm.json", "sft_ppo_learned_rm", cache)
    arms["sft_ppo_learned_rm"] = learned
    save_cache()
    anchored_seeds = []
    if args.anchored and all((folder / "sft_ppo_learned_rm.json").is_file() for folder in args.anchored):
        arms["sft_ppo_learned_rm_kl0.2"], anchored_seeds = ppo_arm(args.anchored, "sft_ppo_learned_rm.json",
                                                                   "sft_ppo_learned_rm_kl0.2", cache)
        save_cache()
    lever_seeds = {}
    for option, json_name, arm, _ in LEVERS:
        folder = getattr(args, option.replace("-", "_"))
        if folder and (folder / json_name).is_file():
            arms[arm], lever_seeds[arm] = ppo_arm(folder, json_name, arm, cache)
            save_cache()
    instruct = json.loads((HERE.parent / "learning.json").read_text())
    arms["ppo_instruct"] = {"test": [100 * s["pass_after"] for s in instruct["seeds"]]}

    # The ceiling: pass@16 of each seed's SFT start (the checker arm's warm-ups).
    for s in checker_seeds:
        key = f"sft_start/seed{s['seed']}"
        if key not in cache:
            cache[key] = sft_posthoc(Path(s["sft"]["model"]), s["seed"])
            save_cache()
    starts = [cache[f"sft_start/seed{s['seed']}"] for s in checker_seeds]
    ceiling = {"test": [100 * st["test"]["pass_at_k"] for st in starts]}
    pass_at = {"sft": {"test": {"pass_at_1": [100 * st["test"]["pass_at_1"] for st in starts],
                                "pass_at_16": ceiling["test"]}}}
    per_family = {"sft": {f: {"pass_at_1": float(np.mean([100 * st["test"]["per_family"][f]["pass_at_1"] for st in starts])),
                              "pass_at_16": float(np.mean([100 * st["test"]["per_family"][f]["pass_at_k"] for st in starts]))}
                          for f in starts[0]["test"]["per_family"]}}
    # What PPO on the checker did to pass@1 and pass@16, family by family.
    arm, seeds = "sft_ppo_checker", checker_seeds
    runs = [cache[f"{arm}/{Path(s['run_dir']).name}"]["sampled_test"] for s in seeds]
    pass_at[arm] = {"test": {"pass_at_1": [100 * r["pass_at_1"] for r in runs],
                             "pass_at_16": [100 * r["pass_at_k"] for r in runs]}}
    per_family[arm] = {f: {"pass_at_1": float(np.mean([100 * r["per_family"][f]["pass_at_1"] for r in runs])),
                           "pass_at_16": float(np.mean([100 * r["per_family"][f]["pass_at_k"] for r in runs])),
                           "greedy_after": float(np.mean([100 * s["per_task_after"][f] for s in seeds])),
                           "greedy_before": float(np.mean([100 * s["per_task_before"][f] for s in seeds]))}
                       for f in runs[0]["per_family"]}

    # Over-optimisation: every learned-reward run's evaluations against sqrt(KL).
    curves = {}
    for label, seeds in (("β=0.05", learned_seeds), ("β=0.2", anchored_seeds)):
        for s in seeds:
            run_dir = Path(s["run_dir"])
            evals = [json.loads(line) for line in open(run_dir / "evals.jsonl")]
            history = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
            curves[f"{label} seed {s['seed']}"] = pipeline_plots.overoptimisation_points(evals, history)
    if "overpaid" not in cache:
        cache["overpaid"] = {f"seed{s['seed']}": overpaid_answers(Path(s["run_dir"]), args.reward_model)
                             for s in learned_seeds}
        save_cache()

    arms = {arm: {split: [round(v, 2) for v in values] for split, values in sets.items()} for arm, sets in arms.items()}
    report = {
        "arms": arms,
        "ceiling": {split: [round(v, 2) for v in values] for split, values in ceiling.items()},
        "summary": {arm: {split: mean_se(values) for split, values in sets.items()} for arm, sets in arms.items()},
        "gain_over_sft_points": {arm: mean_se([a - b for a, b in zip(arms[arm]["test"], arms["sft"]["test"])])
                                 for arm in arms if arm.startswith("sft_") and len(arms[arm]["test"]) == 3},
        "pass_at_k": pass_at,
        "per_family_test": per_family,
        "overoptimisation": curves,
        "overpaid_answers": cache["overpaid"],
        "per_seed_updates": {arm: [s["updates"] for s in seeds] for arm, seeds in
                             (("sft_ppo_checker", checker_seeds), ("sft_ppo_learned_rm", learned_seeds),
                              ("sft_ppo_learned_rm_kl0.2", anchored_seeds), *lever_seeds.items()) if seeds},
        "per_seed_sft_train_minutes": [w["train_minutes"] for w in warm],
        "notes": notes(arms),
    }
    (HERE.parent / "rlhf_learning.json").write_text(json.dumps(report, indent=1) + "\n")

    draw_arms(report)
    start = float(np.mean(arms["sft"]["test"]))
    pipeline_plots.plot_overoptimisation(curves, start_gold=start).savefig(HERE / "overoptimisation.png", dpi=90)


def notes(arms: dict) -> str:
    return ("test: 100 held-out prompts (10 per family), greedy, strict checker; test_unseen: the same prompts "
            "in instruction phrasings no training or SFT prompt uses. base: the instruct model (greedy, so one "
            "number). ppo_instruct: the cpu preset from the instruct model (runs/example/learning.json). "
            + "".join(f"{arm}: (d) with {what}. " for _, _, arm, what in LEVERS if arm in arms)
            + f"ceiling: pass@{SAMPLES} at temperature 1 of each seed's SFT start on the main set (test).")


def draw_arms(report: dict) -> None:
    """arms.png from the report, and each arm's mean ± standard error printed."""
    import matplotlib

    matplotlib.use("Agg")
    labels = {"test": "main held-out set", UNSEEN_SPLIT: "unseen phrasings"}
    pipeline_plots.plot_arms(report["arms"], report["ceiling"], labels, k=SAMPLES).savefig(HERE / "arms.png", dpi=90)
    for arm, sets in report["summary"].items():
        print(arm, {split: f"{v['mean']:.1f} ± {v['se']:.1f}" for split, v in sets.items()})


def add_levers(args: argparse.Namespace) -> None:
    """Step 3 of the docstring: new levers merged into the committed report."""
    path = HERE.parent / "rlhf_learning.json"
    report = json.loads(path.read_text())
    arms = report["arms"]
    for option, json_name, arm, _ in LEVERS:
        folder = getattr(args, option.replace("-", "_"))
        if not folder:
            continue
        if not (folder / json_name).is_file():
            raise SystemExit(f"--{option}: no {json_name} in {folder}; run its bench-learning command first")
        cache_file = folder / "posthoc.json"
        cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
        values, seeds = ppo_arm(folder, json_name, arm, cache)
        cache_file.write_text(json.dumps(cache, indent=1) + "\n")
        arms[arm] = {split: [round(v, 2) for v in per_seed] for split, per_seed in values.items()}
        report["summary"][arm] = {split: mean_se(per_seed) for split, per_seed in arms[arm].items()}
        report["gain_over_sft_points"][arm] = mean_se([a - b for a, b in zip(arms[arm]["test"], arms["sft"]["test"])])
        report["per_seed_updates"][arm] = [s["updates"] for s in seeds]
    arms["ppo_instruct"] = arms.pop("ppo_instruct")  # the reference row stays last in the figure
    report["summary"]["ppo_instruct"] = report["summary"].pop("ppo_instruct")
    report["notes"] = notes(arms)
    path.write_text(json.dumps(report, indent=1) + "\n")
    draw_arms(report)


if __name__ == "__main__":
    main()
