"""Plots for lesson 6 (the reward model): pure functions, numbers in -> a new matplotlib Figure out."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from course_utils.lesson_aids.plots import _new_figure
from course_utils.machinery.report import smooth
from course_utils.reward_model import CONTENT_KINDS, bradley_terry_loss


def _figure(ncols: int = 1, width: float = 5.0, height: float = 3.6):
    fig, axes = _new_figure(ncols, width=width, height=height)
    return fig, list(axes[0])


def plot_bradley_terry_loss(margins: Sequence[float]):
    """The Bradley-Terry loss of one pair and its slope, against the margin d = r_c - r_r.

    Left: L(d) = -log sigma(d) (gid ``"loss"``), from ``bradley_terry_loss`` one pair at a time,
    and the point d = 0, L = ln 2 (gid ``"ln 2"``: an untrained model's loss). Right: dL/dd by
    autograd (gid ``"gradient"``), which equals -(1 - sigma(d)): a pair already ranked far apart
    (d >> 0) barely moves the model, a wrongly ranked pair (d < 0) pushes with almost full force.
    """
    d = torch.as_tensor(list(margins), dtype=torch.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError("margins must be a 1-D list of at least two numbers, e.g. numpy.linspace(-6, 6, 121)")
    d = d.clone().requires_grad_(True)
    losses = torch.stack([bradley_terry_loss(d[i:i + 1], torch.zeros(1, dtype=d.dtype)) for i in range(len(d))])
    (grad,) = torch.autograd.grad(losses.sum(), d)
    x, y, g = d.detach().numpy(), losses.detach().numpy(), grad.numpy()
    fig, (left, right) = _figure(2, width=4.6, height=3.3)
    left.plot(x, y, color="tab:blue", lw=2, gid="loss")
    left.plot([0.0], [math.log(2)], "o", color="black", gid="ln 2", label="d = 0: ln 2")
    left.set(xlabel="margin d = r_chosen - r_rejected", ylabel="loss -log sigma(d)", title="Bradley-Terry loss")
    left.legend(loc="upper right")
    right.plot(x, g, color="tab:red", lw=2, gid="gradient")
    right.axhline(0, color="0.6", lw=0.8)
    right.set(xlabel="margin d", ylabel="dL/dd = -(1 - sigma(d))", title="its slope: the push on the pair",
              ylim=(-1.05, 0.05))
    for ax in (left, right):
        ax.axvline(0, color="0.6", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    return fig


def plot_training_history(history: dict, window: int = 10):
    """Loss and batch accuracy per training step of ``train_reward_model`` (its history dict).

    Thin lines: every step (gids ``"loss"``, ``"accuracy"``); thick lines: the trailing mean over
    ``window`` steps (``"loss mean"``, ``"accuracy mean"``); dashed: ln 2 (gid ``"ln 2"``), the loss
    of a model that scores both answers alike, where training starts.
    """
    import numpy as np

    loss, acc = history.get("loss", []), history.get("accuracy", [])
    if not loss or len(loss) != len(acc):
        raise ValueError("history needs equally long, non-empty 'loss' and 'accuracy' lists "
                         "(the dict returned by train_reward_model)")
    steps = np.arange(1, len(loss) + 1)
    fig, (left, right) = _figure(2, width=5.0, height=3.3)
    left.plot(steps, loss, color="tab:blue", alpha=0.35, lw=1, gid="loss")
    left.plot(steps, smooth(loss, window), color="tab:blue", lw=2, gid="loss mean", label=f"mean of {window} steps")
    left.axhline(math.log(2), color="black", ls="--", lw=1, gid="ln 2", label="ln 2 (no preference)")
    left.set(xlabel="training step", ylabel="Bradley-Terry loss", title="loss per batch", ylim=(0, None))
    right.plot(steps, acc, color="tab:green", alpha=0.35, lw=1, gid="accuracy")
    right.plot(steps, smooth(acc, window), color="tab:green", lw=2, gid="accuracy mean",
               label=f"mean of {window} steps")
    right.set(xlabel="training step", ylabel="r_chosen > r_rejected", title="batch accuracy (training pairs)",
              ylim=(-0.02, 1.02))
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    return fig


def plot_pairwise_by_kind(per_kind: dict, reference: dict | None = None, content_kinds=CONTENT_KINDS):
    """Held-out accuracy and mean margin per kind of rejected answer (``evaluate_pairs``' per_kind).

    Bars sorted by accuracy, worst at the top; content errors (``content_kinds``) in red (gid
    ``"content"``), form errors in blue (gid ``"form"``); each label carries its number of pairs.
    With ``reference`` (another per_kind dict, e.g. from data/reward_model_metrics.json) its values
    are drawn as black marks (gid ``"reference"``).
    """
    if not per_kind:
        raise ValueError("per_kind is empty: pass evaluate_pairs(...)['per_kind']")
    kinds = sorted(per_kind, key=lambda k: (-per_kind[k]["accuracy"], k))  # barh draws bottom-up
    content = set(content_kinds)
    colours = ["tab:red" if k in content else "tab:blue" for k in kinds]
    labels = [f"{k} (n={per_kind[k]['n']})" for k in kinds]
    fig, axes = _figure(2, width=4.6, height=0.26 * len(kinds) + 1.4)
    for ax, key, title in ((axes[0], "accuracy", "pairwise accuracy"), (axes[1], "mean_margin", "mean margin")):
        bars = ax.barh(range(len(kinds)), [per_kind[k][key] for k in kinds], color=colours)
        for bar, k in zip(bars, kinds):
            bar.set_gid("content" if k in content else "form")
        if reference:
            shown = [(i, reference[k][key]) for i, k in enumerate(kinds) if k in reference]
            if shown:
                ax.plot([v for _, v in shown], [i for i, _ in shown], "|", color="black", ms=12, mew=2,
                        gid="reference", label="reference run")
                ax.legend(loc="lower right", fontsize=8)
        ax.set_yticks(range(len(kinds)), labels if ax is axes[0] else [""] * len(kinds), fontsize=8)
        ax.set_title(title + " (red: content errors)" if ax is axes[0] else title, fontsize=10)
        ax.axvline(0.5 if key == "accuracy" else 0.0, color="0.5", ls=":", lw=1)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_xlim(0, 1.02)
    axes[0].set_xlabel("share of pairs with r_chosen > r_rejected")
    axes[1].set_xlabel("mean of r_chosen - r_rejected")
    return fig


# The checker's tiers (tasks.CheckResult.tier), best first.
TIER_ORDER = ("pass", "partial", "plain_wrong", "buried", "nothing")


def plot_scores_by_verdict(scores: Sequence[float], passed: Sequence[bool], tiers: Sequence[str] | None = None,
                           bins: int = 20):
    """Reward-model scores of generated answers, split by the checker's verdict.

    Left: histograms of passing (gid ``"pass"``) and failing (gid ``"fail"``) answers on shared
    bins, with each group's mean as a vertical line (gids ``"mean pass"``, ``"mean fail"``, both in
    the legend). In each bin the failing bar takes the left half and the passing bar the right half,
    drawn on top and outlined, so that a bin holding both shows both; the count axis is logarithmic,
    so that 5 passes stay visible next to 90 failures.
    Right (with ``tiers``): one row of points per checker tier, in ``TIER_ORDER`` from the top, gid
    ``"tier <name>"``, points spread vertically by a fixed pattern so equal scores stay visible.
    """
    import numpy as np

    s = np.asarray(scores, dtype=float)
    y = np.asarray(passed, dtype=bool)
    if s.ndim != 1 or s.shape != y.shape or len(s) == 0:
        raise ValueError(f"need one pass/fail flag per score, got {s.shape} scores and {y.shape} flags")
    edges = np.histogram_bin_edges(s, bins=bins)
    fig, axes = _figure(2 if tiers is not None else 1, width=4.8, height=3.4)
    ax = axes[0]
    half = np.diff(edges) / 2
    for flag, name, colour, layer, side in ((True, "pass", "tab:green", 3, 1), (False, "fail", "tab:red", 2, 0)):
        group = s[y == flag]
        if len(group):
            counts, _ = np.histogram(group, bins=edges)
            patches = ax.bar(edges[:-1] + side * half, counts, width=half, align="edge", color=colour, alpha=0.7,
                             label=f"{name} (n={len(group)})", zorder=layer,
                             edgecolor="darkgreen" if flag else "none", linewidth=1.2)
            for patch in patches:
                patch.set_gid(name)
            ax.axvline(group.mean(), color=colour, lw=2, ls="--", gid=f"mean {name}",
                       label=f"mean {name} {group.mean():+.2f}")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)
    ax.set(xlabel="reward-model score", ylabel="answers (log scale)", title="scores of passing vs failing answers")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if tiers is not None:
        if len(tiers) != len(s):
            raise ValueError(f"{len(tiers)} tiers for {len(s)} scores: give one tier per answer")
        ax = axes[1]
        names = [t for t in TIER_ORDER if t in set(tiers)] + sorted(set(tiers) - set(TIER_ORDER))
        t = np.asarray(tiers)
        for row, name in enumerate(names):
            xs = s[t == name]
            jitter = ((np.arange(len(xs)) % 7) - 3) * 0.06
            ax.plot(xs, row + jitter, "o", ms=4, alpha=0.6, gid=f"tier {name}",
                    color="tab:green" if name == "pass" else "tab:red")
            ax.plot([xs.mean()], [row], "k|", ms=16, mew=2)
        ax.set_yticks(range(len(names)), [f"{n} (n={(t == n).sum()})" for n in names], fontsize=8)
        ax.invert_yaxis()  # best tier at the top
        ax.set(xlabel="reward-model score", title="by checker tier (|: mean)")
        ax.grid(axis="x", alpha=0.3)
    return fig



def plot_score_threshold(scores: Sequence[float], passed: Sequence[bool], threshold: float, bins: int = 20):
    """The scores of passing and failing answers (as ``plot_scores_by_verdict``'s left panel) with a
    vertical line at ``threshold`` (gid ``"threshold"``): everything right of it a reward-model
    "accept". Pure: numbers in, Figure out."""
    fig = plot_scores_by_verdict(scores, passed, bins=bins)
    ax = fig.axes[0]
    ax.axvline(threshold, color="k", lw=2, gid="threshold", label=f"threshold {threshold:+.2f}")
    ax.legend(fontsize=8)
    return fig


def plot_length_probe(probe: dict):
    """The length-bias probe (``length_probe``): mean score change per padding, one bar each.

    Bars (gid ``"mean delta"``) are mean r(padded) - r(correct); the label over each says the
    share of prompts where the padded answer scored higher and how many padded answers the
    checker still passes. A length-biased reward model would have bars above 0.
    """
    names = [k for k, v in probe.items() if isinstance(v, dict)]
    if not names:
        raise ValueError("probe has no paddings: pass the dict returned by length_probe(model, records)")
    fig, (ax,) = _figure(1, width=6.0, height=3.4)
    deltas = [probe[k]["mean_delta"] for k in names]
    bars = ax.bar(range(len(names)), deltas, color=["tab:red" if d < 0 else "tab:green" for d in deltas])
    for bar, k in zip(bars, names):
        bar.set_gid("mean delta")
        v = probe[k]
        ax.annotate(f"higher: {v['fraction_higher']:.0%}\npasses: {v['checker_passes']}/{probe['n']}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                    va="top" if bar.get_height() < 0 else "bottom", fontsize=8,
                    xytext=(0, -3 if bar.get_height() < 0 else 3), textcoords="offset points")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names, fontsize=9)
    low = min(deltas + [0.0])
    ax.set_ylim(low * 1.35 - 0.3, max(deltas + [0.0]) + 0.6)
    ax.set(ylabel="mean r(padded) - r(correct)", title=f"length probe on {probe['n']} correct answers")
    ax.grid(axis="y", alpha=0.3)
    return fig


