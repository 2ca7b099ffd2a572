"""What one update logs: every metric's name and meaning, computed from the batch and the steps.

Under ``torchrun`` every number is the one a single process would log on the whole global batch:
means from global sums and global counts, maxima as the maximum over processes, the explained
variance from global sums (``update.step_statistics`` does the same for each optimizer step).

reward side
    score               mean raw score per response (checker or reward model, before whitening)
    non_score_reward    mean per-response sum of the KL penalty -β·KL_t (the reward that is not the score)
    shaped_reward       mean per-response sum of the shaped per-token reward (score + penalty)
    kl_per_sequence     mean per-response sum of the per-token KL estimate to the reference, nats
    kl_per_token        the same per real token
    kl_coef             the β the rewards of this batch were shaped with
policy and value (means over the optimizer steps of the update, see ``update.STEP_STATS``)
    policy_loss, value_loss, entropy, policy_clipfrac, value_clipfrac, approx_kl,
    ratio_mean, ratio_var, ratio_max, grad_norm (before clipping)
    explained_variance  1 - Var(returns - V) / Var(returns) of the rollout's values
    advantage_mean/std  of the raw (not whitened) advantages over real tokens
    value_mean          mean V(s_t) over real tokens
responses
    response_length     real tokens per response, EOS included
    answer_length       the same without the EOS (an EOS-only answer has length 0)
    eos_rate, truncation_rate, padding_fraction
health
    nonfinite_steps     optimizer steps skipped for a non-finite loss or gradient
    nonfinite_scores    responses whose score was NaN or infinite
    nonfinite_kl        real tokens whose KL estimate was NaN or infinite (broken log-probs)
    optimizer_steps, stale_steps_skipped, policy_lag_max (steps the last step was behind π_old)
    kl_stop_steps_skipped  steps not taken because the approximate KL passed 1.5 x target_kl
    learning_rate
    sampler_kl          (with log_sampler_kl) mean log π_sampler - log π_old per real token: ~0
speed (seconds and tokens per second; never compared between runs)
    time_rollout_s, time_advantage_s, time_train_s, time_update_s, rollout_tokens_per_s,
    train_tokens_per_s, and the rollout's own phases as time_<phase>; under torchrun
    time_update_s is the slowest process's (the clock of the time budget and the lr schedule)
"""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils import ppo_math as pm
from course_utils.machinery.distributed import global_sum


def _finite_or_nan(x: torch.Tensor) -> float:
    value = float(x)
    return value if math.isfinite(value) else float("nan")


def global_explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``pm.explained_variance`` over the real tokens of every process:

        EV = 1 - Var[R - V] / Var[R]      (population variances, NaN when Var[R] = 0)

    Each variance comes from global sums (``pm.global_masked_mean_var``: Σ mask, Σ x, then
    Σ (x - mean)²), so two processes get what one gets on the whole batch; a mean of per-process
    EVs would not be. Centred sums keep float32 exact enough without float64 (which MPS lacks)."""
    _, var_returns = pm.global_masked_mean_var(returns, mask, unbiased=False)
    _, var_residual = pm.global_masked_mean_var(returns - values, mask, unbiased=False)
    if var_returns.item() == 0:
        return float("nan")
    return _finite_or_nan(1.0 - var_residual / var_returns)


def update_metrics(batch, steps: dict, config, update: int, world_size: int, learning_rate: float,
                   times: dict) -> dict:
    """The metrics of update number ``update`` (counted from 1) on ``batch`` (an
    ``update.RolloutBatch``), with ``steps`` the result of ``update.optimise``. ``times`` holds
    ``train_s`` and ``update_s`` (seconds); the batch brings its own rollout timings."""
    rollout, mask = batch.rollout, batch.rollout.response_mask
    n_seq, n_tok = global_sum([float(len(batch)), float(mask.sum())])
    per_seq = lambda total: global_sum([float(total)])[0] / n_seq  # noqa: E731
    adv_mean, adv_var = pm.global_masked_mean_var(batch.raw_advantages, mask, unbiased=False)
    step_mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731  (each step's stats are global)
    rollout_s = batch.timings["rollout_s"]
    metrics = {
        "update": update,
        "episodes": int(update * config.batch_size),
        # reward side
        "score": per_seq(batch.raw_scores.sum()),
        "non_score_reward": per_seq(batch.non_score_rewards.sum(1).sum()),
        "shaped_reward": per_seq((batch.rewards * mask).sum()),
        "kl_per_sequence": per_seq((batch.kl_per_token * mask).sum(1).sum()),
        "kl_per_token": global_sum([float((batch.kl_per_token * mask).sum())])[0] / max(n_tok, 1),
        "kl_coef": batch.kl_coef,
        # policy and value
        **{k: step_mean(v) for k, v in steps["stats"].items()},
        "explained_variance": global_explained_variance(rollout.values, batch.returns, mask),
        "advantage_mean": float(adv_mean),
        "advantage_std": float(adv_var.sqrt()),
        "value_mean": float(pm.global_masked_mean_var(rollout.values, mask, unbiased=False)[0]),
        # responses
        "response_length": per_seq(mask.sum(1).sum()),
        "answer_length": per_seq(mask.sum() - rollout.ended_with_eos.sum()),
        "eos_rate": per_seq(rollout.ended_with_eos.sum()),
        "truncation_rate": per_seq(rollout.truncated.sum()),
        "padding_fraction": 1.0 - n_tok / global_sum([float(mask.numel())])[0],
        "world_size": world_size,
        # health
        "nonfinite_steps": steps["nonfinite_steps"],  # already the same on every process
        "nonfinite_scores": int(global_sum([float((~torch.isfinite(batch.raw_scores)).sum())])[0]),
        "nonfinite_kl": int(global_sum([float((~torch.isfinite(batch.kl_per_token) & mask.bool()).sum())])[0]),
        "optimizer_steps": steps["optimizer_steps"],
        "stale_steps_skipped": steps["stale_steps_skipped"],
        "kl_stop_steps_skipped": steps["kl_stop_steps_skipped"],
        "policy_lag_max": max(0, steps["optimizer_steps"] - 1),
        "learning_rate": learning_rate,
        # speed
        "time_rollout_s": rollout_s,
        "time_advantage_s": batch.timings["advantage_s"],
        "time_train_s": times["train_s"],
        "time_update_s": times["update_s"],
        "rollout_tokens_per_s": n_tok / max(rollout_s, 1e-9),
        "train_tokens_per_s": n_tok * config.ppo_epochs / max(times["train_s"], 1e-9),
    }
    if config.log_sampler_kl and rollout.generation_logprobs is not None:
        gap = (rollout.generation_logprobs - rollout.old_logprobs) * mask  # 0 outside the mask
        metrics["sampler_kl"] = global_sum([float(gap.sum())])[0] / max(n_tok, 1)
    for key, value in rollout.timings.items():
        metrics[f"time_{key}"] = value
    return metrics
