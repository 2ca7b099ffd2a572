"""How runs/example/designs/ and runs/example/when_ppo_wins.json were made: the designs of lesson 11
("When is PPO worth it?", issue 30), measured like the pipeline's arms (runs/example/arms/assemble.py):
15 training minutes per seed with any SFT inside, 2 threads, one run at a time, 3 seeds, strict greedy
held-out pass rate per seed. Run from the repository root, nothing else running.

Design (g), tasks no demonstration covers. Two families, lowercase_word and number_only, have no
demonstrations; the other eight have theirs. Chosen on the VALIDATION split: a 200-demo warm-up without
the demonstrations of lowercase_word, number_only and bracket_word answered them with pass@16 of 0.3,
0.3 and 0.0 (16 samples of 10 validation prompts each; the probe ran in a temporary folder
that was not kept, so "selection_on_validation" below copies its numbers from the session log), so
bracket_word got its demonstrations back: with pass@16 = 0 PPO has nothing to reinforce there (lesson 6a).

    FAM="result_sum json_object comma_no_spaces yes_no_parity alphabetical_order count_words uppercase_word bracket_word"
    # warm-up on the eight families' demonstrations + PPO on every family's prompts with the checker
    python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --demo-families $FAM \\
        --out <nodemo_ppo>/sft_ppo_checker_nodemo.json
    # the control: SFT alone on every demonstration that exists (the eight families', 320) for the budget
    python -m course_utils bench-learning --sft-full --demo-families $FAM --out <nodemo_full>/sft_full_nodemo.json
    python -m course_utils bench-learning --sft-full --self-samples 4 --resample-every 25 --demo-families $FAM \\
        --out <nodemo_filtered>/sft_filtered_nodemo.json     (ran at 95b7d82, lost; on main since 055ee51; run_filtered_g.sh)

(--seeds 0 1 2 --minutes 15 --parallel 1, the defaults.) Then this script evaluates each final PPO
policy on the unseen phrasings (the SFT runs evaluated both sets themselves) and writes the JSON:

    python runs/example/designs/assemble_designs.py --nodemo-ppo /tmp/arms_g/ppo --nodemo-full /tmp/arms_g/full --nodemo-filtered /tmp/arms_fg

Post-hoc evaluations are cached in <nodemo_ppo>/posthoc.json.

Design (f), the noisy teacher. A share RATE of the demonstrations is replaced by a labeler's mistake
(course_utils/noisy_teacher.py; style "habit": one mistake per family, always the same, so past 1/2 the
mistake is the majority answer). Each arm is added on its own, as it finishes (the arms take sessions):

    python -m course_utils bench-learning --sft-full --demo-noise RATE --out <dir>/sft_full_noisy.json
    python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --demo-noise RATE --out <dir>/ppo.json
    python -m course_utils bench-learning --config configs/rlhf_cpu.yaml --sft --demo-noise RATE --out <dir>/rm.json
    python -m course_utils bench-learning --sft-full --demo-noise RATE --demo-filter --self-samples 4 --out <dir>/filtered.json

    python runs/example/designs/assemble_designs.py --noisy-arm sft_full RATE <dir>/sft_full_noisy.json
    (kinds: sft_full, sft_ppo_checker, sft_ppo_learned_rm, sft_filtered; the PPO kinds also record their
    noisy warm-up as sft_warm_up)

Arms land in when_ppo_wins.json under designs.f_noisy_teacher.arms["<kind>@<RATE>"][set] (per seed, percent).

Design (h), retention. From the same 200-demo warm-up, PPO (checker) and SFT spend the rest of the 15
minutes on FAM only (chosen on the validation split by retention/select_on_validation.py); each arm
measures per seed every family's test pass rate and KL(pi_start || pi) from the warm-up (retention/run_*.sh):

    python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --train-families $FAM --out <dir>/ppo.json
    python -m course_utils bench-learning --sft-continue --train-families $FAM --out <dir>/sft.json
    python runs/example/designs/assemble_designs.py --retention-arm sft_ppo_checker <dir>/ppo.json
    python runs/example/designs/assemble_designs.py --retention-arm sft_continue <dir>/sft.json

Arms land under designs.h_retention.arms["<kind>_retention"][set] (per seed): test_trained, test_others,
test (percent, after), start_test_trained/start_test_others (the warm-up), gain_trained/change_others
(points), kl_trained/kl_others (nats per answer); with both arms, ppo_minus_sft_paired (by seed).

The figures of designs (f) and (h) (lesson 11 draws the same ones) are redrawn from the report with

    python runs/example/designs/assemble_designs.py --figures
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "arms"))
from assemble import NOT_KEPT, mean_se, trainer_at_end  # noqa: E402  (the arms' script: one copy of each)

from course_utils.tasks import UNSEEN_SPLIT  # noqa: E402

OUT = HERE.parent / "when_ppo_wins.json"
KEEP = ("report.md", "curves.png", "metrics.jsonl", "evals.jsonl", "summary.json", "config.json", "samples.json",
        "metrics.json", "loss.png")  # a PPO run's files, then an SFT run's
WITHHELD = ("lowercase_word", "number_only")
SETS = ("test", UNSEEN_SPLIT)


def share(per_family: dict, families) -> float:
    """Pass rate in percent over ``families`` (each family has the same number of held-out prompts)."""
    return 100 * float(np.mean([per_family[f] for f in families]))


def measures(per_family: dict[str, dict[str, float]], withheld) -> dict[str, float]:
    """Every held-out set of design (g) from per-family pass rates of the two held-out sets:
    the whole set, the demo-less families (``<set>_nodemo``) and the families with demos (``<set>_demo``)."""
    out = {}
    for split in SETS:
        families = sorted(per_family[split])
        covered = [f for f in families if f not in withheld]
        out[split] = share(per_family[split], families)
        out[f"{split}_nodemo"] = share(per_family[split], withheld)
        out[f"{split}_demo"] = share(per_family[split], covered)
    return out


def keep_run(run_dir: Path, name: str, warm_up: Path | None = None) -> None:
    """A run's logs and report under designs/learning/<name>/ (its SFT warm-up's in sft/), the
    temporary paths blanked; models, adapters and checkpoints are not kept."""
    for source, target in ((run_dir, HERE / "learning" / name), (warm_up, HERE / "learning" / name / "sft")):
        if source is None:
            continue
        target.mkdir(parents=True, exist_ok=True)
        for file in KEEP:
            if (source / file).is_file():
                text = (source / file).read_bytes()
                if file.endswith((".md", ".json")):
                    text = text.decode().replace(str(source.parent), NOT_KEPT).encode()
                (target / file).write_bytes(text)


def sft_metrics(folder: Path) -> dict[str, dict[str, float]]:
    """Per-family pass rates after an SFT run, from its metrics.json: {set: {family: rate}}."""
    metrics = json.loads((folder / "metrics.json").read_text())
    return {split: metrics["after"][split]["per_family"] for split in SETS}


def design_g(ppo_dir: Path, full_dir: Path, filtered_dir: Path, withheld) -> dict:
    cache_file = ppo_dir / "posthoc.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    ppo = json.loads((ppo_dir / "sft_ppo_checker_nodemo.json").read_text())
    full = json.loads((full_dir / "sft_full_nodemo.json").read_text())
    filtered = json.loads((filtered_dir / "sft_filtered_nodemo.json").read_text())
    arms: dict[str, dict[str, list[float]]] = {"sft_nodemo": {}, "sft_ppo_checker_nodemo": {}, "sft_full_nodemo": {},
                                               "sft_filtered_nodemo": {}}
    updates = []
    for seed in ppo["seeds"]:
        run_dir = Path(seed["run_dir"])
        key = run_dir.name
        if key not in cache:
            trainer = trainer_at_end(run_dir, UNSEEN_SPLIT)
            cache[key] = {"unseen_per_family": trainer.evaluate()["pass_rate_per_task"]}
            cache_file.write_text(json.dumps(cache, indent=1) + "\n")
        warm = sft_metrics(run_dir.parent / f"{run_dir.name}-sft")
        final = {"test": seed["per_task_after"], UNSEEN_SPLIT: cache[key]["unseen_per_family"]}
        for arm, per_family in (("sft_nodemo", warm), ("sft_ppo_checker_nodemo", final)):
            for name, value in measures(per_family, withheld).items():
                arms[arm].setdefault(name, []).append(value)
        updates.append(seed["updates"])
        keep_run(run_dir, f"sft_ppo_checker_nodemo-seed{seed['seed']}", run_dir.parent / f"{run_dir.name}-sft")
    for seed in full["seeds"]:
        folder = full_dir / "learning" / f"sft_full-seed{seed['seed']}-sft"
        for name, value in measures(sft_metrics(folder), withheld).items():
            arms["sft_full_nodemo"].setdefault(name, []).append(value)
        keep_run(folder, f"sft_full_nodemo-seed{seed['seed']}")
    # filtered SFT: its runs are kept by run_filtered_g.sh's copy in learning_filtered/ (metrics, report, log)
    for seed in filtered["seeds"]:
        folder = filtered_dir / "learning" / f"sft_filtered-seed{seed['seed']}-sft"
        for name, value in measures(sft_metrics(folder), withheld).items():
            arms["sft_filtered_nodemo"].setdefault(name, []).append(value)
    paired = {control: {name: mean_se(list(np.subtract(arms["sft_ppo_checker_nodemo"][name], arms[control][name])))
                        for name in arms[control]}
              for control in ("sft_full_nodemo", "sft_filtered_nodemo")}
    return {
        "withheld": list(withheld),
        "what": "lowercase_word and number_only have no demonstrations; SFT gets the 320 of the other eight "
                "families, PPO trains on all ten families' prompts with the checker",
        "arms": arms,
        "summary": {arm: {name: mean_se(values) for name, values in sets.items()} for arm, sets in arms.items()},
        "ppo_minus_sft_full_paired": paired["sft_full_nodemo"],
        "ppo_minus_sft_filtered_paired": paired["sft_filtered_nodemo"],
        "ppo_updates": updates,
        "selection_on_validation": {"withheld_then": ["lowercase_word", "number_only", "bracket_word"],
                                    "pass_at_16": {"lowercase_word": 0.3, "number_only": 0.3, "bracket_word": 0.0},
                                    "pass_at_1": {"lowercase_word": 0.025, "number_only": 0.031, "bracket_word": 0.0}},
    }


NOISY_KINDS = ("sft_full", "sft_ppo_checker", "sft_ppo_learned_rm", "sft_filtered")


def whole_sets(per_family: dict[str, dict[str, float]]) -> dict[str, float]:
    """Pass rate in percent over every family of each held-out set."""
    return {split: share(per_family[split], sorted(per_family[split])) for split in SETS}


def noisy_arm(kind: str, rate: float, bench_json: Path) -> dict[str, dict]:
    """One finished arm of design (f), from the JSON ``bench-learning`` wrote: ``{arm name: {set: per
    seed}}`` (a PPO arm also gives its noisy warm-up), with each run's logs kept under learning/."""
    bench = json.loads(bench_json.read_text())
    if bench.get("demo_noise") != rate:
        raise SystemExit(f"{bench_json} ran at demo_noise={bench.get('demo_noise')}, not {rate}")
    name = f"{kind}@{rate:g}"
    arms: dict[str, dict] = {name: {}}
    folder = bench_json.parent / "learning"
    if kind in ("sft_full", "sft_filtered"):
        for seed in bench["seeds"]:
            run = folder / f"{bench['arm']}-seed{seed['seed']}-sft"
            for split, value in whole_sets(sft_metrics(run)).items():
                arms[name].setdefault(split, []).append(value)
            arms[name].setdefault("sft_steps", []).append(seed["steps"])
            arms[name].setdefault("seeds", []).append(seed["seed"])
            keep_run(run, f"f_{kind}_noise{rate:g}-seed{seed['seed']}")
        return arms
    warm = f"sft_warm_up@{rate:g}"
    arms[warm] = {}
    cache_file = bench_json.parent / "posthoc.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    for seed in bench["seeds"]:
        run_dir = Path(seed["run_dir"])
        if run_dir.name not in cache:  # the final policy on the unseen phrasings, evaluated once
            cache[run_dir.name] = trainer_at_end(run_dir, UNSEEN_SPLIT).evaluate()["pass_rate_per_task"]
            cache_file.write_text(json.dumps(cache, indent=1) + "\n")
        final = {"test": seed["per_task_after"], UNSEEN_SPLIT: cache[run_dir.name]}
        for split, value in whole_sets(final).items():
            arms[name].setdefault(split, []).append(value)
        arms[name].setdefault("ppo_updates", []).append(seed["updates"])
        arms[name].setdefault("seeds", []).append(seed["seed"])
        arms[warm].setdefault("seeds", []).append(seed["seed"])
        warm_dir = run_dir.parent / f"{run_dir.name}-sft"
        for split, value in whole_sets(sft_metrics(warm_dir)).items():
            arms[warm].setdefault(split, []).append(value)
        keep_run(run_dir, f"f_{kind}_noise{rate:g}-seed{seed['seed']}", warm_dir)
    return arms


def add_seeds(arm: dict, more: dict, name: str) -> None:
    """Append another run's seeds to an arm already in the report (an arm's seeds can be run in
    different sessions); the same seed twice would count one run as two, so it is refused."""
    have = arm["seeds"]
    again = sorted(set(have) & set(more["seeds"]))
    if again:
        raise SystemExit(f"{name} already has seed(s) {again}; drop --add-seeds to replace the arm instead")
    for key, values in more.items():
        if key != "seeds":
            arm.setdefault(key, []).extend(values)
    arm["seeds"] = have + more["seeds"]


def add_noisy_arm(report: dict, kind: str, rate: float, bench_json: Path, extend: bool = False) -> dict:
    design = report["designs"].setdefault("f_noisy_teacher", {
        "what": "a share of the demonstrations (the rate after @ in each arm's name) replaced by a labeler's "
                "mistake, one habit per family (noisy_teacher, style habit); every family has demonstrations",
        "style": "habit", "arms": {}})
    for name, sets in noisy_arm(kind, rate, bench_json).items():
        if extend and name in design["arms"]:
            add_seeds(design["arms"][name], sets, name)
        else:
            design["arms"][name] = sets
    design["summary"] = {arm: {split: mean_se(values) for split, values in sets.items() if split in SETS}
                         for arm, sets in design["arms"].items()}
    return design


RETENTION_KINDS = ("sft_ppo_checker", "sft_continue")
"""Design (h)'s arms: PPO on the checker from the warm-up (bench-learning --sft --train-families) and
SFT continued from the warm-up (bench-learning --sft-continue --train-families)."""


def retention_arm(kind: str, bench_json: Path) -> tuple[list[str], dict]:
    """One finished arm of design (h) from its bench JSON (with the "retention" block that
    bench-learning measured): ``(train families, {set: per seed})`` with the sets ``test_trained``,
    ``test_others`` and ``test`` (after), ``start_test_trained``/``start_test_others`` (its warm-up),
    ``gain_trained``/``change_others`` (points) and ``kl_trained``/``kl_others`` (nats per answer,
    KL(π_start ‖ π)); each run's logs are kept under learning/."""
    bench = json.loads(bench_json.read_text())
    if (bench.get("arm") == "sft_continue") != (kind == "sft_continue") or "retention" not in bench:
        raise SystemExit(f"{bench_json} is not a finished {kind} arm of design (h) (no 'retention' block, or another arm)")
    measured = bench["retention"]
    trained = measured["train_families"]
    arm: dict[str, list] = {}
    for run, seed in zip(bench["seeds"], measured["seeds"]):
        others = sorted(set(seed["after"]) - set(trained))
        values = {"test_trained": share(seed["after"], trained), "test_others": share(seed["after"], others),
                  "test": share(seed["after"], sorted(seed["after"])),
                  "start_test_trained": share(seed["before"], trained), "start_test_others": share(seed["before"], others),
                  "gain_trained": seed["gain_trained"], "change_others": seed["change_others"],
                  "kl_trained": seed["kl_from_start"]["trained"]["kl_per_answer"],
                  "kl_others": seed["kl_from_start"]["others"]["kl_per_answer"], "seeds": seed["seed"]}
        for key, value in values.items():
            arm.setdefault(key, []).append(value)
        arm.setdefault("curves", []).append(seed["curve"])  # gain and change along the run
        if kind == "sft_continue":
            arm.setdefault("sft_steps", []).append(run["steps"])
            folder, warm = Path(run["model"]).parent, Path(run["sft"]["model"]).parent
        else:
            arm.setdefault("ppo_updates", []).append(run["updates"])
            folder, warm = Path(run["run_dir"]), Path(run["sft"]["model"]).parent
        keep_run(folder, f"h_{kind}-seed{seed['seed']}", warm)
    return trained, arm


def add_retention_arm(report: dict, kind: str, bench_json: Path) -> dict:
    trained, arm = retention_arm(kind, bench_json)
    design = report["designs"].setdefault("h_retention", {"train_families": trained, "arms": {}})
    if design["train_families"] != trained:
        raise SystemExit(f"{bench_json} trained {trained}, but design (h) holds arms trained on {design['train_families']}")
    design["what"] = ("from the same 200-demo SFT warm-up, PPO (checker) and SFT spend the rest of the 15 minutes on "
                      f"{', '.join(trained)} only; test pass rates of those (trained) and of the other families, and "
                      "KL(pi_start || pi) in nats per answer on each group's test prompts")
    design["arms"][f"{kind}_retention"] = arm
    selection = HERE / "retention" / "selection_validation.json"
    if selection.is_file():  # how the trained families were chosen (validation split)
        picked = json.loads(selection.read_text())
        design["selection_on_validation"] = {k: picked[k] for k in ("rule", "greedy", "pass_at_16", "train_families")}
    per_seed = [k for k in arm if k not in ("seeds", "curves", "sft_steps", "ppo_updates")]
    design["summary"] = {name: {k: mean_se(a[k]) for k in per_seed if k in a} for name, a in design["arms"].items()}
    if {"sft_ppo_checker_retention", "sft_continue_retention"} <= set(design["arms"]):
        ppo, sft_arm = design["arms"]["sft_ppo_checker_retention"], design["arms"]["sft_continue_retention"]
        if ppo["seeds"] == sft_arm["seeds"]:  # paired by seed: the same warm-up seed
            design["ppo_minus_sft_paired"] = {k: mean_se(list(np.subtract(ppo[k], sft_arm[k])))
                                              for k in ("gain_trained", "change_others", "kl_trained", "kl_others")}
            design["at_equal_gain"] = at_equal_gain(ppo, sft_arm)
    return design


def at_equal_gain(ppo: dict, sft_arm: dict) -> dict:
    """Per seed, both arms' change on the other families where their paths first reach the same gain
    on the trained ones (the smaller of the two final gains; retention.change_at_gain), and whether
    PPO kept at least half of the points SFT lost there (the issue's target; None where SFT lost none)."""
    from course_utils.retention import change_at_gain

    out: dict[str, list] = {"gain": [], "ppo_change": [], "sft_change": [], "ppo_keeps_half": []}
    for ppo_curve, sft_curve in zip(ppo["curves"], sft_arm["curves"]):
        gain = min(ppo_curve[-1]["gain_trained"], sft_curve[-1]["gain_trained"])
        p, q = (change_at_gain(ppo_curve, gain), change_at_gain(sft_curve, gain)) if gain > 0 else (None, None)
        out["gain"].append(gain)
        out["ppo_change"].append(p)
        out["sft_change"].append(q)
        out["ppo_keeps_half"].append(None if p is None or q is None or q >= 0 else bool(p >= q / 2))
    return out


def draw_figures(out_dir: Path = HERE) -> list[Path]:
    """Design (f)'s crossover and design (h)'s retention figures, drawn from the committed runs by the
    functions lesson 11 calls (sections 4 and 5), saved beside this script for the README and the issue."""
    from course_utils.lesson_aids import capstone

    measured = capstone.load_measurements(HERE.parent)
    designs = measured["designs"]
    figures = {"noise_crossover.png": capstone.plot_noise_crossover(
                   capstone.noise_levels(designs["f_noisy_teacher"], clean_arms=measured["pipeline"]["arms"])),
               "retention.png": capstone.plot_retention(designs["h_retention"])}
    for name, figure in figures.items():
        figure.savefig(out_dir / name, dpi=90, bbox_inches="tight")
    return [out_dir / name for name in figures]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodemo-ppo", type=Path)
    p.add_argument("--nodemo-full", type=Path)
    p.add_argument("--nodemo-filtered", type=Path)
    p.add_argument("--noisy-arm", nargs=3, metavar=("KIND", "RATE", "BENCH_JSON"),
                   help=f"add one arm of design (f); KIND is one of {', '.join(NOISY_KINDS)}")
    p.add_argument("--retention-arm", nargs=2, metavar=("KIND", "BENCH_JSON"),
                   help=f"add one arm of design (h); KIND is one of {', '.join(RETENTION_KINDS)}")
    p.add_argument("--add-seeds", action="store_true",
                   help="with --noisy-arm: add this run's seeds to the arm already in the report (else it is replaced)")
    p.add_argument("--figures", action="store_true",
                   help="only draw noise_crossover.png and retention.png from the committed report")
    args = p.parse_args(argv)
    report = json.loads(OUT.read_text()) if OUT.is_file() else {"designs": {}}
    if args.figures:
        for path in draw_figures():
            print(f"wrote {path}")
        return report
    if args.retention_arm:
        kind, bench_json = args.retention_arm
        if kind not in RETENTION_KINDS:
            raise SystemExit(f"unknown arm kind {kind!r}; choose one of {', '.join(RETENTION_KINDS)}")
        summary = add_retention_arm(report, kind, Path(bench_json))["summary"]
    elif args.noisy_arm:
        kind, rate, bench_json = args.noisy_arm
        if kind not in NOISY_KINDS:
            raise SystemExit(f"unknown arm kind {kind!r}; choose one of {', '.join(NOISY_KINDS)}")
        summary = add_noisy_arm(report, kind, float(rate), Path(bench_json), args.add_seeds)["summary"]
    else:
        if not (args.nodemo_ppo and args.nodemo_full and args.nodemo_filtered):
            raise SystemExit("design (g) needs --nodemo-ppo, --nodemo-full and --nodemo-filtered (or use --noisy-arm)")
        report["designs"]["g_no_demonstrations"] = design_g(args.nodemo_ppo, args.nodemo_full, args.nodemo_filtered,
                                                            WITHHELD)
        summary = report["designs"]["g_no_demonstrations"]["summary"]
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    for arm, sets in summary.items():
        print(arm, {name: f"{v['mean']:.1f} ± {v['se']:.1f}" for name, v in sets.items()})
    print(f"wrote {OUT}")
    return report


if __name__ == "__main__":
    main()
