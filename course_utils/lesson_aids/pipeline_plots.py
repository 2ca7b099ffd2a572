"""Figures of the whole pipeline's measurements: the arms side by side, and over-optimisation of a
learned reward drawn the way Gao et al. (2022) draw it. Pure functions: numbers in, a Figure out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure


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


def plot_overoptimisation(curves: Mapping[str, Mapping[str, Sequence[float]]], start_gold: float | None = None) -> Figure:
    """Proxy (learned reward) and gold (checker) against sqrt(KL to the reference), one line per run.

    ``curves[label]`` holds ``sqrt_kl``, ``proxy`` and ``gold`` lists (``overoptimisation_points``).
    Over-optimisation is where the left panel keeps rising and the right one turns down.
    ``start_gold``: the SFT start's pass rate, drawn as a dashed line (the cure must end above it)."""
    fig = Figure(figsize=(10, 3.8))
    proxy_ax, gold_ax = fig.subplots(1, 2, sharex=True)
    for i, (label, c) in enumerate(curves.items()):
        colour = f"C{i}"
        proxy_ax.plot(c["sqrt_kl"], c["proxy"], "o-", color=colour, ms=3, lw=1, alpha=0.8, label=label)
        gold_ax.plot(c["sqrt_kl"], c["gold"], "o-", color=colour, ms=3, lw=1, alpha=0.8, label=label)
    if start_gold is not None:
        gold_ax.axhline(start_gold, color="grey", ls="--", lw=1, label="SFT start")
    proxy_ax.set(xlabel="√KL to the reference (nats^½ per response)", ylabel="reward-model score (proxy)",
                 title="what PPO is paid: the learned reward")
    gold_ax.set(xlabel="√KL to the reference (nats^½ per response)", ylabel="checker pass rate, % (gold)",
                title="what we wanted: the checker")
    for ax in (proxy_ax, gold_ax):
        ax.grid(alpha=0.3)
    gold_ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
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
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
