"""Sliders for the lessons: thin wiring from ipywidgets to the pure plot functions.

Each widget has two halves:

* a pure *view* function (``clipping_view``, ``gae_view``, ``beta_view``) that takes numbers and
  tensors, computes with ``course_utils.ppo_math``, draws with ``course_utils.lesson_aids.plots`` and returns
  ``(figure, summary)``. Tests call these directly; so can a learner without widgets.
* a ``*_widget`` function that builds labelled sliders and an output area, and on every slider
  change shows the view's figure as a PNG image followed by one printed line of numbers.

Only the ``*_widget`` functions import ipywidgets and IPython.
"""

from __future__ import annotations

import math

import torch

from course_utils.lesson_aids import plots
from course_utils import ppo_math

__all__ = [
    "sampled_log_ratios",
    "clip_fraction_text",
    "clipping_view",
    "clipping_widget",
    "gae_view",
    "gae_text",
    "gae_widget",
    "beta_view",
    "beta_text",
    "beta_widget",
    "hacking_rule_view",
    "hacking_rule_text",
    "hacking_rule_widget",
    "signal_view",
    "signal_text",
    "signal_widget",
    "score_threshold_view",
    "score_threshold_text",
    "score_threshold_widget",
    "ratio_band_view",
    "ratio_band_text",
    "ratio_band_widget",
    "whitening_view",
    "whitening_text",
    "whitening_widget",
]


def _ipywidgets():
    try:
        import ipywidgets
    except ImportError:
        raise ImportError("the sliders need ipywidgets: pip install ipywidgets "
                          "(or call the *_view functions directly)") from None
    return ipywidgets


def _show(fig, text: str) -> None:
    """Display a figure as a PNG image and print a line under it (inside an Output area)."""
    from IPython.display import Image, display

    display(Image(data=plots.figure_to_png(fig)))
    print(text)


def _full_mask(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return torch.ones_like(x, dtype=torch.bool) if mask is None else mask.bool()


def _number(x, fmt: str = "+.2f") -> str:
    """``x`` formatted with ``fmt``, or said in words when it is not a finite number (never "nan", "nan%")."""
    x = float(x)
    if math.isnan(x):
        return "NaN (not a number)"
    if math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return format(x, fmt)


def _finite_setting(name: str, value, low: float = -math.inf, high: float = math.inf, what: str = "") -> None:
    """Refuse a slider value outside [low, high] (NaN included), naming the argument and its range."""
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        number = math.nan
    if not (low <= number <= high and math.isfinite(number)):
        span = f" in [{low:g}, {high:g}]" if math.isfinite(low) or math.isfinite(high) else ""
        raise ValueError(f"{name} must be a finite number{span}{what}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Lesson 4: cliprange and advantage
# ---------------------------------------------------------------------------------------------


def sampled_log_ratios(n: int = 4000, spread: float = 0.15, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch of ``(logprobs, old_logprobs)``, each ``[1, n]``, whose ratios spread like PPO's.

    old_logprobs: log of probabilities drawn uniformly in [0.05, 0.95].
    log r ~ Normal(-spread²/2, spread²), so E[r] = 1 under the tokens' sampling policy (π_old), as
    for a real rollout, and the exact KL(π_old ‖ π_θ) of this model is spread²/2 per token.
    """
    generator = torch.Generator().manual_seed(seed)
    old_logprobs = torch.log(0.05 + 0.9 * torch.rand(1, n, generator=generator, dtype=torch.float64))
    log_ratio = spread * torch.randn(1, n, generator=generator, dtype=torch.float64) - spread**2 / 2
    return old_logprobs + log_ratio, old_logprobs


def clip_fraction_text(clip_fraction: float) -> str:
    """The widget's report line, e.g. ``"clip fraction: 0.12"`` (NaN is said in words: a real token's
    ratio is NaN, or an overflowed ratio met an advantage of 0)."""
    if math.isnan(float(clip_fraction)):
        return "clip fraction: NaN (not a number): a ratio of the batch is NaN, or an overflowed one met A = 0"
    return f"clip fraction: {float(clip_fraction):.2f}"


def clipping_view(cliprange: float, advantage: float, logprobs: torch.Tensor, old_logprobs: torch.Tensor,
                  mask: torch.Tensor | None = None):
    """Clip fraction of a sampled batch when every token has advantage ``advantage``.

    clip fraction = ``ppo_math.clipped_surrogate(logprobs, old_logprobs, A, mask, ε)[1]``,
    the share of real tokens whose clipped term is the smaller objective (zero gradient there).
    With A > 0 those are the tokens with r > 1 + ε, with A < 0 those with r < 1 - ε, with A = 0 none.

    Shapes: ``logprobs``, ``old_logprobs`` (and ``mask``) ``[B, T]``. Returns
    ``(figure, clip_fraction)`` with the figure from ``plots.plot_clipping_view``. ``cliprange`` must
    lie in (0, 1) and ``advantage`` be finite; a ratio that is NaN or overflows is named in the figure
    (and a NaN objective makes the clip fraction NaN, never a token silently counted as unclipped).
    """
    if not 0 < cliprange < 1:
        raise ValueError(f"cliprange must be in (0, 1), got {cliprange}; the slider runs from 0.05 to 0.5")
    _finite_setting("advantage", advantage)
    logprobs, old_logprobs = torch.as_tensor(logprobs), torch.as_tensor(old_logprobs)
    if logprobs.shape != old_logprobs.shape or (mask is not None and torch.as_tensor(mask).shape != logprobs.shape):
        shapes = [tuple(logprobs.shape), tuple(old_logprobs.shape)] + ([] if mask is None else [tuple(torch.as_tensor(mask).shape)])
        raise ValueError(f"logprobs, old_logprobs{' and mask' if mask is not None else ''} must have one shape [B, T] "
                         f"(one log-prob per token of the same responses), got {', '.join(map(str, shapes))}")
    m = _full_mask(logprobs, mask)
    advantages = torch.full_like(logprobs, float(advantage))
    _, clip_fraction = ppo_math.clipped_surrogate(logprobs, old_logprobs, advantages, m, cliprange)
    ratios = ppo_math.probability_ratio(logprobs, old_logprobs)[m]
    fig = plots.plot_clipping_view(ratios, cliprange, float(advantage), float(clip_fraction))
    return fig, float(clip_fraction)


def clipping_widget(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor | None = None,
                    cliprange: float = 0.2, advantage: float = 1.0):
    """Sliders "cliprange" and "advantage" over ``clipping_view``; returns an ipywidgets VBox.

    The output area shows the figure as an image and the line ``clip fraction: 0.xx``. The view
    is recomputed when a slider is released (``continuous_update=False``), not while dragging.
    """
    w = _ipywidgets()
    cliprange_slider = w.FloatSlider(value=cliprange, min=0.05, max=0.5, step=0.01, description="cliprange",
                                     readout_format=".2f", continuous_update=False)
    advantage_slider = w.FloatSlider(value=advantage, min=-2.0, max=2.0, step=0.1, description="advantage",
                                     readout_format="+.1f", continuous_update=False)

    def update(cliprange: float, advantage: float) -> None:
        fig, clip_fraction = clipping_view(cliprange, advantage, logprobs, old_logprobs, mask)
        _show(fig, clip_fraction_text(clip_fraction))

    output = w.interactive_output(update, {"cliprange": cliprange_slider, "advantage": advantage_slider})
    return w.VBox([w.HBox([cliprange_slider, advantage_slider]), output])


# ---------------------------------------------------------------------------------------------
# Lesson 3: γ, λ and where the reward lands
# ---------------------------------------------------------------------------------------------


def gae_view(gamma: float, lam: float, reward_position: int, value: float = 0.0, score: float = 2.0,
             max_len: int = 100):
    """Per-token advantages of one response whose reward-model score lands on ``reward_position``.

    The response has real tokens ``0 .. reward_position`` (its EOS is there) and padding up to
    ``max_len``; the score sits on the last real token (``ppo_math.shaped_rewards`` with no KL
    penalty), and the value head predicts the constant ``value`` on every real token. Then

        A, R = ppo_math.masked_gae(rewards, values, mask, γ, λ)

    Returns ``(figure, summary)``; ``summary`` holds the tensors ``advantages``, ``returns``,
    ``rewards``, ``values``, ``mask`` (each ``[max_len]``) and the floats ``first`` (A at token 0)
    and ``last`` (A at the last real token).
    """
    if not max_len >= 1:
        raise ValueError(f"max_len must be >= 1 (the response's length in tokens), got {max_len}")
    if not 0 <= reward_position < max_len:
        raise ValueError(f"reward_position must be in [0, {max_len - 1}], got {reward_position}")
    _finite_setting("value", value)
    _finite_setting("score", score)
    positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(0)
    mask = positions <= reward_position
    no_kl = torch.zeros_like(positions)
    rewards = ppo_math.shaped_rewards(torch.tensor([float(score)], dtype=torch.float64), no_kl, no_kl, mask, 0.0)
    values = torch.where(mask, torch.full_like(positions, float(value)), torch.zeros_like(positions))
    advantages, returns = ppo_math.masked_gae(rewards, values, mask, gamma, lam)
    fig = plots.plot_token_advantages(advantages[0], mask[0], rewards[0], values[0], returns[0],
                                      title=f"γ = {gamma:.2f}, λ = {lam:.2f}, γλ = {gamma * lam:.3f}, "
                                            f"score {score:g} on token {reward_position}, V = {value:g}")
    summary = {"advantages": advantages[0], "returns": returns[0], "rewards": rewards[0], "values": values[0],
               "mask": mask[0], "first": float(advantages[0, 0]), "last": float(advantages[0, reward_position])}
    return fig, summary


def gae_text(summary: dict) -> str:
    """The widget's report line: the advantage of the first and of the last real token."""
    return f"A at token 0 (the first): {summary['first']:+.3f}   A at the last real token: {summary['last']:+.3f}"


def gae_widget(max_len: int = 100, score: float = 2.0, gamma: float = 1.0, lam: float = 0.95,
               reward_position: int | None = None, value: float = 0.0):
    """Sliders for γ, λ, the reward position and a constant value guess over ``gae_view``.

    The sliders start at ``gamma``, ``lam``, ``reward_position`` (default: the last position,
    ``max_len - 1``; positions count from 0) and ``value``, so a lesson can show the same settings
    as a static ``gae_view`` figure next to it.
    """
    w = _ipywidgets()
    reward_position = max_len - 1 if reward_position is None else int(reward_position)
    if not 0 <= reward_position < max_len:
        raise ValueError(f"reward_position must be in [0, {max_len - 1}], got {reward_position}")
    style = {"description_width": "initial"}
    gamma_slider = w.FloatSlider(value=gamma, min=0.8, max=1.0, step=0.01, description="gamma γ", style=style,
                                 continuous_update=False)
    lam_slider = w.FloatSlider(value=lam, min=0.0, max=1.0, step=0.01, description="lambda λ", style=style,
                               continuous_update=False)
    position = w.IntSlider(value=reward_position, min=0, max=max_len - 1, description="reward at token",
                           style=style, continuous_update=False)
    value_slider = w.FloatSlider(value=value, min=-1.0, max=3.0, step=0.1, description="value guess V",
                                 style=style, continuous_update=False)

    def update(gamma: float, lam: float, reward_position: int, value: float) -> None:
        fig, summary = gae_view(gamma, lam, reward_position, value, score, max_len)
        _show(fig, gae_text(summary))

    output = w.interactive_output(update, {"gamma": gamma_slider, "lam": lam_slider, "reward_position": position,
                                           "value": value_slider})
    return w.VBox([w.HBox([gamma_slider, lam_slider]), w.HBox([position, value_slider]), output])


# ---------------------------------------------------------------------------------------------
# Lesson 5: β over a fixed batch of rollouts
# ---------------------------------------------------------------------------------------------


def beta_view(beta: float, scores: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
              mask: torch.Tensor, labels=None):
    """Score, non-score reward and shaped return of each response of a fixed batch at KL coef β.

    non_score_i = Σ_t ppo_math.kl_penalty_rewards(...)[i, t]          = -β · Σ_t k1_t
    shaped_i    = Σ_t ppo_math.shaped_rewards(scores, ...)[i, t]     = score_i + non_score_i
    kl_i        = Σ_t ppo_math.kl_estimate(logprobs, ref_logprobs, "k1")[i, t]   (masked)

    Shapes: ``scores`` ``[B]``; ``logprobs``, ``ref_logprobs``, ``mask`` ``[B, T]`` (``logprobs``
    from the policy that sampled, ``ref_logprobs`` from the reference). Returns ``(figure, summary)``;
    ``summary`` has the ``[B]`` tensors ``non_score``, ``shaped``, ``kl`` and ``best`` (the index of
    the response with the highest shaped return, the one PPO would push up most).

    The y axis is the same at every β, from the batch's scores alone (±1.15 × the largest finite
    |score|): the bars the title names stay readable, and the non-score rewards that β drives far
    below it are cut at the bottom edge with their value written there. A response whose shaped
    return is NaN (a NaN score or log-prob) is never ranked: the title counts such responses, and
    ``best`` is None when no response has a shaped return that is a number.
    """
    scores = torch.as_tensor(scores)
    if scores.numel() == 0:
        raise ValueError("beta_view needs at least one response, got an empty batch")
    m = torch.as_tensor(mask).bool()
    if labels is not None and len(labels) != scores.numel():
        raise ValueError(f"labels name the responses: {scores.numel()} responses need {scores.numel()} labels, "
                         f"got {len(labels)} (or leave labels out: 'response 0', 'response 1', ...)")
    non_score = ppo_math.masked_sum(ppo_math.kl_penalty_rewards(logprobs, ref_logprobs, m, beta), m, dim=1)
    shaped = ppo_math.masked_sum(ppo_math.shaped_rewards(scores, logprobs, ref_logprobs, m, beta), m, dim=1)
    kl = ppo_math.masked_sum(ppo_math.kl_estimate(logprobs, ref_logprobs, "k1", mask=m), m, dim=1)
    ranked = ~torch.isnan(shaped)
    best = int(torch.where(ranked, shaped, -math.inf).argmax()) if bool(ranked.any()) else None
    if best is None:
        label = "no response (every shaped return is NaN)"
    else:
        label = labels[best] if labels is not None else f"response {best}"
    finite_scores = scores[torch.isfinite(scores)].abs()
    top = 1.15 * float(finite_scores.max()) if finite_scores.numel() and float(finite_scores.max()) > 0 else 1.0
    title = f"β = {beta:.3g}: highest shaped return is {label}"
    unranked = int((~ranked).sum())
    if unranked and best is not None:
        title += f"\n{unranked} response{'s' if unranked > 1 else ''} with a NaN shaped return, not ranked"
    fig = plots.plot_reward_components(scores, non_score, shaped, labels, title=title, ylim=(-top, top))
    summary = {"non_score": non_score, "shaped": shaped, "kl": kl, "best": best, "label": label,
               "beta": float(beta), "scores": scores, "not_ranked": unranked}
    return fig, summary


def beta_text(summary: dict) -> str:
    """The widget's report line: which response wins at this β, with its score and KL."""
    b = summary["best"]
    if b is None:
        return f"β = {summary['beta']:.3g}: no response has a shaped return that is a number (all NaN)"
    unranked = summary.get("not_ranked", 0)
    tail = f"; {unranked} response(s) with a NaN shaped return not ranked" if unranked else ""
    return (f"β = {summary['beta']:.3g}: best shaped return {_number(summary['shaped'][b])} "
            f"from {summary['label']} (score {_number(summary['scores'][b], '.2f')}, "
            f"KL {_number(summary['kl'][b], '.2f')} nats){tail}")


def beta_widget(scores: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                labels=None, beta: float = 0.05):
    """A log-scale slider "beta" over ``beta_view`` for a fixed batch; returns an ipywidgets VBox."""
    w = _ipywidgets()
    beta_slider = w.FloatLogSlider(value=beta, base=10, min=-3, max=0.5, step=0.05, description="beta",
                                   readout_format=".3f", continuous_update=False)

    def update(beta: float) -> None:
        fig, summary = beta_view(beta, scores, logprobs, ref_logprobs, mask, labels)
        _show(fig, beta_text(summary))

    output = w.interactive_output(update, {"beta": beta_slider})
    return w.VBox([beta_slider, output])


# ---------------------------------------------------------------------------------------------
# Lesson 8: the hacking stop rule's patience over a logged run (no retraining behind the slider)
# ---------------------------------------------------------------------------------------------


def hacking_rule_view(history: list[dict], evals: list[dict], patience: int, eval_every: int):
    """The logged run with the line where the hacking stop rule would have stopped it.
    Returns ``(figure, summary)``, ``summary`` from ``diagnostics.replay_hacking_rule``."""
    from course_utils.lesson_aids import diagnostics

    if not evals:
        raise ValueError("the logged run holds no evaluation: the hacking rule reads held-out evaluations "
                         "(a run with eval_every > 0 that reached its first evaluation)")
    summary = diagnostics.replay_hacking_rule(history, evals, patience, eval_every)
    fig = diagnostics.plot_reward_vs_heldout(history, evals, stop_update=summary["stop_update"])
    return fig, summary


def hacking_rule_text(summary: dict) -> str:
    """The widget's report line: where the rule fires and what each way of ending the run keeps."""
    if summary["stop_update"] is None:
        where = f"patience {summary['patience']}: the rule never fires"
    else:
        where = f"patience {summary['patience']}: stops after update {summary['stop_update']}"
    return (f"{where}; pass rate there {summary['pass_at_stop']:.0%}, best so far {summary['best_pass']:.0%} "
            f"(update {summary['best_update']}), at the end of the logged run {summary['final_pass']:.0%}")


def hacking_rule_widget(history: list[dict], evals: list[dict], eval_every: int, patience: int = 2):
    """A patience slider over ``hacking_rule_view`` (0 switches the rule off)."""
    w = _ipywidgets()
    slider = w.IntSlider(value=patience, min=0, max=6, description="patience (evaluations)",
                         style={"description_width": "initial"}, continuous_update=False)

    def update(patience: int) -> None:
        import matplotlib.pyplot as plt

        fig, summary = hacking_rule_view(history, evals, patience, eval_every)
        _show(fig, hacking_rule_text(summary))
        plt.close(fig)

    return w.VBox([slider, w.interactive_output(update, {"patience": slider})])


# ---------------------------------------------------------------------------------------------
# Lesson 6a: how much a pass/fail reward can teach at success rate p
# ---------------------------------------------------------------------------------------------


def signal_view(p: float, batch_size: int = 16):
    """What one prompt's pass/fail reward can teach at success probability ``p``:

        signal           p (1 - p)          the reward's variance over samples (max 0.25 at p = 0.5)
        passes expected  batch_size · p     in a batch of ``batch_size`` samples of this family
        no pass at all   (1 - p)^batch_size a batch whose scores are all 0: every advantage is 0

    Returns ``(figure, summary)``; the figure draws p(1 - p) over p with ``p`` marked."""
    import numpy as np
    from matplotlib.figure import Figure

    if not 0.0 <= p <= 1.0 or batch_size < 1:
        raise ValueError(f"need 0 <= p <= 1 and batch_size >= 1, got p={p}, batch_size={batch_size}")
    summary = {"p": float(p), "batch_size": int(batch_size), "signal": p * (1 - p),
               "share_of_max": p * (1 - p) / 0.25, "expected_passes": batch_size * p,
               "no_pass": (1 - p) ** batch_size}
    grid = np.linspace(0, 1, 201)
    fig = Figure(figsize=(5.0, 3.2))
    ax = fig.subplots()
    ax.plot(grid, grid * (1 - grid), color="C0", gid="signal curve")
    ax.plot([p], [summary["signal"]], "o", color="C3", ms=8, gid="p")
    ax.set(xlabel="success rate p of one task family", ylabel="p (1 - p)",
           title=f"p = {p:.2f}: {summary['share_of_max']:.0%} of the largest signal")
    ax.grid(alpha=0.3)
    return fig, summary


def signal_text(summary: dict) -> str:
    return (f"p = {summary['p']:.2f}: p(1-p) = {summary['signal']:.4f}; {summary['expected_passes']:.2f} passes "
            f"expected in a batch of {summary['batch_size']}; {summary['no_pass']:.1%} of such batches have no pass "
            "at all (no advantage points towards a pass)")


def signal_widget(p: float = 0.02, batch_size: int = 16):
    """A success-rate slider over ``signal_view``."""
    w = _ipywidgets()
    slider = w.FloatSlider(value=p, min=0.0, max=1.0, step=0.01, description="success rate p",
                           readout_format=".2f", style={"description_width": "initial"}, continuous_update=False)

    def update(p: float) -> None:
        import matplotlib.pyplot as plt

        fig, summary = signal_view(p, batch_size)
        _show(fig, signal_text(summary))
        plt.close(fig)

    return w.VBox([slider, w.interactive_output(update, {"p": slider})])


# ---------------------------------------------------------------------------------------------
# Lesson 6b: the reward model's scores against the checker, read as a pass/fail threshold
# ---------------------------------------------------------------------------------------------


def score_threshold_view(scores, passed, threshold: float):
    """If a score >= ``threshold`` counted as a pass, how often would the reward model agree with
    the checker? ``scores`` and ``passed`` are one per answer.

    precision = passing answers among the accepted ones, recall = accepted answers among the
    passing ones; ``false_accepts`` = failing answers the threshold would pay like passes.
    Returns ``(figure, summary)``, the figure from ``reward_model_plots.plot_score_threshold``.
    """
    import numpy as np

    from course_utils.lesson_aids import reward_model_plots

    from course_utils.lesson_aids.diagnostics import pass_flags

    s, y = np.asarray(scores, dtype=float), np.asarray(pass_flags(passed, "passed"), dtype=bool)
    if s.size == 0:
        raise ValueError("score_threshold_view needs at least one scored answer, got none")
    if y.shape != s.shape:
        raise ValueError(f"scores and passed are one per answer: got {s.size} scores and {y.size} verdicts "
                         "(score and check the same answers, in the same order)")
    bad = int((~np.isfinite(s)).sum())
    if bad:
        raise ValueError(f"{bad} of the {s.size} scores {'is' if bad == 1 else 'are'} NaN or inf, which no "
                         "threshold can be compared with: drop those answers (or fix the reward model) first")
    _finite_setting("threshold", threshold)
    accepted = s >= threshold
    summary = {"threshold": float(threshold), "accepted": int(accepted.sum()), "n": len(s),
               "true_accepts": int((accepted & y).sum()), "false_accepts": int((accepted & ~y).sum()),
               "passing": int(y.sum()),
               "precision": float((accepted & y).sum() / accepted.sum()) if accepted.any() else float("nan"),
               "recall": float((accepted & y).sum() / y.sum()) if y.any() else float("nan")}
    return reward_model_plots.plot_score_threshold(s, y, threshold), summary


def score_threshold_text(summary: dict) -> str:
    precision = ("precision undefined (no answer accepted)" if math.isnan(summary["precision"])
                 else f"precision {summary['precision']:.0%}")
    recall = ("recall undefined (no passing answer)" if math.isnan(summary["recall"])
              else f"recall {summary['recall']:.0%} of the {summary['passing']} passing answers")
    return (f"score >= {summary['threshold']:+.2f}: {summary['accepted']} of {summary['n']} answers accepted, "
            f"{summary['false_accepts']} of them failing the checker; {precision}, {recall}")


def score_threshold_widget(scores, passed, threshold: float | None = None):
    """A threshold slider over ``score_threshold_view``, from the lowest to the highest score."""
    import numpy as np

    w = _ipywidgets()
    s = np.asarray(scores, dtype=float)
    low, high = float(s.min()), float(s.max())
    start = float(np.median(s)) if threshold is None else float(threshold)
    slider = w.FloatSlider(value=start, min=low, max=high, step=(high - low) / 100 or 0.01,
                           description="score threshold", readout_format="+.2f",
                           style={"description_width": "initial"}, continuous_update=False)

    def update(threshold: float) -> None:
        import matplotlib.pyplot as plt

        fig, summary = score_threshold_view(scores, passed, threshold)
        _show(fig, score_threshold_text(summary))
        plt.close(fig)

    return w.VBox([slider, w.interactive_output(update, {"threshold": slider})])


# ---------------------------------------------------------------------------------------------
# Lesson 9: recorded ratios after k epochs, read against a clip band of any width
# ---------------------------------------------------------------------------------------------


def ratio_band_view(ratios_by_epoch, epoch: int, cliprange: float):
    """The recorded token ratios after ``epoch`` epochs on one batch (``ratios_by_epoch[epoch]``,
    1-D, e.g. ``sweep.ratios(epoch)``) against the band [1 - ε, 1 + ε] for ε = ``cliprange``.

    outside = share of tokens with |r - 1| > ε (whatever the advantage's sign: the clip fraction is
    the part of it whose advantage points outwards); ``effective_sample_fraction`` as in
    ``policy_lag``. Returns ``(figure, summary)``, the figure from ``policy_lag.plot_ratio_histograms``.
    """
    from course_utils.lesson_aids import policy_lag

    if not 0 < cliprange < 1:
        raise ValueError(f"cliprange must be in (0, 1), got {cliprange}: the band [1 - ε, 1 + ε] is drawn on a log "
                         "axis, which cannot reach 0 (the slider runs from 0.05 to 0.5)")
    if epoch not in ratios_by_epoch:
        raise ValueError(f"no ratios recorded after {epoch} epoch(s); recorded: {sorted(ratios_by_epoch)}")
    r = torch.as_tensor(ratios_by_epoch[epoch], dtype=torch.float64).flatten()
    if r.numel() == 0 or not bool(torch.isfinite(r).all()) or not bool((r > 0).all()):
        raise ValueError(f"the ratios after {epoch} epoch(s) must be a non-empty list of finite numbers > 0")
    summary = {"epoch": int(epoch), "cliprange": float(cliprange), "n": int(r.numel()),
               "outside": float(((r - 1).abs() > cliprange).double().mean()),
               "ratio_min": float(r.min()), "ratio_max": float(r.max()),
               "effective_sample_fraction": policy_lag.effective_sample_fraction(r)}
    return policy_lag.plot_ratio_histograms({epoch: r}, cliprange), summary


def ratio_band_text(summary: dict) -> str:
    return (f"after {summary['epoch']} epoch(s), ε = {summary['cliprange']:.2f}: {summary['outside']:.0%} of "
            f"{summary['n']} tokens outside the band; ratios {summary['ratio_min']:.3f} to {summary['ratio_max']:.2f}; "
            f"effective sample fraction {summary['effective_sample_fraction']:.2f}")


def ratio_band_widget(ratios_by_epoch, cliprange: float = 0.2):
    """Sliders "epochs" (the recorded ones) and "cliprange" over ``ratio_band_view``."""
    w = _ipywidgets()
    epochs = sorted(int(k) for k in ratios_by_epoch)
    epoch_slider = w.SelectionSlider(options=epochs, value=epochs[0], description="epochs", continuous_update=False)
    clip_slider = w.FloatSlider(value=cliprange, min=0.05, max=0.5, step=0.01, description="cliprange",
                                readout_format=".2f", continuous_update=False)

    def update(epoch: int, cliprange: float) -> None:
        import matplotlib.pyplot as plt

        fig, summary = ratio_band_view(ratios_by_epoch, epoch, cliprange)
        _show(fig, ratio_band_text(summary))
        plt.close(fig)

    output = w.interactive_output(update, {"epoch": epoch_slider, "cliprange": clip_slider})
    return w.VBox([w.HBox([epoch_slider, clip_slider]), output])


# ---------------------------------------------------------------------------------------------
# Lesson 10: local against global whitening as the processes and the batch change
# ---------------------------------------------------------------------------------------------


def whitening_view(raw_advantages: torch.Tensor, mask: torch.Tensor, processes: int, rows: int | None = None):
    """The first ``rows`` rows of a batch's raw advantages ``[B, T]`` (mask ``[B, T]``) split into
    ``processes`` contiguous blocks, whitened two ways with ``ppo_math.masked_whiten``: over the
    whole batch (global: what an all-reduce gives, and one process) and each block on its own
    (local: TRL's PPOTrainer on each process).

    Returns ``(figure, summary)``: the figure plots local against global per real token, one colour
    per block; ``summary`` has the largest difference and each block's mean raw advantage.
    """
    from matplotlib.figure import Figure

    rows = raw_advantages.shape[0] if rows is None else int(rows)
    if not 1 <= processes <= rows <= raw_advantages.shape[0]:
        raise ValueError(f"need 1 <= processes ({processes}) <= rows ({rows}) <= {raw_advantages.shape[0]}")
    x, m = raw_advantages[:rows].double(), mask[:rows].bool()
    bad = int((~torch.isfinite(x) & m).sum())
    if bad:
        raise ValueError(f"raw_advantages hold {bad} value{'s' if bad > 1 else ''} that {'are' if bad > 1 else 'is'} "
                         f"NaN or inf on the real tokens of the first {rows} rows: whitening would spread it to every "
                         "token, so there is nothing to compare")
    whole = ppo_math.masked_whiten(x, m, distributed=False)
    bounds = [round(i * rows / processes) for i in range(processes + 1)]
    blocks = list(zip(bounds[:-1], bounds[1:]))
    local = torch.cat([ppo_math.masked_whiten(x[a:b], m[a:b], distributed=False) for a, b in blocks])
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.subplots()
    for i, (a, b) in enumerate(blocks):
        ax.plot(whole[a:b][m[a:b]].numpy(), local[a:b][m[a:b]].numpy(), "o", ms=3, alpha=0.7, color=f"C{i}",
                label=f"process {i} (rows {a}-{b - 1})", gid=f"process {i}")
    ax.axline((0, 0), slope=1, color="k", lw=0.8, ls="--")
    ax.set(xlabel="global whitening (one process, or all-reduced)", ylabel="local whitening (per process)",
           title=f"{rows} rows on {processes} process(es)")
    ax.grid(alpha=0.3)
    if processes <= 8:
        ax.legend(fontsize=7)
    summary = {"processes": processes, "rows": rows, "largest_difference": float((local - whole)[m].abs().max()),
               "block_raw_means": [float(ppo_math.masked_mean(x[a:b], m[a:b])) for a, b in blocks]}
    return fig, summary


def whitening_text(summary: dict) -> str:
    means = ", ".join(f"{v:+.3f}" for v in summary["block_raw_means"])
    return (f"{summary['rows']} rows on {summary['processes']} process(es): largest |local - global| "
            f"{summary['largest_difference']:.3f}; mean raw advantage per process {means}")


def whitening_widget(raw_advantages: torch.Tensor, mask: torch.Tensor, processes: int = 2):
    """Sliders "processes" and "rows" (the batch size) over ``whitening_view``."""
    w = _ipywidgets()
    total = raw_advantages.shape[0]
    proc_slider = w.IntSlider(value=processes, min=1, max=total, description="processes", continuous_update=False)
    rows_slider = w.IntSlider(value=total, min=1, max=total, description="rows (batch)", continuous_update=False)

    def update(processes: int, rows: int) -> None:
        import matplotlib.pyplot as plt

        rows = max(rows, processes)  # at least one row per process
        fig, summary = whitening_view(raw_advantages, mask, processes, rows)
        _show(fig, whitening_text(summary))
        plt.close(fig)

    output = w.interactive_output(update, {"processes": proc_slider, "rows": rows_slider})
    return w.VBox([w.HBox([proc_slider, rows_slider]), output])


# ---------------------------------------------------------------------------------------------
# Lesson 11: who wins as demonstrations cover fewer task families (measured points only)
# ---------------------------------------------------------------------------------------------


def coverage_widget(points):
    """A slider over the measured coverage points of ``capstone.demo_coverage_points``: the plot
    with the chosen point shaded, and that point's verdict. Only measured points can be chosen."""
    from course_utils.lesson_aids import capstone

    w = _ipywidgets()
    by_coverage = {p["coverage"]: p for p in points}
    slider = w.SelectionSlider(options=[(f"{c}%", c) for c in by_coverage], value=points[-1]["coverage"],
                               description="families with demonstrations", style={"description_width": "initial"},
                               continuous_update=False)

    def update(coverage: int) -> None:
        import matplotlib.pyplot as plt

        fig = capstone.plot_coverage(points, highlight=coverage)
        _show(fig, capstone.verdict(by_coverage[coverage]))
        plt.close(fig)

    return w.VBox([slider, w.interactive_output(update, {"coverage": slider})])
