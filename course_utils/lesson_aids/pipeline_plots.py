"""Figures of the whole pipeline's measurements: the arms side by side, and over-optimisation of a
learned reward drawn the way Gao et al. (2022) draw it. Pure functions: numbers in, a Figure out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D


def overoptimisation_points(evals: Sequence[Mapping], history: Sequence[Mapping], window: int = 5) -> dict:
    """One run's held-out evaluations against the distance travelled from the reference.

    For the evaluation after update u the distance is the KL per response of the rollouts sampled
    around it: the mean of ``kl_per_sequence`` over the ``window`` logged updates centred on u + 1
    (the rollout the evaluated policy sampled next; one rollout of 16 answers is a noisy estimate,
    so neighbours are averaged), floored at 0 because the sampled estimate can dip below it:

        sqrt_kl[i]  = sqrt(max(0, mean KL per response near update u_i + 1))   nats^(1/2)
        proxy[i]    = mean learned-reward score of the greedy held-out answers (``mean_reward``)
        gold[i]     = checker pass rate of the same answers, in percent

    The evaluation at update 0 is the reference itself (KL 0). Returns lists, one entry per
    evaluation, in update order."""
    kl_at = {int(h["update"]): float(h["kl_per_sequence"]) for h in history}
    points = {"update": [], "sqrt_kl": [], "proxy": [], "gold": []}
    for e in evals:
        u = int(e["update"])
        centre = min(u + 1, max(kl_at, default=0))  # the last evaluation: the last rollouts
        near = [kl_at[v] for v in range(centre - window // 2, centre - window // 2 + window) if v in kl_at]
        kl = 0.0 if u == 0 or not near else float(np.mean(near))
        points["update"].append(u)
        points["sqrt_kl"].append(float(np.sqrt(max(kl, 0.0))))
        points["proxy"].append(float(e["mean_reward"]))
        points["gold"].append(100.0 * float(e["pass_rate"]))
    return points


FAMILY_COLOURMAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")
"""One colour family per group of runs (a β, say); the runs of a group are its shades."""


def _binned_mean(xs: np.ndarray, ys: np.ndarray, bins: int, runs: np.ndarray | None = None,
                 min_runs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The mean over runs in ``bins`` equal-width bins of ``xs``: each run's points in a bin are
    averaged first (x and y), then the runs' averages, so a run with more points in a bin does not
    weigh more. ``runs[i]`` names the run of point i (default: every point its own run). A bin is
    left out unless at least ``min_runs`` runs have a point in it (issue 49: week 8's mean of three
    seeds ended on a bin that held one seed's two mid-run evaluations)."""
    runs = np.arange(len(xs)) if runs is None else np.asarray(runs)
    edges = np.linspace(xs.min(), xs.max(), bins + 1)
    which = np.clip(np.digitize(xs, edges[1:-1]), 0, bins - 1)
    mx, my = [], []
    for b in range(bins):
        owners = list(dict.fromkeys(runs[which == b]))
        if not owners or len(owners) < min_runs:
            continue
        per_run = [((which == b) & (runs == o)) for o in owners]
        mx.append(np.mean([xs[m].mean() for m in per_run]))
        my.append(np.mean([ys[m].mean() for m in per_run]))
    return np.array(mx), np.array(my)


def plot_overoptimisation(curves: Mapping[str, Mapping[str, Sequence[float]]], start_gold: float | None = None,
                          groups: Mapping[str, str] | None = None, mean_bins: int = 6) -> Figure:
    """Proxy (learned reward) and gold (checker) against sqrt(KL to the reference), one line per run.

    ``curves[label]`` holds ``sqrt_kl``, ``proxy`` and ``gold`` lists (``overoptimisation_points``).
    Over-optimisation is where the left panel keeps rising and the right one turns down.
    ``start_gold``: the SFT start's pass rate, drawn as a dashed line (the cure must end above it).

    ``groups[label]`` names the group of a run (runs of one β, for instance; default: each run its
    own group). Each group gets one colour family (``FAMILY_COLOURMAPS``), its runs the shades of it,
    and, when it holds more than one run, a thick line: in each of ``mean_bins`` equal bins of
    sqrt(KL), the mean over its runs of each run's mean there, drawn only in the bins that at least
    two of its runs reach (a bin one run reaches alone is that run, not a mean). Every run's first
    evaluation is a hollow circle, its last a filled square, so that a line that folds back on
    itself still shows where it ended. The legend sits
    under the panels, off the data."""
    groups = dict(groups) if groups is not None else {label: label for label in curves}
    names = list(dict.fromkeys(groups.get(label, label) for label in curves))
    members = {g: [label for label in curves if groups.get(label, label) == g] for g in names}
    fig = Figure(figsize=(10, 4.6))
    proxy_ax, gold_ax = fig.subplots(1, 2, sharex=True)
    for k, group in enumerate(names):
        cmap = matplotlib.colormaps[FAMILY_COLOURMAPS[k % len(FAMILY_COLOURMAPS)]]
        runs = members[group]
        shades = np.linspace(0.45, 0.85, len(runs)) if len(runs) > 1 else [0.7]
        for shade, label in zip(shades, runs):
            c, colour = curves[label], cmap(shade)
            for ax, key in ((proxy_ax, "proxy"), (gold_ax, "gold")):
                x, y = np.asarray(c["sqrt_kl"], float), np.asarray(c[key], float)
                ax.plot(x, y, "-", color=colour, lw=1, alpha=0.8, label=label)
                ax.plot(x[:1], y[:1], "o", mfc="white", mec=colour, ms=6, mew=1.4, zorder=3)
                ax.plot(x[-1:], y[-1:], "s", color=colour, ms=6, zorder=3)
        if len(runs) > 1:
            for ax, key in ((proxy_ax, "proxy"), (gold_ax, "gold")):
                xs = np.concatenate([np.asarray(curves[label]["sqrt_kl"], float) for label in runs])
                ys = np.concatenate([np.asarray(curves[label][key], float) for label in runs])
                owner = np.concatenate([np.full(len(curves[label]["sqrt_kl"]), i) for i, label in enumerate(runs)])
                mx, my = _binned_mean(xs, ys, mean_bins, runs=owner, min_runs=2)
                ax.plot(mx, my, "-", color=cmap(0.95), lw=3, alpha=0.9, label=f"{group}: mean of its runs")
    if start_gold is not None:
        gold_ax.axhline(start_gold, color="grey", ls="--", lw=1, label="SFT start")
    proxy_ax.set(xlabel="√KL to the reference (nats^½ per response)", ylabel="reward-model score (proxy)",
                 title="what PPO is paid: the learned reward")
    gold_ax.set(xlabel="√KL to the reference (nats^½ per response)", ylabel="checker pass rate, % (gold)",
                title="what we wanted: the checker")
    for ax in (proxy_ax, gold_ax):
        ax.grid(alpha=0.3)
    handles, labels = gold_ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="", marker="o", mfc="white", mec="0.3", ms=6),
                Line2D([], [], ls="", marker="s", color="0.3", ms=6)]
    labels += ["first evaluation (update 0)", "last evaluation"]
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7, frameon=False)
    rows = -(-len(labels) // min(4, len(labels)))
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    return fig


def plot_arms(arms: Mapping[str, Mapping[str, Sequence[float]]], ceiling: Mapping[str, Sequence[float]] | None = None,
              set_labels: Mapping[str, str] | None = None, k: int = 16) -> Figure:
    """Held-out strict pass rate of every arm: a bar per held-out set at the mean, the standard
    error as a whisker, each seed as a dot. ``arms[arm][set]`` is the per-seed list in percent;
    ``ceiling[set]``, if given, the per-seed pass@``k`` of the SFT start, drawn as a dashed line."""
    names = list(arms)
    sets = sorted({s for per_set in arms.values() for s in per_set}, key=lambda s: (s != "test", s))
    labels = set_labels or {}
    width = 0.8 / len(sets)
    fig = Figure(figsize=(max(6.0, 1.3 * len(names)), 3.8))
    ax = fig.subplots()
    for j, split in enumerate(sets):
        xs, means, ses = [], [], []
        for i, arm in enumerate(names):
            values = np.asarray(arms[arm].get(split, []), dtype=float)
            if values.size == 0:
                continue
            x = i + (j - (len(sets) - 1) / 2) * width
            xs.append(x)
            means.append(values.mean())
            ses.append(values.std(ddof=1) / np.sqrt(values.size) if values.size > 1 else 0.0)
            ax.plot(np.full(values.size, x), values, "k.", ms=4, zorder=3)
        ax.bar(xs, means, width * 0.95, yerr=ses, capsize=3, color=f"C{j}", alpha=0.75,
               label=labels.get(split, split))
        if ceiling and ceiling.get(split):
            ax.axhline(float(np.mean(ceiling[split])), color=f"C{j}", ls="--", lw=1,
                       label=f"{labels.get(split, split)}: pass@{k} of the SFT start")
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="strict held-out pass rate, %", ylim=(0, 100),
           title="the pipeline's arms (greedy, mean ± standard error over seeds)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_pass_at_k(per_family: Mapping[str, Mapping[str, float]], k: int, title: str = "") -> Figure:
    """pass@1 and pass@k per task family (fractions in ``per_family[f]["pass_at_1"]`` and
    ``["pass_at_k"]``), side by side: the gap is what RL on the policy's own samples can reach; a
    family at pass@k = 0 is out of its reach."""
    families = list(per_family)
    y = np.arange(len(families))
    fig = Figure(figsize=(6.5, 0.35 * len(families) + 1.4))
    ax = fig.subplots()
    ax.barh(y - 0.2, [100 * per_family[f]["pass_at_1"] for f in families], 0.4, color="C0", label="pass@1")
    ax.barh(y + 0.2, [100 * per_family[f]["pass_at_k"] for f in families], 0.4, color="C1", alpha=0.7,
            label=f"pass@{k}")
    ax.set_yticks(y, families, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="held-out pass rate of sampled answers, %", xlim=(0, 100),
           title=title or f"what the policy does (pass@1) and what it can do (pass@{k})")
    # Under the axes: inside them the legend covers a bar whatever corner it takes (a pass@k of 100%).
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
