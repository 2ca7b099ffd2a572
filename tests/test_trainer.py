"""The PPO trainer on the tiny model: config checks, an end-to-end run, stop rules on injected
faults, and an interrupted run that resumes to exactly the same numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_utils.config import PPOConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("overrides, message", [
    ({"cliprange": 0}, "cliprange must be > 0"),
    ({"batch_size": 6, "num_minibatches": 4}, "must be divisible by num_minibatches"),
    ({"kl_estimator": "k4"}, "kl_estimator must be one of"),
    ({"temperature": 0}, "temperature must be > 0"),
    ({"reward": "learned"}, "needs reward_model_path"),
    ({"lam": 1.5}, "lam must be in"),
    ({"sampling_dtype": "float16"}, "sampling_dtype must be one of"),
])
def test_bad_config_values_are_rejected_up_front(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(SMOKE, **overrides)


def test_unknown_fields_and_missing_presets_are_named():
    with pytest.raises(ValueError, match="Unknown config field"):
        load_config(SMOKE, clip_range=0.2)
    with pytest.raises(FileNotFoundError, match="Presets: .*cpu"):
        load_config("configs/nope.yaml")


@pytest.mark.parametrize("preset", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("fast", ["0", "1"])
def test_every_preset_loads(preset, fast, monkeypatch):
    monkeypatch.setenv("COURSE_FAST", fast)
    config = load_config(preset)
    assert config.batch_size % config.num_minibatches == 0


def test_fast_mode_shortens_but_does_not_skip_the_cpu_run(monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "1")
    fast = load_config(ROOT / "configs" / "cpu.yaml")
    monkeypatch.setenv("COURSE_FAST", "0")
    full = load_config(ROOT / "configs" / "cpu.yaml")
    assert 1 <= fast.total_updates < full.total_updates


def test_every_config_field_has_a_docstring():
    docs = PPOConfig.field_docs()
    missing = [f for f in PPOConfig.__dataclass_fields__ if not docs.get(f)]
    assert not missing, missing


# ---------------------------------------------------------------- runs


def smoke_config(tmp_path, **overrides) -> PPOConfig:
    return load_config(SMOKE, output_dir=str(tmp_path), **overrides)


def run_cli(tmp_path, *extra: str, check=True, **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "course_utils", "ppo", "--config", str(SMOKE), "--set",
           f"output_dir={tmp_path}", *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=check, timeout=600, **kwargs)


def test_smoke_run_from_the_command_line_writes_a_report(tmp_path):
    result = run_cli(tmp_path)
    run = tmp_path / "smoke"
    assert "held-out pass rate:" in result.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] == 4 and summary["stop"] is None
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in metrics] == [1, 2, 3, 4]
    for key in ("score", "non_score_reward", "kl_per_sequence", "policy_loss", "value_loss", "policy_clipfrac",
                "ratio_mean", "approx_kl", "entropy", "response_length", "eos_rate", "grad_norm",
                "rollout_tokens_per_s", "learning_rate", "policy_lag_max"):
        assert key in metrics[-1], key
    # Two optimizer steps per epoch (2 minibatches) x 2 epochs, all applied.
    assert metrics[0]["optimizer_steps"] == 4 and metrics[0]["policy_lag_max"] == 3
    # The first minibatch of the first epoch sees ratio 1 exactly; gradient clipping applied.
    assert all(m["grad_norm"] >= 0 for m in metrics)
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    assert [e["update"] for e in evals] == [0, 2, 4]
    for name in ("report.md", "curves.png", "config.json", "manifest.json", "versions.json", "samples.json"):
        assert (run / name).is_file(), name
    assert (run / "policy" / "value_head.pt").is_file()
    assert "held-out pass rate" in (run / "report.md").read_text()


def test_nan_reward_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(smoke_config(tmp_path, inject_nan_reward_at=2, total_updates=6), quiet=True)
    summary = trainer.train()
    assert summary["stop"].startswith("[nonfinite]")
    assert summary["updates"] == 2 + trainer.config.stop_nonfinite_patience
    state = torch.load(tmp_path / "smoke" / "checkpoint" / "state.pt", weights_only=False)
    assert state["update"] == 2  # the last update whose numbers were all finite
    assert all(torch.isfinite(v).all() for v in state["trainable"].values())


def test_huge_learning_rate_trips_a_named_stop_rule(tmp_path):
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(smoke_config(tmp_path, learning_rate=50.0, total_updates=8, max_grad_norm=0.0), quiet=True)
    summary = trainer.train()
    assert summary["stop"] is not None
    rule = summary["stop"].split("]")[0].strip("[")
    assert rule in {"nonfinite", "value_divergence", "kl_too_high", "entropy_out_of_range", "length_collapse",
                    "clipfrac_too_high"}
    checkpoint = tmp_path / "smoke" / "checkpoint" / "state.pt"
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        assert state["update"] < summary["updates"]


def test_stale_rollouts_are_skipped_beyond_the_maximum_age(tmp_path):
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(smoke_config(tmp_path, max_rollout_age=1, total_updates=1), quiet=True)
    metrics = trainer.ppo_update()
    assert metrics["optimizer_steps"] == 2 and metrics["stale_steps_skipped"] == 2


VOLATILE = ("time_", "_per_s")


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not any(t in k for t in VOLATILE)} for row in rows]


def test_killed_run_resumes_to_the_same_numbers(tmp_path):
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    run_cli(full_dir, "total_updates=6")
    # Start the same run, kill it for real (SIGKILL) once three updates are logged, then resume.
    cmd = [sys.executable, "-m", "course_utils", "ppo", "--config", str(SMOKE), "--set",
           f"output_dir={killed_dir}", "total_updates=6"]
    process = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics_file = killed_dir / "smoke" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 3:
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    run_cli(killed_dir, "total_updates=6", "--resume")
    read = lambda d: [json.loads(x) for x in (d / "smoke" / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert comparable(read(killed_dir)) == comparable(read(full_dir))
    read_evals = lambda d: [json.loads(x) for x in (d / "smoke" / "evals.jsonl").read_text().splitlines()]  # noqa: E731
    assert read_evals(killed_dir) == read_evals(full_dir)


def test_sampler_logprobs_in_half_precision_are_refused_before_the_model_loads(tmp_path, monkeypatch):
    """On a bfloat16 device (a CUDA GPU) old_logprobs_from='generation' would fail at the first
    rollout; the trainer refuses it up front, naming the fix, without loading anything."""
    from course_utils import models, trainer as trainer_module
    from course_utils.trainer import PPOTrainer

    monkeypatch.setattr(trainer_module, "default_dtype", lambda device: torch.bfloat16)
    monkeypatch.setattr(models, "load_bundle", lambda **kw: pytest.fail("the model was loaded"))
    config = smoke_config(tmp_path, old_logprobs_from="generation")
    with pytest.raises(ValueError, match="old_logprobs_from=forward"):
        PPOTrainer(config, quiet=True)
    # The forward path is not refused: it goes on to load the model.
    monkeypatch.setattr(models, "load_bundle", lambda **kw: (_ for _ in ()).throw(RuntimeError("loading")))
    with pytest.raises(RuntimeError, match="loading"):
        PPOTrainer(smoke_config(tmp_path, old_logprobs_from="forward"), quiet=True)
