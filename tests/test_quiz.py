"""Tests for course_utils.lesson_aids.quiz: answering without a browser, clear errors, widget state."""

import html
import math
import re
from collections import Counter
from decimal import Decimal

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.lesson_aids import quiz
from course_utils.lesson_aids.quiz import (
    Checklist, Feedback, MultipleChoice, MultiSelect, NumericAnswer, Quiz, QuizInputError, checklist,
)

torch.set_num_threads(1)

RATIO_FEEDBACK = {
    "a": "That is the difference of the two probabilities; the ratio divides.",
    "b": "The new policy makes this token 30% more likely than the old one did.",
    "c": "That is the old probability over the new one, the ratio upside down.",
}


def ratio_question():
    # Lesson 4: r = pi_new / pi_old with pi_new = 0.26, pi_old = 0.20. Option texts are computed.
    new, old = 0.26, 0.20
    options = {"a": f"{new - old:.2f}", "b": f"{new / old:.2f}", "c": f"{old / new:.2f}"}
    return MultipleChoice("What is the ratio r?", options, answer="b", feedback=RATIO_FEEDBACK,
                          hint="Divide the new probability by the old one.")


def advantage_question(**kwargs):
    # Lesson 3: A = R - V with R = 2.0 and V = 1.4.
    return NumericAnswer("A = R - V for R = 2.0, V = 1.4?", answer=2.0 - 1.4, **kwargs)


# ---------------------------------------------------------------- multiple choice


def test_right_answer_gives_its_own_feedback():
    q = ratio_question()
    assert q.options[q.answer] == "1.30"  # the correct option, as shown, really is the ratio
    assert q.answer == q.displayed("b") and q.authored_answer == "b"
    fb = q.check(q.answer)
    assert fb.correct and fb.message == "Correct. " + RATIO_FEEDBACK["b"]


@pytest.mark.parametrize("label", ["a", "c"])
def test_wrong_answer_gives_that_options_feedback(label):
    q = ratio_question()
    fb = q.check(q.displayed(label))
    assert not fb.correct
    assert fb.message == "Not quite. " + RATIO_FEEDBACK[label]
    other = {"a": "c", "c": "a"}[label]
    assert RATIO_FEEDBACK[other] not in fb.message


@pytest.mark.parametrize("dress", [str.upper, lambda s: f" {s} ", lambda s: s + "\n"])
def test_labels_are_case_and_space_insensitive(dress):
    q = ratio_question()
    assert q.check(dress(q.answer)).correct


def test_options_as_pairs_or_plain_list_and_uppercase_labels():
    pairs = MultipleChoice("q", [("A", "yes"), ("B", "no")], answer="a")
    assert pairs.authored_options == {"a": "yes", "b": "no"} and sorted(pairs.options.values()) == ["no", "yes"]
    assert pairs.options[pairs.answer] == "yes" and pairs.check(pairs.answer.upper()).correct
    plain = MultipleChoice("q", ["yes", "no", "maybe"], answer="c")
    assert list(plain.options) == ["a", "b", "c"] and plain.options[plain.answer] == "maybe"
    assert plain.check(plain.answer).correct
    assert not plain.check(plain.displayed("a")).correct


# ---------------------------------------------------------------- option order


def test_options_are_shown_in_a_stable_shuffle_seeded_by_the_question():
    options = {"a": "right", "b": "wrong 1", "c": "wrong 2", "d": "wrong 3"}
    first = MultipleChoice("Which one?", options, answer="a")
    again = MultipleChoice("Which one?", dict(reversed(list(options.items()))), answer="a")
    # The same question shows the same order whatever order the author wrote, and the letters
    # shown are the authored set, reassigned.
    assert first.options == again.options and list(first.options) == ["a", "b", "c", "d"]
    assert [first.authored_options[x] for x in quiz.display_order("Which one?", "abcd")] == \
        list(first.options.values())
    # Over many questions the correct option lands on every letter, about equally often.
    positions = Counter(MultipleChoice(f"Question {i}?", options, answer="a").answer for i in range(400))
    assert set(positions) == set("abcd") and max(positions.values()) < 0.35 * 400, positions


def test_an_order_key_seeds_the_shuffle_in_place_of_the_question():
    """A translated question passes its English question as ``order_key``: the options, translated, are
    shown in the English order under the same letters, and the key is the same letter."""
    english = MultipleChoice("Which one?", {"a": "right", "b": "wrong 1", "c": "wrong 2", "d": "wrong 3"},
                             answer="a")
    translated = {"a": "맞음", "b": "틀림 1", "c": "틀림 2", "d": "틀림 3"}
    korean = MultipleChoice("어느 것일까요?", translated, answer="a", feedback={"b": "아니요"}, lang="ko",
                            order_key="Which one?")
    ticked = MultiSelect("어느 것일까요?", translated, answers=["a", "c"], lang="ko", order_key="Which one?")
    own = MultipleChoice("어느 것일까요?", translated, answer="a")  # no order_key: its own question seeds it
    assert [korean.displayed(x) for x in "abcd"] == [english.displayed(x) for x in "abcd"] == \
        [ticked.displayed(x) for x in "abcd"]
    assert korean.answer == english.answer and ticked.answers == {english.displayed("a"), english.displayed("c")}
    assert korean.feedback == {english.displayed("b"): "아니요"} and korean.question == "어느 것일까요?"
    assert list(own.options.values()) == [translated[x] for x in quiz.display_order("어느 것일까요?", "abcd")]
    assert [own.displayed(x) for x in "abcd"] != [english.displayed(x) for x in "abcd"]  # so the key matters here


def test_the_order_does_not_depend_on_the_python_hash_seed():
    # display_order must not use hash(), which Python salts per process: ask a fresh interpreter.
    import subprocess
    import sys

    code = "from course_utils.lesson_aids.quiz import display_order; print(''.join(display_order('r?', 'abcdef')))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    assert outs == {"".join(quiz.display_order("r?", "abcdef"))}


def test_shuffle_false_keeps_the_authored_order():
    q = MultiSelect("six cases", ["A > 0, low", "A > 0, in", "A > 0, high", "A < 0, low"], answers=["c", "d"],
                    shuffle=False)
    assert list(q.options.values()) == ["A > 0, low", "A > 0, in", "A > 0, high", "A < 0, low"]
    assert q.answers == {"c", "d"} and q.check("c, d").correct


@pytest.mark.parametrize("response", [2, 1.3, None, ["b"], b"b"])
def test_wrong_type_names_what_to_pass(response):
    with pytest.raises(QuizInputError) as err:
        ratio_question().check(response)
    message = str(err.value)
    assert type(response).__name__ in message
    assert "'a', 'b', 'c' as a string" in message and "quiz.check('a')" in message


@pytest.mark.parametrize("response", ["d", "", "1.30", "bb"])
def test_unknown_label_names_the_labels(response):
    with pytest.raises(QuizInputError, match="not an option: pass one of 'a', 'b', 'c'"):
        ratio_question().check(response)


def test_quiz_input_error_is_caught_as_value_error_and_type_error():
    for base in (ValueError, TypeError):
        with pytest.raises(base):
            ratio_question().check(7)


def test_author_mistakes_are_plain_value_errors():
    with pytest.raises(ValueError, match="answer 'd' is not one of the option labels"):
        MultipleChoice("q", {"a": "x", "b": "y"}, answer="d")
    with pytest.raises(ValueError, match="feedback key 'z'"):
        MultipleChoice("q", {"a": "x", "b": "y"}, answer="a", feedback={"z": "typo"})
    with pytest.raises(ValueError, match="distinct labels"):
        MultipleChoice("q", {"a": "x", "A": "y"}, answer="a")
    with pytest.raises(ValueError, match="distinct labels"):
        MultipleChoice("q", ["only one"], answer="a")
    # An author error is not a QuizInputError (that one is for learners' responses).
    with pytest.raises(ValueError) as err:
        MultipleChoice("q", {"a": "x", "b": "y"}, answer="d")
    assert not isinstance(err.value, QuizInputError)


def test_hint_and_missing_hint():
    assert ratio_question().hint() == "Divide the new probability by the old one."
    assert MultipleChoice("q", ["x", "y"], answer="a").hint() == "No hint for this question."


def test_missing_feedback_still_says_right_or_wrong():
    q = MultipleChoice("q", ["x", "y"], answer="a")
    assert q.check(q.answer) == Feedback(True, "Correct.")
    assert q.check(q.displayed("b")) == Feedback(False, "Not quite.")


# ---------------------------------------------------------------- multi select

KL_FEEDBACK = {
    "a": "k1 = log(p/q) is unbiased but can be negative on single samples.",
    "b": "k2 is biased: it matches the KL only to second order.",
    "c": "k3 = (r - 1) - log r is never negative since log r <= r - 1.",
    "d": "The exact KL needs the full distributions, not one sampled token.",
}


def kl_question():
    return MultiSelect("Which statements are true?", ["k1 unbiased", "k2 unbiased", "k3 >= 0",
                                                       "exact KL from one sample"],
                       answers=["a", "c"], feedback=KL_FEEDBACK)


def shown(q, *authored):
    """The displayed letters of the authored ones."""
    return [q.displayed(label) for label in authored]


@pytest.mark.parametrize("form", [list, lambda ls: tuple(x.upper() for x in reversed(ls)), set,
                                  ", ".join, lambda ls: " ".join(reversed(ls))])
def test_multiselect_right_set(form):
    q = kl_question()
    assert q.answers == set(shown(q, "a", "c"))
    fb = q.check(form(shown(q, "a", "c")))
    assert fb.correct
    assert KL_FEEDBACK["a"] in fb.message and KL_FEEDBACK["c"] in fb.message


def test_multiselect_first_wrong_try_counts_the_second_names():
    q = kl_question()
    first = q.check(shown(q, "a", "b"))  # b chosen wrongly, c missed, a right
    assert not first.correct and "2 options are wrong" in first.message
    assert not any(text in first.message for text in KL_FEEDBACK.values())  # not named yet
    second = q.check(shown(q, "a", "b"))
    assert not second.correct and "2 options are wrong" in second.message
    assert KL_FEEDBACK["b"] in second.message and KL_FEEDBACK["c"] in second.message
    assert KL_FEEDBACK["a"] not in second.message and KL_FEEDBACK["d"] not in second.message
    assert f"{q.displayed('b')}) ticked, but false" in second.message
    assert f"{q.displayed('c')}) true, but not ticked" in second.message
    one = kl_question()
    assert "1 option is wrong" in one.check(shown(one, "a")).message


def test_multiselect_a_hint_lets_the_first_wrong_try_name_them():
    q = kl_question()
    q.hint()
    fb = q.check([])
    assert not fb.correct and "2 options are wrong" in fb.message and KL_FEEDBACK["c"] in fb.message


@pytest.mark.parametrize("response, match", [(3, r"pass a list of labels"), (["a", 1], r"pass a list"),
                                             (["a", "e"], r"'e' is not an option")])
def test_multiselect_malformed(response, match):
    with pytest.raises(QuizInputError, match=match):
        kl_question().check(response)


# ---------------------------------------------------------------- numeric


@pytest.mark.parametrize("response", [0.6, 2.0 - 1.4, "0.6", " 6e-1 ", np.float32(0.6), np.float64(0.6),
                                      np.array(0.6), torch.tensor(0.6), torch.tensor([0.6]),
                                      torch.tensor(2.0) - torch.tensor(1.4)])
def test_numeric_accepts_number_like_responses(response):
    fb = advantage_question(explanation="The reward beat the value estimate.").check(response)
    assert fb.correct and fb.message == "Correct: 0.6. The reward beat the value estimate."


def test_numeric_accepts_int():
    assert NumericAnswer("2 + 1?", 3).check(3).correct
    assert not NumericAnswer("2 + 1?", 3).check(4).correct


def test_numeric_low_and_high_feedback():
    q = advantage_question(feedback_low="You subtracted the wrong way round.",
                           feedback_high="Did you add instead of subtract?")
    low, high = q.check(0.8 - 1.4), q.check(2.0 + 1.4)
    # The whole message: what was answered, which side, why; the expected value is not revealed.
    assert low == Feedback(False, "Not quite: -0.6 is too low. You subtracted the wrong way round.")
    assert high == Feedback(False, "Not quite: 3.4 is too high. Did you add instead of subtract?")


def test_numeric_without_feedback_points_to_hint():
    assert "quiz.hint()" in advantage_question(hint="R minus V").check(1).message
    assert "quiz.hint()" not in advantage_question().check(1).message


@pytest.mark.parametrize("response, correct", [
    ("0.61", True), ("0.59", True),  # exactly on the edge of tol = 0.01: inclusive
    ("0.6101", False), ("0.5899", False),
    (0.6 + 0.01, True), (0.6 - 0.01, True),
])
def test_numeric_absolute_tolerance_edges(response, correct):
    assert advantage_question(tol=0.01).check(response).correct is correct


def test_numeric_relative_tolerance():
    q = NumericAnswer("q", 200.0, tol=0.0, rel_tol=0.05)  # allowed distance 0.05 * 200 = 10
    assert q.check(210).correct and q.check(190).correct
    assert not q.check(210.01).correct and not q.check(189.99).correct
    # The larger of the two tolerances applies.
    both = NumericAnswer("q", 0.001, tol=0.01, rel_tol=0.05)
    assert both.check(0.011).correct and not both.check(0.0111).correct


@settings(max_examples=200, deadline=None)
@given(answer=st.integers(-10_000, 10_000), response=st.integers(-10_000, 10_000),
       tol=st.integers(0, 300), rel=st.integers(0, 20))
def test_numeric_tolerance_matches_exact_decimal_arithmetic(answer, response, tol, rel):
    # Values with 2 decimals, tolerances with 3; the reference compares the decimals exactly.
    a, x, t, r = (Decimal(answer) / 100, Decimal(response) / 100, Decimal(tol) / 1000,
                  Decimal(rel) / 100)
    expected = abs(x - a) <= max(t, r * abs(a))
    q = NumericAnswer("q", float(a), tol=float(t), rel_tol=float(r))
    assert q.check(str(x)).correct is expected


@pytest.mark.parametrize("response, match", [
    ("abc", "'abc' is not a number"), ("", "is not a number"), (None, r"NoneType"),
    ([0.6], r"\(list\)"), (True, r"\(bool\)"), (np.bool_(True), r"\(bool\)"), (1j, r"\(complex\)"),
    (float("nan"), "not a finite number"), ("nan", "not a finite number"),
    (float("inf"), "not a finite number"), (np.array([0.6, 0.7]), r"shape \(2,\)"),
    (torch.tensor([[0.6, 0.7]]), r"shape \(1, 2\)"),
])
def test_numeric_malformed_gives_clear_message(response, match):
    with pytest.raises(QuizInputError, match=match) as err:
        advantage_question().check(response)
    assert "answer with one number, e.g. quiz.check(0.6)" in str(err.value)


def test_numeric_author_errors():
    with pytest.raises(ValueError, match="tolerances must be >= 0"):
        NumericAnswer("q", 1.0, tol=-0.1)


def reference_copy_question():
    # Lesson 1: a float32 copy of 134,515,008 parameters, in MB (10^6 bytes).
    return NumericAnswer("How many MB does the float32 reference copy take?", 134_515_008 * 4 / 1e6, tol=1.0,
                         units="MB", feedback_low="Count 4 bytes per parameter.",
                         feedback_high="Count the tied embedding once.",
                         slips=[(134_515_008 * 2 / 1e6, "That is 2 bytes per parameter (bfloat16); float32 has 4.")])


def test_numeric_units_recognise_the_answer_in_another_unit():
    q = reference_copy_question()
    size = 134_515_008 * 4
    assert q.check(size / 1e6).correct and q.check(f"{size / 1e6:.1f} MB").correct and q.check("538 mb").correct
    in_mib = q.check(size / 2**20)  # 513.1: below the answer, but feedback_low would be the wrong advice
    assert not in_mib.correct and "answer in MiB (2^20 bytes); the question asks for MB" in in_mib.message
    assert "4 bytes" not in in_mib.message
    assert "in bytes" in q.check(size).message and "in GB" in q.check(size / 1e9).message
    with pytest.raises(QuizInputError, match="'513 MiB' is in MiB, but the question asks for MB"):
        q.check("513 MiB")
    assert "<a number in MB>" in q.text()
    # Far from the answer in every unit: the side's feedback as before.
    assert q.check(300).message == "Not quite: 300 is too low. Count 4 bytes per parameter."


def test_numeric_slips_name_the_mistake_that_gives_that_value():
    q = reference_copy_question()
    fb = q.check(269)
    assert not fb.correct and fb.message == "Not quite: 269. That is 2 bytes per parameter (bfloat16); float32 has 4."
    # Bradley-Terry loss of a wrongly ranked pair (lesson 6b): each slip its own message, and a number
    # between the tie's ln 2 and the answer gets the low side's feedback, which must hold for it too.
    loss = math.log1p(math.exp(0.7))
    bt = NumericAnswer("BT loss for r_c = 0.4, r_r = 1.1?", loss, tol=2e-3,
                       feedback_low="Too low: check the margin's sign and the log.",
                       slips=[(math.log1p(math.exp(-0.7)), "sign flipped"), (math.log(2), "a tie"),
                              (0.7, "the margin itself")])
    assert bt.check(0.403).message.endswith("sign flipped") and bt.check(0.693).message.endswith("a tie")
    assert bt.check(0.70).message.endswith("the margin itself")
    assert bt.check(0.9).message.endswith("Too low: check the margin's sign and the log.")
    assert bt.check(1.103).correct


def test_numeric_percent_units_recognise_a_fraction():
    q = NumericAnswer("Pass rate after SFT, in percent?", 46.0, tol=0.5, units="%")
    assert "a fraction between 0 and 1" in q.check(0.46).message and q.check("46 %").correct


def test_numeric_slip_on_the_answer_is_an_author_error():
    with pytest.raises(ValueError, match="within the tolerance of the answer"):
        NumericAnswer("q", 1.0, tol=0.1, slips=[(1.05, "never reachable")])


# ---------------------------------------------------------------- widgets, clicked without a browser


def parts(box):
    """The documented children of a question widget: (input, check button, hint button, feedback)."""
    _question, answer_input, buttons, feedback = box.children
    check_button, hint_button = buttons.children
    return answer_input, check_button, hint_button, feedback


def test_multiple_choice_widget_click_shows_option_feedback():
    import ipywidgets as widgets

    q = ratio_question()
    radio, check_button, hint_button, feedback = parts(q.widget())
    assert isinstance(radio, widgets.RadioButtons) and isinstance(feedback, widgets.HTML)
    assert [value for _, value in radio.options] == ["a", "b", "c"] and radio.value is None

    check_button.click()  # nothing picked yet
    assert "Pick an option first" in feedback.value

    assert [text for text, _ in radio.options] == [f"{k}) {v}" for k, v in q.options.items()]
    radio.value = q.displayed("c")
    check_button.click()
    assert html.escape(RATIO_FEEDBACK["c"]) in feedback.value and "Not quite" in feedback.value
    radio.value = q.answer
    check_button.click()
    assert html.escape(RATIO_FEEDBACK["b"]) in feedback.value and "Correct" in feedback.value
    assert q.last.correct  # the click went through .check

    hint_button.click()
    assert "Divide the new probability" in feedback.value


def test_numeric_widget_click_shows_feedback_and_input_errors():
    import ipywidgets as widgets

    q = advantage_question(feedback_high="Did you add?")
    text_box, check_button, _, feedback = parts(q.widget())
    assert isinstance(text_box, widgets.Text)
    check_button.click()  # empty box: the clear message, not a silent 0
    assert "is not a number" in feedback.value and "answer with one number" in feedback.value
    text_box.value = "3.4"
    check_button.click()
    assert "too high" in feedback.value and "Did you add?" in feedback.value
    text_box.value = "0.6"
    check_button.click()
    assert "Correct" in feedback.value


def test_multiselect_widget_click():
    q = kl_question()
    boxes, check_button, _, feedback = parts(q.widget())
    box = dict(zip(q.options, boxes.children))  # the checkbox shown with each displayed letter
    box[q.displayed("a")].value = True
    check_button.click()
    assert "Not quite: 1 option is wrong" in feedback.value and html.escape(KL_FEEDBACK["c"]) not in feedback.value
    check_button.click()
    assert html.escape(KL_FEEDBACK["c"]) in feedback.value
    box[q.displayed("c")].value = True
    check_button.click()
    assert "Correct" in feedback.value


def test_checklist_widget_counts_ticks():
    items = ["I can compute A = R - V", "I can explain the response mask"]
    box = checklist(items).widget()
    _title, boxes, progress = box.children
    assert [b.description for b in boxes.children] == items
    assert progress.value == "0 of 2 done"
    boxes.children[1].value = True
    assert progress.value == "1 of 2 done"
    boxes.children[0].value = True
    assert progress.value.startswith("2 of 2 done")
    with pytest.raises(ValueError, match="non-empty list of strings"):
        Checklist([])


# ---------------------------------------------------------------- quiz collection and fallbacks


def test_quiz_collection_scores_latest_answers():
    qz = Quiz("Week 3 check", [advantage_question(), ratio_question(), kl_question()])
    assert str(qz.score()) == "0 of 3 correct (3 not answered yet)"
    results = qz.check([0.6, qz[1].displayed("a"), sorted(qz[2].answers)])
    assert [fb.correct for fb in results] == [True, False, True]
    assert (qz.score().correct, qz.score().answered, qz.score().total) == (2, 3, 3)
    qz[1].check(qz[1].answer)  # answering again replaces the earlier answer
    assert qz.score().correct == 3
    with pytest.raises(QuizInputError, match="got 2 responses for 3 questions"):
        qz.check([0.6, "b"])
    text = qz.text()
    assert text.startswith("Week 3 check") and "quiz[1].check('a')" in text
    assert len(qz.widget().children) == 1 + len(qz)


def test_text_fallback_without_kernel(capsys):
    q = ratio_question()
    q.show()  # pytest has no kernel: prints the question
    out = capsys.readouterr().out
    assert "What is the ratio r?" in out and f"  {q.answer}) 1.30" in out and "quiz.check('a')" in out
    bundle = q._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"} and f"{q.answer}) 1.30" in bundle["text/plain"]
    checklist(["one"]).show()
    assert "[ ] one" in capsys.readouterr().out


def test_kernel_bundle_carries_the_widget(monkeypatch):
    monkeypatch.setattr(quiz, "_in_kernel", lambda: True)
    q = ratio_question()
    bundle = q._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert f"{q.answer}) 1.30" in bundle["text/plain"]  # the static text stays for GitHub and nbval


def test_without_ipywidgets_falls_back_to_text(monkeypatch, capsys):
    monkeypatch.setattr(quiz, "_widgets", lambda: None)
    monkeypatch.setattr(quiz, "_in_kernel", lambda: True)
    q = ratio_question()
    with pytest.raises(ImportError, match="pip install ipywidgets"):
        q.widget()
    assert set(q._repr_mimebundle_()) == {"text/plain", "text/html"}
    q.show()
    assert "quiz.check('a')" in capsys.readouterr().out


def test_feedback_renders_as_coloured_html():
    assert "#1a7f37" in Feedback(True, "ok")._repr_html_()
    assert "#b3261e" in Feedback(False, "a < b")._repr_html_()
    assert "a &lt; b" in Feedback(False, "a < b")._repr_html_()


def test_renders_in_a_headless_kernel():
    # What nbval does: run cells in a real kernel with no browser. Display must not raise, and
    # every output keeps the text version next to the widget view.
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = ["from course_utils.lesson_aids.quiz import *\n"
             "q = MultipleChoice('r?', {'a': '0.06', 'b': '1.3'}, 'b', {'b': 'It divides.'})\nq",
             "Quiz('Week 4', [q, NumericAnswer('A?', 0.6)]).show()",
             "checklist(['one', 'two'])",
             "q.check(q.answer.upper())"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    repo_root = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",
                            resources={"metadata": {"path": repo_root}}).execute()
    outputs = [o for cell in nb.cells for o in cell.outputs]
    assert [o.output_type for o in outputs] == ["execute_result", "display_data", "execute_result",
                                                "execute_result"]
    for o in outputs[:3]:
        assert "application/vnd.jupyter.widget-view+json" in o.data and "text/plain" in o.data
    assert ") 1.3\n" in outputs[0].data["text/plain"]
    assert "[ ] two" in outputs[2].data["text/plain"]
    assert "It divides." in outputs[3].data["text/html"]


# ---------------------------------------------------------------- the language of the fixed phrases

ENGLISH_SCAFFOLDING = re.compile(
    r"Correct|Not quite|Try again|Answer in code|gives a hint|Question \d|No hint|Hint:|ticked|option|"
    r"Before you move on|\bdone\b|well done|a number|Pick an|is not|got |answer with|responses for|not answered")


def english_words(text: str) -> list[str]:
    """The English words of ``text`` outside the code it shows (quiz.check(...), quoted labels, units)."""
    text = re.sub(r"quiz(\[\d+\])?\.\w+\([^)]*\)", "", text)
    text = re.sub(r"quiz\[\d+\]", "", text)  # "문제 2 (quiz[1]):"
    text = re.sub(r"'[^']*'|<[^>]*>", "", text)
    return re.findall(r"[A-Za-z]{2,}", text)


def no_english(text: str, allowed: tuple[str, ...] = ()) -> None:
    assert not ENGLISH_SCAFFOLDING.search(text), text
    assert [w for w in english_words(text) if w not in allowed] == [], text


def korean_questions():
    mc = MultipleChoice("비율 r은 얼마일까요?", {"a": "0.06", "b": "1.3", "c": "0.77"}, answer="b",
                        feedback={"a": "차이입니다.", "b": "0.26 / 0.20 = 1.3입니다.", "c": "뒤집힌 비율입니다."},
                        hint="새 확률을 이전 확률로 나누세요.", lang="ko")
    ms = MultiSelect("옳은 것을 모두 고르세요.", {"a": "가", "b": "나", "c": "다", "d": "라"}, answers=["a", "c"],
                     feedback={"a": "맞습니다.", "b": "틀립니다.", "c": "맞습니다.", "d": "틀립니다."}, lang="ko")
    num = NumericAnswer("A = R - V는 얼마일까요?", answer=0.6, lang="ko")
    return mc, ms, num


def test_a_korean_quiz_answered_headless_has_no_english_scaffolding():
    mc, ms, num = korean_questions()
    quiz_ko = Quiz("확인 문제", [mc, ms, num], lang="ko")
    messages = [quiz_ko.text(), mc.check(mc.answer).message, *(mc.check(label).message for label in mc.options),
                ms.check(sorted(ms.answers | {"b"})).message, ms.check(["b"]).message,
                ms.check(sorted(ms.answers)).message, ms.hint(), num.check(0.6).message, num.check(0.1).message,
                num.check(5).message, NumericAnswer("몇 MB일까요?", answer=523, units="MB", lang="ko").check(523e6 / 2**20).message,
                str(quiz_ko.score()), checklist(["항목 하나"], lang="ko").text()]
    for text in messages:
        no_english(text, allowed=("MB", "MiB"))
    assert mc.check(mc.answer).message.startswith("정답입니다.") and "정답보다 작습니다" in num.check(0.1).message
    assert "보기 1개를 잘못 판단했습니다" in MultiSelect("q", {"a": "x", "b": "y"}, ["a"], lang="ko").check(["a", "b"]).message
    assert "문제 1 (quiz[0]):" in quiz_ko.text() and "quiz[0].check('a')" in quiz_ko.text()
    # A wrong input is answered in Korean too, naming the call to make.
    for question, response in ((mc, "z"), (mc, 2), (ms, 3), (num, "abc"), (num, [1.0, 2.0]), (num, float("nan"))):
        with pytest.raises(QuizInputError) as error:
            question.check(np.array(response) if isinstance(response, list) else response)
        no_english(str(error.value), allowed=("int", "nan"))
    with pytest.raises(QuizInputError) as error:
        quiz_ko.check([1])
    no_english(str(error.value))


def test_the_korean_widgets_speak_korean():
    import ipywidgets as widgets  # noqa: F401  (the widget tests need it installed)

    mc, _ms, num = korean_questions()
    _q, _input, buttons, feedback = mc.widget().children
    check_button, hint_button = buttons.children
    assert (check_button.description, hint_button.description) == ("확인", "힌트")
    hint_button.click()
    assert feedback.value.startswith("<i>힌트: ")
    check_button.click()  # nothing picked yet
    no_english(feedback.value.replace("<i>", "").replace("</i>", ""))
    assert num.widget().children[1].placeholder == "숫자를 입력하세요"
    box = checklist(["가", "나"], lang="ko").widget()
    title, boxes, progress = box.children
    assert "넘어가기 전에" in title.value and progress.value == "2개 중 0개 완료"
    for b in boxes.children:
        b.value = True
    assert progress.value == "2개 중 2개 완료 — 잘했습니다!"


def test_the_language_of_a_quiz_reaches_its_questions_and_english_stays_the_default():
    mc, ms, num = (MultipleChoice("q?", {"a": "x", "b": "y"}, answer="a"), MultiSelect("q?", {"a": "x", "b": "y"}, ["a"]),
                   NumericAnswer("n?", answer=1.0))
    assert {q.lang for q in (mc, ms, num)} == {"en"} and Quiz("t", [mc]).lang == "en"
    Quiz("t", [mc, ms, num], lang="ko")
    assert {q.lang for q in (mc, ms, num)} == {"ko"} and mc.check(mc.answer).message == "정답입니다."
    assert Quiz("t", [MultipleChoice("q?", {"a": "x", "b": "y"}, answer="a", lang="ko")]).lang == "ko"
    assert checklist(["x"]).title == "Before you move on" and checklist(["x"], title="Mine", lang="ko").title == "Mine"
    with pytest.raises(ValueError, match="lang must be one of"):
        MultipleChoice("q?", {"a": "x", "b": "y"}, answer="a", lang="fr")
    with pytest.raises(ValueError, match="lang must be one of"):
        Quiz("t", [], lang="kr")
    assert set(quiz.PHRASES["ko"]) == set(quiz.PHRASES["en"])
    for key, text in quiz.PHRASES["en"].items():  # the same placeholders in both languages
        assert set(re.findall(r"{\w+}", quiz.PHRASES["ko"][key])) == set(re.findall(r"{\w+}", text)), key
    worded = {other for slips in quiz.UNIT_SLIPS.values() for _, other in slips if re.search("[a-z]{2,}", other)}
    assert worded and worded <= set(quiz.UNIT_NAMES["ko"])
