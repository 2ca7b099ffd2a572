"""The run report's definitions say what the trainer logs (machinery.report.CURVES)."""

import torch

from course_utils import ppo_math
from course_utils.machinery import report

torch.set_num_threads(1)


def test_clip_fraction_definition_is_what_clipped_surrogate_logs():
    definition = dict((key, hint) for key, _, hint in report.CURVES)["policy_clipfrac"]
    # Four tokens, every ratio outside the band [0.8, 1.2]. Only the two whose advantage pushes them
    # further out are clipped; "the share of tokens whose ratio left the band" would say 1.0.
    ratio = torch.tensor([[1.5, 1.5, 0.5, 0.5]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0]], dtype=torch.float64)
    old = torch.zeros_like(ratio)
    _, clipfrac = ppo_math.clipped_surrogate(ratio.log(), old, advantages, torch.ones_like(ratio), 0.2)
    assert clipfrac.item() == 0.5
    assert "r > 1 + ε with A > 0" in definition and "r < 1 - ε with A < 0" in definition
    assert "not counted" in definition and "averaged over the update's steps" in definition


def test_the_curves_figure_shows_the_pass_rate_on_its_whole_scale_with_its_standard_error():
    """Week 7's cold read: a 42-49% axis made a one-point change on 100 prompts look like a swing, and
    nothing said which of the two blue lines was the smoothed one."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from course_utils.machinery.report import CURVES, plot_training_curves

    history = [{"update": u, **{key: 0.1 * u for key, _, _ in CURVES}} for u in range(1, 11)]
    evals = [{"update": u, "pass_rate": p, "answers": ["x"] * 100} for u, p in ((0, 0.46), (10, 0.47))]
    fig = plot_training_curves(history, evals)
    panel = fig.axes[len(CURVES)]
    assert panel.get_ylim() == (0.0, 100.0)
    bars = [c for c in panel.containers if hasattr(c, "has_yerr") and c.has_yerr]
    assert bars, "no error bars on the pass-rate panel"
    segments = bars[0].lines[2][0].get_segments()
    half_width = (segments[0][1][1] - segments[0][0][1]) / 2
    assert abs(half_width - 100 * (0.46 * 0.54 / 100) ** 0.5) < 1e-9
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["each update", "mean of the last 5"]
    plt.close(fig)
