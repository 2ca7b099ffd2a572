"""Quiz cells that answer back, in Jupyter and without a browser.

Three question kinds share one interface:

- ``MultipleChoice``: one correct option, per-option feedback explaining why.
- ``MultiSelect``: several correct options ("tick every statement that is true"). A wrong try first
  says how many options are wrong; the second wrong try (or one after ``q.hint()``) names them.
- ``NumericAnswer``: a number compared with a tolerance, feedback for too low / too high, and for
  the slips a question is prone to (``units="MB"`` recognises an answer in MiB or in bytes;
  ``slips=[(value, why)]`` names the wrong value a known mistake gives).

``q.check(response)`` returns a ``Feedback(correct, message)``; ``q.hint()`` returns the hint.

Language. The texts a quiz is written with (question, options, feedback, hints) are the author's;
the fixed phrases around them ("Correct.", "Not quite", the call to make, the Check and Hint
buttons, the checklist's progress line, the input errors) come in the language ``lang`` names:
``"en"`` (the default) or ``"ko"`` (``LANGUAGES``). ``Quiz(..., lang="ko")`` and
``checklist(..., lang="ko")`` set it for everything they show; the Korean lessons get it from the
translation merge (``machinery/translations.py``), which adds ``lang="ko"`` to their quiz calls.

Option order. Authors write the options in any order (the key is often "a"); the learner sees them
in a stable shuffle seeded by the question text (``display_order``), so where the correct option
sits is fixed for a question but cannot be guessed from habit. The displayed letters are the
authored ones reassigned in the shuffled order (authored ``{"a": X, "b": Y}`` may be shown as
``a) Y  b) X``). Everything public speaks in *displayed* letters: ``q.options`` is what is shown,
``q.check("b")`` answers the option shown as b), ``q.answer`` (``q.answers`` for MultiSelect) is the
displayed letter of the correct option, and ``q.displayed("a")`` maps an authored letter to the one
shown. ``shuffle=False`` keeps the authored order (options with an order of their own, such as a
table of cases). ``order_key="..."`` seeds the shuffle with that text instead of the question: a
translated question passes its English question text (the translation merge adds it,
``machinery/translations.py``), so it shows its options in the English order, under the same
letters, and one answer key serves both languages.
In a notebook, ending a cell with ``q`` (or calling ``q.show()``) renders ipywidgets: an input,
a Check button, a Hint button and an HTML line where the feedback appears. Without ipywidgets or
a kernel (plain Python, a terminal, GitHub's static view) the question prints as text with the
call to make. A response of the wrong kind raises ``QuizInputError`` naming what to pass.

Example::

    q = MultipleChoice(
        "r = pi_new / pi_old with pi_new = 0.26 and pi_old = 0.20. What is r?",
        {"a": "0.06", "b": "1.3", "c": "0.77"},
        answer="b",
        feedback={"a": "That is the difference pi_new - pi_old; the ratio divides.",
                  "b": "0.26 / 0.20 = 1.3: the new policy makes this token 30% more likely.",
                  "c": "That is pi_old / pi_new, the ratio upside down."},
        hint="Divide the new probability by the old one.")
    q.check(q.answer)          # Feedback(correct=True, message='Correct. 0.26 / 0.20 = 1.3: ...')
    q.answer == q.displayed("b")   # the authored key "b", under the letter the learner sees
"""

from __future__ import annotations

import hashlib
import html
import math
import numbers
import random
import re
from dataclasses import dataclass


class QuizInputError(ValueError, TypeError):
    """A response of the wrong kind (a ValueError and a TypeError, so either ``except`` works)."""


LANGUAGES = ("en", "ko")
"""The languages of the fixed phrases (``lang=``)."""

# The fixed phrases, by language: every text a quiz shows that its author did not write.
PHRASES: dict[str, dict[str, str]] = {
    "en": {
        "correct": "Correct.",
        "correct_number": "Correct: {answer}.",
        "not_quite": "Not quite.",
        "not_quite_number": "Not quite: {x}.",
        "too_low": "Not quite: {x} is too low.",
        "too_high": "Not quite: {x} is too high.",
        "try_again": "Try again.",
        "try_again_hint": "Try again; quiz.hint() gives a hint.",
        "no_hint": "No hint for this question.",
        "hint_prefix": "Hint: {hint}",
        "check_button": "Check",
        "hint_button": "Hint",
        "pick_first": "Pick an option first.",
        "got": "got {response} ({kind}): {usage}",
        "not_an_option": "{response} is not an option: {usage}",
        "usage_one": "pass one of {labels} as a string, e.g. quiz.check({first})",
        "usage_many": "pass a list of labels from {labels}, e.g. quiz.check(['a', 'b']) or quiz.check('a, b')",
        "answer_in_code": "Answer in code: {usage}; quiz.hint() gives a hint.",
        "answer_number": "Answer in code: quiz.check({number}); quiz.hint() gives a hint.",
        "a_number": "<a number>",
        "a_number_in": "<a number in {units}>",
        "placeholder": "type a number",
        "placeholder_in": "a number in {units}",
        "wrong_count_one": "1 option is wrong",
        "wrong_count_many": "{n} options are wrong",
        "first_wrong_try": "Not quite: {count} (ticked but false, or true but left unticked). Look at each option "
                           "again; a second try, or a hint, names them.",
        "named_wrong_try": "Not quite: {count}:",
        "ticked_but_false": "ticked, but false",
        "true_not_ticked": "true, but not ticked",
        "usage_number": "answer with one number, e.g. quiz.check(0.6) or quiz.check('0.6')",
        "usage_number_in": "answer with one number, e.g. quiz.check(0.6) or quiz.check('0.6'), in {units}",
        "array_shape": "got an array of shape {shape}: {usage}",
        "wrong_unit": "{response} is in {unit}, but the question asks for {units}: convert it, then {usage}",
        "not_a_number": "{response} is not a number: {usage}",
        "not_finite": "got {value}, which is not a finite number: {usage}",
        "unit_slip": "That looks like the answer in {other}; the question asks for {units}.",
        "score": "{correct} of {total} correct ({left} not answered yet)",
        "responses_count": "got {got} responses for {total} questions: pass one response per question, in order",
        "question_heading": "Question {number} (quiz[{index}]): ",
        "checklist_title": "Before you move on",
        "checklist_progress": "{done} of {total} done",
        "checklist_done": ": well done!",
    },
    "ko": {
        "correct": "정답입니다.",
        "correct_number": "정답입니다: {answer}.",
        "not_quite": "아쉽지만 틀렸습니다.",
        "not_quite_number": "아쉽지만 틀렸습니다: {x}.",
        "too_low": "아쉽지만 틀렸습니다: {x}은(는) 정답보다 작습니다.",
        "too_high": "아쉽지만 틀렸습니다: {x}은(는) 정답보다 큽니다.",
        "try_again": "다시 풀어 보세요.",
        "try_again_hint": "다시 풀어 보세요. quiz.hint()로 힌트를 볼 수 있습니다.",
        "no_hint": "이 문제에는 힌트가 없습니다.",
        "hint_prefix": "힌트: {hint}",
        "check_button": "확인",
        "hint_button": "힌트",
        "pick_first": "먼저 보기를 하나 고르세요.",
        "got": "{response}({kind})는 답으로 받을 수 없습니다. {usage}",
        "not_an_option": "{response}은(는) 보기에 없습니다. {usage}",
        "usage_one": "{labels} 중 하나를 문자열로 넘기세요. 예: quiz.check({first})",
        "usage_many": "{labels} 중에서 고른 기호를 리스트로 넘기세요. 예: quiz.check(['a', 'b']) 또는 quiz.check('a, b')",
        "answer_in_code": "코드로 답하기: {usage}. quiz.hint()로 힌트를 볼 수 있습니다.",
        "answer_number": "코드로 답하기: quiz.check({number}). quiz.hint()로 힌트를 볼 수 있습니다.",
        "a_number": "<숫자>",
        "a_number_in": "<{units} 단위의 숫자>",
        "placeholder": "숫자를 입력하세요",
        "placeholder_in": "{units} 단위의 숫자",
        "wrong_count_one": "보기 1개를 잘못 판단했습니다",
        "wrong_count_many": "보기 {n}개를 잘못 판단했습니다",
        "first_wrong_try": "아쉽지만 틀렸습니다. {count}(틀린 보기를 골랐거나, 맞는 보기를 고르지 않았습니다). "
                           "보기를 하나씩 다시 읽어 보세요. 한 번 더 틀리거나 힌트를 보면 어느 보기인지 알려 드립니다.",
        "named_wrong_try": "아쉽지만 틀렸습니다. {count}:",
        "ticked_but_false": "골랐지만 틀린 보기입니다",
        "true_not_ticked": "맞는 보기인데 고르지 않았습니다",
        "usage_number": "숫자 하나로 답하세요. 예: quiz.check(0.6) 또는 quiz.check('0.6')",
        "usage_number_in": "{units} 단위의 숫자 하나로 답하세요. 예: quiz.check(0.6) 또는 quiz.check('0.6')",
        "array_shape": "모양이 {shape}인 배열은 답으로 받을 수 없습니다. {usage}",
        "wrong_unit": "{response}은(는) {unit} 단위인데, 문제는 {units} 단위로 묻습니다. 단위를 바꾼 뒤 다시 답하세요. {usage}",
        "not_a_number": "{response}은(는) 숫자가 아닙니다. {usage}",
        "not_finite": "{value}은(는) 유한한 수가 아닙니다. {usage}",
        "unit_slip": "{other} 단위로 쓴 답으로 보입니다. 문제는 {units} 단위로 묻습니다.",
        "score": "{total}문제 중 {correct}문제 정답 (아직 답하지 않은 문제 {left}개)",
        "responses_count": "문제는 {total}개인데 답은 {got}개입니다. 문제마다 답을 하나씩, 순서대로 넘기세요",
        "question_heading": "문제 {number} (quiz[{index}]): ",
        "checklist_title": "넘어가기 전에",
        "checklist_progress": "{total}개 중 {done}개 완료",
        "checklist_done": " — 잘했습니다!",
    },
}

# What the unit slips of ``UNIT_SLIPS`` are called, in the languages other than English.
UNIT_NAMES: dict[str, dict[str, str]] = {
    "ko": {"MiB (2^20 bytes)": "MiB(2^20바이트)", "bytes": "바이트", "MB (10^6 bytes)": "MB(10^6바이트)",
           "GiB (2^30 bytes)": "GiB(2^30바이트)", "GB (10^9 bytes)": "GB(10^9바이트)",
           "a fraction between 0 and 1": "0과 1 사이의 비율"},
}


def _language(lang: str) -> str:
    """``lang`` checked against ``LANGUAGES`` (an author error: a plain ValueError)."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")
    return lang


def phrase(lang: str, key: str, **values) -> str:
    """The fixed phrase ``key`` in language ``lang``, with ``values`` filled in."""
    return PHRASES[_language(lang)][key].format(**values)


@dataclass
class Feedback:
    correct: bool
    message: str

    def __str__(self) -> str:
        return self.message

    def _repr_html_(self) -> str:  # q.check(...) at the end of a cell shows a coloured line
        return _feedback_html(self)


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown), False in plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _widgets():
    """The ipywidgets module, or None when it is not installed."""
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


def _require_widgets():
    w = _widgets()
    if w is None:
        raise ImportError("ipywidgets is not installed: pip install ipywidgets (or answer with .check())")
    return w


def _feedback_html(fb: Feedback) -> str:
    colour = "#1a7f37" if fb.correct else "#b3261e"
    return f'<span style="color:{colour}">{html.escape(fb.message)}</span>'


class _Displayable:
    """Shared display: subclasses define text() and widget().

    In a kernel the object renders as its widget, with the text version as text/html and
    text/plain (what GitHub's static view and headless runs show); elsewhere it prints as text.
    """

    def show(self) -> None:
        """Display the widget in a notebook, or print the text version elsewhere."""
        if _in_kernel() and _widgets() is not None:
            from IPython.display import display

            display(self)
        else:
            print(self.text())

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = self.text()
        bundle = {"text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>"}
        if _in_kernel() and _widgets() is not None:
            try:
                view = self.widget()._repr_mimebundle_()
            except Exception:  # a display problem must never break a lesson: keep the text
                return bundle
            bundle.update({k: v for k, v in view.items() if k != "text/plain"})
        return bundle


class _Question(_Displayable):
    """One question: subclasses define check(), _text_lines(), _input_widget(), _read()."""

    def __init__(self, question: str, hint: str = "", lang: str = "en"):
        self.question = question
        self._hint = hint
        self.lang = _language(lang)  # the language of the fixed phrases (module docstring)
        self.last: Feedback | None = None  # the most recent check, for Quiz.score()

    def _say(self, key: str, **values) -> str:
        return phrase(self.lang, key, **values)

    def hint(self) -> str:
        return self._hint or self._say("no_hint")

    def _record(self, fb: Feedback) -> Feedback:
        self.last = fb
        return fb

    def text(self) -> str:
        """The question as plain text with the call to make, for when widgets cannot render."""
        return "\n".join([self.question, *self._text_lines()])

    def widget(self):
        """Build the ipywidgets view: VBox(question HTML, input, HBox(Check, Hint), feedback HTML).

        Clicking Check reads the input, calls ``self.check`` and writes the result into the
        feedback HTML's ``.value``; a malformed input shows the QuizInputError message there.
        """
        w = _require_widgets()
        question = w.HTML(f"<b>{html.escape(self.question)}</b>")
        answer_input = self._input_widget(w)
        check_button = w.Button(description=self._say("check_button"), button_style="primary")
        hint_button = w.Button(description=self._say("hint_button"))
        feedback = w.HTML("")

        def on_check(_button):
            try:
                feedback.value = _feedback_html(self.check(self._read(answer_input)))
            except QuizInputError as err:
                feedback.value = f"<i>{html.escape(str(err))}</i>"

        def on_hint(_button):
            feedback.value = f"<i>{html.escape(self._say('hint_prefix', hint=self.hint()))}</i>"

        check_button.on_click(on_check)
        hint_button.on_click(on_hint)
        return w.VBox([question, answer_input, w.HBox([check_button, hint_button]), feedback])


def _normalise_options(options) -> dict[str, str]:
    """dict {label: text}, list of (label, text) pairs, or list of texts (labelled a, b, c...)."""
    if isinstance(options, dict):
        pairs = list(options.items())
    else:
        pairs = [o if isinstance(o, tuple) else (chr(ord("a") + i), o) for i, o in enumerate(options)]
    labels = {str(label).strip().lower(): str(text) for label, text in pairs}
    if len(labels) != len(pairs) or len(labels) < 2:
        raise ValueError(f"options need at least two distinct labels (case-insensitive), got {pairs}")
    return labels


def display_order(question: str, labels) -> list[str]:
    """The authored ``labels`` in the order a learner sees them: a shuffle seeded by ``question``
    (the question text, or the ``order_key`` a question was given in its place).

    The seed is the SHA-256 of the question text, so the order is the same in every run, on every
    machine and Python version (no ``hash()`` randomisation), and changes only when the question
    text does; nothing about the options (their length, their authored letter) decides it.
    """
    seed = int.from_bytes(hashlib.sha256(question.encode("utf-8")).digest()[:8], "big")
    order = list(labels)
    random.Random(seed).shuffle(order)
    return order


class MultipleChoice(_Question):
    """One correct option; ``feedback[label]`` explains why that option is right or wrong.

    ``options`` is a dict {label: text}, a list of (label, text) pairs, or a list of texts
    (labelled 'a', 'b', 'c', ...). Labels are matched case-insensitively, spaces stripped.
    ``answer`` and the keys of ``feedback`` are the authored labels; the options are shown in
    ``display_order(question, labels)`` (unless ``shuffle=False``) under the same letters, and
    ``options``, ``answer``, ``check`` and the widget all use the displayed letters (module docstring).
    ``order_key``, when given, seeds the shuffle in place of the question (a translation passes the
    English question, so both languages show the options in one order, under the same letters).
    """

    def __init__(self, question: str, options, answer: str, feedback: dict[str, str] | None = None,
                 hint: str = "", shuffle: bool = True, lang: str = "en", order_key: str | None = None):
        super().__init__(question, hint, lang)
        self.order_key = order_key
        self._arrange(options, shuffle)
        self.authored_answer = self._author_label(answer, "answer")
        self.answer = self.displayed(self.authored_answer)
        self.feedback = {self.displayed(self._author_label(k, "feedback key")): v
                         for k, v in (feedback or {}).items()}

    def _arrange(self, options, shuffle: bool) -> None:
        """Set ``authored_options`` (as written) and ``options`` (as shown, letters reassigned)."""
        self.authored_options = _normalise_options(options)
        # Sorted first, so the order shown depends on the question and the labels alone, not on
        # the order the author happened to write the options in.
        labels = sorted(self.authored_options) if shuffle else list(self.authored_options)
        seed = self.question if self.order_key is None else self.order_key
        order = display_order(seed, labels) if shuffle else labels
        self._shown_as = {authored: shown for authored, shown in zip(order, labels)}
        self.options = {shown: self.authored_options[authored] for authored, shown in zip(order, labels)}

    def displayed(self, authored_label: str) -> str:
        """The letter under which the option authored as ``authored_label`` is shown."""
        return self._shown_as[self._author_label(authored_label, "label")]

    def _author_label(self, label, what: str) -> str:
        """Check a label written by the quiz author (a typo here is a ValueError, not a QuizInputError)."""
        key = str(label).strip().lower()
        if key not in self.authored_options:
            raise ValueError(f"{what} {label!r} is not one of the option labels {list(self.authored_options)}")
        return key

    def _usage(self) -> str:
        labels = ", ".join(repr(label) for label in self.options)
        return self._say("usage_one", labels=labels, first=repr(next(iter(self.options))))

    def _label(self, response) -> str:
        """Normalise a response to a known option label ('B ' -> 'b'), or raise QuizInputError."""
        if not isinstance(response, str):
            raise QuizInputError(self._say("got", response=repr(response), kind=type(response).__name__,
                                           usage=self._usage()))
        label = response.strip().lower()
        if label not in self.options:
            raise QuizInputError(self._say("not_an_option", response=repr(response), usage=self._usage()))
        return label

    def check(self, response: str) -> Feedback:
        label = self._label(response)
        correct = label == self.answer
        why = self.feedback.get(label, "")
        verdict = self._say("correct" if correct else "not_quite")
        return self._record(Feedback(correct, f"{verdict} {why}".strip()))

    def _text_lines(self) -> list[str]:
        options = [f"  {label}) {text}" for label, text in self.options.items()]
        return [*options, self._say("answer_in_code", usage=self._usage())]

    def _input_widget(self, w):
        choices = [(f"{label}) {text}", label) for label, text in self.options.items()]
        return w.RadioButtons(options=choices, value=None, layout=w.Layout(width="auto"))

    def _read(self, radio):
        if radio.value is None:
            raise QuizInputError(self._say("pick_first"))
        return radio.value


class MultiSelect(MultipleChoice):
    """Several correct options. Correct only when exactly the right set is chosen.

    A wrong try says how many options are wrong (ticked but false, or true but left unticked) and
    lets the learner look again; from the second wrong try on, or after ``hint()``, it also names
    them with their feedback. A correct answer gives the feedback of every option chosen.
    ``answers`` are authored labels; ``self.answers`` holds the displayed ones.
    """

    def __init__(self, question: str, options, answers, feedback: dict[str, str] | None = None,
                 hint: str = "", shuffle: bool = True, lang: str = "en", order_key: str | None = None):
        _Question.__init__(self, question, hint, lang)
        self.order_key = order_key
        self._arrange(options, shuffle)
        self.authored_answers = {self._author_label(a, "answer") for a in answers}
        if not self.authored_answers:
            raise ValueError("MultiSelect needs at least one correct answer")
        self.answers = {self.displayed(a) for a in self.authored_answers}
        self.feedback = {self.displayed(self._author_label(k, "feedback key")): v
                         for k, v in (feedback or {}).items()}
        self.wrong_tries = 0     # wrong checks so far; the second one names the wrong options
        self.hinted = False      # hint() was asked for: name the wrong options from then on

    def hint(self) -> str:
        self.hinted = True
        return super().hint()

    def _usage(self) -> str:
        labels = ", ".join(repr(label) for label in self.options)
        return self._say("usage_many", labels=labels)

    def check(self, response) -> Feedback:
        if isinstance(response, str):  # "a, c" or "a c"
            response = response.replace(",", " ").split()
        if not isinstance(response, (list, tuple, set, frozenset)):
            raise QuizInputError(self._say("got", response=repr(response), kind=type(response).__name__,
                                           usage=self._usage()))
        chosen = {self._label(r) for r in response}
        wrong = chosen ^ self.answers  # chosen but false, or true but missed
        if not wrong:
            lines = [f"{label}) {self.feedback[label]}" for label in sorted(chosen) if label in self.feedback]
            return self._record(Feedback(True, " ".join([self._say("correct"), *lines])))
        self.wrong_tries += 1
        count = self._say("wrong_count_many", n=len(wrong)) if len(wrong) > 1 else self._say("wrong_count_one")
        if self.wrong_tries < 2 and not self.hinted:
            # First try: how many, not which, so the learner re-reads every option.
            return self._record(Feedback(False, self._say("first_wrong_try", count=count)))
        # From the second try on, explain only the options whose choice differs from the truth.
        lines = [f"{label}) {self._say('ticked_but_false' if label in chosen else 'true_not_ticked')}"
                 + (f": {self.feedback[label]}" if label in self.feedback else ".") for label in sorted(wrong)]
        return self._record(Feedback(False, " ".join([self._say("named_wrong_try", count=count), *lines])))

    def _input_widget(self, w):
        boxes = [w.Checkbox(description=f"{label}) {text}", indent=False, layout=w.Layout(width="auto"))
                 for label, text in self.options.items()]
        return w.VBox(boxes)

    def _read(self, vbox):
        return [label for label, box in zip(self.options, vbox.children) if box.value]


# The slips a unit invites: unit -> [(factor, the unit the slipped number is in)]. A response equal
# to answer * factor is the answer written in that other unit (MB -> MiB: bytes / 2^20 is
# answer * 10^6 / 2^20). Units not listed here can still name slips by value (``slips=``).
UNIT_SLIPS: dict[str, list[tuple[float, str]]] = {
    "MB": [(1e6 / 2**20, "MiB (2^20 bytes)"), (1e6, "bytes"), (1e-3, "GB")],
    "MiB": [(2**20 / 1e6, "MB (10^6 bytes)"), (2**20, "bytes"), (1 / 1024, "GiB")],
    "GB": [(1e9 / 2**30, "GiB (2^30 bytes)"), (1e3, "MB")],
    "GiB": [(2**30 / 1e9, "GB (10^9 bytes)"), (1024, "MiB")],
    "%": [(0.01, "a fraction between 0 and 1")],
    "percentage points": [(0.01, "a fraction between 0 and 1")],
}


def _to_float(response, units: str = "", lang: str = "en") -> float:
    """A finite float from an int, float, numpy scalar, one-element array/tensor or numeric string.

    With ``units``, a string may end with them ("523 MB"); a string in another unit of
    ``UNIT_SLIPS`` ("499 MiB" where MB is asked) is refused with a message naming the unit to use.
    """
    usage = phrase(lang, "usage_number_in", units=units) if units else phrase(lang, "usage_number")
    value = response
    if hasattr(value, "item") and hasattr(value, "shape"):  # numpy scalar/array, torch tensor
        if math.prod(value.shape) != 1:
            raise QuizInputError(phrase(lang, "array_shape", shape=tuple(value.shape), usage=usage))
        value = value.item()
    if isinstance(value, str):
        text = value.strip()
        suffix = re.search(r"\s*([A-Za-z%][A-Za-z% ]*)$", text) if units else None
        if suffix:
            unit = suffix.group(1).strip()
            if unit.lower() == units.lower():
                text = text[:suffix.start()]
            elif any(unit.lower() == u.lower() for u in UNIT_SLIPS):
                raise QuizInputError(phrase(lang, "wrong_unit", response=repr(response), unit=unit, units=units,
                                            usage=usage))
        try:
            value = float(text)
        except ValueError:
            raise QuizInputError(phrase(lang, "not_a_number", response=repr(response), usage=usage)) from None
    # bool is an int subclass, but True is never a meant numeric answer.
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise QuizInputError(phrase(lang, "got", response=repr(response), kind=type(response).__name__, usage=usage))
    value = float(value)
    if not math.isfinite(value):
        raise QuizInputError(phrase(lang, "not_finite", value=value, usage=usage))
    return value


class NumericAnswer(_Question):
    """A number checked with a tolerance.

    Correct when ``|response - answer| <= max(tol, rel_tol * |answer|)`` (``tol`` absolute,
    ``rel_tol`` relative, as in ``math.isclose``); the edge counts as correct, and float rounding
    at the edge (0.61 vs 0.6 with tol 0.01) is forgiven. A correct answer shows ``explanation``.
    A wrong one is compared, in this order, with

    - ``slips``: ``[(value, why)]``, the wrong values that known mistakes give (the same
      tolerance); a match shows ``why``;
    - the answer written in another unit, when ``units`` is one of ``UNIT_SLIPS`` (``units="MB"``
      recognises the same size in MiB, in bytes, in GB); a match names the unit;

    and otherwise shows ``feedback_low`` or ``feedback_high`` (what being on that side usually
    means: write them so that they are true of *every* number on that side), else a nudge
    towards the hint. ``units`` is also shown with the call to make and accepted after the
    number in a string ("523 MB"). The expected value is not revealed by a wrong answer.
    """

    def __init__(self, question: str, answer: float, tol: float = 1e-2, rel_tol: float = 0.0,
                 feedback_low: str = "", feedback_high: str = "", explanation: str = "",
                 hint: str = "", units: str = "", slips=(), lang: str = "en"):
        super().__init__(question, hint, lang)
        self.answer = _to_float(answer)
        if tol < 0 or rel_tol < 0:
            raise ValueError(f"tolerances must be >= 0, got tol={tol}, rel_tol={rel_tol}")
        self.tol, self.rel_tol = tol, rel_tol
        self.feedback_low, self.feedback_high, self.explanation = feedback_low, feedback_high, explanation
        self.units = units.strip()
        self.slips = [(_to_float(value), str(why)) for value, why in slips]
        for value, _ in self.slips:
            if self._close(value, self.answer):
                raise ValueError(f"slip value {value:g} is within the tolerance of the answer {self.answer:g}: "
                                 "a correct response would never reach it")

    def _close(self, x: float, target: float, scale: float = 1.0) -> bool:
        """|x - target| within the question's tolerance (``tol`` scaled to another unit by ``scale``)."""
        allowed = max(self.tol * abs(scale), self.rel_tol * abs(target))
        slack = 1e-12 * max(1.0, abs(target))  # forgive float rounding exactly at the edge
        return abs(x - target) <= allowed + slack

    def _slip(self, x: float) -> str:
        """The message of the first slip that ``x`` matches, or ''."""
        for value, why in self.slips:
            if self._close(x, value):
                return why
        for factor, other in UNIT_SLIPS.get(self.units, []):
            if self._close(x, self.answer * factor, scale=factor):
                other = UNIT_NAMES.get(self.lang, {}).get(other, other)
                return self._say("unit_slip", other=other, units=self.units)
        return ""

    def check(self, response) -> Feedback:
        x = _to_float(response, self.units, self.lang)
        if self._close(x, self.answer):
            verdict = self._say("correct_number", answer=f"{self.answer:g}")
            return self._record(Feedback(True, f"{verdict} {self.explanation}".strip()))
        slip = self._slip(x)
        if slip:
            return self._record(Feedback(False, f"{self._say('not_quite_number', x=f'{x:g}')} {slip}"))
        side, why = ("too_low", self.feedback_low) if x < self.answer else ("too_high", self.feedback_high)
        why = why or self._say("try_again_hint" if self._hint else "try_again")
        return self._record(Feedback(False, f"{self._say(side, x=f'{x:g}')} {why}"))

    def _text_lines(self) -> list[str]:
        number = self._say("a_number_in", units=self.units) if self.units else self._say("a_number")
        return [self._say("answer_number", number=number)]

    def _input_widget(self, w):
        # A Text box (not FloatText) so an empty or malformed entry gets the clear error message
        # instead of silently becoming 0.0.
        placeholder = self._say("placeholder_in", units=self.units) if self.units else self._say("placeholder")
        return w.Text(placeholder=placeholder, layout=w.Layout(width="12em"))

    def _read(self, text_box):
        return text_box.value


@dataclass
class Score:
    correct: int
    answered: int
    total: int
    lang: str = "en"

    def __str__(self) -> str:
        return phrase(self.lang, "score", correct=self.correct, total=self.total, left=self.total - self.answered)


class Quiz(_Displayable):
    """A titled list of questions; displays them all and keeps a score of the latest answers.

    ``lang`` is the language of the fixed phrases of the quiz and of every question in it (given,
    it is set on the questions too; left out, the quiz speaks its first question's language)."""

    def __init__(self, title: str, questions: list[_Question], lang: str | None = None):
        self.title, self.questions = title, list(questions)
        if lang is None:
            self.lang = self.questions[0].lang if self.questions else "en"
        else:
            self.lang = _language(lang)
            for q in self.questions:
                q.lang = self.lang

    def __getitem__(self, i: int) -> _Question:
        return self.questions[i]

    def __len__(self) -> int:
        return len(self.questions)

    def check(self, responses: list) -> list[Feedback]:
        """Answer every question at once (one response per question, in order)."""
        if len(responses) != len(self.questions):
            raise QuizInputError(phrase(self.lang, "responses_count", got=len(responses), total=len(self.questions)))
        return [q.check(r) for q, r in zip(self.questions, responses)]

    def score(self) -> Score:
        """Count the questions whose latest check (by code or by the Check button) was correct."""
        answered = [q.last for q in self.questions if q.last is not None]
        return Score(sum(fb.correct for fb in answered), len(answered), len(self.questions), self.lang)

    def text(self) -> str:
        # Each question's "quiz.check(...)" becomes "quiz[i].check(...)" so the call is the real one.
        blocks = [phrase(self.lang, "question_heading", number=i + 1, index=i) + q.text().replace("quiz.", f"quiz[{i}].")
                  for i, q in enumerate(self.questions)]
        return "\n\n".join([self.title, *blocks])

    def widget(self):
        """VBox(title HTML, one question widget per question)."""
        w = _require_widgets()
        return w.VBox([w.HTML(f"<h3>{html.escape(self.title)}</h3>"), *(q.widget() for q in self.questions)])


class Checklist(_Displayable):
    """A completion checklist: Checkbox widgets and a live "n of N done" line.

    ``title`` defaults to "Before you move on" in the language ``lang``."""

    def __init__(self, items: list[str], title: str | None = None, lang: str = "en"):
        if not items or not all(isinstance(i, str) for i in items):
            raise ValueError(f"checklist needs a non-empty list of strings, got {items!r}")
        self.lang = _language(lang)
        self.items = list(items)
        self.title = phrase(self.lang, "checklist_title") if title is None else title

    def text(self) -> str:
        return "\n".join([self.title, *(f"  [ ] {item}" for item in self.items)])

    def widget(self):
        """VBox(title HTML, VBox(one Checkbox per item), progress HTML)."""
        w = _require_widgets()
        boxes = [w.Checkbox(description=item, indent=False, layout=w.Layout(width="auto"))
                 for item in self.items]
        progress = w.HTML()

        def update(_change=None):
            done = sum(b.value for b in boxes)
            progress.value = (phrase(self.lang, "checklist_progress", done=done, total=len(boxes))
                              + (phrase(self.lang, "checklist_done") if done == len(boxes) else ""))

        for b in boxes:
            b.observe(update, names="value")
        update()
        return w.VBox([w.HTML(f"<b>{html.escape(self.title)}</b>"), w.VBox(boxes), progress])


def checklist(items: list[str], title: str | None = None, lang: str = "en") -> Checklist:
    """A completion checklist; end a notebook cell with it to render the checkboxes
    (``title``: "Before you move on" in the language ``lang`` unless given)."""
    return Checklist(items, title, lang)
