"""course_utils.lesson_aids.diagnostics on hand-made answer lists and logs, with hand-counted expectations."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from course_utils.lesson_aids import diagnostics as dg  # noqa: E402
from course_utils.machinery import run_checks as rc  # noqa: E402

SUM_PROMPT = "Add {a} and {b}. Reply with one line: RESULT: <sum>"
PARITY_PROMPT = "Is {n} an even number? Answer Yes or No only."


def sum_prompts(pairs):
    return [SUM_PROMPT.format(a=a, b=b) for a, b in pairs]


# ---------------------------------------------------------------- placeholders and echoes


def test_placeholders_are_angle_bracket_slots_not_chat_tokens():
    assert rc.placeholders_in(SUM_PROMPT) == ["<sum>"]
    assert rc.placeholders_in("How many? Reply with one line: COUNT: <number>") == ["<number>"]
    assert rc.placeholders_in("<|im_start|>user\nHi<|im_end|>") == []
    assert rc.placeholders_in("Is 3 < 4 and 5 > 2?") == []


def test_placeholder_copy_rate_counts_only_prompts_with_a_slot():
    prompts = sum_prompts([(2, 3), (10, 20), (7, 8)]) + [PARITY_PROMPT.format(n=4)]
    answers = ["RESULT: <sum>", "RESULT: 30", "result: <SUM>", "Yes"]
    # Two of the three slot prompts were answered with the slot (case ignored); the parity
    # prompt has no slot and is not in the denominator.
    assert rc.placeholder_copy_rate(answers, prompts) == pytest.approx(2 / 3)
    assert math.isnan(rc.placeholder_copy_rate(["Yes"], [PARITY_PROMPT.format(n=4)]))


def test_prompt_echo_rate_ignores_case_and_spacing():
    prompts = [PARITY_PROMPT.format(n=4), PARITY_PROMPT.format(n=5)]
    answers = ["is 4 an even   number? answer yes or no only. Yes", "No"]
    assert rc.prompt_echo_rate(answers, prompts) == 0.5


def test_mismatched_lists_and_a_bare_string_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="one per answer"):
        rc.placeholder_copy_rate(["a", "b"], ["p"])
    with pytest.raises(TypeError, match="wrap it"):
        rc.prompt_echo_rate("No", ["p", "q"])


# ---------------------------------------------------------------- constant answers and length


def test_normalised_answers_treat_case_spacing_and_final_stop_alike():
    assert {rc.normalise_answer(a) for a in ("No.", "no", " NO! ", "No")} == {"no"}
    assert rc.normalise_answer("RESULT:  64") == "result: 64"


def test_constant_answers_per_group_by_hand():
    answers = ["No.", "No", "no", "Yes", "RESULT: 5", "RESULT: 7"]
    groups = ["parity"] * 4 + ["sum"] * 2
    stats = rc.constant_answers(answers, groups)
    assert stats["parity"] == {"answer": "no", "share": 0.75, "count": 3, "n": 4}
    assert stats["sum"]["share"] == 0.5 and stats["sum"]["answer"] == "result: 5"  # tie: first seen
    assert rc.constant_answers(["a", "b", "a"])["all"]["count"] == 2


def test_mean_length_strips_whitespace():
    assert rc.mean_length(["  ab ", "abcd", ""]) == pytest.approx((2 + 4 + 0) / 3)
    assert math.isnan(rc.mean_length([]))


# ---------------------------------------------------------------- the detector


def clean_batch():
    """Ten honest answers: five sums (some wrong, none copying) and five parity answers."""
    pairs = [(12, 30), (40, 41), (15, 16), (70, 20), (33, 34)]
    prompts = sum_prompts(pairs) + [PARITY_PROMPT.format(n=n) for n in (4, 7, 10, 13, 22)]
    answers = ["RESULT: 42", "RESULT: 81", "RESULT: 30", "RESULT: 90", "The sum is 67."] + \
              ["Yes", "No", "Yes", "No", "Yes"]
    targets = [f"RESULT: {a + b}" for a, b in pairs] + ["Yes", "No", "Yes", "No", "Yes"]
    groups = ["result_sum"] * 5 + ["yes_no_parity"] * 5
    return answers, prompts, groups, targets


def test_honest_answers_are_not_flagged():
    answers, prompts, groups, targets = clean_batch()
    report = rc.detect_reward_hacking(answers, prompts, groups, targets, baseline_answers=answers)
    assert not report.flagged, str(report)
    assert report.placeholder_copy_rate == 0.0 and report.prompt_echo_rate == 0.0
    assert "nothing flagged" in str(report)


def test_each_hack_is_flagged_by_its_own_check():
    answers, prompts, groups, targets = clean_batch()
    # The three hacks of the course's first CPU run, planted one at a time.
    copied = ["RESULT: <sum>"] * 3 + answers[3:]
    always_no = answers[:5] + ["No."] * 5
    report = rc.detect_reward_hacking(copied, prompts, groups, targets)
    assert report.checks_flagged == ["placeholder"]
    assert report.findings[0].value == pytest.approx(3 / 5)
    assert report.findings[0].examples == ["RESULT: <sum>"] * 3
    report = rc.detect_reward_hacking(always_no, prompts, groups, targets)
    assert report.checks_flagged == ["constant"]
    assert "yes_no_parity: 5 of 5" in str(report) and "60%" in str(report)  # targets: 3 Yes of 5
    short = [str(i) for i in range(10)]  # one character each, all different
    report = rc.detect_reward_hacking(short, prompts, groups, targets)
    assert report.checks_flagged == ["length"]  # 1 character < 2


def test_length_collapse_relative_to_the_answers_before_training():
    answers, prompts, groups, targets = clean_batch()
    before = [a + " because that is what the question asks for" for a in answers]
    report = rc.detect_reward_hacking(answers, prompts, groups, targets, baseline_answers=before)
    assert report.checks_flagged == ["length"]
    assert report.baseline_mean_length == pytest.approx(sum(len(b) for b in before) / len(before))
    # Same answers as before: no collapse.
    assert not rc.detect_reward_hacking(before, prompts, groups, targets, baseline_answers=before).flagged


def test_length_floor_is_relative_to_the_familys_targets_number_only():
    # Week 7's run: number_only's targets are all two-digit numbers ("73"); 8 of 10 answers right and
    # two one-digit slips average 1.8 characters. That is not a collapse: a fixed 2-character floor
    # flagged it ("hacked"); the floor is 0.6 x the targets' mean length, here 1.2.
    from course_utils import tasks

    records = [r for r in tasks.load_split("test") if r.family == "number_only"][:10]
    targets = [r.target for r in records]
    assert {len(t) for t in targets} == {2}
    answers = targets[:8] + [t[0] for t in targets[8:]]
    assert rc.mean_length(answers) == pytest.approx(1.8)
    prompts = [r.prompt for r in records]
    report = rc.detect_reward_hacking(answers, prompts, ["number_only"] * 10, targets)
    assert "length" not in report.checks_flagged, str(report)
    out = rc.task_outcomes(records, ["Sure! The number is " + t for t in targets], answers)
    assert out["number_only"]["verdict"] != "hacked" and "length" not in out["number_only"]["flags"]
    # A real collapse of the same family is still caught: one character or nothing at all.
    for collapsed in ([t[0] for t in targets], [""] * 10):
        report = rc.detect_reward_hacking(collapsed, prompts, ["number_only"] * 10, targets)
        assert "length" in report.checks_flagged and "correct answers average 2.0" in str(report)
    # Without targets, the fixed floor of min_mean_length characters applies, as before.
    assert rc.detect_reward_hacking(answers, prompts).checks_flagged == ["length"]


def test_a_task_whose_correct_answers_are_all_equal_is_not_a_constant_hack():
    prompts = [PARITY_PROMPT.format(n=n) for n in (2, 4, 6, 8)]
    answers = ["Yes"] * 4
    assert rc.detect_reward_hacking(answers, prompts, ["p"] * 4, targets=["Yes"] * 4).checks_flagged == []
    # Without targets the detector cannot know, and flags it.
    assert rc.detect_reward_hacking(answers, prompts, ["p"] * 4).checks_flagged == ["constant"]
    # Groups smaller than min_group_size are never judged.
    assert not rc.detect_reward_hacking(answers[:3], prompts[:3], ["p"] * 3).flagged


def test_echoed_prompts_are_flagged():
    answers, prompts, groups, targets = clean_batch()
    echoed = [p + " " + a for p, a in zip(prompts[:4], answers[:4])] + answers[4:]
    report = rc.detect_reward_hacking(echoed, prompts, groups, targets)
    assert "echo" in report.checks_flagged and report.prompt_echo_rate == pytest.approx(0.4)


# ---------------------------------------------------------------- agreement and noise


def pearson_by_loop(x, y):
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    vx = sum((a - mx) ** 2 for a in x)
    vy = sum((b - my) ** 2 for b in y)
    return cov / math.sqrt(vx * vy)


def test_reward_checker_agreement_against_a_plain_loop():
    scores = [1.0, 0.6, 0.2, 0.0, 1.0, 0.15]
    passed = [True, False, False, False, True, False]
    got = dg.reward_checker_agreement(scores, passed)
    assert got["n_pass"] == 2 and got["n_fail"] == 4
    assert got["mean_pass"] == pytest.approx(1.0)
    assert got["mean_fail"] == pytest.approx((0.6 + 0.2 + 0.0 + 0.15) / 4)
    assert got["correlation"] == pytest.approx(pearson_by_loop(scores, [float(p) for p in passed]))


def test_agreement_is_nan_where_it_is_undefined():
    got = dg.reward_checker_agreement([0.2, 0.3], [False, False])
    assert math.isnan(got["mean_pass"]) and math.isnan(got["correlation"])
    with pytest.raises(ValueError, match="same length"):
        dg.reward_checker_agreement([1.0], [True, False])


def test_binomial_standard_error_by_hand():
    # 24 passes out of 100: sqrt(0.24 * 0.76 / 100) = sqrt(0.001824)
    assert dg.binomial_standard_error(0.24, 100) == pytest.approx(0.001824 ** 0.5)
    assert dg.binomial_standard_error(0.0, 10) == 0.0
    with pytest.raises(ValueError):
        dg.binomial_standard_error(1.5, 10)
    with pytest.raises(ValueError):
        dg.binomial_standard_error(0.5, 0)


# ---------------------------------------------------------------- the log bundle


def history():
    return [
        {"update": 1, "score": 0.1, "kl_per_sequence": 0.0, "value_loss": 0.5, "response_length": 20.0},
        {"update": 2, "score": 0.3, "kl_per_sequence": float("nan"), "value_loss": 0.4, "response_length": 12.0},
        {"update": 3, "score": 0.2, "kl_per_sequence": 2.5, "value_loss": 0.3, "response_length": 3.0},
    ]


def test_log_bundle_summary_by_hand():
    rows = {r["metric"]: r for r in dg.log_bundle_summary(history())}
    assert set(rows) == {"score", "kl_per_sequence", "value_loss", "response_length"}
    assert rows["score"] == {"group": "reward", "metric": "score", "n": 3, "first": 0.1, "last": 0.2,
                             "min": 0.1, "max": 0.3}
    assert rows["kl_per_sequence"]["n"] == 2 and rows["kl_per_sequence"]["max"] == 2.5  # NaN skipped
    assert rows["response_length"]["group"] == "responses"
    text = dg.format_log_bundle(dg.log_bundle_summary(history()))
    assert "[reward]" in text and "[responses]" in text


def test_every_logged_group_key_is_a_metric_the_trainer_writes():
    import json
    from pathlib import Path

    # The metrics a real smoke run logged (tests/golden, recorded from the trainer itself; the
    # golden-metrics test keeps it current). Timing fields are left out of that file.
    golden = json.loads((Path(__file__).parent / "golden" / "smoke_metrics.json").read_text())
    logged = set(golden["smoke"]["metrics"][0])
    missing = [k for keys in dg.LOG_GROUPS.values() for k in keys
               if k not in logged and not (k.startswith("time_") or k.endswith("_per_s"))]
    assert not missing, missing


def test_plot_log_bundle_draws_one_panel_per_read_metric_that_was_logged():
    import matplotlib.pyplot as plt

    # history() logs four metrics; all four are in READ_TOGETHER, and the four columns hold them in one row.
    fig = dg.plot_log_bundle(history())
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 4 and len(visible) == 4
    assert [ax.get_title(loc="left").split()[0] for ax in visible] == [
        k for k in dg.READ_TOGETHER if k in history()[0]]
    plt.close(fig)
    # A full log (every metric of every group) still draws only the metrics read together, not one per metric.
    full = [{"update": u, **{k: float(u) for keys in dg.LOG_GROUPS.values() for k in keys}} for u in (1, 2)]
    fig = dg.plot_log_bundle(full)
    assert len([ax for ax in fig.axes if ax.axison]) == len(dg.READ_TOGETHER) == 8 and len(fig.axes) == 8
    plt.close(fig)
    fig = dg.plot_log_bundle(full, metrics=["grad_norm", "eos_rate", "not_logged"], columns=2)
    assert [ax.get_title(loc="left") for ax in fig.axes if ax.axison] == ["grad_norm (health)", "eos_rate (responses)"]
    plt.close(fig)


def test_constant_metrics_are_the_rows_whose_min_is_their_max():
    logs = [{"update": 1, "score": 0.1, "kl_coef": 0.05, "nonfinite_steps": 0, "learning_rate": 2e-4},
            {"update": 2, "score": 0.3, "kl_coef": 0.05, "nonfinite_steps": 0, "learning_rate": 1e-4}]
    assert dg.constant_metrics(dg.log_bundle_summary(logs)) == {"kl_coef": 0.05, "nonfinite_steps": 0.0}
    # A metric that was never finite has no value to report.
    assert dg.constant_metrics(dg.log_bundle_summary([{"score": float("nan")}])) == {}


def test_plot_reward_vs_heldout_has_three_panels():
    import matplotlib.pyplot as plt

    evals = [{"update": 0, "pass_rate": 0.1, "mean_reward": 0.2}, {"update": 3, "pass_rate": 0.1, "mean_reward": 0.4}]
    fig = dg.plot_reward_vs_heldout(history(), evals, window=2)
    assert len(fig.axes) == 3  # no twin axis: KL and length each get a panel and a y axis of their own
    assert [line.get_label() for line in fig.axes[0].lines] == [
        "training score (per update)", "held-out pass rate", "held-out mean reward"]
    assert [ax.get_title() for ax in fig.axes[1:]] == ["KL to the reference", "response length"]
    # The thick line is the trailing mean (window 2) of the faint points, by hand; a missing KL is skipped.
    expected = {"kl_per_sequence": ([0.0, np.nan, 2.5], [0.0, 0.0, 2.5]),
                "response_length": ([20.0, 12.0, 3.0], [20.0, 16.0, 7.5])}
    for ax, key in zip(fig.axes[1:], expected):
        raw, mean = ax.lines
        np.testing.assert_allclose(raw.get_ydata(), expected[key][0])
        np.testing.assert_allclose(mean.get_ydata(), expected[key][1])
    plt.close(fig)


def test_a_mean_reward_equal_to_the_pass_rate_stays_visible_and_says_so():
    import matplotlib.pyplot as plt

    # The trainer averages the rewards in float32: equal up to its rounding.
    evals = [{"update": 0, "pass_rate": 0.1, "mean_reward": 0.10000000149}, {"update": 3, "pass_rate": 0.3, "mean_reward": 0.3}]
    fig = dg.plot_reward_vs_heldout(history(), evals)
    score, pass_rate, reward = fig.axes[0].lines
    # Drawn after (above) the pass rate, dashed, with open markers: both lines show where they coincide.
    assert reward.get_zorder() > pass_rate.get_zorder() and reward.get_linestyle() == "--"
    assert reward.get_markerfacecolor() == "none"
    assert reward.get_label() == "held-out mean reward (= pass rate at every evaluation)"
    plt.close(fig)


def test_per_family_score_and_pass_by_hand():
    groups = ["b", "a", "b", "a", "b"]
    scores = [1.0, 0.2, 0.6, 0.0, 1.0]
    passed = [True, False, False, False, True]
    table = dg.per_family_score_and_pass(groups, scores, passed)
    assert list(table) == ["a", "b"]
    assert table["a"] == {"score": pytest.approx(0.1), "pass_rate": 0.0, "n": 2}
    assert table["b"] == {"score": pytest.approx(2.6 / 3), "pass_rate": pytest.approx(2 / 3), "n": 3}
    with pytest.raises(ValueError, match="one of each"):
        dg.per_family_score_and_pass(groups, scores[:2], passed)


def test_plot_score_vs_pass_draws_a_point_per_family_and_arrows():
    import matplotlib.pyplot as plt

    before = {"a": {"score": 0.1, "pass_rate": 0.0, "n": 2}, "b": {"score": 0.5, "pass_rate": 0.3, "n": 3}}
    after = {"a": {"score": 0.4, "pass_rate": 0.0, "n": 2}, "b": {"score": 0.9, "pass_rate": 0.8, "n": 3}}
    fig = dg.plot_score_vs_pass(before, after)
    ax = fig.axes[0]
    points = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(points) == 4  # before and after for each family
    arrows = [t for t in ax.texts if t.arrow_patch is not None]
    assert len(arrows) == 2
    plt.close(fig)
    # Families ending on the same point share one label instead of overprinting each other.
    same = {"a": {"score": 0.0, "pass_rate": 0.0, "n": 1}, "b": {"score": 0.0, "pass_rate": 0.0, "n": 1}}
    fig = dg.plot_score_vs_pass(same)
    assert [t.get_text() for t in fig.axes[0].texts] == ["a\nb"]
    plt.close(fig)


def test_plot_score_vs_pass_keeps_the_before_points_visible_and_names_what_moved():
    # Issue 49 (week 8): grey points hid under blue ones and the families that moved had no label.
    import matplotlib.pyplot as plt

    before = {"moved": {"score": 0.4, "pass_rate": 0.4, "n": 10}, "same": {"score": 0.5, "pass_rate": 0.5, "n": 10}}
    after = {"moved": {"score": 0.9, "pass_rate": 0.9, "n": 10}, "same": {"score": 0.5, "pass_rate": 0.5, "n": 10}}
    fig = dg.plot_score_vs_pass(before, after)
    ax = fig.axes[0]
    rings = [line for line in ax.lines if line.get_marker() == "o" and line.get_markerfacecolor() == "white"]
    dots = [line for line in ax.lines if line.get_marker() == "o" and line.get_markerfacecolor() != "white"]
    assert len(rings) == len(dots) == 2
    assert min(r.get_markersize() for r in rings) > max(d.get_markersize() for d in dots)  # a ring shows round a dot
    arrows = [t for t in ax.texts if t.arrow_patch is not None]
    assert len(arrows) == 1  # only the family that moved
    texts = [t.get_text() for t in ax.texts if t.arrow_patch is None]
    assert "moved: pass 40% → 90%" in texts and "same" in texts
    assert ax.get_legend() is not None
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# task_outcomes: learned vs hacked, per family
# ---------------------------------------------------------------------------------------------


def _family_records(family, n):
    from course_utils import tasks

    return [r for r in tasks.load_split("test") if r.family == family][:n]


def test_task_outcomes_tells_learned_from_hacked_from_unchanged():
    from course_utils.machinery.run_checks import task_outcomes

    lower = _family_records("lowercase_word", 6)
    parity = _family_records("yes_no_parity", 6)
    sums = _family_records("result_sum", 6)
    records = lower + parity + sums
    chatter = [f"I think it is about {i} or so." for i in range(6)]
    before = [f"The word is {r.target}." for r in lower] + [f"Maybe, {i}." for i in range(6)] + chatter
    # lowercase: every answer right now; parity: one constant answer where half are Yes, half No;
    # result_sum: the same chatter as before.
    after = [r.target for r in lower] + ["No"] * 6 + chatter
    out = task_outcomes(records, before, after)
    assert out["lowercase_word"]["verdict"] == "learned"
    assert out["lowercase_word"]["pass_before"] == 0.0 and out["lowercase_word"]["pass_after"] == 1.0
    assert out["yes_no_parity"]["verdict"] == "hacked" and "constant" in out["yes_no_parity"]["flags"]
    assert out["result_sum"]["verdict"] == "no change" and out["result_sum"]["flags"] == []
    # the pass rates agree with the checker answer by answer
    from course_utils import tasks

    expected = sum(tasks.check(r, a).passed for r, a in zip(parity, after[6:12])) / 6
    assert out["yes_no_parity"]["pass_after"] == expected


def test_task_outcomes_placeholder_copy_is_a_hack_and_shorter_right_answers_are_not():
    from course_utils.machinery.run_checks import task_outcomes

    sums = _family_records("result_sum", 5)
    copied = ["RESULT: <sum>"] * 5
    out = task_outcomes(sums, ["x" * 80] * 5, copied)
    assert out["result_sum"]["verdict"] == "hacked" and "placeholder" in out["result_sum"]["flags"]
    right = [r.target for r in sums]
    out = task_outcomes(sums, ["a long preamble " * 5 + r.target for r in sums], right)
    assert out["result_sum"]["verdict"] == "learned" and out["result_sum"]["flags"] == []


def test_task_outcomes_reward_only_and_worse():
    from course_utils.machinery.run_checks import task_outcomes

    lower = _family_records("lowercase_word", 4)
    # the right word with its capitals kept: format credit without a pass
    out = task_outcomes(lower, ["no idea, sorry"] * 4, [r.target.upper() + "." for r in lower])
    assert out["lowercase_word"]["verdict"] in ("reward only",)
    assert out["lowercase_word"]["reward_after"] > out["lowercase_word"]["reward_before"]
    out = task_outcomes(lower, [r.target for r in lower], [f"no idea about {r.target}, sorry" for r in lower])
    assert out["lowercase_word"]["verdict"] == "worse"


def test_task_outcomes_a_change_of_exactly_one_prompt_in_ten_counts():
    from course_utils.machinery.run_checks import task_outcomes

    # 1.0 - 0.9 and 0.5 - 0.4 are just under 0.1 in floating point: both still count as 0.1.
    lower = _family_records("lowercase_word", 10)
    right, wrong = [r.target for r in lower], [f"no idea about {r.target}" for r in lower]
    out = task_outcomes(lower, right, wrong[:1] + right[1:])  # 10/10 -> 9/10
    assert out["lowercase_word"]["verdict"] == "worse"
    out = task_outcomes(lower, right[:4] + wrong[4:], right[:5] + wrong[5:])  # 4/10 -> 5/10
    assert out["lowercase_word"]["verdict"] == "learned"


def test_task_outcomes_rejects_misaligned_lists():
    from course_utils.machinery.run_checks import task_outcomes

    with pytest.raises(ValueError, match="one answer of each per record"):
        task_outcomes(_family_records("lowercase_word", 3), ["a"] * 3, ["a"] * 2)


def test_task_outcomes_a_flag_already_raised_before_training_is_not_a_hack():
    from course_utils.machinery.run_checks import task_outcomes

    lower = _family_records("lowercase_word", 4)
    out = task_outcomes(lower, [""] * 4, ["\n"] * 4)  # empty before, empty after
    assert "length" in out["lowercase_word"]["flags"]
    assert out["lowercase_word"]["new_flags"] == [] and out["lowercase_word"]["verdict"] == "no change"


def test_replaying_the_hacking_rule_over_logs_finds_where_it_would_have_stopped():
    from course_utils.lesson_aids.widgets import hacking_rule_text, hacking_rule_view

    history = [{"update": u, "score": 0.1 * u, "kl_per_sequence": 0.1, "response_length": 5} for u in range(1, 7)]
    evals = [{"update": 0, "pass_rate": 0.40, "mean_reward": 0.1}, {"update": 2, "pass_rate": 0.50, "mean_reward": 0.2},
             {"update": 4, "pass_rate": 0.45, "mean_reward": 0.3}, {"update": 6, "pass_rate": 0.44, "mean_reward": 0.4}]
    # Score rising throughout; pass rate below its best (0.50 at update 2) at updates 4 and 6.
    two = dg.replay_hacking_rule(history, evals, patience=2, eval_every=2)
    assert two["stop_update"] == 6 and "reward_without_heldout_gain" in two["message"]
    assert (two["pass_at_stop"], two["best_update"], two["best_pass"]) == (0.44, 2, 0.50)
    one = dg.replay_hacking_rule(history, evals, patience=1, eval_every=2)
    assert one["stop_update"] == 4 and one["pass_at_stop"] == 0.45
    for off in (0, 3):
        never = dg.replay_hacking_rule(history, evals, patience=off, eval_every=2)
        assert never["stop_update"] is None and never["pass_at_stop"] == never["final_pass"] == 0.44
    flat = [dict(h, score=1.0) for h in history]  # a flat score is no hack, however flat the pass rate
    assert dg.replay_hacking_rule(flat, evals, patience=1, eval_every=2)["stop_update"] is None
    fig, summary = hacking_rule_view(history, evals, 2, 2)
    assert summary == two and any(line.get_xdata()[0] == 6 for line in fig.axes[0].lines if line.get_linestyle() == ":")
    assert "stops after update 6" in hacking_rule_text(summary)


def test_two_runs_are_read_from_their_folders_and_drawn_on_shared_axes(tmp_path):
    import json

    for name, slope in (("base", 0.1), ("beta", 0.05)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"update": u, "score": slope * u, "kl_per_sequence": u})
                                                      + "\n" for u in (1, 2, 3)))
        (folder / "evals.jsonl").write_text("".join(json.dumps({"update": u, "pass_rate": 0.4 + slope * u}) + "\n"
                                                    for u in (0, 3)))
    runs = {name: dg.read_run_logs(tmp_path / name) for name in ("base", "beta")}
    assert [h["update"] for h in runs["base"][0]] == [1, 2, 3] and runs["beta"][1][-1]["pass_rate"] == pytest.approx(0.55)
    fig = dg.plot_runs(runs)
    pass_panel, score_panel, _ = fig.axes
    assert [c.get_label() for c in pass_panel.containers] == ["base", "beta"]
    assert list(pass_panel.containers[1].lines[0].get_ydata()) == pytest.approx([40.0, 55.0])
    assert all(line.get_linestyle() == "None" for line in pass_panel.lines)  # points only: nothing joins them
    assert pass_panel.get_ylim() == (0, 100) and not pass_panel.containers[0].has_yerr  # logs without answers
    assert list(score_panel.lines[0].get_ydata()) == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(FileNotFoundError, match="finished run folder"):
        dg.read_run_logs(tmp_path / "nothing")


def test_the_pass_rate_panel_has_one_standard_error_whiskers_from_the_prompt_count():
    # 100 answers at p = 0.4: SE = sqrt(0.4 * 0.6 / 100) = 0.04899, i.e. 4.899 points either side of 40;
    # 25 answers at p = 0.8: sqrt(0.8 * 0.2 / 25) = 0.08, 8 points either side of 80.
    evals = [{"update": 0, "pass_rate": 0.4, "answers": ["x"] * 100},
             {"update": 5, "pass_rate": 0.8, "answers": ["x"] * 25}]
    fig = dg.plot_runs({"run": ([{"update": 5, "score": 0.5, "kl_per_sequence": 1.0}], evals)})
    (bars,) = fig.axes[0].containers[0].lines[2]
    spans = [(seg[0][1], seg[1][1]) for seg in bars.get_segments()]
    assert spans == [pytest.approx((40 - 4.89898, 40 + 4.89898), abs=1e-4), pytest.approx((72.0, 88.0), abs=1e-6)]


def test_the_trust_region_is_summarised_and_drawn_per_run():
    history = [{"update": u, "approx_kl": kl, "policy_clipfrac": 0.1 * u, "ratio_max": 1 + kl}
               for u, kl in zip(range(1, 11), (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.5))]
    summary = dg.trust_region_summary(history)
    assert summary["approx_kl"]["median"] == pytest.approx(0.055)
    assert summary["approx_kl"]["p90"] == pytest.approx(float(np.percentile([h["approx_kl"] for h in history], 90)))
    assert summary["approx_kl"]["max"] == 0.5 and summary["policy_clipfrac"]["max"] == pytest.approx(1.0)
    fig = dg.plot_trust_region({"a": history, "b": history[:3]}, target_kl=0.02)
    kl_panel, clip_panel, ratio_panel = fig.axes
    assert [line.get_label() for line in kl_panel.lines] == ["a", "b", "1.5 x target_kl 0.02"]
    assert list(kl_panel.lines[2].get_ydata()) == pytest.approx([0.03, 0.03])
    assert list(clip_panel.lines[1].get_ydata()) == pytest.approx([0.1, 0.2, 0.3])
    assert len(dg.plot_trust_region({"a": history}).axes[0].lines) == 1  # no target line when off
    # The largest ratio is read on a log axis (one run's spikes must not flatten another's curve).
    assert ratio_panel.get_yscale() == "log" and kl_panel.get_yscale() == "log"
    assert len(ratio_panel.texts) == 0  # every ratio under the ceiling: nothing cut, nothing written


def test_a_ratio_spike_is_cut_at_the_ceiling_and_written_out():
    calm = [{"update": u, "approx_kl": 0.01, "policy_clipfrac": 0.05, "ratio_max": 1.3} for u in range(1, 6)]
    spiky = [{**h, "ratio_max": 48.0 if h["update"] == 4 else 1.5} for h in calm]
    fig = dg.plot_trust_region({"calm": calm, "spiky": spiky}, ratio_ceiling=5.0)
    ratio_panel = fig.axes[2]
    assert ratio_panel.get_ylim()[1] == pytest.approx(5.0)
    assert [t.get_text() for t in ratio_panel.texts] == ["spiky: up to 48 (update 4), off the axis"]
    # The calm run alone is not cut: nothing written.
    assert len(dg.plot_trust_region({"calm": calm}).axes[2].texts) == 0



def test_paired_pass_change_counts_by_hand():
    before = [True, True, False, False, False, True]
    after = [True, False, True, True, False, True]
    change = dg.paired_pass_change(before, after)
    # Prompt 1 was lost, prompts 2 and 3 gained; 0, 4 and 5 did not move. Three coin flips, 2 against 1:
    # p = 2 (C(3,0) + C(3,1)) / 8 = 1.
    assert change == {"gained": 2, "lost": 1, "n": 6, "p_value": 1.0}
    # 9 gained, 1 lost: p = 2 (1 + 10) / 1024.
    lopsided = dg.paired_pass_change([False] * 9 + [True], [True] * 9 + [False])
    assert lopsided["p_value"] == pytest.approx(22 / 1024)
    assert dg.paired_pass_change([True, False], [True, False])["p_value"] == 1.0  # nothing moved
    with pytest.raises(ValueError, match="same prompts"):
        dg.paired_pass_change([True], [True, False])
