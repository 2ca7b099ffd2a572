"""Several responses per prompt (``samples_per_prompt``) and RLOO's leave-one-out baseline
(``group_baseline``): the formula against a plain loop, the refusals, and the wiring on the tiny
model (each prompt in consecutive rows, the baseline inside the shaped rewards)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils import ppo_math as pm
from course_utils.config import load_config

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


def loop_leave_one_out(scores: list[float], k: int) -> list[float]:
    out = []
    for i, s in enumerate(scores):
        group = range(i - i % k, i - i % k + k)
        others = [scores[j] for j in group if j != i]
        out.append(s - sum(others) / len(others))
    return out


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_leave_one_out_baseline_matches_a_plain_loop(k):
    scores = torch.randn(4 * k, generator=torch.Generator().manual_seed(k))
    expected = torch.tensor(loop_leave_one_out(scores.tolist(), k))
    assert torch.allclose(pm.leave_one_out_baseline(scores, k), expected, atol=1e-6)


def test_worked_numbers_and_a_group_that_agrees_gives_nothing():
    # one prompt passed once in four tries: 1 - 0/3 = 1, 0 - 1/3 = -1/3; a second prompt always passed
    out = pm.leave_one_out_baseline(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), 4)
    assert torch.allclose(out, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0, 0.0]))
    assert out.view(2, 4).sum(dim=1).abs().max() < 1e-6  # the advantages of a group sum to zero


def test_a_group_size_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="group_size >= 2"):
        pm.leave_one_out_baseline(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="group_size >= 2"):
        pm.leave_one_out_baseline(torch.zeros(6), 1)


@pytest.mark.parametrize("overrides, message", [
    ({"batch_size": 6, "num_minibatches": 2, "samples_per_prompt": 4}, "multiple of samples_per_prompt"),
    ({"samples_per_prompt": 0}, "multiple of samples_per_prompt"),
    ({"group_baseline": True}, "group_baseline needs samples_per_prompt >= 2"),
])
def test_bad_group_settings_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(SMOKE, **overrides)


def test_processes_must_get_whole_groups():
    config = load_config(SMOKE, batch_size=8, num_minibatches=2, samples_per_prompt=4)  # 2 distinct prompts
    config.validate_processes(2)
    with pytest.raises(ValueError, match="distinct prompts"):
        load_config(SMOKE, batch_size=8, num_minibatches=1, samples_per_prompt=8).validate_processes(2)


def test_the_trainer_samples_each_prompt_k_times_and_shapes_with_the_baseline(tmp_path):
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(tmp_path), threads=2, batch_size=4, num_minibatches=2,
                         samples_per_prompt=2, group_baseline=True)
    trainer = PPOTrainer(config, quiet=True)
    batch = trainer.prepare_batch()
    prompts = [r.prompt for r in batch.records]
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3] and prompts[0] != prompts[2]
    assert trainer.prompts.cursor == 1 and len(batch) == 4
    mask = batch.rollout.response_mask
    centred = pm.leave_one_out_baseline(batch.raw_scores, 2)
    assert torch.allclose(batch.rewards, batch.non_score_rewards + pm.score_on_last_token(centred, mask))
    metrics = trainer.ppo_update()  # and an update runs on it
    assert metrics["update"] == 1


def test_records_given_by_hand_must_be_grouped_for_the_baseline(tmp_path):
    from course_utils import tasks
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(tmp_path), threads=2, batch_size=4, num_minibatches=2,
                         samples_per_prompt=2, group_baseline=True)
    trainer = PPOTrainer(config, quiet=True)
    a, b = tasks.load_split("train")[:2]
    with pytest.raises(ValueError, match="consecutive rows"):
        trainer.prepare_batch([a, b, a, b])


def test_the_trl_comparison_refuses_groups_and_bfloat16_sampling(tmp_path):
    from course_utils.comparison.trl_compare import trl_args_for

    for overrides in ({"samples_per_prompt": 2}, {"sampling_dtype": "bfloat16"}):
        config = load_config(SMOKE, output_dir=str(tmp_path), batch_size=4, num_minibatches=2, **overrides)
        with pytest.raises(ValueError, match="TRL's PPOTrainer cannot run"):
            trl_args_for(config, str(tmp_path))


def loop_mixed_groups(scores: list[float], k: int) -> list[bool]:
    return [len({scores[j] for j in range(i - i % k, i - i % k + k)}) > 1 for i in range(len(scores))]


@pytest.mark.parametrize("k", [2, 4])
def test_mixed_groups_match_a_plain_loop_and_keep_a_nan_group(k):
    scores = torch.randint(0, 2, (8 * k,), generator=torch.Generator().manual_seed(k)).float()
    assert pm.mixed_groups(scores, k).tolist() == loop_mixed_groups(scores.tolist(), k)
    worked = pm.mixed_groups(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, float("nan"), 0, 0, 0]), 4)
    assert worked.view(4, 4)[:, 0].tolist() == [True, False, False, True]  # mixed, all pass, all fail, NaN kept
    with pytest.raises(ValueError, match="group_size >= 2"):
        pm.mixed_groups(torch.zeros(6), 4)


def test_dropping_uniform_groups_trains_on_the_mixed_ones_only_and_no_step_when_none(tmp_path):
    """Reinforce-Rej (design 1's arm C): the groups whose answers all pass or all fail give no gradient
    and are left out of the whitening; an update whose groups are all uniform changes nothing."""
    from course_utils import update as ppo
    from course_utils.trainer import PPOTrainer

    with pytest.raises(ValueError, match="drop_uniform_groups needs samples_per_prompt >= 2"):
        load_config(SMOKE, drop_uniform_groups=True)
    with pytest.raises(ValueError, match="one process only"):
        load_config(SMOKE, batch_size=8, num_minibatches=2, samples_per_prompt=2,
                    drop_uniform_groups=True).validate_processes(2)
    config = load_config(SMOKE, output_dir=str(tmp_path), threads=2, batch_size=8, num_minibatches=2,
                         samples_per_prompt=2, group_baseline=True, drop_uniform_groups=True)
    trainer = PPOTrainer(config, quiet=True)
    batch = trainer.prepare_batch()
    expected = pm.mixed_groups(batch.raw_scores, 2)
    assert torch.equal(batch.trained_rows, expected)
    if expected.any():  # the advantages are whitened over the trained rows' tokens only
        over = batch.rollout.response_mask * expected[:, None].float()
        assert torch.allclose(batch.advantages, pm.masked_whiten(batch.raw_advantages, over), atol=1e-6)
    before = [p.detach().clone() for p in trainer.params]
    none = batch.select(torch.arange(len(batch)))
    none.trained_rows = torch.zeros(len(batch), dtype=torch.bool)
    steps = ppo.optimise(trainer.policy, trainer.optimizer, none, trainer.config)
    assert steps["optimizer_steps"] == 0 and all(torch.equal(a, b) for a, b in zip(before, trainer.params))
    seen = []
    original = ppo.minibatch_loss
    ppo.minibatch_loss = lambda model, mb, cfg: (seen.append(len(mb)), original(model, mb, cfg))[1]
    try:
        some = batch.select(torch.arange(len(batch)))
        some.trained_rows = torch.tensor([True, True] + [False] * (len(batch) - 2))
        steps = ppo.optimise(trainer.policy, trainer.optimizer, some, trainer.config)
    finally:
        ppo.minibatch_loss = original
    assert steps["optimizer_steps"] >= 1 and set(seen) == {1}  # 2 trained rows over 2 minibatches
    assert "rows_trained" in trainer.ppo_update()
