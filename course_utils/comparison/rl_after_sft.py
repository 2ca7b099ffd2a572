"""Lesson 11's design 1, RL after the best SFT: the runs of one seed read into the course's record,
and the decision the pre-registration wrote down before the first run
(``runs/example/designs/PREREGISTERED.md``).

Per seed, on one host: a shared start (filtered SFT at noise 0.25 for 10 training minutes), then
from its merged model, 30 more training minutes each:

    A  filtered SFT continued (the start's pool and rules)      sft --model START --init-pool START/pool.jsonl
    B  PPO on the checker (configs/cpu_sft.yaml)                ppo --set model=START
    C  B + RLOO's groups of 4 + Reinforce-Rej                   ... samples_per_prompt=4 group_baseline=true
                                                                    ppo_epochs=4 target_kl=0.02 drop_uniform_groups=true
    D  positive-only policy gradient (if the budget allows)

Each arm is read at 5, 15 and 30 of its minutes (15, 25 and 40 in all; the start is the 10-minute
point): greedy pass rate on the test prompts and on their unseen phrasings, per family, plus pass@1,
pass@16 and token entropy sampled on the validation split at the start and at the end
(``python -m course_utils measure``).

``python -m course_utils design1 add SEED RUNS_DIR`` copies one seed's small files (never model
weights) under ``runs/example/designs/rl_after_sft/seed<SEED>/`` and writes its record into
``runs/example/when_ppo_wins.json`` (``designs["rl_after_sft"]["seeds"][SEED]``);
``python -m course_utils design1 decide`` prints the pre-registered comparisons.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from course_utils import tasks
from course_utils.lesson_aids.capstone import compare, pooled_mcnemar
from course_utils.machinery.paths import EXAMPLE_RUNS

ARMS = {"A": "filtered SFT continued", "B": "PPO on the checker",
        "C": "group policy gradient (RLOO groups of 4, Reinforce-Rej)", "D": "positive-only policy gradient"}
"""The arms of design 1, as the pre-registration names them."""
START_MINUTES = 10
"""Training minutes of the shared start; an arm's marks are counted after it."""
ARM_MARKS = (5, 15, 30)
"""Minutes into an arm at which it is read (the last one is its end)."""
PRIMARY = (("B", "A"), ("C", "A"))
"""The pre-registered primary comparisons: each policy-gradient arm against continued filtered SFT."""
BAR_POINTS = 5.0
"""The pre-registered size a difference needs, in points of test pass rate, besides an interval off 0."""
SAME_SIGN = 4
"""Seeds (of 5) that must agree in sign for "RL adds" or "rejection sampling stays the frontier"."""
SEEDS = 5
"""Seeds the design runs (A, B and C)."""
KEEP = ("metrics.json", "report.md", "pool.jsonl", "sampled_validation.json", "config.json", "summary.json",
        "metrics.jsonl", "evals.jsonl", "checkpoints.jsonl", "manifest.json")
"""The files of a run folder the record keeps (the models stay out of git)."""
RECORD = EXAMPLE_RUNS / "when_ppo_wins.json"
DESIGN = "rl_after_sft"


def _percent(rate: float) -> float:
    return round(100 * rate, 6)


def _sampled(run_dir: Path) -> dict | None:
    file = run_dir / "sampled_validation.json"
    if not file.is_file():
        return None
    s = json.loads(file.read_text())
    return {"pass_at_1": _percent(s["pass_at_1"]), f"pass_at_{s['k']}": _percent(s["pass_at_k"]),
            "entropy": s["entropy"], "per_family": s["per_family"]}


def _passed(split: str, n: int, answers: list[str]) -> list[bool]:
    """The strict checker's verdicts on the first ``n`` prompts of ``split`` (round robin over the
    families: the evaluated prompts, in the order of the runs' answers)."""
    from course_utils.trainer import balanced_subset

    records = balanced_subset(tasks.load_split(split), n)
    return [tasks.check(r, a).passed for r, a in zip(records, answers)]


def read_sft(run_dir: Path, offset: float = 0.0) -> dict:
    """An SFT run (the start, or arm A): its points ``[{minutes, test, test_unseen, per_family}]``
    (minutes counted from the start of the design: ``offset`` + the run's own), the end's per-prompt
    test verdicts, SFT steps, the pool, and the sampled measures if taken."""
    m = json.loads((run_dir / "metrics.json").read_text())
    split = m["config"]["eval_split"]
    points = [{"minutes": offset + c["minutes"], "step": c["step"],
               "test": _percent(c[split]["pass_rate"]), "test_unseen": _percent(c[tasks.UNSEEN_SPLIT]["pass_rate"]),
               "per_family": {name: {f: _percent(v) for f, v in c[name]["per_family"].items()}
                              for name in (split, tasks.UNSEEN_SPLIT)}}
              for c in m.get("checkpoints", [])]
    after = m["after"]
    points.append({"minutes": offset + m["train_seconds"] / 60, "step": m["steps"], "final": True,
                   "test": _percent(after[split]["pass_rate"]),
                   "test_unseen": _percent(after[tasks.UNSEEN_SPLIT]["pass_rate"]),
                   "per_family": {name: {f: _percent(v) for f, v in after[name]["per_family"].items()}
                                  for name in (split, tasks.UNSEEN_SPLIT)}})
    return {"kind": "sft", "points": points, "steps": m["steps"], "train_minutes": m["train_seconds"] / 60,
            "pool": m.get("pool"), "self_sample_rounds": [(r["step"], r["accepted"]) for r in m.get("self_sample_rounds", [])],
            "test_passed": _passed(split, len(after[split]["answers"]), after[split]["answers"]),
            "before": {"test": _percent(m["before"][split]["pass_rate"]),
                       "test_unseen": _percent(m["before"][tasks.UNSEEN_SPLIT]["pass_rate"])},
            "host": m["fast_paths"].get("host"), "sampled": _sampled(run_dir)}


def read_ppo(run_dir: Path, offset: float = START_MINUTES) -> dict:
    """A PPO run (arms B, C, D) with ``eval_at_minutes``: its points from ``checkpoints.jsonl``, the
    end's per-prompt test verdicts from the last evaluation, updates, and the sampled measures."""
    marks = [json.loads(line) for line in (run_dir / "checkpoints.jsonl").read_text().splitlines() if line.strip()]
    config = json.loads((run_dir / "config.json").read_text())
    split = config["eval_split"]
    points = [{"minutes": offset + c["minutes"], "update": c["update"], **({"final": True} if c["final"] else {}),
               "test": _percent(c[split]["pass_rate"]), "test_unseen": _percent(c[tasks.UNSEEN_SPLIT]["pass_rate"]),
               "per_family": {name: {f: _percent(v) for f, v in c[name]["pass_rate_per_task"].items()}
                              for name in (split, tasks.UNSEEN_SPLIT)}}
              for c in marks]
    summary = json.loads((run_dir / "summary.json").read_text())
    last = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines() if line.strip()][-1]
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {"kind": "ppo", "points": points, "updates": summary["updates"], "train_minutes": summary["training_minutes"],
            "episodes": len(history) * int(config["batch_size"]),
            "rows_trained": sum(h.get("rows_trained", config["batch_size"]) for h in history),
            "updates_without_step": sum(1 for h in history if not h.get("optimizer_steps")),
            "test_passed": _passed(split, len(last["answers"]), last["answers"]),
            "host": manifest.get("fast_paths", {}).get("host"), "sampled": _sampled(run_dir), "stop": summary.get("stop")}


def seed_record(runs: Path, seed: int) -> dict:
    """One seed's start and every arm found under ``runs`` (``d1_start-seed<S>``, ``d1_<ARM>-seed<S>``)."""
    start_dir = runs / f"d1_start-seed{seed}"
    if not (start_dir / "metrics.json").is_file():
        raise FileNotFoundError(f"{start_dir} holds no finished start (metrics.json)")
    record = {"seed": seed, "start": read_sft(start_dir), "arms": {}}
    for arm in ARMS:
        run_dir = runs / f"d1_{arm}-seed{seed}"
        if (run_dir / "metrics.json").is_file():
            record["arms"][arm] = read_sft(run_dir, offset=START_MINUTES)
        elif (run_dir / "summary.json").is_file():
            record["arms"][arm] = read_ppo(run_dir)
    hosts = {json.dumps(r["host"], sort_keys=True) for r in (record["start"], *record["arms"].values())}
    record["one_host"] = len(hosts) == 1
    return record


def keep_files(runs: Path, seed: int, into: Path) -> list[Path]:
    """Copy the small files of one seed's runs under ``into/seed<S>/<run>/`` (no model weights)."""
    kept = []
    for name in ("start", *ARMS):
        source = runs / f"d1_{name}-seed{seed}"
        if not source.is_dir():
            continue
        target = into / f"seed{seed}" / name
        target.mkdir(parents=True, exist_ok=True)
        for file in KEEP:
            if (source / file).is_file():
                kept.append(Path(shutil.copy2(source / file, target / file)))
    return kept


def add_seed(report: dict, record: dict) -> dict:
    """Put one seed's record into the report (replacing an earlier record of that seed)."""
    design = report["designs"].setdefault(DESIGN, {
        "what": "RL after the best SFT: one filtered-SFT start per seed (noise 0.25, habit style, 10 training "
                "minutes), then 30 more minutes of each arm from it (runs/example/designs/PREREGISTERED.md)",
        "arms": ARMS, "seeds": {}})
    design["seeds"][str(record["seed"])] = record
    return report


def preregistered_verdict(result, bar: float = BAR_POINTS, same_sign: int = SAME_SIGN, seeds: int = SEEDS) -> str:
    """The pre-registered reading of one primary comparison X − A (a ``capstone.Comparison``)."""
    if result.n < seeds:
        return f"not decided: {result.n} of {seeds} seeds"
    if result.difference >= bar and result.low > 0 and result.positive >= same_sign:
        return "RL adds after the best SFT"
    if result.difference <= -bar and result.high < 0 and result.negative >= same_sign:
        return "rejection sampling stays the frontier at 3x the budget"
    if (result.low > 0 or result.high < 0) and abs(result.difference) < bar:
        return f"a small difference ({'ahead' if result.low > 0 else 'behind'} by less than {bar:g} points)"
    if result.low > 0 or result.high < 0:
        # The rule's "otherwise": a mean past the bar, off 0, but too few seeds agreeing in sign. The rule
        # calls that level; the parenthesis says why, so the reader is not told the interval holds 0.
        agree = result.positive if result.low > 0 else result.negative
        return (f"level within noise (by the rule: the interval excludes 0, but only {agree} of {result.n} "
                f"seeds agree in sign, {same_sign} needed)")
    return "level within noise"


def decide(design: dict, key: str = "test") -> list[dict]:
    """The primary comparisons on ``key`` at the end, over the seeds both arms ran."""
    out = []
    for x, a in PRIMARY:
        seeds = sorted(int(s) for s, r in design["seeds"].items() if x in r["arms"] and a in r["arms"])
        if not seeds:
            continue
        values = {arm: [next(p[key] for p in design["seeds"][str(s)]["arms"][arm]["points"] if p.get("final"))
                        for s in seeds] for arm in (x, a)}
        result = compare(values[x], values[a])
        mcnemar = pooled_mcnemar([design["seeds"][str(s)]["arms"][x]["test_passed"] for s in seeds],
                                 [design["seeds"][str(s)]["arms"][a]["test_passed"] for s in seeds])
        out.append({"comparison": f"{x} - {a}", "seeds": seeds, x: values[x], a: values[a],
                    # the interval's verdict only once the rule can decide (every seed in): a record before
                    "line": (result.sentence(x, a) if len(seeds) >= SEEDS else result.record(x, a)) if len(seeds) > 1
                    else f"{x} - {a} = {result.difference:+.1f} (one seed: no interval)",
                    "decision": preregistered_verdict(result), "mcnemar": mcnemar})
    return out


def _end(run: dict, key: str) -> float:
    """An arm's (or the start's) value at its end: a greedy pass rate from its points, or a sampled
    measure (``pass_at_16``, ``entropy``) from the validation sampling."""
    if key in ("test", "test_unseen"):
        return next(p[key] for p in run["points"] if p.get("final"))
    return run["sampled"][key]


def _difference(design: dict, x: str, y: str, key: str, unit: str = "points") -> dict:
    """X − Y on ``key`` at the end, paired over the seeds where both ran (``"start"`` names the shared
    start), with the interval rule's reading."""
    def run(record, arm):
        return record["start"] if arm == "start" else record["arms"].get(arm)

    seeds = sorted(int(s) for s, r in design["seeds"].items()
                   if run(r, x) and run(r, y) and (key in ("test", "test_unseen") or
                                                   (run(r, x).get("sampled") and run(r, y).get("sampled"))))
    xs = [_end(run(design["seeds"][str(s)], x), key) for s in seeds]
    ys = [_end(run(design["seeds"][str(s)], y), key) for s in seeds]
    result = compare(xs, ys)
    digits = 3 if unit == "nats" else 1
    line = (f"{x} − {y} = {result.difference:+.{digits}f} ± {result.se:.{digits}f} {unit} "
            f"(95% interval [{result.low:+.{digits}f}, {result.high:+.{digits}f}], paired by seed, n = {result.n}; "
            f"{x} higher in {result.positive} of {result.n} seeds)")
    return {"comparison": f"{x} - {y}", "key": key, "seeds": seeds, "result": result, "line": line,
            "reading": {"A": "higher", "B": "lower", None: "level within noise"}[result.winner("A", "B")]}


SECONDARY_KEYS = {"test_unseen": ("greedy pass rate on the unseen phrasings", "points"),
                  "pass_at_16": ("pass@16 on validation (16 answers at T = 1)", "points"),
                  "entropy": ("token entropy of those sampled answers", "nats")}
"""The pre-registration's secondary measures at the end: reported, never decisive."""


def secondary_readings(design: dict) -> list[dict]:
    """The pre-registration's secondary readings, each with the interval rule's reading (which decides
    nothing): each arm's gain over the shared start on test; A's change over the start on pass@16 and
    entropy (does more filtered SFT narrow what the model samples?); then B − A and C − A on the unseen
    phrasings, on pass@16 and on entropy."""
    out = [dict(_difference(design, arm, "start", "test"), what=f"{arm}'s gain over the shared start, test")
           for arm in ("A", "B", "C")]
    out += [dict(_difference(design, "A", "start", key, SECONDARY_KEYS[key][1]),
                 what=f"A's change over the shared start, {SECONDARY_KEYS[key][0]}") for key in ("pass_at_16", "entropy")]
    for key, (what, unit) in SECONDARY_KEYS.items():
        for x, a in PRIMARY:
            out.append(dict(_difference(design, x, a, key, unit), what=what))
    return out


def prediction_check(design: dict) -> list[dict]:
    """The pre-registered prediction, part by part, read with the design's interval rule (95 %,
    paired by seed). The prediction's words were written before the runs; reading each part this way
    was written down after four of five seeds were in (PREREGISTERED.md says so).

    Each part is a few differences and what the prediction expected of each: ``"level"`` (the
    interval holds 0 and the mean is under the 5-point bar), ``"not behind"`` (the interval is not
    below 0) or ``"ahead"`` (the interval above 0). A difference reads "as predicted", "the other
    way" (its interval excludes 0 against the prediction), "not level: the mean is past the bar" (level
    was predicted, the interval holds 0 but the mean is 5 points or more) or "level within noise" (an
    advantage was predicted and the interval holds 0). A part "held" when every difference reads as
    predicted, "not shown" when the only others are "level within noise", and "did not hold" otherwise.
    Returns ``[{"part", "lines": [(line, status)], "outcome"}]``."""
    def status(d: dict, expected: str) -> str:
        who = d["result"].winner()  # "A": the first-named arm higher, "B": lower, None: level
        if expected == "level":
            if who is not None:
                return "the other way"
            return "as predicted" if abs(d["result"].difference) < BAR_POINTS else "not level: the mean is past the bar"
        if expected == "not behind":
            return "the other way" if who == "B" else "as predicted"
        return "as predicted" if who == "A" else "the other way" if who == "B" else "level within noise"

    parts = [
        ("B and C level with A on test at 40 minutes (interval holds 0, mean under 5 points either way)",
         [(_difference(design, x, a, "test"), "level") for x, a in PRIMARY]),
        ("C at least as good as B on test", [(_difference(design, "C", "B", "test"), "not behind")]),
        ("B and C ahead of A on pass@16", [(_difference(design, x, a, "pass_at_16"), "ahead") for x, a in PRIMARY]),
        ("B and C ahead of A on the unseen phrasings",
         [(_difference(design, x, a, "test_unseen"), "ahead") for x, a in PRIMARY]),
        # "A lowest" read as "B above A and C above A": the differences point the same way as the others
        ("A ends with the lowest entropy",
         [(_difference(design, x, "A", "entropy", "nats"), "ahead") for x in ("B", "C")]),
    ]
    out = []
    for part, checks in parts:
        lines = [(d["line"], status(d, expected)) for d, expected in checks]
        statuses = {st for _, st in lines}
        outcome = ("held" if statuses == {"as predicted"} else
                   "not shown" if statuses <= {"as predicted", "level within noise"} else "did not hold")
        out.append({"part": part, "lines": lines, "outcome": outcome})
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m course_utils design1", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    add = sub.add_parser("add", help="read one seed's runs into when_ppo_wins.json and keep their small files")
    add.add_argument("seed", type=int)
    add.add_argument("runs", help="the folder holding d1_start-seed<S>, d1_A-seed<S>, ...")
    add.add_argument("--record", default=str(RECORD))
    add.add_argument("--keep-into", default=str(EXAMPLE_RUNS / "designs" / DESIGN))
    decide_parser = sub.add_parser("decide", help="print the pre-registered comparisons from when_ppo_wins.json")
    decide_parser.add_argument("--record", default=str(RECORD))
    args = parser.parse_args(argv)
    from course_utils.machinery import safe_files

    report = json.loads(Path(args.record).read_text()) if Path(args.record).is_file() else {"designs": {}}
    if args.what == "add":
        runs = Path(args.runs)
        record = seed_record(runs, args.seed)
        kept = keep_files(runs, args.seed, Path(args.keep_into))
        safe_files.write_text_atomic(args.record, json.dumps(add_seed(report, record), indent=1) + "\n")
        print(f"seed {args.seed}: start and arms {', '.join(record['arms']) or 'none'} into {args.record} "
              f"({len(kept)} files kept under {args.keep_into}); one host: {record['one_host']}")
        return record
    design = report["designs"].get(DESIGN)
    if not design:
        raise ValueError(f"{args.record} has no {DESIGN} design yet: add a seed first with `design1 add`")
    lines = decide(design)
    for line in lines:
        print(f"{line['line']}  ->  {line['decision']}  (McNemar over seed x prompt pairs: "
              f"{line['mcnemar']['gained']} gained, {line['mcnemar']['lost']} lost, p = {line['mcnemar']['p_value']:.3f})")
    return {"decisions": lines}
