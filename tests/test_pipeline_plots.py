"""The pipeline's figures: over-optimisation points read from a run's logs, and the arms chart."""

from __future__ import annotations

import math

import pytest

from course_utils.lesson_aids import pipeline_plots as pp


def test_each_evaluation_gets_the_kl_of_the_rollout_its_policy_sampled_next():
    history = [{"update": u, "kl_per_sequence": kl} for u, kl in ((1, 0.0), (2, 0.5), (3, 4.0), (4, -0.3))]
    evals = [{"update": 0, "mean_reward": 0.1, "pass_rate": 0.4},
             {"update": 2, "mean_reward": 0.7, "pass_rate": 0.5},
             {"update": 3, "mean_reward": 0.9, "pass_rate": 0.2},
             {"update": 4, "mean_reward": 1.2, "pass_rate": 0.1}]
    points = pp.overoptimisation_points(evals, history, window=1)
    assert points["update"] == [0, 2, 3, 4]
    # update 0: the reference itself; after 2 updates the next rollout (update 3) had KL 4.0;
    # after 3 it is update 4's -0.3, floored at 0; the last evaluation takes the last rollout.
    assert points["sqrt_kl"] == pytest.approx([0.0, 2.0, 0.0, 0.0])
    assert points["proxy"] == pytest.approx([0.1, 0.7, 0.9, 1.2])
    assert points["gold"] == pytest.approx([40.0, 50.0, 20.0, 10.0])
    # A window of 3 averages the rollouts u, u + 1, u + 2 around u + 1 (those that exist).
    wide = pp.overoptimisation_points(evals, history, window=3)
    assert wide["sqrt_kl"] == pytest.approx([0.0, math.sqrt((0.5 + 4.0 - 0.3) / 3), math.sqrt((4.0 - 0.3) / 2),
                                             math.sqrt((4.0 - 0.3) / 2)])


def _run_lines(ax, label):
    return [line for line in ax.lines if line.get_label() == label]


def test_the_overoptimisation_figure_draws_proxy_and_gold_per_run():
    curves = {"beta 0.05": {"sqrt_kl": [0, 1, 2], "proxy": [0.1, 0.5, 1.0], "gold": [46, 40, 30]},
              "beta 0.2": {"sqrt_kl": [0, 0.5, 0.8], "proxy": [0.1, 0.3, 0.4], "gold": [46, 48, 49]}}
    fig = pp.plot_overoptimisation(curves, start_gold=46)
    proxy_ax, gold_ax = fig.axes
    assert [line.get_label() for line in proxy_ax.lines if not line.get_label().startswith("_")] == list(curves)
    assert list(_run_lines(gold_ax, "beta 0.2")[0].get_ydata()) == [46, 48, 49]
    assert gold_ax.lines[-1].get_ydata()[0] == 46  # the SFT start, dashed


def test_the_overoptimisation_figure_gives_each_beta_one_colour_family_start_and_end_markers_and_a_mean():
    """Week 8's climax drew six seeds in six unrelated hues, with no start or end marker and the
    legend on the data: the two β could not be told apart."""
    curves = {f"β={b} seed {s}": {"sqrt_kl": [0, 0.5 + s / 10, 1 + s / 10, 0.9], "proxy": [0.9, 1.0, 1.2, 1.3],
                                  "gold": [46, 44 + s, 40, 45]}
              for b in ("0.05", "0.2") for s in range(3)}
    groups = {label: label.split(" seed")[0] for label in curves}
    fig = pp.plot_overoptimisation(curves, start_gold=46, groups=groups)
    proxy_ax, gold_ax = fig.axes
    for ax in (proxy_ax, gold_ax):
        run_colours = {label: _run_lines(ax, label)[0].get_color() for label in curves}
        blue = [c for label, c in run_colours.items() if label.startswith("β=0.05")]
        orange = [c for label, c in run_colours.items() if label.startswith("β=0.2")]
        assert all(c[2] > c[0] for c in blue) and all(c[0] > c[2] for c in orange)  # Blues, Oranges
        assert len(set(blue)) == 3 and len(set(orange)) == 3  # the seeds are shades of their family
        hollow = [line for line in ax.lines if line.get_marker() == "o" and line.get_markerfacecolor() == "white"]
        squares = [line for line in ax.lines if line.get_marker() == "s"]
        assert len(hollow) == len(squares) == len(curves)
        assert sorted(float(line.get_xdata()[0]) for line in squares) == sorted(
            c["sqrt_kl"][-1] for c in curves.values())
        means = [line for line in ax.lines if line.get_label().endswith("mean of its runs")]
        assert [line.get_label() for line in means] == ["β=0.05: mean of its runs", "β=0.2: mean of its runs"]
        assert all(line.get_linewidth() > 2 for line in means)
    # the binned mean of the three β=0.05 seeds at √KL = 0 is their common start
    mean_gold = [line for line in gold_ax.lines if line.get_label() == "β=0.05: mean of its runs"][0]
    assert mean_gold.get_xdata()[0] == 0 and mean_gold.get_ydata()[0] == 46
    # one legend for the figure, under the panels; none on the data
    assert proxy_ax.get_legend() is None and gold_ax.get_legend() is None and len(fig.legends) == 1
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "first evaluation (update 0)" in texts and "last evaluation" in texts


def test_the_mean_line_is_a_mean_of_runs_and_stops_where_only_one_run_goes():
    """Issue 49 (week 8): the β = 0.05 mean ended on a bin that held one seed's two mid-run
    evaluations, so a single seed's excursion read as the mean of three."""
    curves = {"b seed 0": {"sqrt_kl": [0, 1.0, 1.05, 1.1], "proxy": [0.9, 1.0, 1.0, 1.0], "gold": [46, 50, 50, 50]},
              "b seed 1": {"sqrt_kl": [0, 1.0], "proxy": [0.9, 1.2], "gold": [46, 40]},
              "b seed 2": {"sqrt_kl": [0, 1.0, 2.9, 3.0], "proxy": [0.9, 1.1, 2.0, 2.0], "gold": [46, 45, 20, 10]}}
    fig = pp.plot_overoptimisation(curves, groups={label: "b" for label in curves}, mean_bins=3)
    gold_ax = fig.axes[1]
    mean = [line for line in gold_ax.lines if line.get_label() == "b: mean of its runs"][0]
    # the last bin (√KL 2-3) holds seed 2 alone: not drawn
    assert len(mean.get_xdata()) == 2 and max(mean.get_xdata()) < 2
    # the middle bin: seed 0's three points count once, as their mean 50, next to 40 and 45
    assert mean.get_ydata()[1] == pytest.approx((50 + 40 + 45) / 3)


def test_the_arms_chart_draws_the_mean_and_standard_error_per_arm_and_set():
    arms = {"sft": {"test": [46, 45, 46], "test_unseen": [27, 28, 29]}, "sft_ppo": {"test": [58, 55, 52]}}
    fig = pp.plot_arms(arms, ceiling={"test": [63, 64, 62]})
    ax = fig.axes[0]
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == pytest.approx(sorted([(46 + 45 + 46) / 3, 55.0, 28.0]))
    se = math.sqrt(((58 - 55) ** 2 + 0 + (52 - 55) ** 2) / 2) / math.sqrt(3)
    whiskers = [seg for coll in ax.collections for seg in coll.get_segments()]
    assert any(abs((seg[1][1] - seg[0][1]) / 2 - se) < 1e-9 for seg in whiskers)
    assert any(line.get_linestyle() == "--" and line.get_ydata()[0] == pytest.approx(63) for line in ax.lines)


def test_the_pass_at_k_chart_puts_both_rates_of_every_family_on_its_row():
    per_family = {"json_object": {"pass_at_1": 0.6, "pass_at_k": 1.0}, "result_sum": {"pass_at_1": 0.0, "pass_at_k": 0.0}}
    ax = pp.plot_pass_at_k(per_family, 16).axes[0]
    assert sorted(p.get_width() for p in ax.patches) == pytest.approx([0, 0, 60, 100])
    assert [t.get_text() for t in ax.get_yticklabels()] == list(per_family)
