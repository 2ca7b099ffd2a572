"""Tests of course_utils.ppo_math: every formula against a reference written another way.

References are plain Python loops over tokens, NumPy on the selected entries, exact sums over a
small vocabulary, and the numbers of the lessons. Random batches always contain an all-padding
row, a length-1 response and a response cut off without EOS (mask all ones).
The last section runs TRL 1.12.0's own PPO code on the same tensors.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils import ppo_math as pm

torch.set_num_threads(1)

SEEDS = range(6)


# ---------------------------------------------------------------------------------------------
# Random batches and plain-Python references
# ---------------------------------------------------------------------------------------------


def random_lengths(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """Response lengths with the edge cases always present: empty, one token, full (no EOS)."""
    lengths = rng.integers(0, length + 1, size=batch)
    lengths[:3] = [0, 1, length]
    return rng.permutation(lengths)


def prefix_mask(lengths, length: int, dtype=torch.float64) -> torch.Tensor:
    positions = torch.arange(length)
    return (positions[None, :] < torch.as_tensor(lengths)[:, None]).to(dtype)


def random_batch(seed: int, min_len: int = 1):
    """A dict of random [B, T] tensors (float64) and a prefix mask with random lengths."""
    rng = np.random.default_rng(seed)
    batch, length = int(rng.integers(3, 7)), int(rng.integers(min_len, 9))
    lengths = random_lengths(rng, batch, length)

    def randn(*shape, scale=1.0):
        return torch.tensor(rng.normal(size=shape) * scale)

    logprobs = -torch.tensor(rng.exponential(1.0, size=(batch, length)))
    return {
        "rng": rng,
        "lengths": lengths,
        "mask": prefix_mask(lengths, length),
        "x": randn(batch, length, scale=2.0) + 0.5,
        "rewards": randn(batch, length),
        "values": randn(batch, length),
        "old_values": randn(batch, length),
        "returns": randn(batch, length),
        "scores": randn(batch),
        "logprobs": logprobs,
        "old_logprobs": logprobs + randn(batch, length, scale=0.3),
        "ref_logprobs": logprobs + randn(batch, length, scale=0.5),
        "advantages": randn(batch, length),
        "logits": randn(batch, length, 5, scale=2.0),
    }


def real_rows(x: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """The real (masked-in) values of each row, by a plain loop over tokens."""
    rows = []
    for b in range(x.shape[0]):
        rows.append([float(x[b, t]) for t in range(x.shape[1]) if mask[b, t] == 1])
    return rows


def flat(rows: list[list[float]]) -> list[float]:
    return [v for row in rows for v in row]


def from_rows(rows: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """Put per-row lists back at the start of each row of a zero tensor shaped like `like`."""
    out = torch.zeros_like(like)
    for b, row in enumerate(rows):
        for t, v in enumerate(row):
            out[b, t] = v
    return out


def with_garbage_at_padding(x: torch.Tensor, mask: torch.Tensor, fill) -> torch.Tensor:
    """x with every masked-out entry replaced by `fill` (a number, or 'random')."""
    if fill == "random":
        junk = torch.randn(x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(7)) * 1e3
    else:
        junk = torch.full_like(x, fill)
    keep = mask.bool()
    while keep.dim() < x.dim():  # logits carry a vocabulary dimension
        keep = keep.unsqueeze(-1)
    return torch.where(keep, x, junk)


# ---------------------------------------------------------------------------------------------
# 1. Masked statistics
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_sum_mean_var_match_loop_reference(seed):
    d = random_batch(seed)
    x, mask = d["x"], d["mask"]
    rows = real_rows(x, mask)
    values = flat(rows)

    assert pm.masked_sum(x, mask).item() == pytest.approx(sum(values), abs=1e-12)
    assert pm.masked_mean(x, mask).item() == pytest.approx(sum(values) / len(values), abs=1e-12)
    assert pm.masked_var(x, mask).item() == pytest.approx(np.var(values, ddof=1), abs=1e-12)
    assert pm.masked_var(x, mask, unbiased=False).item() == pytest.approx(np.var(values), abs=1e-12)

    # dim=1: one mean per response; the empty row gives 0, not NaN.
    per_row = pm.masked_mean(x, mask, dim=1)
    expected = [sum(r) / len(r) if r else 0.0 for r in rows]
    np.testing.assert_allclose(per_row.numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(pm.masked_sum(x, mask, dim=1).numpy(), [sum(r) for r in rows], atol=1e-12)


def test_masked_mean_accepts_bool_and_float_masks_alike():
    d = random_batch(0)
    assert torch.equal(pm.masked_mean(d["x"], d["mask"]), pm.masked_mean(d["x"], d["mask"].bool()))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whiten_matches_numpy(seed, shift_mean):
    d = random_batch(seed)
    x, mask = d["x"], d["mask"]
    values = np.array(flat(real_rows(x, mask)))
    mean, std = values.mean(), math.sqrt(values.var(ddof=1) + 1e-8)
    expected_rows = [[(v - mean) / std + (0.0 if shift_mean else mean) for v in row] for row in real_rows(x, mask)]

    out = pm.masked_whiten(x, mask, shift_mean=shift_mean)
    torch.testing.assert_close(out, from_rows(expected_rows, x), atol=1e-10, rtol=0)
    if shift_mean:
        assert pm.masked_mean(out, mask).item() == pytest.approx(0.0, abs=1e-10)
        assert pm.masked_var(out, mask).item() == pytest.approx(1.0, abs=1e-6)


def test_masked_whiten_keeps_dtype_and_is_not_fooled_by_a_large_offset():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)) + 1000.0
    mask = torch.ones_like(x)
    out = pm.masked_whiten(x, mask)
    assert out.dtype == torch.float32
    assert pm.masked_var(out.double(), mask).item() == pytest.approx(1.0, abs=1e-4)


def test_all_zero_mask_raises_a_clear_error():
    x, empty = torch.randn(2, 3), torch.zeros(2, 3)
    for call in (
        lambda: pm.masked_mean(x, empty),
        lambda: pm.masked_var(x, empty),
        lambda: pm.masked_whiten(x, empty),
        lambda: pm.clipped_surrogate(x, x, x, empty, 0.2),
        lambda: pm.clipped_value_loss(x, x, x, empty, 0.2),
        lambda: pm.ratio_stats(x, x, empty),
    ):
        with pytest.raises(ValueError, match="selects no tokens"):
            call()
    # Per-row means stay defined: every row is empty, so every row mean is 0.
    assert torch.equal(pm.masked_mean(x, empty, dim=1), torch.zeros(2))


def test_unbiased_variance_needs_two_tokens():
    x, one = torch.tensor([[3.0, 5.0]]), torch.tensor([[1.0, 0.0]])
    with pytest.raises(ValueError, match="unbiased=False"):
        pm.masked_var(x, one)
    assert pm.masked_var(x, one, unbiased=False).item() == 0.0


def test_bad_masks_are_rejected_with_the_fix_named():
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="must match"):
        pm.masked_mean(x, torch.ones(2, 4))
    with pytest.raises(ValueError, match="only 0 and 1"):
        pm.masked_mean(x, torch.full((2, 3), 0.5))
    # A list of numbers is taken as a tensor (issue 53: one rule for lists and one response as [T]);
    # anything else is refused with the shapes expected.
    assert pm.masked_mean([[1.0]], torch.ones(1, 1)).item() == 1.0
    with pytest.raises(TypeError, match=r"\[B, T\]"):
        pm.masked_mean([["a"]], torch.ones(1, 1))


# Property-based tests: hypothesis draws the values and the mask.

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def values_and_mask(draw, min_tokens=1):
    batch = draw(st.integers(1, 4))
    length = draw(st.integers(1, 6))
    n = batch * length
    x = draw(st.lists(finite, min_size=n, max_size=n))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(lambda k: sum(k) >= min_tokens))
    return (
        torch.tensor(x, dtype=torch.float64).reshape(batch, length),
        torch.tensor(keep).reshape(batch, length),
    )


@settings(max_examples=60, deadline=None)
@given(values_and_mask())
def test_property_masked_mean_is_the_mean_of_the_selected_entries(data):
    x, mask = data
    selected = x[mask].numpy()
    assert pm.masked_mean(x, mask).item() == pytest.approx(selected.mean(), abs=1e-9)
    assert pm.masked_var(x, mask, unbiased=False).item() == pytest.approx(selected.var(), abs=1e-6, rel=1e-9)
    # Shifting every value shifts the mean and leaves the variance alone.
    assert pm.masked_mean(x + 3.0, mask).item() == pytest.approx(selected.mean() + 3.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(values_and_mask(min_tokens=2), st.floats(0.1, 10.0))
def test_property_variance_scales_and_never_goes_negative(data, scale):
    x, mask = data
    var = pm.masked_var(x, mask).item()
    assert var >= 0.0
    assert pm.masked_var(scale * x, mask).item() == pytest.approx(scale**2 * var, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(values_and_mask(min_tokens=2))
def test_property_whitened_values_have_mean_zero_and_unit_variance(data):
    x, mask = data
    selected = x[mask]
    out = pm.masked_whiten(x, mask)
    assert torch.all(out[~mask] == 0)
    if selected.var().item() > 1e-2:  # below that the eps in sqrt(var + eps) matters
        assert pm.masked_mean(out, mask).item() == pytest.approx(0.0, abs=1e-9)
        assert pm.masked_var(out, mask).item() == pytest.approx(1.0, rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(values_and_mask(), st.randoms(use_true_random=False))
def test_property_order_of_tokens_does_not_matter(data, random):
    x, mask = data
    order = list(range(x.numel()))
    random.shuffle(order)
    order = torch.tensor(order)
    shuffled_x, shuffled_mask = x.flatten()[order].reshape(x.shape), mask.flatten()[order].reshape(x.shape)
    assert pm.masked_mean(shuffled_x, shuffled_mask).item() == pytest.approx(pm.masked_mean(x, mask).item(), abs=1e-9)


# ---------------------------------------------------------------------------------------------
# 2. Log-probabilities and entropy, against exact enumeration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_from_logits_by_enumeration(temperature):
    d = random_batch(3)
    logits = d["logits"]
    batch, length, vocab = logits.shape
    tokens = torch.tensor(d["rng"].integers(0, vocab, size=(batch, length)))
    out = pm.logprobs_from_logits(logits, tokens, temperature=temperature)
    for b in range(batch):
        for t in range(length):
            z = [float(v) / temperature for v in logits[b, t]]
            expected = z[int(tokens[b, t])] - math.log(sum(math.exp(v) for v in z))
            assert out[b, t].item() == pytest.approx(expected, abs=1e-12)


def test_logprobs_from_logits_rejects_misaligned_shapes():
    with pytest.raises(ValueError, match="slice the logits"):
        pm.logprobs_from_logits(torch.randn(2, 5, 7), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_by_enumeration(seed):
    d = random_batch(seed)
    logits, mask = d["logits"], d["mask"]
    per_token = pm.entropy_from_logits(logits)
    entropies = []
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            weights = [math.exp(float(v)) for v in logits[b, t]]
            probs = [w / sum(weights) for w in weights]
            h = -sum(p * math.log(p) for p in probs)
            assert per_token[b, t].item() == pytest.approx(h, abs=1e-12)
            if mask[b, t] == 1:
                entropies.append(h)
    assert pm.masked_entropy(logits, mask).item() == pytest.approx(sum(entropies) / len(entropies), abs=1e-12)


def test_entropy_of_uniform_and_of_a_banned_token():
    assert pm.entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))
    logits = torch.tensor([0.0, 0.0, -math.inf], requires_grad=True)
    h = pm.entropy_from_logits(logits)
    h.backward()
    assert h.item() == pytest.approx(math.log(2))
    assert torch.isfinite(logits.grad).all()


# ---------------------------------------------------------------------------------------------
# 3. KL estimators against the exact KL on a small vocabulary
# ---------------------------------------------------------------------------------------------


def random_distribution_pair(seed: int, vocab: int = 7, spread: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 2.0, dim=0)
    logq = torch.log_softmax(logp + spread * torch.randn(vocab, generator=g, dtype=torch.float64), dim=0)
    return logp, logq


def exact_kl(logp: torch.Tensor, logq: torch.Tensor) -> float:
    """KL(p || q) = Σ_a p(a) log(p(a)/q(a)), summed in plain Python."""
    return sum(math.exp(a) * (a - b) for a, b in zip(logp.tolist(), logq.tolist()))


def expected_under_pi(logp: torch.Tensor, per_token: torch.Tensor) -> float:
    """Σ_a π(a) k(a): what a sampled estimator averages to over many samples from π."""
    return float((logp.exp() * per_token).sum())


@pytest.mark.parametrize("seed", range(10))
def test_k1_and_k3_are_unbiased_for_the_exact_kl(seed):
    logp, logq = random_distribution_pair(seed)
    kl = exact_kl(logp, logq)
    assert kl > 0.01
    for kind in ("k1", "k3"):
        assert expected_under_pi(logp, pm.kl_estimate(logp, logq, kind)) == pytest.approx(kl, abs=1e-6)


def test_the_sign_convention_is_pinned():
    logp, logq = random_distribution_pair(0)
    kl = exact_kl(logp, logq)
    # Swapped arguments average to -KL(π‖π_ref): the estimate of the wrong direction, wrong sign.
    assert expected_under_pi(logp, pm.kl_estimate(logq, logp, "k1")) == pytest.approx(-kl, abs=1e-9)
    # A single k1 sample can be negative (a token the reference likes more); the average is not.
    assert (pm.kl_estimate(logp, logq, "k1") < 0).any()


def test_k2_and_k3_are_never_negative():
    lr = torch.linspace(-30, 30, 2001, dtype=torch.float64)
    zero = torch.zeros_like(lr)
    assert (pm.kl_estimate(lr, zero, "k3") >= 0).all()
    assert (pm.kl_estimate(lr, zero, "k2") >= 0).all()
    # In float32 too, where exp(-lr) - 1 + lr could round below zero near lr = 0.
    small = torch.linspace(-1e-3, 1e-3, 2001)
    assert (pm.kl_estimate(small, torch.zeros_like(small), "k3") >= 0).all()


def test_k2_is_biased_and_the_bias_vanishes_as_the_policies_meet():
    relative_bias = []
    for spread in (1.0, 0.3, 0.1, 0.03):
        logp, logq = random_distribution_pair(3, spread=spread)
        k2 = expected_under_pi(logp, pm.kl_estimate(logp, logq, "k2"))
        relative_bias.append(abs(k2 / exact_kl(logp, logq) - 1.0))
    assert relative_bias[0] > 0.05  # far apart: k2 is visibly off
    assert relative_bias == sorted(relative_bias, reverse=True)
    assert relative_bias[-1] < 0.05  # close together: k2 ≈ KL to second order


def test_kl_estimates_by_formula_and_unknown_kind():
    lr = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    ref = torch.zeros_like(lr)
    for i, v in enumerate(lr.tolist()):
        assert pm.kl_estimate(lr, ref, "k1")[i].item() == pytest.approx(v)
        assert pm.kl_estimate(lr, ref, "k2")[i].item() == pytest.approx(v * v / 2)
        assert pm.kl_estimate(lr, ref, "k3")[i].item() == pytest.approx(math.exp(-v) - 1 + v)
    with pytest.raises(ValueError, match="k1"):
        pm.kl_estimate(lr, ref, "k4")


# ---------------------------------------------------------------------------------------------
# 3b. Shaped rewards
# ---------------------------------------------------------------------------------------------


def reference_shaped_rewards(d, kl_coef, kind):
    """Loop over tokens: -β·k on every real token, the score added on the last real one."""
    lp, ref, mask, scores = d["logprobs"], d["ref_logprobs"], d["mask"], d["scores"]
    out = torch.zeros_like(lp)
    for b in range(lp.shape[0]):
        real = [t for t in range(lp.shape[1]) if mask[b, t] == 1]
        for t in real:
            lr = float(lp[b, t]) - float(ref[b, t])
            k = {"k1": lr, "k2": lr * lr / 2, "k3": math.exp(-lr) - 1 + lr}[kind]
            out[b, t] = -kl_coef * k + (float(scores[b]) if t == real[-1] else 0.0)
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_shaped_rewards_match_loop_reference(seed, kind):
    d = random_batch(seed)
    out = pm.shaped_rewards(d["scores"], d["logprobs"], d["ref_logprobs"], d["mask"], 0.05, kl_estimator=kind)
    torch.testing.assert_close(out, reference_shaped_rewards(d, 0.05, kind), atol=1e-12, rtol=0)


def test_shaped_reward_lesson_numbers_and_score_position():
    # Lesson 5: score 2.40 and a KL penalty of 0.35 on the last token give 2.05 there.
    kl_coef, log_ratio = 0.1, 3.5
    logprobs = torch.tensor([[-1.0, -0.5, -0.2, 0.0]], dtype=torch.float64)
    ref = logprobs - torch.tensor([[0.0, 0.0, log_ratio, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)  # EOS at index 2, then padding
    out = pm.shaped_rewards(torch.tensor([2.40], dtype=torch.float64), logprobs, ref, mask, kl_coef)
    assert out[0, 2].item() == pytest.approx(2.05)
    assert out[0, 3].item() == 0.0
    assert pm.kl_penalty_rewards(logprobs, ref, mask, kl_coef)[0, 2].item() == pytest.approx(-0.35)


def test_last_token_index_edge_cases():
    mask = prefix_mask([0, 1, 4, 2], 4)
    assert pm.last_token_index(mask).tolist() == [-1, 0, 3, 1]


def test_shaped_rewards_do_not_modify_inputs_and_check_score_shape():
    d = random_batch(1)
    before = d["scores"].clone()
    pm.shaped_rewards(d["scores"], d["logprobs"], d["ref_logprobs"], d["mask"], 0.1)
    assert torch.equal(before, d["scores"])
    with pytest.raises(ValueError, match="squeeze"):
        pm.shaped_rewards(d["scores"][:, None], d["logprobs"], d["ref_logprobs"], d["mask"], 0.1)


# ---------------------------------------------------------------------------------------------
# 4. TD residuals and GAE
# ---------------------------------------------------------------------------------------------


def reference_gae_row(r: list[float], v: list[float], gamma: float, lam: float):
    """One response: δ by definition, A as the explicit discounted sum A_t = Σ_k (γλ)^k δ_{t+k}."""
    n = len(r)
    deltas = [r[t] + gamma * (v[t + 1] if t + 1 < n else 0.0) - v[t] for t in range(n)]
    adv = [sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)]
    return deltas, adv


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_explicit_discounted_sum(seed):
    d = random_batch(seed)
    gamma, lam = float(d["rng"].uniform(0.8, 1.0)), float(d["rng"].uniform(0.5, 1.0))
    rewards, values, mask = d["rewards"], d["values"], d["mask"]
    adv, ret = pm.masked_gae(rewards, values, mask, gamma, lam)
    delta_rows, adv_rows, ret_rows = [], [], []
    for r_row, v_row in zip(real_rows(rewards, mask), real_rows(values, mask)):
        deltas, a = reference_gae_row(r_row, v_row, gamma, lam)
        delta_rows.append(deltas)
        adv_rows.append(a)
        ret_rows.append([ai + vi for ai, vi in zip(a, v_row)])
    torch.testing.assert_close(pm.td_residuals(rewards, values, mask, gamma), from_rows(delta_rows, rewards), atol=1e-12, rtol=0)
    torch.testing.assert_close(adv, from_rows(adv_rows, rewards), atol=1e-12, rtol=0)
    torch.testing.assert_close(ret, from_rows(ret_rows, rewards), atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_one_gamma_one_is_reward_to_go_minus_value(seed):
    d = random_batch(seed)
    rewards, values, mask = d["rewards"], d["values"], d["mask"]
    adv, ret = pm.masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    for b, (r_row, v_row) in enumerate(zip(real_rows(rewards, mask), real_rows(values, mask))):
        reward_to_go = np.cumsum(np.array(r_row)[::-1])[::-1]
        np.testing.assert_allclose(adv[b, : len(r_row)].numpy(), reward_to_go - np.array(v_row), atol=1e-12)
        np.testing.assert_allclose(ret[b, : len(r_row)].numpy(), reward_to_go, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_zero_is_the_td_residual(seed):
    d = random_batch(seed)
    rewards, values, mask = d["rewards"], d["values"], d["mask"]
    gamma = 0.9
    adv, _ = pm.masked_gae(rewards, values, mask, gamma=gamma, lam=0.0)
    r, v, m = rewards.numpy(), values.numpy(), mask.numpy()
    v_next = np.concatenate([v[:, 1:] * m[:, 1:], np.zeros((v.shape[0], 1))], axis=1)  # 0 after the end
    np.testing.assert_allclose(adv.numpy(), (r + gamma * v_next - v) * m, atol=1e-12)


def test_gae_lesson_walkthrough_hundred_tokens():
    # Lesson 3: token 100's advantage is its own δ; token t's is δ_t + 0.95 × token (t+1)'s.
    g = torch.Generator().manual_seed(0)
    rewards = torch.zeros(1, 100, dtype=torch.float64)
    rewards[0, -1] = 1.0
    values = torch.rand(1, 100, generator=g, dtype=torch.float64)
    mask = torch.ones(1, 100, dtype=torch.float64)
    adv, _ = pm.masked_gae(rewards, values, mask, gamma=1.0, lam=0.95)
    delta = pm.td_residuals(rewards, values, mask, gamma=1.0)
    assert adv[0, 99].item() == pytest.approx(delta[0, 99].item())
    for t in range(99):
        assert adv[0, t].item() == pytest.approx(delta[0, t].item() + 0.95 * adv[0, t + 1].item(), abs=1e-12)


@pytest.mark.parametrize("reward, expected", [(2.0, 0.6), (0.8, -0.6)])
def test_one_token_advantage_is_reward_minus_value(reward, expected):
    # Lesson 3: A = R - V with V = 1.4.
    adv, ret = pm.masked_gae(torch.tensor([[reward]]), torch.tensor([[1.4]]), torch.ones(1, 1), 1.0, 0.95)
    assert adv.item() == pytest.approx(expected)
    assert ret.item() == pytest.approx(reward)


def test_gae_a_hole_in_the_mask_ends_the_recursion_there():
    # Documented behaviour for non-prefix masks: tokens after a hole do not feed the ones before.
    rewards = torch.tensor([[1.0, 2.0, 5.0, 3.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.5, 9.0, 0.5]], dtype=torch.float64)
    holed = torch.tensor([[1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    adv, _ = pm.masked_gae(rewards, values, holed, gamma=1.0, lam=1.0)
    first, _ = pm.masked_gae(rewards[:, :2], values[:, :2], holed[:, :2], gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv[:, :2], first)
    assert adv[0, 2].item() == 0.0 and adv[0, 3].item() == pytest.approx(3.0 - 0.5)


def test_gae_rejects_out_of_range_discounts():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="gamma and lam"):
        pm.masked_gae(x, x, torch.ones(1, 2), gamma=1.1, lam=0.9)


@pytest.mark.parametrize("seed", SEEDS)
def test_explained_variance_matches_numpy(seed):
    d = random_batch(seed)
    values, returns, mask = d["values"], d["returns"], d["mask"]
    v, r = np.array(flat(real_rows(values, mask))), np.array(flat(real_rows(returns, mask)))
    expected = 1.0 - np.var(r - v) / np.var(r)
    assert pm.explained_variance(values, returns, mask).item() == pytest.approx(expected, abs=1e-12)


def test_explained_variance_landmarks():
    returns, mask = torch.tensor([[1.0, 2.0, 4.0, 0.0]]), torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert pm.explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    mean_guess = torch.full_like(returns, 7.0 / 3.0)
    assert pm.explained_variance(mean_guess, returns, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert math.isnan(pm.explained_variance(returns, torch.ones_like(returns), mask).item())


# ---------------------------------------------------------------------------------------------
# 5. Ratio and the clipped losses
# ---------------------------------------------------------------------------------------------


def test_ratio_lesson_number():
    # Lesson 4: π_new = 0.26, π_old = 0.20 gives r = 1.3.
    ratio = pm.probability_ratio(torch.tensor(math.log(0.26)), torch.tensor(math.log(0.20)))
    assert ratio.item() == pytest.approx(0.26 / 0.20)


def test_clipped_objective_lesson_numbers_and_the_mirror():
    ratios = torch.tensor([0.5, 0.8, 1.0, 1.2, 1.5], dtype=torch.float64)
    positive = pm.clipped_objective_per_token(ratios, 1.0, 0.2)
    negative = pm.clipped_objective_per_token(ratios, -1.0, 0.2)
    torch.testing.assert_close(positive, torch.tensor([0.5, 0.8, 1.0, 1.2, 1.2], dtype=torch.float64))
    # A = -1: the objective is -max(r, clip(r)), so the low side is clipped and the high side is not.
    torch.testing.assert_close(negative, torch.tensor([-0.8, -0.8, -1.0, -1.2, -1.5], dtype=torch.float64))


def reference_clipped_surrogate(d, cliprange):
    objectives, clipped = [], 0
    lp, old, adv, mask = d["logprobs"], d["old_logprobs"], d["advantages"], d["mask"]
    for b in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if mask[b, t] != 1:
                continue
            r, a = math.exp(float(lp[b, t]) - float(old[b, t])), float(adv[b, t])
            r_clip = min(max(r, 1 - cliprange), 1 + cliprange)
            objectives.append(min(r * a, r_clip * a))
            clipped += r_clip * a < r * a
    return -sum(objectives) / len(objectives), clipped / len(objectives)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cliprange", [0.1, 0.2])
def test_clipped_surrogate_matches_loop_reference(seed, cliprange):
    d = random_batch(seed)
    loss, clipfrac = pm.clipped_surrogate(d["logprobs"], d["old_logprobs"], d["advantages"], d["mask"], cliprange)
    expected_loss, expected_clipfrac = reference_clipped_surrogate(d, cliprange)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    assert clipfrac.item() == pytest.approx(expected_clipfrac, abs=1e-12)


def test_clipping_asymmetry_and_its_gradient():
    # Four tokens, A = +1, +1, -1, -1 with r = 1.5, 0.5, 1.5, 0.5 (ε = 0.2).
    old = torch.zeros(1, 4, dtype=torch.float64)
    logprobs = torch.log(torch.tensor([[1.5, 0.5, 1.5, 0.5]], dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    loss, clipfrac = pm.clipped_surrogate(logprobs, old, adv, torch.ones(1, 4), 0.2)
    loss.backward()
    # Clipped (no gradient) exactly where moving further would help: A>0, r>1+ε and A<0, r<1-ε.
    # Where the move went the wrong way the unclipped term stays, with gradient -A·r/n.
    # d(loss)/d(log r) = -A·r/n on unclipped tokens: token 1 gives -0.5/4, token 2 gives +1.5/4.
    expected_grad = torch.tensor([[0.0, -0.5 / 4, 1.5 / 4, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logprobs.grad, expected_grad)
    assert clipfrac.item() == pytest.approx(0.5)


def test_no_clipping_when_the_policy_has_not_moved():
    d = random_batch(2)
    loss, clipfrac = pm.clipped_surrogate(d["logprobs"], d["logprobs"], d["advantages"], d["mask"], 0.2)
    assert clipfrac.item() == 0.0
    assert loss.item() == pytest.approx(-pm.masked_mean(d["advantages"], d["mask"]).item())


def reference_clipped_value_loss(d, c):
    losses, clipped = [], 0
    for b in range(d["values"].shape[0]):
        for t in range(d["values"].shape[1]):
            if d["mask"][b, t] != 1:
                continue
            v, v_old, r = float(d["values"][b, t]), float(d["old_values"][b, t]), float(d["returns"][b, t])
            v_clip = min(max(v, v_old - c), v_old + c)
            losses.append(max((v - r) ** 2, (v_clip - r) ** 2))
            clipped += (v_clip - r) ** 2 > (v - r) ** 2
    return 0.5 * sum(losses) / len(losses), clipped / len(losses)


@pytest.mark.parametrize("seed", SEEDS)
def test_clipped_value_loss_matches_loop_reference(seed):
    d = random_batch(seed)
    loss, clipfrac = pm.clipped_value_loss(d["values"], d["old_values"], d["returns"], d["mask"], 0.2)
    expected_loss, expected_clipfrac = reference_clipped_value_loss(d, 0.2)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-12)
    assert clipfrac.item() == pytest.approx(expected_clipfrac, abs=1e-12)
    assert 0.0 < clipfrac.item() < 1.0  # the random batch exercises both branches


@pytest.mark.parametrize("seed", SEEDS)
def test_approx_kl_and_ratio_stats_match_loop_reference(seed):
    d = random_batch(seed)
    lp, old, mask = d["logprobs"], d["old_logprobs"], d["mask"]
    ratios = [math.exp(a - b) for a, b in zip(flat(real_rows(lp, mask)), flat(real_rows(old, mask)))]
    k3 = np.mean([(r - 1) - math.log(r) for r in ratios])
    k2 = np.mean([0.5 * math.log(r) ** 2 for r in ratios])
    assert pm.approx_kl(lp, old, mask).item() == pytest.approx(k3, abs=1e-12)
    assert pm.approx_kl(lp, old, mask, kind="k2").item() == pytest.approx(k2, abs=1e-12)
    stats = pm.ratio_stats(lp, old, mask)
    assert stats["mean"].item() == pytest.approx(np.mean(ratios), abs=1e-12)
    assert stats["var"].item() == pytest.approx(np.var(ratios), abs=1e-12)
    assert stats["min"].item() == pytest.approx(min(ratios), abs=1e-12)
    assert stats["max"].item() == pytest.approx(max(ratios), abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Mask invariance: garbage at padding changes nothing
# ---------------------------------------------------------------------------------------------

PER_TOKEN_INPUTS = ("x", "rewards", "values", "old_values", "returns", "logprobs", "old_logprobs", "ref_logprobs", "advantages", "logits")

CALLS = {
    "masked_sum": lambda d: pm.masked_sum(d["x"], d["mask"]),
    "masked_mean": lambda d: pm.masked_mean(d["x"], d["mask"]),
    "masked_mean_dim1": lambda d: pm.masked_mean(d["x"], d["mask"], dim=1),
    "masked_var": lambda d: pm.masked_var(d["x"], d["mask"]),
    "masked_whiten": lambda d: pm.masked_whiten(d["x"], d["mask"]),
    "masked_entropy": lambda d: pm.masked_entropy(d["logits"], d["mask"]),
    "kl_estimate": lambda d: [pm.kl_estimate(d["logprobs"], d["ref_logprobs"], k, mask=d["mask"]) for k in ("k1", "k2", "k3")],
    "shaped_rewards": lambda d: pm.shaped_rewards(d["scores"], d["logprobs"], d["ref_logprobs"], d["mask"], 0.1, "k3"),
    "td_residuals": lambda d: pm.td_residuals(d["rewards"], d["values"], d["mask"], 0.9),
    "masked_gae": lambda d: pm.masked_gae(d["rewards"], d["values"], d["mask"], 0.9, 0.8),
    "explained_variance": lambda d: pm.explained_variance(d["values"], d["returns"], d["mask"]),
    "clipped_surrogate": lambda d: pm.clipped_surrogate(d["logprobs"], d["old_logprobs"], d["advantages"], d["mask"], 0.2),
    "clipped_value_loss": lambda d: pm.clipped_value_loss(d["values"], d["old_values"], d["returns"], d["mask"], 0.2),
    "approx_kl": lambda d: pm.approx_kl(d["logprobs"], d["old_logprobs"], d["mask"]),
    "ratio_stats": lambda d: list(pm.ratio_stats(d["logprobs"], d["old_logprobs"], d["mask"]).values()),
}


def flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in flatten_outputs(item)]


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("fill", ["random", 1e30, math.inf, -math.inf, math.nan])
def test_values_at_padding_change_no_output(name, fill):
    d = random_batch(4, min_len=3)
    clean = flatten_outputs(CALLS[name](d))
    dirty_batch = dict(d)
    for key in PER_TOKEN_INPUTS:
        dirty_batch[key] = with_garbage_at_padding(d[key], d["mask"], fill)
    assert any(not torch.equal(dirty_batch[k], d[k]) for k in PER_TOKEN_INPUTS)  # garbage went in
    dirty = flatten_outputs(CALLS[name](dirty_batch))
    for a, b in zip(clean, dirty):
        assert torch.equal(a, b), f"{name}: padding leaked into the output"


@pytest.mark.parametrize("fill", [math.inf, 1e30])
def test_losses_send_no_gradient_to_padding(fill):
    d = random_batch(4, min_len=3)
    mask = d["mask"]
    logprobs = with_garbage_at_padding(d["logprobs"], mask, fill).requires_grad_()
    values = with_garbage_at_padding(d["values"], mask, fill).requires_grad_()
    logits = with_garbage_at_padding(d["logits"], mask, 3.0).requires_grad_()
    policy_loss, _ = pm.clipped_surrogate(logprobs, d["old_logprobs"], d["advantages"], mask, 0.2)
    value_loss, _ = pm.clipped_value_loss(values, d["old_values"], d["returns"], mask, 0.2)
    (policy_loss + value_loss - pm.masked_entropy(logits, mask)).backward()
    for grad in (logprobs.grad, values.grad):
        assert torch.isfinite(grad).all()
        assert torch.all(grad[mask == 0] == 0)
        assert torch.any(grad[mask == 1] != 0)
    assert torch.all(logits.grad[mask == 0] == 0)


# ---------------------------------------------------------------------------------------------
# 6. KL controllers
# ---------------------------------------------------------------------------------------------


def test_fixed_controller_never_moves():
    ctl = pm.FixedKLController(0.05)
    for kl in (0.0, 3.0, 100.0):
        ctl.update(kl, 64)
    assert ctl.value == 0.05
    restored = pm.FixedKLController(1.0)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == 0.05


def test_adaptive_controller_follows_ziegler_update():
    target, horizon, n_steps = 6.0, 10000.0, 256
    ctl = pm.AdaptiveKLController(0.2, target, horizon)
    expected = 0.2
    for kl in (9.0, 30.0, 6.0, 5.0, 0.0, 6.6):
        error = float(np.clip(kl / target - 1.0, -0.2, 0.2))
        expected = expected * (1.0 + error * n_steps / horizon)
        assert ctl.update(kl, n_steps) == pytest.approx(expected, rel=1e-12)
    assert ctl.value == pytest.approx(expected, rel=1e-12)


def test_adaptive_controller_direction_and_checkpoint():
    ctl = pm.AdaptiveKLController(0.1, target=1.0, horizon=100)
    assert ctl.update(2.0, 10) > 0.1  # KL too high: pull harder
    high = ctl.value
    assert ctl.update(0.5, 10) < high  # KL too low: relax
    saved = ctl.state_dict()
    twin = pm.AdaptiveKLController(1.0, target=9.0, horizon=1)
    twin.load_state_dict(saved)
    assert [ctl.update(k, 5) for k in (0.3, 1.7)] == [twin.update(k, 5) for k in (0.3, 1.7)]
    with pytest.raises(ValueError, match="finite"):
        ctl.update(math.nan, 5)
    with pytest.raises(ValueError, match="target and horizon"):
        pm.AdaptiveKLController(0.1, target=0.0, horizon=10)


# ---------------------------------------------------------------------------------------------
# Cross-check with TRL 1.12.0: its own code, run on our tensors
# ---------------------------------------------------------------------------------------------
# TRL's PPO formulas live inline in PPOTrainer.train. Rather than copy them, the tests below cut
# the relevant statements out of the installed source and execute them on the same tensors.
# If TRL changes those lines, the extraction fails loudly. Conventions that differ are asserted
# as differences (see docs/trl_differences.md).


@pytest.fixture(scope="module")
def trl():
    try:
        import trl as trl_pkg
        from trl.experimental.ppo import ppo_trainer
        from trl.experimental.utils import first_true_indices
        from trl.trainer.utils import entropy_from_logits, selective_log_softmax
    except Exception as err:  # pragma: no cover - depends on the environment
        pytest.skip(f"trl is not importable ({err}); install the pinned extra: pip install 'trl==1.12.0'")
    if trl_pkg.__version__ != "1.12.0":
        pytest.skip(f"these cross-checks pin TRL 1.12.0, found {trl_pkg.__version__}")
    source = textwrap.dedent(inspect.getsource(ppo_trainer.PPOTrainer.train))
    return types.SimpleNamespace(
        module=ppo_trainer,
        train_source=source.splitlines(),
        first_true_indices=first_true_indices,
        entropy_from_logits=entropy_from_logits,
        selective_log_softmax=selective_log_softmax,
    )


def trl_statements(trl, first: str, last: str) -> str:
    """The statements of PPOTrainer.train from the line starting with `first` to the end of the
    statement that starts with `last`, dedented so they can be exec'd."""
    lines = trl.train_source
    starts = [i for i, line in enumerate(lines) if line.strip().startswith(first)]
    assert starts, f"TRL source no longer has a line starting with {first!r}"
    start = starts[0]
    ends = [i for i in range(start, len(lines)) if lines[i].strip().startswith(last)]
    assert ends, f"TRL source no longer has {last!r} after {first!r}"
    for end in range(ends[0], min(ends[0] + 10, len(lines))):
        code = textwrap.dedent("\n".join(lines[start : end + 1]))
        try:
            ast.parse(code)
            return code
        except SyntaxError:
            continue
    raise AssertionError(f"could not cut a complete statement from {first!r} to {last!r}")


def run_trl(trl, first: str, last: str, **names) -> dict:
    namespace = {"torch": torch, "masked_mean": trl.module.masked_mean, "masked_whiten": trl.module.masked_whiten}
    namespace.update(names)
    exec(trl_statements(trl, first, last), namespace)
    return namespace


def trl_padding_masks(trl, responses, stop_token_id, pad_token_id):
    """TRL's padding_mask and score position, computed by TRL's code on token ids."""
    post = trl.module.truncate_response(stop_token_id, pad_token_id, responses)
    ns = run_trl(
        trl,
        "sequence_length = first_true_indices(",
        "sequence_length = first_true_indices(",
        first_true_indices=trl.first_true_indices,
        postprocessed_response=post,
        processing_class=types.SimpleNamespace(pad_token_id=pad_token_id),
    )
    ns = run_trl(trl, "response_idxs = torch.arange(", "padding_mask = response_idxs >", responses=responses, sequence_lengths=ns["sequence_length"])
    return ns["padding_mask"], ns["sequence_lengths"]


def test_trl_masked_statistics_agree(trl):
    for seed in SEEDS:
        d = random_batch(seed)
        x, mask = d["x"], d["mask"]
        full_rows = torch.tensor(d["lengths"]) > 0  # TRL's per-row mean is 0/0 on empty rows
        torch.testing.assert_close(pm.masked_mean(x, mask), trl.module.masked_mean(x, mask))
        torch.testing.assert_close(pm.masked_mean(x, mask, dim=1)[full_rows], trl.module.masked_mean(x, mask, axis=1)[full_rows])
        for unbiased in (True, False):
            torch.testing.assert_close(pm.masked_var(x, mask, unbiased=unbiased), trl.module.masked_var(x, mask, unbiased=unbiased))
        for shift_mean in (True, False):
            ours = pm.masked_whiten(x, mask, shift_mean=shift_mean)
            theirs = trl.module.masked_whiten(x, mask, shift_mean=shift_mean)
            # TRL leaves whitened garbage at padding (and fills it with 0 afterwards in the trainer).
            torch.testing.assert_close(ours, theirs * mask, atol=1e-9, rtol=1e-9)


def test_trl_logprobs_and_entropy_agree(trl):
    d = random_batch(5)
    logits = d["logits"]
    tokens = torch.tensor(d["rng"].integers(0, logits.shape[-1], size=logits.shape[:2]))
    torch.testing.assert_close(pm.logprobs_from_logits(logits, tokens), trl.selective_log_softmax(logits, tokens))
    # TRL divides by (temperature + 1e-7) itself before calling selective_log_softmax.
    torch.testing.assert_close(
        pm.logprobs_from_logits(logits, tokens, temperature=0.7), trl.selective_log_softmax(logits / 0.7, tokens)
    )
    torch.testing.assert_close(pm.entropy_from_logits(logits), trl.entropy_from_logits(logits))
    # The in-loop entropy formula of PPOTrainer.train, executed as written there.
    ns = run_trl(trl, "prob_dist = torch.nn.functional.softmax(logits", "entropy = torch.logsumexp(", logits=logits)
    torch.testing.assert_close(pm.entropy_from_logits(logits), ns["entropy"])


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_trl_kl_and_rewards_agree_on_full_length_responses(trl, kind):
    # Responses that fill the whole window (no EOS): TRL puts the score on the last token, as we do.
    d = random_batch(2)
    lp, ref, scores = d["logprobs"], d["ref_logprobs"], d["scores"]
    batch, length = lp.shape
    full = torch.ones(batch, length, dtype=torch.float64)
    seq_len = torch.full((batch,), length - 1)
    ns = run_trl(
        trl,
        "logr = ref_logprobs - logprobs",
        "rewards[actual_start, actual_end] += scores",
        logprobs=lp,
        ref_logprobs=ref,
        scores=scores,
        sequence_lengths=seq_len,
        sequence_lengths_p1=seq_len + 1,
        args=types.SimpleNamespace(kl_estimator=kind, kl_coef=0.05),
    )
    torch.testing.assert_close(pm.kl_estimate(lp, ref, kind), ns["kl"])
    torch.testing.assert_close(pm.kl_penalty_rewards(lp, ref, full, 0.05, kind), ns["non_score_reward"])
    torch.testing.assert_close(pm.shaped_rewards(scores, lp, ref, full, 0.05, kind), ns["rewards"])


def test_trl_score_placement_and_mask_differ_after_eos(trl):
    eos, pad = 2, 0
    # Row 0: EOS at index 2, then junk that TRL truncates. Row 1: EOS as the first token.
    responses = torch.tensor([[7, 8, eos, 9, 9, 9], [eos, 9, 9, 9, 9, 9]])
    ours = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)

    # pad != eos: TRL's mask equals ours (the EOS is in), but the score goes one past the EOS.
    padding_mask, seq_len = trl_padding_masks(trl, responses, stop_token_id=eos, pad_token_id=pad)
    assert torch.equal(~padding_mask, ours)
    assert torch.equal(seq_len, pm.last_token_index(ours))
    trl_score_index = torch.where(seq_len + 1 < responses.shape[1], seq_len + 1, seq_len)
    assert torch.equal(trl_score_index, pm.last_token_index(ours) + 1)

    # pad == eos: TRL cannot tell the EOS from padding, so its mask drops the EOS, and a response
    # that is just EOS gets an empty mask. Its score lands on the EOS, which is then unmasked.
    padding_mask, seq_len = trl_padding_masks(trl, responses, stop_token_id=eos, pad_token_id=eos)
    assert torch.equal((~padding_mask).sum(1), ours.sum(1) - 1)
    assert seq_len.tolist() == [1, -1]


def test_trl_gae_agrees_when_value_and_reward_stop_at_our_last_token(trl):
    d = random_batch(3)
    mask = d["mask"]
    rewards = torch.where(mask.bool(), d["rewards"], 0.0)
    values = torch.where(mask.bool(), d["values"], 0.0)
    ns = run_trl(
        trl,
        "lastgaelam = 0",
        "returns = advantages + values",
        rewards=rewards,
        values=values,
        responses=rewards,
        args=types.SimpleNamespace(gamma=0.97, lam=0.9),
    )
    adv, ret = pm.masked_gae(rewards, values, mask, 0.97, 0.9)
    torch.testing.assert_close(adv, ns["advantages"])
    torch.testing.assert_close(ret, ns["returns"])
    # The whitening TRL applies next, on the same mask.
    whitened = trl.module.masked_whiten(ns["advantages"], mask.bool()) * mask
    torch.testing.assert_close(pm.masked_whiten(adv, mask), whitened, atol=1e-9, rtol=1e-9)


def test_trl_gae_differs_with_its_score_one_past_the_end(trl):
    # One response of 3 real tokens in a window of 5. TRL: score at index 3 and the value head's
    # prediction there kept; ours: score at index 2, V = 0 after it. Same for γ = λ = 1 only.
    kl_part = torch.tensor([[-0.1, 0.05, -0.2, 0.0, 0.0]], dtype=torch.float64)
    values = torch.tensor([[0.3, 0.5, 0.9, 1.1, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    score = 2.0
    trl_rewards = kl_part.clone()
    trl_rewards[0, 3] += score
    our_rewards = kl_part.clone()
    our_rewards[0, 2] += score
    for gamma, lam, same in ((1.0, 1.0, True), (0.9, 0.8, False)):
        ns = run_trl(trl, "lastgaelam = 0", "returns = advantages + values", rewards=trl_rewards, values=values, responses=values, args=types.SimpleNamespace(gamma=gamma, lam=lam))
        ours, _ = pm.masked_gae(our_rewards, values, mask, gamma, lam)
        assert torch.allclose(ours[:, :3], ns["advantages"][:, :3]) == same


def test_trl_policy_and_value_losses_agree(trl):
    for seed in SEEDS:
        d = random_batch(seed)
        mask = d["mask"]
        if mask.sum() == 0:
            continue
        padding = ~mask.bool()
        names = dict(
            vpred=torch.where(mask.bool(), d["values"], 0.0),
            mb_values=d["old_values"],
            mb_return=d["returns"],
            new_logprobs=d["logprobs"],
            mb_logprobs=d["old_logprobs"],
            mb_advantage=d["advantages"],
            padding_mask=padding,
            padding_mask_p1=padding,  # TRL trains the value one token further; here we align them
            micro_batch_inds=slice(None),
            args=types.SimpleNamespace(cliprange=0.2, cliprange_value=0.2),
        )
        ns = run_trl(trl, "vpredclipped = torch.clamp(", "pg_loss = masked_mean(", **names)
        ns = run_trl(trl, "pg_clipfrac = masked_mean(", "pg_clipfrac = masked_mean(", **{**names, **ns})
        loss, clipfrac = pm.clipped_surrogate(d["logprobs"], d["old_logprobs"], d["advantages"], mask, 0.2)
        torch.testing.assert_close(loss, ns["pg_loss"])
        torch.testing.assert_close(clipfrac, ns["pg_clipfrac"], check_dtype=False)
        vloss, vclipfrac = pm.clipped_value_loss(names["vpred"], d["old_values"], d["returns"], mask, 0.2)
        torch.testing.assert_close(vloss, ns["vf_loss"])
        torch.testing.assert_close(vclipfrac, ns["vf_clipfrac"], check_dtype=False)


def test_trl_metrics_average_over_padding(trl):
    d = random_batch(1, min_len=3)
    mask = d["mask"]
    invalid = trl.module.INVALID_LOGPROB
    new = torch.where(mask.bool(), d["logprobs"], invalid)
    old = torch.where(mask.bool(), d["old_logprobs"], invalid)
    ns = run_trl(trl, "logprobs_diff = new_logprobs - mb_logprobs", "logprobs_diff = new_logprobs - mb_logprobs", new_logprobs=new, mb_logprobs=old)
    ns = run_trl(trl, "approxkl = 0.5 * (logprobs_diff**2).mean()", "approxkl = 0.5 * (logprobs_diff**2).mean()", **ns)
    ours = pm.approx_kl(d["logprobs"], d["old_logprobs"], mask, kind="k2")
    # TRL averages over every position; padding contributes zeros, diluting by n_real / n_all.
    torch.testing.assert_close(ns["approxkl"], ours * mask.sum() / mask.numel())


def test_trl_train_loop_facts_we_document(trl):
    source = "\n".join(trl.train_source)
    assert "clip_grad_norm" not in source  # max_grad_norm is never applied in PPOTrainer.train
    assert "advantages = masked_whiten(advantages, ~padding_mask)" in source  # local, per process
    assert "INVALID_LOGPROB" in source


def test_exact_kl_per_position_against_a_loop_and_torch():
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(2, 3, 11, generator=generator, dtype=torch.float64)
    ref_logits = logits + 0.5 * torch.randn(2, 3, 11, generator=generator, dtype=torch.float64)
    logp, ref = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    kl = pm.exact_kl(logp, ref, mask)
    assert kl.shape == (2, 3)
    for b in range(2):
        for t in range(3):
            by_loop = sum(math.exp(logp[b, t, a]) * (logp[b, t, a] - ref[b, t, a]) for a in range(11)) if mask[b, t] else 0.0
            assert float(kl[b, t]) == pytest.approx(float(by_loop), abs=1e-12)
    torch_kl = torch.nn.functional.kl_div(ref, logp, log_target=True, reduction="none").sum(-1)
    assert torch.allclose(pm.exact_kl(logp, ref), torch_kl)
    assert (pm.exact_kl(logp, ref) > 0).all() and float(pm.exact_kl(logp, logp).abs().max()) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        pm.exact_kl(logp, ref[..., :5])


@pytest.mark.parametrize("kl, target, stop", [(0.0149, 0.01, False), (0.0151, 0.01, True), (5.0, 0.0, False),
                                              (0.03, 0.02, False), (0.0301, 0.02, True)])
def test_past_target_kl_is_spinning_ups_rule(kl, target, stop):
    # Spinning Up's PPO: `if kl > 1.5 * target_kl: break` before a policy step; target 0 = off here.
    assert pm.past_target_kl(kl, target) is stop
    assert pm.TARGET_KL_FACTOR == 1.5
