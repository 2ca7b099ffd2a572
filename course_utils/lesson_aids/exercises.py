"""Exercises: write a PPO formula yourself and check it against the library.

Each exercise is one function of the library (``ppo_math`` or ``rollout``). You write a function with
the same signature and the same return value, and ``check`` runs yours and the library's on a fixed
set of cases: random batches at several shapes and seeds, plus the edge cases the lessons teach
(padding after EOS, an EOS-only response, a truncated response, pad == eos, ratios on both sides of
the clip band, float32 inputs, extreme values on the padding, inf and NaN on the padding, a batch whose
real tokens are all equal, ...). When a case differs, the message names the case, the first
position that differs, and, when it recognises it, the common mistake that gives exactly your output.

In a notebook::

    from course_utils.lesson_aids import exercises
    print(exercises.stub("masked_mean"))          # the signature and the formula, to paste into a cell
    exercises.check("masked_mean", masked_mean)   # passed, or the first difference and a hint

Also: ``hint(name)``, ``show_solution(name)`` (the library's own source) and ``EXERCISES`` (the names in
lesson order, each with its week).

Safe to feed anything: the learner's function runs under a time limit (``TIME_LIMIT_S`` per case,
``check(..., time_limit=...)``), and an endless loop is stopped with a one-line message; the reference
is the library as it was when this module was imported, so a notebook's ``ppo_math.masked_mean =
my_masked_mean`` changes neither that exercise's reference nor the library functions that call it.

Language: ``check(name, fn, lang="ko")`` and ``hint(name, lang="ko")`` give the verdict, the diagnosis,
the hints and the cases' names in Korean (``LANGUAGES``; English is the default). The Korean texts
are in ``exercises_ko.py``, keyed by the English ones; the Korean lessons get ``lang="ko"`` from the
translation merge (``machinery/translations.py``). Code, identifiers and numbers stay as they are. A function that still raises ``NotImplementedError`` is reported
as "not attempted yet"; an error inside your function is reported, never raised.

The library is the reference: nothing in this file computes a correct formula. The functions named
``_wrong_...`` below are deliberately wrong versions, kept only to recognise what went wrong in yours.
"""

from __future__ import annotations

import ast
import contextvars
import inspect
import math
import os
import signal
import textwrap
import threading
import traceback
import types
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from typing import Any, Callable, Sequence

import torch

from course_utils import ppo_math as _ppo_math_as_loaded
from course_utils import rollout as _rollout_as_loaded

__all__ = ["EXERCISES", "LANGUAGES", "TIME_LIMIT_S", "CheckResult", "DisplayText", "DisplaySource", "check", "hint",
           "show_solution", "stub"]

TIME_LIMIT_S = 10.0
"""Seconds the learner's function may run on one case before check() stops it (the library takes
milliseconds on every case; ``check(..., time_limit=...)`` sets another limit for one call)."""


def _frozen(module: types.ModuleType, others: dict[str, types.ModuleType] | None = None) -> types.ModuleType:
    """A copy of ``module`` as it is now: each of its functions is copied with a copy of the module's
    namespace, taken now, as its globals. Assigning over a library function later (a notebook's
    ``ppo_math.masked_mean = my_masked_mean``) then changes neither the reference of that exercise
    nor the library functions that call it (``clipped_surrogate`` calls ``masked_mean``). Functions
    the module imported from a module in ``others`` are taken from that module's frozen copy."""
    frozen = types.ModuleType(module.__name__, module.__doc__)
    namespace = frozen.__dict__
    namespace.update(vars(module))
    for key, value in list(namespace.items()):
        if not isinstance(value, types.FunctionType):
            continue
        if value.__module__ == module.__name__:
            copy = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__,
                                      value.__closure__)
            copy.__kwdefaults__ = value.__kwdefaults__
            copy.__qualname__, copy.__doc__ = value.__qualname__, value.__doc__
            copy.__annotations__ = dict(value.__annotations__)
            namespace[key] = copy
        elif others and value.__module__ in others:
            namespace[key] = getattr(others[value.__module__], value.__name__, value)
    return frozen


# The library as this module was imported (with the kit, in a lesson's first cell): the references of
# check(), and what the deliberately wrong versions below are built from.
ppo_math = _frozen(_ppo_math_as_loaded)
_LIBRARY: dict[str, types.ModuleType] = {
    ppo_math.__name__: ppo_math,
    _rollout_as_loaded.__name__: _frozen(_rollout_as_loaded, {ppo_math.__name__: ppo_math}),
}

LANGUAGES = ("en", "ko")
"""The languages of check()'s and hint()'s messages (``lang=``)."""

_LANG: contextvars.ContextVar[str] = contextvars.ContextVar("exercises_lang", default="en")
"""The language of the message being built (set by check() and hint() for the length of the call)."""


def _say(key: str, **values: Any) -> str:
    """The fixed phrase ``key`` of a message, in the language of the current call."""
    from course_utils.lesson_aids.exercises_ko import PHRASES

    return PHRASES[_LANG.get()][key].format(**values)


def _tr(text: str) -> str:
    """``text`` (a hint, a case's name or note, written in English) in the language of the current
    call; English when it has no translation."""
    if _LANG.get() == "en" or not text:
        return text
    from course_utils.lesson_aids.exercises_ko import KOREAN

    return KOREAN.get(text, text)


def _in_language(lang: str):
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")
    return _LANG.set(lang)


# ---------------------------------------------------------------------------------------------
# What check() returns, and text that displays well
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class CheckResult:
    """The verdict of ``check``: ``passed`` and a ``message`` saying why.

    Ending a notebook cell with a ``CheckResult`` shows the message (coloured in Jupyter); ``print``
    and ``str`` give the same text.
    """

    name: str
    passed: bool
    message: str
    attempted: bool = True

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        # The verdict itself, not the field names: this is what a console or a plain-text notebook shows.
        return self.message

    def _repr_markdown_(self) -> str:
        first, _, rest = self.message.partition("\n")
        return f"**{escape(first)}**" + (f"\n\n```text\n{rest.strip()}\n```" if rest.strip() else "")

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else ("#9a6700" if not self.attempted else "#b3261e")
        return (
            f'<pre style="white-space:pre-wrap;border-left:4px solid {colour};padding:4px 8px;'
            f'margin:0">{escape(self.message)}</pre>'
        )


class DisplayText(str):
    """A string that a notebook shows as text (without quotes) when a cell ends with it."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return f"```text\n{self}\n```"


class DisplaySource(DisplayText):
    """Python source: shown highlighted in a notebook, as plain text in a console."""

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}\n```"


# ---------------------------------------------------------------------------------------------
# The public functions
# ---------------------------------------------------------------------------------------------


def check(name: str, fn: Callable[..., Any], lang: str = "en", time_limit: float | None = None) -> CheckResult:
    """Run your ``fn`` and the library's ``name`` on every case of the exercise and compare.

    Never raises because of your code (errors inside ``fn`` are reported in the message, and a call
    that runs longer than ``time_limit`` seconds, ``TIME_LIMIT_S`` by default, is stopped and reported
    as a likely endless loop); raises ``ValueError`` only for an unknown ``name`` or ``lang`` or a
    ``time_limit`` that is not a positive number. ``lang``: the message's language.
    """
    limit = TIME_LIMIT_S if time_limit is None else time_limit
    if not isinstance(limit, (int, float)) or not limit > 0:
        raise ValueError(f"time_limit must be a number of seconds > 0 (math.inf: no limit), got {time_limit!r}")
    token = _in_language(lang)
    try:
        return _check(name, fn, float(limit))
    finally:
        _LANG.reset(token)


def _check(name: str, fn: Callable[..., Any], limit: float) -> CheckResult:
    exercise = _exercise(name)
    if not callable(fn):
        return CheckResult(name, False, _say("not_callable", name=name, kind=type(fn).__name__))
    cases = exercise.cases()
    failures: list[_Failure] = []
    for position, case in enumerate(cases):
        failure = _run_case(exercise, case, fn, limit)
        if failure is not None and failure.timed_out:  # the cases after it would hang as well: stop here
            return CheckResult(name, False, _timeout_message(exercise, failure, limit))
        if failure is not None and failure.not_implemented and position == 0:
            return CheckResult(name, False, _not_attempted_message(exercise), attempted=False)
        if failure is not None:
            failures.append(failure)
    if not failures:
        names = "; ".join(_tr(case.name) for case in cases)
        return CheckResult(name, True, _say("passed", name=name, qualname=exercise.qualname, n=len(cases),
                                            names=names))
    return CheckResult(name, False, _failure_message(exercise, failures, len(cases)))


def hint(name: str, lang: str = "en") -> DisplayText:
    """A nudge for exercise ``name``, and the mistakes that ``check`` recognises (in ``lang``)."""
    exercise = _exercise(name)
    token = _in_language(lang)
    try:
        seen: list[str] = []
        for mistake in exercise.mistakes:
            if _tr(mistake.hint) not in seen:
                seen.append(_tr(mistake.hint))
        watch = "\n".join(f"- {text}" for text in seen)
        return DisplayText(f"{_tr(exercise.hint)}\n\n{_say('mistakes_heading')}\n{watch}")
    finally:
        _LANG.reset(token)


def show_solution(name: str) -> DisplaySource:
    """The library's own source of ``name`` (the reference solution)."""
    return DisplaySource(inspect.getsource(_exercise(name).reference()))


def stub(name: str) -> DisplaySource:
    """A starting point for a notebook cell: the signature, the docstring with the formula, no body."""
    exercise = _exercise(name)
    header, docstring = _header_and_docstring(exercise.reference())
    body = "\n".join([*header, *docstring, "    raise NotImplementedError  # YOUR CODE HERE"])
    return DisplaySource(
        f"{exercise.stub_imports}\n\n\n{body}\n\n\n"
        f"# Then run:  exercises.check({name!r}, {name})\n"
    )


def _exercise(name: str) -> _Exercise:
    try:
        return _EXERCISES[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name such as a list
        raise ValueError(f"unknown exercise {name!r}; choose one of: {', '.join(_EXERCISES)}") from None


def _header_and_docstring(fn: Callable) -> tuple[list[str], list[str]]:
    """The ``def`` line(s) and the docstring lines of ``fn``'s source, exactly as written."""
    lines = inspect.getsource(fn).splitlines()
    node = ast.parse(textwrap.dedent("\n".join(lines))).body[0]
    first = node.body[0]
    header = lines[: first.lineno - 1]
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
        and isinstance(first.value.value, str)
    return header, (lines[first.lineno - 1 : first.end_lineno] if is_docstring else [])


# ---------------------------------------------------------------------------------------------
# Exercises, cases and known mistakes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    """One call: positional ``args``, keyword ``kwargs``, a human ``name`` and what it is about."""

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    note: str = ""
    non_finite_padding: bool = False  # the padding holds inf and NaN: reading it shows as NaN in the result

    def fresh(self) -> tuple[list, dict]:
        # Every run gets its own copies, so a function that edits its inputs cannot affect another run.
        return [_clone(a) for a in self.args], {k: _clone(v) for k, v in self.kwargs.items()}


@dataclass(frozen=True)
class _Mistake:
    """A known mistake: the hint to give, and a deliberately wrong version that makes it."""

    hint: str
    wrong: Callable[..., Any]


@dataclass(frozen=True)
class _Exercise:
    name: str
    week: int
    module: str                          # where the reference lives, e.g. "course_utils.ppo_math"
    cases: Callable[[], list[_Case]]     # built anew on each check: no tensor is shared between checks
    mistakes: tuple[_Mistake, ...]
    hint: str                            # the generic hint, when no known mistake fits
    outputs: tuple[str, ...] = ()        # names of the returned tuple's elements; () = one tensor
    any_dtype: frozenset[int] = frozenset()  # outputs that may be bool, int or float (0/1 flags)
    grad_param: str | None = None        # a loss must carry the gradient with respect to this input
    stub_imports: str = "import torch"

    def reference(self) -> Callable[..., Any]:
        # The library as it was when this module was imported, whatever a notebook assigned over it since.
        return getattr(_LIBRARY[self.module], self.name)

    @property
    def qualname(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.name}"


def _clone(value: Any) -> Any:
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _argument(exercise: _Exercise, args: Sequence, kwargs: dict, param: str) -> Any:
    """The value passed for the parameter called ``param`` (None if the case does not pass it)."""
    names = list(inspect.signature(exercise.reference()).parameters)
    if param not in names:
        return None
    position = names.index(param)
    return args[position] if position < len(args) else kwargs.get(param)


# ---------------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------------


@dataclass
class _Difference:
    """How a result differs from the library's: ``kind`` is what went wrong, ``lines`` say where."""

    kind: str                 # "error", "type", "structure", "shape", "dtype", "device", "value", "inplace", "grad"
    lines: list[str]
    element: int | None = None   # which element of a returned tuple (None: the whole result)
    index: tuple = ()
    hint: str = ""            # a hint that follows from the difference itself (a dtype, an error)


@dataclass
class _Failure:
    case: _Case
    call: str
    difference: _Difference
    matches: list[int] = field(default_factory=list)  # known mistakes that reproduce the learner's output
    real_tokens_only: bool = False  # ... on the real tokens only (the padding is wrong as well)
    hints: list[str] = field(default_factory=list)    # hints when no known mistake matches
    not_implemented: bool = False
    timed_out: bool = False


def _run_case(exercise: _Exercise, case: _Case, fn: Callable, limit: float = math.inf) -> _Failure | None:
    """Compare ``fn`` with the library on one case; None when they agree."""
    expected, ref_input = _call(exercise.reference(), exercise, case)
    args, kwargs = case.fresh()
    untouched = case.fresh()
    grad_input = _requires_grad(exercise, args, kwargs)
    try:
        with torch.enable_grad():
            actual = _call_with_time_limit(fn, args, kwargs, limit)
    except _TimeLimit:
        return _Failure(case, _describe_call(exercise, case), _Difference("timeout", []), timed_out=True)
    except (Exception, SystemExit) as exc:  # anything the learner's code raises becomes part of the message
        difference = _error_difference(exercise, exc, fn)
        return _Failure(case, _describe_call(exercise, case), difference, hints=[difference.hint],
                        not_implemented=isinstance(exc, NotImplementedError))
    try:
        difference = (_changed_inputs(exercise, args, kwargs, *untouched)
                      or _compare_outputs(exercise, expected, actual)
                      or _compare_gradients(exercise, expected, ref_input, actual, grad_input))
    except Exception as exc:  # a result so unusual that comparing it failed: report, don't raise
        difference = _Difference("type", [_say("not_compared", error=f"{type(exc).__name__}: {exc}")])
    if difference is None:
        return None
    _say_which_position(exercise, case, difference)
    failure = _Failure(case, _describe_call(exercise, case), difference)
    _diagnose(exercise, failure, expected, actual)
    return failure


class _TimeLimit(BaseException):
    """Raised inside the learner's function when its time is up. A BaseException (like
    KeyboardInterrupt), so that a learner's ``except Exception:`` cannot swallow it."""


def _on_alarm(signum, frame):
    raise _TimeLimit


def _call_with_time_limit(fn: Callable, args: list, kwargs: dict, limit: float) -> Any:
    """``fn(*args, **kwargs)``, stopped with ``_TimeLimit`` after ``limit`` seconds.

    Two ways, chosen for what they leave behind. On the main thread of Linux and macOS, where a
    Jupyter kernel and a plain Python session run a cell, an interval timer (``signal.setitimer``)
    raises _TimeLimit inside the learner's function at its next line of Python (a ``time.sleep`` is
    woken too): the function unwinds like any exception, its ``with`` blocks and ``finally`` clauses
    run, nothing keeps running behind the cell, and the handler and timer that were there before are
    put back, so the kernel is left as it was. Where that cannot be used (Windows, a thread other than
    the main one, or an interval timer already running that belongs to someone else), the function
    runs in a daemon worker thread: check() waits for it until the deadline, then raises _TimeLimit
    in it (``PyThreadState_SetAsyncExc``), which also takes effect at its next line of Python.
    Neither way can cut short a single C call that never returns, only Python code, which is where
    an endless loop in an exercise is.
    """
    if not math.isfinite(limit):
        return fn(*args, **kwargs)
    if _alarm_is_free():
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
    return _call_in_worker(fn, args, kwargs, limit)


def _alarm_is_free() -> bool:
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


def _call_in_worker(fn: Callable, args: list, kwargs: dict, limit: float) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            with torch.enable_grad():  # autograd's mode is per thread
                box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=run, name="exercise-check", daemon=True)
    worker.start()
    try:
        worker.join(limit)
    finally:  # the deadline passed, or Ctrl-C while waiting: stop the learner's function either way
        if worker.is_alive():
            _raise_in_thread(worker, _TimeLimit)
    if worker.is_alive() or isinstance(box.get("error"), _TimeLimit):
        raise _TimeLimit
    if "error" in box:
        raise box["error"]
    return box["result"]


def _raise_in_thread(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    try:
        import ctypes

        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))
    except Exception:  # not CPython: the daemon thread runs on until the kernel ends, the check still answers
        pass


def _say_which_position(exercise: _Exercise, case: _Case, difference: _Difference) -> None:
    """Add what the differing [B, T] position is: padding, a real token, or the row's last real token."""
    mask = _argument(exercise, case.args, case.kwargs, "mask")
    if difference.kind not in ("value", "grad") or len(difference.index) != 2 \
            or not torch.is_tensor(mask) or mask.dim() != 2:
        return
    row, col = difference.index
    if not bool(mask[row, col]):
        what = _say("padding_position")
    elif col == int(ppo_math.last_token_index(mask.bool())[row]):
        what = _say("last_real_token", row=row)
    else:
        what = _say("real_token", row=row)
    difference.lines.append(_say("position_is", index=difference.index, what=what))


def _call(fn: Callable, exercise: _Exercise, case: _Case) -> tuple[Any, torch.Tensor | None]:
    """Run the library on fresh copies; returns the result and the input that carries the gradient."""
    args, kwargs = case.fresh()
    grad_input = _requires_grad(exercise, args, kwargs)
    with torch.enable_grad():
        return fn(*args, **kwargs), grad_input


def _requires_grad(exercise: _Exercise, args: list, kwargs: dict) -> torch.Tensor | None:
    if exercise.grad_param is None:
        return None
    tensor = _argument(exercise, args, kwargs, exercise.grad_param)
    return tensor.requires_grad_(True)


def _run_wrong(wrong: Callable, case: _Case) -> Any:
    """A known-wrong version's output on ``case``, or None if it does not apply there."""
    args, kwargs = case.fresh()
    try:
        with torch.no_grad():
            return wrong(*args, **kwargs)
    except Exception:
        return None


def _changed_inputs(exercise: _Exercise, args: list, kwargs: dict, before_args: list,
                    before_kwargs: dict) -> _Difference | None:
    names = list(inspect.signature(exercise.reference()).parameters)
    pairs = [*zip(names, args, before_args), *((k, kwargs[k], before_kwargs[k]) for k in kwargs)]
    for name, after, before in pairs:
        if torch.is_tensor(after) and not _same_values(after.detach(), before):
            return _Difference("inplace", [_say("in_place", name=name)], hint=_HINT_IN_PLACE)
    return None


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and values, a NaN equal to a NaN (some cases hold NaN on the padding)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


# ---------------------------------------------------------------------------------------------
# Comparing results
# ---------------------------------------------------------------------------------------------


def _tolerance(dtype: torch.dtype, loose: bool = False) -> tuple[float, float]:
    """(rtol, atol) for results of this dtype: float32 keeps about 7 digits, float64 about 16."""
    if not dtype.is_floating_point:
        return 0.0, 0.0  # integers and booleans must match exactly
    rtol, atol = (1e-7, 1e-9) if dtype == torch.float64 else (1e-5, 1e-6)
    return (10 * rtol, 10 * atol) if loose else (rtol, atol)


def _compare_outputs(exercise: _Exercise, expected: Any, actual: Any) -> _Difference | None:
    if not exercise.outputs:
        return _compare_tensor(expected, actual, _say("the_result"))
    n = len(exercise.outputs)
    wanted = _say("tuple_of", n=n, names=", ".join(exercise.outputs))
    if not isinstance(actual, (tuple, list)):
        return _Difference("structure", [_say("returned_kind", kind=_kind_of(actual), wanted=wanted)])
    if len(actual) != n:
        return _Difference("structure", [_say("returned_count", n=len(actual), wanted=wanted)])
    for k, (e, a) in enumerate(zip(expected, actual)):
        difference = _compare_tensor(e, a, _say("output_k", k=k, name=exercise.outputs[k]), k in exercise.any_dtype)
        if difference is not None:
            difference.element = k
            return difference
    return None


def _compare_tensor(expected: torch.Tensor, actual: Any, what: str, any_dtype: bool = False) -> _Difference | None:
    if actual is None:
        return _Difference("type", [_say("is_none", what=what)], hint=_say("hint_return"))
    if not torch.is_tensor(actual):
        return _Difference("type", [_say("not_tensor", what=what, kind=_kind_of(actual))], hint=_say("hint_tensor"))
    if actual.shape != expected.shape:
        scalar = _say("zero_dim") if expected.dim() == 0 else ""
        return _Difference("shape", [_say("wrong_shape", what=what, got=_shape(actual), expected=_shape(expected),
                                          scalar=scalar)])
    if not any_dtype and not _same_dtype(expected.dtype, actual.dtype):
        return _Difference("dtype", [_say("wrong_dtype", what=what, got=_dtype(actual), expected=_dtype(expected))],
                           hint=_say("hint_dtype", expected=_dtype(expected), full=expected.dtype))
    if actual.device != expected.device:  # compared below only on one device: say it first, with the fix
        return _Difference("device", [_say("wrong_device", what=what, got=actual.device.type, expected=expected.device.type)],
                           hint=_say("hint_device"))
    return _first_difference(expected, actual, what)


def _same_dtype(expected: torch.dtype, actual: torch.dtype) -> bool:
    # Floats must match exactly (float32 in, float32 out); any integer type will do for an index.
    if expected.is_floating_point or actual.is_floating_point:
        return expected == actual
    return (expected == torch.bool) == (actual == torch.bool)


def _first_difference(expected: torch.Tensor, actual: torch.Tensor, what: str) -> _Difference | None:
    rtol, atol = _tolerance(expected.dtype)
    e, a = expected.detach().double(), actual.detach().double()
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    index = tuple(int(i) for i in (~close).nonzero()[0])
    count = int((~close).sum())
    tail = _say("entries_differ", count=count, n=close.numel()) if close.numel() > 1 else ""
    key = "differs_at" if index else "differs_scalar"
    return _Difference("value", [_say(key, what=what, index=index, expected=_number(e[index]),
                                      got=_number(a[index]), tail=tail)], index=index)


def _compare_gradients(exercise: _Exercise, expected: Any, ref_input: torch.Tensor | None, actual: Any,
                       grad_input: torch.Tensor | None) -> _Difference | None:
    """For a loss: does its gradient reach the input, and is it the library's gradient?"""
    if exercise.grad_param is None or ref_input is None or grad_input is None:
        return None
    loss, what = actual[0], _say("gradient_of", output=exercise.outputs[0], param=exercise.grad_param)
    if not loss.requires_grad:
        return _Difference("grad", [_say("no_gradient", output=exercise.outputs[0], param=exercise.grad_param)],
                           element=0, hint=_HINT_DETACHED)
    (mine,) = torch.autograd.grad(loss, grad_input, allow_unused=True)
    (library,) = torch.autograd.grad(expected[0], ref_input)
    if mine is None:
        mine = torch.zeros_like(library)
    difference = _first_difference(library, mine, what)
    if difference is not None:
        not_finite = ~torch.isfinite(mine.detach()) & torch.isfinite(library)
        difference.kind, difference.element = "grad", 0
        difference.hint = _HINT_NAN_GRADIENT if bool(not_finite.any()) else _HINT_GRADIENT
    return difference


def _close(a: Any, b: Any, tol: tuple[float, float], region: torch.Tensor | None = None) -> bool:
    """Same shape and the same values (on ``region`` only, when it is given and fits)."""
    if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    if region is not None and region.shape == a.shape:
        a, b = a[region], b[region]
    return bool(torch.isclose(a, b, rtol=tol[0], atol=tol[1], equal_nan=True).all())


def _element(output: Any, k: int | None) -> Any:
    if k is None:
        return output
    return output[k] if isinstance(output, (tuple, list)) and len(output) > k else None


# ---------------------------------------------------------------------------------------------
# Diagnosis: which known mistake gives the learner's output?
# ---------------------------------------------------------------------------------------------


def _diagnose(exercise: _Exercise, failure: _Failure, expected: Any, actual: Any) -> None:
    """Fill in which known mistakes give the learner's output on this case (or pattern hints)."""
    difference = failure.difference
    if difference.kind not in ("value", "shape"):
        failure.hints = [difference.hint] if difference.hint else []
        return
    k = difference.element
    target = _element(expected, k)
    if failure.case.non_finite_padding and _non_finite_where_finite(_element(actual, k), target):
        # Whatever the exact code, a result that turns NaN only when the padding holds inf or NaN read it.
        failure.hints = [_HINT_READS_PADDING]
        return
    tol = _tolerance(target.dtype, loose=True)
    real = _real_positions(exercise, failure.case, target)
    wrong_outputs = [_run_wrong(mistake.wrong, failure.case) for mistake in exercise.mistakes]
    # First the whole output, then the real tokens only: a learner may make a known mistake *and*
    # leave garbage on the padding, and the known mistake is the more useful thing to hear about.
    for region in (None, real) if real is not None else (None,):
        failure.matches = [i for i, wrong in enumerate(wrong_outputs)
                           if _reproduces(wrong, actual, expected, k, tol, region)]
        if failure.matches:
            failure.real_tokens_only = region is not None
            return
    failure.hints = _pattern_hints(_element(actual, k), target, real, tol)


def _reproduces(wrong: Any, actual: Any, expected: Any, k: int | None, tol: tuple[float, float],
                region: torch.Tensor | None) -> bool:
    """Does this wrong output differ from the library's and equal the learner's where they differ?"""
    candidate = _element(wrong, k)
    if candidate is None or _close(candidate, _element(expected, k), tol, region):
        return False  # this mistake does not show on this case
    if not _close(_element(actual, k), candidate, tol, region):
        return False
    # The elements before k are right in the learner's output; a mistake that also changes them is another one.
    return all(_close(_element(wrong, j), _element(expected, j), tol) for j in range(k or 0))


def _real_positions(exercise: _Exercise, case: _Case, target: torch.Tensor) -> torch.Tensor | None:
    """The bool mask of real tokens, when the case has a mask of the output's shape."""
    mask = _argument(exercise, case.args, case.kwargs, "mask")
    if not torch.is_tensor(mask) or mask.shape != target.shape:
        return None
    return mask.bool()


def _non_finite_where_finite(mine: Any, target: torch.Tensor) -> bool:
    if not torch.is_tensor(mine) or mine.shape != target.shape:
        return False
    return bool((~torch.isfinite(mine.detach().double()) & torch.isfinite(target.detach().double())).any())


def _pattern_hints(mine: Any, target: torch.Tensor, real: torch.Tensor | None, tol: tuple[float, float]) -> list[str]:
    if not torch.is_tensor(mine) or mine.shape != target.shape:
        return []
    hints = []
    if real is not None and _close(mine, target, tol, real):
        hints.append(_HINT_PADDING)  # right on every real token, wrong only on the padding
    finite = torch.isfinite(target)
    if bool((~torch.isfinite(mine.detach().double()) & finite).any()):
        hints.append(_HINT_NAN)
    return hints


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------


def _not_attempted_message(exercise: _Exercise) -> str:
    return _say("not_attempted", name=exercise.name, quoted=repr(exercise.name))


def _timeout_message(exercise: _Exercise, failure: _Failure, limit: float) -> str:
    lines = [_say("timed_out", name=exercise.name, seconds=f"{limit:g}"), "",
             _say("case_line", case=_tr(failure.case.name), call=failure.call)]
    if failure.case.note:
        lines.append(_say("this_case", note=_tr(failure.case.note)))
    return "\n".join([*lines, _say("hint_line", hint=_say("hint_endless_loop"))])


def _failure_message(exercise: _Exercise, failures: list[_Failure], n_cases: int) -> str:
    first = failures[0]
    lines = [_say("failed", name=exercise.name, qualname=exercise.qualname, k=len(failures), n=n_cases),
             "", _say("case_line", case=_tr(first.case.name), call=first.call)]
    lines += [f"  {line}" for line in first.difference.lines]
    if first.case.note:
        lines.append(_say("this_case", note=_tr(first.case.note)))
    lines += _hint_lines(exercise, failures)
    others = [f'"{_tr(f.case.name)}"' for f in failures[1:]]
    if others:
        shown = ", ".join(others[:6]) + (_say("and_more", n=len(others) - 6) if len(others) > 6 else "")
        lines.append(_say("also_failing", shown=shown))
    return "\n".join(lines)


def _hint_lines(exercise: _Exercise, failures: list[_Failure]) -> list[str]:
    # What the first failure itself says (a dtype, an error, garbage on the padding) comes first; then
    # the known mistake that reproduces the learner's output on the most failing cases (a tie goes to
    # the one listed first: on one case two mistakes can give the same numbers, rarely on all of them).
    hints = [_tr(text) for text in failures[0].hints]
    counts = Counter(i for failure in failures for i in failure.matches)
    if counts:
        best = min(counts, key=lambda i: (-counts[i], i))
        source = next(failure for failure in failures if best in failure.matches)
        hints.append(_say("exactly_this_mistake", hint=_tr(exercise.mistakes[best].hint), case=_tr(source.case.name)))
        hints += [_tr(_HINT_PADDING)] if source.real_tokens_only else []
    hints = list(dict.fromkeys(hints)) or [_tr(exercise.hint)]  # each hint once, in order
    return [_say("hint_line", hint=hints[0])] + [_say("also_line", hint=text) for text in hints[1:]]


def _error_difference(exercise: _Exercise, exc: Exception, fn: Callable) -> _Difference:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 300 else text[:297] + "..."
    lines = [_say("raised", error=type(exc).__name__) + (f": {text}" if text else "")]
    where = _where_in_learner_code(exc, fn)
    if where:
        lines.append(_say("at", where=where))
    return _Difference("error", lines, hint=_exception_hint(exercise, exc))


def _where_in_learner_code(exc: BaseException, fn: Callable) -> str:
    """'line N of name: source' for the deepest frame of the learner's own code, or ''."""
    frames = traceback.extract_tb(exc.__traceback__)
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    theirs = [f for f in frames if code is not None and f.filename == code.co_filename]
    if not theirs:  # a callable object or a partial: the deepest frame outside this file and torch
        torch_dir = os.path.dirname(torch.__file__)
        theirs = [f for f in frames if f.filename != __file__ and not f.filename.startswith(torch_dir)]
    if not theirs:
        return ""
    frame = theirs[-1]
    line = (frame.line or "").strip()
    return _say("line_of", line=frame.lineno, function=frame.name) + (f": {line}" if line else "")


def _exception_hint(exercise: _Exercise, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotImplementedError):
        return _say("part_not_written")
    for pattern, advice in _EXCEPTION_HINTS:
        if pattern in text:
            return _tr(advice).format(signature=_signature_text(exercise))
    return _tr(exercise.hint)


def _signature_text(exercise: _Exercise) -> str:
    header, _ = _header_and_docstring(exercise.reference())
    text = " ".join(" ".join(header).split()).removeprefix("def ").removesuffix(":")
    return text.replace("( ", "(").replace(", )", ")")  # a signature split over lines, joined back


def _describe_call(exercise: _Exercise, case: _Case) -> str:
    names = list(inspect.signature(exercise.reference()).parameters)
    parts = [f"{n}={_describe_value(n, v)}" for n, v in zip(names, case.args)]
    parts += [f"{n}={_describe_value(n, v)}" for n, v in case.kwargs.items()]
    return f"{exercise.name}({', '.join(parts)})"


def _describe_value(name: str, value: Any) -> str:
    if not torch.is_tensor(value):
        return repr(value)
    head = f"[{', '.join(map(str, value.shape))}] {_dtype(value)}"
    if name == "mask" and value.dim() == 2:
        counts = ", ".join(str(int(c)) for c in value.bool().sum(-1))
        return _say("mask_value", head=head, counts=counts)
    if not value.is_floating_point() and value.numel() <= 40:
        return f"tensor({value.tolist()})"  # token ids: small enough to read in full
    if value.numel() <= 6:
        if value.dim() == 0:
            return f"tensor({float(value):.4g})"
        return f"tensor({[round(float(v), 4) for v in value.flatten()]})"
    return f"<{head} tensor>"


def _kind_of(value: Any) -> str:
    """'None', 'a float', 'a numpy.ndarray': what the learner returned, for the message."""
    if value is None:
        return "None"
    module = type(value).__module__.split(".")[0]
    return _say("a_kind", kind=type(value).__name__ if module == "builtins" else f"{module}.{type(value).__name__}")


def _shape(t: torch.Tensor) -> str:
    return f"({', '.join(map(str, t.shape))}{',' if t.dim() == 1 else ''})"


def _dtype(t: torch.Tensor | torch.dtype) -> str:
    return str(t.dtype if torch.is_tensor(t) else t).removeprefix("torch.")


def _number(x: torch.Tensor) -> str:
    value = float(x)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.7g}"


# Hints shared by several exercises.
_HINT_PADDING = ("Every per-token output must be exactly 0 where mask is 0 (the padding): finish with "
                 "torch.where(mask.bool(), result, 0.0).")
_HINT_NAN = ("Your result has NaN or inf where the library's is finite: a 0 / 0 (a row without real tokens), "
             "an exp() that overflowed or underflowed, or inf * 0 from multiplying by the mask. Select with "
             "torch.where instead of multiplying, and divide only where the count is > 0.")
_HINT_IN_PLACE = ("Do not modify the inputs: the caller still needs them, and autograd breaks on in-place edits "
                  "of a tensor that requires grad. Build new tensors (torch.where, x.clone(), out-of-place ops).")
_HINT_DETACHED = ("Something on the way cut the graph: .item(), .detach(), float(...), NumPy, torch.no_grad() "
                  "or torch.tensor(...) of an intermediate result. Keep every step a torch operation on the inputs.")
_HINT_GRADIENT = ("The loss value is right but its gradient is not: part of the computation was detached or "
                  "replaced by a constant. Build the loss from the inputs with torch operations only.")
_HINT_NAN_GRADIENT = ("The loss value is right but its gradient is NaN or inf where the library's is finite: "
                      "exp() overflowed on the garbage that the padding holds, and masking after exp() (torch.where "
                      "or × mask) hides the value but not the gradient (the backward pass computes 0 · inf = NaN). "
                      "Blank the padding before exp(): torch.where(mask.bool(), logprobs - old_logprobs, 0.0). A NaN "
                      "here spreads, through the backward pass, to the gradient of every weight.")
_HINT_PADDING_COUNTED = ("Your mean counted the padding: you divided by the number of all positions, padding "
                         "included. Divide by the number of real tokens, mask.sum().")
_HINT_TOKEN_LEVEL = ("You averaged per-response means. The library takes a token-level mean: the sum over every "
                     "real token of the batch divided by their number, so long responses weigh more.")
_HINT_RATIO_UPSIDE_DOWN = ("Your ratio is upside down: r = π_θ / π_old = exp(logprobs - old_logprobs), the "
                           "current policy's log-probs minus the old ones (you swapped new and old).")
_HINT_BOOTSTRAP = ("V_{t+1} = 0 after the last real token: the episode ends at the EOS, so nothing may be "
                   "bootstrapped from the value stored on the padding after it.")
_HINT_ROLL = ("torch.roll wraps around: the last column's V_{t+1} became V_0 of the same row. Shift by "
              "appending a column of zeros instead (torch.cat([v[:, 1:], zeros], dim=1)).")
_HINT_NEVER_CLIPPED = "You never clipped: the clipped term never takes part, so large moves are not limited."
_HINT_READS_PADDING = ("Your function read the padding: here it holds inf and NaN, as a real batch can (the log-prob "
                       "of a token the sampler banned is -inf; a value computed on garbage can overflow), and your "
                       "result is NaN or inf where the library's is finite. Multiplying by the mask does not remove "
                       "such values (inf * 0 = NaN, NaN * 0 = NaN): select with torch.where(mask.bool(), x, 0.0) "
                       "before computing, as the library does.")
_HINT_NO_EPS = ("Add eps inside the square root: (x - mean) / sqrt(var + eps). When every real token holds the same "
                "value (advantages that are all 0, as a batch whose scores are all 0 can give), the variance is 0 and, "
                "without eps, the whitening divides 0 by 0 (NaN).")
_HINT_SURROGATE_PROBABILITIES = ("exp() of each log-prob underflows to 0 for very unlikely tokens (log-probs near "
                                 "-110 in float32), and 0 / 0 = NaN: compute the ratio from the difference of the "
                                 "log-probs, exp(logprobs - old_logprobs).")

_EXCEPTION_HINTS: tuple[tuple[str, str], ...] = (
    ("tensors used as indices",
     "The mask may be float (1.0 / 0.0): index with mask.bool(), or select with torch.where."),
    ("in-place", _HINT_IN_PLACE),
    ("unexpected keyword argument", "Your function must accept the same arguments as the library's: {signature}"),
    ("positional argument", "Your function must accept the same arguments as the library's: {signature}"),
    ("must match the size", "Two tensors of different shapes met: check which ones are [B, T] and which are [B]."),
)


# ---------------------------------------------------------------------------------------------
# Input builders shared by the cases
# ---------------------------------------------------------------------------------------------

DT = torch.float64  # the lessons compute in double precision; one case per exercise uses float32


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mask(lengths: Sequence[int], width: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """1 on the first ``length`` positions of each row, 0 after: real tokens first, then padding."""
    positions = torch.arange(width).expand(len(lengths), width)
    return (positions < torch.tensor(lengths).unsqueeze(1)).to(dtype)


def _normal(gen: torch.Generator, shape: Sequence[int], dtype: torch.dtype, mean: float = 0.0,
            std: float = 1.0) -> torch.Tensor:
    # Drawn in float64 and then cast, so the float32 case holds the same numbers as a float64 one would.
    return (mean + std * torch.randn(tuple(shape), generator=gen, dtype=DT)).to(dtype)


def _logprobs(gen: torch.Generator, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.log(0.05 + 0.9 * torch.rand(tuple(shape), generator=gen, dtype=DT)).to(dtype)


def _zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype))


def _times_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x * mask: 0 on the padding where x is finite there, NaN where it holds inf or NaN (inf * 0)."""
    return x * mask.to(x.dtype)


def _non_finite(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` with inf, NaN and -inf in turn on the padding; the real tokens keep their values."""
    filler = torch.tensor([math.inf, math.nan, -math.inf], dtype=x.dtype)[torch.arange(x.numel()) % 3]
    return torch.where(mask.bool(), x, filler.reshape(x.shape))


_NON_FINITE_NOTE = ("the padding holds inf, NaN and -inf, as a real batch can (the log-prob of a token the sampler "
                    "banned is -inf; a value computed on garbage can overflow): a correct function never reads it, and "
                    "x * mask does not remove it (inf * 0 = NaN)")


# The standard batches: (name, seed, width, lengths, dtype, note). The inputs are random everywhere,
# padding included (garbage there on purpose: a correct implementation never reads it), and the
# lengths differ inside every batch, so a mean that counts the padding, or a recursion that leaks
# from it, gives another number.
_BATCHES: tuple[tuple[str, int, int, tuple[int, ...], torch.dtype, str], ...] = (
    ("random batch (seed 0, 4 x 7)", 0, 7, (7, 3, 5, 2), DT, ""),
    ("random batch (seed 1, 3 x 12)", 1, 12, (12, 9, 4), DT, ""),
    ("padding after EOS", 2, 6, (4, 2), DT,
     "both responses end with an EOS followed by padding; the values stored on the padding are garbage"),
    ("an EOS-only response", 3, 5, (1, 4), DT, "row 0 is only its EOS: mask [1, 0, 0, 0, 0]"),
    ("a truncated response (no EOS)", 4, 6, (6, 3), DT,
     "row 0 was cut off at the length limit: all 6 positions are real, its last real token is the last column"),
    ("a batch where one row has one token", 5, 6, (6, 1, 4, 2), DT, "row 1 has a single real token"),
    ("float32 inputs", 6, 8, (8, 5, 2), torch.float32, "float32 tensors, as in a real rollout: float32 out"),
)

_MakeArgs = Callable[[torch.Generator, torch.Tensor, torch.dtype], tuple[tuple, dict]]


def _batch_case(name: str, seed: int, width: int, lengths: Sequence[int], make: _MakeArgs,
                dtype: torch.dtype = DT, note: str = "", mask_dtype: torch.dtype = torch.float32,
                **kwargs: Any) -> _Case:
    args, made_kwargs = make(_generator(seed), _mask(lengths, width, mask_dtype), dtype)
    return _Case(name, args, {**made_kwargs, **kwargs}, note)


def _non_finite_case(name: str, seed: int, width: int, lengths: Sequence[int], make: _MakeArgs,
                     dtype: torch.dtype = DT, **kwargs: Any) -> _Case:
    """A standard batch whose float [B, T] inputs hold inf, NaN and -inf on the padding."""
    mask = _mask(lengths, width)
    args, made_kwargs = make(_generator(seed), mask, dtype)
    args = tuple(_non_finite(a, mask) if torch.is_tensor(a) and a is not mask and a.shape == mask.shape
                 and a.is_floating_point() else a for a in args)
    return _Case(name, args, {**made_kwargs, **kwargs}, _NON_FINITE_NOTE, non_finite_padding=True)


def _batch_cases(make: _MakeArgs) -> list[_Case]:
    return [_batch_case(name, seed, width, lengths, make, dtype, note)
            for name, seed, width, lengths, dtype, note in _BATCHES]


# ---------------------------------------------------------------------------------------------
# Week 2: response_mask_from_ids
# ---------------------------------------------------------------------------------------------

_EOS, _PAD = 2, 0  # in the hand-made responses; ordinary tokens have ids >= 4


def _ids(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


def _random_responses(seed: int, batch: int, width: int, pad: int) -> torch.Tensor:
    """Random token ids; each row stops at a random position (or never) and is padded after its EOS."""
    gen = _generator(seed)
    ids = torch.randint(4, 50, (batch, width), generator=gen)
    stops = torch.randint(0, width + 3, (batch,), generator=gen)  # >= width: no EOS, truncated
    for row, stop in enumerate(stops.tolist()):
        if stop < width:
            ids[row, stop], ids[row, stop + 1:] = _EOS, pad
    return ids


def _response_mask_cases() -> list[_Case]:
    return [
        _Case("padding after EOS", (_ids([[5, 9, 7, 2, 0, 0], [8, 2, 0, 0, 0, 0]]), _EOS),
              note="pad id 0, EOS id 2: the EOS is kept (mask 1), the padding after it gets 0"),
        _Case("an EOS-only response", (_ids([[2, 0, 0, 0, 0], [6, 7, 2, 0, 0]]), _EOS),
              note="row 0 is an empty answer, EOS first: mask [1, 0, 0, 0, 0], last_index 0"),
        _Case("a truncated response (no EOS)", (_ids([[4, 5, 6, 7, 8], [4, 2, 0, 0, 0]]), _EOS),
              note="row 0 has no EOS: every position is real, last_index = T - 1, truncated = True"),
        _Case("EOS on the last column", (_ids([[4, 5, 6, 7, 2], [4, 5, 6, 7, 8]]), _EOS),
              note="row 0 ended with its EOS exactly at the length limit: it ended, it is not truncated"),
        _Case("pad == eos", (_ids([[5, 9, 2, 2, 2, 2], [2, 2, 2, 2, 2, 2], [4, 5, 6, 7, 8, 9]]), _EOS),
              note="the pad id is the EOS id (as for SmolLM2): only the FIRST EOS ends the response"),
        _Case("random responses (seed 0, 5 x 8)", (_random_responses(0, 5, 8, _PAD), _EOS)),
        _Case("random responses, pad == eos (seed 1, 6 x 10)", (_random_responses(1, 6, 10, _EOS), _EOS)),
        _Case("two stop tokens (eos_token_id is a list)",
              (_ids([[4, 5, 3, 0, 0], [4, 2, 0, 0, 0], [6, 7, 8, 9, 4]]), [2, 3]),
              note="eos_token_id = [2, 3]: either id ends the response (torch.isin)"),
        _Case("a single column (T = 1)", (_ids([[2], [7]]), _EOS),
              note="responses of one generated token: an EOS (ended) and a word (truncated)"),
    ]


def _is_stop(ids: torch.Tensor, eos_token_id: int | Sequence[int]) -> torch.Tensor:
    return torch.isin(ids, torch.as_tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)))


def _library_response_mask(ids: torch.Tensor, eos_token_id: int | Sequence[int]) -> tuple:
    return _EXERCISES["response_mask_from_ids"].reference()(ids, eos_token_id)


def _with_mask(mask: torch.Tensor, ids: torch.Tensor, eos_token_id: int | Sequence[int]) -> tuple:
    """A wrong mask together with the last index it implies (the flags from the library)."""
    _, _, ended, truncated = _library_response_mask(ids, eos_token_id)
    return mask, ppo_math.last_token_index(mask), ended, truncated


def _wrong_mask_drops_eos(response_ids, eos_token_id):
    """mask = 1 while no EOS has been seen *up to and including* t: the EOS itself gets 0."""
    mask = (_is_stop(response_ids, eos_token_id).long().cumsum(-1) == 0).float()
    return _with_mask(mask, response_ids, eos_token_id)


def _wrong_mask_from_ids(response_ids, eos_token_id):
    """mask = ids != eos: compares token values instead of positions."""
    return _with_mask((~_is_stop(response_ids, eos_token_id)).float(), response_ids, eos_token_id)


def _wrong_mask_argmax(response_ids, eos_token_id):
    """first_eos = argmax(is_eos): for a row without EOS, argmax is 0, so only position 0 survives."""
    first = _is_stop(response_ids, eos_token_id).long().argmax(dim=-1, keepdim=True)
    mask = (torch.arange(response_ids.shape[1]) <= first).float()
    return _with_mask(mask, response_ids, eos_token_id)


def _wrong_last_index_is_length(response_ids, eos_token_id):
    mask, _, ended, truncated = _library_response_mask(response_ids, eos_token_id)
    return mask, mask.sum(-1).long(), ended, truncated


def _wrong_truncated_from_last_column(response_ids, eos_token_id):
    mask, last, _, _ = _library_response_mask(response_ids, eos_token_id)
    truncated = last == response_ids.shape[1] - 1
    return mask, last, ~truncated, truncated


def _wrong_only_first_stop_id(response_ids, eos_token_id):
    first_id = eos_token_id if isinstance(eos_token_id, int) else next(iter(eos_token_id))
    return _library_response_mask(response_ids, first_id)


_RESPONSE_MASK_MISTAKES = (
    _Mistake("The first EOS is an action the policy chose (stopping): keep it in the mask. mask[t] = 1 while "
             "no EOS came *before* t, so the EOS itself gets 1.", _wrong_mask_drops_eos),
    _Mistake("Build the mask from positions, not from token values (ids != eos): everything after the first "
             "EOS is 0 whatever its id, and the EOS itself is 1.", _wrong_mask_from_ids),
    _Mistake("A row without EOS makes argmax return 0 (all entries equal): a truncated response is real up "
             "to its last column (mask all ones, last_index = T - 1).", _wrong_mask_argmax),
    _Mistake("last_index is a position, not a length: the last real token sits at length - 1.",
             _wrong_last_index_is_length),
    _Mistake("'truncated' means no EOS at all, not 'the mask reaches the last column': a response whose EOS "
             "lands on the last column ended normally.", _wrong_truncated_from_last_column),
    _Mistake("eos_token_id may be a list of stop ids: any of them ends the response (torch.isin(ids, ...)).",
             _wrong_only_first_stop_id),
)


# ---------------------------------------------------------------------------------------------
# Week 3: td_residuals, masked_gae, masked_mean, masked_whiten, clipped_value_loss
# ---------------------------------------------------------------------------------------------

# The lesson's response (week 3, section 2): five real tokens, then garbage (7.77) on the padding.
def _lesson_rewards_values() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rewards = torch.tensor([[-0.02, -0.01, -0.03, -0.02, 1.50, 0.0]], dtype=DT)
    values = torch.tensor([[0.90, 1.00, 1.10, 1.20, 1.30, 7.77]], dtype=DT)
    return rewards, values, torch.tensor([[1, 1, 1, 1, 1, 0]])


_LESSON_NOTE = "the lesson's response: 5 real tokens, 7.77 stored on the padding, an int64 mask as in the lesson cells"


def _rewards_values(gen: torch.Generator, mask: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = _normal(gen, mask.shape, dtype, std=0.1)
    values = _normal(gen, mask.shape, dtype, mean=1.0, std=0.5)
    return rewards, values


def _td_cases() -> list[_Case]:
    def make(gen, mask, dtype):
        return (*_rewards_values(gen, mask, dtype), mask, 0.9), {}

    def make_gamma_one(gen, mask, dtype):
        return (*_rewards_values(gen, mask, dtype), mask, 1.0), {}

    rewards, values, mask = _lesson_rewards_values()
    return _batch_cases(make) + [
        _batch_case("γ = 1 (as in language-model PPO)", 7, 6, (6, 4, 2), make_gamma_one),
        _Case("the lesson's example", (rewards, values, mask, 1.0), note=_LESSON_NOTE),
        _non_finite_case("non-finite values on the padding", 8, 6, (6, 3, 1), make),
    ]


def _wrong_td_bootstraps_from_padding(rewards, values, mask, gamma):
    """Reads V_{t+1} straight from the values tensor, so the last real token sees the padding's value."""
    everything = ppo_math.td_residuals(rewards, values, torch.ones_like(mask), gamma)
    return _zero_padding(everything, mask)


def _wrong_td_roll(rewards, values, mask, gamma, mask_values_first: bool = False):
    """V_{t+1} from torch.roll(values, -1): wraps V_0 round to the last column."""
    v = _zero_padding(values, mask) if mask_values_first else values
    return _zero_padding(rewards + gamma * torch.roll(v, -1, dims=1) - v, mask)


def _wrong_td_roll_masked(rewards, values, mask, gamma):
    return _wrong_td_roll(rewards, values, mask, gamma, mask_values_first=True)


def _wrong_td_forgets_gamma(rewards, values, mask, gamma):
    return ppo_math.td_residuals(rewards, values, mask, 1.0)


def _wrong_td_returns_target(rewards, values, mask, gamma):
    """r_t + γ V_{t+1}: the TD target, without subtracting the prediction V_t."""
    return ppo_math.td_residuals(rewards, values, mask, gamma) + _zero_padding(values, mask)


def _wrong_td_sign(rewards, values, mask, gamma):
    return -ppo_math.td_residuals(rewards, values, mask, gamma)


def _wrong_td_times_mask(rewards, values, mask, gamma):
    """The padding removed by multiplying with the mask: NaN where it holds inf or NaN."""
    v = _times_mask(values, mask)
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    return _times_mask(rewards + gamma * next_v - v, mask)


_TD_MISTAKES = (
    _Mistake(_HINT_BOOTSTRAP, _wrong_td_bootstraps_from_padding),
    _Mistake(_HINT_ROLL, _wrong_td_roll),
    _Mistake(_HINT_ROLL, _wrong_td_roll_masked),
    _Mistake("Multiply the next value by γ: δ_t = r_t + γ·V_{t+1} - V_t (you left γ out).",
             _wrong_td_forgets_gamma),
    _Mistake("δ_t is the TD error: the target r_t + γ·V_{t+1} minus the prediction V_t. You returned the "
             "target (V_t is not subtracted).", _wrong_td_returns_target),
    _Mistake("The sign is reversed: δ_t = r_t + γ·V_{t+1} - V_t (what happened minus what was expected).",
             _wrong_td_sign),
    _Mistake(_HINT_READS_PADDING, _wrong_td_times_mask),
)


def _gae_cases() -> list[_Case]:
    def make(gamma: float, lam: float) -> _MakeArgs:
        return lambda gen, mask, dtype: ((*_rewards_values(gen, mask, dtype), mask, gamma, lam), {})

    rewards, values, mask = _lesson_rewards_values()
    return _batch_cases(make(0.9, 0.7)) + [
        _Case("the lesson's walk-through (γ = 1, λ = 0.95)", (rewards, values, mask, 1.0, 0.95), note=_LESSON_NOTE),
        _batch_case("λ = 0 (A = δ)", 8, 6, (6, 3, 5), make(0.95, 0.0)),
        _batch_case("λ = 1 (reward-to-go minus V)", 9, 6, (6, 3, 5), make(0.95, 1.0)),
        _non_finite_case("non-finite values on the padding", 10, 6, (6, 4, 2), make(0.9, 0.7)),
    ]


def _carry(delta: torch.Tensor, mask: torch.Tensor, factor: float, forwards: bool = False) -> torch.Tensor:
    """A_t = δ_t + factor · A_(neighbour), restarted on padding; backwards unless ``forwards``."""
    real = mask.to(delta.dtype)
    carried, out = torch.zeros_like(delta[:, 0]), torch.zeros_like(delta)
    for t in (range(delta.shape[1]) if forwards else reversed(range(delta.shape[1]))):
        carried = (delta[:, t] + factor * carried) * real[:, t]
        out[:, t] = carried
    return out


def _gae_from_delta(delta, values, mask, factor, forwards=False):
    advantages = _carry(delta, mask, factor, forwards)
    return advantages, _zero_padding(advantages + values, mask)


def _wrong_gae_bootstraps_from_padding(rewards, values, mask, gamma, lam):
    """δ of the last real token reads V_{t+1} from the padding (the carry itself stops correctly)."""
    delta = _wrong_td_bootstraps_from_padding(rewards, values, mask, gamma)
    return _gae_from_delta(delta, values, mask, gamma * lam)


def _wrong_gae_runs_through_padding(rewards, values, mask, gamma, lam):
    """The whole row, padding included, then masked at the end: the carry leaks in from the padding."""
    advantages, returns = ppo_math.masked_gae(rewards, values, torch.ones_like(mask), gamma, lam)
    return _zero_padding(advantages, mask), _zero_padding(returns, mask)


def _wrong_gae_forwards(rewards, values, mask, gamma, lam):
    return _gae_from_delta(ppo_math.td_residuals(rewards, values, mask, gamma), values, mask, gamma * lam, True)


def _wrong_gae_swaps_gamma_lam(rewards, values, mask, gamma, lam):
    return ppo_math.masked_gae(rewards, values, mask, lam, gamma)


def _wrong_gae_without_lambda(rewards, values, mask, gamma, lam):
    return ppo_math.masked_gae(rewards, values, mask, gamma, 1.0)


def _wrong_gae_without_gamma_in_carry(rewards, values, mask, gamma, lam):
    return _gae_from_delta(ppo_math.td_residuals(rewards, values, mask, gamma), values, mask, lam)


def _wrong_gae_returns_are_advantages(rewards, values, mask, gamma, lam):
    advantages, _ = ppo_math.masked_gae(rewards, values, mask, gamma, lam)
    return advantages, advantages


def _wrong_gae_returns_reward_to_go(rewards, values, mask, gamma, lam):
    advantages, _ = ppo_math.masked_gae(rewards, values, mask, gamma, lam)
    _, reward_to_go = ppo_math.masked_gae(rewards, values, mask, gamma, 1.0)  # R = A + V at λ = 1
    return advantages, reward_to_go


def _wrong_gae_times_mask(rewards, values, mask, gamma, lam):
    """δ and the carry masked by multiplying: a NaN on the padding is carried back into the real tokens."""
    advantages = _carry(_wrong_td_times_mask(rewards, values, mask, gamma), mask, gamma * lam)
    return advantages, _times_mask(advantages + values, mask)


_GAE_MISTAKES = (
    _Mistake(_HINT_BOOTSTRAP, _wrong_gae_bootstraps_from_padding),
    _Mistake("Your recursion ran through the padding: A_{t+1} after the last real token must be 0, so the "
             "carry restarts at each row's end (and V there is 0 too).", _wrong_gae_runs_through_padding),
    _Mistake("GAE runs backwards in time: A_t = δ_t + γλ·A_{t+1} needs the advantage of the NEXT token, so loop "
             "from t = T - 1 down to 0.", _wrong_gae_forwards),
    _Mistake("γ and λ are swapped: γ discounts the next value inside δ_t = r_t + γ·V_{t+1} - V_t; λ only "
             "enters the carry γλ·A_{t+1}.", _wrong_gae_swaps_gamma_lam),
    _Mistake("The carry is γλ·A_{t+1}: you left λ out (that is λ = 1).", _wrong_gae_without_lambda),
    _Mistake("The carry is γλ·A_{t+1}: you left γ out.", _wrong_gae_without_gamma_in_carry),
    _Mistake("returns are R_t = A_t + V_t (the value head's target), not the advantages themselves.",
             _wrong_gae_returns_are_advantages),
    _Mistake("returns are R_t = A_t + V_t with the GAE advantage; the discounted reward-to-go equals it only at "
             "λ = 1.", _wrong_gae_returns_reward_to_go),
    _Mistake(_HINT_READS_PADDING, _wrong_gae_times_mask),
)


def _mean_cases() -> list[_Case]:
    def make(gen, mask, dtype):
        return (_normal(gen, mask.shape, dtype, mean=1.0, std=2.0), mask), {}

    return _batch_cases(make) + [
        _batch_case("per-response means (dim=1)", 7, 6, (6, 2, 4), make, dim=1),
        _batch_case("per-response means (dim=1), float32", 8, 5, (5, 1, 3), make, torch.float32, dim=1),
        _batch_case("a bool mask", 9, 6, (6, 3, 1), make, mask_dtype=torch.bool,
                    note="the mask may be bool as well as float (1.0 / 0.0)"),
        _batch_case("a row with no real tokens (dim=1)", 10, 4, (3, 0, 2), make, dim=1,
                    note="row 1 has no real token at all: its mean is 0, not NaN (0 / 0)"),
        _non_finite_case("non-finite values on the padding", 11, 6, (6, 3, 1), make),
        _non_finite_case("non-finite values on the padding (dim=1)", 12, 5, (5, 2, 4), make, dim=1),
    ]


def _wrong_mean_counts_padding(x, mask, dim=None):
    """The masked sum divided by every position, padding included."""
    return ppo_math.masked_sum(x, mask, dim=dim) / (x.numel() if dim is None else x.shape[dim])


def _wrong_mean_of_everything(x, mask, dim=None):
    return x.mean() if dim is None else x.mean(dim=dim)


def _wrong_mean_of_row_means(x, mask, dim=None):
    return ppo_math.masked_mean(x, mask, dim=-1).mean() if dim is None else ppo_math.masked_mean(x, mask, dim=dim)


def _wrong_mean_nan_on_empty_rows(x, mask, dim=None):
    m = mask.bool()
    return ppo_math.masked_sum(x, m, dim=dim) / m.sum(dim=dim)  # 0 / 0 = nan for a row without tokens


def _wrong_mean_is_a_sum(x, mask, dim=None):
    return ppo_math.masked_sum(x, mask, dim=dim)


def _wrong_mean_ignores_dim(x, mask, dim=None):
    return ppo_math.masked_mean(x, mask)


def _wrong_mean_times_mask(x, mask, dim=None):
    """(x * mask).sum() / mask.sum(): right as long as the padding holds finite numbers."""
    m = mask.to(x.dtype)
    if dim is None:
        return _times_mask(x, mask).sum() / m.sum()
    count = m.sum(dim)
    return torch.where(count > 0, _times_mask(x, mask).sum(dim) / count.clamp(min=1), torch.zeros_like(count))


_MEAN_MISTAKES = (
    _Mistake(_HINT_PADDING_COUNTED, _wrong_mean_counts_padding),
    _Mistake("You averaged every entry, padding values included: only the positions where mask is 1 may enter "
             "the sum.", _wrong_mean_of_everything),
    _Mistake(_HINT_TOKEN_LEVEL, _wrong_mean_of_row_means),
    _Mistake("A row with no real tokens must give 0, not NaN (0 / 0): divide by count.clamp(min=1) and put 0 "
             "where the count is 0.", _wrong_mean_nan_on_empty_rows),
    _Mistake("You returned the sum: divide it by the number of real tokens.", _wrong_mean_is_a_sum),
    _Mistake("With dim=1 the result is one mean per row, shape [B]; you returned a single number.",
             _wrong_mean_ignores_dim),
    _Mistake(_HINT_READS_PADDING, _wrong_mean_times_mask),
)


def _whiten_cases() -> list[_Case]:
    def make(gen, mask, dtype):
        return (_normal(gen, mask.shape, dtype, mean=0.7, std=1.5), mask), {}

    def make_zero_padding(gen, mask, dtype):
        return (_zero_padding(_normal(gen, mask.shape, dtype, mean=0.3), mask), mask.bool()), {}

    def make_equal(value: float) -> _MakeArgs:
        def make_equal_tokens(gen, mask, dtype):  # one value on every real token, garbage on the padding
            x = torch.where(mask.bool(), torch.tensor(value, dtype=dtype), _normal(gen, mask.shape, dtype))
            return (x, mask), {}
        return make_equal_tokens

    return _batch_cases(make) + [
        _batch_case("shift_mean=False (rescale only)", 7, 6, (6, 4, 2), make, shift_mean=False),
        _batch_case("shift_mean=False, float32", 8, 7, (7, 3), make, torch.float32, shift_mean=False),
        _batch_case("unbiased=False", 9, 5, (5, 2, 4), make, unbiased=False),
        _batch_case("zeros on the padding (the lesson's batch)", 10, 10, (10, 6, 3, 2), make_zero_padding,
                    note="advantages from masked_gae hold 0 on the padding; those zeros must not be counted"),
        _batch_case("every real token equal (all-zero advantages, float32)", 11, 6, (6, 4, 2), make_equal(0.0),
                    torch.float32, note="every real token holds 0, as the advantages of a batch whose scores are all 0 "
                                        "can: the variance is 0, and only eps keeps the result from being 0 / 0 = NaN"),
        _batch_case("every real token equal (0.5), unbiased=False", 12, 5, (5, 3, 3), make_equal(0.5), unbiased=False,
                    note="every real token holds 0.5: the variance is 0 again, here the population variance"),
        _non_finite_case("non-finite values on the padding", 13, 7, (7, 4, 2), make),
    ]


def _wrong_whiten_counts_padding(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    """Mean and variance over every position (the library called with an all-ones mask)."""
    everything = ppo_math.masked_whiten(x, torch.ones_like(mask), shift_mean, unbiased, eps, distributed=False)
    return _zero_padding(everything, mask)


def _wrong_whiten_counts_padding_zeros(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    """x * mask first, then statistics over every position: the zeros pull the mean towards 0."""
    return _wrong_whiten_counts_padding(_zero_padding(x, mask), mask, shift_mean, unbiased, eps)


def _wrong_whiten_other_bessel(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    return ppo_math.masked_whiten(x, mask, shift_mean, not unbiased, eps, distributed=False)


def _wrong_whiten_no_mean_back(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    return ppo_math.masked_whiten(x, mask, True, unbiased, eps, distributed=False)


def _wrong_whiten_scales_mean(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    """'Rescale only' read as x / std, which scales the mean as well."""
    if shift_mean:
        return ppo_math.masked_whiten(x, mask, shift_mean, unbiased, eps, distributed=False)
    _, var = ppo_math.global_masked_mean_var(x, mask, unbiased, distributed=False)
    return _zero_padding(x.double() / torch.sqrt(var + eps), mask).to(x.dtype)


def _wrong_whiten_divides_by_variance(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    mean, var = ppo_math.global_masked_mean_var(x, mask, unbiased, distributed=False)
    out = (x.double() - mean) / (var + eps) + (0.0 if shift_mean else mean)
    return _zero_padding(out, mask).to(x.dtype)


def _wrong_whiten_without_eps(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    """(x - mean) / sqrt(var): 0 / 0 = NaN when every real token holds the same value."""
    return ppo_math.masked_whiten(x, mask, shift_mean, unbiased, 0.0, distributed=False)


def _wrong_whiten_times_mask(x, mask, shift_mean=True, unbiased=True, eps=1e-8, **_):
    """Mean and variance from x * mask, divided by the number of real tokens, and × mask at the end."""
    n = mask.to(x.dtype).sum()
    mean = _times_mask(x, mask).sum() / n
    var = (_times_mask(x - mean, mask) ** 2).sum() / (n - 1 if unbiased else n)
    return _times_mask((x - mean) / torch.sqrt(var + eps) + (0.0 if shift_mean else mean), mask)


_WHITEN_MISTAKES = (
    _Mistake("Your mean and variance counted the padding: compute both over the real tokens only (where mask "
             "is 1), then whiten.", _wrong_whiten_counts_padding),
    _Mistake("Your mean and variance counted the padding: compute both over the real tokens only (where mask "
             "is 1), then whiten.", _wrong_whiten_counts_padding_zeros),
    _Mistake("unbiased=True divides the sum of squared deviations by n - 1 (n = number of real tokens), "
             "unbiased=False by n: yours uses the other one.", _wrong_whiten_other_bessel),
    _Mistake("shift_mean=False means rescale only: compute (x - mean) / sqrt(var + eps) as usual, then add "
             "the mean back.", _wrong_whiten_no_mean_back),
    _Mistake("With shift_mean=False the library gives (x - mean) / sqrt(var + eps) + mean: the mean stays "
             "where it was; x / std scales the mean too.", _wrong_whiten_scales_mean),
    _Mistake("Divide by the standard deviation sqrt(var + eps), not by the variance.",
             _wrong_whiten_divides_by_variance),
    _Mistake(_HINT_NO_EPS, _wrong_whiten_without_eps),
    _Mistake(_HINT_READS_PADDING, _wrong_whiten_times_mask),
)


def _value_loss_cases() -> list[_Case]:
    def make(gen, mask, dtype, cliprange_value: float = 0.2):
        old_values = _normal(gen, mask.shape, dtype, mean=0.5)
        returns = old_values + _normal(gen, mask.shape, dtype)
        values = old_values + _normal(gen, mask.shape, dtype, std=0.3)  # some moves beyond ±0.2, some inside
        return (values, old_values, returns, mask, cliprange_value), {}

    # Moves of the value head on both sides of the clip range, towards and away from the return.
    old = torch.zeros(2, 6, dtype=DT)
    values = torch.tensor([[-0.5, -0.25, -0.1, 0.1, 0.25, 0.5]] * 2, dtype=DT)
    returns = torch.tensor([[-1.0, 0.4, -0.3, 0.3, -0.2, 1.0], [0.6, -1.0, 0.05, -0.05, 0.8, -0.6]], dtype=DT)
    return _batch_cases(make) + [
        _Case("value moves on both sides of the clip range", (values, old, returns, torch.ones(2, 6), 0.2),
              note="V - V_old from -0.5 to +0.5 with c = 0.2, returns on either side"),
        _batch_case("cliprange_value = 0.5", 7, 6, (6, 4, 1), lambda g, m, d: make(g, m, d, 0.5)),
        _non_finite_case("non-finite values on the padding", 8, 6, (6, 3, 2), make),
    ]


def _value_terms(values, old_values, returns, mask, cliprange_value):
    m = mask.bool()
    values, old_values, returns = (_zero_padding(t, m) for t in (values, old_values, returns))
    return values, old_values, returns, m


def _wrong_value_loss_without_half(values, old_values, returns, mask, cliprange_value):
    loss, clipfrac = ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)
    return 2 * loss, clipfrac


def _wrong_value_loss_min(values, old_values, returns, mask, cliprange_value):
    v, old, ret, m = _value_terms(values, old_values, returns, mask, cliprange_value)
    v_clip = old + torch.clamp(v - old, -cliprange_value, cliprange_value)
    loss = 0.5 * ppo_math.masked_mean(torch.minimum((v - ret) ** 2, (v_clip - ret) ** 2), m)
    return loss, ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)[1]


def _wrong_value_loss_unclipped(values, old_values, returns, mask, cliprange_value):
    loss, _ = ppo_math.clipped_value_loss(values, old_values, returns, mask, math.inf)  # clip at ±inf: none
    return loss, ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)[1]


def _wrong_value_loss_ratio_style_clip(values, old_values, returns, mask, cliprange_value):
    """clip(V, 1 - c, 1 + c): the ratio's clip copied onto the value."""
    v, _, ret, m = _value_terms(values, old_values, returns, mask, cliprange_value)
    v_clip = torch.clamp(v, 1 - cliprange_value, 1 + cliprange_value)
    loss = 0.5 * ppo_math.masked_mean(torch.maximum((v - ret) ** 2, (v_clip - ret) ** 2), m)
    return loss, ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)[1]


def _wrong_value_loss_counts_padding(values, old_values, returns, mask, cliprange_value):
    loss, clipfrac = ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)
    return loss * mask.bool().sum() / mask.numel(), clipfrac


def _wrong_value_loss_swaps_values(values, old_values, returns, mask, cliprange_value):
    return ppo_math.clipped_value_loss(old_values, values, returns, mask, cliprange_value)


def _wrong_value_clipfrac_outside_range(values, old_values, returns, mask, cliprange_value):
    loss, _ = ppo_math.clipped_value_loss(values, old_values, returns, mask, cliprange_value)
    v, old, _, m = _value_terms(values, old_values, returns, mask, cliprange_value)
    return loss, ppo_math.masked_mean(((v - old).abs() > cliprange_value).to(v.dtype), m)


def _wrong_value_loss_times_mask(values, old_values, returns, mask, cliprange_value):
    clipped = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    err, err_clipped = (values - returns) ** 2, (clipped - returns) ** 2
    n = mask.to(values.dtype).sum()
    loss = 0.5 * _times_mask(torch.maximum(err, err_clipped), mask).sum() / n
    return loss, _times_mask((err_clipped > err).to(values.dtype), mask).sum() / n


_VALUE_LOSS_MISTAKES = (
    _Mistake("The value loss has a factor 0.5 in front: loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)).",
             _wrong_value_loss_without_half),
    _Mistake("Take the max of the two squared errors (the pessimistic choice); yours takes the min.",
             _wrong_value_loss_min),
    _Mistake(_HINT_NEVER_CLIPPED + " Take the max of (V - R)² and (V_clip - R)².", _wrong_value_loss_unclipped),
    _Mistake("Clip the CHANGE: V_clip = V_old + clip(V - V_old, -c, c). The value is not a ratio, so there is "
             "no clip around 1.", _wrong_value_loss_ratio_style_clip),
    _Mistake(_HINT_PADDING_COUNTED, _wrong_value_loss_counts_padding),
    _Mistake("values are the new predictions and old_values those made at rollout time: the clip is centred "
             "on old_values (you swapped them).", _wrong_value_loss_swaps_values),
    _Mistake("clipfrac counts the tokens where the clipped error is strictly the larger one, not every token "
             "with |V - V_old| > c.", _wrong_value_clipfrac_outside_range),
    _Mistake(_HINT_READS_PADDING, _wrong_value_loss_times_mask),
)


# ---------------------------------------------------------------------------------------------
# Week 4: probability_ratio, clipped_surrogate
# ---------------------------------------------------------------------------------------------


def _ratio_cases() -> list[_Case]:
    def pair(seed: int, shape: tuple[int, int], dtype: torch.dtype, centre: float | None = None):
        gen = _generator(seed)
        old = _logprobs(gen, shape, dtype) if centre is None else _normal(gen, shape, dtype, mean=centre)
        return old + _normal(gen, shape, dtype, std=0.3), old

    return [
        _Case("random log-probs (seed 0, 4 x 7)", pair(0, (4, 7), DT)),
        _Case("random log-probs (seed 1, 3 x 12)", pair(1, (3, 12), DT)),
        _Case("float32 inputs", pair(2, (2, 8), torch.float32)),
        _Case("the lesson's ratio 0.26 / 0.20", (torch.log(torch.tensor(0.26, dtype=DT)),
                                                torch.log(torch.tensor(0.20, dtype=DT))),
              note="0-dim tensors: r = 0.26 / 0.20 = 1.3"),
        _Case("very unlikely tokens (log-probs near -110, float32)", pair(3, (2, 5), torch.float32, -110.0),
              note="far below any token that is ever sampled, but a robust ratio must not care: exp(-110) is 0 in "
                   "float32, so only the difference of the log-probs can be exponentiated"),
    ]


def _wrong_ratio_upside_down(logprobs, old_logprobs):
    return ppo_math.probability_ratio(old_logprobs, logprobs)


def _wrong_ratio_without_exp(logprobs, old_logprobs):
    return logprobs - old_logprobs


def _wrong_ratio_of_probabilities(logprobs, old_logprobs):
    return torch.exp(logprobs) / torch.exp(old_logprobs)


def _wrong_ratio_of_logprobs(logprobs, old_logprobs):
    return logprobs / old_logprobs


_RATIO_MISTAKES = (
    _Mistake(_HINT_RATIO_UPSIDE_DOWN, _wrong_ratio_upside_down),
    _Mistake("You returned the log-ratio: the ratio is its exponential, exp(logprobs - old_logprobs).",
             _wrong_ratio_without_exp),
    _Mistake("exp() of each log-prob underflows to 0 on the checker's log-probs near -110 in float32 "
             "(0 / 0 = nan): exponentiate the difference of the log-probs instead.", _wrong_ratio_of_probabilities),
    _Mistake("Log-probs are not probabilities: dividing them is not the ratio. Subtract them and exponentiate.",
             _wrong_ratio_of_logprobs),
)


def _ratio_rows(ratios: Sequence[float], advantages: Sequence[float]) -> tuple:
    """One row per advantage, every row with the given ratios (chosen away from the band's edges)."""
    old = torch.log(torch.full((len(advantages), len(ratios)), 0.3, dtype=DT))
    new = old + torch.log(torch.tensor([list(ratios)] * len(advantages), dtype=DT))
    adv = torch.tensor(advantages, dtype=DT).unsqueeze(1).expand_as(old).clone()
    return new, old, adv


_BAND = (0.5, 0.75, 0.9, 1.1, 1.3, 1.6)  # below, inside and above [1 - 0.2, 1 + 0.2]


def _surrogate_cases() -> list[_Case]:
    def make(gen, mask, dtype, cliprange: float = 0.2):
        old = _logprobs(gen, mask.shape, dtype)
        new = old + _normal(gen, mask.shape, dtype, std=0.3)  # ratios on both sides of the band
        return (new, old, _normal(gen, mask.shape, dtype), mask, cliprange), {}

    def make_extreme(gen, mask, dtype):
        (new, old, adv, mask, cliprange), kwargs = make(gen, mask, dtype)
        pad = ~mask.bool()
        signs = torch.where(torch.arange(adv.numel()).reshape(adv.shape) % 2 == 0, 50.0, -50.0).to(dtype)
        return (torch.where(pad, torch.tensor(1000.0, dtype=dtype), new),
                torch.where(pad, torch.tensor(-1000.0, dtype=dtype), old),
                torch.where(pad, signs, adv), mask, cliprange), kwargs

    def make_unlikely(gen, mask, dtype):
        old = _normal(gen, mask.shape, dtype, mean=-110.0)
        return (old + _normal(gen, mask.shape, dtype, std=0.3), old, _normal(gen, mask.shape, dtype), mask, 0.2), {}

    positive, negative = _ratio_rows(_BAND, (1.0, 0.5)), _ratio_rows(_BAND, (-1.0, -2.0))
    mixed = _ratio_rows(_BAND, (1.5, -0.7))
    return _batch_cases(make) + [
        _Case("ratios on both sides of the clip band, A > 0", (*positive, torch.ones(2, 6), 0.2),
              note=f"r = {list(_BAND)}, cliprange 0.2: for A > 0 the objective stops growing above 1.2"),
        _Case("ratios on both sides of the clip band, A < 0", (*negative, torch.ones(2, 6), 0.2),
              note=f"r = {list(_BAND)}, cliprange 0.2: for A < 0 the objective stops growing below 0.8"),
        _Case("both signs of advantage, with padding", (*mixed, _mask((6, 4), 6), 0.2),
              note="row 0 has A = +1.5, row 1 has A = -0.7 and two padding positions"),
        _batch_case("cliprange 0.1", 7, 6, (6, 5, 2), lambda g, m, d: make(g, m, d, 0.1)),
        _batch_case("extreme values on the padding", 8, 6, (6, 3, 1), make_extreme,
                    note="the padding holds log-probs of +1000 and -1000 (exp() of their difference is inf) "
                         "and advantages of ±50: a correct loss, and its gradient, never read them"),
        _non_finite_case("non-finite values on the padding", 9, 6, (6, 4, 1), make),
        _batch_case("very unlikely tokens (log-probs near -110, float32)", 10, 5, (5, 3), make_unlikely,
                    torch.float32, note="far below any token that is ever sampled, but a robust ratio must not care: "
                                        "exp(-110) is 0 in float32, so only the difference of the log-probs can be "
                                        "exponentiated"),
    ]


def _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange):
    """Ratio, advantages and clipped ratio with the padding blanked first, as the library does."""
    m = mask.bool()
    ratio = ppo_math.probability_ratio(_zero_padding(logprobs, m), _zero_padding(old_logprobs, m))
    return ratio, _zero_padding(advantages, m), torch.clamp(ratio, 1 - cliprange, 1 + cliprange), m


def _library_clipfrac(*args) -> torch.Tensor:
    return ppo_math.clipped_surrogate(*args)[1]


def _wrong_surrogate_max(logprobs, old_logprobs, advantages, mask, cliprange):
    ratio, adv, clipped, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    loss = ppo_math.masked_mean(-torch.maximum(ratio * adv, clipped * adv), m)
    return loss, _library_clipfrac(logprobs, old_logprobs, advantages, mask, cliprange)


def _wrong_surrogate_not_negated(logprobs, old_logprobs, advantages, mask, cliprange):
    loss, clipfrac = ppo_math.clipped_surrogate(logprobs, old_logprobs, advantages, mask, cliprange)
    return -loss, clipfrac


def _wrong_surrogate_counts_padding(logprobs, old_logprobs, advantages, mask, cliprange):
    loss, clipfrac = ppo_math.clipped_surrogate(logprobs, old_logprobs, advantages, mask, cliprange)
    return loss * mask.bool().sum() / mask.numel(), clipfrac


def _wrong_surrogate_upside_down(logprobs, old_logprobs, advantages, mask, cliprange):
    return ppo_math.clipped_surrogate(old_logprobs, logprobs, advantages, mask, cliprange)


def _wrong_surrogate_clipped_term_only(logprobs, old_logprobs, advantages, mask, cliprange):
    _, adv, clipped, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    loss = ppo_math.masked_mean(-clipped * adv, m)
    return loss, _library_clipfrac(logprobs, old_logprobs, advantages, mask, cliprange)


def _wrong_surrogate_never_clipped(logprobs, old_logprobs, advantages, mask, cliprange):
    ratio, adv, _, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    loss = ppo_math.masked_mean(-ratio * adv, m)
    return loss, _library_clipfrac(logprobs, old_logprobs, advantages, mask, cliprange)


def _wrong_surrogate_clamps_product(logprobs, old_logprobs, advantages, mask, cliprange):
    ratio, adv, _, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    objective = torch.minimum(ratio * adv, torch.clamp(ratio * adv, 1 - cliprange, 1 + cliprange))
    return ppo_math.masked_mean(-objective, m), _library_clipfrac(logprobs, old_logprobs, advantages, mask, cliprange)


def _wrong_surrogate_per_response_mean(logprobs, old_logprobs, advantages, mask, cliprange):
    ratio, adv, _, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    objective = ppo_math.clipped_objective_per_token(ratio, adv, cliprange)
    loss = ppo_math.masked_mean(-objective, m, dim=1).mean()
    return loss, _library_clipfrac(logprobs, old_logprobs, advantages, mask, cliprange)


def _wrong_clipfrac_outside_band(logprobs, old_logprobs, advantages, mask, cliprange):
    loss, _ = ppo_math.clipped_surrogate(logprobs, old_logprobs, advantages, mask, cliprange)
    ratio, _, _, m = _surrogate_terms(logprobs, old_logprobs, advantages, mask, cliprange)
    return loss, ppo_math.masked_mean(((ratio - 1).abs() > cliprange).to(ratio.dtype), m)


def _wrong_surrogate_of_probabilities(logprobs, old_logprobs, advantages, mask, cliprange):
    """r = exp(logprobs) / exp(old_logprobs): 0 / 0 = NaN where both underflow."""
    m = mask.bool()
    ratio = torch.exp(_zero_padding(logprobs, m)) / torch.exp(_zero_padding(old_logprobs, m))
    adv = _zero_padding(advantages, m)
    objective = ppo_math.clipped_objective_per_token(ratio, adv, cliprange)
    return ppo_math.masked_mean(-objective, m), ppo_math.masked_mean((objective < ratio * adv).to(ratio.dtype), m)


def _wrong_surrogate_times_mask(logprobs, old_logprobs, advantages, mask, cliprange):
    ratio = torch.exp(_times_mask(logprobs - old_logprobs, mask))
    objective = ppo_math.clipped_objective_per_token(ratio, advantages, cliprange)
    n = mask.to(logprobs.dtype).sum()
    loss = -_times_mask(objective, mask).sum() / n
    return loss, _times_mask((objective < ratio * advantages).to(ratio.dtype), mask).sum() / n


_SURROGATE_MISTAKES = (
    _Mistake("PPO takes the min of r·A and clip(r, 1 - ε, 1 + ε)·A (the pessimistic objective); yours takes "
             "the max.", _wrong_surrogate_max),
    _Mistake("The loss is minus the objective: PPO maximises the clipped objective, the optimiser minimises "
             "the loss. You returned the objective (the minus sign is missing).", _wrong_surrogate_not_negated),
    _Mistake(_HINT_PADDING_COUNTED, _wrong_surrogate_counts_padding),
    _Mistake(_HINT_RATIO_UPSIDE_DOWN, _wrong_surrogate_upside_down),
    _Mistake("You used only the clipped term clip(r)·A: take the min of the unclipped r·A and the clipped "
             "term.", _wrong_surrogate_clipped_term_only),
    _Mistake("You clamped the product r·A into [1 - ε, 1 + ε]; the clip applies to the ratio alone, and "
             "then the clipped ratio is multiplied by A: min(r·A, clip(r, 1 - ε, 1 + ε)·A).",
             _wrong_surrogate_clamps_product),
    _Mistake(_HINT_NEVER_CLIPPED + " Take the min of r·A and clip(r, 1 - ε, 1 + ε)·A.",
             _wrong_surrogate_never_clipped),
    _Mistake(_HINT_TOKEN_LEVEL, _wrong_surrogate_per_response_mean),
    _Mistake("clipfrac counts the tokens where the clipped term was chosen (its objective strictly smaller "
             "than r·A). A ratio outside the band is not clipped when the advantage pulls it back inside.",
             _wrong_clipfrac_outside_band),
    _Mistake(_HINT_SURROGATE_PROBABILITIES, _wrong_surrogate_of_probabilities),
    _Mistake(_HINT_READS_PADDING, _wrong_surrogate_times_mask),
)


# ---------------------------------------------------------------------------------------------
# Week 5: kl_estimate, shaped_rewards
# ---------------------------------------------------------------------------------------------


def _kl_cases() -> list[_Case]:
    def pair(seed: int, shape: tuple[int, int], dtype: torch.dtype, spread: float = 0.5):
        gen = _generator(seed)
        logprobs = _logprobs(gen, shape, dtype)
        return logprobs, logprobs - _normal(gen, shape, dtype, mean=0.1, std=spread)

    old = torch.tensor([[-0.4, -1.1, -0.7, -0.2, -0.9, 0.0, 0.0]], dtype=DT)  # week 5, section 1
    ref = torch.tensor([[-1.3, -2.7, -1.8, -2.2, -2.3, 0.0, 0.0]], dtype=DT)
    padded = _mask((6, 3, 1), 6)
    return [
        _Case("k1 (seed 0, 4 x 7)", pair(0, (4, 7), DT), {"kind": "k1"}),
        _Case("k2 (seed 1, 4 x 7)", pair(1, (4, 7), DT), {"kind": "k2"}),
        _Case("k3 (seed 2, 4 x 7)", pair(2, (4, 7), DT), {"kind": "k3"}),
        _Case("kind left at its default", pair(3, (3, 5), DT)),
        _Case("k3 with a mask (padding after EOS)", pair(4, (3, 6), DT), {"kind": "k3", "mask": _mask((6, 4, 1), 6)},
              note="with a mask the result is 0 on the padding, whatever the log-probs stored there"),
        _Case("k1 with a mask, float32", pair(5, (2, 8), torch.float32), {"kind": "k1", "mask": _mask((8, 3), 8)}),
        _Case("k3, float32, large log-ratios", pair(6, (2, 6), torch.float32, spread=2.0), {"kind": "k3"}),
        _Case("the lesson's response (k1, with a mask)", (old, ref),
              {"kind": "k1", "mask": torch.tensor([[1] * 5 + [0] * 2])},
              note="week 5's example: log-ratios 0.9, 1.6, 1.1, 2.0, 1.4 on the real tokens"),
        _Case("non-finite values on the padding (k3, with a mask)",
              tuple(_non_finite(t, padded) for t in pair(9, (3, 6), DT)), {"kind": "k3", "mask": padded},
              _NON_FINITE_NOTE, non_finite_padding=True),
    ]


_KL_MIXUP = {"k1": "k3", "k3": "k1"}


def _wrong_kl_swapped(logprobs, ref_logprobs, kind="k1", mask=None):
    return ppo_math.kl_estimate(ref_logprobs, logprobs, kind, mask=mask)


def _wrong_kl_k1_k3_mixed(logprobs, ref_logprobs, kind="k1", mask=None):
    return ppo_math.kl_estimate(logprobs, ref_logprobs, _KL_MIXUP.get(kind, kind), mask=mask)


def _wrong_kl_ignores_kind(logprobs, ref_logprobs, kind="k1", mask=None):
    return ppo_math.kl_estimate(logprobs, ref_logprobs, "k1", mask=mask)


def _wrong_kl_k2_without_half(logprobs, ref_logprobs, kind="k1", mask=None):
    scale = 2.0 if kind == "k2" else 1.0
    return scale * ppo_math.kl_estimate(logprobs, ref_logprobs, kind, mask=mask)


def _wrong_kl_k3_exponent_sign(logprobs, ref_logprobs, kind="k1", mask=None):
    """k3 written as exp(lr) - 1 + lr: the exponent's sign lost."""
    if kind != "k3":
        return ppo_math.kl_estimate(logprobs, ref_logprobs, kind, mask=mask)
    log_ratio = ppo_math.kl_estimate(logprobs, ref_logprobs, "k1", mask=mask)
    return torch.expm1(log_ratio) + log_ratio


def _wrong_kl_times_mask(logprobs, ref_logprobs, kind="k1", mask=None):
    estimate = ppo_math.kl_estimate(logprobs, ref_logprobs, kind)
    return estimate if mask is None else _times_mask(estimate, mask)


_KL_MISTAKES = (
    _Mistake("logprobs (the policy that sampled the tokens) comes first: lr = logprobs - ref_logprobs. Swapping "
             "the arguments flips the sign of k1 and turns k3 into exp(lr) - 1 - lr. If only your k3 is wrong, "
             "you wrote it with ρ = π / π_ref; k3 uses ρ = π_ref / π: exp(-lr) - 1 + lr.", _wrong_kl_swapped),
    _Mistake("The estimators are mixed up: k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr (with "
             "lr = logprobs - ref_logprobs).", _wrong_kl_k1_k3_mixed),
    _Mistake("Your function ignores kind: it returns k1 whatever estimator was asked for ('k1', 'k2' or 'k3').",
             _wrong_kl_ignores_kind),
    _Mistake("k2 is lr² / 2: keep the 1/2.", _wrong_kl_k2_without_half),
    _Mistake("k3 = exp(-lr) - 1 + lr: the exponent is MINUS the log-ratio (it is (ρ - 1) - log ρ with "
             "ρ = π_ref / π).", _wrong_kl_k3_exponent_sign),
    _Mistake(_HINT_READS_PADDING, _wrong_kl_times_mask),
)


def _shaped_cases() -> list[_Case]:
    def make(gen, mask, dtype, kl_coef: float = 0.1):
        logprobs = _logprobs(gen, mask.shape, dtype)
        ref_logprobs = logprobs - _normal(gen, mask.shape, dtype, mean=0.1, std=0.3)
        return (_normal(gen, mask.shape[:1], dtype, mean=1.0), logprobs, ref_logprobs, mask, kl_coef), {}

    old = torch.tensor([[-0.4, -1.1, -0.7, -0.2, -0.9, 0.0, 0.0]], dtype=DT)  # week 5, section 1
    ref = torch.tensor([[-1.3, -2.7, -1.8, -2.2, -2.3, 0.0, 0.0]], dtype=DT)
    lesson = (torch.tensor([2.40], dtype=DT), old, ref, torch.tensor([[1] * 5 + [0] * 2]), 0.05)
    return _batch_cases(make) + [
        _Case("the lesson's response (score 2.40, β = 0.05)", lesson,
              note="5 real tokens, 2 padding positions, an int64 mask: the score lands on position 4"),
        _batch_case("the k3 estimator", 7, 6, (6, 4, 2), make, kl_estimator="k3"),
        _batch_case("kl_coef 0.5", 8, 5, (5, 3), lambda g, m, d: make(g, m, d, 0.5)),
        _non_finite_case("non-finite values on the padding", 9, 6, (6, 4, 1), make),
    ]


def _add_score(rewards: torch.Tensor, scores: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    return rewards.index_put((rows, cols), scores[rows].to(rewards.dtype), accumulate=True)


def _penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator):
    return ppo_math.kl_penalty_rewards(logprobs, ref_logprobs, mask, kl_coef, kl_estimator)


def _wrong_score_on_first_token(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    rows = torch.nonzero(mask.bool().any(-1)).squeeze(-1)
    penalties = _penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    return _add_score(penalties, scores, rows, torch.zeros_like(rows))


def _wrong_score_on_last_column(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    rows = torch.arange(mask.shape[0])
    cols = torch.full_like(rows, mask.shape[1] - 1)
    return _add_score(_penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator), scores, rows, cols)


def _wrong_score_after_last_token(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    """TRL's convention: the score on the position after the last real token (dropped if there is none)."""
    after = ppo_math.last_token_index(mask) + 1
    rows = torch.nonzero(after < mask.shape[1]).squeeze(-1)
    return _add_score(_penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator), scores, rows, after[rows])


def _wrong_rewards_penalty_added(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    rewards = ppo_math.shaped_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    return rewards - 2 * _penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator)  # +β·k instead of -β·k


def _wrong_rewards_swapped_logprobs(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return ppo_math.shaped_rewards(scores, ref_logprobs, logprobs, mask, kl_coef, kl_estimator)


def _wrong_rewards_without_beta(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return ppo_math.shaped_rewards(scores, logprobs, ref_logprobs, mask, 1.0, kl_estimator)


def _wrong_score_overwrites_penalty(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    rewards = ppo_math.shaped_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    last = ppo_math.last_token_index(mask)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    penalties = _penalties(logprobs, ref_logprobs, mask, kl_coef, kl_estimator)
    return rewards.index_put((rows, last[rows]), -penalties[rows, last[rows]], accumulate=True)


def _wrong_rewards_ignore_estimator(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return ppo_math.shaped_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, "k1")


def _wrong_rewards_times_mask(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    penalties = _times_mask(-kl_coef * ppo_math.kl_estimate(logprobs, ref_logprobs, kl_estimator), mask)
    return penalties + ppo_math.score_on_last_token(scores, mask).to(penalties.dtype)


_SHAPED_MISTAKES = (
    _Mistake("The score belongs on the LAST real token (the EOS, or the last column of a truncated response), "
             "not on the first token.", _wrong_score_on_first_token),
    _Mistake("You put the score on the last column of the tensor; with padding the last real token comes "
             "earlier. Find it from the mask (ppo_math.last_token_index).", _wrong_score_on_last_column),
    _Mistake("The score sits ON the last real token (the EOS, or the last column of a truncated response), "
             "not on the position after it.",
             _wrong_score_after_last_token),
    _Mistake("The KL term is a penalty: r_t = -β·k_t (+ the score on the last token). Yours adds +β·k_t.",
             _wrong_rewards_penalty_added),
    _Mistake("The log-ratio is logprobs - ref_logprobs (the policy that sampled the tokens first); you swapped "
             "the two.", _wrong_rewards_swapped_logprobs),
    _Mistake("Multiply the KL estimate by kl_coef (β): r_t = -β·k_t.", _wrong_rewards_without_beta),
    _Mistake("Add the score to the last token's penalty (r_last = -β·k_last + score) instead of overwriting it.",
             _wrong_score_overwrites_penalty),
    _Mistake("Pass kl_estimator on to the KL estimate (kl_estimate(..., kind=kl_estimator)): you always used k1.",
             _wrong_rewards_ignore_estimator),
    _Mistake(_HINT_READS_PADDING, _wrong_rewards_times_mask),
)


# ---------------------------------------------------------------------------------------------
# The table: every exercise, in lesson order
# ---------------------------------------------------------------------------------------------

_PPO_MATH, _ROLLOUT = "course_utils.ppo_math", "course_utils.rollout"

_TABLE: tuple[_Exercise, ...] = (
    _Exercise("response_mask_from_ids", 2, _ROLLOUT, _response_mask_cases, _RESPONSE_MASK_MISTAKES,
              "mask[t] = 1 if no EOS occurs at any position < t (so the first EOS is kept), built from positions "
              "(cumsum of is_eos), never from ids != pad_id. last_index = the last position with mask 1; "
              "ended_with_eos = any EOS in the row; truncated = no EOS. eos_token_id may be one id or a list of "
              "ids: torch.isin(response_ids, torch.as_tensor(ids)) handles both.",
              outputs=("mask", "last_index", "ended_with_eos", "truncated"), any_dtype=frozenset({0, 2, 3}),
              stub_imports="from typing import Sequence\n\nimport torch"),
    _Exercise("td_residuals", 3, _PPO_MATH, _td_cases, _TD_MISTAKES,
              "δ_t = r_t + γ·V_{t+1} - V_t with V_{t+1} = 0 after the last real token; 0 where mask is 0."),
    _Exercise("masked_gae", 3, _PPO_MATH, _gae_cases, _GAE_MISTAKES,
              "δ_t from td_residuals (V = 0 after the last token); A_t = δ_t + γλ·A_{t+1}, computed backwards "
              "with A = 0 after the last token; R_t = A_t + V_t. Both outputs are 0 on the padding.",
              outputs=("advantages", "returns")),
    _Exercise("masked_mean", 3, _PPO_MATH, _mean_cases, _MEAN_MISTAKES,
              "mean = Σ mask·x / Σ mask over the real tokens only; with dim, one mean per slice, and 0 for a "
              "slice without real tokens."),
    _Exercise("masked_whiten", 3, _PPO_MATH, _whiten_cases, _WHITEN_MISTAKES,
              "(x - mean) / sqrt(var + eps), mean and var over the real tokens only (unbiased: divide by n - 1); "
              "with shift_mean=False add the mean back; 0 on the padding; the same dtype as x."),
    _Exercise("clipped_value_loss", 3, _PPO_MATH, _value_loss_cases, _VALUE_LOSS_MISTAKES,
              "V_clip = V_old + clip(V - V_old, -c, c); loss = 0.5 · masked_mean(max((V - R)², (V_clip - R)²)); "
              "clipfrac = masked fraction of tokens where the clipped error is strictly larger.",
              outputs=("loss", "clipfrac"), grad_param="values"),
    _Exercise("probability_ratio", 4, _PPO_MATH, _ratio_cases, _RATIO_MISTAKES,
              "r = exp(logprobs - old_logprobs): the current policy over the rollout policy, computed from "
              "the difference of log-probs."),
    _Exercise("clipped_surrogate", 4, _PPO_MATH, _surrogate_cases, _SURROGATE_MISTAKES,
              "loss = masked_mean(-min(r·A, clip(r, 1 - ε, 1 + ε)·A)) over the real tokens, with "
              "r = exp(logprobs - old_logprobs); clipfrac = masked fraction of tokens where the clipped term "
              "is strictly the smaller objective.",
              outputs=("loss", "clipfrac"), grad_param="logprobs"),
    _Exercise("kl_estimate", 5, _PPO_MATH, _kl_cases, _KL_MISTAKES,
              "lr = logprobs - ref_logprobs; k1 = lr, k2 = lr² / 2, k3 = exp(-lr) - 1 + lr. The mask is optional: "
              "with mask=None return the estimate everywhere; with a mask, 0 on the padding."),
    _Exercise("shaped_rewards", 5, _PPO_MATH, _shaped_cases, _SHAPED_MISTAKES,
              "r_t = -β·k_t on every real token (k_t = kl_estimate(logprobs, ref_logprobs, kl_estimator)), plus "
              "the score on the last real token; 0 on the padding."),
)

_EXERCISES: dict[str, _Exercise] = {exercise.name: exercise for exercise in _TABLE}

#: The exercises in lesson order, each with the week whose notebook teaches it.
EXERCISES: dict[str, int] = {exercise.name: exercise.week for exercise in _TABLE}
