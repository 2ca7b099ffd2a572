"""The PPO maths of the course, one function per formula.

Read this file from top to bottom: each section builds on the one before.

1. Masked statistics   masked_sum, masked_mean, masked_var, global_masked_mean_var, masked_whiten
2. Log-probabilities    logprobs_from_logits, entropy_from_logits, masked_entropy
3. KL to the reference  kl_estimate, kl_penalty_rewards, last_token_index, shaped_rewards,
                        score_on_last_token
4. Advantages           td_residuals, masked_gae, explained_variance
5. The PPO losses       probability_ratio, clipped_objective_per_token, clipped_surrogate,
                        clipped_value_loss, approx_kl, ratio_stats, past_target_kl
6. KL controllers       FixedKLController, AdaptiveKLController

Conventions used everywhere
---------------------------
* Per-token tensors have shape ``[batch, response_len]`` (written ``[B, T]``). Position ``t`` holds
  the ``t``-th *generated* token of a response; the prompt is not included.
* ``mask`` has the same shape. It is 1 on real response tokens, up to and including the first
  EOS, and 0 on padding (and anything after the first EOS). It may be float (1.0 / 0.0) or bool.
  Only the positions where ``mask`` is 1 ever reach a statistic or a loss; the values stored at
  masked-out positions are never read (they may even be ``inf`` or ``nan``), and every per-token
  output is exactly 0 there.
* A row whose mask is all zero (an "empty response") contributes nothing: no NaN, no count.
  A whole batch whose mask is all zero has no tokens to average over, and the batch-level
  statistics raise ``ValueError`` rather than return a silent NaN. Zero-length responses
  (``[B, 0]``) give empty per-token results.
* One response may be passed as ``[T]`` (and its score as one number): it is computed as a batch
  of one and returned in the shape given. Python lists and NumPy arrays of numbers are accepted
  wherever a tensor is (float lists become torch's default dtype, float32); any other shape or
  type is refused with a message naming the shape expected.
* Settings are checked where they enter: a negative or NaN ``cliprange``, ``cliprange_value`` or
  ``kl_coef`` (β), or a ``gamma``/``lam`` outside [0, 1], raises ``ValueError`` naming the argument
  and its range. The checks are O(1) on Python numbers, so the trainer's loop pays nothing for them.
* Log-probabilities are natural logs; KL values are in nats.
* Losses are things to *minimise*; objectives are things to *maximise*; loss = -objective.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "masked_sum",
    "masked_mean",
    "masked_var",
    "global_masked_mean_var",
    "masked_whiten",
    "logprobs_from_logits",
    "entropy_from_logits",
    "masked_entropy",
    "KL_ESTIMATORS",
    "kl_estimate",
    "kl_penalty_rewards",
    "last_token_index",
    "shaped_rewards",
    "score_on_last_token",
    "penalise_missing_eos",
    "td_residuals",
    "masked_gae",
    "explained_variance",
    "probability_ratio",
    "clipped_objective_per_token",
    "clipped_surrogate",
    "clipped_value_loss",
    "approx_kl",
    "ratio_stats",
    "TARGET_KL_FACTOR",
    "past_target_kl",
    "FixedKLController",
    "AdaptiveKLController",
]


# ---------------------------------------------------------------------------------------------
# Input checks (shared by every function below)
# ---------------------------------------------------------------------------------------------

_SHAPES = "[B, T] (a batch of responses) or [T] (one response)"


def _tensor(x, name: str = "x", values: bool = True) -> torch.Tensor:
    """``x`` as a tensor: a tensor passes through untouched (no copy, no cost); a Python number, a
    (nested) list or a NumPy array of numbers is converted, with ``values`` in a floating dtype
    (a list of floats or ints becomes torch's default dtype, float32; a NumPy array keeps its own)."""
    if isinstance(x, torch.Tensor):
        return x
    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a tensor, or a list of numbers, of shape {_SHAPES}; "
                        f"got a {type(x).__name__} that is not numbers") from None
    return t.to(torch.get_default_dtype()) if values and not t.is_floating_point() else t


def _one_response(m: torch.Tensor, name: str) -> bool:
    """True for one response ``[T]`` (the caller computes it as ``[1, T]``), False for ``[B, T]``;
    any other number of dimensions is refused with the shapes expected."""
    if m.dim() not in (1, 2):
        raise ValueError(f"{name} has shape {tuple(m.shape)}; per-token inputs are {_SHAPES}")
    return m.dim() == 1


def _at_least_zero(value, name: str, meaning: str, finite: bool = False) -> None:
    """Refuse a negative or NaN setting (and, with ``finite``, an infinite one), naming it and its range.

    O(1) on a Python number, which is what the trainer passes; a tensor is read only when it is one
    number on the CPU, so a setting held on a GPU never forces a device synchronisation."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.device.type != "cpu":
            return
        value = value.item()
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not number >= 0 or (finite and math.isinf(number)):  # `not >=` also catches NaN
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number >= 0 ({meaning}), got {value}")


def _as_bool_mask(x: torch.Tensor, mask: torch.Tensor, name: str = "x") -> torch.Tensor:
    """Check that ``mask`` matches ``x`` and holds only 0/1, and return it as a bool tensor."""
    mask = _tensor(mask, "mask", values=False)
    if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} and mask must be torch tensors, got {type(x).__name__} and "
            f"{type(mask).__name__}; wrap lists with torch.tensor(...)"
        )
    if x.shape != mask.shape:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but mask has shape {tuple(mask.shape)}; "
            "they must match exactly (one mask entry per token)"
        )
    if mask.dtype == torch.bool:
        return mask
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(
            "mask must hold only 0 and 1 (1 = real response token, 0 = padding); "
            "build it with (positions <= first_eos).float() or pass a bool tensor"
        )
    return mask.bool()


def _count_or_raise(count: torch.Tensor, what: str) -> None:
    if count.item() == 0:
        raise ValueError(
            f"{what}: the mask selects no tokens at all, so there is nothing to average. "
            "Every real response keeps at least its EOS token in the mask; check how the "
            "response mask was built (or drop empty batches before calling)."
        )


# ---------------------------------------------------------------------------------------------
# 1. Masked statistics
# ---------------------------------------------------------------------------------------------


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over the positions where ``mask`` is 1.

    sum = Σ_i mask_i · x_i   (values at masked-out positions are never read, even if non-finite)

    Shapes: ``x`` and ``mask`` are the same shape (usually ``[B, T]``).
    ``dim=None`` gives a scalar; ``dim=k`` sums along that dimension only.
    """
    x = _tensor(x)
    m = _as_bool_mask(x, mask)
    if dim is not None and not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(f"dim={dim} does not exist for x of shape {tuple(x.shape)}; "
                         "for one response [T] use dim=None (its mean) or pass it as [1, T]")
    # where() rather than x * mask: inf * 0 would be nan and leak padding into the sum.
    kept = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the masked-in positions.

    mean = Σ_i mask_i · x_i / Σ_i mask_i

    * ``dim=None``: a scalar over every real token of the batch (a *token-level* mean, so long
      responses weigh more than short ones). Raises ``ValueError`` if the mask is all zero.
    * ``dim=1`` (or any ``dim``): one mean per slice, e.g. a per-response mean of shape ``[B]``.
      A slice with no real tokens (an all-padding row) gets the value 0, not NaN.
    """
    x = _tensor(x)
    m = _as_bool_mask(x, mask)
    total = masked_sum(x, m, dim=dim)
    count = m.sum() if dim is None else m.sum(dim=dim)
    if dim is None:
        _count_or_raise(count, "masked_mean")
        return total / count
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over the masked-in positions (a scalar).

    var = Σ_i mask_i · (x_i - mean)² / (n - 1)      with n = Σ_i mask_i     (unbiased=True)
    var = Σ_i mask_i · (x_i - mean)² / n                                    (unbiased=False)

    where ``mean = masked_mean(x, mask)``. The unbiased (Bessel) version needs n >= 2 and raises
    ``ValueError`` otherwise; pass ``unbiased=False`` for a single token.
    This is the statistic of the tensor on *this* process only; for the statistic of a batch split
    across processes see ``global_masked_mean_var``.
    """
    x = _tensor(x)
    m = _as_bool_mask(x, mask)
    n = m.sum()
    _count_or_raise(n, "masked_var")
    if unbiased and n.item() < 2:
        raise ValueError(
            "masked_var(unbiased=True) needs at least 2 masked tokens (it divides by n - 1); "
            "pass unbiased=False or use a larger batch"
        )
    centred = x - masked_mean(x, m)
    sum_sq = masked_sum(centred * centred, m)
    return sum_sq / (n - 1) if unbiased else sum_sq / n


def _distributed_is_on() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def global_masked_mean_var(
    x: torch.Tensor,
    mask: torch.Tensor,
    unbiased: bool = True,
    distributed: bool | None = None,
    group=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance over the masked tokens of *all* processes (scalars in ``x``'s dtype).

    Two passes, each a sum over every process's own masked tokens (all-reduced when
    ``torch.distributed`` is initialised, so each process holds the global numbers):

        pass 1:  n = Σ mask_i,  s = Σ mask_i · x_i            ->  mean = s / n
        pass 2:  q = Σ mask_i · (x_i - mean)²                 ->  var = q / (n - 1)   (or / n)

    Two processes holding halves of a batch get what one process gets on the whole batch.
    Centring before squaring (pass 2) keeps float32 accurate even when |mean| >> std, where the
    one-pass form Σx² - n·mean² would cancel; no float64 is needed, which Apple's MPS lacks.
    ``distributed=None`` means "use torch.distributed if it is initialised"; ``False`` forces
    the local statistic. ``group`` is the process group to reduce over (``None`` = all).
    """
    x = _tensor(x)
    m = _as_bool_mask(x, mask)
    dtype = x.dtype if x.is_floating_point() else torch.float32
    zero = torch.zeros((), dtype=dtype, device=x.device)
    xm = torch.where(m, x.to(dtype), zero)
    if distributed is None:
        distributed = _distributed_is_on()

    def global_sums(t: torch.Tensor) -> torch.Tensor:
        if distributed:
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM, group=group)
        return t

    n, s = global_sums(torch.stack([m.sum().to(dtype), xm.sum()]))
    # Every process sees the same global n, so they all raise together (no hanging collective).
    _count_or_raise(n, "global_masked_mean_var")
    if unbiased and n.item() < 2:
        raise ValueError(
            "the unbiased variance needs at least 2 masked tokens in the whole batch; "
            "pass unbiased=False or use a larger batch"
        )
    mean = s / n
    centred = torch.where(m, xm - mean, zero)
    q = global_sums((centred * centred).sum().reshape(1))[0]
    var = q / (n - 1) if unbiased else q / n
    return mean, var


def masked_whiten(
    x: torch.Tensor,
    mask: torch.Tensor,
    shift_mean: bool = True,
    unbiased: bool = True,
    eps: float = 1e-8,
    distributed: bool | None = None,
    group=None,
) -> torch.Tensor:
    """Normalise ``x`` to mean 0 and variance 1 using only the masked-in tokens.

    whitened_i = (x_i - mean) / sqrt(var + eps)            (shift_mean=True)
    whitened_i = (x_i - mean) / sqrt(var + eps) + mean     (shift_mean=False: rescale only)

    ``mean`` and ``var`` come from ``global_masked_mean_var``: padding is never counted, and
    when ``torch.distributed`` is initialised they are global across processes. The unbiased
    variance (the default, as in TRL) divides by the global count minus one.

    Shapes: ``x``, ``mask`` and the result are ``[B, T]``; the result is 0 where mask is 0.
    Typical use: ``advantages = masked_whiten(advantages, mask)`` before the policy update.
    """
    x = _tensor(x)
    m = _as_bool_mask(x, mask)
    mean, var = global_masked_mean_var(x, m, unbiased=unbiased, distributed=distributed, group=group)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(m, whitened, torch.zeros((), dtype=x.dtype, device=x.device))


# ---------------------------------------------------------------------------------------------
# 2. Log-probabilities and entropy from the model's logits
# ---------------------------------------------------------------------------------------------


def logprobs_from_logits(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of each chosen token: log softmax(logits / temperature)[token].

    logprob[b, t] = logits[b, t, a] / τ - log Σ_v exp(logits[b, t, v] / τ)   with a = tokens[b, t]

    Shapes: ``logits`` is ``[B, T, V]``, ``tokens`` is ``[B, T]`` (int64), result ``[B, T]``.
    Alignment (the classic off-by-one): a causal LM's output at position ``p`` predicts the token
    at ``p + 1``. For a response starting at index ``c`` of the full sequence, pass
    ``logits = model(seq).logits[:, c - 1 : -1]`` and ``tokens = seq[:, c:]``.
    Use the same temperature as the sampler, or the ratios are computed for a different policy.
    The result is computed in float32 (or float64 if the logits are float64).
    """
    if logits.dim() != tokens.dim() + 1 or logits.shape[:-1] != tokens.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be tokens {tuple(tokens.shape)} plus a vocabulary "
            "dimension; slice the logits so that logits[:, t] is the prediction for tokens[:, t]"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use 1.0 for plain sampling")
    work_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(work_dtype) / temperature, dim=-1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the next-token distribution at every position, in nats.

    H = -Σ_v p_v log p_v   with p = softmax(logits / temperature)

    Shapes: ``logits`` ``[..., V]`` -> result ``[...]`` (e.g. ``[B, T, V]`` -> ``[B, T]``).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    work_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(work_dtype) / temperature, dim=-1)
    # A logit of -inf (a banned token) has p = 0 and log p = -inf; 0 * -inf would be nan, so
    # log p is set to 0 there (nan_to_num also passes a zero gradient through those entries).
    return -(logp.exp() * torch.nan_to_num(logp, neginf=0.0)).sum(-1)


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean policy entropy over the real response tokens (a scalar, in nats).

    entropy = masked_mean(H_t, mask)   with H_t = entropy_from_logits(logits)[:, t]

    Shapes: ``logits`` ``[B, T, V]``, ``mask`` ``[B, T]``. Padding positions are not averaged in
    (TRL's logged ``policy/entropy_avg`` does average them in).
    """
    m = _as_bool_mask(logits[..., 0], mask, "logits[..., 0]")
    # Blank padding logits so that garbage there cannot turn into NaN gradients.
    logits = torch.where(m.unsqueeze(-1), logits, torch.zeros((), dtype=logits.dtype, device=logits.device))
    return masked_mean(entropy_from_logits(logits, temperature), m)


# ---------------------------------------------------------------------------------------------
# 3. The KL penalty to the reference policy and the shaped per-token reward
# ---------------------------------------------------------------------------------------------

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    kind: str = "k1",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token sample estimates of KL(π ‖ π_ref), for tokens that were sampled from π.

    With the log-ratio ``lr = logprobs - ref_logprobs = log π(a) - log π_ref(a)``:

        k1 = lr                       unbiased, but single samples can be negative
        k2 = lr² / 2                  always >= 0, biased (its expectation is not the KL)
        k3 = exp(-lr) - 1 + lr        always >= 0 and unbiased (= (ρ - 1) - log ρ, ρ = π_ref/π)

    Unbiased means: Σ_a π(a) · k(a) = KL(π ‖ π_ref) exactly, when the sum runs over the whole
    vocabulary. Sign convention: ``logprobs`` belongs to the policy that *sampled* the tokens
    (in PPO the old policy), ``ref_logprobs`` to the frozen reference. Swapping the arguments
    estimates KL(π_ref ‖ π) with the wrong weights; libraries differ on this, the tests pin it.

    Shapes: all ``[B, T]``; result ``[B, T]``. With ``mask`` given, the result is 0 where mask is 0.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; choose one of {KL_ESTIMATORS}")
    logprobs, ref_logprobs = _tensor(logprobs, "logprobs"), _tensor(ref_logprobs, "ref_logprobs")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} "
            "must have the same shape"
        )
    if mask is not None:
        m = _as_bool_mask(logprobs, mask, "logprobs")
        zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
        # Blank padding first, so exp() of garbage there can never overflow into the result.
        logprobs, ref_logprobs = torch.where(m, logprobs, zero), torch.where(m, ref_logprobs, zero)
    lr = logprobs - ref_logprobs
    if kind == "k1":
        return lr
    if kind == "k2":
        return 0.5 * lr * lr
    return torch.expm1(-lr) + lr  # expm1(y) = exp(y) - 1, accurate when lr is tiny


def exact_kl(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The exact KL(π ‖ π_ref) at each position, from the two WHOLE next-token distributions.

        KL_t = Σ_a π(a | s_t) · (log π(a | s_t) - log π_ref(a | s_t))

    The three estimators of ``kl_estimate`` see one sampled token per position; this sums over the
    vocabulary, which the logits of a forward pass make possible (at the cost of keeping two
    vocabulary-sized distributions per token, which PPO implementations avoid). Its expectation is
    what k1 and k3 estimate without bias.

    Shapes: ``logprobs`` and ``ref_logprobs`` are log-softmax outputs ``[..., V]`` (e.g.
    ``[B, T, V]``); result ``[...]``. With ``mask`` (shape ``[...]``), 0 where mask is 0.
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} "
            "must have the same shape (two distributions over the same vocabulary)"
        )
    kl = (logprobs.exp() * (logprobs - ref_logprobs)).sum(-1)
    if mask is None:
        return kl
    m = _as_bool_mask(kl, mask, "logprobs[..., 0]")
    return torch.where(m, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))


def kl_penalty_rewards(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    kl_estimator: str = "k1",
) -> torch.Tensor:
    """The non-score part of the reward: a KL penalty on every real response token.

    penalty_t = -β · k_t      with k_t = kl_estimate(logprobs, ref_logprobs, kl_estimator)

    ``logprobs`` are those of the policy that generated the rollout (π_old), β = ``kl_coef``.
    Shapes: ``[B, T]`` in and out; 0 where mask is 0. Log its per-response sum as the
    "non-score reward", apart from the reward-model score.
    """
    _at_least_zero(kl_coef, "kl_coef (β)", "the weight of the KL penalty; 0 switches it off", finite=True)
    logprobs = _tensor(logprobs, "logprobs")
    m = _as_bool_mask(logprobs, mask, "logprobs")
    kl = kl_estimate(logprobs, ref_logprobs, kl_estimator, mask=m)
    return torch.where(m, -kl_coef * kl, torch.zeros((), dtype=kl.dtype, device=kl.device))


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real token of each response: shape ``[B]``, -1 for an all-padding row.

    For a mask built as "up to and including the first EOS" this is the EOS position, or the last
    position ``T - 1`` for a response cut off without EOS.
    """
    mask = _tensor(mask, "mask", values=False)
    m = mask.bool() if mask.dtype != torch.bool else mask
    if m.shape[-1] == 0:  # zero-length responses: no real token in any row
        return torch.full(m.shape[:-1], -1, dtype=torch.long, device=m.device)
    positions = torch.arange(m.shape[-1], device=m.device).expand_as(m)
    return torch.where(m, positions, torch.full_like(positions, -1)).max(dim=-1).values


def shaped_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
    kl_estimator: str = "k1",
) -> torch.Tensor:
    """Per-token rewards for PPO: a KL penalty on every token plus the score on the last one.

    r_t = -β · k_t + score · 1[t = last real token]

    (lesson 5: a response of five tokens with score 2.40 and a KL penalty of 0.35 summed over its
    tokens, 0.07 of it on the last one: r_last = 2.40 - 0.07 = 2.33, and the shaped return
    Σ_t r_t = 2.40 - 0.35 = 2.05.)

    Shapes: ``scores`` ``[B]`` (one reward-model score per response); ``logprobs``,
    ``ref_logprobs``, ``mask`` and the result ``[B, T]``. The result is 0 where mask is 0. The
    score of an all-padding row has no token to sit on and is dropped (the row contributes
    nothing). Unlike TRL, the score sits *on* the last real token (the EOS when there is one),
    not on the position after it.
    """
    logprobs = _tensor(logprobs, "logprobs")
    m = _as_bool_mask(logprobs, mask, "logprobs")
    placed = score_on_last_token(scores, m)  # checks the shape of scores first
    return kl_penalty_rewards(logprobs, ref_logprobs, m, kl_coef, kl_estimator) + placed.to(logprobs.dtype)


def penalise_missing_eos(scores: torch.Tensor, ended_with_eos: torch.Tensor, penalty: float) -> torch.Tensor:
    """Scores with a penalty for every response that never produced an EOS (TRL's
    ``missing_eos_penalty``):

        score'_b = score_b - penalty · 1[response b has no EOS]

    Shapes: ``scores [B]``, ``ended_with_eos [B]`` bool -> ``[B]``. ``penalty`` 0 changes nothing.
    """
    if scores.shape != ended_with_eos.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and ended_with_eos {tuple(ended_with_eos.shape)} must match")
    return scores - penalty * (~ended_with_eos.bool()).to(scores.dtype)


def leave_one_out_baseline(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Scores minus the mean score of the other responses to the same prompt (RLOO, Ahmadian et
    al. 2024): with the k responses to one prompt in consecutive rows,

        score'_i = score_i - 1/(k-1) · Σ_{j in group(i), j ≠ i} score_j

    The baseline does not depend on response i itself, so the policy gradient stays unbiased; the
    scores of a prompt whose k answers all score the same become 0 (the KL penalty and the value
    head still shape their advantages). OpenRLHF's ``rloo`` estimator subtracts the same baseline
    at the same place, before the KL shaping. Shapes: ``scores [B]`` with B a multiple of
    ``group_size`` (k >= 2) -> ``[B]``.
    """
    if group_size < 2 or scores.dim() != 1 or scores.shape[0] % group_size:
        raise ValueError(f"leave_one_out_baseline needs group_size >= 2 dividing the {tuple(scores.shape)} scores, "
                         f"got {group_size}")
    groups = scores.view(-1, group_size)
    others_mean = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others_mean).reshape(-1)


def mixed_groups(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Which responses belong to a group whose scores differ (Reinforce-Rej, Xiong et al. 2025):
    with the k responses to one prompt in consecutive rows,

        keep_i = max_{j in group(i)} score_j != min_{j in group(i)} score_j

    A group whose k answers all pass, or all fail, carries no comparison: after a group baseline
    its scores are all 0, and only the KL penalty and the value head would move it. Dropping such
    groups puts the whole update on prompts where the policy sometimes succeeds. A NaN score makes
    its group "not uniform" (kept): the non-finite stop rule must see it. Shapes: ``scores [B]`` with
    B a multiple of ``group_size`` (k >= 2) -> bool ``[B]``.
    """
    if group_size < 2 or scores.dim() != 1 or scores.shape[0] % group_size:
        raise ValueError(f"mixed_groups needs group_size >= 2 dividing the {tuple(scores.shape)} scores, "
                         f"got {group_size}")
    groups = scores.view(-1, group_size)
    uniform = (groups == groups[:, :1]).all(dim=1)
    return (~uniform).repeat_interleave(group_size)


def positive_only_advantages(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The advantage of RAFT++ (Xiong et al. 2025) on every token: 1 for an answer that passed, 0 for
    one that failed, no baseline,

        A_{i,t} = 1[score_i > 0] · mask_{i,t}

    With the clipped surrogate this raises the probability of passing answers only (as filtered SFT
    does, with PPO's importance ratio and clip); a failing answer contributes no gradient. A score
    above 0 is a pass: the binary checker gives 1 or 0. Shapes: ``scores [B]``, ``mask [B, T]`` ->
    ``[B, T]`` (the mask's dtype)."""
    if scores.dim() != 1 or mask.dim() != 2 or scores.shape[0] != mask.shape[0]:
        raise ValueError(f"positive_only_advantages needs scores [B] and mask [B, T], got {tuple(scores.shape)} "
                         f"and {tuple(mask.shape)}")
    return (scores > 0).to(mask.dtype)[:, None] * mask


def group_normalized_advantages(scores: torch.Tensor, group_size: int, scale: bool = True,
                                eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage (Shao et al. 2024; TRL's ``GRPOTrainer``): each score against its own
    prompt's group, no value head, the same number for every token of the response:

        A_i = (score_i - mean_group(score)) / (std_group(score) + eps)      (std with Bessel's n - 1)

    ``scale=False`` keeps only the centring (TRL's ``scale_rewards="none"``, Dr. GRPO). A group
    whose k answers all score the same gets A = 0: no signal, as with RLOO. Lesson 11 compares it
    with RLOO's baseline (``leave_one_out_baseline``): for a group of k, RLOO's centred score is
    k / (k - 1) times GRPO's unscaled one. Shapes: ``scores [B]`` with B a multiple of ``group_size``
    (k >= 2), the k responses to one prompt in consecutive rows -> ``[B]``.
    """
    if group_size < 2 or scores.dim() != 1 or scores.shape[0] % group_size:
        raise ValueError(f"group_normalized_advantages needs group_size >= 2 dividing the {tuple(scores.shape)} "
                         f"scores, got {group_size}")
    groups = scores.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (groups.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def dpo_loss(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor, ref_chosen_logps: torch.Tensor,
             ref_rejected_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's loss (Rafailov et al. 2023; TRL's ``DPOTrainer``, loss_type "sigmoid"): a reward model
    and RL in one supervised loss on preference pairs, with the implicit reward β·log(π/π_ref):

        loss = -mean log σ( β [ (log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l)) ] )

    Each argument holds one summed log-probability per pair (over the response's tokens), shape
    ``[P]`` -> a scalar. No sampling: DPO learns only from the pairs it is given (offline), which
    is what lesson 11 weighs against PPO's on-policy samples.
    """
    margin = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    return -torch.nn.functional.logsigmoid(beta * margin).mean()


def score_on_last_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The score part of the shaped reward: each response's score on its last real token.

    out[b, t] = scores[b] · 1[t = last real token of row b]

    Shapes: ``scores [B]``, ``mask [B, T]`` -> ``[B, T]`` (float32 unless ``scores`` is wider).
    An all-padding row has no token to hold its score: the row stays 0.
    """
    scores, mask = _tensor(scores, "scores"), _tensor(mask, "mask", values=False)
    m = mask.bool() if mask.dtype != torch.bool else mask
    if _one_response(m, "mask"):  # [T] with its one score: computed as a batch of one, returned as [T]
        return score_on_last_token(scores.reshape(-1), m[None])[0]
    if scores.dim() != 1 or scores.shape[0] != m.shape[0]:
        raise ValueError(
            f"scores must have shape [batch] = [{m.shape[0]}] (one score per response), got "
            f"{tuple(scores.shape)}; squeeze the reward model's [B, 1] output"
        )
    last = last_token_index(m)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    placed = torch.zeros(m.shape, dtype=torch.promote_types(scores.dtype, torch.float32), device=m.device)
    return placed.index_put((rows, last[rows]), scores[rows].to(placed.dtype))


# ---------------------------------------------------------------------------------------------
# 4. Advantages: TD residuals and GAE
# ---------------------------------------------------------------------------------------------


def _next_value(values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """V_{t+1} masked: the value of the next real token, 0 after the last one (episode over)."""
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    v = torch.where(m, values, zero)
    return torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)


def td_residuals(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float
) -> torch.Tensor:
    """One-step temporal-difference residuals.

    δ_t = r_t + γ · V_{t+1} - V_t,   with V_{t+1} = 0 after the last real token

    The response ends at its last real token (the EOS), so nothing is bootstrapped beyond it.
    Shapes: ``[B, T]`` in and out; 0 where mask is 0.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    rewards, values = _tensor(rewards, "rewards"), _tensor(values, "values")
    m = _as_bool_mask(rewards, mask, "rewards")
    _as_bool_mask(values, m, "values")
    if _one_response(m, "rewards"):  # [T]: computed as a batch of one [1, T], returned as [T]
        return td_residuals(rewards[None], values[None], m[None], gamma)[0]
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    delta = torch.where(m, rewards, zero) + gamma * _next_value(values, m) - torch.where(m, values, zero)
    return torch.where(m, delta, zero)


def masked_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation inside the response mask; returns ``(advantages, returns)``.

    δ_t = r_t + γ · V_{t+1} - V_t                 (``td_residuals``; V = 0 after the last token)
    A_t = δ_t + γλ · A_{t+1}                      (computed backwards; A = 0 after the last token)
    R_t = A_t + V_t                               (the value-head target)

    λ = 0 gives A_t = δ_t; λ = 1 gives A_t = Σ_k γ^k r_{t+k} - V_t (discounted reward-to-go minus V).
    Shapes: ``[B, T]`` in, two ``[B, T]`` out, both 0 where mask is 0. The mask is expected to
    be a prefix of each row (real tokens first, padding after); a hole in the mask would end
    the recursion there.
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    rewards, values = _tensor(rewards, "rewards"), _tensor(values, "values")
    m = _as_bool_mask(rewards, mask, "rewards")
    if _one_response(m, "rewards"):  # [T]: computed as a batch of one [1, T], returned as [T]
        advantages, returns = masked_gae(rewards[None], values[None], m[None], gamma, lam)
        return advantages[0], returns[0]
    delta = td_residuals(rewards, values, m, gamma)
    mf = m.to(delta.dtype)
    advantage_next = delta.new_zeros(delta.shape[0])  # A_{T} = 0: nothing after the last position
    advantages_reversed = []
    for t in reversed(range(delta.shape[1])):
        # Multiplying by mf[:, t] keeps A = 0 on padding, so the carry restarts at each row's end.
        advantage_next = (delta[:, t] + gamma * lam * advantage_next) * mf[:, t]
        advantages_reversed.append(advantage_next)
    advantages = torch.stack(advantages_reversed[::-1], dim=1) if advantages_reversed else delta.clone()  # T = 0
    zero = torch.zeros((), dtype=delta.dtype, device=delta.device)
    returns = torch.where(m, advantages + torch.where(m, values, zero), zero)
    return advantages, returns


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """How much of the variance of the returns the value head explains (a scalar).

    EV = 1 - Var[R - V] / Var[R]      (both variances over the masked tokens)

    1 is a perfect critic, 0 is no better than predicting the mean, negative is worse than that.
    If the returns are constant (Var[R] = 0) the ratio is undefined and the result is NaN.
    """
    values, returns = _tensor(values, "values"), _tensor(returns, "returns")
    m = _as_bool_mask(values, mask, "values")
    var_returns = masked_var(returns, m, unbiased=False)
    var_residual = masked_var(returns - values, m, unbiased=False)
    if var_returns.item() == 0:
        return torch.full_like(var_returns, float("nan"))
    return 1.0 - var_residual / var_returns


# ---------------------------------------------------------------------------------------------
# 5. The PPO losses
# ---------------------------------------------------------------------------------------------


def probability_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Importance ratio of the current policy to the rollout policy, per token.

    r_t = π_θ(a_t) / π_old(a_t) = exp(log π_θ(a_t) - log π_old(a_t))

    (lesson 4: 0.26 / 0.20 = 1.3.) Shapes: ``[B, T]`` in and out. Computed from log-probs because
    they are what the forward gives (a stable log-softmax of the logits) and what the rollout
    stores, and because exp of their difference is well behaved: near r = 1 the difference is near
    0 and exp returns the ratio at full precision, never forming the probabilities themselves.
    """
    logprobs, old_logprobs = _tensor(logprobs, "logprobs"), _tensor(old_logprobs, "old_logprobs")
    return torch.exp(logprobs - old_logprobs)


def clipped_objective_per_token(
    ratio: torch.Tensor | float, advantages: torch.Tensor | float, cliprange: float
) -> torch.Tensor:
    """PPO's clipped surrogate objective per token (to maximise).

    L_t = min(r_t · A_t, clip(r_t, 1 - ε, 1 + ε) · A_t)       ε = cliprange

    For A > 0 the objective stops growing once r > 1 + ε; for A < 0 once r < 1 - ε. Outside
    that band the gradient is 0 for the move that would go further: clipping removes the
    incentive to keep moving, it does not stop the ratio from moving.
    Accepts tensors or floats (broadcast together); returns a tensor.
    """
    _at_least_zero(cliprange, "cliprange", "the clip band is [1 - cliprange, 1 + cliprange]; PPO usually uses 0.1-0.3")
    ratio = torch.as_tensor(ratio, dtype=torch.get_default_dtype()) if not torch.is_tensor(ratio) else ratio
    advantages = torch.as_tensor(advantages, dtype=ratio.dtype) if not torch.is_tensor(advantages) else advantages
    clipped_ratio = torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    return torch.minimum(ratio * advantages, clipped_ratio * advantages)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO policy loss and its clip fraction; returns ``(loss, clipfrac)``, two scalars.

    r_t      = probability_ratio(logprobs, old_logprobs)
    loss     = masked_mean( -clipped_objective_per_token(r_t, A_t, ε) )
             = masked_mean( max(-A_t · r_t, -A_t · clip(r_t, 1 - ε, 1 + ε)) )
    clipfrac = masked fraction of tokens where the clipped term is strictly the smaller
               objective (so it, with zero gradient, was chosen)

    The mean is over all real tokens of the batch (token-level), like TRL. Shapes: ``[B, T]``.
    """
    logprobs, old_logprobs = _tensor(logprobs, "logprobs"), _tensor(old_logprobs, "old_logprobs")
    advantages = _tensor(advantages, "advantages")
    m = _as_bool_mask(logprobs, mask, "logprobs")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    # Blank padding before exp(): garbage log-probs there must not overflow into the gradient.
    ratio = probability_ratio(torch.where(m, logprobs, zero), torch.where(m, old_logprobs, zero))
    adv = torch.where(m, advantages, torch.zeros((), dtype=advantages.dtype, device=advantages.device))
    objective = clipped_objective_per_token(ratio, adv, cliprange)
    loss = masked_mean(-objective, m)
    with torch.no_grad():
        clipped_chosen = (objective < ratio * adv).to(ratio.dtype)
        # A real token whose objective is NaN makes clipfrac NaN too, rather than count as "not clipped".
        clipfrac = masked_mean(clipped_chosen.masked_fill(torch.isnan(objective), math.nan), m)
    return loss, clipfrac


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The value-head loss with PPO-style clipping; returns ``(loss, clipfrac)``, two scalars.

    V_clip   = V_old + clip(V - V_old, -c, +c)                  c = cliprange_value
    loss     = 0.5 · masked_mean( max((V - R)², (V_clip - R)²) )
    clipfrac = masked fraction of tokens where the clipped error is strictly the larger one

    Taking the max makes the loss pessimistic: the value head gets no credit for moving further
    than c from its rollout-time prediction. Shapes: ``[B, T]``.
    """
    _at_least_zero(cliprange_value, "cliprange_value", "how far the value head may move from old_values; "
                   "inf switches the clip off")
    values, old_values, returns = (_tensor(t, n) for t, n in ((values, "values"), (old_values, "old_values"),
                                                              (returns, "returns")))
    m = _as_bool_mask(values, mask, "values")
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    # Blank padding first: inf there would otherwise turn into NaN gradients through the square.
    values, old_values, returns = (torch.where(m, t, zero) for t in (values, old_values, returns))
    values_clipped = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    err_unclipped = (values - returns) ** 2
    err_clipped = (values_clipped - returns) ** 2
    worst = torch.maximum(err_unclipped, err_clipped)
    loss = 0.5 * masked_mean(worst, m)
    with torch.no_grad():
        clipped_larger = (err_clipped > err_unclipped).to(values.dtype)
        # A real token whose error is NaN makes clipfrac NaN too, rather than count as "not clipped".
        clipfrac = masked_mean(clipped_larger.masked_fill(torch.isnan(worst), math.nan), m)
    return loss, clipfrac


def approx_kl(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, kind: str = "k3"
) -> torch.Tensor:
    """How far the policy has moved from the rollout policy: an estimate of KL(π_old ‖ π_θ).

    approx_kl = masked_mean( kl_estimate(old_logprobs, logprobs, kind) )
              = masked_mean( (r - 1) - log r )       for kind="k3", r = π_θ / π_old

    The tokens were sampled from π_old, so π_old is the first argument of ``kl_estimate``.
    ``kind="k2"`` gives TRL's ``0.5 · (log r)²``. A diagnostic only (no gradient is needed).
    """
    logprobs = _tensor(logprobs, "logprobs")
    m = _as_bool_mask(logprobs, mask, "logprobs")
    return masked_mean(kl_estimate(old_logprobs, logprobs, kind, mask=m), m)


def ratio_stats(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> dict:
    """Summary of the probability ratio over real tokens: ``{"mean", "var", "min", "max"}``.

    Values are 0-dim tensors; ``var`` is the population variance (divides by n). A ratio
    distribution that spreads out across epochs is the sign of policy lag (lesson 9).
    """
    logprobs, old_logprobs = _tensor(logprobs, "logprobs"), _tensor(old_logprobs, "old_logprobs")
    m = _as_bool_mask(logprobs, mask, "logprobs")
    _count_or_raise(m.sum(), "ratio_stats")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    ratio = probability_ratio(torch.where(m, logprobs, zero), torch.where(m, old_logprobs, zero))
    inf = torch.tensor(math.inf, dtype=ratio.dtype, device=ratio.device)
    return {
        "mean": masked_mean(ratio, m),
        "var": masked_var(ratio, m, unbiased=False),
        "min": torch.where(m, ratio, inf).min(),
        "max": torch.where(m, ratio, -inf).max(),
    }


TARGET_KL_FACTOR = 1.5
"""Spinning Up's slack above ``target_kl`` before an update's remaining steps are skipped."""


def past_target_kl(approx_kl_value: float, target_kl: float) -> bool:
    """KL-based early stopping of an update's epochs (Spinning Up's rule and slack):

        stop  <=>  target_kl > 0  and  approx_kl > TARGET_KL_FACTOR * target_kl

    ``approx_kl_value`` is the approximate KL of the current policy to π_old measured before a step;
    the trainer passes ``approx_kl``'s k3 estimate (nats per token), where Spinning Up measures k1,
    mean(log π_old − log π): the two differ by 1 − mean ratio (k1 = k3 − (r̄ − 1)). ``target_kl`` = 0
    switches the rule off."""
    return target_kl > 0 and float(approx_kl_value) > TARGET_KL_FACTOR * target_kl


# ---------------------------------------------------------------------------------------------
# 6. KL controllers: choosing β (kl_coef) from one update to the next
# ---------------------------------------------------------------------------------------------


class FixedKLController:
    """β stays at ``value`` for the whole run; ``update`` does nothing."""

    def __init__(self, value: float):
        if value < 0:
            raise ValueError(f"the KL coefficient must be >= 0, got {value}")
        self.value = float(value)

    def update(self, current_kl: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value})"


class AdaptiveKLController:
    """The proportional controller of Ziegler et al. (2019) that steers the KL towards a target, in
    the form of their released code (openai/lm-human-preferences, ``AdaptiveKLController``; the paper
    writes the step as K_β; OpenRLHF, verl and TRL before its PPO rewrite carry the same code).

    After each update that observed a KL of ``current_kl`` (per response, in nats) over
    ``n_steps`` episodes:

        e = clip(current_kl / target - 1, -0.2, 0.2)      proportional error, clipped
        β ← β · (1 + e · n_steps / horizon)

    KL above target raises β (a stronger pull back to the reference), below target lowers it.
    ``horizon`` sets how many episodes it takes to correct a given error. With n_steps > 5 x horizon
    the factor could reach 0 or below (β negative: the KL penalty a bonus); such an update is
    refused rather than β clamped, because a β clamped at 0 stays 0 under a multiplicative update
    (``PPOConfig`` refuses kl_horizon < batch_size before a run starts).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        if init_kl_coef <= 0:
            raise ValueError(
                f"init_kl_coef must be > 0 for a multiplicative update, got {init_kl_coef}"
            )
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target and horizon must be > 0, got target={target}, horizon={horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> float:
        current_kl = float(current_kl)
        if not math.isfinite(current_kl):
            raise ValueError(f"current_kl must be finite, got {current_kl}; check the rollout log-probs")
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        factor = 1.0 + proportional_error * n_steps / self.horizon
        if factor <= 0:
            raise ValueError(f"an update of {n_steps} episodes with horizon {self.horizon:g} would make beta "
                             f"{self.value * factor:.3g} (<= 0): use a horizon of at least n_steps episodes")
        self.value *= factor
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.target = float(state["target"])
        self.horizon = float(state["horizon"])

    def __repr__(self) -> str:
        return f"AdaptiveKLController(value={self.value}, target={self.target}, horizon={self.horizon})"
