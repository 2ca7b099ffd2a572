"""One PPO update, written as the lesson's pseudocode ("canonical update skeleton", lesson 7).

    rollout = generate_with_old_policy(prompts)                     # 1. rollout   prepare_batch
    with no_grad():                                                  #
        old_logp, ref_logp, old_values = ...  (inside the rollout)   #
        rm_score = reward_model_score(rollout)                       # 2. score
    token_rewards = -beta * (old_logp - ref_logp)                    # 3. shape
    token_rewards[last_valid_index] += rm_score                      #
    advantages, returns = masked_gae(token_rewards, old_values, ...) # 4. advantages
    advantages = masked_global_whiten(advantages, response_mask)     #
    for _ in range(ppo_epochs):                                      # 5. optimise
        for minibatch in shuffled(batch):                            #
            loss = clipped_surrogate + vf_coef * clipped_value_loss  #    minibatch_loss
                   - ent_coef * entropy                              #
            if approx_kl > 1.5 * target_kl: break  (if target_kl)    #    pm.past_target_kl
            optimize(loss)                                           #    optimizer_step

Every formula is one call into ``ppo_math``; this module only puts them in order. The trainer
(``trainer.PPOTrainer.ppo_update``) calls ``prepare_batch`` and ``optimise`` and then logs.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch

from course_utils import ppo_math as pm
from course_utils.machinery.distributed import (all_processes_agree, distributed_on, global_max, global_means,
                                                token_share_weight)
from course_utils.machinery.packed_linear import packed_linears
from course_utils.rollout import Rollout, collect_rollout, sequence_forward

STEP_STATS = ("policy_loss", "value_loss", "entropy", "policy_clipfrac", "value_clipfrac", "approx_kl",
              "ratio_mean", "ratio_var", "ratio_max", "grad_norm")
"""Statistics of one optimizer step, logged as their mean over the steps of an update."""

TOKEN_MEANS = ("policy_loss", "value_loss", "entropy", "policy_clipfrac", "value_clipfrac", "approx_kl", "ratio_mean")
"""The step statistics that are means over a minibatch's real tokens (under several processes:
over every process's tokens, ``global_means``)."""


@dataclass
class RolloutBatch:
    """Steps 1-4 of an update: one rollout batch and what the optimisation needs from it.

    Shapes (B episodes, T response columns): ``raw_scores [B]`` (the reward before any
    whitening); ``kl_per_token``, ``non_score_rewards`` (-β·KL_t), ``rewards`` (shaped),
    ``raw_advantages``, ``advantages`` (whitened if the config says so: what the policy loss
    uses) and ``returns`` (value targets) are ``[B, T]`` and 0 outside ``rollout.response_mask``. ``kl_coef`` is the β the rewards were shaped with;
    ``timings`` holds ``rollout_s`` and ``advantage_s`` in seconds.
    """

    records: list
    rollout: Rollout
    raw_scores: torch.Tensor
    kl_coef: float
    kl_per_token: torch.Tensor
    non_score_rewards: torch.Tensor
    rewards: torch.Tensor
    raw_advantages: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    timings: dict = field(default_factory=dict)
    trained_rows: torch.Tensor | None = None  # drop_uniform_groups: bool [B], the rows step 5 trains on

    PER_ROW = ("raw_scores", "kl_per_token", "non_score_rewards", "rewards", "raw_advantages", "advantages",
               "returns")

    def select(self, rows: torch.Tensor) -> "RolloutBatch":
        """The rows ``rows`` of every per-row tensor together (a minibatch)."""
        picked = {name: getattr(self, name)[rows] for name in self.PER_ROW}
        if self.trained_rows is not None:
            picked["trained_rows"] = self.trained_rows[rows]
        return replace(self, rollout=self.rollout.select(rows), records=[self.records[i] for i in rows.tolist()],
                       **picked)

    def __len__(self) -> int:
        return len(self.records)


# ---------------------------------------------------------------------------------------------
# Steps 1-4: sample with π_old, score, shape the rewards, advantages
# ---------------------------------------------------------------------------------------------


def prepare_batch(bundle, records: list, sampling, reward, kl_coef: float, config) -> RolloutBatch:
    """Steps 1-4 on one batch of prompt records. Nothing is trained: the policy that samples the
    batch is the "old" policy π_old that every later ratio compares with."""
    t_start = time.perf_counter()
    # 1. rollout: responses, old log-probs and values, reference log-probs (no gradients)
    rollout = collect_rollout(bundle, [r.prompt for r in records], sampling, records=records,
                              old_logprobs_from=config.old_logprobs_from,
                              keep_generation_logprobs=config.log_sampler_kl, packed=config.packed_cpu_linears,
                              decode_loop=config.decode_loop, sampling_dtype=config.sampling_dtype)
    mask = rollout.response_mask
    t_rollout = time.perf_counter()

    # 2. score each response: one raw number per sequence (checker or reward model)
    raw_scores = reward.score(rollout.prompts, rollout.response_texts, records).to(mask.device)
    scores = pm.penalise_missing_eos(raw_scores, rollout.ended_with_eos, config.missing_eos_penalty) \
        if config.missing_eos_penalty else raw_scores
    if config.group_baseline:  # the k responses to one prompt sit in consecutive rows (trainer.prepare_batch)
        scores = pm.leave_one_out_baseline(scores, config.samples_per_prompt)
    if config.whiten_rewards:
        ones = torch.ones_like(scores)
        scores = pm.masked_whiten(scores[:, None], ones[:, None], shift_mean=False)[:, 0]

    # 3. shaped per-token rewards: -β·KL on every token, plus the score on the last real one
    #    (pm.shaped_rewards in two parts, so that the penalty is kept for the log)
    kl_per_token = pm.kl_estimate(rollout.old_logprobs, rollout.ref_logprobs, config.kl_estimator, mask=mask)
    non_score_rewards = pm.kl_penalty_rewards(rollout.old_logprobs, rollout.ref_logprobs, mask, kl_coef,
                                              config.kl_estimator)
    rewards = non_score_rewards + pm.score_on_last_token(scores, mask)

    # 4. advantages by GAE and returns as value targets (from the raw advantages), then whiten
    raw_advantages, returns = pm.masked_gae(rewards, rollout.values, mask, config.gamma, config.lam)
    # Reinforce-Rej: only the groups whose answers differ are trained, and whitened among themselves.
    trained = pm.mixed_groups(raw_scores, config.samples_per_prompt) if config.drop_uniform_groups else None
    whiten_over = mask if trained is None else mask * trained[:, None].to(mask.dtype)
    advantages = pm.masked_whiten(raw_advantages, whiten_over) \
        if config.whiten_advantages and whiten_over.any() else raw_advantages
    if config.positive_only:  # RAFT++ (design 1's arm D): 1 on every token of a pass, 0 elsewhere
        advantages = pm.positive_only_advantages(raw_scores, mask)
    timings = {"rollout_s": t_rollout - t_start, "advantage_s": time.perf_counter() - t_rollout}
    return RolloutBatch(records=list(records), rollout=rollout, raw_scores=raw_scores, kl_coef=kl_coef,
                        kl_per_token=kl_per_token, non_score_rewards=non_score_rewards, rewards=rewards,
                        raw_advantages=raw_advantages, advantages=advantages, returns=returns, timings=timings,
                        trained_rows=trained)


# ---------------------------------------------------------------------------------------------
# Step 5: the minibatch loss, one optimizer step, epochs x minibatches
# ---------------------------------------------------------------------------------------------


def minibatch_loss(policy, mb: RolloutBatch, config) -> tuple[torch.Tensor, dict]:
    """``loss = clipped policy loss + vf_coef * clipped value loss - ent_coef * entropy`` on a
    minibatch, and the tensors its statistics are read from (all measured on this forward, i.e.
    before the optimizer step)."""
    r, m = mb.rollout, mb.rollout.response_mask  # never all zero: every response has a token
    logprobs, values, logits = sequence_forward(policy, r.query_ids, r.query_mask, r.response_ids, m,
                                                config.temperature)
    pg_loss, pg_clipfrac = pm.clipped_surrogate(logprobs, r.old_logprobs, mb.advantages, m, config.cliprange)
    vf_loss, vf_clipfrac = pm.clipped_value_loss(values, r.values, mb.returns, m, config.cliprange_value)
    # Without an entropy bonus the entropy is only logged: keep it out of the graph (its
    # backward through a softmax over the whole vocabulary would cost ~5% of the step).
    with torch.no_grad() if config.ent_coef == 0 else nullcontext():
        entropy = pm.masked_entropy(logits, m, temperature=config.temperature)
    loss = pg_loss + config.vf_coef * vf_loss - config.ent_coef * entropy
    parts = {"policy_loss": pg_loss, "value_loss": vf_loss, "entropy": entropy, "policy_clipfrac": pg_clipfrac,
             "value_clipfrac": vf_clipfrac, "logprobs": logprobs}
    return loss, parts


def optimizer_step(loss: torch.Tensor, params: list, optimizer, max_grad_norm: float,
                   accelerator=None) -> torch.Tensor | None:
    """Backward, clip, step. Returns the gradient norm (before clipping), or None when the loss
    or the gradient was not finite: then no step is taken and the weights stay as they were.

    Under several processes the loss came out of the DDP-wrapped policy (``optimise``'s
    ``model``), so the backward also averages the gradients over processes (DDP's all-reduce,
    bucket by bucket while the backward runs): the norm, the clipping and the step that follow
    see the same averaged gradient on every process. ``accelerator``: its ``backward`` and
    ``clip_grad_norm_`` (the engine's versions; plain torch without one)."""
    optimizer.zero_grad(set_to_none=True)
    # Every process decides together: one skipping the backward would leave DDP's all-reduce waiting.
    if not all_processes_agree(bool(torch.isfinite(loss))):
        return None
    if accelerator is not None:
        accelerator.backward(loss)  # loss.backward() here (no scaler, no gradient accumulation)
    else:
        loss.backward()
    if max_grad_norm > 0:
        clip = accelerator.clip_grad_norm_ if accelerator is not None else torch.nn.utils.clip_grad_norm_
        grad_norm = clip(params, max_grad_norm)
    else:
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    return grad_norm


@torch.no_grad()
def minibatch_approx_kl(parts: dict, mb: RolloutBatch) -> float:
    """The approximate KL to π_old on this minibatch's forward (before its step), over the real
    tokens of every process, so that every process takes the same early-stop decision, and the
    one a single process takes on the whole minibatch:

        approx_kl = Σ_r n_r · approx_kl_r / Σ_r n_r      (n_r: real tokens on process r)
    """
    m = mb.rollout.response_mask
    n = float(m.sum())
    local = float(pm.approx_kl(parts["logprobs"], mb.rollout.old_logprobs, m))
    return global_means([local * n], n)[0]


@torch.no_grad()
def step_statistics(parts: dict, mb: RolloutBatch, grad_norm: torch.Tensor) -> dict:
    """The ``STEP_STATS`` of one optimizer step as floats, over the real tokens of every process
    (what one process logs on the whole minibatch; n_r tokens on process r, N = Σ_r n_r):

        TOKEN_MEANS   mean = Σ_r n_r · mean_r / N
        ratio_var     Σ_r n_r · (var_r + (mean_r - mean)²) / N     (pooled population variance)
        ratio_max     max over processes of each one's maximum
        grad_norm     already global (measured on DDP's averaged gradient)
    """
    old, m = mb.rollout.old_logprobs, mb.rollout.response_mask
    n = float(m.sum())
    ratio = pm.ratio_stats(parts["logprobs"], old, m)
    local = {k: float(parts[k]) for k in ("policy_loss", "value_loss", "entropy", "policy_clipfrac", "value_clipfrac")}
    local.update(approx_kl=float(pm.approx_kl(parts["logprobs"], old, m)), ratio_mean=float(ratio["mean"]))
    stats = dict(zip(TOKEN_MEANS, global_means([local[k] * n for k in TOKEN_MEANS], n)))
    spread = float(ratio["var"]) + (local["ratio_mean"] - stats["ratio_mean"]) ** 2
    stats["ratio_var"] = global_means([spread * n], n)[0]
    stats["ratio_max"] = global_max(float(ratio["max"]))
    stats["grad_norm"] = float(grad_norm)
    return {key: stats[key] for key in STEP_STATS}


def optimise(policy, optimizer, batch: RolloutBatch, config, epochs: int | None = None,
             max_rollout_age: int | None = None, after_epoch=None, *, model=None, accelerator=None) -> dict:
    """Step 5: ``epochs`` passes (default ``config.ppo_epochs``) over the same batch, each in
    ``config.num_minibatches`` shuffled minibatches, one optimizer step per minibatch.

    Rollout age: before the k-th step (k = 0, 1, ...) the policy has already taken k steps away
    from π_old, so the batch is k steps old. Once more than ``max_rollout_age`` (default: the
    config's) steps were taken on the batch, the remaining steps are skipped: the batch is stale.
    With ``config.target_kl`` > 0, the first step whose minibatch is more than 1.5 x target_kl
    (approximate KL) away from π_old is not taken, nor any later one: ``kl_stop_steps_skipped``.
    ``after_epoch(epoch, counts)`` is called after each pass (epoch counted from 1) with the
    running counts; it may measure the policy but must not change it.

    ``model`` is what the training forward runs through: under several processes the policy
    wrapped in DDP (``accelerator.prepare_model(policy)``), whose backward averages the
    gradients; by default (one process) the policy itself. ``accelerator`` is passed on to
    ``optimizer_step``.

    Returns ``{"stats": {name: [one float per step taken]}, "optimizer_steps",
    "stale_steps_skipped", "kl_stop_steps_skipped", "nonfinite_steps"}``.
    """
    epochs = config.ppo_epochs if epochs is None else epochs
    max_age = config.max_rollout_age if max_rollout_age is None else max_rollout_age
    model = policy if model is None else model
    if distributed_on() and not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise RuntimeError("several processes but the policy is not wrapped in DDP: nothing would average the "
                           "gradients. Pass model=accelerator.prepare_model(policy)")
    params = policy.trainable_parameters()
    stats: dict[str, list[float]] = {k: [] for k in STEP_STATS}
    counts = {"optimizer_steps": 0, "stale_steps_skipped": 0, "kl_stop_steps_skipped": 0, "nonfinite_steps": 0}
    if batch.trained_rows is not None:  # drop_uniform_groups: train on the mixed groups only
        batch = batch.select(batch.trained_rows.nonzero()[:, 0])
        if not len(batch):
            return {"stats": stats, **counts}  # every group was uniform: no step
    size = len(batch)
    minibatch_size = max(1, size // config.num_minibatches)
    policy.train()
    with packed_linears(policy, config.packed_cpu_linears):  # frozen weights packed on a CPU: speed only
        for epoch in range(epochs):
            order = torch.randperm(size)
            for start in range(0, size, minibatch_size):
                if counts["kl_stop_steps_skipped"]:
                    counts["kl_stop_steps_skipped"] += 1  # the target KL was passed: this update is done
                    continue
                if counts["optimizer_steps"] + counts["stale_steps_skipped"] > max_age:
                    counts["stale_steps_skipped"] += 1  # the rollout is too old for the current policy
                    continue
                mb = batch.select(order[start:start + minibatch_size])
                loss, parts = minibatch_loss(model, mb, config)  # DDP's forward arms its gradient hooks
                # Stopping here leaves a DDP forward without its backward: allowed, as DDP (without
                # find_unused_parameters) has nothing pending until a backward starts.
                if config.target_kl and pm.past_target_kl(minibatch_approx_kl(parts, mb), config.target_kl):
                    counts["kl_stop_steps_skipped"] += 1  # far enough from π_old: stop before this step
                    continue
                loss = loss * token_share_weight(mb.rollout.response_mask)  # x 1.0 (exact) on one process
                grad_norm = optimizer_step(loss, params, optimizer, config.max_grad_norm, accelerator)
                if grad_norm is None:
                    counts["nonfinite_steps"] += 1
                    continue
                counts["optimizer_steps"] += 1
                for key, value in step_statistics(parts, mb, grad_norm).items():
                    stats[key].append(value)
            if after_epoch is not None:
                after_epoch(epoch + 1, dict(counts))
    return {"stats": stats, **counts}
