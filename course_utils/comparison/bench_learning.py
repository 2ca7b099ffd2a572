"""Does PPO learn on this machine? The laptop preset, several seeds, one training-time budget.

    python -m course_utils bench-learning                      # = make bench-learning
    python -m course_utils bench-learning --seeds 0 1 2 --minutes 15 --parallel 1 --out runs/learning.json

Each seed is one ordinary run of ``course_utils.trainer`` (``python -m course_utils ppo``) in a
child process, with ``max_train_minutes`` set to the budget: it trains until the updates' wall
time reaches the budget (held-out evaluations and checkpoints are not counted), then evaluates
greedily on the fixed held-out prompts and writes its usual ``runs/<name>-seed<k>/`` with its
report. This script then reads those folders and writes one JSON:

    seeds[]      per seed: pass rate before/after (strict checker, held-out, balanced labels),
                 per task and its verdict (learned / hacked / reward only / ...), updates,
                 episodes, training and wall minutes, the pass-rate curve against training time
    summary      gain in points, mean ± std over seeds; per task: mean before/after and how many
                 seeds learned or hacked it; whether the target (a gain of 30 points) is met
    machine      CPU, cores, load average before and after (a busy machine slows every run)

Design (h) of lesson 11, retention (``retention_arms``): ``--train-families F ...`` with ``--sft``
trains PPO on F only from the warm-up while evaluating every family; ``--sft-continue
--train-families F ...`` continues SFT from the same warm-up on F's demonstrations for the rest
of the budget. Either arm then measures, per seed, every family's test pass rate and the forward
KL from the warm-up (the report's "retention").

``--parallel N`` runs N seeds at once with ``cores // N`` torch threads each. The default, 1,
gives each run the whole machine, as a learner's single run has it; on 2 cores ``--parallel 2``
gives each run one core (about half the updates in the budget: a harder test, in half the wall
time). A figure (pass rate against training minutes, one line per seed) is saved next
to the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from course_utils.comparison import child, retention_arms
from course_utils.machinery import safe_files

TARGET_GAIN_POINTS = 30.0
"""The course's target: held-out pass rate up by at least this many points (issue 6)."""


def read_run(run_dir: Path) -> dict:
    """One finished run folder -> the numbers this benchmark reports (see the module docstring)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    history = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    evals = [json.loads(line) for line in open(run_dir / "evals.jsonl")]
    elapsed = np.cumsum([0.0] + [h["time_update_s"] for h in history]) / 60  # minutes after update k
    curve = [{"update": e["update"], "training_minutes": float(elapsed[e["update"]]), "pass_rate": e["pass_rate"]}
             for e in evals]
    before, after = evals[0], evals[-1]
    return {
        "seed": config["seed"],
        "run_dir": str(run_dir),
        "updates": summary["updates"],
        "episodes": summary["updates"] * config["batch_size"],
        "training_minutes": summary["training_minutes"],
        "stop": summary["stop"],
        "finished": summary.get("finished"),
        "pass_before": before["pass_rate"],
        "pass_after": after["pass_rate"],
        "gain_points": 100 * (after["pass_rate"] - before["pass_rate"]),
        "best_pass": max(e["pass_rate"] for e in evals),
        "per_task_before": before["pass_rate_per_task"],
        "per_task_after": after["pass_rate_per_task"],
        "task_outcomes": summary.get("task_outcomes", {}),
        "curve": curve,
        "mean_kl_last_5": float(np.mean([h["kl_per_sequence"] for h in history[-5:]])) if history else float("nan"),
        "mean_entropy_last_5": float(np.mean([h["entropy"] for h in history[-5:]])) if history else float("nan"),
        "s_per_update": float(np.mean([h["time_update_s"] for h in history])) if history else float("nan"),
    }


def summarise(seeds: list[dict], target: float = TARGET_GAIN_POINTS) -> dict:
    """Mean ± standard deviation (ddof=1 when several seeds) of the gain; per-task tallies."""
    gains = np.array([s["gain_points"] for s in seeds], dtype=float)
    std = float(gains.std(ddof=1)) if len(gains) > 1 else 0.0
    tasks = sorted({t for s in seeds for t in s["per_task_after"]})
    per_task = {}
    for task in tasks:
        verdicts = [s["task_outcomes"].get(task, {}).get("verdict", "?") for s in seeds]
        per_task[task] = {
            "pass_before_mean": float(np.mean([s["per_task_before"].get(task, np.nan) for s in seeds])),
            "pass_after_mean": float(np.mean([s["per_task_after"].get(task, np.nan) for s in seeds])),
            "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        }
    return {
        "seeds": len(seeds),
        "pass_before_mean": float(np.mean([s["pass_before"] for s in seeds])),
        "pass_after_mean": float(np.mean([s["pass_after"] for s in seeds])),
        "gain_points_mean": float(gains.mean()),
        "gain_points_std": std,
        "training_minutes_mean": float(np.mean([s["training_minutes"] for s in seeds])),
        "updates_mean": float(np.mean([s["updates"] for s in seeds])),
        "per_task": per_task,
        "target_gain_points": target,
        "target_met": bool(gains.mean() >= target),
    }


def plot_learning_curves(seeds: list[dict], minutes: float | None = None):
    """Held-out pass rate (y) against training minutes (x), one line per seed (pure: Figure out)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for s in seeds:
        xs = [p["training_minutes"] for p in s["curve"]]
        ys = [100 * p["pass_rate"] for p in s["curve"]]
        ax.plot(xs, ys, "o-", label=f"seed {s['seed']}: {ys[0]:.0f}% → {ys[-1]:.0f}%")
    if seeds:
        start = float(np.mean([s["pass_before"] for s in seeds])) * 100
        ax.axhline(start + TARGET_GAIN_POINTS, color="tab:red", ls="--", lw=1,
                   label=f"target: +{TARGET_GAIN_POINTS:.0f} points")
    if minutes:
        ax.axvline(minutes, color="0.6", ls=":", lw=1)
    ax.set_xlabel("training time (minutes; evaluations not counted)")
    ax.set_ylabel("held-out pass rate (%)")
    ax.set_title("PPO on a CPU: strict held-out pass rate per seed", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_variant_gains(reports: dict[str, dict], target: float = TARGET_GAIN_POINTS):
    """Held-out gain per seed (dots) and its mean ± std (bar) for several benchmark reports, one row
    per variant, e.g. ``{"preset": report, "lr 1e-3": report}`` (pure: Figure out)."""
    import matplotlib.pyplot as plt

    names = list(reports)
    fig, ax = plt.subplots(figsize=(6.5, 0.6 * len(names) + 1.4))
    for row, name in enumerate(names):
        gains = [s["gain_points"] for s in reports[name]["seeds"]]
        y = len(names) - 1 - row  # the first variant on top
        ax.plot(gains, [y] * len(gains), "o", color="tab:blue", alpha=0.7)
        if gains:
            summary = summarise(reports[name]["seeds"])  # the same mean ± std as the report's summary
            mean, std = summary["gain_points_mean"], summary["gain_points_std"]
            ax.errorbar([mean], [y], xerr=[std], fmt="|", color="black", ms=14, capsize=4)
            seeds = f"{len(gains)} seed" + ("s" if len(gains) > 1 else "")
            ax.annotate(f"{mean:+.1f} ± {std:.1f} ({seeds})", (mean, y), xytext=(0, 9),
                        textcoords="offset points", ha="center", fontsize=8)
    ax.axvline(0, color="0.6", lw=1)
    ax.axvline(target, color="tab:red", ls="--", lw=1, label=f"target: +{target:.0f} points")
    ax.set_yticks(range(len(names)), names[::-1])
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.set_xlabel("held-out pass-rate gain (points); dots: seeds, bar: mean ± std")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def sft_full_args(demo_families=()) -> tuple:
    """The control arm's SFT: every train demonstration (of ``demo_families`` only, if given), as
    many passes as the budget allows."""
    from course_utils import tasks

    demos = sum(1 for r in tasks.load_split("train") if not demo_families or r.family in demo_families)
    return ("--demos", demos, "--epochs", 1000, *demo_family_args(demo_families))


def teacher_args(args) -> tuple:
    """``sft``'s flags for the demonstrations' quality: the noisy teacher, the checker's filter and
    self-sampling (nothing when they are off, so the plain arms' commands stay as they were)."""
    flags: tuple = ()
    if args.demo_noise:
        flags += ("--demo-noise", args.demo_noise, "--demo-noise-style", args.demo_noise_style)
    if args.demo_filter:
        flags += ("--demo-filter",)
    if args.self_samples:
        flags += ("--self-samples", args.self_samples, "--resample-every", args.resample_every)
    return flags


def teacher_settings(args) -> dict:
    """The demonstrations' quality as the report records it."""
    return {"demo_noise": args.demo_noise, "demo_noise_style": args.demo_noise_style if args.demo_noise else None,
            "demo_filter": args.demo_filter, "self_samples": args.self_samples,
            "resample_every": args.resample_every if args.self_samples else None}


def demo_family_args(demo_families=()) -> tuple:
    """``sft``'s flag for the families that have demonstrations (nothing when every family has)."""
    return ("--demo-families", *demo_families) if demo_families else ()


def sft_command(seed: int, run_name: str, output_dir: str, threads: int, extra=()) -> list[str]:
    """The SFT of one seed (its defaults: the measured 200-demo warm-up). A benchmark run again
    measures again: ``--overwrite`` replaces a model an earlier benchmark left under that name."""
    return child.python_command("course_utils", "sft", "--seed", seed, "--run-name", run_name,
                                "--output-dir", output_dir, "--threads", threads, "--overwrite", *extra)


def run_warm_up(seed: int, name: str, output_dir: Path, threads: int, env: dict, extra=(), suffix: str = "sft") -> dict:
    """Run the SFT of one seed (into ``<output_dir>/<name>-<suffix>/``) to the end; return where its
    model is and what it cost. Its training time counts against the seed's budget (evaluations do
    not, as for PPO)."""
    run_name = f"{name}-{suffix}"
    log = output_dir / f"{run_name}.log"
    cmd = sft_command(seed, run_name, str(output_dir), threads, extra)
    print(f"seed {seed}: {' '.join(cmd[1:])}  (log: {log})", flush=True)
    code, _ = child.run_child(cmd, log, env=env)
    if code != 0:
        raise RuntimeError(f"the SFT of seed {seed} exited with {code}; see {log}")
    metrics = json.loads((output_dir / run_name / "metrics.json").read_text())
    return {"model": str(output_dir / run_name / "model"), "train_minutes": metrics["train_seconds"] / 60,
            "steps": metrics.get("steps"), "epochs_done": metrics.get("epochs_done"),
            "pass_after": {name: m["pass_rate"] for name, m in metrics["after"].items()},
            "pass_before": {name: m["pass_rate"] for name, m in metrics["before"].items()},
            "per_family_after": {name: m.get("per_family", {}) for name, m in metrics["after"].items()}}


def run_sft_full(args, output_dir: Path, threads: int) -> dict:
    """The control arm (c): SFT alone for the whole budget, no PPO. Was PPO worth more than more SFT?
    With the checker's filter or self-sampling it is filtered SFT, the strongest non-RL control."""
    arm = "sft_filtered" if args.demo_filter or args.self_samples else "sft_full"
    seeds = []
    for seed in args.seeds:
        env = child.child_env(threads, COURSE_THREADS=str(threads))
        warm = run_warm_up(seed, f"{arm}-seed{seed}", output_dir, threads, env,
                           [*sft_full_args(args.demo_families), *teacher_args(args), "--max-train-minutes", args.minutes])
        seeds.append({"seed": seed, **warm})
    means = {name: {"mean": float(np.mean([s["pass_after"][name] for s in seeds]))} for name in seeds[0]["pass_after"]}
    return {"arm": arm, "minutes": args.minutes, "threads_per_run": threads, "seeds": seeds, "summary": means}


def run_sft_continue(args, output_dir: Path, threads: int) -> dict:
    """Design (h)'s SFT arm: the 200-demo warm-up (the same as PPO's, ``--sft``), then SFT from the
    warm-up's model (``sft --model DIR``) on every train demonstration of ``--train-families`` for
    the rest of the budget: the warm-up's training minutes are taken out of it, as the PPO arm does."""
    seeds = []
    for seed in args.seeds:
        env = child.child_env(threads, COURSE_THREADS=str(threads))
        name = f"sft_continue-seed{seed}"
        warm = run_warm_up(seed, name, output_dir, threads, env)
        left = args.minutes - warm["train_minutes"]
        if left <= 0:
            raise RuntimeError(f"seed {seed}: the warm-up spent {warm['train_minutes']:.1f} of {args.minutes:g} minutes")
        more = run_warm_up(seed, name, output_dir, threads, env, suffix="continue",
                           extra=["--model", warm["model"], *sft_full_args(args.train_families),
                                  "--max-train-minutes", round(left, 4), "--eval-every", retention_arms.SFT_EVAL_EVERY])
        seeds.append({"seed": seed, "sft": warm, **more, "minutes_left_after_warm_up": left})
    means = {name: {"mean": float(np.mean([s["pass_after"][name] for s in seeds]))} for name in seeds[0]["pass_after"]}
    return {"arm": "sft_continue", "minutes": args.minutes, "threads_per_run": threads, "seeds": seeds, "summary": means}


def child_command(config: str, seed: int, run_name: str, output_dir: str, minutes: float, threads: int,
                  extra: list[str]) -> list[str]:
    sets = [f"seed={seed}", f"run_name={run_name}", f"output_dir={output_dir}", f"max_train_minutes={minutes}",
            f"threads={threads}", *extra]
    return child.python_command("course_utils", "ppo", "--config", config, "--overwrite", "--set", *sets)


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def summary_text(report: dict) -> str:
    s = report["summary"]
    lines = [f"PPO learning benchmark: {report['config']} {' '.join(report['overrides'])}".rstrip(),
             f"budget {report['minutes']:g} training minutes per seed, {report['threads_per_run']} thread(s) "
             f"per run, {report['parallel']} run(s) at a time on {report['machine']['cpu_count']} cores"]
    for r in report["seeds"]:
        lines.append(f"  seed {r['seed']}: {r['pass_before']:.0%} -> {r['pass_after']:.0%} "
                     f"({r['gain_points']:+.0f} pts) in {r['updates']} updates, {r['training_minutes']:.1f} min")
    lines.append(f"gain: {s['gain_points_mean']:+.1f} points, standard deviation {s['gain_points_std']:.1f} over seeds "
                 f"(target +{s['target_gain_points']:.0f}: {'met' if s['target_met'] else 'NOT met'})")
    for task, t in s["per_task"].items():
        verdicts = ", ".join(f"{k} x{v}" for k, v in t["verdicts"].items())
        lines.append(f"  {task:<19} {t['pass_before_mean']:.0%} -> {t['pass_after_mean']:.0%}   {verdicts}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m course_utils bench-learning", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/cpu.yaml", help="the preset to test (default: the laptop preset)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=15.0, help="training-time budget per seed")
    p.add_argument("--parallel", type=int, default=1, help="seeds run at once (threads per run: cores // parallel)")
    p.add_argument("--out", default="runs/learning.json", help="the JSON to write (runs go next to it)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="extra config overrides")
    p.add_argument("--sft", action="store_true",
                   help="warm each seed up with `python -m course_utils sft` first and start PPO from its model; "
                        "the warm-up's training time is taken out of the budget")
    p.add_argument("--sft-full", action="store_true",
                   help="the control arm: SFT alone on all train demonstrations for the whole budget, no PPO")
    p.add_argument("--demo-families", nargs="+", default=[], metavar="FAMILY",
                   help="only these task families have demonstrations, in the warm-up (--sft) and in "
                        "--sft-full; PPO still trains on every family's prompts with the checker")
    p.add_argument("--demo-noise", type=float, default=0.0, metavar="RATE",
                   help="share of the SFT demonstrations replaced by a labeler's mistake (the noisy teacher)")
    p.add_argument("--demo-noise-style", default="habit", choices=["habit", "mixed"],
                   help="habit: one mistake per family; mixed: each noisy demonstration its own (default: habit)")
    p.add_argument("--demo-filter", action="store_true",
                   help="keep only the demonstrations that pass the checker (filtered SFT)")
    p.add_argument("--self-samples", type=int, default=0, metavar="K",
                   help="filtered SFT on the model's own answers: K samples per prompt without a demonstration, "
                        "the passing ones added to the data (0: off)")
    p.add_argument("--resample-every", type=int, default=25, metavar="STEPS",
                   help="SFT steps between two rounds of self-sampling (default: 25)")
    p.add_argument("--train-families", nargs="+", default=[], metavar="FAMILY",
                   help="design (h), retention: after the warm-up, train on these families only and evaluate on "
                        "every family; with --sft (PPO) or --sft-continue (SFT). Then the gain, the change on the "
                        "other families and the forward KL from the warm-up are measured per seed")
    p.add_argument("--sft-continue", action="store_true",
                   help="design (h)'s SFT arm: the warm-up, then SFT from its model on the train demonstrations "
                        "of --train-families for the rest of the budget")
    p.add_argument("--kl-samples", type=int, default=4, metavar="K",
                   help="with --train-families: answers sampled from the warm-up per test prompt for the KL (default: 4)")
    return p


def check_retention_flags(args) -> None:
    """Design (h)'s flags: known families, a subset that leaves others to measure, and an arm to run."""
    from course_utils import tasks

    unknown = sorted(set(args.train_families) - set(tasks.TASK_FAMILIES))
    if unknown:
        raise ValueError(f"--train-families: unknown families {unknown}; choose from {', '.join(tasks.TASK_FAMILIES)}")
    if args.train_families and set(args.train_families) == set(tasks.TASK_FAMILIES):
        raise ValueError("--train-families names every family: no family is left to measure forgetting on")
    if args.sft_continue and not args.train_families:
        raise ValueError("--sft-continue is design (h)'s SFT arm: name the families it trains on with --train-families")
    if args.train_families and [args.sft, args.sft_continue, args.sft_full].count(True) != 1 \
            or args.train_families and args.sft_full:
        raise ValueError("--train-families needs one arm: --sft (warm-up + PPO) or --sft-continue (warm-up + SFT)")
    if args.sft_continue and (args.demo_families or args.demo_noise or args.demo_filter or args.self_samples):
        raise ValueError("--sft-continue starts from the plain 200-demo warm-up: drop the demonstration flags")
    if args.kl_samples < 1:
        raise ValueError("--kl-samples must be >= 1")


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    from course_utils.comparison.bench import machine_info
    from course_utils.machinery.versions import package_versions
    from course_utils.config import load_config

    from course_utils.trainer import parse_overrides

    # The children read --set the same way; checking here fails before any run on a typo.
    load_config(args.config, **parse_overrides(args.set))
    # Bad input is a ValueError: the command line answers it with one `error:` line (exit 2).
    if args.parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {args.parallel}: e.g. --parallel 1 (one run at a time)")
    if args.minutes <= 0:
        raise ValueError(f"--minutes must be > 0, got {args.minutes:g}: give each run's training-time budget, "
                         "e.g. --minutes 5")
    from course_utils import tasks

    unknown = sorted(set(args.demo_families) - set(tasks.TASK_FAMILIES))
    if unknown:
        raise ValueError(f"--demo-families: unknown families {unknown}; choose from {', '.join(tasks.TASK_FAMILIES)}")
    check_retention_flags(args)
    sft_only = [flag for flag, on in (("--demo-families", args.demo_families), ("--demo-noise", args.demo_noise),
                                      ("--demo-filter", args.demo_filter), ("--self-samples", args.self_samples)) if on]
    if sft_only and not (args.sft or args.sft_full or args.sft_continue):
        raise ValueError(f"{sft_only[0]} applies to the SFT: add --sft (warm-up + PPO) or --sft-full (SFT alone)")
    if not 0.0 <= args.demo_noise <= 1.0 or args.self_samples < 0 or args.resample_every < 1:
        raise ValueError("--demo-noise must be in [0, 1], --self-samples >= 0 and --resample-every >= 1")
    out = Path(args.out)
    output_dir = safe_files.check_writable(out.parent / "learning", "choose another --out")  # before an hour of runs
    cores = os.cpu_count() or 1
    threads = max(1, cores // args.parallel)
    if args.sft_full or args.sft_continue:
        arm = run_sft_continue(args, output_dir, threads) if args.sft_continue else run_sft_full(args, output_dir, threads)
        report = {**arm, "demo_families": args.demo_families, **teacher_settings(args),
                  "train_families": args.train_families, "machine": machine_info(), "versions": package_versions()}
        safe_files.write_json(out, report)
        print(f"{report['arm']} (SFT for the whole budget): {report['summary']}\nwrote {out}")
        return add_retention(report, args, out)
    base = Path(args.config).stem
    machine = machine_info()
    started = time.perf_counter()
    pending = list(args.seeds)
    running: list[tuple[int, subprocess.Popen, float, Path]] = []
    walls: dict[int, float] = {}
    failures: dict[int, str] = {}
    warm_ups: dict[int, dict] = {}
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            name = f"{base}-seed{seed}"
            log = output_dir / f"{name}.log"
            env = child.child_env(threads, COURSE_THREADS=str(threads))
            minutes, extra = args.minutes, list(args.set)
            if args.sft:
                warm_ups[seed] = run_warm_up(seed, name, output_dir, threads, env,
                                             [*demo_family_args(args.demo_families), *teacher_args(args)])
                minutes = args.minutes - warm_ups[seed]["train_minutes"]
                extra.append(f"model={warm_ups[seed]['model']}")
            if args.train_families:
                extra += retention_arms.ppo_overrides(args.train_families)
            cmd = child_command(args.config, seed, name, str(output_dir), minutes, threads, extra)
            print(f"seed {seed}: {' '.join(cmd[1:])}  (log: {log})", flush=True)
            proc = child.start_child(cmd, log, env=env)
            running.append((seed, proc, time.perf_counter(), log))
        time.sleep(2)
        for item in list(running):
            seed, proc, t0, log = item
            if proc.poll() is not None:
                running.remove(item)
                walls[seed] = (time.perf_counter() - t0) / 60
                if proc.returncode != 0:
                    failures[seed] = f"exit status {proc.returncode}; see {log}"
                print(f"seed {seed}: done in {walls[seed]:.1f} min (exit {proc.returncode})", flush=True)
    seeds = []
    for seed in args.seeds:
        if seed in failures:
            continue
        record = read_run(output_dir / f"{base}-seed{seed}")
        record["wall_minutes"] = walls[seed]
        if seed in warm_ups:
            record["sft"] = warm_ups[seed]
        seeds.append(record)
    report = {
        "config": args.config,
        "overrides": args.set,
        "sft_warm_up": args.sft,
        "demo_families": args.demo_families,
        "train_families": args.train_families,
        **teacher_settings(args),
        "minutes": args.minutes,
        "parallel": args.parallel,
        "threads_per_run": threads,
        "seeds": seeds,
        "failures": failures,
        "summary": summarise(seeds) if seeds else {},
        "machine": machine,
        "load_average_after": _load(),
        "wall_minutes_total": (time.perf_counter() - started) / 60,
        "versions": package_versions(),
    }
    safe_files.write_json(out, report)
    if seeds:
        import matplotlib

        matplotlib.use("Agg", force=False)
        fig = plot_learning_curves(seeds, args.minutes)
        fig.savefig(out.with_suffix(".png"), dpi=90)
        print(summary_text(report))
    print(f"wrote {out}")
    if failures:
        raise SystemExit(f"{len(failures)} seed(s) failed: {failures}")
    return add_retention(report, args, out)


def add_retention(report: dict, args, out: Path) -> dict:
    """Design (h): once the arm's JSON is safe on disk, measure each seed's gain, change and KL from
    the warm-up (``retention_arms.measure_arm``) and write the JSON again with them under "retention"."""
    if not args.train_families:
        return report
    print(f"measuring retention: per-family pass rates on test and KL from the warm-up ({args.kl_samples} "
          "answers per prompt)", flush=True)
    report["retention"] = retention_arms.measure_arm(report, args.train_families, args.kl_samples)
    safe_files.write_json(out, report)
    for s in report["retention"]["seeds"]:
        print(f"  seed {s['seed']}: trained {s['gain_trained']:+.1f} points, others {s['change_others']:+.1f}, "
              f"KL trained {s['kl_from_start']['trained']['kl_per_answer']:.3f} nats, "
              f"others {s['kl_from_start']['others']['kl_per_answer']:.3f}")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
