"""The training-time budget (max_train_minutes) and what a finished run writes about its tasks."""

import json
from pathlib import Path

import torch

from course_utils.config import load_config
from course_utils.trainer import PPOTrainer

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


def test_budget_stops_after_the_update_that_spends_it_with_a_final_evaluation(tmp_path):
    torch.set_num_threads(1)
    # 1e-6 minutes: spent by the first update, whatever the machine's speed.
    config = load_config(SMOKE, output_dir=str(tmp_path), total_updates=50, eval_every=10, max_train_minutes=1e-6)
    summary = PPOTrainer(config, quiet=True).train()
    assert summary["updates"] == 1 and summary["stop"] is None
    assert summary["finished"].startswith("training-time budget of 1e-06 min spent after 1 updates")
    run = config.run_dir
    evals = [json.loads(line) for line in open(run / "evals.jsonl")]
    assert [e["update"] for e in evals] == [0, 1]  # the last update is evaluated although 1 % 10 != 0
    assert all(len(e["answers"]) == config.eval_prompts for e in evals)
    history = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert abs(summary["training_minutes"] - history[0]["time_update_s"] / 60) < 1e-9
    saved = json.loads((run / "summary.json").read_text())
    assert saved["finished"] == summary["finished"]
    assert sum(o["n"] for o in saved["task_outcomes"].values()) == config.eval_prompts
    report = (run / "report.md").read_text()
    assert "training-time budget" in report and "| verdict |" in report


def test_no_budget_runs_every_update(tmp_path):
    torch.set_num_threads(1)
    config = load_config(SMOKE, output_dir=str(tmp_path), total_updates=2, eval_every=2)
    summary = PPOTrainer(config, quiet=True).train()
    assert summary["updates"] == 2 and summary["finished"] is None and summary["stop"] is None


def test_minute_marks_evaluate_test_and_unseen_phrasings_then_the_end(tmp_path):
    """Lesson 11's design 1 reads each arm at training-minute marks: a mark the clock has passed is
    evaluated at the next update boundary, one never reached is not, and the end always is."""
    torch.set_num_threads(1)
    config = load_config(SMOKE, output_dir=str(tmp_path), total_updates=2, eval_every=10,
                         eval_at_minutes=[1e9, 1e-7])
    summary = PPOTrainer(config, quiet=True).train()
    marks = [json.loads(line) for line in open(config.run_dir / "checkpoints.jsonl")]
    assert [(m["minutes"], m["update"], m["final"]) for m in marks][0] == (1e-7, 1, False)
    assert len(marks) == 2 and marks[1]["final"] and marks[1]["update"] == 2
    assert abs(marks[1]["minutes"] - summary["training_minutes"]) < 1e-3
    for mark in marks:
        assert set(mark) >= {"test", "test_unseen"}
        assert sum(1 for _ in mark["test_unseen"]["pass_rate_per_task"]) >= 1
    assert summary["checkpoints"] == marks
