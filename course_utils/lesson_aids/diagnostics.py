"""Reading a PPO run: the logs as a bundle, and reward hacking caught from the answers themselves.

Everything here is a pure function of plain Python data (lists of answers, prompts, metric
dicts), so it can be tested on hand-made examples and run on any run's files:

    log_bundle_summary(history)        first / last / min / max of each logged metric, in groups
    plot_log_bundle(history)           one small panel per metric the lessons read (a Figure)
    constant_metrics(rows)             the logged metrics that never changed over a run
    plot_reward_vs_heldout(...)        training score, KL and held-out pass rate on one time axis
    replay_hacking_rule(...)           where the "reward up, held-out flat" stop rule would have
                                       stopped a logged run, for a given patience
    read_run_logs(run_dir)             a run folder's metrics.jsonl and evals.jsonl
    plot_runs({label: logs})           several runs' curves on shared axes (the lab preset's
                                       "change one setting, compare")
    reward_checker_agreement(...)      does the reward agree with the checker? (mean score of
                                       passing vs failing answers, correlation)
    per_family_score_and_pass(...)     mean reward and checker pass rate per task family
    plot_score_vs_pass(...)            those two against each other, before and after training
    binomial_standard_error(p, n)      how much a pass rate on n prompts moves by chance
    paired_pass_change(before, after)  the same prompts graded twice: prompts gained and lost, and
                                       the exact (McNemar) test of gained against lost

Reward hacking read from the answers (placeholder copies, echoes, constant answers, length
collapse) and the per-family verdicts of a run are in ``course_utils.machinery.run_checks``: the
run report uses them too.

The hacks the detector looks for are the ones a small policy found by itself on tasks like this
course's (the first hand-written CPU probe, week 8 section 3): copying the placeholder "<sum>" for
format credit and one constant answer ("No.") for a yes/no task whose answers are half Yes and half
No; plus answers that shrink towards nothing, and answers that echo the prompt.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from course_utils import ppo_math as pm

__all__ = [
    "LOG_GROUPS",
    "log_bundle_summary",
    "format_log_bundle",
    "READ_TOGETHER",
    "constant_metrics",
    "plot_log_bundle",
    "plot_reward_vs_heldout",
    "replay_hacking_rule",
    "read_run_logs",
    "plot_runs",
    "reward_checker_agreement",
    "per_family_score_and_pass",
    "plot_score_vs_pass",
    "binomial_standard_error",
    "paired_pass_change",
]

# ---------------------------------------------------------------------------------------------
# 1. The logs as a bundle
# ---------------------------------------------------------------------------------------------

# What to read together (the groups of the source lesson's monitoring list), as logged by
# course_utils.trainer.PPOTrainer.ppo_update. One number alone says little; a group tells a story.
LOG_GROUPS: dict[str, tuple[str, ...]] = {
    "reward": ("score", "non_score_reward", "shaped_reward", "kl_per_sequence", "kl_per_token", "kl_coef"),
    "policy and value": ("policy_loss", "value_loss", "explained_variance", "advantage_mean", "advantage_std",
                         "value_mean", "entropy"),
    "trust region": ("policy_clipfrac", "value_clipfrac", "approx_kl", "ratio_mean", "ratio_var", "ratio_max"),
    "responses": ("response_length", "eos_rate", "truncation_rate", "padding_fraction"),
    "health": ("nonfinite_steps", "nonfinite_scores", "grad_norm", "optimizer_steps", "stale_steps_skipped",
               "kl_stop_steps_skipped", "policy_lag_max", "learning_rate"),
    "speed": ("time_update_s", "rollout_tokens_per_s", "train_tokens_per_s"),
}


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([np.nan if v is None else float(v) for v in values], dtype=float)
    return x[np.isfinite(x)]


def log_bundle_summary(history: Sequence[dict], groups: dict[str, Sequence[str]] | None = None) -> list[dict]:
    """One row per logged metric: ``{"group", "metric", "first", "last", "min", "max", "n"}``.

    ``history`` is the list of per-update metric dicts (``trainer.history`` or the lines of
    ``metrics.jsonl``). Statistics skip NaN/inf values; ``n`` counts the finite ones (a metric
    with n smaller than the number of updates had non-finite values). Metrics absent from every
    update are left out. ``first``/``last`` are the first and last finite values.
    """
    groups = LOG_GROUPS if groups is None else groups
    rows = []
    for group, keys in groups.items():
        for key in keys:
            present = [h[key] for h in history if key in h]
            if not present:
                continue
            x = _finite(present)
            nan = float("nan")
            rows.append({
                "group": group, "metric": key, "n": int(len(x)),
                "first": float(x[0]) if len(x) else nan, "last": float(x[-1]) if len(x) else nan,
                "min": float(x.min()) if len(x) else nan, "max": float(x.max()) if len(x) else nan,
            })
    return rows


def format_log_bundle(rows: list[dict], digits: int = 4) -> str:
    """``log_bundle_summary`` rows as a fixed-width text table, grouped."""
    lines, group = [], None
    header = f"  {'metric':<22} {'first':>11} {'last':>11} {'min':>11} {'max':>11}"
    for row in rows:
        if row["group"] != group:
            group = row["group"]
            lines += [f"[{group}]", header]
        cells = " ".join(f"{row[k]:>11.{digits}g}" for k in ("first", "last", "min", "max"))
        lines.append(f"  {row['metric']:<22} {cells}")
    return "\n".join(lines)


# The metrics week 8 reads as a picture: the reward and the leash, how the policy spreads and how far
# each update moved, the answers' length, and whether the value head fits. The rest of the bundle is
# read in the table (format_log_bundle); several of its rows are settings that never change in a run.
READ_TOGETHER: tuple[str, ...] = ("score", "kl_per_sequence", "entropy", "policy_clipfrac", "approx_kl",
                                  "response_length", "value_loss", "explained_variance")


def constant_metrics(rows: list[dict]) -> dict[str, float]:
    """``{metric: value}`` for the ``log_bundle_summary`` rows whose smallest and largest value are
    equal (a setting such as kl_coef, or a counter that stayed 0): nothing to draw, one number to say."""
    return {r["metric"]: r["min"] for r in rows if r["n"] > 0 and r["min"] == r["max"]}


def plot_log_bundle(history: Sequence[dict], metrics: Sequence[str] = READ_TOGETHER, columns: int = 4):
    """One small panel per metric of ``metrics`` that the history logged, in that order (pure:
    history in, Figure out). The default is ``READ_TOGETHER``; pass any names of ``LOG_GROUPS``."""
    import matplotlib.pyplot as plt

    group_of = {k: g for g, keys in LOG_GROUPS.items() for k in keys}
    present = [k for k in metrics if any(k in h for h in history)]
    n_rows = max(1, math.ceil(len(present) / columns))
    fig, axes = plt.subplots(n_rows, columns, figsize=(3.2 * columns, 2.2 * n_rows), squeeze=False)
    for ax in axes.flat[len(present):]:
        ax.axis("off")
    for ax, key in zip(axes.flat, present):
        steps = [h.get("update", j + 1) for j, h in enumerate(history) if key in h]
        values = [np.nan if h[key] is None else float(h[key]) for h in history if key in h]
        ax.plot(steps, values, "o-", ms=3, lw=1.2)
        ax.set_title(f"{key} ({group_of[key]})" if key in group_of else key, fontsize=8, loc="left")
        ax.set_xlabel("update", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_reward_vs_heldout(history: Sequence[dict], evals: Sequence[dict], stop_update: int | None = None,
                           window: int = 5):
    """Three panels on one update axis (pure: logs in, Figure out).

    Left: the training score (per update) against the held-out pass rate and held-out mean reward
    (per evaluation). Middle: KL to the reference. Right: response length. Each per-update curve is
    drawn faint, with its trailing mean over ``window`` updates on top (one noisy update must not
    read as a trend). Read together: a score that climbs while the pass rate stays flat, with KL
    jumping or length shrinking, is the picture of reward hacking. ``stop_update``: draw where a
    stop rule would have ended the run.
    """
    import matplotlib.pyplot as plt

    from course_utils.machinery.report import smooth

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.8))
    steps = [h["update"] for h in history]
    left.plot(steps, [h.get("score", np.nan) for h in history], "o-", ms=3, color="tab:blue",
              label="training score (per update)")
    if evals:
        e_steps = [e["update"] for e in evals]
        pass_rate = [e["pass_rate"] for e in evals]
        mean_reward = [e.get("mean_reward", np.nan) for e in evals]
        left.plot(e_steps, pass_rate, "D-", color="tab:green", lw=2, label="held-out pass rate")
        # Drawn on top, dashed with open markers: under the checker's pass/fail reward it is the pass
        # rate itself, and a solid line would hide one of the two.
        # The trainer averages the rewards in float32: equal up to its rounding.
        same = all(math.isclose(r, p, abs_tol=1e-6) for r, p in zip(mean_reward, pass_rate))
        left.plot(e_steps, mean_reward, "s--", color="tab:purple", mfc="none", ms=7, zorder=3,
                  label="held-out mean reward" + (" (= pass rate at every evaluation)" if same else ""))
    left.set_title("reward vs held-out pass rate", fontsize=10)
    left.legend(fontsize=8)
    for ax, key, colour, title, unit in (
            (middle, "kl_per_sequence", "tab:red", "KL to the reference", "nats / response"),
            (right, "response_length", "tab:gray", "response length", "tokens")):
        values = [h.get(key, np.nan) for h in history]
        ax.plot(steps, values, "o", ms=2.5, color=colour, alpha=0.35, label="per update")
        ax.plot(steps, smooth(values, window), "-", lw=2, color=colour, label=f"mean of the last {window} updates")
        ax.set(title=title, ylabel=unit)
        ax.title.set_fontsize(10)
        ax.legend(fontsize=8)
    for ax in (left, middle, right):
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        if stop_update is not None:
            ax.axvline(stop_update, color="black", ls=":", lw=1.5)
    if stop_update is not None:
        left.annotate("stop rule fires", (stop_update, 0.02), xycoords=("data", "axes fraction"), fontsize=8,
                      rotation=90, ha="right", va="bottom")
    fig.tight_layout()
    return fig


def replay_hacking_rule(history: Sequence[dict], evals: Sequence[dict], patience: int, eval_every: int) -> dict:
    """Where ``stop_rules.check_heldout`` (training score up, held-out pass rate not above its best
    so far, ``patience`` evaluations in a row) would have stopped a logged run.

    The rule itself is not re-implemented: each evaluation is fed to it with the history up to its
    update, exactly as the trainer does. Returns ``stop_update`` (None if it never fires), the rule's
    ``message``, the pass rate of the policy at that point (``pass_at_stop``; at the end if it never
    fires), the best evaluation up to there (``best_update``, ``best_pass``: what best_policy/ keeps)
    and ``final_pass``, the pass rate at the end of the logged run."""
    from types import SimpleNamespace

    from course_utils.machinery.stop_rules import Streaks, check_heldout

    rule = SimpleNamespace(stop_hacking_patience=int(patience), eval_every=int(eval_every))
    streaks, stop, message = Streaks(), None, ""
    for k, e in enumerate(evals):
        signal, streaks = check_heldout([h for h in history if h["update"] <= e["update"]], list(evals[:k + 1]),
                                        rule, streaks)
        if signal is not None:
            stop, message = k, str(signal)
            break
    kept = list(evals[:stop + 1]) if stop is not None else list(evals)
    best = max(kept, key=lambda e: e["pass_rate"])  # the first of equal bests, as the trainer keeps it
    return {"patience": int(patience), "stop_update": kept[-1]["update"] if stop is not None else None,
            "message": message, "pass_at_stop": kept[-1]["pass_rate"], "best_update": best["update"],
            "best_pass": best["pass_rate"], "final_pass": evals[-1]["pass_rate"]}


# ---------------------------------------------------------------------------------------------
# 3. Does the reward agree with the checker? How noisy is a pass rate?
# ---------------------------------------------------------------------------------------------


def reward_checker_agreement(scores: Sequence[float], passed: Sequence[bool]) -> dict:
    """Mean reward of answers the checker passes vs fails, and their correlation.

        correlation = Pearson(scores, passed as 0/1)   (the point-biserial correlation)

    Returns ``{"n", "n_pass", "n_fail", "mean_pass", "mean_fail", "gap", "correlation"}``; a mean is
    NaN when its side is empty, the correlation NaN when scores or verdicts do not vary. The
    source lesson's strengthened reward model: mean 9.42 on passing answers, 0.10 on failing
    ones, correlation 0.885. A reward that agrees on average can still pay for near-misses.
    """
    s = np.asarray(scores, dtype=float)
    p = np.asarray(passed, dtype=bool)
    if s.shape != p.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and passed {p.shape} must be two lists of the same length")
    from course_utils.reward_model import point_biserial  # the one implementation of the correlation

    nan = float("nan")
    mean_pass = float(s[p].mean()) if p.any() else nan
    mean_fail = float(s[~p].mean()) if (~p).any() else nan
    correlation = point_biserial(s.tolist(), p.tolist()) if len(s) else nan
    return {"n": int(len(s)), "n_pass": int(p.sum()), "n_fail": int((~p).sum()), "mean_pass": mean_pass,
            "mean_fail": mean_fail, "gap": mean_pass - mean_fail, "correlation": correlation}


def per_family_score_and_pass(groups: Sequence[str], scores: Sequence[float],
                              passed: Sequence[bool]) -> dict[str, dict]:
    """``{family: {"score": mean reward, "pass_rate": share passed, "n": answers}}``, families sorted."""
    if not len(groups) == len(scores) == len(passed):
        raise ValueError(f"{len(groups)} groups, {len(scores)} scores and {len(passed)} verdicts: "
                         "give one of each per answer")
    table: dict[str, list] = {}
    for g, s, p in zip(groups, scores, passed):
        table.setdefault(g, []).append((float(s), bool(p)))
    return {g: {"score": float(np.mean([s for s, _ in rows])), "pass_rate": float(np.mean([p for _, p in rows])),
                "n": len(rows)} for g, rows in sorted(table.items())}


def plot_score_vs_pass(before: dict[str, dict], after: dict[str, dict] | None = None):
    """Mean reward (x) against checker pass rate (y), one point per task family; with ``after``,
    each family's point before training is a grey ring and its point after a blue dot inside or
    away from it, with a curved arrow (off the diagonal) for every family that moved, and the label
    of a family that moved names its pass rate before and after (pure: Figure out).

    Points far to the right of the diagonal are families where the reward pays for answers the
    checker fails: the room a policy has to raise its reward without getting better.
    (Issue 49, week 8: grey points under blue ones, straight arrows on the diagonal and no label
    at the start left the families that moved indistinguishable.)
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(6.5, 5))
    ax.plot([0, 1], [0, 1], color="0.8", lw=1, zorder=0)
    labels: dict[tuple[float, float], list[str]] = {}  # families that end on the same point share a label
    for family, b in before.items():
        start = (b["score"], b["pass_rate"])
        if after is None:
            ax.plot(*start, "o", color="tab:gray")
            end = b
        else:
            ax.plot(*start, "o", mfc="white", mec="tab:gray", mew=1.5, ms=10, zorder=3)
            end = after.get(family, b)
        name = family
        if after is not None and family in after:
            stop = (end["score"], end["pass_rate"])
            if (round(stop[0], 3), round(stop[1], 3)) != (round(start[0], 3), round(start[1], 3)):
                ax.annotate("", xy=stop, xytext=start, zorder=2,
                            arrowprops=dict(arrowstyle="->", color="tab:blue", lw=1.2, shrinkA=6, shrinkB=4,
                                            connectionstyle="arc3,rad=0.35"))
                name = f"{family}: pass {b['pass_rate']:.0%} → {end['pass_rate']:.0%}"
            ax.plot(*stop, "o", color="tab:blue", ms=5, zorder=4)
        labels.setdefault((round(end["score"], 3), round(end["pass_rate"], 3)), []).append(name)
    for (x, y), names in labels.items():
        right = x > 0.55  # the label goes to the open side of the diagonal, inside the axes
        ax.annotate("\n".join(names), (x, y), fontsize=7, xytext=(-8, 2) if right else (6, 3),
                    textcoords="offset points", va="bottom", ha="right" if right else "left")
    ax.set_xlabel("mean reward of the answers")
    ax.set_ylabel("checker pass rate")
    ax.set_xlim(-0.05, 1.1)
    ax.set_ylim(-0.05, 1.1)
    ax.set_title("reward vs checker, per task family", fontsize=10)
    if after is not None:
        ax.legend(handles=[Line2D([], [], ls="", marker="o", mfc="white", mec="tab:gray", mew=1.5, ms=10),
                           Line2D([], [], ls="", marker="o", color="tab:blue", ms=5)],
                  labels=["before training", "after training"], loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def binomial_standard_error(p: float, n: int) -> float:
    """Standard error of a pass rate p measured on n independent prompts: sqrt(p (1 - p) / n).

    On 100 prompts at p = 0.24 it is about 0.043: a change of 2 points is well inside the noise.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 prompt, got {n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p is a pass rate and must lie in [0, 1], got {p}")
    return math.sqrt(p * (1.0 - p) / n)


def pass_flags(passed, name: str = "passed") -> list[bool]:
    """One True/False per answer from booleans (or 0/1) or from ``tasks.check`` verdicts, whose
    ``.passed`` is read: a verdict object is always truthy, so ``[tasks.check(r, a) for ...]`` without
    ``.passed`` would otherwise count every answer as a pass. Anything else is refused by name."""
    flags = []
    for k, value in enumerate(passed):
        value = getattr(value, "passed", value)
        if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a NumPy or torch scalar
            value = value.item()
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            flags.append(bool(value))
            continue
        raise ValueError(f"{name}[{k}] is {value!r} ({type(value).__name__}): give one True/False per answer, "
                         "e.g. [tasks.check(r, a).passed for r, a in ...]")
    return flags


def paired_pass_change(passed_before: Sequence[bool], passed_after: Sequence[bool]) -> dict:
    """The same prompts graded before and after: ``{"gained", "lost", "n", "p_value"}``.

    gained = prompts failed before and passed after; lost = the reverse. The prompts passed (or
    failed) both times say nothing about the change, so the test reads only the g + l that moved:
    under "no change" each of them is a fair coin between gained and lost (McNemar's exact test),

        p = min(1, 2 · Σ_{k ≤ min(g, l)} C(g + l, k) / 2^(g + l))      (two-sided; 1 when g + l = 0)

    Sharper than two independent standard errors: the prompt-to-prompt differences in difficulty
    cancel."""
    if len(passed_before) != len(passed_after):
        raise ValueError(f"the two gradings must cover the same prompts: {len(passed_before)} != {len(passed_after)}")
    passed_before, passed_after = pass_flags(passed_before, "passed_before"), pass_flags(passed_after, "passed_after")
    gained = sum(1 for b, a in zip(passed_before, passed_after) if not b and a)
    lost = sum(1 for b, a in zip(passed_before, passed_after) if b and not a)
    moved = gained + lost
    tail = sum(math.comb(moved, k) for k in range(min(gained, lost) + 1)) / 2 ** moved
    return {"gained": gained, "lost": lost, "n": len(passed_before), "p_value": min(1.0, 2 * tail)}


def read_run_logs(run_dir) -> tuple[list[dict], list[dict]]:
    """``(history, evals)`` of a run folder: one dict per update (metrics.jsonl) and per held-out
    evaluation (evals.jsonl)."""
    import json
    from pathlib import Path

    folder = Path(run_dir)
    missing = [n for n in ("metrics.jsonl", "evals.jsonl") if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} has no {' or '.join(missing)}: is it a finished run folder "
                                "(python -m course_utils ppo ... --set run_name=...)?")

    def rows(name):
        return [json.loads(line, object_hook=lambda d: {k: float("nan") if v is None else v for k, v in d.items()})
                for line in (folder / name).read_text().splitlines() if line.strip()]  # null (no number) -> NaN

    return rows("metrics.jsonl"), rows("evals.jsonl")


def plot_runs(runs: dict[str, tuple[Sequence[dict], Sequence[dict]]]):
    """Several runs side by side, one colour each, on three shared panels against the update:
    held-out pass rate (per evaluation, on a 0-100 axis, each point with a ±1 standard error
    whisker from its prompt count, ``len(e["answers"])``; no line joins the points, since nothing
    was measured between evaluations), training score and KL per response (per update).
    ``runs[label] = (history, evals)``, e.g. from ``read_run_logs``. Pure: logs in, Figure out."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.6))
    panels = fig.subplots(1, 3, sharex=True)
    for i, (label, (history, evals)) in enumerate(runs.items()):
        colour = f"C{i}"
        rates = [e["pass_rate"] for e in evals]
        counts = [len(e.get("answers") or ()) for e in evals]  # older logs have no answers: no whiskers
        errors = [100 * binomial_standard_error(e["pass_rate"], n) if n else math.nan for e, n in zip(evals, counts)]
        # A small sideways offset per run keeps the whiskers of runs evaluated at the same updates apart.
        panels[0].errorbar([e["update"] + 0.3 * i for e in evals], [100 * r for r in rates],
                           yerr=None if all(math.isnan(x) for x in errors) else errors,
                           fmt="o", ms=4, color=colour, elinewidth=1, label=label)
        steps = [h["update"] for h in history]
        panels[1].plot(steps, [h.get("score", np.nan) for h in history], color=colour, lw=1, label=label)
        panels[2].plot(steps, [h.get("kl_per_sequence", np.nan) for h in history], color=colour, lw=1, label=label)
    titles = ("held-out pass rate, % (±1 standard error)", "training score", "KL per response (nats)")
    for ax, title in zip(panels, titles):
        ax.set(xlabel="update", title=title)
        ax.grid(alpha=0.3)
    panels[0].set_ylim(0, 100)
    panels[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


TRUST_REGION_PANELS = (("approx_kl", "approximate KL to π_old (mean of the update's steps)"),
                       ("policy_clipfrac", "policy clip fraction"),
                       ("ratio_max", "largest ratio π/π_old (mean of the update's steps)"))


def trust_region_summary(history: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Median, 90th percentile and maximum over a run's updates of each ``TRUST_REGION_PANELS``
    metric: how far the updates moved the policy from the policy that sampled their batch."""
    out = {}
    for key, _ in TRUST_REGION_PANELS:
        x = _finite([h.get(key) for h in history])
        out[key] = ({"median": float(np.median(x)), "p90": float(np.percentile(x, 90)), "max": float(x.max())}
                    if len(x) else {"median": np.nan, "p90": np.nan, "max": np.nan})
    return out


def plot_trust_region(runs: dict[str, Sequence[dict]], target_kl: float = 0.0, cliprange: float = 0.2,
                      ratio_ceiling: float = 5.0):
    """How far each update moved the policy, for one or more runs (``runs[label] = history``, the
    rows of metrics.jsonl): approximate KL to π_old, policy clip fraction and the largest ratio,
    against the update. With ``target_kl`` > 0 a dashed line marks 1.5 x target_kl, where the
    early stop skips an update's remaining steps; a dotted line marks 1 + ``cliprange`` on the
    largest-ratio panel, which is drawn on a log axis cut at ``ratio_ceiling``: a run whose largest
    ratio goes above it gets its maximum (and update) written in the panel, and its ticks are plain
    numbers (1.2, 2, 3), not powers of ten. One legend under the panels names the runs and the
    reference lines, off the data. Pure: logs in, Figure out."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(13, 3.9))
    panels = fig.subplots(1, 3, sharex=True)
    above_ceiling = []
    for i, (label, history) in enumerate(runs.items()):
        steps = [h["update"] for h in history]
        for ax, (key, _) in zip(panels, TRUST_REGION_PANELS):
            ax.plot(steps, [h.get(key, np.nan) for h in history], color=f"C{i}", lw=1, label=label)
        ratios = [(h["ratio_max"], h["update"]) for h in history if h.get("ratio_max") is not None
                  and math.isfinite(h["ratio_max"])]
        if ratios and max(ratios)[0] > ratio_ceiling:
            above_ceiling.append((label, *max(ratios), f"C{i}"))
    if target_kl > 0:
        panels[0].axhline(pm.TARGET_KL_FACTOR * target_kl, color="k", ls="--", lw=1,
                          label=f"{pm.TARGET_KL_FACTOR:g} x target_kl {target_kl:g}")
    for ax, (_, title) in zip(panels, TRUST_REGION_PANELS):
        ax.set(xlabel="update", title=title)
        ax.grid(alpha=0.3)
    panels[0].set_yscale("log")
    # The largest ratio spans 1.1 to 50 and more between runs: one run's spike would squash the other
    # runs' curves even on a log axis. The axis stops at ratio_ceiling, and each cut peak is written out.
    panels[2].set_yscale("log")
    panels[2].axhline(1 + cliprange, color="0.5", ls=":", lw=1, label=f"1 + ε = {1 + cliprange:g}")
    if above_ceiling:
        panels[2].set_ylim(top=ratio_ceiling)
        for k, (label, peak, update, color) in enumerate(above_ceiling):
            panels[2].text(0.02, 0.96 - 0.09 * k, f"{label}: up to {peak:.3g} (update {update}), off the axis",
                           transform=panels[2].transAxes, fontsize=7, color=color, va="top")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    panels[2].yaxis.set_major_formatter(plain)
    panels[2].yaxis.set_minor_formatter(plain)
    panels[2].tick_params(axis="y", which="minor", labelsize=7)
    handles, labels = panels[0].get_legend_handles_labels()
    for handle, label in zip(*panels[2].get_legend_handles_labels()):
        if label not in labels:  # the 1 + ε line; the runs are named once
            handles.append(handle)
            labels.append(label)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
