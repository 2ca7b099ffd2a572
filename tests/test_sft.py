"""The SFT warm-up on the tiny model: demonstrations from the train split only, the loss on the
response mask only, a merged model that PPO loads as its start and, with the adapter off, as its
reference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils import sft, tasks
from course_utils.config import load_config
from course_utils.machinery import hub

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


def test_demonstrations_come_from_the_train_split_only():
    demos = sft.demonstrations(50, seed=0)
    assert {r.split for r in demos} == {"train"}
    assert sft.demonstrations(50, seed=0) == demos and sft.demonstrations(50, seed=1) != demos
    with pytest.raises(ValueError, match="train split has"):
        sft.demonstrations(10_000, seed=0)


def test_demonstrations_of_chosen_families_only_and_unknown_families_refused():
    kept = ["json_object", "uppercase_word"]
    demos = sft.demonstrations(80, seed=0, families=kept)
    assert {r.family for r in demos} == set(kept) and len(demos) == 80  # 40 train prompts per family
    with pytest.raises(ValueError, match="80 prompts of json_object, uppercase_word"):
        sft.demonstrations(81, seed=0, families=kept)
    with pytest.raises(ValueError, match=r"unknown families \['lower_word'\]; choose from result_sum"):
        sft.SFTConfig(demo_families=["lower_word"]).validate()


def test_the_loss_reads_the_answer_and_its_eos_never_the_prompt(tiny_model_dir):
    from course_utils.models import load_bundle

    bundle = load_bundle(tiny_model_dir, device="cpu", seed=0)
    records = tasks.load_split("train")[:3]
    eos = bundle.tokenizer.eos_token_id
    batch = sft.demo_batch(bundle.tokenizer, records, eos, torch.device("cpu"))
    mask = batch["response_mask"]
    for row, record in enumerate(records):  # answer tokens + the EOS, nothing after it
        answer = bundle.tokenizer(record.target, add_special_tokens=False)["input_ids"]
        assert int(mask[row].sum()) == len(answer) + 1
        assert int(batch["response_ids"][row, len(answer)]) == eos
    # By hand: the mean negative log-prob of the masked answer tokens, from a plain forward.
    from course_utils.rollout import sequence_forward

    logprobs, _, _ = sequence_forward(bundle.policy, batch["query_ids"], batch["query_mask"],
                                      batch["response_ids"], mask)
    expected = -(logprobs * mask).sum() / mask.sum()
    assert torch.allclose(sft.sft_loss(bundle.policy, batch), expected)


def test_a_warm_up_saves_a_model_that_ppo_starts_from_and_anchors_to(tmp_path):
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=2, batch_size=8, learning_rate=5e-3, eval_prompts=10,
                           max_new_tokens=4, output_dir=str(tmp_path), run_name="sft", threads=2, lora_rank=4,
                           lora_alpha=8)
    metrics = sft.train_sft(config, progress=False)
    assert metrics["steps"] == 2 and metrics["loss"][1] < metrics["loss"][0]  # the same batch twice
    folder = tmp_path / "sft" / "model"
    assert (folder / "config.json").is_file() and (tmp_path / "sft" / "report.md").is_file()

    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(load_config(SMOKE, model=str(folder), output_dir=str(tmp_path)), quiet=True)
    batch = trainer.prepare_batch()
    r = batch.rollout
    # A fresh PPO adapter starts at zero: policy = SFT model = reference, so the first KL is 0.
    assert torch.allclose(r.old_logprobs, r.ref_logprobs, atol=1e-5)
    # And the reference really is the SFT model, not the original one.
    from course_utils.models import load_bundle
    from course_utils.rollout import sequence_forward

    original = load_bundle(hub.TINY_MODEL, device="cpu", seed=0)
    with torch.no_grad():
        base_logprobs, _, _ = sequence_forward(original.policy, r.query_ids, r.query_mask, r.response_ids,
                                               r.response_mask, trainer.config.temperature)
    assert not torch.allclose(base_logprobs, r.ref_logprobs, atol=1e-3)

    # warm_start keeps a model that is there, and trains one where there is none.
    before = (folder / "config.json").stat().st_mtime_ns
    assert sft.warm_start(config, progress=False) == folder and (folder / "config.json").stat().st_mtime_ns == before
    other = sft.SFTConfig(**{**vars(config), "run_name": "sft-2", "epochs": 1})
    assert sft.warm_start(other, progress=False) == tmp_path / "sft-2" / "model"
    assert (tmp_path / "sft-2" / "model" / "config.json").is_file()


def test_bad_sft_settings_are_refused():
    with pytest.raises(ValueError, match="eval_split must be a held-out split"):
        sft.SFTConfig(eval_split="train").validate()
    with pytest.raises(ValueError, match="demos must be >= 1"):
        sft.SFTConfig(demos=0).validate()


def test_pass_at_k_matches_counting_every_subset():
    from itertools import combinations

    n = 6
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(combinations(outcomes, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert sft.pass_at_k(n, c, k) == pytest.approx(expected)
    with pytest.raises(ValueError):
        sft.pass_at_k(4, 5, 1)


def test_sampled_answers_are_reproducible_and_pass_at_k_is_at_least_pass_at_1(tiny_model_dir):
    from course_utils.models import load_bundle
    from course_utils.rollout import sampled_answers

    bundle = load_bundle(tiny_model_dir, device="cpu", seed=0)
    records = tasks.load_split("test")[:3]
    prompts = [r.prompt for r in records]
    first = sampled_answers(bundle, prompts, samples=4, max_new_tokens=4, chunk=5, seed=1)
    assert [len(group) for group in first] == [4, 4, 4]
    assert sampled_answers(bundle, prompts, samples=4, max_new_tokens=4, chunk=5, seed=1) == first
    assert sampled_answers(bundle, prompts, samples=4, max_new_tokens=4, chunk=5, seed=2) != first
    rates = sft.sampled_pass_rates(bundle, records, samples=4, max_new_tokens=4)
    assert 0 <= rates["pass_at_1"] <= rates["pass_at_k"] <= 1 and rates["k"] == 4
    for family in rates["per_family"].values():
        assert family["pass_at_1"] <= family["pass_at_k"]


def test_a_time_budget_stops_sft_after_the_step_that_spends_it(tmp_path):
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=1000, batch_size=4, max_train_minutes=1e-6,
                           eval_prompts=10, max_new_tokens=2, output_dir=str(tmp_path), run_name="budget",
                           threads=2, lora_rank=4, lora_alpha=8)
    metrics = sft.train_sft(config, progress=False)
    assert metrics["steps"] == 1  # one step always runs; the budget is checked before the next
    with pytest.raises(ValueError, match="max_train_minutes must be >= 0"):
        sft.SFTConfig(max_train_minutes=-1).validate()
