"""Quiz cells that answer back, in Jupyter and without a browser.

Three question kinds share one interface:

- ``MultipleChoice``: one correct option, per-option feedback explaining why.
- ``MultiSelect``: several correct options ("tick every statement that is true").
- ``NumericAnswer``: a number compared with a tolerance, feedback for too low / too high.

``q.check(response)`` returns a ``Feedback(correct, message)``; ``q.hint()`` returns the hint.
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
    q.check("B")   # Feedback(correct=True, message='Correct. 0.26 / 0.20 = 1.3: ...')
"""

from __future__ import annotations

import html
import math
import numbers
from dataclasses import dataclass


class QuizInputError(ValueError, TypeError):
    """A response of the wrong kind (a ValueError and a TypeError, so either ``except`` works)."""


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

    def __init__(self, question: str, hint: str = ""):
        self.question = question
        self._hint = hint
        self.last: Feedback | None = None  # the most recent check, for Quiz.score()

    def hint(self) -> str:
        return self._hint or "No hint for this question."

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
        check_button = w.Button(description="Check", button_style="primary")
        hint_button = w.Button(description="Hint")
        feedback = w.HTML("")

        def on_check(_button):
            try:
                feedback.value = _feedback_html(self.check(self._read(answer_input)))
            except QuizInputError as err:
                feedback.value = f"<i>{html.escape(str(err))}</i>"

        def on_hint(_button):
            feedback.value = f"<i>Hint: {html.escape(self.hint())}</i>"

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


class MultipleChoice(_Question):
    """One correct option; ``feedback[label]`` explains why that option is right or wrong.

    ``options`` is a dict {label: text}, a list of (label, text) pairs, or a list of texts
    (labelled 'a', 'b', 'c', ...). Labels are matched case-insensitively, spaces stripped.
    """

    def __init__(self, question: str, options, answer: str, feedback: dict[str, str] | None = None,
                 hint: str = ""):
        super().__init__(question, hint)
        self.options = _normalise_options(options)
        self.answer = self._author_label(answer, "answer")
        self.feedback = {self._author_label(k, "feedback key"): v for k, v in (feedback or {}).items()}

    def _author_label(self, label, what: str) -> str:
        """Check a label written by the quiz author (a typo here is a ValueError, not a QuizInputError)."""
        key = str(label).strip().lower()
        if key not in self.options:
            raise ValueError(f"{what} {label!r} is not one of the option labels {list(self.options)}")
        return key

    def _usage(self) -> str:
        labels = ", ".join(repr(label) for label in self.options)
        return f"pass one of {labels} as a string, e.g. quiz.check({next(iter(self.options))!r})"

    def _label(self, response) -> str:
        """Normalise a response to a known option label ('B ' -> 'b'), or raise QuizInputError."""
        if not isinstance(response, str):
            raise QuizInputError(f"got {response!r} ({type(response).__name__}): {self._usage()}")
        label = response.strip().lower()
        if label not in self.options:
            raise QuizInputError(f"{response!r} is not an option: {self._usage()}")
        return label

    def check(self, response: str) -> Feedback:
        label = self._label(response)
        correct = label == self.answer
        why = self.feedback.get(label, "")
        return self._record(Feedback(correct, f"{'Correct.' if correct else 'Not quite.'} {why}".strip()))

    def _text_lines(self) -> list[str]:
        options = [f"  {label}) {text}" for label, text in self.options.items()]
        return [*options, f"Answer in code: {self._usage()}; quiz.hint() gives a hint."]

    def _input_widget(self, w):
        choices = [(f"{label}) {text}", label) for label, text in self.options.items()]
        return w.RadioButtons(options=choices, value=None, layout=w.Layout(width="auto"))

    def _read(self, radio):
        if radio.value is None:
            raise QuizInputError("Pick an option first.")
        return radio.value


class MultiSelect(MultipleChoice):
    """Several correct options. Correct only when exactly the right set is chosen; the message
    gives the feedback of every option chosen wrongly or missed (of all chosen ones when correct)."""

    def __init__(self, question: str, options, answers, feedback: dict[str, str] | None = None,
                 hint: str = ""):
        _Question.__init__(self, question, hint)
        self.options = _normalise_options(options)
        self.answers = {self._author_label(a, "answer") for a in answers}
        if not self.answers:
            raise ValueError("MultiSelect needs at least one correct answer")
        self.feedback = {self._author_label(k, "feedback key"): v for k, v in (feedback or {}).items()}

    def _usage(self) -> str:
        labels = ", ".join(repr(label) for label in self.options)
        return f"pass a list of labels from {labels}, e.g. quiz.check(['a', 'c']) or quiz.check('a, c')"

    def check(self, response) -> Feedback:
        if isinstance(response, str):  # "a, c" or "a c"
            response = response.replace(",", " ").split()
        if not isinstance(response, (list, tuple, set, frozenset)):
            raise QuizInputError(f"got {response!r} ({type(response).__name__}): {self._usage()}")
        chosen = {self._label(r) for r in response}
        wrong = chosen ^ self.answers  # chosen but false, or true but missed
        # When wrong, explain only the options whose choice differs from the truth.
        lines = [f"{label}) {self.feedback[label]}" for label in sorted(wrong or chosen)
                 if label in self.feedback]
        head = "Correct." if not wrong else f"Not quite: {len(wrong)} option(s) chosen wrongly or missed."
        return self._record(Feedback(not wrong, " ".join([head, *lines])))

    def _input_widget(self, w):
        boxes = [w.Checkbox(description=f"{label}) {text}", indent=False, layout=w.Layout(width="auto"))
                 for label, text in self.options.items()]
        return w.VBox(boxes)

    def _read(self, vbox):
        return [label for label, box in zip(self.options, vbox.children) if box.value]


def _to_float(response) -> float:
    """A finite float from an int, float, numpy scalar, one-element array/tensor or numeric string."""
    usage = "answer with one number, e.g. quiz.check(0.6) or quiz.check('0.6')"
    value = response
    if hasattr(value, "item") and hasattr(value, "shape"):  # numpy scalar/array, torch tensor
        if math.prod(value.shape) != 1:
            raise QuizInputError(f"got an array of shape {tuple(value.shape)}: {usage}")
        value = value.item()
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise QuizInputError(f"{response!r} is not a number: {usage}") from None
    # bool is an int subclass, but True is never a meant numeric answer.
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise QuizInputError(f"got {response!r} ({type(response).__name__}): {usage}")
    value = float(value)
    if not math.isfinite(value):
        raise QuizInputError(f"got {value}, which is not a finite number: {usage}")
    return value


class NumericAnswer(_Question):
    """A number checked with a tolerance.

    Correct when ``|response - answer| <= max(tol, rel_tol * |answer|)`` (``tol`` absolute,
    ``rel_tol`` relative, as in ``math.isclose``); the edge counts as correct, and float rounding
    at the edge (0.61 vs 0.6 with tol 0.01) is forgiven. A wrong answer shows ``feedback_low`` or
    ``feedback_high`` (what that mistake usually means), else a nudge towards the hint; a correct
    one shows ``explanation``. The expected value is not revealed by a wrong answer.
    """

    def __init__(self, question: str, answer: float, tol: float = 1e-2, rel_tol: float = 0.0,
                 feedback_low: str = "", feedback_high: str = "", explanation: str = "",
                 hint: str = ""):
        super().__init__(question, hint)
        self.answer = _to_float(answer)
        if tol < 0 or rel_tol < 0:
            raise ValueError(f"tolerances must be >= 0, got tol={tol}, rel_tol={rel_tol}")
        self.tol, self.rel_tol = tol, rel_tol
        self.feedback_low, self.feedback_high, self.explanation = feedback_low, feedback_high, explanation

    def check(self, response) -> Feedback:
        x = _to_float(response)
        allowed = max(self.tol, self.rel_tol * abs(self.answer))
        slack = 1e-12 * max(1.0, abs(self.answer))  # forgive float rounding exactly at the edge
        if abs(x - self.answer) <= allowed + slack:
            return self._record(Feedback(True, f"Correct: {self.answer:g}. {self.explanation}".strip()))
        side, why = ("low", self.feedback_low) if x < self.answer else ("high", self.feedback_high)
        why = why or ("Try again; quiz.hint() gives a hint." if self._hint else "Try again.")
        return self._record(Feedback(False, f"Not quite: {x:g} is too {side}. {why}"))

    def _text_lines(self) -> list[str]:
        return ["Answer in code: quiz.check(<a number>); quiz.hint() gives a hint."]

    def _input_widget(self, w):
        # A Text box (not FloatText) so an empty or malformed entry gets the clear error message
        # instead of silently becoming 0.0.
        return w.Text(placeholder="type a number", layout=w.Layout(width="12em"))

    def _read(self, text_box):
        return text_box.value


@dataclass
class Score:
    correct: int
    answered: int
    total: int

    def __str__(self) -> str:
        return f"{self.correct} of {self.total} correct ({self.total - self.answered} not answered yet)"


class Quiz(_Displayable):
    """A titled list of questions; displays them all and keeps a score of the latest answers."""

    def __init__(self, title: str, questions: list[_Question]):
        self.title, self.questions = title, list(questions)

    def __getitem__(self, i: int) -> _Question:
        return self.questions[i]

    def __len__(self) -> int:
        return len(self.questions)

    def check(self, responses: list) -> list[Feedback]:
        """Answer every question at once (one response per question, in order)."""
        if len(responses) != len(self.questions):
            raise QuizInputError(f"got {len(responses)} responses for {len(self.questions)} questions: "
                                 "pass one response per question, in order")
        return [q.check(r) for q, r in zip(self.questions, responses)]

    def score(self) -> Score:
        """Count the questions whose latest check (by code or by the Check button) was correct."""
        answered = [q.last for q in self.questions if q.last is not None]
        return Score(sum(fb.correct for fb in answered), len(answered), len(self.questions))

    def text(self) -> str:
        # Each question's "quiz.check(...)" becomes "quiz[i].check(...)" so the call is the real one.
        blocks = [f"Question {i + 1} (quiz[{i}]): " + q.text().replace("quiz.", f"quiz[{i}].")
                  for i, q in enumerate(self.questions)]
        return "\n\n".join([self.title, *blocks])

    def widget(self):
        """VBox(title HTML, one question widget per question)."""
        w = _require_widgets()
        return w.VBox([w.HTML(f"<h3>{html.escape(self.title)}</h3>"), *(q.widget() for q in self.questions)])


class Checklist(_Displayable):
    """A completion checklist: Checkbox widgets and a live "n of N done" line."""

    def __init__(self, items: list[str], title: str = "Before you move on"):
        if not items or not all(isinstance(i, str) for i in items):
            raise ValueError(f"checklist needs a non-empty list of strings, got {items!r}")
        self.items, self.title = list(items), title

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
            progress.value = f"{done} of {len(boxes)} done" + (": well done!" if done == len(boxes) else "")

        for b in boxes:
            b.observe(update, names="value")
        update()
        return w.VBox([w.HTML(f"<b>{html.escape(self.title)}</b>"), w.VBox(boxes), progress])


def checklist(items: list[str], title: str = "Before you move on") -> Checklist:
    """A completion checklist; end a notebook cell with it to render the checkboxes."""
    return Checklist(items, title)
