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


def test_held_out_records_are_the_evaluated_prompts_round_robin_over_families():
    config = sft.SFTConfig(eval_prompts=2 * len(tasks.TASK_FAMILIES))
    records = sft.held_out_records(config)
    assert len(records) == config.eval_prompts and {r.split for r in records} == {config.eval_split}
    assert {r.family for r in records[:len(tasks.TASK_FAMILIES)]} == set(tasks.TASK_FAMILIES)
    unseen = sft.held_out_records(config, tasks.UNSEEN_SPLIT)
    assert [r.target for r in unseen] == [r.target for r in records]  # the same prompts, asked anew


def test_a_warm_up_saves_a_model_that_ppo_starts_from_and_anchors_to(tmp_path):
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=2, batch_size=8, learning_rate=5e-3, eval_prompts=10,
                           max_new_tokens=4, output_dir=str(tmp_path), run_name="sft", threads=2, lora_rank=4,
                           lora_alpha=8)
    metrics = sft.train_sft(config, progress=False)
    assert metrics["steps"] == 2 and metrics["loss"][1] < metrics["loss"][0]  # the same batch twice
    # The stored answers line up with held_out_records (week 6a reads them back prompt by prompt).
    for split, evaluated in metrics["after"].items():
        records = sft.held_out_records(config, split)
        assert len(records) == len(evaluated["answers"]) == 10
        verdicts = [tasks.check(r, a).passed for r, a in zip(records, evaluated["answers"])]
        assert sum(verdicts) / len(verdicts) == pytest.approx(evaluated["pass_rate"])
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


def test_the_noisy_teacher_and_its_filter_shape_the_sft_data():
    clean = sft.teacher_demonstrations(sft.SFTConfig(demos=400, seed=0))
    noisy = sft.teacher_demonstrations(sft.SFTConfig(demos=400, seed=0, demo_noise=0.75))
    filtered = sft.teacher_demonstrations(sft.SFTConfig(demos=400, seed=0, demo_noise=0.75, demo_filter=True))
    assert [r.id for r in noisy] == [r.id for r in clean]  # the same prompts, a quarter still gold
    assert sum("noise" in r.meta for r in noisy) == 300
    assert len(filtered) == 100 and all(r.target == g.target for r in filtered for g in clean if g.id == r.id)
    # The prompts whose demonstration the filter dropped are the ones self-sampling works on.
    assert {r.id for r in sft.prompts_without_demonstration(filtered)} == {r.id for r in noisy if "noise" in r.meta}
    with pytest.raises(ValueError, match="no demonstration is left after the filter"):
        sft.teacher_demonstrations(sft.SFTConfig(demos=40, demo_noise=1.0, demo_filter=True))
    for bad, match in (({"demo_noise": 1.5}, r"in \[0, 1\]"), ({"demo_noise_style": "random"}, "habit or mixed"),
                       ({"self_samples": -1}, "self_samples must be >= 0"), ({"resample_every": 0}, "resample_every")):
        with pytest.raises(ValueError, match=match):
            sft.SFTConfig(**bad).validate()


def test_records_added_during_a_pass_join_at_the_next_pass():
    data = list(range(6))
    seen = []
    for epoch, batch in sft.training_batches(data, batch_size=4, seed=0, epochs=2):
        seen.append((epoch, batch))
        if len(seen) == 1:
            data.append(99)  # self-sampling found an answer during the first pass
    first = [x for e, b in seen if e == 0 for x in b]
    second = [x for e, b in seen if e == 1 for x in b]
    assert first == list(range(6)) and sorted(second) == [0, 1, 2, 3, 4, 5, 99]


def test_rejection_sampling_keeps_new_passing_answers_only(monkeypatch):
    records = [r for r in tasks.load_split("train") if r.family == "uppercase_word"][:2]
    gold = [r.target for r in records]
    fake = [[gold[0], gold[0], gold[0].lower(), "no idea"], [gold[1] + "!", "x", "y", "z"]]
    monkeypatch.setattr(sft, "sampled_answers", lambda bundle, prompts, samples, *a, **k: fake)
    kept: dict = {}
    new = sft.passing_self_samples(None, records, 4, 8, seed=0, kept=kept)
    assert [(r.id, r.target) for r in new] == [(records[0].id, gold[0])]  # once, though sampled twice
    assert new[0].meta["self_sample"] and kept == {records[0].id: {gold[0]}}
    assert sft.passing_self_samples(None, records, 4, 8, seed=1, kept=kept) == []  # already kept


def test_filtered_sft_samples_its_own_answers_every_few_steps(tmp_path, monkeypatch):
    calls = []

    def fake_round(bundle, records, samples, max_new_tokens, seed, kept, **checks):
        calls.append((len(records), samples, seed))
        return [records[0]] if len(calls) == 1 else []  # one accepted answer, in the first round only

    monkeypatch.setattr(sft, "passing_self_samples", fake_round)
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=3, batch_size=4, eval_prompts=10, max_new_tokens=2,
                           output_dir=str(tmp_path), run_name="filtered", threads=2, lora_rank=4, lora_alpha=8,
                           self_samples=2, resample_every=2)
    metrics = sft.train_sft(config, progress=False)
    assert [c[0] for c in calls] == [392] * 4 and {c[1] for c in calls} == {2}  # 400 train prompts - 8 demos
    assert len({c[2] for c in calls}) == 4  # each round its own sampling seed
    rounds = metrics["self_sample_rounds"]
    assert [r["step"] for r in rounds] == [2, 4, 6, 8] and [r["pool"] for r in rounds] == [9] * 4
    assert metrics["steps"] == 2 + 3 + 3  # 8 demos, then 9 records (the accepted one joined at pass two)


def test_sft_continues_from_a_saved_model_on_the_demonstrations_of_chosen_families(tmp_path):
    """Design (h)'s SFT arm: ``sft --model DIR`` starts from the warm-up's folder, not the original model."""
    common = dict(batch_size=8, learning_rate=5e-3, eval_prompts=10, max_new_tokens=4, output_dir=str(tmp_path),
                  threads=2, lora_rank=4, lora_alpha=8)
    # A large step size, so the warm-up moves the tiny model's loss well beyond round-off.
    warm = sft.train_sft(sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=2, run_name="warm",
                                       **{**common, "learning_rate": 5e-2}), progress=False)
    more = sft.train_sft(sft.SFTConfig(model=str(tmp_path / "warm" / "model"), demos=8, epochs=1, run_name="more",
                                       demo_families=["json_object"], eval_every=1, **{**common, "batch_size": 4}),
                         progress=False)
    # It starts where the warm-up ended: its first loss is the warm-up model's on that batch, not the tiny model's
    # (the tiny model's greedy answers are blank lines before and after, so they cannot tell the two apart).
    from course_utils.models import LoRASettings, load_bundle
    from course_utils.rollout import stop_token_ids

    first_batch = sft.teacher_demonstrations(sft.SFTConfig(**more["config"]))[:4]

    def loss_of(model) -> float:
        bundle = load_bundle(model, lora=LoRASettings(rank=4, alpha=8), device="cpu", seed=0)
        eos = stop_token_ids(bundle.tokenizer, bundle.policy.base_model)[0]
        with torch.no_grad():
            return sft.sft_loss(bundle.policy, sft.demo_batch(bundle.tokenizer, first_batch, eos, torch.device("cpu"))).item()

    assert more["loss"][0] == pytest.approx(loss_of(str(tmp_path / "warm" / "model")), abs=1e-4)
    assert abs(more["loss"][0] - loss_of(hub.TINY_MODEL)) > 1e-3
    for split in ("test", tasks.UNSEEN_SPLIT):
        assert more["before"][split]["answers"] == warm["after"][split]["answers"]
    assert more["config"]["demo_families"] == ["json_object"] and more["demos"] == 8
    # eval_every: a per-family point after each step; the last is the model that "after" evaluates.
    assert [p["step"] for p in more["curve"]] == [1, 2] and "curve" not in warm
    assert more["curve"][-1]["per_family"] == more["after"]["test"]["per_family"]
    assert 0 < more["curve"][0]["train_seconds"] <= more["curve"][1]["train_seconds"] <= more["train_seconds"]


def test_filtered_sft_saves_its_pool_and_a_later_run_continues_it(tmp_path, monkeypatch):
    """Lesson 11's design 1, arm A: ``init_pool`` continues a filtered-SFT run's data (its demos and
    accepted self-samples from the first step, its kept answers not accepted twice, the same prompts
    sampled), instead of rebuilding it from the demonstrations."""
    calls = []

    def fake_round(bundle, records, samples, max_new_tokens, seed, kept, **checks):
        calls.append(({r.id for r in records}, {k: set(v) for k, v in kept.items()}))
        pick = records[0]
        if pick.target in kept.get(pick.id, ()):
            return []
        kept.setdefault(pick.id, set()).add(pick.target)
        return [tasks.Prompt(pick.id, pick.family, pick.split, pick.prompt, pick.target,
                             {**pick.meta, "self_sample": True})]

    monkeypatch.setattr(sft, "passing_self_samples", fake_round)
    common = dict(model=hub.TINY_MODEL, demos=8, epochs=2, batch_size=4, eval_prompts=10, max_new_tokens=2,
                  output_dir=str(tmp_path), threads=2, lora_rank=4, lora_alpha=8, demo_noise=0.5, demo_filter=True,
                  self_samples=2, resample_every=2)
    first = sft.train_sft(sft.SFTConfig(run_name="start", **common), progress=False)
    pool_file = tmp_path / "start" / sft.POOL_FILE
    demos, accepted = sft.read_pool(pool_file)
    assert len(demos) == first["demos"] < 8 and len(accepted) == 1 and first["pool"] == len(demos) + 1
    assert accepted[0].meta["self_sample"] and all(not r.meta.get("self_sample") for r in demos)
    start_prompts = calls[0][0]
    calls.clear()
    more = sft.train_sft(sft.SFTConfig(run_name="more", init_pool=str(pool_file),
                                       **{**common, "model": str(tmp_path / "start" / "model")}), progress=False)
    assert more["init_pool"] == {"demos": len(demos), "self_samples": 1} and more["demos"] == len(demos)
    assert calls[0][0] == start_prompts  # the same prompts sampled as the start's
    assert calls[0][1] == {accepted[0].id: {accepted[0].target}}  # its kept answer counts as kept
    assert more["pool"] == len(demos) + 1  # so it is not accepted twice
    assert more["steps"] == 2 * -(-(len(demos) + 1) // 4)  # the accepted sample is data from the first pass


def test_a_pool_that_is_not_one_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "pool.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(ValueError, match="line 1: not a pool record"):
        sft.read_pool(bad)
    with pytest.raises(ValueError, match="init_pool .* is not a file"):
        sft.SFTConfig(init_pool=str(tmp_path / "missing.jsonl")).validate()


def test_checkpoints_at_training_minutes_and_a_saved_adapter_rebuild_the_model(tmp_path, monkeypatch):
    """Design 1's curves: greedy pass rates on test and unseen phrasings at minute marks of the budget
    (marks are read off the training clock, here faked: each step 'spends' a minute); and ``adapter/``
    with the base model rebuilds ``model/`` (what a later session needs when the merged folder is gone)."""
    clock = iter(range(0, 10_000, 30))  # each perf_counter call advances 30 s
    monkeypatch.setattr(sft.time, "perf_counter", lambda: float(next(clock)))
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=3, batch_size=4, eval_prompts=10, max_new_tokens=2,
                           output_dir=str(tmp_path), run_name="marks", threads=2, lora_rank=4, lora_alpha=8,
                           learning_rate=5e-2, eval_at_minutes=[2, 1], save_adapter=True)
    metrics = sft.train_sft(config, progress=False)
    marks = metrics["checkpoints"]
    assert [m["minutes"] for m in marks] == [1, 2] and 1 <= marks[0]["step"] <= marks[1]["step"]
    assert all(m["train_seconds"] >= 60 * m["minutes"] for m in marks)
    assert set(marks[0]) >= {"test", tasks.UNSEEN_SPLIT} and "per_family" in marks[0]["test"]
    rebuilt = sft.merged_from_adapter(hub.TINY_MODEL, tmp_path / "marks" / sft.ADAPTER_DIR, tmp_path / "rebuilt")
    from safetensors.torch import load_file
    saved, again = load_file(tmp_path / "marks" / "model" / "model.safetensors"), load_file(rebuilt / "model.safetensors")
    assert saved.keys() == again.keys() and all(torch.equal(saved[k], again[k]) for k in saved)
    assert any(not torch.equal(saved[k], load_file(next(hub.resolve_model(hub.TINY_MODEL).glob("*.safetensors")))[k])
               for k in saved if "proj" in k)  # the adapter did move the weights


def test_the_command_line_reads_minute_marks_as_numbers(monkeypatch):
    seen = {}
    monkeypatch.setattr(sft, "train_sft", lambda config, **how: seen.setdefault("config", config) and {})
    with pytest.raises(Exception):  # the fake returns no metrics; only the parsed config matters here
        sft.main(["--eval-at-minutes", "5", "15", "--run-name", "x", "--output-dir", "/nonexistent-dir-for-test"])
    assert seen["config"].eval_at_minutes == [5.0, 15.0]
