"""Lesson 11's readings of the measured arms: paired differences, the pass@k shift, the coverage
points and their verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from course_utils.lesson_aids import capstone


def test_paired_difference_is_the_mean_and_standard_error_of_the_per_seed_differences():
    a, b = [58, 55, 52], [74, 76, 73]
    diffs = [x - y for x, y in zip(a, b)]  # -16, -21, -21
    mean = sum(diffs) / 3
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
    assert capstone.paired_difference(a, b) == pytest.approx((mean, se))
    with pytest.raises(ValueError, match="same seeds"):
        capstone.paired_difference([1, 2], [1, 2, 3])


def test_pass_at_k_shift_reads_the_room_ppo_used():
    per_family = {"sft": {"a": {"pass_at_1": 20.0, "pass_at_16": 60.0}, "b": {"pass_at_1": 0.0, "pass_at_16": 0.0}},
                  "sft_ppo_checker": {"a": {"pass_at_1": 50.0}, "b": {"pass_at_1": 0.0}}}
    shift = capstone.pass_at_k_shift(per_family)
    assert shift["a"]["room_used"] == pytest.approx(0.75)  # 30 of the 40 points between pass@1 and pass@16
    assert shift["b"]["room_used"] is None  # no room: pass@16 was 0
    assert isinstance(capstone.plot_pass_at_k_shift(shift), Figure)


def measurements(with_design: bool) -> dict:
    arms = {"base": {"test": [5.0]}, "ppo_instruct": {"test": [20.0, 15.0, 13.0]},
            "sft_full": {"test": [74.0, 76.0, 73.0]}, "sft_ppo_checker": {"test": [58.0, 55.0, 52.0]}}
    designs = {"g_no_demonstrations": {"withheld": ["x", "y"], "arms": {
        "sft_full_nodemo": {"test": [60.0, 62.0, 61.0], "test_nodemo": [0.0, 5.0, 0.0]},
        "sft_ppo_checker_nodemo": {"test": [55.0, 57.0, 56.0], "test_nodemo": [40.0, 50.0, 45.0]}}}}
    return {"pipeline": {"arms": arms}, "designs": designs if with_design else {}}


def test_coverage_points_and_their_verdicts():
    points = capstone.demo_coverage_points(measurements(True))
    assert [p["coverage"] for p in points] == [0, 80, 100]
    assert points[1]["sft"] == [60.0, 62.0, 61.0]  # "all": every test prompt
    verdicts = [capstone.verdict(p) for p in points]
    assert "PPO ahead" in verdicts[0] and "unpaired, one run against 3 seeds" in verdicts[0]
    assert "SFT ahead" in verdicts[1] and "paired by seed" in verdicts[1]  # -5.0 +- 0.0 paired
    assert "SFT ahead" in verdicts[2] and "PPO ahead in 0 of 3 seeds" in verdicts[2]
    # At 0% no demonstration exists: the "SFT" there is the untrained instruct model, and it is named so.
    assert verdicts[0].startswith(f"0% of the families with demonstrations — {capstone.NO_SFT_NAME} ")
    assert " — SFT " in verdicts[2] and capstone.NO_SFT_NAME not in verdicts[2]
    # ... the difference there is against no training, and its single run shows no standard error
    assert "PPO − no training = +11.0" in verdicts[0] and "instruct model 5 (one run)," in verdicts[0]
    assert "PPO − SFT = " in verdicts[2] and "74.3 ± 0.9" in verdicts[2]
    uncovered = capstone.demo_coverage_points(measurements(True), measure="uncovered")
    assert [p["coverage"] for p in uncovered] == [0, 80]
    assert "PPO ahead" in capstone.verdict(uncovered[1])
    assert [p["coverage"] for p in capstone.demo_coverage_points(measurements(False))] == [0, 100]
    with pytest.raises(ValueError, match="'all' or 'uncovered'"):
        capstone.demo_coverage_points(measurements(True), measure="some")
    # With the filtered-SFT control measured, the 80% point reads PPO against it as well.
    with_filter = measurements(True)
    with_filter["designs"]["g_no_demonstrations"]["arms"]["sft_filtered_nodemo"] = {
        "test": [70.0, 68.0, 71.0], "test_nodemo": [95.0, 95.0, 100.0]}
    point = capstone.demo_coverage_points(with_filter, measure="uncovered")[1]
    assert point["sft_filtered"] == [95.0, 95.0, 100.0]
    text = capstone.verdict(point)
    assert "PPO ahead" in text and "PPO − filtered SFT = -51.7 ± 3.3" in text and text.endswith("filtered SFT ahead.")
    assert "sft_filtered" not in points[1] and isinstance(capstone.plot_coverage([point], highlight=80), Figure)
    fig = capstone.plot_coverage(points, highlight=80)
    assert isinstance(fig, Figure)
    assert not [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "-"]  # measured points, not a curve


def test_a_difference_within_two_standard_errors_names_no_winner():
    point = {"coverage": 50, "sft": [50.0, 40.0, 60.0], "ppo": [52.0, 45.0, 58.0], "measured_on": "x"}
    assert "level within noise" in capstone.verdict(point)


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)])
def test_t_quantiles_match_the_table(df, expected):
    assert capstone.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)
    assert capstone.t_quantile(0.025, df) == pytest.approx(-expected, abs=2e-4)


def test_beyond_two_standard_errors_is_not_ahead_with_three_seeds():
    """The old rule called a winner beyond 2 SE; with 2 degrees of freedom the 95 % cut-off is 4.30 SE."""
    a, b = [54.0, 57.0, 53.0], [50.0, 50.0, 50.0]  # +4, +7, +3: mean 4.67, SE 1.20, 3.9 SE from 0
    result = capstone.compare(a, b)
    assert result.difference == pytest.approx(14 / 3) and result.difference > 2 * result.se
    assert result.low < 0 < result.high and result.winner("A", "B") is None
    assert result.verdict("PPO", "SFT") == "level within noise"
    assert (result.positive, result.negative, result.ties) == (3, 0, 0)
    assert result.high - result.difference == pytest.approx(4.3027 * result.se, rel=1e-4)
    assert "A ahead in 3 of 3 seeds" in result.sentence() and "95% interval [" in result.sentence()
    wide = capstone.compare([60.0, 62.0, 61.0, 63.0, 64.0], [50.0, 51.0, 52.0, 50.0, 53.0])
    assert wide.verdict() == "A ahead" and wide.df == 4
    assert capstone.compare([50.0, 51.0, 52.0, 50.0, 53.0], [60.0, 62.0, 61.0, 63.0, 64.0]).verdict() == "B ahead"


def test_unpaired_arms_use_welch_and_single_runs_give_no_interval():
    result = capstone.compare([20.0, 15.0, 13.0], [5.0])
    assert not result.paired and result.df == pytest.approx(2.0) and "one run against 3 seeds" in result.sentence()
    # one run on one side: Welch reduces to a one-sample t on the seeds against that run as a constant
    seeds = np.array([20.0, 15.0, 13.0])
    one_sample_half = 4.3027 * seeds.std(ddof=1) / np.sqrt(3)
    assert result.high - result.difference == pytest.approx(one_sample_half, rel=1e-4)
    assert "unpaired (Welch)" in capstone.compare([1.0, 2.0, 4.0], [3.0, 3.5]).sentence()
    assert capstone.compare([20.0], [5.0]).verdict() == "no interval (a single run on each side)"
    # Welch-Satterthwaite against a direct computation
    a, b = [1.0, 2.0, 4.0, 7.0], [3.0, 3.5]
    va, vb = capstone.mean_se(a)[1] ** 2, capstone.mean_se(b)[1] ** 2
    assert capstone.compare(a, b).df == pytest.approx((va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 1))


def test_pooled_mcnemar_reads_the_prompts_both_arms_graded():
    a = [[True, True, False], [True, True, True]]
    b = [[False, True, False], [False, False, True]]
    result = capstone.pooled_mcnemar(a, b)
    assert (result["gained"], result["lost"], result["n"]) == (3, 0, 6) and result["p_value"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="same seeds"):
        capstone.pooled_mcnemar(a, b[:1])


def test_the_committed_measurements_load_and_give_the_two_end_points():
    points = capstone.demo_coverage_points(capstone.load_measurements())
    assert points[0]["coverage"] == 0 and points[-1]["coverage"] == 100
    assert len(points[-1]["sft"]) == len(points[-1]["ppo"]) == 3


def test_design_arms_plot_and_the_coverage_slider_offer_only_measured_points():
    from course_utils.lesson_aids import widgets

    design = measurements(True)["designs"]["g_no_demonstrations"]
    for arm in design["arms"].values():
        arm.update(test_unseen_nodemo=[1.0, 2.0, 3.0], test_demo=[70.0, 71.0, 72.0])
    fig = capstone.plot_design_arms(design, {"sft_full_nodemo": "SFT", "sft_ppo_checker_nodemo": "PPO"})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["SFT", "PPO"]
    points = capstone.demo_coverage_points(measurements(True))
    box = widgets.coverage_widget(points)
    slider = box.children[0]
    assert [value for _, value in slider.options] == [0, 80, 100] and slider.value == 100


def test_noise_levels_regroup_design_f_by_arm_kind_and_rate():
    design = {"arms": {"sft_full@0.75": {"test": [16, 26, 25], "seeds": [0, 1, 2]},
                       "sft_full@0.25": {"test": [60, 62]},
                       "sft_ppo_checker@0.75": {"test": [45, 49], "test_unseen": [42, 40]},
                       "sft_warm_up@0.75": {"test_unseen": [6, 16]}}}
    levels = capstone.noise_levels(design)
    assert levels == {"sft_full": {0.25: [60, 62], 0.75: [16, 26, 25]}, "sft_ppo_checker": {0.75: [45, 49]}}
    assert list(levels["sft_full"]) == [0.25, 0.75]  # sorted by rate, whatever order the arms were added in
    assert capstone.noise_levels(design, "test_unseen")["sft_warm_up"] == {0.75: [6, 16]}
    clean = {"sft_full": {"test": [74, 75, 74]}, "sft": {"test": [45, 46, 46]}, "sft_ppo_checker": {"test": [55, 56]},
             "sft_ppo_learned_rm": {"test": [41, 29]}, "sft_ppo_learned_rm_kl0.2": {"test": [51, 50]}}
    with_clean = capstone.noise_levels(design, clean_arms=clean)
    assert with_clean["sft_full"] == {0.0: [74, 75, 74], 0.25: [60, 62], 0.75: [16, 26, 25]}
    assert with_clean["sft_filtered"] == {0.0: [74, 75, 74]}  # nothing to filter at noise 0: the same arm
    assert with_clean["sft_warm_up"] == {0.0: [45, 46, 46]}
    assert with_clean["sft_ppo_learned_rm"] == {0.0: [51, 50]}  # the beta = 0.2 arm, as design (f) ran it


def test_noise_crossover_draws_one_line_per_arm_at_its_measured_rates():
    levels = {"sft_full": {0.25: [60, 62], 0.75: [16, 26]}, "sft_ppo_checker": {0.75: [45, 49]}}
    fig = capstone.plot_noise_crossover(levels)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [capstone.NOISY_ARM_LABELS["sft_full"], capstone.NOISY_ARM_LABELS["sft_ppo_checker"]]
    assert [t for t in ax.get_xticks()] == [0.25, 0.75]
    joined = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert sorted(round(y, 6) for line in joined for y in line.get_ydata()) == [21.0, 47.0, 61.0]
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "-"]  # no solid line suggests data between rates


def test_retention_plot_puts_each_seed_at_its_gain_and_change_with_ppos_path_and_the_half_loss_line():
    import numpy as np

    design = {"arms": {
        "sft_continue_retention": {"gain_trained": [40, 44, 42], "change_others": [-20, -24, -22]},
        "sft_ppo_checker_retention": {"gain_trained": [30, 36, 33], "change_others": [-2, 0, -4],
                                      "curves": [[{"gain_trained": 0, "change_others": 0},
                                                  {"gain_trained": 30, "change_others": -2}]]}}}
    ax = capstone.plot_retention(design).axes[0]
    dots = {tuple(line.get_xdata()): tuple(line.get_ydata()) for line in ax.lines if line.get_marker() == "o"}
    assert dots == {(40, 44, 42): (-20, -24, -22), (30, 36, 33): (-2, 0, -4)}
    paths = [line for line in ax.lines if line.get_alpha() == 0.4]  # the thin path lines
    assert [(tuple(p.get_xdata()), tuple(p.get_ydata())) for p in paths] == [((0, 30), (0, -2))]
    half = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(half) == 1 and np.allclose(half[0].get_ydata(), -11.0)  # half of SFT's mean loss of 22 points
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.endswith("gain +42, change -22") for label in labels) and any(label.endswith("gain +33, change -2") for label in labels)


def test_the_chance_pass_at_k():
    assert capstone.chance_pass_at_k(0.5, 16) == pytest.approx(1 - 0.5 ** 16)
    assert capstone.chance_pass_at_k(0.25, 1) == pytest.approx(0.25) and capstone.chance_pass_at_k(0.0, 16) == 0.0
    with pytest.raises(ValueError):
        capstone.chance_pass_at_k(1.5, 4)


def test_missing_noisy_arms_names_the_arms_a_level_still_lacks():
    design = {"arms": {"sft_full@0.75": [], "sft_filtered@0.75": [], "sft_ppo_checker@0.75": [],
                       "sft_ppo_learned_rm@0.75": [], "sft_warm_up@0.75": [], "sft_full@0.5": []}}
    missing = capstone.missing_noisy_arms(design)
    assert missing == {0.25: list(capstone.NOISY_DESIGN_ARMS),
                       0.5: ["sft_filtered", "sft_ppo_checker", "sft_ppo_learned_rm"]}
    assert 0.75 not in missing  # every arm there
    assert capstone.missing_noisy_arms({"arms": {}}) == {rate: list(capstone.NOISY_DESIGN_ARMS)
                                                         for rate in capstone.NOISE_RATES}
    assert capstone.missing_noisy_arms(design, kinds=["sft_full"]) == {0.25: ["sft_full"]}


def test_noise_crossing_brackets_the_first_level_where_the_rising_arm_catches_up():
    levels = {"sft_ppo_checker": {0.0: [55], 0.25: [50, 52], 0.5: [48], 0.75: [49]},
              "sft_full": {0.0: [75], 0.25: [61], 0.5: [43], 0.75: [22]}}
    r0, r1, at = capstone.noise_crossing(levels)
    # gaps -20, -10, +5, +27: the first sign change is between 0.25 and 0.5, two thirds of the way from 0.25
    assert (r0, r1) == (0.25, 0.5)
    assert at == pytest.approx(0.25 + 0.25 * 10 / 15)
    # a rate only one arm has is skipped; an arm that never catches up, or leads from the start, has no crossing
    levels["sft_full"].pop(0.5)
    assert capstone.noise_crossing(levels)[:2] == (0.25, 0.75)
    assert capstone.noise_crossing(levels, rising="sft_full", falling="sft_ppo_checker") is None
    assert capstone.noise_crossing({"sft_ppo_checker": {0.0: [80]}, "sft_full": {0.0: [70]}}) is None


def test_the_sign_test_counts_lopsided_splits_both_ways():
    assert capstone.sign_test(9, 0) == pytest.approx(2 / 2 ** 9)  # what 9 independent seeds would give
    assert capstone.sign_test(0, 9) == capstone.sign_test(9, 0)
    assert capstone.sign_test(3, 0) == pytest.approx(0.25)  # one level's three seeds can never reach 5%
    assert capstone.sign_test(11, 1) == pytest.approx(2 * 13 / 2 ** 12)  # C(12,0) + C(12,1) = 13
    assert capstone.sign_test(2, 2) == 1.0 and capstone.sign_test(0, 0) == 1.0
    with pytest.raises(ValueError, match=">= 0"):
        capstone.sign_test(-1, 3)


def test_pooled_over_levels_takes_the_seed_as_the_unit():
    """Two levels of three seeds: the per-seed means of the differences go through the paired interval
    (n = 3 seeds, not 6 pairs); the (level, seed) pairs are only counted."""
    pooled = capstone.pooled_over_levels([([50.0, 52.0, 49.0], [60.0, 61.0, 62.0]),   # behind in 3 of 3
                                          ([50.0, 52.0, 49.0], [50.0, 61.0, 40.0])])  # level, behind, ahead
    assert (pooled["ahead"], pooled["behind"], pooled["tied"], pooled["pairs"]) == (1, 4, 1, 6)
    assert (pooled["levels"], pooled["seeds"]) == (2, 3)
    by_seed = pooled["by_seed"]
    per_seed = [(-10 + 0) / 2, (-9 - 9) / 2, (-13 + 9) / 2]  # a plain loop over the seeds
    mean = sum(per_seed) / 3
    sd = (sum((d - mean) ** 2 for d in per_seed) / 2) ** 0.5
    assert by_seed.paired and by_seed.n == 3 and by_seed.df == 2
    assert by_seed.difference == pytest.approx(mean) and by_seed.se == pytest.approx(sd / 3 ** 0.5)
    assert (by_seed.positive, by_seed.negative) == (0, 3)
    assert by_seed.high == pytest.approx(mean + 4.302653 * sd / 3 ** 0.5, rel=1e-5)
    with pytest.raises(ValueError, match="same seeds"):
        capstone.pooled_over_levels([([1.0, 2.0, 3.0], [1.0])])
    with pytest.raises(ValueError, match="same seeds"):
        capstone.pooled_over_levels([([1.0, 2.0], [1.0, 2.0]), ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])])


def test_ppo_step_sizes_read_the_kl_penalty_and_the_clip_fraction_of_a_run(tmp_path):
    import json

    rows = [{"kl_per_sequence": 0.1 * u, "kl_coef": 0.02, "policy_clipfrac": 0.1 if u <= 2 else 0.04,
             "score": u / 10} for u in range(1, 7)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps = capstone.ppo_step_sizes(tmp_path, window=2)
    assert steps["updates"] == 6 and steps["kl_coef"] == 0.02
    assert steps["kl_per_response_last"] == pytest.approx(0.55) and steps["beta_kl_last"] == pytest.approx(0.011)
    assert steps["clipfrac_first"] == pytest.approx(0.1) and steps["clipfrac_last"] == pytest.approx(0.04)
    assert steps["score_first"] == pytest.approx(0.15) and steps["score_last"] == pytest.approx(0.55)
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="no updates"):
        capstone.ppo_step_sizes(tmp_path)


def test_the_committed_checker_runs_pay_little_for_their_kl():
    """Lesson 11 says the KL penalty does not bind for PPO on the checker (beta = 0.02): at the end of
    every committed run it costs well under a tenth of a passing answer's reward of 1."""
    runs = capstone.RUNS / "designs" / "learning"
    for folder in sorted(runs.glob("f_sft_ppo_checker_noise*-seed*")) + sorted(runs.glob("sft_ppo_checker_nodemo-seed*")):
        steps = capstone.ppo_step_sizes(folder)
        assert steps["kl_coef"] == 0.02 and steps["beta_kl_last"] < 0.1, (folder.name, steps)


def test_ppo_step_sizes_skip_the_updates_that_took_no_step(tmp_path):
    """Reinforce-Rej drops every group whose answers all pass or all fail: such an update logs no clip
    fraction or entropy, and the means are over the updates that did step."""
    import json

    rows = [{"kl_per_sequence": 1.0, "kl_coef": 0.02, "policy_clipfrac": None, "entropy": None, "score": 1.0},
            {"kl_per_sequence": 2.0, "kl_coef": 0.02, "policy_clipfrac": 0.1, "entropy": 0.5, "score": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps = capstone.ppo_step_sizes(tmp_path, window=1)
    assert steps["clipfrac_first"] is None and steps["entropy_first"] is None
    assert steps["clipfrac_last"] == pytest.approx(0.1) and steps["entropy_last"] == pytest.approx(0.5)
    assert steps["beta_kl_first"] == pytest.approx(0.02) and steps["score_first"] == 1.0


def design1(seeds: int) -> dict:
    """A design-1 record in when_ppo_wins.json's shape: per seed a start and arms A and B."""
    def points(offset, values):
        return [{"minutes": 10 + m + offset, "test": v, "test_unseen": v / 2, **({"final": True} if m == 30 else {})}
                for m, v in zip((5, 15, 30), values)]
    return {"seeds": {str(s): {"start": {"points": [{"minutes": 11.1, "test": 60.0 + s, "test_unseen": 40.0,
                                                      "final": True}]},
                               "arms": {"B": {"points": points(0.2 * s, (62.0, 64.0, 66.0 + 2 * s))},
                                        "A": {"points": points(0.0, (70.0, 72.0, 73.0 - s))}}}
                      for s in range(seeds)}}


def test_design1_curves_start_every_arm_at_the_shared_start():
    curves = capstone.design1_curves(design1(2))
    assert list(curves) == ["A", "B"]  # arms in order, whatever order the record holds them in
    assert curves["A"][0] == [(10.0, 60.0), (15.0, 70.0), (25.0, 72.0), (40.0, 73.0)]
    assert curves["B"][1][0] == (10.0, 61.0) and curves["B"][1][-1] == pytest.approx((40.2, 68.0))
    assert capstone.design1_curves(design1(1), "test_unseen")["A"][0][1] == (15.0, 35.0)


def test_learning_curves_draw_an_interval_band_only_when_more_than_one_seed_ran():
    from matplotlib.collections import PolyCollection

    one = capstone.plot_learning_curves({"test": capstone.design1_curves(design1(1))})
    ax = one.axes[0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    thick = [line for line in ax.lines if line.get_linewidth() == 2]
    assert len(thick) == 2 and "one seed: no interval" in one.texts[0].get_text()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "A: filtered SFT continued (1 seed)", "B: PPO on the checker (1 seed)"]

    three = capstone.plot_learning_curves({"test": capstone.design1_curves(design1(3)),
                                           "unseen": capstone.design1_curves(design1(3), "test_unseen")})
    assert len(three.axes) == 2
    ax = three.axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # one per arm
    # A's end values over three seeds are 73, 72, 71: mean 72, SE 1/sqrt(3), band 72 ± 4.303 / sqrt(3)
    top = bands[0].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(72 + capstone.t_quantile(0.975, 2) / math.sqrt(3), abs=1e-6)
    assert "95% t-intervals" in three.texts[0].get_text()
    thin = [line for line in ax.lines if line.get_linewidth() == 0.8]
    assert len(thin) == 6  # every seed of both arms


def test_the_coverage_plot_names_the_other_recipe_at_zero_and_joins_only_like_points():
    import numpy as np

    points = capstone.demo_coverage_points(measurements(True))
    assert points[0]["ppo_name"] == capstone.OTHER_PPO_NAME and "ppo_name" not in points[1]
    ax = capstone.plot_coverage(points).axes[0]
    joined = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert all(0 not in np.round(line.get_xdata()) for line in joined)  # the 0% point is joined to nothing
    notes = [t.get_text() for t in ax.texts]
    assert capstone.NO_SFT_NAME in notes and capstone.OTHER_PPO_NAME in notes


def test_the_retention_legend_sits_under_the_axes():
    """The cold read found a seed's end point hidden under the legend: it now sits below the plot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    design = {"arms": {"sft_continue_retention": {"gain_trained": [40, 44, 42], "change_others": [-20, -24, -22]}}}
    fig = capstone.plot_retention(design)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(canvas.get_renderer())
    assert legend.y1 <= ax.get_window_extent(canvas.get_renderer()).y0


def test_the_crossover_and_coverage_legends_sit_under_the_axes():
    """A cold read found the crossover legend over two error bars and the coverage labels over its note."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    levels = {"sft_full": {0.25: [60, 62], 0.75: [16, 26]}, "sft_ppo_checker": {0.75: [45, 49]},
              "sft_filtered": {0.25: [90, 95], 0.75: [70, 80]}}
    for fig in (capstone.plot_noise_crossover(levels), capstone.plot_coverage(capstone.demo_coverage_points(measurements(True)))):
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.y1 <= ax.get_window_extent(renderer).y0 and legend.y0 >= 0
        assert not ax.texts or all(t.get_text() in (capstone.NO_SFT_NAME, capstone.OTHER_PPO_NAME) for t in ax.texts)


def test_interval_half_width_is_t_times_the_standard_error_and_sentences_never_print_minus_zero():
    assert capstone.interval_half_width([1.0, 2.0, 3.0]) == pytest.approx(capstone.t_quantile(0.975, 2) / math.sqrt(3))
    assert capstone.interval_half_width([5.0]) == 0.0
    tiny = capstone.compare([41.0, 40.0, 37.0], [41.0 + 1e-12, 40.0, 37.0])  # a difference that rounds to zero
    assert "= +0.0 ± " in tiny.sentence() and "-0.0" not in tiny.sentence()


def test_a_record_is_the_sentence_without_its_verdict():
    result = capstone.compare([54.0, 57.0, 53.0], [50.0, 50.0, 50.0])
    assert result.sentence("PPO", "SFT") == f"{result.record('PPO', 'SFT')}: level within noise"
    assert "ahead" not in result.record("PPO", "SFT").split(";")[0] and "within noise" not in result.record()
