"""Tests of course_utils.lesson_aids.exercises: the checker that notebook exercise cells call.

The wrong implementations below are written the way a learner would write them (plain torch, no
library calls), independently of the checker's own table of known mistakes. Each one is first shown
to really differ from the library on at least one of the checker's cases, so a checker that passed
everything could not pass these tests.
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from course_utils import ppo_math, rollout
from course_utils.lesson_aids import exercises

torch.set_num_threads(1)

LIBRARY = {name: getattr(ppo_math, name, None) or getattr(rollout, name) for name in exercises.EXERCISES}


def really_differs(name, fn) -> bool:
    """True if ``fn`` gives another result than the library (or raises) on at least one case."""
    reference = LIBRARY[name]
    for case in exercises._EXERCISES[name].cases():
        args, kwargs = case.fresh()
        expected = reference(*args, **kwargs)
        args, kwargs = case.fresh()
        try:
            actual = fn(*args, **kwargs)
        except Exception:
            return True
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, (tuple, list)) else (actual,)
        if len(actual) != len(expected):
            return True
        for e, a in zip(expected, actual):
            if not torch.is_tensor(a) or a.shape != e.shape:
                return True
            if not torch.allclose(a.detach().double(), e.detach().double(), rtol=1e-5, atol=1e-6, equal_nan=True):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# Learner-style wrong implementations, (hint substring, function) per exercise
# ---------------------------------------------------------------------------------------------


def _stop(ids, eos):
    return torch.isin(ids, torch.as_tensor([eos] if isinstance(eos, int) else list(eos)))


def mask_not_eos(response_ids, eos_token_id):
    mask = (response_ids != eos_token_id).float()  # the pad-id shortcut of week 2
    ended = (response_ids == eos_token_id).any(-1)
    return mask, mask.sum(-1).long() - 1, ended, ~ended


def mask_drops_eos(response_ids, eos_token_id):
    is_eos = _stop(response_ids, eos_token_id).long()
    mask = (is_eos.cumsum(-1) == 0).float()
    ended = is_eos.bool().any(-1)
    return mask, mask.sum(-1).long() - 1, ended, ~ended


def mask_argmax(response_ids, eos_token_id):
    is_eos = _stop(response_ids, eos_token_id)
    first = is_eos.int().argmax(-1)
    mask = (torch.arange(response_ids.shape[1]) <= first[:, None]).float()
    return mask, first, is_eos.any(-1), ~is_eos.any(-1)


def mask_truncated_last_column(response_ids, eos_token_id):
    is_eos = _stop(response_ids, eos_token_id).long()
    mask = ((is_eos.cumsum(-1) - is_eos) == 0).float()
    last = mask.sum(-1).long() - 1
    truncated = last == response_ids.shape[1] - 1
    return mask, last, ~truncated, truncated


def mask_last_is_length(response_ids, eos_token_id):
    is_eos = _stop(response_ids, eos_token_id).long()
    mask = ((is_eos.cumsum(-1) - is_eos) == 0).float()
    ended = is_eos.bool().any(-1)
    return mask, mask.sum(-1).long(), ended, ~ended


def td_bootstrap(rewards, values, mask, gamma):
    next_v = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    return (rewards + gamma * next_v - values) * mask


def td_roll(rewards, values, mask, gamma):
    v = values * mask
    return (rewards + gamma * torch.roll(v, -1, dims=1) - v) * mask


def td_no_gamma(rewards, values, mask, gamma):
    v = values * mask
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    return (rewards + next_v - v) * mask


def td_target(rewards, values, mask, gamma):
    v = values * mask
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    return (rewards + gamma * next_v) * mask


def _delta(rewards, values, mask, gamma):
    v = values * mask
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    return (rewards + gamma * next_v - v) * mask


def gae_bootstrap(rewards, values, mask, gamma, lam):
    batch, width = rewards.shape
    advantages, last = torch.zeros_like(rewards), torch.zeros(batch, dtype=rewards.dtype)
    for t in reversed(range(width)):
        next_v = values[:, t + 1] if t + 1 < width else torch.zeros(batch, dtype=rewards.dtype)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages, (advantages + values) * mask


def gae_forwards(rewards, values, mask, gamma, lam):
    delta = _delta(rewards, values, mask, gamma)
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1]):
        last = (delta[:, t] + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages, (advantages + values) * mask


def gae_swapped(rewards, values, mask, gamma, lam):
    delta = _delta(rewards, values, mask, lam)  # λ where γ belongs
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        last = (delta[:, t] + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages, (advantages + values) * mask


def gae_returns_are_advantages(rewards, values, mask, gamma, lam):
    delta = _delta(rewards, values, mask, gamma)
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        last = (delta[:, t] + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages, advantages


def mean_over_numel(x, mask, dim=None):
    total = (x * mask).sum() if dim is None else (x * mask).sum(dim)
    return total / (mask.numel() if dim is None else mask.shape[dim])


def mean_of_everything(x, mask, dim=None):
    return x.mean() if dim is None else x.mean(dim)


def mean_of_row_means(x, mask, dim=None):
    row_means = (x * mask).sum(-1) / mask.sum(-1)
    return row_means.mean() if dim is None else row_means


def mean_nan_rows(x, mask, dim=None):
    m = mask.bool()
    total = torch.where(m, x, 0.0)
    return total.sum() / m.sum() if dim is None else total.sum(dim) / m.sum(dim)


def whiten_naive(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    w = (x - x.mean()) / torch.sqrt(x.var(unbiased=unbiased) + eps)
    if not shift_mean:
        w = w + x.mean()
    return w * mask


def whiten_biased(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    m = mask.bool()
    mean, var = x[m].mean(), x[m].var(unbiased=False)  # ignores the unbiased argument
    w = (x - mean) / torch.sqrt(var + eps)
    if not shift_mean:
        w = w + mean
    return torch.where(m, w, 0.0)


def whiten_no_mean_back(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    m = mask.bool()
    mean, var = x[m].mean(), x[m].var(unbiased=unbiased)
    return torch.where(m, (x - mean) / torch.sqrt(var + eps), 0.0)


def whiten_scales_mean(x, mask, shift_mean=True, unbiased=True, eps=1e-8, distributed=None, group=None):
    m = mask.bool()
    mean, var = x[m].mean(), x[m].var(unbiased=unbiased)
    w = (x - mean) / torch.sqrt(var + eps) if shift_mean else x / torch.sqrt(var + eps)
    return torch.where(m, w, 0.0)


def _value_errors(values, old_values, returns, mask, c, clip_like_ratio=False):
    if clip_like_ratio:
        v_clip = torch.clamp(values, 1 - c, 1 + c)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -c, c)
    return (values - returns) ** 2, (v_clip - returns) ** 2


def _masked(x, mask):
    m = mask.bool()
    return torch.where(m, x, 0.0).sum() / m.sum()


def _value_clipfrac(unclipped, clipped, mask):
    return _masked((clipped > unclipped).to(unclipped.dtype), mask)


def value_loss_no_half(values, old_values, returns, mask, cliprange_value):
    unclipped, clipped = _value_errors(values, old_values, returns, mask, cliprange_value)
    return _masked(torch.maximum(unclipped, clipped), mask), _value_clipfrac(unclipped, clipped, mask)


def value_loss_min(values, old_values, returns, mask, cliprange_value):
    unclipped, clipped = _value_errors(values, old_values, returns, mask, cliprange_value)
    return 0.5 * _masked(torch.minimum(unclipped, clipped), mask), _value_clipfrac(unclipped, clipped, mask)


def value_loss_unclipped(values, old_values, returns, mask, cliprange_value):
    unclipped, clipped = _value_errors(values, old_values, returns, mask, cliprange_value)
    return 0.5 * _masked(unclipped, mask), _value_clipfrac(unclipped, clipped, mask)


def value_loss_ratio_clip(values, old_values, returns, mask, cliprange_value):
    unclipped, clipped = _value_errors(values, old_values, returns, mask, cliprange_value, clip_like_ratio=True)
    return 0.5 * _masked(torch.maximum(unclipped, clipped), mask), _value_clipfrac(unclipped, clipped, mask)


def ratio_swapped(logprobs, old_logprobs):
    return torch.exp(old_logprobs - logprobs)


def ratio_of_probs(logprobs, old_logprobs):
    return logprobs.exp() / old_logprobs.exp()


def ratio_log(logprobs, old_logprobs):
    return logprobs - old_logprobs


def _surrogate(logprobs, old_logprobs, advantages, mask, cliprange, pick=torch.minimum, sign=-1.0, mean=None):
    m = mask.bool()
    ratio = torch.exp(torch.where(m, logprobs - old_logprobs, 0.0))
    adv = torch.where(m, advantages, 0.0)
    unclipped, clipped = ratio * adv, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * adv
    objective = pick(unclipped, clipped)
    loss = (sign * objective).mean() if mean == "all" else _masked(sign * objective, mask)
    return loss, _masked((objective < unclipped).to(ratio.dtype), mask)


def surrogate_max(logprobs, old_logprobs, advantages, mask, cliprange):
    return _surrogate(logprobs, old_logprobs, advantages, mask, cliprange, pick=torch.maximum)


def surrogate_not_negated(logprobs, old_logprobs, advantages, mask, cliprange):
    return _surrogate(logprobs, old_logprobs, advantages, mask, cliprange, sign=1.0)


def surrogate_mean_all(logprobs, old_logprobs, advantages, mask, cliprange):
    return _surrogate(logprobs, old_logprobs, advantages, mask, cliprange, mean="all")


def surrogate_clamps_product(logprobs, old_logprobs, advantages, mask, cliprange):
    m = mask.bool()
    ratio = torch.exp(torch.where(m, logprobs - old_logprobs, 0.0))
    adv = torch.where(m, advantages, 0.0)
    objective = torch.min(ratio * adv, torch.clamp(ratio * adv, 1 - cliprange, 1 + cliprange))  # clamps r·A
    return _masked(-objective, mask), _masked((objective < ratio * adv).to(ratio.dtype), mask)


def surrogate_masks_after_exp(logprobs, old_logprobs, advantages, mask, cliprange):
    m = mask.bool()
    ratio = torch.exp(logprobs - old_logprobs)  # exp() of whatever the padding holds
    objective = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - cliprange, 1 + cliprange) * advantages)
    objective = torch.where(m, objective, 0.0)  # masked after exp(): the value is clean, the gradient is not
    clipped = torch.where(m, (objective < ratio * advantages).to(ratio.dtype), 0.0)
    return -objective.sum() / m.sum(), clipped.sum() / m.sum()


def surrogate_clipfrac_band(logprobs, old_logprobs, advantages, mask, cliprange):
    loss, _ = _surrogate(logprobs, old_logprobs, advantages, mask, cliprange)
    ratio = torch.exp(logprobs - old_logprobs)
    return loss, _masked(((ratio < 1 - cliprange) | (ratio > 1 + cliprange)).to(ratio.dtype), mask)


def _kl(lr, kind):
    return {"k1": lr, "k2": 0.5 * lr**2, "k3": torch.exp(-lr) - 1 + lr}[kind]


def _kl_masked(out, mask):
    return out if mask is None else torch.where(mask.bool(), out, 0.0)


def kl_swapped(logprobs, ref_logprobs, kind="k1", mask=None):
    return _kl_masked(_kl(ref_logprobs - logprobs, kind), mask)


def kl_k3_plus(logprobs, ref_logprobs, kind="k1", mask=None):
    lr = logprobs - ref_logprobs
    out = torch.exp(lr) - 1 + lr if kind == "k3" else _kl(lr, kind)
    return _kl_masked(out, mask)


def kl_k2_full(logprobs, ref_logprobs, kind="k1", mask=None):
    lr = logprobs - ref_logprobs
    return _kl_masked(lr**2 if kind == "k2" else _kl(lr, kind), mask)


def kl_ignores_mask(logprobs, ref_logprobs, kind="k1", mask=None):
    return _kl(logprobs - ref_logprobs, kind)


def _rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator, where="last", sign=-1.0):
    m = mask.bool()
    rewards = torch.where(m, sign * kl_coef * _kl(logprobs - ref_logprobs, kl_estimator), 0.0)
    length = m.sum(-1)
    for b in range(rewards.shape[0]):
        col = {"first": 0, "column": rewards.shape[1] - 1, "after": int(length[b]), "last": int(length[b]) - 1}[where]
        if col < rewards.shape[1]:
            rewards[b, col] = rewards[b, col] + scores[b]
    return rewards


def rewards_first(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return _rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator, where="first")


def rewards_last_column(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return _rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator, where="column")


def rewards_after(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return _rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator, where="after")


def rewards_plus(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
    return _rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator, sign=1.0)


WRONG = {
    "response_mask_from_ids": [
        ("not from token values", mask_not_eos),
        ("keep it in the mask", mask_drops_eos),
        ("argmax return 0", mask_argmax),
        ("'truncated' means no EOS at all", mask_truncated_last_column),
        ("last_index is a position, not a length", mask_last_is_length),
    ],
    "td_residuals": [
        ("bootstrapped from the value stored on the padding", td_bootstrap),
        ("torch.roll wraps around", td_roll),
        ("you left γ out", td_no_gamma),
        ("You returned the target", td_target),
    ],
    "masked_gae": [
        ("bootstrapped from the value stored on the padding", gae_bootstrap),
        ("GAE runs backwards in time", gae_forwards),
        ("γ and λ are swapped", gae_swapped),
        ("not the advantages themselves", gae_returns_are_advantages),
    ],
    "masked_mean": [
        ("padding included", mean_over_numel),
        ("averaged every entry", mean_of_everything),
        ("averaged per-response means", mean_of_row_means),
        ("must give 0, not NaN", mean_nan_rows),
    ],
    "masked_whiten": [
        ("counted the padding", whiten_naive),
        ("yours uses the other one", whiten_biased),
        ("then add the mean back", whiten_no_mean_back),
        ("scales the mean too", whiten_scales_mean),
    ],
    "clipped_value_loss": [
        ("factor 0.5", value_loss_no_half),
        ("yours takes the min", value_loss_min),
        ("You never clipped", value_loss_unclipped),
        ("Clip the CHANGE", value_loss_ratio_clip),
    ],
    "probability_ratio": [
        ("upside down", ratio_swapped),
        ("underflows to 0", ratio_of_probs),
        ("returned the log-ratio", ratio_log),
    ],
    "clipped_surrogate": [
        ("yours takes the max", surrogate_max),
        ("the minus sign is missing", surrogate_not_negated),
        ("counted the padding", surrogate_mean_all),
        ("clipfrac counts the tokens where the clipped term was chosen", surrogate_clipfrac_band),
        ("You clamped the product r·A", surrogate_clamps_product),
    ],
    "kl_estimate": [
        ("comes first", kl_swapped),
        ("the exponent is MINUS the log-ratio", kl_k3_plus),
        ("keep the 1/2", kl_k2_full),
        ("exactly 0 where mask is 0", kl_ignores_mask),
    ],
    "shaped_rewards": [
        ("not on the first token", rewards_first),
        ("last column of the tensor", rewards_last_column),
        ("not on the position after it", rewards_after),
        ("Yours adds +β·k_t", rewards_plus),
    ],
}

WRONG_CASES = [(name, text, fn) for name, items in WRONG.items() for text, fn in items]


# ---------------------------------------------------------------------------------------------
# The library passes; the wrong versions fail with the right hint
# ---------------------------------------------------------------------------------------------


def test_every_exercise_has_wrong_versions_here():
    assert set(WRONG) == set(exercises.EXERCISES)
    assert all(len(items) >= 3 for items in WRONG.values())


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_library_passes_its_own_check(name):
    result = exercises.check(name, LIBRARY[name])
    assert result.passed, result.message
    assert result.message.startswith("passed")


@pytest.mark.parametrize("name, hint_text, fn", WRONG_CASES, ids=[f"{n}-{f.__name__}" for n, _, f in WRONG_CASES])
def test_wrong_version_fails_with_its_hint(name, hint_text, fn):
    assert really_differs(name, fn), f"{fn.__name__} is not wrong on any case: the test could not fail"
    result = exercises.check(name, fn)
    assert not result.passed
    assert hint_text in result.message, result.message
    case_names = [case.name for case in exercises._EXERCISES[name].cases()]
    assert any(f'Case "{case}"' in result.message for case in case_names), result.message


@pytest.mark.parametrize(
    "name, mistake",
    [(name, m) for name, e in exercises._EXERCISES.items() for m in e.mistakes],
    ids=[f"{name}-{m.wrong.__name__}" for name, e in exercises._EXERCISES.items() for m in e.mistakes],
)
def test_every_known_mistake_is_visible_and_recognised(name, mistake):
    """Each entry of the checker's own table shows on some case and is named by its own hint."""
    assert really_differs(name, mistake.wrong)
    result = exercises.check(name, mistake.wrong)
    assert not result.passed and mistake.hint in result.message, result.message


def test_the_failure_message_names_case_position_and_values():
    result = exercises.check("masked_mean", mean_over_numel)
    first_case = result.message.split('Case "')[1].split('"')[0]
    assert first_case in [case.name for case in exercises._EXERCISES["masked_mean"].cases()]
    assert "expected" in result.message and "got" in result.message
    result = exercises.check("td_residuals", td_bootstrap)
    assert "differs at index (" in result.message


def test_a_correct_alternative_implementation_passes():
    """A learner's version written differently from the library (bool indexing, float32 maths) passes."""

    def masked_mean(x, mask, dim=None):
        m = mask.bool()
        if dim is None:
            return x[m].sum() / m.sum()
        count = m.sum(dim)
        return torch.where(count > 0, torch.where(m, x, 0.0).sum(dim) / count.clamp(min=1), 0.0)

    def masked_gae(rewards, values, mask, gamma, lam):
        m = mask.bool()
        batch = rewards.shape[0]
        advantages = torch.zeros_like(rewards)
        for b in range(batch):
            n, carry = int(m[b].sum()), 0.0
            for t in reversed(range(n)):
                next_v = values[b, t + 1] if t + 1 < n else 0.0
                carry = rewards[b, t] + gamma * next_v - values[b, t] + gamma * lam * carry
                advantages[b, t] = carry
        return advantages, torch.where(m, advantages + values, 0.0)

    assert exercises.check("masked_mean", masked_mean).passed
    assert exercises.check("masked_gae", masked_gae).passed


# ---------------------------------------------------------------------------------------------
# Errors in the learner's code are reported, never raised
# ---------------------------------------------------------------------------------------------


def test_an_exception_is_reported_with_the_learners_line():
    def masked_mean(x, mask, dim=None):
        mask = mask.bool()
        raise RuntimeError("boom inside the learner")

    result = exercises.check("masked_mean", masked_mean)
    assert not result.passed
    assert "RuntimeError" in result.message and "boom inside the learner" in result.message
    assert 'raise RuntimeError("boom inside the learner")' in result.message
    assert "Traceback" not in result.message


def test_a_torch_error_gets_a_useful_hint():
    def masked_mean(x, mask, dim=None):
        return x[mask].mean()  # a float mask cannot index

    result = exercises.check("masked_mean", masked_mean)
    assert "IndexError" in result.message and "mask.bool()" in result.message


def test_a_wrong_signature_is_reported():
    def masked_gae(rewards, values, mask):
        return rewards, values

    result = exercises.check("masked_gae", masked_gae)
    assert not result.passed and "TypeError" in result.message
    assert "the same arguments as the library's" in result.message and "lam: float" in result.message


def test_a_wrong_shape_is_reported():
    def masked_mean(x, mask, dim=None):
        return (x * mask).sum(-1) / mask.sum(-1)  # always per row

    result = exercises.check("masked_mean", masked_mean)
    assert not result.passed and "has shape (4,), expected ()" in result.message


def test_a_wrong_dtype_and_a_missing_return_are_reported():
    def probability_ratio(logprobs, old_logprobs):
        return torch.exp(logprobs - old_logprobs).float()

    def td_residuals(rewards, values, mask, gamma):
        (rewards + gamma * values) * mask

    result = exercises.check("probability_ratio", probability_ratio)
    assert "dtype float32, expected float64" in result.message
    assert "`return` missing" in exercises.check("td_residuals", td_residuals).message


def test_a_tuple_of_the_wrong_length_is_reported():
    result = exercises.check("masked_gae", lambda rewards, values, mask, gamma, lam: (rewards,))
    assert not result.passed and "returned 1 values, expected a tuple of 2 tensors" in result.message


def test_changing_an_input_in_place_is_reported():
    def td_residuals(rewards, values, mask, gamma):
        values *= mask  # edits the caller's tensor
        next_v = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
        return (rewards + gamma * next_v - values) * mask

    result = exercises.check("td_residuals", td_residuals)
    assert not result.passed and "changed its input `values` in place" in result.message


def test_a_hint_is_never_repeated():
    def shaped_rewards(scores, logprobs, ref_logprobs, mask, kl_coef, kl_estimator="k1"):
        rewards = -kl_coef * (logprobs - ref_logprobs)  # k1 always, and no mask on the penalty
        rewards = rewards.clone()
        rewards[torch.arange(rewards.shape[0]), mask.long().sum(-1) - 1] += scores
        return rewards

    result = exercises.check("shaped_rewards", shaped_rewards)
    hint_lines = [line for line in result.message.splitlines() if line.startswith(("Hint:", "Also:"))]
    assert any("exactly 0 where mask is 0" in line for line in hint_lines)
    assert len(hint_lines) == len({line.split(":", 1)[1].strip() for line in hint_lines}), result.message


def test_kl_messages_for_an_optional_mask_and_a_k3_upside_down():
    def no_mask_check(logprobs, ref_logprobs, kind="k1", mask=None):
        return _kl(logprobs - ref_logprobs, kind) * mask  # crashes when mask is None

    def k3_upside_down(logprobs, ref_logprobs, kind="k1", mask=None):
        lr = logprobs - ref_logprobs
        return _kl_masked(torch.exp(lr) - 1 - lr if kind == "k3" else _kl(lr, kind), mask)

    assert "with mask=None" in exercises.check("kl_estimate", no_mask_check).message
    assert "If only your k3 is wrong" in exercises.check("kl_estimate", k3_upside_down).message


def test_a_list_of_stop_ids_is_mentioned_when_it_breaks_the_learners_code():
    def response_mask_from_ids(response_ids, eos_token_id):
        is_eos = (response_ids == eos_token_id).long()  # a list of ids makes this a plain bool
        mask = ((is_eos.cumsum(-1) - is_eos) == 0).float()
        return mask, mask.sum(-1).long() - 1, is_eos.bool().any(-1), ~is_eos.bool().any(-1)

    result = exercises.check("response_mask_from_ids", response_mask_from_ids)
    assert not result.passed and "a list of ids" in result.message


def test_a_loss_without_gradient_is_reported():
    def clipped_value_loss(values, old_values, returns, mask, cliprange_value):
        loss, clipfrac = ppo_math.clipped_value_loss(values.detach(), old_values, returns, mask, cliprange_value)
        return loss, clipfrac

    result = exercises.check("clipped_value_loss", clipped_value_loss)
    assert not result.passed and "carries no gradient" in result.message


def test_a_stub_is_not_attempted_yet():
    def masked_mean(x, mask, dim=None):
        raise NotImplementedError  # YOUR CODE HERE

    result = exercises.check("masked_mean", masked_mean)
    assert not result.passed and not result.attempted
    assert result.message.startswith("not attempted yet")


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_stub_text_runs_and_is_not_attempted_yet(name):
    source = exercises.stub(name)
    assert f"def {name}(" in source and "raise NotImplementedError  # YOUR CODE HERE" in source
    assert '"""' in source  # the docstring with the formula
    namespace: dict = {}
    exec(compile(source, f"<stub {name}>", "exec"), namespace)
    assert exercises.check(name, namespace[name]).message.startswith("not attempted yet")


def test_not_a_function_is_reported():
    result = exercises.check("masked_mean", 3.0)
    assert not result.passed and "needs your function itself" in result.message


def test_an_unknown_name_raises_value_error_listing_the_names():
    with pytest.raises(ValueError) as info:
        exercises.check("masked_median", lambda x: x)
    assert all(name in str(info.value) for name in exercises.EXERCISES)
    with pytest.raises(ValueError):
        exercises.hint("masked_median")


# ---------------------------------------------------------------------------------------------
# The helpers around the check
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_show_solution_is_the_library_source(name):
    source = exercises.show_solution(name)
    assert f"def {name}(" in source
    assert repr(source) == str(source)  # shown as code, not as a quoted string
    assert source._repr_markdown_().startswith("```python")


def test_hint_gives_the_formula_and_the_known_mistakes():
    text = exercises.hint("clipped_surrogate")
    assert "min(r·A" in text and "yours takes the max" in text


def test_exercises_are_in_lesson_order_with_their_weeks():
    assert exercises.EXERCISES == {
        "response_mask_from_ids": 2,
        "td_residuals": 3,
        "masked_gae": 3,
        "masked_mean": 3,
        "masked_whiten": 3,
        "clipped_value_loss": 3,
        "probability_ratio": 4,
        "clipped_surrogate": 4,
        "kl_estimate": 5,
        "shaped_rewards": 5,
    }
    weeks = list(exercises.EXERCISES.values())
    assert weeks == sorted(weeks)


def test_check_result_displays_as_text_html_and_markdown():
    passed = exercises.check("probability_ratio", ppo_math.probability_ratio)
    failed = exercises.check("probability_ratio", ratio_swapped)
    assert repr(passed) == str(passed) == passed.message
    assert "<pre" in failed._repr_html_() and "&quot;" in failed._repr_html_()  # escaped
    assert failed._repr_markdown_().startswith("**failed")


def test_checks_are_deterministic():
    first = exercises.check("masked_whiten", whiten_naive).message
    assert exercises.check("masked_whiten", whiten_naive).message == first


def test_the_cases_cover_the_lessons_edge_cases():
    names = {name: [case.name for case in e.cases()] for name, e in exercises._EXERCISES.items()}
    for wanted in ("padding after EOS", "an EOS-only response", "a truncated response (no EOS)", "pad == eos"):
        assert wanted in names["response_mask_from_ids"]
    assert "a batch where one row has one token" in names["masked_gae"]
    assert any("float32" in case for case in names["masked_whiten"])
    assert any("both sides of the clip band, A > 0" in case for case in names["clipped_surrogate"])
    assert any("both sides of the clip band, A < 0" in case for case in names["clipped_surrogate"])
    band = exercises._EXERCISES["clipped_surrogate"].cases()[len(exercises._BATCHES)]
    ratios = ppo_math.probability_ratio(band.args[0], band.args[1])
    assert (ratios < 0.8).any() and (ratios > 1.2).any() and ((ratios > 0.8) & (ratios < 1.2)).any()


def test_clamping_the_product_is_not_called_never_clipped():
    message = exercises.check("clipped_surrogate", surrogate_clamps_product).message
    assert "You clamped the product r·A" in message and "You never clipped" not in message


def test_masking_after_exp_fails_on_the_extreme_padding_with_a_nan_gradient_diagnosis():
    # Its loss and clip fraction equal the library's on every case: only the gradient shows the bug.
    for case in exercises._EXERCISES["clipped_surrogate"].cases():
        args, _ = case.fresh()
        mine, library = surrogate_masks_after_exp(*args), ppo_math.clipped_surrogate(*args)
        assert all(torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6) for a, b in zip(mine, library))
    extreme = next(c for c in exercises._EXERCISES["clipped_surrogate"].cases()
                   if c.name == "extreme values on the padding")
    logprobs, *rest = extreme.fresh()[0]
    loss, _ = surrogate_masks_after_exp(logprobs.requires_grad_(True), *rest)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert torch.isnan(grad).any()  # the case really produces the NaN gradient
    result = exercises.check("clipped_surrogate", surrogate_masks_after_exp)
    assert not result.passed, result.message
    assert 'Case "extreme values on the padding"' in result.message
    assert "gradient is NaN or inf" in result.message and "is padding (mask is 0 there)" in result.message
    assert "Blank the padding before exp()" in result.message


def test_the_whole_set_of_checks_is_fast():
    start = time.perf_counter()
    for name in exercises.EXERCISES:
        exercises.check(name, LIBRARY[name])
    assert time.perf_counter() - start < 5.0


# ---------------------------------------------------------------- the Korean edition (lang="ko")

HANGUL = re.compile(r"[\uac00-\ud7a3]")
ENGLISH_FRAMING = ("passed:", "failed:", "not attempted", "Case \"", "This case", "Hint:", "Also:", "Also failing",
                   "differs", "expected", "your function", "is exactly what", "Mistakes that", "real tokens per row",
                   "position (", "padding (mask")


def english_texts(exercise) -> list[str]:
    """Every English text an exercise is written with: its hint, its mistakes' hints, its cases' names and notes."""
    texts = [exercise.hint, *(m.hint for m in exercise.mistakes)]
    for case in exercise.cases():
        texts += [case.name] + ([case.note] if case.note else [])
    return texts


def test_every_text_of_the_exercises_has_its_korean():
    from course_utils.lesson_aids.exercises_ko import KOREAN, PHRASES

    shared = [exercises._HINT_PADDING, exercises._HINT_NAN, exercises._HINT_IN_PLACE, exercises._HINT_DETACHED,
              exercises._HINT_GRADIENT, exercises._HINT_NAN_GRADIENT, *(advice for _, advice in exercises._EXCEPTION_HINTS)]
    needed = {text for exercise in exercises._TABLE for text in english_texts(exercise)} | set(shared)
    missing = sorted(needed - set(KOREAN))
    assert not missing, f"no Korean in exercises_ko.KOREAN for: {missing[:5]}"
    assert not set(KOREAN) - needed, f"translations of texts that no longer exist: {sorted(set(KOREAN) - needed)[:5]}"
    for english, korean in KOREAN.items():
        assert HANGUL.search(korean) or english == korean or korean in ("pad == eos", "unbiased=False"), english
        assert ("{signature}" in english) == ("{signature}" in korean), english
    assert set(PHRASES["ko"]) == set(PHRASES["en"])
    pattern = re.compile(r"{\w+(?:!r)?}")
    for key, text in PHRASES["en"].items():
        assert set(pattern.findall(PHRASES["ko"][key])) == set(pattern.findall(text)), key


def assert_korean_message(message: str) -> None:
    assert HANGUL.search(message.split("\n")[0]), message
    for phrase in ENGLISH_FRAMING:
        assert phrase not in message, f"{phrase!r} in {message!r}"


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_checker_diagnoses_in_korean(name):
    """The verdict, the case, the diagnosis and the hint of a known mistake, all in Korean; the
    mistake's hint is the one exercises_ko gives for it."""
    from course_utils.lesson_aids.exercises_ko import KOREAN

    exercise = exercises._EXERCISES[name]
    mistake = exercise.mistakes[0]
    result = exercises.check(name, mistake.wrong, lang="ko")
    assert not result.passed and result.message.startswith("실패: ")
    assert_korean_message(result.message)
    assert KOREAN[mistake.hint] in result.message and "힌트: " in result.message
    case_names = {KOREAN[case.name] for case in exercise.cases()}
    assert any(f'사례 "{case}": {name}(' in result.message for case in case_names), result.message
    # The English message of the same check is unchanged by the Korean one (the language is per call).
    assert exercises.check(name, mistake.wrong).message.startswith("failed: ")
    passed = exercises.check(name, LIBRARY[name], lang="ko")
    assert passed.passed and passed.message.startswith("통과: ")
    assert_korean_message(passed.message)


def test_a_korean_stub_hint_and_other_failures_are_korean():
    def stub(*args, **kwargs):
        raise NotImplementedError

    result = exercises.check("masked_mean", stub, lang="ko")
    assert not result.attempted and result.message.startswith("아직 시도하지 않음: ")
    assert "exercises.hint('masked_mean', lang='ko')" in result.message
    text = exercises.hint("masked_mean", lang="ko")
    assert "check()가 잡아내는 실수:" in text and all(HANGUL.search(line) for line in text.splitlines() if line)

    def boom(x, mask, dim=None):
        raise RuntimeError("boom")

    def no_return(x, mask, dim=None):
        pass

    def float32(x, mask, dim=None):
        return ppo_math.masked_mean(x, mask, dim).float()

    for fn in (boom, no_return, float32, 3):
        assert_korean_message(exercises.check("masked_mean", fn, lang="ko").message)
    with pytest.raises(ValueError, match="lang must be one of"):
        exercises.check("masked_mean", float32, lang="kr")
    with pytest.raises(ValueError, match="lang must be one of"):
        exercises.hint("masked_mean", lang="en-GB")
