"""Family-balanced prompt sampling (``course_utils.family_sampling``): the weight formula against
hand-computed numbers, the stream's draws against its weights, resumability, and the trainer
wiring on the tiny model."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from course_utils import tasks
from course_utils.config import load_config
from course_utils.family_sampling import SuccessVarianceStream, family_weights, success_rate_estimates

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"


def train_records():
    return tasks.load_split("train")


def test_the_weights_are_p_times_one_minus_p_plus_the_floor_normalised():
    rates = {"a": 0.5, "b": 0.9, "c": 0.0}
    raw = {"a": 0.25 + 0.02, "b": 0.09 + 0.02, "c": 0.0 + 0.02}  # written out by hand
    weights = family_weights(rates, floor=0.02)
    assert weights == pytest.approx({f: w / sum(raw.values()) for f, w in raw.items()})
    assert max(weights, key=weights.get) == "a"


def test_the_success_rate_estimate_is_laplaces():
    rates = success_rate_estimates({"seen": 3.0, "new": 0.0}, {"seen": 4.0, "new": 0.0})
    assert rates == {"seen": (3 + 1) / (4 + 2), "new": 0.5}


def test_observations_decay_then_add():
    stream = SuccessVarianceStream(train_records(), batch_size=8, seed=0, decay=0.5)
    stream.observe(["count_words", "count_words"], [True, False])
    stream.observe(["count_words"], [True])
    assert stream.successes["count_words"] == pytest.approx(1 * 0.5 + 1)
    assert stream.trials["count_words"] == pytest.approx(2 * 0.5 + 1)
    assert stream.trials["json_object"] == 0.0


def test_before_any_observation_every_family_is_equally_likely_and_no_prompt_repeats_within_a_pass():
    records = train_records()
    stream = SuccessVarianceStream(records, batch_size=16, seed=3)
    drawn = [r for _ in range(25) for r in stream.next_batch()]  # 400 draws, 40 per family expected
    per_family = Counter(r.family for r in drawn)
    assert set(per_family) == {r.family for r in records}
    # Multinomial with p = 1/10: the standard deviation of each count is sqrt(400 * 0.1 * 0.9) = 6.
    assert all(abs(n - 40) < 4 * 6 for n in per_family.values()), per_family
    for family, n in per_family.items():
        ids = [r.id for r in drawn if r.family == family]
        assert len(set(ids[:40])) == min(n, 40)  # a family's first 40 prompts are 40 different ones


def test_solved_and_unreachable_families_fade_towards_the_floor():
    records = train_records()
    stream = SuccessVarianceStream(records, batch_size=16, seed=0, decay=1.0, floor=0.02)
    families = stream.families
    solved, unreachable, learnable = families[0], families[1], families[2]
    for _ in range(30):
        stream.observe([solved] * 4 + [unreachable] * 4 + [learnable] * 4,
                       [True] * 4 + [False] * 4 + [True, False] * 2)
    weights = stream.weights()
    assert weights[learnable] > 5 * weights[solved] and weights[learnable] > 5 * weights[unreachable]
    # The draws follow the weights: the learnable family's share of 2000 draws is near its weight.
    drawn = Counter(r.family for _ in range(125) for r in stream.next_batch())
    share, expected = drawn[learnable] / 2000, weights[learnable]
    assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / 2000)
    assert drawn[solved] > 0  # faded, not dropped


def test_a_restored_stream_hands_out_the_same_batches():
    records = train_records()
    first = SuccessVarianceStream(records, batch_size=8, seed=1)
    for _ in range(3):
        batch = first.next_batch()
        first.observe([r.family for r in batch], [i % 3 == 0 for i in range(len(batch))])
    copy = SuccessVarianceStream(records, batch_size=8, seed=1)
    copy.load_state_dict(first.state_dict())
    assert [r.id for r in copy.next_batch()] == [r.id for r in first.next_batch()]


def test_processes_take_disjoint_shares_of_the_same_global_batch():
    records = train_records()
    whole = SuccessVarianceStream(records, batch_size=8, seed=2).next_batch()
    shares = [SuccessVarianceStream(records, batch_size=8, seed=2, rank=k, world_size=2).next_batch() for k in (0, 1)]
    assert [r.id for r in shares[0]] == [r.id for r in whole[0::2]]
    assert [r.id for r in shares[1]] == [r.id for r in whole[1::2]]


@pytest.mark.parametrize("overrides, message", [
    ({"prompt_sampling": "balanced"}, "prompt_sampling must be one of"),
    ({"prompt_sampling": "success_variance", "reward": "learned", "reward_model_path": "x"},
     "must not see"),
    ({"family_weight_floor": 0}, "family_weight_floor must be > 0"),
    ({"family_rate_decay": 0}, "family_rate_decay must be in"),
])
def test_bad_sampling_settings_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(SMOKE, **overrides)


def test_the_trainer_draws_by_the_weights_logs_them_and_resumes_them(tmp_path):
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(tmp_path), prompt_sampling="success_variance", total_updates=2)
    trainer = PPOTrainer(config, quiet=True)
    trainer.train()
    logged = [m["family_weights"] for m in trainer.history]
    assert all(sum(w.values()) == pytest.approx(1, abs=1e-3) for w in logged)
    assert logged[0] == pytest.approx({f: 0.1 for f in logged[0]})  # nothing observed before the first batch
    decay = config.family_rate_decay
    assert sum(trainer.prompts.trials.values()) == pytest.approx(config.batch_size * (1 + decay))
    resumed = PPOTrainer(load_config(SMOKE, output_dir=str(tmp_path), prompt_sampling="success_variance",
                                     total_updates=2), quiet=True)
    assert resumed.load_checkpoint()
    assert resumed.prompts.state_dict() == trainer.prompts.state_dict()
