"""Policy lag: what happens to the importance ratios when PPO reuses one rollout batch (lesson 9).

PPO samples a batch with the policy π_old, then takes several epochs of minibatch steps on it.
After k steps the policy π_θ is k steps away from the one that sampled the data: the batch is
k steps old, and every token's ratio r_t = π_θ(a_t | s_t) / π_old(a_t | s_t) has drifted from 1.

This module trains on ONE fixed batch with the trainer's own code (``PPOTrainer.prepare_batch``
for steps 1-4 and ``update.optimise`` for the epochs x minibatches; no second copy of the
loss) and measures the whole batch against π_old after every epoch:

    batch = trainer.prepare_batch()                 # one rollout, scores, advantages
    start = snapshot(trainer)                       # weights, optimizer, random state
    sweep = reuse_batch(trainer, batch, epochs=8)   # sweep.epochs[k]: the policy after k epochs
    restore(trainer, start)                         # back to π_old, e.g. to try max_rollout_age

Because the measurement draws no random numbers, a run of 4 epochs is exactly the first 4
epochs of a run of 8 (tested): epochs 1, 4 and 8 start from the same policy and the same batch.
The plots at the end are pure functions of the measured numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from matplotlib.figure import Figure

from course_utils import ppo_math as pm
from course_utils import update as ppo
from course_utils.lesson_aids.plots import COLOURS, _new_figure, _tag, _to_numpy

__all__ = [
    "MEASURED",
    "BatchReuse",
    "snapshot",
    "restore",
    "effective_sample_fraction",
    "measure_against_rollout",
    "reuse_batch",
    "format_reuse_table",
    "plot_ratio_histograms",
    "plot_lag_vs_epoch",
]

MEASURED = ("ratio_mean", "ratio_std", "ratio_min", "ratio_max", "outside_band", "clipfrac", "approx_kl",
            "effective_sample_fraction", "policy_loss")
"""The numbers ``measure_against_rollout`` returns for the whole batch (besides the ratios)."""


# ---------------------------------------------------------------------------------------------
# Saving and restoring the trainer, so several runs start from the same π_old
# ---------------------------------------------------------------------------------------------


def snapshot(trainer) -> dict:
    """A deep copy of ``trainer.state_dict()``: trainable weights (LoRA and value head), Adam's
    moments, the scheduler, β, the prompt cursor and the random-number states. Deep, because
    the optimizer's state dict holds references that the next step would change in place."""
    return copy.deepcopy(trainer.state_dict())


def restore(trainer, state: dict) -> None:
    """Put the trainer back to ``state`` (from ``snapshot``). The snapshot itself is not consumed:
    it can be restored again. A snapshot taken before ``prepare_batch`` makes the next batch the
    same one again (same prompts, same random samples on the CPU)."""
    trainer.load_state_dict(copy.deepcopy(state))


# ---------------------------------------------------------------------------------------------
# Measuring a batch against the policy that sampled it
# ---------------------------------------------------------------------------------------------


def effective_sample_fraction(ratios: torch.Tensor) -> float:
    """How many of n importance-weighted samples are "worth" plain samples, as a fraction of n.

        ESS / n = (Σ r_i)² / (n · Σ r_i²) = mean(r)² / mean(r²)

    1 when every ratio is equal (no reweighting at all); 1/n when one sample carries all the
    weight. For ratios drawn from π_old it estimates 1 / (1 + χ²(π_θ ‖ π_old)): it falls as the
    policy moves away from the one that sampled the data. ``ratios``: any shape, all > 0.
    """
    r = torch.as_tensor(ratios, dtype=torch.float64).flatten()
    if r.numel() == 0:
        raise ValueError("effective_sample_fraction needs at least one ratio")
    if not bool((r > 0).all()) or not bool(torch.isfinite(r).all()):
        raise ValueError("ratios must be finite and > 0 (they are π_θ / π_old of sampled tokens)")
    return float(r.mean() ** 2 / (r**2).mean())


@torch.no_grad()
def measure_against_rollout(trainer, batch) -> dict:
    """Score the whole ``batch`` (an ``update.RolloutBatch``) with the trainer's CURRENT policy and
    compare with the rollout policy π_old that sampled it. One no-grad forward, no randomness.

        r_t          = exp(log π_θ(a_t|s_t) - log π_old(a_t|s_t))        on real tokens only
        clipfrac     = share of real tokens where the clipped term is chosen (zero gradient)
        outside_band = share of real tokens with |r_t - 1| > cliprange, whatever the sign of A
        approx_kl    = masked mean of (r - 1) - log r  (k3: an estimate of KL(π_old ‖ π_θ))
        policy_loss  = PPO's clipped surrogate loss on the whole batch (lower = better objective)

    Returns the numbers named in ``MEASURED`` (floats; ``ratio_std`` is the population standard
    deviation) plus ``ratios`` (1-D float32 tensor, the ratios of the real tokens in row-major
    order) and ``logprobs`` ([B, T], 0 outside the mask).
    """
    from course_utils.rollout import sequence_forward

    cfg, rollout = trainer.config, batch.rollout
    mask = rollout.response_mask
    was_training = trainer.policy.training
    trainer.policy.eval()
    try:
        logprobs, _, _ = sequence_forward(trainer.policy, rollout.query_ids, rollout.query_mask,
                                          rollout.response_ids, mask, cfg.temperature)
    finally:
        trainer.policy.train(was_training)
    real = mask.bool()
    policy_loss, clipfrac = pm.clipped_surrogate(logprobs, rollout.old_logprobs, batch.advantages, mask,
                                                 cfg.cliprange)
    stats = pm.ratio_stats(logprobs, rollout.old_logprobs, mask)
    ratios = pm.probability_ratio(logprobs, rollout.old_logprobs)[real].float().cpu()
    return {
        "ratio_mean": float(stats["mean"]),
        "ratio_std": float(stats["var"].sqrt()),
        "ratio_min": float(stats["min"]),
        "ratio_max": float(stats["max"]),
        "outside_band": float(((ratios - 1).abs() > cfg.cliprange).float().mean()),
        "clipfrac": float(clipfrac),
        "approx_kl": float(pm.approx_kl(logprobs, rollout.old_logprobs, mask)),
        "effective_sample_fraction": effective_sample_fraction(ratios),
        "policy_loss": float(policy_loss),
        "ratios": ratios,
        "logprobs": logprobs.detach().cpu(),
    }


# ---------------------------------------------------------------------------------------------
# k epochs on one fixed batch
# ---------------------------------------------------------------------------------------------


@dataclass
class BatchReuse:
    """What ``reuse_batch`` measured.

    epochs: one dict per epoch count 0, 1, ..., E: the ``measure_against_rollout`` numbers of the
        policy after that many epochs (row 0 is π_old itself), plus ``epoch``,
        ``optimizer_steps`` and ``stale_steps_skipped`` counted so far.
    step_stats: the trainer's own statistics of every optimizer step taken (``PPOTrainer``'s
        ``STEP_STATS``, measured on each step's minibatch just *before* that step): what an
        update with these epochs would log, averaged, in ``metrics.jsonl``.
    optimizer_steps, stale_steps_skipped, nonfinite_steps: the totals, as ``ppo_update`` logs them.
    """

    epochs: list[dict]
    step_stats: dict[str, list[float]] = field(default_factory=dict)
    optimizer_steps: int = 0
    stale_steps_skipped: int = 0
    nonfinite_steps: int = 0

    def column(self, name: str) -> list[float]:
        """One measured number for every epoch count, e.g. ``sweep.column("clipfrac")``."""
        if name not in self.epochs[0]:
            raise KeyError(f"{name!r} was not measured; choose one of {sorted(k for k in self.epochs[0])}")
        return [row[name] for row in self.epochs]

    def ratios(self, epoch: int) -> torch.Tensor:
        """The real tokens' ratios after ``epoch`` epochs (1-D)."""
        return self.epochs[epoch]["ratios"]


def reuse_batch(trainer, batch, epochs: int, max_rollout_age: int | None = None) -> BatchReuse:
    """Train ``epochs`` passes on ONE fixed ``batch`` and measure the policy after each pass.

    The passes are the trainer's own: ``update.optimise`` with the trainer's policy, optimizer and
    config (the same shuffled minibatches, loss, gradient clipping, Adam step and rollout-age rule as
    ``ppo_update``); ``measure_against_rollout`` runs before the first pass and after each one.
    When a pass took no step (every minibatch was stale), the policy has not changed and the
    previous measurement is reused instead of a second forward with the same result.

    ``max_rollout_age``: None uses the trainer's config. The trainer's weights and optimizer are
    left where the last pass put them; use ``snapshot``/``restore`` to start again from π_old.
    The learning-rate scheduler is not stepped (``ppo_update`` steps it once per update).
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a whole number >= 1, got {epochs!r}")
    if max_rollout_age is not None and max_rollout_age < 0:
        raise ValueError(f"max_rollout_age must be >= 0 (or None for the config's), got {max_rollout_age}")
    rows = [{"epoch": 0, "optimizer_steps": 0, "stale_steps_skipped": 0, **measure_against_rollout(trainer, batch)}]

    def after_epoch(epoch: int, counts: dict) -> None:
        previous = rows[-1]
        if counts["optimizer_steps"] == previous["optimizer_steps"]:
            measured = {k: v for k, v in previous.items() if k not in ("epoch", "optimizer_steps", "stale_steps_skipped")}
        else:
            measured = measure_against_rollout(trainer, batch)
        rows.append({"epoch": epoch, "optimizer_steps": counts["optimizer_steps"],
                     "stale_steps_skipped": counts["stale_steps_skipped"], **measured})

    result = ppo.optimise(trainer.policy, trainer.optimizer, batch, trainer.config, epochs=epochs,
                          max_rollout_age=max_rollout_age, after_epoch=after_epoch)
    return BatchReuse(epochs=rows, step_stats=result["stats"], optimizer_steps=result["optimizer_steps"],
                      stale_steps_skipped=result["stale_steps_skipped"], nonfinite_steps=result["nonfinite_steps"])


def format_reuse_table(sweep: BatchReuse, digits: int = 4) -> str:
    """The per-epoch numbers of a ``BatchReuse`` as a fixed-width text table."""
    names = ("optimizer_steps", "stale_steps_skipped", "ratio_mean", "ratio_std", "ratio_min", "ratio_max",
             "clipfrac", "outside_band", "approx_kl", "effective_sample_fraction", "policy_loss")
    short = {"optimizer_steps": "steps", "stale_steps_skipped": "stale", "effective_sample_fraction": "ESS/n",
             "outside_band": "outside", "policy_loss": "pg_loss"}
    header = f"{'epochs':>6} " + " ".join(f"{short.get(n, n):>10}" for n in names)
    lines = [header]
    for row in sweep.epochs:
        # round() first, so that a tiny negative number prints as 0.0000, never -0.0000
        cells = [f"{row[n]:>10d}" if isinstance(row[n], int) else f"{round(row[n], digits) + 0.0:>10.{digits}f}"
                 for n in names]
        lines.append(f"{row['epoch']:>6d} " + " ".join(cells))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Plots (pure: they draw what they are given and return a new Figure)
# ---------------------------------------------------------------------------------------------


def plot_ratio_histograms(ratios_by_epochs: Mapping[int, object], cliprange: float, bins: int = 40) -> Figure:
    """One histogram of the token ratios per epoch count, side by side on a shared log-scaled
    x axis, with the clip band [1 - ε, 1 + ε] shaded and its edges drawn in front of the bars.

    ``ratios_by_epochs``: epoch count -> 1-D ratios of the real tokens (e.g. ``{1: sweep.ratios(1),
    4: sweep.ratios(4), 8: sweep.ratios(8)}``). Each panel's title gives the share of tokens
    outside the band. The band is one bin of its own and no bin straddles its edges, so every bar
    is wholly inside the band (drawn in ``COLOURS["unclipped"]``, pale) or wholly outside it
    (``COLOURS["penalty"]``); ``bins`` is about the number of bins outside the band, spread over the
    log axis in proportion to each side's width. Bars carry the gid ``"ratios after k epochs"``, the
    shaded band ``"clip band"``, its two edge lines ``"clip band edge"``.
    (Week 9, issue 49: on an axis of seven decades the band was a grey sliver behind one bar that
    straddled it, so no one could see which tokens fell inside.)
    """
    if not ratios_by_epochs:
        raise ValueError("ratios_by_epochs is empty: give at least one epoch count -> ratios")
    if cliprange <= 0:
        raise ValueError(f"cliprange must be > 0, got {cliprange}")
    arrays = {int(k): _to_numpy(v, f"ratios after {k} epochs").ravel() for k, v in ratios_by_epochs.items()}
    for k, r in arrays.items():
        if r.size == 0 or not np.all(r > 0):
            raise ValueError(f"the ratios after {k} epochs must be a non-empty list of positive numbers")
    lower, upper = 1 - cliprange, 1 + cliprange
    low = min(lower, *(r.min() for r in arrays.values())) * 0.95
    high = max(upper, *(r.max() for r in arrays.values())) * 1.05
    # Bins below and above the band in proportion to their log widths; the band itself is one bin.
    below_width, above_width = np.log(lower / low) if lower > 0 else 0.0, np.log(high / upper)
    n_below = max(1, round(bins * below_width / (below_width + above_width))) if lower > 0 else 0
    n_above = max(1, bins - n_below)
    below_edges = np.geomspace(low, lower, n_below + 1) if n_below else None
    above_edges = np.geomspace(upper, high, n_above + 1)
    fig, axes = _new_figure(ncols=len(arrays), width=3.6, height=3.2, sharex=True, sharey=True)
    for ax, (k, r) in zip(axes[0], sorted(arrays.items())):
        band = ax.axvspan(lower, upper, color=COLOURS["band"], zorder=0,
                          label=f"clip band [{lower:.2f}, {upper:.2f}]")
        band.set_gid("clip band")
        inside_band = np.abs(r - 1) <= cliprange
        _, _, patches = ax.hist(r[inside_band], bins=[lower, upper], color=COLOURS["unclipped"],
                                alpha=0.45, label="tokens inside the band")
        _tag(patches, f"ratios after {k} epochs")
        parts = [(r[~inside_band & (r > 1)], above_edges)]
        if below_edges is not None:
            parts.insert(0, (r[~inside_band & (r < 1)], below_edges))
        for j, (values, side_edges) in enumerate(parts):
            _, _, patches = ax.hist(values, bins=side_edges, color=COLOURS["penalty"], alpha=0.85,
                                    label="tokens outside the band" if j == 0 else None)
            _tag(patches, f"ratios after {k} epochs")
        for edge in (lower, upper):
            ax.axvline(edge, color="0.15", ls="--", lw=0.9, zorder=4, gid="clip band edge")
        outside = float(np.mean(~inside_band))
        ax.set_xscale("log")
        ax.set_title(f"{k} epoch{'s' if k != 1 else ''}: {outside:.0%} outside the band", fontsize=10)
        ax.set_xlabel("ratio  π_θ / π_old (log scale)")
    axes[0][0].set_ylabel("tokens")
    axes[0][0].legend(fontsize=8, loc="upper left")
    return fig


def plot_lag_vs_epoch(runs: Mapping[str, Sequence[dict]], cliprange: float | None = None) -> Figure:
    """Clip fraction, approximate KL, ratio spread and effective sample fraction against the
    number of epochs on the same batch; one line per run.

    ``runs``: label -> per-epoch rows (``BatchReuse.epochs``: dicts with ``epoch``, ``clipfrac``,
    ``approx_kl``, ``ratio_std`` and ``effective_sample_fraction``), e.g. the same batch with and
    without a maximum rollout age. ``cliprange`` (optional) is noted on the clip-fraction panel.
    Lines carry the gid ``"<quantity>: <label>"``.

    The approximate KL is drawn on a log axis: runs at different learning rates differ by orders of
    magnitude, and a small one would lie flat on zero on a linear axis. Its panel starts at epoch 1:
    at epoch 0, before any step, π_θ is π_old and the KL is 0 up to round-off (a value such as 1e-11
    from a sampler's cached forward pass), which would stretch the log axis over ten decades and flatten
    the growth over the epochs that the panel is there to show. Non-positive values are left out too.
    """
    if not runs:
        raise ValueError("runs is empty: give at least one label -> per-epoch rows")
    panels = (("clipfrac", "clip fraction", "share of tokens clipped"),
              ("approx_kl", "approximate KL(π_old ‖ π_θ)", "nats per token"),
              ("ratio_std", "spread of the ratios", "std of r over tokens"),
              ("effective_sample_fraction", "effective sample size / n", "fraction"))
    fig, axes = _new_figure(ncols=4, width=3.3, height=3.0)
    for ax, (key, title, ylabel) in zip(axes[0], panels):
        for i, (label, rows) in enumerate(runs.items()):
            missing = [k for k in ("epoch", key) if any(k not in row for row in rows)]
            if missing or not rows:
                raise ValueError(f"run {label!r} needs per-epoch rows with 'epoch' and {key!r}")
            x = [row["epoch"] for row in rows]
            y = [row[key] for row in rows]
            if key == "approx_kl":  # from epoch 1 (epoch 0 is round-off); k3's zeros cannot sit on a log axis
                kept = [(e, v) for e, v in zip(x, y) if e >= 1 and v > 0]
                x, y = [e for e, _ in kept], [v for _, v in kept]
            (line,) = ax.plot(x, y, marker="o", ms=3, ls="-" if i == 0 else "--", label=label)
            line.set_gid(f"{key}: {label}")
        ax.set_title(title + (f" (ε = {cliprange})" if key == "clipfrac" and cliprange else ""), fontsize=10)
        ax.set_xlabel("epochs on the same batch")
        ax.set_ylabel(ylabel)
        if key == "approx_kl":
            ax.set_yscale("log")
            ax.set_ylabel(ylabel + " (log scale)")
    axes[0][0].legend(fontsize=8)
    return fig
