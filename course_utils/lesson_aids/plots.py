"""The course's plots: pure functions that take numbers or tensors and return a matplotlib Figure.

Rules every function here follows
---------------------------------
* No widgets, no global state: a function draws what it is given and returns a new
  ``matplotlib.figure.Figure``. It does not touch ``pyplot``, so no figure piles up in memory and
  a notebook shows a figure exactly once (end a cell with it, or ``display(fig)``).
* The plots compute nothing new: every value drawn is either an argument or comes from
  ``course_utils.ppo_math`` (the one home of the formulas).
* Artists that tests and widgets need to find carry a ``gid`` (``line.get_gid()``), e.g. the
  clipped-objective lines are ``"unclipped"`` and ``"clipped"`` and the clip band is ``"clip band"``.
* 1-D inputs describe one response (``[T]``); the batch plots say so in their docstring.

Saving: ``figure_to_png(fig)`` renders with the Agg canvas (deterministic, no display needed).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from course_utils import ppo_math
from course_utils.lesson_aids import figure_language

__all__ = [
    "figure_to_png",
    "plot_token_logprobs",
    "plot_clipped_objective",
    "plot_clipping_view",
    "plot_ratio_trajectories",
    "plot_clip_stats_vs_spread",
    "plot_token_advantages",
    "plot_advantage_curves",
    "plot_whitening",
    "plot_gae_spread",
    "plot_value_fit",
    "plot_shaped_rewards",
    "plot_reward_components",
    "plot_shaped_return_vs_beta",
    "plot_kl_estimators",
    "plot_kl_samples",
    "plot_kl_controller",
]

# One colour per meaning, used the same way in every lesson.
COLOURS = {
    "unclipped": "tab:blue",
    "clipped": "tab:orange",
    "band": "0.85",
    "reward": "tab:green",
    "penalty": "tab:red",
    "value": "tab:purple",
    "advantage": "tab:orange",
    "return": "tab:blue",
    "padding": "0.92",
    "k1": "tab:blue",
    "k2": "tab:red",
    "k3": "tab:green",
}


def _new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6, **kwargs):
    """A fresh Figure with an Agg canvas and a grid of axes (no pyplot involved)."""
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    return fig, axes


def _to_numpy(x, name: str = "x") -> np.ndarray:
    """Tensors, lists and arrays to a float64 numpy array (detached, on the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a tensor, array or list of numbers, got {type(x).__name__}") from None


def _one_response(x, name: str) -> np.ndarray:
    arr = _to_numpy(x, name)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must describe one response (shape [T]), got shape {arr.shape}; "
                         f"pick a row first, e.g. {name}[0]")
    return arr


def _tag(patches, gid: str) -> None:
    """Give every bar (or histogram patch) of a container the same gid, so tests can find them."""
    for patch in patches:
        patch.set_gid(gid)


def _shade_padding(ax, mask: np.ndarray) -> None:
    """Grey out each run of positions where mask is 0 (padding after the response)."""
    padded = np.concatenate([[False], mask == 0, [False]])
    starts = np.flatnonzero(padded[1:] & ~padded[:-1])
    ends = np.flatnonzero(~padded[1:] & padded[:-1])
    for i, (start, end) in enumerate(zip(starts, ends)):
        span = ax.axvspan(start - 0.5, end - 0.5, color=COLOURS["padding"], lw=0, zorder=0,
                          label="padding (mask = 0)" if i == 0 else None)
        span.set_gid("padding")


def _real_only(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """NaN at padding, so a line stops at the end of the response instead of dropping to 0."""
    return np.where(mask != 0, x, np.nan)


def figure_to_png(fig: Figure, dpi: int = 100) -> bytes:
    """Render ``fig`` to PNG bytes with the Agg canvas, its texts first put into the session's
    language (``figure_language.use_language``; nothing changes in English).

    The PNG carries no software/version metadata, so the same figure gives the same bytes on
    every run with the same matplotlib and fonts.
    """
    figure_language.localize(fig)  # the lesson's language (use_language); English figures unchanged
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # render with Agg whatever backend the notebook uses
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# Lesson 2: per-token log-probabilities of a rollout
# ---------------------------------------------------------------------------------------------

# How each series of plot_token_logprobs is drawn, in the order given: the first as large hollow
# circles on a solid line, the second as small crosses on a dashed line, so that two series that
# agree exactly still both show (the crosses sit inside the circles).
TOKEN_SERIES_STYLES = (
    {"linestyle": "-", "marker": "o", "markersize": 8, "markerfacecolor": "none", "markeredgewidth": 1.3,
     "color": "tab:blue", "linewidth": 1.2},
    {"linestyle": "--", "marker": "x", "markersize": 5, "color": "tab:orange", "linewidth": 1.2},
    {"linestyle": ":", "marker": "s", "markersize": 4, "color": "tab:green", "linewidth": 1.2},
)


def plot_token_logprobs(series: Mapping[str, Sequence[Sequence[float]]], tokens: Sequence[Sequence[str]],
                        panel_titles: Sequence[str] | None = None, title: str = "",
                        ylabel: str = "log-probability of the sampled token") -> Figure:
    """One panel per response: a value per sampled token (a log-probability) under each series.

    ``series[label][i]`` holds response i's values, one per token in ``tokens[i]`` (its real tokens
    only). Every series is drawn in every panel with the style of ``TOKEN_SERIES_STYLES`` at its
    position, so identical series stay visible as circles with crosses inside. The panels share one
    y-axis (so a dip means the same in each), with a 5% margin above and below the data; the legend
    sits above the panels, beside the title, never on the data. Spaces in a token are shown as ␣.
    """
    if not series:
        raise ValueError("series is empty: give at least one {label: values per response}")
    if len(series) > len(TOKEN_SERIES_STYLES):
        raise ValueError(f"at most {len(TOKEN_SERIES_STYLES)} series, got {len(series)}")
    n_panels = len(tokens)
    for label, per_response in series.items():
        if len(per_response) != n_panels or any(len(v) != len(t) for v, t in zip(per_response, tokens)):
            raise ValueError(f"series {label!r} needs one value per token of each of the {n_panels} responses")
    fig, axes = _new_figure(ncols=n_panels, width=12 / max(n_panels, 1), height=3.9, sharey=True)
    axes = axes[0]
    lows, highs = [], []
    for i, ax in enumerate(axes):
        n = len(tokens[i])
        for (label, per_response), style in zip(series.items(), TOKEN_SERIES_STYLES):
            values = _to_numpy(per_response[i], label)
            ax.plot(range(n), values, label=label if i == 0 else None, **style)
            if values.size:
                lows.append(float(values.min()))
                highs.append(float(values.max()))
        ax.set_xticks(range(n))
        ax.set_xticklabels([str(p).replace(" ", "␣") for p in tokens[i]], rotation=90, fontsize=7)
        if panel_titles is not None:
            ax.set_title(panel_titles[i], fontsize=9)
        ax.set_xlabel("sampled response token", fontsize=8)
        ax.grid(alpha=0.3)
    if lows:
        span = max(highs) - min(lows) or 1.0
        axes[0].set_ylim(min(lows) - 0.05 * span, max(highs) + 0.05 * span)
    axes[0].set_ylabel(ylabel)
    fig.legend(loc="outside upper right", ncol=len(series), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 4: ratio and the clipped objective
# ---------------------------------------------------------------------------------------------


def _draw_clipped_objective(ax, cliprange: float, advantage: float, ratio_max: float,
                            n_points: int, mark_ratios=None) -> None:
    ratios = torch.linspace(0.0, ratio_max, n_points, dtype=torch.float64)
    unclipped = ratios * advantage
    objective = ppo_math.clipped_objective_per_token(ratios, advantage, cliprange)
    band = ax.axvspan(1 - cliprange, 1 + cliprange, color=COLOURS["band"], zorder=0,
                      label=f"clip band [{1 - cliprange:.2f}, {1 + cliprange:.2f}]")
    band.set_gid("clip band")
    (line,) = ax.plot(ratios.numpy(), unclipped.numpy(), "--", color=COLOURS["unclipped"],
                      label="unclipped  r·A")
    line.set_gid("unclipped")
    (line,) = ax.plot(ratios.numpy(), objective.numpy(), color=COLOURS["clipped"], lw=2.5,
                      label="clipped objective  min(r·A, clip(r)·A)")
    line.set_gid("clipped")
    if mark_ratios is not None:
        marks = torch.as_tensor(mark_ratios, dtype=torch.float64)
        points = ax.scatter(marks.numpy(), ppo_math.clipped_objective_per_token(marks, advantage, cliprange).numpy(),
                            color="black", zorder=3, s=22, label="ratios of the example")
        points.set_gid("marked ratios")
    ax.axvline(1.0, color="0.5", lw=0.8)
    ax.axhline(0.0, color="0.5", lw=0.8)
    sign = "better" if advantage > 0 else ("worse" if advantage < 0 else "no better or worse")
    ax.set_title(f"A = {advantage:+g} ({sign} than expected), ε = {cliprange:g}")
    ax.set_xlabel("probability ratio  r = π_θ(a) / π_old(a)")
    ax.set_ylabel("objective (to maximise)")
    ax.set_xlim(0.0, ratio_max)


def plot_clipped_objective(cliprange: float = 0.2, advantages: Sequence[float] = (1.0, -1.0),
                           ratio_max: float = 2.0, n_points: int = 401, mark_ratios=None) -> Figure:
    """One panel per advantage: the unclipped ``r·A`` against the clipped objective.

    L(r) = min(r·A, clip(r, 1 - ε, 1 + ε)·A)   from ``ppo_math.clipped_objective_per_token``

    The band ``[1 - ε, 1 + ε]`` is shaded. With A > 0 the clipped line goes flat for r > 1 + ε;
    with A < 0 it goes flat for r < 1 - ε. ``mark_ratios`` (e.g. [0.5, 0.8, 1.0, 1.2, 1.5]) adds
    dots on the clipped objective. Lines have gids "unclipped" and "clipped"; the band "clip band".
    """
    if not 0 < cliprange < 1:
        raise ValueError(f"cliprange must be in (0, 1), got {cliprange}; PPO usually uses 0.1-0.3")
    fig, axes = _new_figure(ncols=len(advantages))
    for ax, advantage in zip(axes[0], advantages):
        _draw_clipped_objective(ax, cliprange, float(advantage), ratio_max, n_points, mark_ratios)
    axes[0][0].legend(loc="upper left", fontsize=8)
    return fig


def plot_clipping_view(ratios, cliprange: float, advantage: float, clip_fraction: float | None = None,
                       bins: int = 60) -> Figure:
    """The widget's picture: the objective for one advantage, and where sampled ratios fall.

    Left: ``plot_clipped_objective``'s panel for ``advantage``. Right: a histogram of ``ratios``
    (any shape, flattened) with the band shaded; the ratios whose clipped term is the smaller
    objective (zero gradient: ``min`` picked ``clip(r)·A < r·A``) are drawn in orange (gid
    "clipped ratios"), the others in blue (gid "unclipped ratios"). ``clip_fraction``, if given,
    goes in the title. Ratios that are NaN or overflowed to inf are not drawn, and the title says how
    many; a NaN clip fraction is named, not printed as a number.
    """
    every = torch.as_tensor(_to_numpy(ratios, "ratios").ravel())
    r = every[torch.isfinite(every)]
    not_finite = every.numel() - r.numel()
    objective = ppo_math.clipped_objective_per_token(r, advantage, cliprange)
    clipped = objective < r * advantage
    fig, axes = _new_figure(ncols=2)
    # Capped: a ratio near the float64 maximum times 1.05 (or times A) would overflow the axis to inf.
    upper = min(max(2.0, float(r.max()) * 1.05 if r.numel() else 2.0), 1e300)
    _draw_clipped_objective(axes[0][0], cliprange, advantage, upper, 401)
    axes[0][0].legend(loc="upper left", fontsize=7)
    ax = axes[0][1]
    band = ax.axvspan(1 - cliprange, 1 + cliprange, color=COLOURS["band"], zorder=0)
    band.set_gid("clip band")
    low, high = (float(r.min()), float(r.max())) if r.numel() else (1 - cliprange, 1 + cliprange)
    edges = np.linspace(low, high, bins + 1) if high > low else np.linspace(low - 0.05, high + 0.05, bins + 1)
    _, _, kept = ax.hist(r[~clipped].numpy(), bins=edges, color=COLOURS["unclipped"], alpha=0.8,
                         label=f"gradient flows ({int((~clipped).sum())})")
    _, _, cut = ax.hist(r[clipped].numpy(), bins=edges, color=COLOURS["clipped"], alpha=0.9,
                        label=f"clipped, zero gradient ({int(clipped.sum())})")
    _tag(kept, "unclipped ratios")
    _tag(cut, "clipped ratios")
    title = f"{every.numel()} sampled ratios, A = {advantage:+g}"
    if clip_fraction is not None and not np.isfinite(clip_fraction):
        title, clip_fraction = title + ": clip fraction not a number (NaN)", None
    if clip_fraction is not None:
        title += f": clip fraction {clip_fraction:.3f}"
    if not_finite:
        title += f"\n{not_finite} of {every.numel()} not finite (NaN or inf), not drawn"
    ax.set_title(title)
    ax.set_xlabel("probability ratio r")
    ax.set_ylabel("tokens")
    ax.legend(fontsize=8)
    return fig


def plot_ratio_trajectories(ratios, cliprange: float, labels: Sequence[str] | None = None) -> Figure:
    """Ratios of a few tokens over optimisation steps, with the clip band shaded.

    ``ratios`` has shape ``[steps, n_tokens]`` (step 0 is the rollout policy, so all ratios are 1).
    Used to show that clipping does not stop a ratio from leaving the band.
    """
    r = _to_numpy(ratios, "ratios")
    if r.ndim != 2:
        raise ValueError(f"ratios must have shape [steps, n_tokens], got {r.shape}")
    fig, axes = _new_figure(width=6.0)
    ax = axes[0][0]
    band = ax.axhspan(1 - cliprange, 1 + cliprange, color=COLOURS["band"], zorder=0,
                      label=f"clip band [{1 - cliprange:.2f}, {1 + cliprange:.2f}]")
    band.set_gid("clip band")
    steps = np.arange(r.shape[0])
    for j in range(r.shape[1]):
        label = labels[j] if labels is not None else f"token {j}"
        (line,) = ax.plot(steps, r[:, j], marker="o", ms=3, label=label)
        line.set_gid(f"ratio {j}")
    ax.set_xlabel("gradient step on the same batch")
    ax.set_ylabel("ratio  π_θ / π_old")
    ax.legend(fontsize=8)
    return fig


def plot_clip_stats_vs_spread(spreads, clip_fractions, approx_kls, reference_kls=None) -> Figure:
    """Clip fraction and approximate KL against how spread out the log-ratios are.

    All inputs are 1-D of the same length; ``spreads`` is the standard deviation of log r.
    ``reference_kls`` (optional) is drawn as a dashed line next to the approximate KL.
    """
    s = _to_numpy(spreads, "spreads")
    fig, axes = _new_figure(ncols=2, width=4.5)
    ax = axes[0][0]
    (line,) = ax.plot(s, _to_numpy(clip_fractions, "clip_fractions"), marker="o", color=COLOURS["clipped"])
    line.set_gid("clip fraction")
    ax.set_xlabel("std of log r")
    ax.set_ylabel("clip fraction")
    ax.set_title("clip fraction")
    ax = axes[0][1]
    (line,) = ax.plot(s, _to_numpy(approx_kls, "approx_kls"), marker="o", label="approx KL (k3)")
    line.set_gid("approx kl")
    if reference_kls is not None:
        (line,) = ax.plot(s, _to_numpy(reference_kls, "reference_kls"), "--", color="0.3", label="exact KL")
        line.set_gid("reference kl")
    ax.set_xlabel("std of log r")
    ax.set_ylabel("nats per token")
    ax.set_title("approximate KL(π_old ‖ π_θ)")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 3: rewards, values and advantages per token
# ---------------------------------------------------------------------------------------------


def plot_token_advantages(advantages, mask=None, rewards=None, values=None, returns=None,
                          title: str = "") -> Figure:
    """Per-token picture of one response: rewards and values on top, advantages (and returns) below.

    All inputs are 1-D ``[T]`` (or ``[1, T]``); positions where ``mask`` is 0 are greyed out.
    Gids: "reward", "value" (top), "advantage", "return" (bottom).
    """
    adv = _one_response(advantages, "advantages")
    T = adv.shape[0]
    m = np.ones(T) if mask is None else _one_response(mask, "mask")
    positions = np.arange(T)
    fig, axes = _new_figure(nrows=2, width=8.0, height=2.6, sharex=True)
    top, bottom = axes[0][0], axes[1][0]
    for ax in (top, bottom):
        _shade_padding(ax, m)
        ax.axhline(0.0, color="0.5", lw=0.8)
    if rewards is not None:
        bars = top.bar(positions, _one_response(rewards, "rewards"), color=COLOURS["reward"], width=0.8,
                       label="reward r_t")
        _tag(bars, "reward")
    if values is not None:
        (line,) = top.plot(positions, _real_only(_one_response(values, "values"), m), color=COLOURS["value"],
                           label="value V_t")
        line.set_gid("value")
    if rewards is not None or values is not None:
        top.legend(fontsize=8, loc="upper left")
    top.set_ylabel("reward / value")
    (line,) = bottom.plot(positions, _real_only(adv, m), color=COLOURS["advantage"], lw=2, label="advantage A_t")
    line.set_gid("advantage")
    if returns is not None:
        returns_real = _real_only(_one_response(returns, "returns"), m)
        (line,) = bottom.plot(positions, returns_real, "--", color=COLOURS["return"], label="return R_t = A_t + V_t")
        line.set_gid("return")
    bottom.legend(fontsize=8, loc="upper left")
    bottom.set_xlabel("response token t (0 = first generated token)")
    bottom.set_ylabel("advantage / return" if returns is not None else "advantage")
    if title:
        top.set_title(title)
    return fig


def plot_advantage_curves(curves: Mapping[str, object], mask=None, title: str = "") -> Figure:
    """Several per-token advantage curves of one response on one axis (e.g. one per λ).

    ``curves`` maps a label to a 1-D ``[T]`` tensor; each line's gid is its label.
    """
    fig, axes = _new_figure(width=8.0, height=3.2)
    ax = axes[0][0]
    first = None
    for label, curve in curves.items():
        y = _one_response(curve, label)
        first = y if first is None else first
        (line,) = ax.plot(np.arange(y.shape[0]), y, label=label)
        line.set_gid(label)
    if mask is not None:
        _shade_padding(ax, _one_response(mask, "mask"))
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("response token t")
    ax.set_ylabel("advantage A_t")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def plot_whitening(raw, whitened_masked, whitened_naive, mask) -> Figure:
    """Histograms over the real tokens of a batch: raw advantages, masked and naive whitening.

    Inputs are ``[B, T]``; only positions where ``mask`` is 1 are drawn. Naive whitening (padding
    counted as zeros) leaves the real tokens off-centre; masked whitening centres them at 0, std 1.
    The three panels share their x axis, their y axis and their bins, so widths and shifts can be
    compared by eye.
    """
    m = _to_numpy(mask, "mask").astype(bool)
    panels = (("raw advantages", raw, "0.4"), ("masked whitening", whitened_masked, COLOURS["clipped"]),
              ("naive whitening (padding counted)", whitened_naive, COLOURS["penalty"]))
    reals = [_to_numpy(x, name)[m] for name, x, _ in panels]
    edges = np.histogram_bin_edges(np.concatenate(reals), bins=40)
    fig, axes = _new_figure(ncols=3, width=3.6, height=3.0, sharex=True, sharey=True)
    for ax, (name, _, colour), real in zip(axes[0], panels, reals):
        _, _, patches = ax.hist(real, bins=edges, color=colour)
        _tag(patches, name)
        ax.axvline(0.0, color="black", lw=0.8)
        mean = round(float(real.mean()), 2) + 0.0  # + 0.0: a mean that rounds to -0.00 is titled +0.00
        ax.set_title(f"{name}\nmean {mean:+.2f}, std {real.std(ddof=1):.2f}", fontsize=9)
        ax.set_xlabel("value on real tokens")
    axes[0][0].set_ylabel("tokens")
    return fig


def plot_gae_spread(lams, means: Mapping[str, object], stds: Mapping[str, object], n_samples: int) -> Figure:
    """λ's bias and variance: the mean and the standard deviation of one token's advantage over
    many sampled responses, against λ, one line per value head (``means[name]``, ``stds[name]``,
    each aligned with ``lams``). Left: the spread (variance); right: where the mean sits (bias)."""
    lam = _to_numpy(lams, "lams")
    fig, axes = _new_figure(ncols=2, width=4.6, height=3.3)
    for name, mean in means.items():
        (line,) = axes[0][0].plot(lam, _to_numpy(stds[name], name), "o-", label=name)
        line.set_gid(f"std {name}")
        (line,) = axes[0][1].plot(lam, _to_numpy(mean, name), "o-", label=name)
        line.set_gid(f"mean {name}")
    axes[0][0].set_title(f"spread: std of A_0 over {n_samples} responses", fontsize=9)
    axes[0][1].set_title(f"bias: mean of A_0 over {n_samples} responses", fontsize=9)
    axes[0][1].axhline(0.0, color="black", lw=0.8)
    for ax in axes[0]:
        ax.set_xlabel("λ")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("std of A_0")
    axes[0][1].set_ylabel("mean of A_0")
    axes[0][1].legend(fontsize=8)
    # Heads whose spreads coincide draw one visible curve on the left: the legend says so.
    spreads = [_to_numpy(stds[name], name) for name in means]
    if len(spreads) > 1 and all(np.allclose(s, spreads[0]) for s in spreads[1:]):
        axes[0][0].legend([axes[0][0].lines[-1]], [" and ".join(means) + " (identical)"], fontsize=8)
    else:
        axes[0][0].legend(fontsize=8)
    return fig


def plot_value_fit(values, returns, mask=None, title: str = "") -> Figure:
    """Value predictions against their targets (the returns), one dot per real token.

    Inputs ``[B, T]`` or ``[T]``; dots on the diagonal are perfect predictions.
    """
    v, r = _to_numpy(values, "values"), _to_numpy(returns, "returns")
    m = np.ones_like(v, dtype=bool) if mask is None else _to_numpy(mask, "mask").astype(bool)
    fig, axes = _new_figure(width=4.2, height=4.0)
    ax = axes[0][0]
    points = ax.scatter(r[m], v[m], s=8, alpha=0.6, color=COLOURS["value"])
    points.set_gid("tokens")
    lo, hi = float(min(r[m].min(), v[m].min())), float(max(r[m].max(), v[m].max()))
    ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, label="V = R")
    ax.set_xlabel("return R_t (target)")
    ax.set_ylabel("value V_t (prediction)")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 5: KL penalty, shaped rewards, estimators and the controller
# ---------------------------------------------------------------------------------------------


def plot_shaped_rewards(kl_penalties, scores_on_tokens, mask=None, title: str = "") -> Figure:
    """Per-token shaped reward of one response as stacked bars: KL penalty plus score.

    ``kl_penalties`` is the non-score part ``-β·k1_t`` (``ppo_math.kl_penalty_rewards``), and
    ``scores_on_tokens`` is the score placed on the last real token (zeros elsewhere); both
    ``[T]``. Their sum is ``ppo_math.shaped_rewards``, drawn as black dots (gid "shaped").
    """
    pen = _one_response(kl_penalties, "kl_penalties")
    score = _one_response(scores_on_tokens, "scores_on_tokens")
    T = pen.shape[0]
    positions = np.arange(T)
    fig, axes = _new_figure(width=7.0, height=3.4)
    ax = axes[0][0]
    if mask is not None:
        _shade_padding(ax, _one_response(mask, "mask"))
    bars = ax.bar(positions, pen, color=COLOURS["penalty"], label="non-score reward  -β·k1_t")
    _tag(bars, "penalty")
    # Both bars start at 0: the penalty points down, the score (one token only) points up.
    bars = ax.bar(positions, score, color=COLOURS["reward"], alpha=0.8, label="reward-model score (last real token)")
    _tag(bars, "score")
    (line,) = ax.plot(positions, pen + score, "o", color="black", ms=4, label="shaped reward r_t")
    line.set_gid("shaped")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("response token t")
    ax.set_ylabel("reward")
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def plot_reward_components(scores, non_score, shaped, labels: Sequence[str] | None = None,
                           title: str = "", ylim: tuple[float, float] | None = None) -> Figure:
    """Per response, side by side: the raw score, the non-score reward and the shaped total.

    All three are 1-D ``[B]``: ``scores`` from the reward model, ``non_score`` the summed KL
    penalties of each response, ``shaped`` their sum. Bars have gids "score", "non-score", "shaped".
    ``ylim`` fixes the y axis (so a slider moving β does not rescale it); a bar that runs below
    the axis is cut there and its value written at the bottom edge. A value that is NaN has no bar:
    "NaN" is written where it would stand (gid "not a number"); ±inf is drawn to the axis' edge
    and written as ±∞.
    """
    s, n, t = (_to_numpy(x, name) for x, name in ((scores, "scores"), (non_score, "non_score"), (shaped, "shaped")))
    B = s.shape[0]
    x = np.arange(B)
    fig, axes = _new_figure(width=max(5.0, 0.9 * B + 2), height=3.6)
    ax = axes[0][0]
    width = 0.27
    for offset, values, name, colour in ((-width, s, "score", COLOURS["reward"]),
                                         (0.0, n, "non-score", COLOURS["penalty"]),
                                         (width, t, "shaped", "0.3")):
        edge_low, edge_high = ylim if ylim is not None else (0.0, 0.0)
        bars = ax.bar(x + offset, np.nan_to_num(values, nan=0.0, posinf=edge_high, neginf=edge_low), width=width,
                      color=colour, label=name)
        _tag(bars, name)
        for xi, v in zip(x + offset, values):
            if np.isnan(v):
                ax.text(xi, 0.0, "NaN", ha="center", va="bottom", fontsize=7, rotation=90, gid="not a number")
            elif (ylim is not None and v < ylim[0]) or v == -np.inf:
                text = ax.text(xi, edge_low, f"{v:.0f}↓" if np.isfinite(v) else "−∞↓", ha="center", va="bottom",
                               fontsize=7, rotation=90, color="white" if name != "shaped" else "black")
                text.set_gid("off the axis")
            elif v == np.inf:
                ax.text(xi, edge_high, "+∞↑", ha="center", va="top", fontsize=7, rotation=90, gid="off the axis")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xticks(x, labels if labels is not None else [str(i) for i in range(B)], fontsize=8)
    ax.set_ylabel("reward per response")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


# Colours for the kinds of response a lesson names (lesson 5's fixed batch); other kinds cycle.
KIND_COLOURS = {"hack": "tab:red", "honest": "tab:green", "bland": "0.45"}


def plot_shaped_return_vs_beta(betas, totals, labels: Sequence[str] | None = None,
                               beta_now: float | None = None, ylim: tuple[float, float] | None = None,
                               kinds: Sequence[str] | None = None) -> Figure:
    """Each response's shaped total ``score - β·KL`` as β grows (log scale).

    ``betas`` is ``[N]``; ``totals`` is ``[N, B]`` (one column per response). ``beta_now``
    draws a vertical marker; ``ylim`` zooms in (large β sends high-KL responses far below).
    ``kinds`` (one per response, e.g. "hack", "honest", "bland") gives every response of a kind
    the kind's colour (``KIND_COLOURS``), told apart within the kind by the line style.
    Line gids are the labels.
    """
    b = _to_numpy(betas, "betas")
    tot = _to_numpy(totals, "totals")
    fig, axes = _new_figure(width=6.5, height=3.8)
    ax = axes[0][0]
    others = iter(["tab:blue", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"] * 4)
    colour_of: dict[str, str] = {}
    seen: dict[str, int] = {}
    for j in range(tot.shape[1]):
        label = labels[j] if labels is not None else f"response {j}"
        style = {}
        if kinds is not None:
            kind = kinds[j]
            colour_of.setdefault(kind, KIND_COLOURS.get(kind) or next(others))
            style = {"color": colour_of[kind], "ls": ("-", "--", ":", "-.")[seen.get(kind, 0) % 4]}
            seen[kind] = seen.get(kind, 0) + 1
        (line,) = ax.plot(b, tot[:, j], label=label, **style)
        line.set_gid(label)
    if beta_now is not None:
        ax.axvline(beta_now, color="black", lw=1, ls=":")
    ax.set_xscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("β (kl_coef)")
    ax.set_ylabel("shaped return  score − β·KL")
    ax.legend(fontsize=7, ncols=2)
    return fig


def plot_kl_estimators(exact_kl, means: Mapping[str, object], stds: Mapping[str, object],
                       sampled_means: Mapping[str, object] | None = None, n_samples: int | None = None) -> Figure:
    """Bias and spread of the KL sample estimators against the exact KL.

    ``exact_kl`` is ``[N]`` (one value per pair of distributions). ``means[k]`` is the exact
    expectation of estimator ``k`` under the sampling policy (``[N]``) and ``stds[k]`` its
    per-sample standard deviation. Left panel: bias = mean - exact (gid "bias k1", ...); right
    panel: standard deviation (gid "std k1", ...). ``sampled_means`` adds Monte Carlo dots (the
    bias of a sample mean, one dot per distribution, gid "sampled bias k1", ...); with
    ``n_samples`` each dot gets a bar of ±2 standard errors, ±2·stds[k]/√n_samples (gid
    "sampled bias k1 bars"), and the count goes in the legend. Lines that coincide stay visible:
    k1 is drawn wide and pale under the others, k3 dashed, and each estimator's dots sit a few
    points to the side of the others at the same KL.
    """
    from matplotlib.transforms import offset_copy

    styles = {"k1": {"lw": 3.5, "alpha": 0.5}, "k3": {"ls": "--"}}
    x = _to_numpy(exact_kl, "exact_kl")
    fig, axes = _new_figure(ncols=2, width=4.6)
    bias_ax, std_ax = axes[0]
    for i, kind in enumerate(means):
        colour = COLOURS.get(kind)
        style = {"lw": 1.5, **styles.get(kind, {})}
        (line,) = bias_ax.plot(x, _to_numpy(means[kind], kind) - x, color=colour, label=kind, **style)
        line.set_gid(f"bias {kind}")
        if sampled_means is not None and kind in sampled_means:
            beside = offset_copy(bias_ax.transData, fig=fig, x=4.0 * (i - (len(means) - 1) / 2), units="points")
            y = _to_numpy(sampled_means[kind], kind) - x
            dots = bias_ax.scatter(x, y, color=colour, s=12, transform=beside, zorder=3)
            dots.set_gid(f"sampled bias {kind}")
            half = 2.0 * _to_numpy(stds[kind], kind) / np.sqrt(n_samples) if n_samples else np.zeros_like(y)
            if n_samples:
                bars = bias_ax.vlines(x, y - half, y + half, color=colour, lw=1.0, alpha=0.8, transform=beside)
                bars.set_gid(f"sampled bias {kind} bars")
            # drawn beside their x, the dots and bars do not enter the autoscale by themselves
            bias_ax.update_datalim(np.column_stack([np.r_[x, x], np.r_[y - half, y + half]]))
            bias_ax.autoscale_view()
        (line,) = std_ax.plot(x, _to_numpy(stds[kind], kind), color=colour, label=kind, **style)
        line.set_gid(f"std {kind}")
    if sampled_means is not None:  # one grey legend entry explains the dots of every colour
        what = f"mean of {n_samples:,} samples" if n_samples else "sampled mean"
        bias_ax.scatter([], [], color="0.4", s=12, label=f"dots: {what}")
        if n_samples:
            bias_ax.plot([], [], color="0.4", marker="|", ms=9, ls="none", label="bars: ±2 standard errors")
    bias_ax.axhline(0.0, color="0.5", lw=0.8)
    bias_ax.set_xlabel("exact KL(π ‖ π_ref), nats")
    bias_ax.set_ylabel("E[estimate] − KL")
    bias_ax.set_title("bias")
    bias_ax.legend(fontsize=8)
    std_ax.set_xlabel("exact KL(π ‖ π_ref), nats")
    std_ax.set_ylabel("std of one sample")
    std_ax.set_title("spread per sampled token")
    std_ax.legend(fontsize=8)
    return fig


def plot_kl_samples(samples: Mapping[str, object], exact_kl: float, bins: int = 40) -> Figure:
    """Histograms of per-token estimates (one panel per estimator) with the exact KL marked.

    ``samples[k]`` holds the per-token values of estimator ``k`` (any shape, flattened).
    """
    fig, axes = _new_figure(ncols=len(samples), width=3.4, height=3.0)
    for ax, (kind, values) in zip(axes[0], samples.items()):
        v = _to_numpy(values, kind).ravel()
        _, _, patches = ax.hist(v, bins=bins, color=COLOURS.get(kind, "0.4"))
        _tag(patches, kind)
        ax.axvline(exact_kl, color="black", lw=1.2, label=f"exact KL {exact_kl:.3f}")
        ax.axvline(v.mean(), color="black", lw=1.2, ls="--", label=f"sample mean {v.mean():.3f}")
        ax.set_title(f"{kind}: {100 * (v < 0).mean():.0f}% of samples < 0", fontsize=9)
        ax.set_xlabel("per-token estimate")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("sampled tokens")
    return fig


def plot_kl_controller(kls: Mapping[str, object], betas: Mapping[str, object], target: float) -> Figure:
    """KL and β over updates for one or more controllers (e.g. "fixed" and "adaptive").

    ``kls[name]`` and ``betas[name]`` are 1-D ``[steps]``. Gids: "kl <name>", "beta <name>".
    """
    fig, axes = _new_figure(ncols=2, width=4.6)
    kl_ax, beta_ax = axes[0]
    for name in kls:
        (line,) = kl_ax.plot(_to_numpy(kls[name], name), label=name)
        line.set_gid(f"kl {name}")
        (line,) = beta_ax.plot(_to_numpy(betas[name], name), label=name)
        line.set_gid(f"beta {name}")
    kl_ax.axhline(target, color="black", ls="--", lw=1, label=f"target {target:g}")
    kl_ax.set_xlabel("update")
    kl_ax.set_ylabel("observed KL per response (nats)")
    kl_ax.legend(fontsize=8)
    beta_ax.set_xlabel("update")
    beta_ax.set_ylabel("β (kl_coef)")
    beta_ax.legend(fontsize=8)
    return fig
