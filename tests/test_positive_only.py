"""``positive_only`` (design 1's arm D, RAFT++ inside the trainer): advantage 1 on every token of a passing
answer, 0 on a failing one, nothing else; the config refuses the parts that would add a baseline or a penalty."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils import ppo_math as pm
from course_utils.config import load_config

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
ARM_D = {"reward": "checker_binary", "positive_only": True, "kl_coef": 0.0, "vf_coef": 0.0,
         "whiten_advantages": False}


def loop_positive_only(scores: list[float], mask: list[list[float]]) -> list[list[float]]:
    return [[(1.0 if s > 0 else 0.0) * m for m in row] for s, row in zip(scores, mask)]


def test_the_advantage_is_one_on_a_pass_and_zero_elsewhere_token_by_token():
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, -0.5])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.float32)
    got = pm.positive_only_advantages(scores, mask)
    assert got.tolist() == loop_positive_only(scores.tolist(), mask.tolist())
    assert got.tolist()[0] == [1.0, 1.0, 0.0]  # a pass: 1 on its real tokens, 0 on padding
    assert got.dtype == mask.dtype
    with pytest.raises(ValueError, match=r"scores \[B\] and mask \[B, T\]"):
        pm.positive_only_advantages(scores, mask[:4])


def test_the_config_names_what_would_add_a_baseline_or_a_penalty():
    with pytest.raises(ValueError, match='positive_only needs reward "checker_binary"'):
        load_config(SMOKE, **(ARM_D | {"reward": "checker_partial"}))
    with pytest.raises(ValueError, match="switch off kl_coef, whiten_advantages"):
        load_config(SMOKE, **(ARM_D | {"kl_coef": 0.02, "whiten_advantages": True}))
    with pytest.raises(ValueError, match="switch off group_baseline, drop_uniform_groups"):
        load_config(SMOKE, batch_size=8, num_minibatches=2, samples_per_prompt=2,
                    **(ARM_D | {"group_baseline": True, "drop_uniform_groups": True}))
    assert load_config(SMOKE, **ARM_D).positive_only


def test_the_trainer_trains_on_the_passing_answers_only(tmp_path, monkeypatch):
    """The batch's advantages are the pass indicator on every real token, whatever the value head says;
    with no pass in a batch the policy loss has no gradient."""
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(tmp_path), threads=2, batch_size=8, num_minibatches=2,
                         samples_per_prompt=2, **ARM_D)
    trainer = PPOTrainer(config, quiet=True)
    verdicts = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    monkeypatch.setattr(trainer.train_reward, "score", lambda prompts, texts, records=None: verdicts.clone())
    batch = trainer.prepare_batch()
    mask = batch.rollout.response_mask
    assert torch.equal(batch.advantages, verdicts[:, None] * mask)
    assert not torch.equal(batch.raw_advantages, batch.advantages)  # GAE ran (logged), but is not what trains
