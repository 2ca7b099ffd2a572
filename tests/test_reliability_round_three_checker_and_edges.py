"""Reliability, round three (issue 53, items 3 and 4): the exercise checker is safe to feed anything,
and the library calls behind the sliders and widgets behave at the ends of their ranges.

Item 3, the checker: a time limit with a one-line message (on the main thread through SIGALRM, off
it through a watched worker thread), the library's functions as they were when the kit loaded (a
learner's ``ppo_math.masked_mean = my_masked_mean`` must not make the check compare a function with
itself), and cases that catch a whitening without eps and the ``x * mask`` versions that read
non-finite padding. The wrong versions below are written the way a learner would write them; each
passed the checker before this round.

Item 4, the library: one response as 1-D (or a Python list) is a batch of one and comes back in the
shape given; a negative or NaN cliprange or β is refused naming the argument and its range; empty
batches and zero-length responses give a finite result or one message; the views never crash inside
matplotlib or numpy and never print or draw NaN as a number without saying so.
"""

from __future__ import annotations

import math
import signal
import threading
import time

import numpy as np
import pytest
import torch

from course_utils import ppo_math
from course_utils.lesson_aids import exercises, plots, widgets

torch.set_num_threads(1)

NAN, INF = float("nan"), float("inf")


# =============================================================================================
# Item 3: the checker
# =============================================================================================

# ---------------------------------------------------------------- a time limit


def gae_endless(rewards, values, mask, gamma, lam):
    t = rewards.shape[1] - 1
    while t >= 0:  # the learner forgot `t -= 1`
        pass
    return rewards, values


def gae_swallows_everything(rewards, values, mask, gamma, lam):
    while True:
        try:
            sum(range(1000))
        except Exception:  # a learner's catch-all must not swallow the time limit
            pass


def mean_sleeps(x, mask, dim=None):
    time.sleep(60)
    return ppo_math.masked_mean(x, mask, dim)


def first_line(message: str) -> str:
    return message.split("\n")[0]


@pytest.mark.parametrize("fn", [gae_endless, gae_swallows_everything], ids=["while-loop", "catches-exception"])
def test_an_endless_loop_is_stopped_with_one_line_naming_the_limit(fn):
    name = "masked_gae"
    result = exercises.check(name, fn, time_limit=0.5)
    assert not result.passed and result.attempted
    line = first_line(result.message)
    assert "took more than 0.5 s" in line and "endless loop" in line, result.message
    assert 'Case "' in result.message and "Traceback" not in result.message
    # The kernel is fine afterwards: the next check runs normally.
    assert exercises.check(name, ppo_math.masked_gae).passed


def test_the_default_time_limit_is_seconds_not_minutes():
    assert 1 <= exercises.TIME_LIMIT_S <= 30


def test_a_sleeping_function_is_stopped_and_the_alarm_is_put_back():
    seen = []
    previous = signal.signal(signal.SIGALRM, lambda *_: seen.append("theirs"))
    try:
        result = exercises.check("masked_mean", mean_sleeps, time_limit=0.5)
        assert "took more than 0.5 s" in first_line(result.message), result.message
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left running
        assert signal.getsignal(signal.SIGALRM) is not exercises._on_alarm  # the handler before the check is back
        signal.raise_signal(signal.SIGALRM)
        assert seen == ["theirs"]
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_timer_someone_else_set_is_left_alone():
    """An interval timer already running (e.g. pytest-timeout's) is not taken over: the worker-thread
    fallback watches the learner's function instead, and the other timer keeps its deadline."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 60.0)
        result = exercises.check("masked_gae", gae_endless, time_limit=0.5)
        assert "took more than 0.5 s" in first_line(result.message), result.message
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 60.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_time_limit_works_off_the_main_thread():
    """Where SIGALRM cannot be used (another thread, Windows), a worker thread runs the learner's
    function with a deadline and is stopped at its next line of Python."""
    box = {}
    caller = threading.Thread(target=lambda: box.update(result=exercises.check("masked_gae", gae_endless,
                                                                               time_limit=0.5)))
    caller.start()
    caller.join(60)
    assert not caller.is_alive()
    assert "took more than 0.5 s" in first_line(box["result"].message), box["result"].message
    for _ in range(100):  # the stopped worker ends at its next bytecode
        if not any(t.name == "exercise-check" and t.is_alive() for t in threading.enumerate()):
            break
        time.sleep(0.05)
    assert not any(t.name == "exercise-check" and t.is_alive() for t in threading.enumerate())


def test_the_worker_thread_path_keeps_autograd_and_passes_the_library():
    box = {}
    caller = threading.Thread(target=lambda: box.update(result=exercises.check("clipped_surrogate",
                                                                               ppo_math.clipped_surrogate)))
    caller.start()
    caller.join(120)
    assert box["result"].passed, box["result"].message


def test_the_time_limit_message_in_korean():
    result = exercises.check("masked_gae", gae_endless, lang="ko", time_limit=0.5)
    assert "0.5초" in first_line(result.message) and "무한 루프" in first_line(result.message), result.message


def test_exit_inside_the_learners_function_is_reported_not_raised():
    def masked_mean(x, mask, dim=None):
        raise SystemExit(1)

    result = exercises.check("masked_mean", masked_mean)
    assert not result.passed and "SystemExit" in result.message


# ---------------------------------------------------------------- the library as imported at load


def mean_counts_padding(x, mask, dim=None):
    return x.mean() if dim is None else x.mean(dim)


def test_assigning_over_the_library_does_not_make_the_check_compare_a_function_with_itself(monkeypatch):
    monkeypatch.setattr(ppo_math, "masked_mean", mean_counts_padding)
    result = exercises.check("masked_mean", mean_counts_padding)
    assert not result.passed, result.message
    assert "def masked_mean" in exercises.show_solution("masked_mean")
    assert "x.mean()" not in exercises.show_solution("masked_mean")


def surrogate_plain(logprobs, old_logprobs, advantages, mask, cliprange):
    m = mask.bool()
    zero = torch.zeros((), dtype=logprobs.dtype)
    ratio = torch.exp(torch.where(m, logprobs, zero) - torch.where(m, old_logprobs, zero))
    adv = torch.where(m, advantages, zero)
    objective = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * adv)
    loss = -torch.where(m, objective, zero).sum() / m.sum()
    clipped = torch.where(m, (objective < ratio * adv).to(logprobs.dtype), zero)
    return loss, clipped.sum() / m.sum()


def test_a_helper_assigned_over_the_library_does_not_change_another_exercises_reference(monkeypatch):
    """clipped_surrogate calls masked_mean inside the library: a learner's masked_mean assigned over
    the library's must not leak into the reference of clipped_surrogate."""
    assert exercises.check("clipped_surrogate", surrogate_plain).passed
    monkeypatch.setattr(ppo_math, "masked_mean", mean_counts_padding)
    result = exercises.check("clipped_surrogate", surrogate_plain)
    assert result.passed, result.message


# ---------------------------------------------------------------- wrong versions that passed before


def whiten_no_eps(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    m = mask.bool()
    real = x[m]
    mean, var = real.mean(), real.var(unbiased=unbiased)
    out = (x - mean) / torch.sqrt(var)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, torch.zeros((), dtype=x.dtype))


def whiten_multiplies(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / (n - 1 if unbiased else n)
    out = (x - mean) / torch.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * m


def mean_multiplies(x, mask, dim=None):
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum()
    count = m.sum(dim)
    return torch.where(count > 0, (x * m).sum(dim) / count.clamp(min=1), torch.zeros_like(count))


def td_multiplies(rewards, values, mask, gamma):
    m = mask.to(values.dtype)
    v = values * m
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    return (rewards + gamma * next_v - v) * m


def gae_multiplies(rewards, values, mask, gamma, lam):
    m = mask.to(values.dtype)
    width = rewards.shape[1]
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(width)):
        next_v = values[:, t + 1] * m[:, t + 1] if t + 1 < width else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * m[:, t]
        advantages[:, t] = last
    return advantages, (advantages + values) * m


def value_loss_multiplies(values, old_values, returns, mask, cliprange_value):
    m = mask.to(values.dtype)
    clipped = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    err, err_clipped = (values - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * (torch.maximum(err, err_clipped) * m).sum() / m.sum()
    clipfrac = ((err_clipped > err).to(values.dtype) * m).sum() / m.sum()
    return loss, clipfrac


def surrogate_multiplies(logprobs, old_logprobs, advantages, mask, cliprange):
    m = mask.to(logprobs.dtype)
    ratio = torch.exp((logprobs - old_logprobs) * m)
    objective = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * advantages)
    loss = -(objective * m).sum() / m.sum()
    clipfrac = ((objective < ratio * advantages).to(logprobs.dtype) * m).sum() / m.sum()
    return loss, clipfrac


def surrogate_of_probabilities(logprobs, old_logprobs, advantages, mask, cliprange):
    m = mask.bool()
    zero = torch.zeros((), dtype=logprobs.dtype)
    ratio = torch.exp(torch.where(m, logprobs, zero)) / torch.exp(torch.where(m, old_logprobs, zero))
    adv = torch.where(m, advantages, zero)
    objective = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * adv)
    loss = -torch.where(m, objective, zero).sum() / m.sum()
    return loss, torch.where(m, (objective < ratio * adv).to(logprobs.dtype), zero).sum() / m.sum()


def kl_multiplies(logprobs, ref_logprobs, kind="k1", mask=None):
    lr = logprobs - ref_logprobs
    k = {"k1": lr, "k2": 0.5 * lr**2, "k3": torch.exp(-lr) - 1 + lr}[kind]
    return k if mask is None else k * mask


def shaped_multiplies(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    rewards = -kl_coef * kl_multiplies(logprobs, ref_logprobs, kl_estimator) * mask
    last = mask.sum(-1).long() - 1
    rows = torch.arange(mask.shape[0])
    return rewards.index_put((rows, last), scores.to(rewards.dtype), accumulate=True)


PASSED_BEFORE = [
    ("masked_whiten", whiten_no_eps, "eps"),
    ("masked_whiten", whiten_multiplies, "inf * 0"),
    ("masked_mean", mean_multiplies, "inf * 0"),
    ("td_residuals", td_multiplies, "inf * 0"),
    ("masked_gae", gae_multiplies, "inf * 0"),
    ("clipped_value_loss", value_loss_multiplies, "inf * 0"),
    ("clipped_surrogate", surrogate_multiplies, "inf * 0"),
    ("clipped_surrogate", surrogate_of_probabilities, "difference of the log-probs"),
    ("kl_estimate", kl_multiplies, "inf * 0"),
    ("shaped_rewards", shaped_multiplies, "inf * 0"),
]


@pytest.mark.parametrize("name, fn, words", PASSED_BEFORE, ids=[f.__name__ for _, f, _ in PASSED_BEFORE])
def test_a_wrong_version_that_passed_before_fails_with_a_message_saying_what_is_wrong(name, fn, words):
    result = exercises.check(name, fn)
    assert not result.passed, f"{fn.__name__} still passes"
    hint = next(line for line in result.message.split("\n") if line.startswith("Hint: "))
    assert words in hint, result.message


@pytest.mark.parametrize("name, fn, words", PASSED_BEFORE, ids=[f.__name__ for _, f, _ in PASSED_BEFORE])
def test_the_same_mistakes_are_named_in_korean(name, fn, words):
    from course_utils.lesson_aids.exercises_ko import KOREAN

    result = exercises.check(name, fn, lang="ko")
    assert not result.passed and result.message.startswith("실패: ")
    hint = next(line for line in result.message.split("\n") if line.startswith("힌트: "))
    assert any(korean in hint for english, korean in KOREAN.items() if words in english), result.message


def test_the_new_cases_hold_what_a_real_batch_can():
    whiten = {c.name: c for c in exercises._EXERCISES["masked_whiten"].cases()}
    equal = [c for name, c in whiten.items() if "equal" in name or "all-zero" in name]
    assert equal, list(whiten)
    for case in equal:  # every real token the same: variance 0, only eps keeps the result finite
        (x, mask), kwargs = case.fresh()
        assert torch.unique(x[mask.bool()]).numel() == 1
        assert torch.isfinite(ppo_math.masked_whiten(x, mask, **kwargs)).all()
    for name in ("masked_mean", "masked_whiten", "td_residuals", "masked_gae", "clipped_value_loss",
                 "clipped_surrogate", "kl_estimate", "shaped_rewards"):
        exercise = exercises._EXERCISES[name]
        padded = [c for c in exercise.cases() if "non-finite" in c.name]
        assert padded, name
        for case in padded:
            args, kwargs = case.fresh()
            mask = exercises._argument(exercise, args, kwargs, "mask").bool()
            tensors = [a for a in [*args, *kwargs.values()] if torch.is_tensor(a) and a.shape == mask.shape
                       and a.is_floating_point()]
            assert any((~torch.isfinite(t[~mask])).any() for t in tensors), (name, case.name)
            assert all(torch.isfinite(t[mask]).all() for t in tensors), (name, case.name)


def test_a_correct_where_version_passes_the_non_finite_cases():
    def masked_mean(x, mask, dim=None):
        m = mask.bool()
        kept = torch.where(m, x, torch.zeros((), dtype=x.dtype))
        if dim is None:
            return kept.sum() / m.sum()
        count = m.sum(dim)
        return torch.where(count > 0, kept.sum(dim) / count.clamp(min=1), torch.zeros((), dtype=x.dtype))

    result = exercises.check("masked_mean", masked_mean)
    assert result.passed, result.message


# =============================================================================================
# Item 4: the library at the ends of its ranges
# =============================================================================================

# ---------------------------------------------------------------- one response as 1-D or a list

R = [0.0, -0.1, 0.0, 2.0, 5.0]
V = [0.5, 0.6, 0.7, 0.8, 9.0]
M = [1, 1, 1, 1, 0]


def test_one_response_as_1d_is_a_batch_of_one_in_the_shape_given():
    r, v, m = (torch.tensor(x, dtype=torch.float32) for x in (R, V, M))
    rb, vb, mb = r[None], v[None], m[None]
    assert torch.equal(ppo_math.td_residuals(r, v, m, 0.9), ppo_math.td_residuals(rb, vb, mb, 0.9)[0])
    advantages, returns = ppo_math.masked_gae(r, v, m, 1.0, 0.95)
    expected = ppo_math.masked_gae(rb, vb, mb, 1.0, 0.95)
    assert advantages.shape == (5,) and torch.equal(advantages, expected[0][0]) and torch.equal(returns, expected[1][0])
    shaped = ppo_math.shaped_rewards(torch.tensor(2.0), r, v, m, 0.1)
    assert shaped.shape == (5,)
    assert torch.equal(shaped, ppo_math.shaped_rewards(torch.tensor([2.0]), rb, vb, mb, 0.1)[0])
    assert torch.equal(ppo_math.shaped_rewards(2.0, r, v, m, 0.1), shaped)
    assert torch.equal(ppo_math.score_on_last_token(torch.tensor(2.0), m),
                       ppo_math.score_on_last_token(torch.tensor([2.0]), mb)[0])
    assert int(ppo_math.last_token_index(m)) == 3
    assert torch.equal(ppo_math.masked_whiten(r, m), ppo_math.masked_whiten(rb, mb)[0])
    assert torch.equal(ppo_math.kl_penalty_rewards(r, v, m, 0.1), ppo_math.kl_penalty_rewards(rb, vb, mb, 0.1)[0])
    for one, many in ((ppo_math.clipped_surrogate(r, v, r, m, 0.2), ppo_math.clipped_surrogate(rb, vb, rb, mb, 0.2)),
                      (ppo_math.clipped_value_loss(r, v, r, m, 0.2), ppo_math.clipped_value_loss(rb, vb, rb, mb, 0.2))):
        assert all(torch.equal(a, b) for a, b in zip(one, many))


def test_python_lists_are_accepted_like_tensors():
    r, v, m = (torch.tensor(x, dtype=torch.float32) for x in (R, V, M))
    assert torch.equal(ppo_math.td_residuals(R, V, M, 0.9), ppo_math.td_residuals(r, v, m, 0.9))
    for got, want in zip(ppo_math.masked_gae(R, V, M, 1.0, 0.95), ppo_math.masked_gae(r, v, m, 1.0, 0.95)):
        assert got.dtype == torch.float32 and torch.equal(got, want)
    assert torch.equal(ppo_math.masked_gae([R, R], [V, V], [M, M], 1.0, 0.95)[0],
                       ppo_math.masked_gae(r.expand(2, 5), v.expand(2, 5), m.expand(2, 5), 1.0, 0.95)[0])
    assert torch.equal(ppo_math.masked_mean(R, M), ppo_math.masked_mean(r, m))
    assert torch.equal(ppo_math.masked_whiten(R, M), ppo_math.masked_whiten(r, m))
    assert torch.equal(ppo_math.kl_estimate(R, V, "k3", mask=M), ppo_math.kl_estimate(r, v, "k3", mask=m))
    assert torch.equal(ppo_math.shaped_rewards([2.0], [R], [V], [M], 0.1), ppo_math.shaped_rewards(
        torch.tensor([2.0]), r[None], v[None], m[None], 0.1))
    assert torch.equal(ppo_math.probability_ratio(R, V), ppo_math.probability_ratio(r, v))
    assert all(torch.equal(a, b) for a, b in zip(ppo_math.clipped_surrogate(R, V, R, M, 0.2),
                                                 ppo_math.clipped_surrogate(r, v, r, m, 0.2)))
    assert all(torch.equal(a, b) for a, b in zip(ppo_math.clipped_value_loss(R, V, R, M, 0.2),
                                                 ppo_math.clipped_value_loss(r, v, r, m, 0.2)))


def test_a_shape_that_does_not_fit_is_named_with_the_shape_expected():
    r = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"\[B, T\].*\[T\]"):
        ppo_math.masked_gae(r, r, torch.ones(2, 3, 4), 1.0, 0.95)
    with pytest.raises(ValueError, match=r"dim=1.*shape \(5,\)"):
        ppo_math.masked_mean(torch.zeros(5), torch.ones(5), dim=1)
    with pytest.raises(TypeError, match="numbers"):
        ppo_math.td_residuals(["a", "b"], [0.0, 0.0], [1, 1], 1.0)
    with pytest.raises(ValueError, match=r"scores.*one score per response"):
        ppo_math.shaped_rewards(torch.tensor([1.0, 2.0]), torch.zeros(5), torch.zeros(5), torch.ones(5), 0.1)


# ---------------------------------------------------------------- ranges of cliprange, β, γ


@pytest.mark.parametrize("bad", [-0.1, NAN, -INF])
def test_a_negative_or_nan_cliprange_is_refused_naming_it(bad):
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"cliprange must be .*>= 0.*got"):
        ppo_math.clipped_surrogate(x, x, x, m, bad)
    with pytest.raises(ValueError, match=r"cliprange must be .*>= 0.*got"):
        ppo_math.clipped_objective_per_token(1.2, 1.0, bad)
    with pytest.raises(ValueError, match=r"cliprange_value must be .*>= 0.*got"):
        ppo_math.clipped_value_loss(x, x, x, m, bad)


@pytest.mark.parametrize("bad", [-0.05, NAN, INF])
def test_a_negative_nan_or_infinite_kl_coef_is_refused_naming_it(bad):
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"kl_coef \(β\) must be a finite number >= 0"):
        ppo_math.kl_penalty_rewards(x, x, m, bad)
    with pytest.raises(ValueError, match=r"kl_coef \(β\) must be a finite number >= 0"):
        ppo_math.shaped_rewards(torch.zeros(2), x, x, m, bad)


def test_the_ends_of_the_valid_ranges_are_accepted():
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    for cliprange in (0.0, 0.2, 1.0, INF):
        assert torch.isfinite(ppo_math.clipped_surrogate(x, x, x, m, cliprange)[0])
        assert torch.isfinite(ppo_math.clipped_value_loss(x, x, x, m, cliprange)[0])
    assert torch.equal(ppo_math.kl_penalty_rewards(x, x - 1, m, 0.0), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"gamma must .*\[0, 1\].*nan"):
        ppo_math.td_residuals(x, x, m, NAN)


def test_validation_costs_nothing_on_tensors_in_the_hot_loop():
    """The trainer passes Python floats; a tensor cliprange on another device is not synchronised
    to read it (the checks are O(1) on Python numbers)."""
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    loss, clipfrac = ppo_math.clipped_surrogate(x, x, x, m, torch.tensor(0.2))
    assert loss.dtype == torch.float32 and clipfrac.dtype == torch.float32


# ---------------------------------------------------------------- empty batches, zero-length responses


def test_zero_length_responses_give_empty_results():
    empty = torch.zeros(3, 0)
    advantages, returns = ppo_math.masked_gae(empty, empty, empty, 1.0, 0.95)
    assert advantages.shape == returns.shape == (3, 0)
    assert ppo_math.td_residuals(empty, empty, empty, 1.0).shape == (3, 0)
    assert ppo_math.last_token_index(empty).tolist() == [-1, -1, -1]
    assert ppo_math.shaped_rewards(torch.ones(3), empty, empty, empty, 0.1).shape == (3, 0)
    assert ppo_math.masked_mean(empty, empty, dim=1).tolist() == [0.0, 0.0, 0.0]


def test_an_empty_batch_gives_an_empty_result_or_one_message():
    none = torch.zeros(0, 4)
    assert ppo_math.masked_gae(none, none, none, 1.0, 0.95)[0].shape == (0, 4)
    assert ppo_math.shaped_rewards(torch.zeros(0), none, none, none, 0.1).shape == (0, 4)
    for call in (lambda: ppo_math.clipped_surrogate(none, none, none, none, 0.2),
                 lambda: ppo_math.masked_whiten(none, none),
                 lambda: ppo_math.clipped_value_loss(none, none, none, none, 0.2)):
        with pytest.raises(ValueError, match="selects no tokens"):
            call()


def test_a_nan_ratio_is_not_silently_counted_as_unclipped():
    logprobs = torch.tensor([[0.0, -1.0, NAN, -0.5]])
    old = torch.tensor([[0.0, -1.2, -1.0, -0.5]])
    loss, clipfrac = ppo_math.clipped_surrogate(logprobs, old, torch.ones(1, 4), torch.ones(1, 4), 0.2)
    assert math.isnan(float(loss)) and math.isnan(float(clipfrac))
    values = torch.tensor([[0.0, NAN, 1.0]])
    loss, clipfrac = ppo_math.clipped_value_loss(values, torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3), 0.2)
    assert math.isnan(float(loss)) and math.isnan(float(clipfrac))


# ---------------------------------------------------------------- the views the sliders drive


def render(fig) -> bytes:
    png = plots.figure_to_png(fig)
    assert png.startswith(b"\x89PNG")
    return png


def texts_of(fig) -> str:
    parts = []
    for ax in fig.axes:
        parts += [ax.get_title(), *(t.get_text() for t in ax.texts)]
        legend = ax.get_legend()
        if legend is not None:
            parts += [t.get_text() for t in legend.get_texts()]
    return " | ".join(parts)


def no_bare_nan(text: str) -> None:
    """NaN may be named ("not a number (NaN)"), never formatted as if it were one ("nan", "nan%")."""
    assert "nan%" not in text.lower() and "+nan" not in text.lower() and " nan" not in text, text
    assert "inf%" not in text.lower(), text


def test_clipping_view_survives_an_overflowing_ratio_and_says_so():
    logprobs = torch.tensor([[0.0, -1.0, 800.0, -0.3]])
    old = torch.tensor([[0.0, -1.2, -1.0, -0.3]])
    fig, clip_fraction = widgets.clipping_view(0.2, 1.0, logprobs, old)
    render(fig)
    assert "not finite" in texts_of(fig) and math.isfinite(clip_fraction)
    fig = plots.plot_clipping_view(torch.tensor([0.9, 1.0, INF, 1e300], dtype=torch.float64), 0.2, 1.0)
    render(fig)
    assert "1 of 4" in texts_of(fig) and "not finite" in texts_of(fig)


def test_a_nan_token_is_named_not_silently_left_out_of_the_clip_fraction():
    logprobs = torch.tensor([[0.0, -1.0, NAN, -0.3]])
    old = torch.tensor([[0.0, -1.2, -1.0, -0.3]])
    fig, clip_fraction = widgets.clipping_view(0.2, 1.0, logprobs, old)
    render(fig)
    assert "1 of 4" in texts_of(fig) and "NaN" in texts_of(fig)
    text = widgets.clip_fraction_text(clip_fraction)
    if math.isnan(clip_fraction):
        assert "NaN" in text
    no_bare_nan(text)
    assert "NaN" in widgets.clip_fraction_text(NAN)
    no_bare_nan(widgets.clip_fraction_text(NAN))


@pytest.mark.parametrize("bad", [-0.2, 0.0, 1.0, NAN])
def test_clipping_view_refuses_a_cliprange_outside_its_range(bad):
    logprobs, old = widgets.sampled_log_ratios(n=50)
    with pytest.raises(ValueError, match=r"cliprange must be in \(0, 1\)"):
        widgets.clipping_view(bad, 1.0, logprobs, old)


def test_beta_view_with_a_nan_score_draws_names_it_and_never_calls_it_best():
    scores = torch.tensor([1.0, NAN, 0.5])
    logprobs = torch.tensor([[-1.0, -1.2, -0.8], [-0.5, -0.6, -0.7], [-1.5, -1.1, -0.9]])
    fig, summary = widgets.beta_view(0.1, scores, logprobs, logprobs - 0.2, torch.ones(3, 3))
    render(fig)
    assert summary["best"] == 0
    assert "NaN" in texts_of(fig)
    text = widgets.beta_text(summary)
    no_bare_nan(text)
    scores = torch.tensor([NAN, NAN])
    fig, summary = widgets.beta_view(0.1, scores, logprobs[:2], logprobs[:2], torch.ones(2, 3))
    render(fig)
    assert summary["best"] is None
    text = widgets.beta_text(summary)
    assert "NaN" in text
    no_bare_nan(text)


def test_beta_view_with_an_infinite_penalty_draws():
    logprobs = torch.tensor([[-1.0, -1.2], [-0.5, -0.6]])
    ref = torch.tensor([[-INF, -1.2], [-0.5, -0.6]])
    fig, summary = widgets.beta_view(0.1, torch.tensor([1.0, 0.5]), logprobs, ref, torch.ones(2, 2))
    render(fig)
    assert summary["best"] == 1
    no_bare_nan(widgets.beta_text(summary))


@pytest.mark.parametrize("bad", [-0.1, NAN])
def test_beta_view_refuses_a_negative_or_nan_beta(bad):
    logprobs = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="kl_coef"):
        widgets.beta_view(bad, torch.ones(2), logprobs, logprobs, torch.ones(2, 3))


def test_beta_view_of_an_empty_batch_is_one_message():
    with pytest.raises(ValueError, match="at least one response"):
        widgets.beta_view(0.1, torch.zeros(0), torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3))


@pytest.mark.parametrize("bad", [1.0, 1.5, 0.0, -0.2, NAN])
def test_ratio_band_view_refuses_a_cliprange_a_log_axis_cannot_show(bad):
    with pytest.raises(ValueError, match=r"cliprange must be in \(0, 1\)"):
        widgets.ratio_band_view({1: torch.tensor([0.9, 1.1, 1.5])}, 1, bad)


def test_the_score_threshold_line_never_prints_nan_percent():
    _, summary = widgets.score_threshold_view([0.1, 0.2, 0.3], [True, False, True], 5.0)
    text = widgets.score_threshold_text(summary)
    no_bare_nan(text)
    assert "no answer accepted" in text
    _, summary = widgets.score_threshold_view([0.1, 0.2], [False, False], 0.0)
    text = widgets.score_threshold_text(summary)
    no_bare_nan(text)
    assert "no passing answer" in text


def test_a_nan_score_in_the_threshold_view_is_one_message():
    with pytest.raises(ValueError, match=r"1 of the 3 scores .*NaN"):
        widgets.score_threshold_view([0.1, NAN, 0.3], [True, False, True], 0.2)


@pytest.mark.parametrize("kwargs, words", [({"value": NAN}, "value"), ({"score": INF}, "score"),
                                           ({"max_len": 0, "reward_position": 0}, "max_len")])
def test_gae_view_refuses_values_it_cannot_draw(kwargs, words):
    args = {"gamma": 1.0, "lam": 0.95, "reward_position": 3, "value": 0.0, "score": 2.0, "max_len": 10, **kwargs}
    with pytest.raises(ValueError, match=words):
        widgets.gae_view(**args)


def test_gae_view_at_the_ends_of_its_sliders_draws_finite_numbers():
    for gamma, lam, position, value in ((0.8, 0.0, 0, -1.0), (1.0, 1.0, 99, 3.0), (0.8, 1.0, 99, -1.0)):
        fig, summary = widgets.gae_view(gamma, lam, position, value)
        render(fig)
        assert math.isfinite(summary["first"]) and math.isfinite(summary["last"])
        no_bare_nan(widgets.gae_text(summary))


def test_whitening_view_with_a_nan_advantage_is_one_message():
    raw = torch.tensor([[1.0, NAN, 2.0], [0.5, 1.0, 3.0]])
    with pytest.raises(ValueError, match=r"1 .*NaN or inf"):
        widgets.whitening_view(raw, torch.ones(2, 3), 2)
    raw = torch.tensor([[1.0, 2.0, NAN], [0.5, 1.0, 3.0]])  # NaN on the padding is never read
    fig, summary = widgets.whitening_view(raw, torch.tensor([[1, 1, 0], [1, 1, 1]]), 1)
    render(fig)
    assert math.isfinite(summary["largest_difference"])


def test_the_hacking_rule_view_without_evaluations_is_one_message():
    with pytest.raises(ValueError, match="no evaluation"):
        widgets.hacking_rule_view([{"update": 1, "score": 0.1}], [], 2, 5)


def test_reward_components_name_a_nan_bar_instead_of_leaving_a_gap():
    fig = plots.plot_reward_components(np.array([1.0, NAN]), np.array([-0.1, -0.2]), np.array([0.9, NAN]),
                                       ylim=(-2, 2))
    render(fig)
    assert "NaN" in texts_of(fig)
    fig = plots.plot_reward_components(np.array([1.0, 1.0]), np.array([-INF, -0.2]), np.array([-INF, 0.8]),
                                       ylim=(-2, 2))
    render(fig)
    assert "-inf" not in texts_of(fig) and "−∞" in texts_of(fig)
