"""Lesson 11, "When is PPO worth it?": reading the course's own measured arms. Pure functions:
committed numbers in, a Figure or a dict out; the slider only wires a choice to them.

The numbers come from two committed files made by the arms' scripts:
``runs/example/rlhf_learning.json`` (the pipeline's arms, perfect demonstrations for every family)
and ``runs/example/when_ppo_wins.json`` (the designs where the demonstrations fall short).
Each holds ``arms[arm][held-out set] = [pass rate per seed, in percent]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from course_utils.machinery.paths import EXAMPLE_RUNS

RUNS = EXAMPLE_RUNS


def load_measurements(folder: Path = RUNS) -> dict:
    """``{"pipeline": rlhf_learning.json, "designs": when_ppo_wins.json's designs}`` (designs empty
    when that file is not there yet)."""
    pipeline = json.loads((folder / "rlhf_learning.json").read_text())
    designs_file = folder / "when_ppo_wins.json"
    designs = json.loads(designs_file.read_text())["designs"] if designs_file.is_file() else {}
    return {"pipeline": pipeline, "designs": designs}


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation / sqrt(n); 0 for one value)."""
    x = np.asarray(values, dtype=float)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean ± standard error of a - b paired by seed (the same seed's warm-up, data order, ...):
    the seed-to-seed spread both arms share cancels."""
    if len(a) != len(b):
        raise ValueError(f"paired by seed: both arms need the same seeds, got {len(a)} and {len(b)} values")
    return mean_se(np.subtract(a, b))


def pass_at_k_shift(pass_at_k: Mapping[str, Mapping[str, Mapping[str, float]]], start: str = "sft",
                    after: str = "sft_ppo_checker") -> dict[str, dict[str, float]]:
    """Per family: pass@1 before and after PPO, pass@k before, and the share of the room PPO used,

        used = (pass@1 after - pass@1 before) / (pass@k before - pass@1 before)

    (None where there was no room: pass@k before = pass@1 before). Inputs in percent, as
    ``rlhf_learning.json["per_family_test"]`` holds them."""
    out = {}
    for family, before in pass_at_k[start].items():
        room = before["pass_at_16"] - before["pass_at_1"]
        gain = pass_at_k[after][family]["pass_at_1"] - before["pass_at_1"]
        out[family] = {"pass_at_1_before": before["pass_at_1"], "pass_at_16_before": before["pass_at_16"],
                       "pass_at_1_after": pass_at_k[after][family]["pass_at_1"],
                       "room_used": gain / room if room > 0 else None}
    return out


def plot_pass_at_k_shift(shift: Mapping[str, Mapping[str, float]], k: int = 16) -> Figure:
    """One row per family: an arrow from pass@1 before PPO to pass@1 after, and a tick at pass@k
    before. RL moves pass@1 towards pass@k; it has nothing to move where pass@k is 0."""
    families = sorted(shift, key=lambda f: -shift[f]["pass_at_16_before"])
    fig = Figure(figsize=(7, 0.38 * len(families) + 1.5))
    ax = fig.subplots()
    for y, family in enumerate(families):
        s = shift[family]
        ax.annotate("", xy=(s["pass_at_1_after"], y), xytext=(s["pass_at_1_before"], y),
                    arrowprops={"arrowstyle": "->", "color": "C0", "lw": 1.8})
        ax.plot(s["pass_at_1_before"], y, "o", color="C0", ms=4)
        ax.plot(s["pass_at_16_before"], y, "|", color="C3", ms=14, mew=2)
    ax.plot([], [], "->", color="C0", label="pass@1: SFT start → after PPO")
    ax.plot([], [], "|", color="C3", ms=10, mew=2, label=f"pass@{k} of the SFT start (the reach)")
    ax.set_yticks(range(len(families)), families, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlim=(-2, 102), xlabel="sampled answers that pass the checker, % (test prompts, mean of 3 seeds)",
           title="PPO turns what the policy can do into what it does")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


NO_SFT_NAME = "no SFT possible: the instruct model"
"""What stands in the SFT column where no family has demonstrations (the 0% coverage point)."""
OTHER_PPO_NAME = "another recipe: the cpu preset from the instruct model"
"""What stands in the PPO column at the 0% coverage point: not the warm-up + PPO on the strict
checker of the other points, but ``configs/cpu.yaml`` (no warm-up, its own reward and lr)."""


def demo_coverage_points(measurements: Mapping, measure: str = "all") -> list[dict]:
    """The measured points of "which arm wins as demonstrations cover fewer tasks", in percent of
    the task families that have demonstrations:

        100%  rlhf_learning.json: SFT on every demonstration (``sft_full``) against warm-up + PPO
              on the checker (``sft_ppo_checker``)
        80%   when_ppo_wins.json design (g): the same two arms without lowercase_word's and
              number_only's demonstrations
        0%    no demonstrations at all: SFT has nothing, so the instruct model (``base``) is its
              result; PPO from the instruct model on the checker (``ppo_instruct``)

    Where a design also measured filtered SFT (``sft_filtered_nodemo``: the demonstrations that
    exist plus the model's own answers the checker passed), the point carries it as
    ``"sft_filtered"``: the strongest non-RL control, read by ``verdict`` too.

    ``measure``: "all" reads every test prompt (the same 100 at each point); "uncovered" reads only
    the prompts of families without demonstrations (so the 100% point has none, and 0% is all).
    Each point: ``{"coverage", "sft": [per seed], "ppo": [per seed], "measured_on"}``; the 0% point
    also has ``"sft_name"`` (``NO_SFT_NAME``), since its "SFT" is the untrained instruct model, and
    ``"ppo_name"`` (``OTHER_PPO_NAME``), since its PPO is a different recipe."""
    if measure not in ("all", "uncovered"):
        raise ValueError(f"measure is 'all' or 'uncovered', got {measure!r}")
    arms = measurements["pipeline"]["arms"]
    points = [{"coverage": 0, "sft": arms["base"]["test"], "ppo": arms["ppo_instruct"]["test"],
               "sft_name": NO_SFT_NAME, "ppo_name": OTHER_PPO_NAME,
               "measured_on": "all 100 test prompts (no family has demonstrations)"}]
    design = measurements["designs"].get("g_no_demonstrations")
    if design:
        key = "test" if measure == "all" else "test_nodemo"
        where = "all 100 test prompts" if measure == "all" else \
            f"the {len(design['withheld']) * 10} test prompts of {' and '.join(design['withheld'])}, which have none"
        point = {"coverage": 80, "sft": design["arms"]["sft_full_nodemo"][key],
                 "ppo": design["arms"]["sft_ppo_checker_nodemo"][key], "measured_on": where}
        if "sft_filtered_nodemo" in design["arms"]:
            point["sft_filtered"] = design["arms"]["sft_filtered_nodemo"][key]
        points.append(point)
    if measure == "all":
        points.append({"coverage": 100, "sft": arms["sft_full"]["test"], "ppo": arms["sft_ppo_checker"]["test"],
                       "measured_on": "all 100 test prompts"})
    return points


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t distribution with ``df`` degrees of freedom (t_{0.975, 2} =
    4.303, t_{0.975, 4} = 2.776). The CDF is the density integrated by Simpson's rule,

        F(t) = 1/2 + ∫_0^t  Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) · (1 + x²/ν)^(-(ν+1)/2) dx,

    and the quantile is found by bisection: no scipy needed, accurate to about 1e-6."""
    if not 0 < p < 1 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float, steps: int = 4000) -> float:
        x = np.linspace(0.0, t, steps + 1)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
        return 0.5 + (t / steps / 3) * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class Comparison:
    """A − B with its interval: the rule every verdict of lesson 11 follows.

    Paired by seed (the same seeds in both arms), d_s = a_s − b_s over n seeds:

        mean ± SE = d̄ ± s_d / √n,     interval = d̄ ± t_{(1+level)/2, n−1} · SE

    plus the sign count (seeds where A was ahead, behind, level). Unpaired (different seeds, or a
    single run on one side), Welch's interval with the Welch–Satterthwaite degrees of freedom; with one
    run on one side that is a one-sample t-interval on the other arm's seeds against that run taken as a
    constant (its own sampling noise is not counted, so the interval is too narrow by that much).
    "A ahead" only when the whole interval is above 0, "B ahead" only when it is below; otherwise
    "level within noise". With three seeds t = 4.30: "beyond two standard errors" is not enough."""

    difference: float
    se: float
    df: float | None
    t: float | None
    low: float | None
    high: float | None
    n: int
    positive: int
    negative: int
    ties: int
    paired: bool
    level: float = 0.95
    one_run: bool = False  # unpaired, with a single run on one side

    @property
    def how(self) -> str:
        if self.paired:
            return f"paired by seed, n = {self.n}"
        if self.one_run:
            return (f"unpaired, one run against {self.n} seeds: a one-sample t on the seeds, "
                    "the one run's own noise not counted")
        return "unpaired (Welch)"

    def winner(self, a: str = "A", b: str = "B") -> str | None:
        """``a`` or ``b`` when the interval excludes 0, else None."""
        if self.low is None:
            return None
        return a if self.low > 0 else b if self.high < 0 else None

    def verdict(self, a: str = "A", b: str = "B") -> str:
        who = self.winner(a, b)
        if self.low is None:
            return "no interval (a single run on each side)"
        return f"{who} ahead" if who else "level within noise"

    def interval_text(self) -> str:
        if self.low is None:
            return "no interval"
        return f"{self.level:.0%} interval [{_signed(self.low)}, {_signed(self.high)}]"

    def record(self, a: str = "A", b: str = "B") -> str:
        """The numbers without a verdict: ``a − b = +4.7 ± 2.7 (95% interval [-7.0, +16.4], paired by
        seed, n = 3; a ahead in 2 of 3 seeds)``, for a comparison a pre-registered rule has not
        decided yet (too few seeds), where the interval is a record, not a finding."""
        signs = f"; {a} ahead in {self.positive} of {self.n} seeds" if self.paired else ""
        return f"{a} − {b} = {_signed(self.difference)} ± {self.se:.1f} ({self.interval_text()}, {self.how}{signs})"

    def sentence(self, a: str = "A", b: str = "B") -> str:
        """``a − b = +4.7 ± 2.7 (95% interval [-7.0, +16.4], paired by seed, n = 3; a ahead in 2 of
        3 seeds): level within noise``."""
        return f"{self.record(a, b)}: {self.verdict(a, b)}"


def _signed(x: float, digits: int = 1) -> str:
    """``x`` with its sign, rounded, and never "-0.0" for a value that rounds to zero."""
    return f"{round(x, digits) + 0.0:+.{digits}f}"


def interval_half_width(values: Sequence[float], level: float = 0.95) -> float:
    """Half the width of the ``level`` t-interval of the mean of ``values`` (t_{(1+level)/2, n−1} · SE):
    what the lesson's figures draw as error bars. 0 for a single value, which has no spread."""
    n = len(values)
    return t_quantile((1 + level) / 2, n - 1) * mean_se(values)[1] if n > 1 else 0.0


def compare(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Comparison:
    """A − B by the interval rule (``Comparison``): paired by seed when both arms have the same
    number of seeds (more than one), Welch's unpaired interval otherwise."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not a.size or not b.size:
        raise ValueError("each arm needs at least one value")
    for arm, values in (("a", a), ("b", b)):
        missing = np.flatnonzero(~np.isfinite(values)).tolist()
        if missing:
            raise ValueError(f"arm {arm} has no number at position(s) {missing} (NaN, inf or None): compare the "
                             "seeds measured in both arms, and leave a missing seed out of both (they pair by position)")
    if a.size == b.size > 1:
        d = a - b
        mean, se = mean_se(d)
        df = a.size - 1
        t = t_quantile((1 + level) / 2, df)
        return Comparison(mean, se, df, t, mean - t * se, mean + t * se, int(d.size), int((d > 0).sum()),
                          int((d < 0).sum()), int((d == 0).sum()), True, level)
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    diff, se = ma - mb, float(np.hypot(sa, sb))
    if se == 0:  # a single run on each side (or no spread at all): no interval to speak of
        return Comparison(diff, 0.0, None, None, None, None, int(max(a.size, b.size)), 0, 0, 0, False, level)
    parts = [(s ** 2, n - 1) for s, n in ((sa, a.size), (sb, b.size)) if n > 1]
    df = se ** 4 / sum(v ** 2 / k for v, k in parts)
    t = t_quantile((1 + level) / 2, df)
    return Comparison(diff, se, df, t, diff - t * se, diff + t * se, int(max(a.size, b.size)), 0, 0, 0, False, level,
                      one_run=min(a.size, b.size) == 1)


def sign_test(positive: int, negative: int) -> float:
    """Two-sided exact sign test: if every seed were a fair coin between the two arms, the chance of
    a split at least as lopsided as ``positive`` against ``negative`` (ties left out),

        p = min(1, 2 · Σ_{i ≤ min(positive, negative)} C(n, i) / 2^n),   n = positive + negative.

    9 of 9 seeds one way: p = 2 / 2^9 = 0.0039; 3 of 3: p = 0.25, so one level's three seeds can
    never pass it at 5%."""
    if positive < 0 or negative < 0:
        raise ValueError(f"counts must be >= 0, got {positive} and {negative}")
    n = positive + negative
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(positive, negative) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def pooled_over_levels(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], level: float = 0.95) -> dict:
    """A − B over several levels of one design (its noise levels, say) whose levels ran on the same seeds.

    The levels of one seed are not independent draws: they share the seed's data order, its prompts and
    (design (f)) its corrupted demonstrations, a higher rate only adding wrong rows to a lower one's. So
    the independent units are the seeds, not the (level, seed) pairs, and a sign test over those pairs
    (9 of 9, "p = 0.004") would count each seed three times. Here each seed's difference is averaged over
    the levels,

        d_s = 1/L · Σ_l (A_{l,s} − B_{l,s}),

    and the d_s are read by the interval rule (``compare`` on the per-seed means: paired, n − 1 degrees
    of freedom, the sign count over seeds; with 3 seeds a sign test alone cannot go below p = 0.25).
    The (level, seed) pairs where A was ahead, behind or level are counted too, as a description of the
    direction, never as a test. ``pairs``: one (A's values, B's values) per level, per seed, the seeds
    in the same order at every level.

    Returns ``{"by_seed": Comparison, "ahead": int, "behind": int, "tied": int, "pairs": int,
    "levels": L, "seeds": S}``.
    """
    arrays = [(np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for a, b in pairs]
    seeds = {a.size for a, b in arrays} | {b.size for a, b in arrays}
    if not arrays or len(seeds) != 1 or seeds == {1}:
        raise ValueError("pooled_over_levels needs, at every level, both arms on the same seeds (two or more), "
                         f"got sizes {[(a.size, b.size) for a, b in arrays]}")
    differences = np.stack([a - b for a, b in arrays])  # [L, S]
    if not np.isfinite(differences).all():
        raise ValueError("pooled_over_levels: a level has a seed without a number (NaN or inf); leave that seed "
                         "out of every level")
    mean_a = np.mean([a for a, _ in arrays], axis=0)
    mean_b = np.mean([b for _, b in arrays], axis=0)
    return {"by_seed": compare(mean_a, mean_b, level), "ahead": int((differences > 0).sum()),
            "behind": int((differences < 0).sum()), "tied": int((differences == 0).sum()),
            "pairs": int(differences.size), "levels": len(arrays), "seeds": seeds.pop()}


def ppo_step_sizes(run: Path, window: int = 10) -> dict:
    """What held a PPO run near its start, read from its ``metrics.jsonl`` (one line per update):
    means over the first and the last ``window`` updates of

        kl_per_response   KL(π ‖ π_ref) per answer (k1 summed over its tokens), nats
        beta_kl           kl_coef · kl_per_response: the penalty in the reward's own units
        clipfrac          the share of tokens whose probability ratio was clipped
        score             the reward before the penalty (the checker's 0/1, or the reward model's score)
        entropy           the policy's mean token entropy on its own samples, nats (where logged)

    as ``{"updates", "kl_coef", "<measure>_first", "<measure>_last"}``. An update that took no
    optimiser step (Reinforce-Rej drops every group whose answers all pass or all fail) logs no
    clip fraction or entropy: those means are over the updates that did; None where none did."""
    rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{run}: metrics.jsonl has no updates")
    measures = {"kl_per_response": lambda r: r["kl_per_sequence"],
                "beta_kl": lambda r: r["kl_coef"] * r["kl_per_sequence"],
                "clipfrac": lambda r: r.get("policy_clipfrac"), "score": lambda r: r["score"],
                "entropy": lambda r: r.get("entropy")}

    def mean(part):
        values = [v for v in part if v is not None]
        return float(np.mean(values)) if values else None

    out = {"updates": len(rows), "kl_coef": rows[-1]["kl_coef"]}
    for name, read in measures.items():
        out[f"{name}_first"] = mean([read(r) for r in rows[:window]])
        out[f"{name}_last"] = mean([read(r) for r in rows[-window:]])
    return out


def pooled_mcnemar(passed_a: Sequence[Sequence[bool]], passed_b: Sequence[Sequence[bool]]) -> dict:
    """McNemar's exact test over the pooled seed × prompt pairs: ``passed_a[s][i]`` and
    ``passed_b[s][i]`` grade the same prompt i of seed s under arms A and B
    (``diagnostics.paired_pass_change`` with B as "before" and A as "after": ``gained`` counts the
    prompts A passes and B fails). The prompts pair, so their difficulty cancels; the seeds are
    pooled, so this reads the per-prompt evidence, not the seed-to-seed spread that the t-interval reads."""
    from course_utils.lesson_aids.diagnostics import paired_pass_change

    if len(passed_a) != len(passed_b):
        raise ValueError(f"the two arms need the same seeds, got {len(passed_a)} and {len(passed_b)}")
    before = [bool(x) for seed in passed_b for x in seed]
    after = [bool(x) for seed in passed_a for x in seed]
    return paired_pass_change(before, after)


def verdict(point: Mapping) -> str:
    """Which arm is ahead at one measured point, by ``compare``'s interval rule (paired by seed when
    the seeds pair, Welch's interval otherwise): a sentence (two where the point also has filtered SFT)."""
    def shown(values):  # a single run has no standard error: say so rather than print "± 0.0"
        mean, se = mean_se(values)
        return f"{mean:.1f} ± {se:.1f}" if len(values) > 1 else f"{mean:.0f} (one run)"

    # at 0% the "SFT" arm is the untrained instruct model: the difference is PPO against no training
    other = "no training" if "sft_name" in point else "SFT"
    result = compare(point["ppo"], point["sft"])
    text = (f"{point['coverage']}% of the families with demonstrations — {point.get('sft_name', 'SFT')} "
            f"{shown(point['sft'])}, PPO {shown(point['ppo'])}: {result.sentence('PPO', other)} "
            f"(measured on {point['measured_on']}).")
    if "sft_filtered" in point:
        filtered, filtered_se = mean_se(point["sft_filtered"])
        result = compare(point["ppo"], point["sft_filtered"])
        text += f" Against filtered SFT ({filtered:.1f} ± {filtered_se:.1f}): {result.sentence('PPO', 'filtered SFT')}."
    return text


def plot_coverage(points: Sequence[Mapping], highlight: int | None = None) -> Figure:
    """SFT and PPO against the share of task families with demonstrations: the measured points
    only (mean with its 95% t-interval, dots per seed), joined by dotted lines that say nothing was
    measured in between. A point whose arm is another recipe (``sft_name``, ``ppo_name``: the 0%
    point's instruct model and cpu preset) is named beside it and not joined to the others. The
    legend, with how to read the marks as its title, sits under the axes, clear of every point and
    of the names beside the 0% point."""
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.subplots()
    xs = [p["coverage"] for p in points]
    for name, colour, offset in (("sft", "C1", -1.2), ("ppo", "C0", 1.2)):
        means = [mean_se(p[name]) for p in points]
        ax.errorbar(np.add(xs, offset), [m for m, _ in means], yerr=[interval_half_width(p[name]) for p in points],
                    fmt="o", color=colour,
                    capsize=3, label={"sft": "SFT on the demonstrations that exist",
                                      "ppo": "warm-up + PPO on the strict checker"}[name])
        same = [i for i, p in enumerate(points) if f"{name}_name" not in p]  # one recipe: joined
        ax.plot([xs[i] + offset for i in same], [means[i][0] for i in same], ":", color=colour, lw=0.8)
        for x, p in zip(xs, points):
            ax.plot(np.full(len(p[name]), x + offset), p[name], ".", color=colour, alpha=0.5)
    for x, p in zip(xs, points):  # a point whose arm is another recipe says so beside it
        for name, colour, offset, dy in (("sft", "C1", -1.2, -8), ("ppo", "C0", 1.2, 8)):
            if f"{name}_name" in p:
                ax.annotate(p[f"{name}_name"], (x + offset, mean_se(p[name])[0]), xytext=(8, dy),
                            textcoords="offset points", ha="left", va="center", fontsize=7, color=colour)
    filtered = [p for p in points if "sft_filtered" in p]
    for i, p in enumerate(filtered):  # measured at fewer points: markers only, no line
        mean = mean_se(p["sft_filtered"])[0]
        ax.errorbar([p["coverage"]], [mean], yerr=[interval_half_width(p["sft_filtered"])], fmt="s", color="C2", capsize=3,
                    label="filtered SFT (+ the model's own answers the checker passed)" if i == 0 else None)
    if highlight is not None:
        ax.axvspan(highlight - 4, highlight + 4, color="0.85", zorder=0)
    ax.set(xlabel="task families that have demonstrations, %", ylabel="strict held-out pass rate, %",
           xticks=xs, ylim=(0, 100), title="who wins depends on what the demonstrations cover")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), title_fontsize=7,
              title="bars: 95% t-intervals of the mean; dotted: joins measured points (nothing measured between)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_design_arms(design: Mapping, labels: Mapping[str, str]) -> Figure:
    """A design's arms on its held-out sets (``design["arms"][arm][set]``, per seed, percent): the
    demo-less families first, then the families with demonstrations. ``labels`` names the arms to
    draw, in order (``pipeline_plots.plot_arms`` draws them)."""
    from course_utils.lesson_aids.pipeline_plots import plot_arms

    sets = {"test_nodemo": "families without demos", "test_unseen_nodemo": "the same, unseen phrasings",
            "test_demo": "families with demos"}
    arms = {labels[arm]: {s: design["arms"][arm][s] for s in sets} for arm in labels}
    fig = plot_arms(arms, set_labels=sets)
    fig.axes[0].set_title("design (g): tasks nobody demonstrated (mean ± SE; dots: seeds)", fontsize=10)
    return fig


NOISE_RATES = (0.25, 0.5, 0.75)
"""Design (f)'s noise levels, fixed before any run: either side of one half, where the habit becomes
the majority answer of every family (noise 0 is the pipeline's own arms)."""


def missing_noisy_arms(design: Mapping, planned: Sequence[float] = NOISE_RATES,
                       kinds: Sequence[str] | None = None) -> dict[float, list[str]]:
    """For each planned noise level of design (f), the arm kinds (``NOISY_DESIGN_ARMS`` unless
    ``kinds`` is given) that ``design["arms"]`` has no "<kind>@<rate>" for; levels with every arm are
    left out. A level with one arm of four is not a crossover point yet: the arms must be compared
    at the same level."""
    kinds = list(NOISY_DESIGN_ARMS) if kinds is None else list(kinds)
    missing = {rate: [kind for kind in kinds if f"{kind}@{rate:g}" not in design["arms"]] for rate in planned}
    return {rate: absent for rate, absent in missing.items() if absent}


def chance_pass_at_k(p: float, k: int) -> float:
    """pass@k of a policy whose samples pass independently, each with probability ``p``:

        pass@k = 1 - (1 - p)^k

    A two-answer task (Yes or No) guessed at random has p = 1/2, so pass@16 = 1 - 0.5^16: its
    pass@16 says nothing about what the policy can do."""
    if not 0.0 <= p <= 1.0 or k < 1:
        raise ValueError(f"need 0 <= p <= 1 and k >= 1, got p={p}, k={k}")
    return 1.0 - (1.0 - p) ** k


NOISY_DESIGN_ARMS = ("sft_full", "sft_filtered", "sft_ppo_checker", "sft_ppo_learned_rm")
"""Design (f)'s four arms at each noise level (the PPO arms' warm-up, ``sft_warm_up``, comes with them)."""
NOISY_ARM_LABELS = {
    "sft_full": "SFT on every (noisy) demonstration",
    "sft_filtered": "filtered SFT (demos and own answers the checker passes)",
    "sft_ppo_checker": "noisy warm-up + PPO on the checker",
    "sft_ppo_learned_rm": "noisy warm-up + PPO on a learned reward model",
    "sft_warm_up": "the noisy warm-up alone (PPO's start)",
}


# Noise 0 is the pipeline's own protocol with perfect demonstrations (rlhf_learning.json's arms).
# There the checker filters nothing out and no prompt lacks a passing demonstration, so filtered
# SFT is SFT on all 400 demonstrations: the pipeline's sft_full arm stands for both.
CLEAN_ARMS = {"sft_full": "sft_full", "sft_filtered": "sft_full", "sft_ppo_checker": "sft_ppo_checker",
              "sft_ppo_learned_rm": "sft_ppo_learned_rm_kl0.2", "sft_warm_up": "sft"}
"""Each design (f) kind's arm at noise 0 in the pipeline: filtered SFT filters nothing there (the SFT
control), and PPO on the learned reward model ran at beta = 0.2 in design (f), so its clean point is the
pipeline's beta = 0.2 arm."""


def noise_levels(design: Mapping, held_out: str = "test",
                 clean_arms: Mapping | None = None) -> dict[str, dict[float, list[float]]]:
    """Design (f)'s arms regrouped by kind: ``{kind: {noise rate: [pass rate per seed]}}``, read
    from ``design["arms"]["<kind>@<rate>"][held_out]`` (rates sorted; an arm measured at one rate
    only is a single point). ``clean_arms`` (the pipeline's ``arms``) adds rate 0 (``CLEAN_ARMS``)."""
    out: dict[str, dict[float, list[float]]] = {}
    for kind, arm in CLEAN_ARMS.items():
        if clean_arms and held_out in clean_arms.get(arm, {}):
            out.setdefault(kind, {})[0.0] = list(clean_arms[arm][held_out])
    for name, sets in design["arms"].items():
        kind, rate = name.rsplit("@", 1)
        if held_out in sets:
            out.setdefault(kind, {})[float(rate)] = list(sets[held_out])
    return {kind: dict(sorted(rates.items())) for kind, rates in out.items()}


def noise_crossing(levels: Mapping[str, Mapping[float, Sequence[float]]], rising: str = "sft_ppo_checker",
                   falling: str = "sft_full") -> tuple[float, float, float] | None:
    """Where the mean of arm kind ``rising`` first reaches the mean of ``falling`` as the noise grows,
    from ``noise_levels``' output: over the rates both kinds were measured at, d(r) = mean(rising) −
    mean(falling); at the first pair of neighbouring rates r0 < r1 with d(r0) < 0 ≤ d(r1), a straight
    line between them crosses zero at r0 + (r1 − r0) · (−d(r0)) / (d(r1) − d(r0)). Returns
    ``(r0, r1, that rate)``, or None if ``rising`` never catches up (or leads from the lowest rate).
    Nothing was measured between r0 and r1: the straight line is a guide, the bracket is the finding."""
    shared = sorted(set(levels.get(rising, {})) & set(levels.get(falling, {})))
    gap = {r: float(np.mean(levels[rising][r]) - np.mean(levels[falling][r])) for r in shared}
    for r0, r1 in zip(shared, shared[1:]):
        if gap[r0] < 0 <= gap[r1]:
            return r0, r1, r0 + (r1 - r0) * -gap[r0] / (gap[r1] - gap[r0])
    return None


def plot_noise_crossover(levels: Mapping[str, Mapping[float, Sequence[float]]], held_out: str = "test") -> Figure:
    """Each arm of design (f) against the share of noisy demonstrations: the mean and its 95%
    t-interval per measured rate (dots: seeds), dotted lines joining the rates of one arm. Where PPO's line crosses
    above the best SFT line is the noise level at which RL starts to pay. The legend sits under the
    axes, so that it hides no error bar."""
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.subplots()
    kinds = [k for k in NOISY_ARM_LABELS if k in levels]
    width = 0.012 * (len(kinds) - 1)
    for i, kind in enumerate(kinds):
        rates = list(levels[kind])
        offset = -width / 2 + 0.012 * i  # side by side, so error bars at one rate do not hide each other
        means = [mean_se(levels[kind][r]) for r in rates]
        colour = f"C{list(NOISY_ARM_LABELS).index(kind)}"
        ax.errorbar(np.add(rates, offset), [m for m, _ in means],
                    yerr=[interval_half_width(levels[kind][r]) for r in rates],
                    fmt="s" if kind == "sft_warm_up" else "o", color=colour, capsize=3, label=NOISY_ARM_LABELS[kind])
        ax.plot(np.add(rates, offset), [m for m, _ in means], ":", color=colour, lw=0.8)
        for r in rates:
            ax.plot(np.full(len(levels[kind][r]), r + offset), levels[kind][r], ".", color=colour, alpha=0.5)
    every_rate = sorted({r for kind in kinds for r in levels[kind]})
    ax.set(xlabel="share of demonstrations that are a labeler's mistake", ylabel=f"strict pass rate on {held_out}, %",
           xticks=every_rate, ylim=(0, 100), title="design (f): the noisy teacher (mean, 95% interval; dots: seeds)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, title_fontsize=7,
              title="dotted: joins measured rates (nothing measured between)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


RETENTION_ARM_LABELS = {  # in the order lesson 11 introduces the arms
    "sft_ppo_checker_retention": "warm-up + PPO (checker) on the trained families",
    "sft_continue_retention": "warm-up + SFT on the trained families",
}


def plot_retention(design: Mapping) -> Figure:
    """Design (h): gain on the trained families (x, points) against the change on the other
    families (y, points; below 0: forgotten), both measured from each seed's warm-up. One dot per
    seed and arm, the arm's mean as a square with its 95% t-interval as error bars; each run's evaluations along its
    training as a thin line from (0, 0) (``design["arms"][arm]["curves"]``): where the two arms' paths
    reach the same gain, their heights compare forgetting at equal gain. The dashed line is half of
    SFT's mean loss at the end, a guide for the eye; the target itself is checked per seed where the two
    paths reach the same gain (``at_equal_gain`` in the design). The legend sits under the axes, so
    that no seed's point hides behind it."""
    fig = Figure(figsize=(6.5, 5.4))
    ax = fig.subplots()
    for i, (arm, label) in enumerate((a, l) for a, l in RETENTION_ARM_LABELS.items() if a in design["arms"]):
        sets, color = design["arms"][arm], f"C{i}"
        for curve in sets.get("curves", []):
            ax.plot([p["gain_trained"] for p in curve], [p["change_others"] for p in curve], "-", color=color,
                    lw=0.8, alpha=0.4)
        ax.plot(sets["gain_trained"], sets["change_others"], "o", color=color, alpha=0.7)
        gx, cy = mean_se(sets["gain_trained"])[0], mean_se(sets["change_others"])[0]
        ax.errorbar([gx], [cy], xerr=[interval_half_width(sets["gain_trained"])],
                    yerr=[interval_half_width(sets["change_others"])], fmt="s", color=color, ms=7, capsize=4,
                    label=f"{label}: gain {gx:+.0f}, change {cy:+.0f}")
    sft = design["arms"].get("sft_continue_retention")
    if sft and np.mean(sft["change_others"]) < 0:
        half = np.mean(sft["change_others"]) / 2
        ax.axhline(half, color="0.4", ls="--", lw=1, label=f"half of SFT's mean loss at the end ({half:+.1f})")
    ax.axhline(0, color="0.6", lw=1)
    ax.axvline(0, color="0.6", lw=1)
    ax.set(xlabel="gain on the trained families (points)", ylabel="change on the other families (points)",
           title="design (h): what training on some tasks costs the others (dots: seeds)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


DESIGN1_ARM_LABELS = {"A": "A: filtered SFT continued", "B": "B: PPO on the checker",
                      "C": "C: group policy gradient (Reinforce-Rej)", "D": "D: positive-only policy gradient"}
"""Design 1's arms (``comparison.rl_after_sft.ARMS``), as lesson 11's figure and tables name them."""


def design1_curves(design: Mapping, key: str = "test",
                   start_minutes: float = 10.0) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """Design 1's learning curves from ``when_ppo_wins.json``'s ``designs["rl_after_sft"]``:
    ``{arm: {seed: [(training minutes, pass rate in percent), ...]}}`` on ``key`` ("test" or
    "test_unseen"). Each curve begins at the seed's shared start, drawn at ``start_minutes`` (the
    pre-registered 10; the start's own clock, in its points, runs past it by the step or self-sampling round
    that spent the budget), then
    follows the arm's marks, whose minutes are the start's 10 plus the arm's own."""
    out: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for seed, record in sorted(design["seeds"].items(), key=lambda item: int(item[0])):
        start = next(p for p in record["start"]["points"] if p.get("final"))
        for arm, run in record["arms"].items():
            out.setdefault(arm, {})[int(seed)] = [(start_minutes, float(start[key]))] + [
                (float(p["minutes"]), float(p[key])) for p in run["points"]]
    return {arm: out[arm] for arm in sorted(out)}


def plot_learning_curves(panels: Mapping[str, Mapping[str, Mapping[int, Sequence[tuple[float, float]]]]],
                         labels: Mapping[str, str] | None = None, level: float = 0.95) -> Figure:
    """One panel per held-out set (``{panel title: design1_curves(...)}``): per arm, every seed's
    curve as a thin line, the mean over seeds as a thick line with markers, and, only where more
    than one seed ran, the ``level`` t-interval of the mean at each mark as a band,

        mean ± t_{(1+level)/2, n−1} · SE,

    the interval rule's band (with one seed there is no spread to draw). The seeds' marks are
    matched by position (the first mark with the first, ...), up to the shortest curve."""
    labels = dict(DESIGN1_ARM_LABELS if labels is None else labels)
    fig = Figure(figsize=(5.2 * len(panels), 4.3))
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True, squeeze=False)[0])
    for ax, (title, curves) in zip(axes, panels.items()):
        for i, (arm, seeds) in enumerate(curves.items()):
            colour = f"C{i}"
            for curve in seeds.values():
                ax.plot([m for m, _ in curve], [v for _, v in curve], "-", color=colour, lw=0.8, alpha=0.35)
            length = min(len(curve) for curve in seeds.values())
            minutes = np.array([[curve[j][0] for j in range(length)] for curve in seeds.values()])
            values = np.array([[curve[j][1] for j in range(length)] for curve in seeds.values()])
            x, mean = minutes.mean(axis=0), values.mean(axis=0)
            n = len(seeds)
            ax.plot(x, mean, "o-", color=colour, lw=2, ms=4,
                    label=f"{labels.get(arm, arm)} ({n} seed{'s' if n > 1 else ''})")
            if n > 1:
                half = t_quantile((1 + level) / 2, n - 1) * values.std(axis=0, ddof=1) / np.sqrt(n)
                ax.fill_between(x, mean - half, mean + half, color=colour, alpha=0.15, lw=0)
        ax.set(title=title, xlabel="training minutes (the shared start's 10, then the arm's)", ylim=(0, 100))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("greedy pass rate, %")
    axes[0].legend(fontsize=7, loc="lower right")
    bands = f"; bands: {level:.0%} t-intervals of the mean" if any(
        len(seeds) > 1 for curves in panels.values() for seeds in curves.values()) else "; one seed: no interval"
    fig.suptitle(f"design 1, RL after the best SFT (thin: seeds; thick: mean{bands})", fontsize=10)
    fig.tight_layout()
    return fig
