"""Reliability fixes of the loop (issue 16), each on the tiny model or on hand-made numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from course_utils import ppo_math as pm
from course_utils import update as ppo
from course_utils.config import load_config
from course_utils.machinery import stop_rules

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
EOS = 2  # <|im_end|> of the SmolLM2 tokenizer


def smoke(tmp_path, **overrides):
    return load_config(SMOKE, output_dir=str(tmp_path), threads=2, **overrides)


def trainer_for(config, **kwargs):
    from course_utils.trainer import PPOTrainer

    return PPOTrainer(config, quiet=True, **kwargs)


def test_a_negative_rollout_age_is_refused_up_front():
    with pytest.raises(ValueError, match="max_rollout_age must be >= 0"):
        load_config(SMOKE, max_rollout_age=-1)


def test_the_missing_eos_penalty_follows_trl():
    # TRL 1.12.0: scores[~contain_eos_token] -= missing_eos_penalty
    scores = torch.tensor([1.0, 0.5, 0.0])
    ended = torch.tensor([True, False, False])
    assert torch.equal(pm.penalise_missing_eos(scores, ended, 1.0), torch.tensor([1.0, -0.5, -1.0]))
    assert torch.equal(pm.penalise_missing_eos(scores, ended, 0.0), scores)


def test_the_missing_eos_penalty_reaches_the_shaped_reward(tmp_path):
    trainer = trainer_for(smoke(tmp_path, missing_eos_penalty=2.0, max_new_tokens=4))
    batch = trainer.prepare_batch()
    r = batch.rollout
    assert r.truncated.any()  # a random tiny model rarely stops within 4 tokens
    placed = pm.score_on_last_token(pm.penalise_missing_eos(batch.raw_scores, r.ended_with_eos, 2.0),
                                    r.response_mask)
    assert torch.allclose(batch.rewards, batch.non_score_rewards + placed)


def test_eos_only_answers_trip_the_length_rule(tmp_path):
    trainer = trainer_for(smoke(tmp_path))

    def always_eos(module, inputs, output):  # the policy can only stop: every answer is EOS alone
        output = output.clone()
        output[..., EOS] += 1e4
        return output

    trainer.policy.base_model.lm_head.register_forward_hook(always_eos)
    metrics = trainer.ppo_update()
    assert metrics["response_length"] == 1.0 and metrics["answer_length"] == 0.0
    signal, _ = stop_rules.check_update(metrics, trainer.config, stop_rules.Streaks())
    assert signal is not None and signal.rule == "length_collapse"


def test_a_nan_kl_trips_the_nonfinite_rule_and_leaves_beta_alone(tmp_path):
    trainer = trainer_for(smoke(tmp_path, adaptive_kl=True, total_updates=3, stop_nonfinite_patience=1))

    real_reference = trainer.bundle.reference_model

    def broken_reference():
        context = real_reference()

        class Broken:
            def __enter__(self):
                model = context.__enter__()
                self.hook = model.base_model.lm_head.register_forward_hook(
                    lambda m, i, out: torch.full_like(out, float("nan")))
                return model

            def __exit__(self, *exc):
                self.hook.remove()
                return context.__exit__(*exc)

        return Broken()

    trainer.bundle.reference_model = broken_reference
    beta = trainer.kl_controller.value
    summary = trainer.train()
    assert summary["stop"].startswith("[nonfinite]"), summary["stop"]
    assert trainer.history[0]["nonfinite_kl"] > 0
    assert trainer.kl_controller.value == beta  # never adapted on a NaN KL


def test_the_logged_learning_rate_is_the_one_the_update_used(tmp_path):
    trainer = trainer_for(smoke(tmp_path, lr_schedule="linear", total_updates=4, learning_rate=1e-3))
    logged = [trainer.ppo_update()["learning_rate"] for _ in range(2)]
    assert logged == pytest.approx([1e-3, 1e-3 * 0.75])


def test_the_linear_schedule_ends_with_the_time_budget(tmp_path):
    trainer = trainer_for(smoke(tmp_path, lr_schedule="linear", total_updates=1000, max_train_minutes=1.0))
    trainer.history = [{"time_update_s": 30.0}]  # half the budget spent after one update
    assert trainer._lr_factor(1) == pytest.approx(0.5)
    trainer.history = [{"time_update_s": 90.0}]
    assert trainer._lr_factor(1) == 0.0


def test_dropout_is_off_so_the_first_ratio_is_one(tmp_path, tiny_model_dir):
    folder = tmp_path / "tiny-with-dropout"
    shutil.copytree(tiny_model_dir, folder)
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text())
    config["attention_dropout"] = 0.5
    config_file.write_text(json.dumps(config))
    trainer = trainer_for(smoke(tmp_path, model=str(folder), num_minibatches=1, ppo_epochs=1))
    assert all(m.attention_dropout == 0.0 for m in trainer.policy.modules() if hasattr(m, "attention_dropout"))
    batch = trainer.prepare_batch()
    loss, parts = ppo.minibatch_loss(trainer.policy, batch, trainer.config)  # the policy is in train mode
    ratio = pm.ratio_stats(parts["logprobs"], batch.rollout.old_logprobs, batch.rollout.response_mask)
    assert float(ratio["max"]) == pytest.approx(1.0, abs=1e-5) and float(ratio["mean"]) == pytest.approx(1.0, abs=1e-6)


def test_lora_is_merged_for_sampling_only_in_float32_and_not_on_the_packed_path(tiny_model_dir, monkeypatch):
    from course_utils.models import PolicyWithValue, load_bundle
    from course_utils.rollout import SamplingSettings, generate

    merged = []
    real = PolicyWithValue.merged_adapter
    monkeypatch.setattr(PolicyWithValue, "merged_adapter", lambda self, *a, **k: merged.append(self.dtype) or real(self, *a, **k))
    for dtype in (torch.float32, torch.bfloat16):
        bundle = load_bundle(tiny_model_dir, device="cpu", dtype=dtype)
        for packed in (True, False):  # packed: the base weights stay packed, the adapter beside them
            generate(bundle, prompts=["Say hi."], settings=SamplingSettings(max_new_tokens=2), packed=packed)
    assert merged == [torch.float32]


def test_every_process_must_take_the_same_number_of_steps():
    config = load_config(SMOKE, batch_size=16, num_minibatches=2)
    assert config.validate_processes(2) is config  # 16 = 2 processes x 2 minibatches x 4
    with pytest.raises(ValueError, match=r"divisible by processes x num_minibatches \(3 x 2\)"):
        config.validate_processes(3)  # would give the ranks 2, 3 and 3 steps per epoch


def test_the_time_budget_is_decided_by_the_slowest_process(tmp_path, monkeypatch):
    import course_utils.trainer as trainer_module

    trainer = trainer_for(smoke(tmp_path, max_train_minutes=1.0))
    trainer.history = [{"time_update_s": 50.0}]  # this process: 50 s of the 60 s budget
    assert not trainer.budget_spent()
    monkeypatch.setattr(trainer_module, "global_max", lambda seconds: max(seconds, 61.0))  # another rank: 61 s
    assert trainer.budget_spent()


def test_a_checkpoint_keeps_one_rng_state_per_process(tmp_path):
    trainer = trainer_for(smoke(tmp_path))
    state = trainer.state_dict()
    assert len(state["rng_per_rank"]) == 1 and "rng" not in state
    state["rng_per_rank"] = state["rng_per_rank"] * 2  # as if written by two processes
    with pytest.raises(ValueError, match="same number of processes"):
        trainer.load_state_dict(state)


def test_the_best_held_out_adapter_is_kept_beside_the_last_good_checkpoint(tmp_path):
    trainer = trainer_for(smoke(tmp_path, total_updates=2, eval_every=1))
    summary = trainer.train()
    best = summary["best"]
    assert best["pass_rate"] == max(e["pass_rate"] for e in trainer.evals)
    assert best["update"] == next(e["update"] for e in trainer.evals if e["pass_rate"] == best["pass_rate"])
    assert (trainer.run_dir / "best_policy" / "value_head.pt").is_file()
    report = (trainer.run_dir / "report.md").read_text()
    assert "best held-out adapter" in report and "last-known-good" in report


def test_the_sampler_kl_health_metric_is_near_zero_when_the_sampler_is_pi_old(tmp_path):
    trainer = trainer_for(smoke(tmp_path, log_sampler_kl=True))
    metrics = trainer.ppo_update()
    assert abs(metrics["sampler_kl"]) < 1e-4  # float32, unmerged forward vs merged sampler
    assert "sampler_kl" not in trainer_for(smoke(tmp_path / "off")).ppo_update()
