"""The update module (course_utils.update) on the tiny model: the minibatch loss against a
computation by hand, one token at a time; a minibatch keeps its rows together; the shaped
rewards are the library's; a non-finite loss takes no step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from course_utils import ppo_math as pm
from course_utils import update as ppo
from course_utils.config import load_config
from course_utils.rollout import sequence_forward

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


@pytest.fixture(scope="module")
def trainer_and_batch(tmp_path_factory):
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(tmp_path_factory.mktemp("update")), threads=2,
                         ent_coef=0.05, vf_coef=0.7, cliprange=0.2, cliprange_value=0.1)
    trainer = PPOTrainer(config, quiet=True)
    return trainer, trainer.prepare_batch()


def loss_by_hand(logprobs, values, logits, mb, config) -> float:
    """clipped surrogate + vf_coef * clipped value loss - ent_coef * entropy, token by token."""
    r, eps, c = mb.rollout, config.cliprange, config.cliprange_value
    pg, vf, ent, n = 0.0, 0.0, 0.0, 0
    for b in range(r.response_mask.shape[0]):
        for t in range(r.response_mask.shape[1]):
            if r.response_mask[b, t] == 0:
                continue
            n += 1
            ratio = math.exp(float(logprobs[b, t]) - float(r.old_logprobs[b, t]))
            a = float(mb.advantages[b, t])
            pg += -min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
            v, v_old, ret = float(values[b, t]), float(r.values[b, t]), float(mb.returns[b, t])
            v_clip = v_old + min(max(v - v_old, -c), c)
            vf += 0.5 * max((v - ret) ** 2, (v_clip - ret) ** 2)
            p = torch.softmax(logits[b, t].double() / config.temperature, -1)
            ent += -float((p * p.log()).sum())
    return pg / n + config.vf_coef * vf / n - config.ent_coef * ent / n


def test_minibatch_loss_equals_the_loss_written_out_by_hand(trainer_and_batch):
    trainer, batch = trainer_and_batch
    mb = batch.select(torch.tensor([2, 0]))
    with torch.no_grad():
        # Move the policy a little away from π_old so that ratios differ from 1 and some clip.
        for p in trainer.params:
            p.add_(0.05 * torch.randn_like(p))
        loss, parts = ppo.minibatch_loss(trainer.policy, mb, trainer.config)
        r = mb.rollout
        logprobs, values, logits = sequence_forward(trainer.policy, r.query_ids, r.query_mask, r.response_ids,
                                                    r.response_mask, trainer.config.temperature)
    expected = loss_by_hand(logprobs, values, logits, mb, trainer.config)
    assert math.isclose(float(loss), expected, rel_tol=1e-4, abs_tol=1e-5), (float(loss), expected)
    assert torch.equal(parts["logprobs"], logprobs)


def test_select_keeps_every_per_row_tensor_of_a_row_together(trainer_and_batch):
    _, batch = trainer_and_batch
    rows = torch.tensor([3, 1])
    mb = batch.select(rows)
    for name in ppo.RolloutBatch.PER_ROW:
        assert torch.equal(getattr(mb, name), getattr(batch, name)[rows]), name
    assert torch.equal(mb.rollout.response_ids, batch.rollout.response_ids[rows])
    assert [r.id for r in mb.records] == [batch.records[i].id for i in rows.tolist()]
    assert len(mb) == 2


def test_prepared_rewards_are_the_libraries_shaped_rewards(trainer_and_batch):
    trainer, batch = trainer_and_batch
    r = batch.rollout
    expected = pm.shaped_rewards(batch.raw_scores, r.old_logprobs, r.ref_logprobs, r.response_mask,
                                 batch.kl_coef, trainer.config.kl_estimator)
    assert torch.allclose(batch.rewards, expected, atol=1e-7)
    advantages, returns = pm.masked_gae(expected, r.values, r.response_mask, trainer.config.gamma,
                                        trainer.config.lam)
    assert torch.allclose(batch.returns, returns, atol=1e-6)
    assert torch.allclose(batch.advantages, pm.masked_whiten(advantages, r.response_mask), atol=1e-5)


def test_a_non_finite_loss_takes_no_step(trainer_and_batch):
    trainer, _ = trainer_and_batch
    before = [p.detach().clone() for p in trainer.params]
    loss = sum(p.sum() for p in trainer.params) * float("nan")
    assert ppo.optimizer_step(loss, trainer.params, trainer.optimizer, max_grad_norm=1.0) is None
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))
