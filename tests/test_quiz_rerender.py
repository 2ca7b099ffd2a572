"""``translations.rerender_changed_quizzes``: a rewritten quiz option reaches the stored output without a
kernel, showing exactly what the lesson's own execution would show."""

from __future__ import annotations

import copy

import pytest

from course_utils.lesson_aids.quiz import MultipleChoice, Quiz
from course_utils.machinery import translations

OLD = '''quiz = Quiz("Week 0 quiz", [
    MultipleChoice(
        f"A run ended after {n} updates. Why?",
        {"a": "The time budget ran out first, so a faster machine fits more updates.",
         "b": "A stop rule fired.",
         "c": "total_updates was reached."},
        answer=key),
])
quiz'''
NEW = OLD.replace("The time budget ran out first, so a faster machine fits more updates.",
                  "The time budget ran out.")


def notebook(source: str, n: int = 45) -> dict:
    """A one-cell lesson whose output is what a kernel shows for ``source`` with ``n = 45``."""
    shown = Quiz("Week 0 quiz", [MultipleChoice(
        f"A run ended after {n} updates. Why?",
        {"a": "The time budget ran out first, so a faster machine fits more updates.",
         "b": "A stop rule fired.", "c": "total_updates was reached."}, answer="a")])
    data = {k: v for k, v in translations._display_data(shown).items() if k in ("text/plain", "text/html")}
    data[translations.WIDGET_VIEW] = {"model_id": "m1", "version_major": 2, "version_minor": 0}
    return {"cells": [{"cell_type": "code", "id": "q1", "metadata": {}, "source": source, "execution_count": 1,
                       "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                    "data": data}]}],
            "metadata": {"widgets": {translations.WIDGET_STATE: {"state": {"m1": {"model_name": "VBoxModel",
                                                                                   "state": {}}}}}}}


def text(nb) -> str:
    return "".join(nb["cells"][0]["outputs"][0]["data"]["text/plain"])


def test_a_rewritten_option_is_shown_with_the_values_the_run_printed():
    before = notebook(OLD)
    after = copy.deepcopy(before)
    after["cells"][0]["source"] = NEW
    assert translations.rerender_changed_quizzes(after, before) == ["q1"]
    shown = text(after)
    assert "The time budget ran out." in shown and "fits more updates" not in shown
    assert "A run ended after 45 updates. Why?" in shown            # the placeholder keeps the run's value
    expected = Quiz("Week 0 quiz", [MultipleChoice("A run ended after 45 updates. Why?",
                                                   {"a": "The time budget ran out.", "b": "A stop rule fired.",
                                                    "c": "total_updates was reached."}, answer="a")])
    assert shown == translations._display_data(expected)["text/plain"]  # what a kernel would show, same order
    data = after["cells"][0]["outputs"][0]["data"]
    assert translations.WIDGET_VIEW not in data                      # the old widget would show the old option
    assert after["metadata"]["widgets"][translations.WIDGET_STATE]["state"] == {}


def test_an_unchanged_quiz_is_left_alone():
    before = notebook(OLD)
    after = copy.deepcopy(before)
    assert translations.rerender_changed_quizzes(after, before) == []
    assert after == before


def test_a_new_placeholder_needs_the_lesson_executed():
    before = notebook(OLD)
    after = copy.deepcopy(before)
    after["cells"][0]["source"] = NEW.replace('"A stop rule fired."', 'f"A stop rule fired at {m}."')
    with pytest.raises(ValueError, match="re-execute the lesson instead"):
        translations.rerender_changed_quizzes(after, before)


def test_every_quiz_is_rendered_again_after_a_change_to_what_the_library_prints():
    """``before_nb`` None: each quiz cell is rendered from its own source (its output printed by an older
    quiz.py, say), with the values its output shows."""
    nb = notebook(OLD)
    expected = text(nb)
    stale = expected.replace("Answer in code:", "Answer with code:")
    nb["cells"][0]["outputs"][0]["data"]["text/plain"] = stale
    assert translations.rerender_changed_quizzes(nb) == ["q1"]
    assert text(nb) == expected
