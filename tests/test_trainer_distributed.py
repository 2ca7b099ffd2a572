"""The trainer under torchrun: two CPU processes on accelerate's engine (MULTI_CPU: DDP over gloo)
on the tiny model.

Exact equality of global whitening with one process is proven on fixed tensors in
test_whiten_distributed.py. A whole run cannot match one process token for token (each process
samples its own half of the batch with its own random stream), so here we check what must hold:
both processes end with identical weights, metrics count the global batch, and the evaluation
before training (greedy, same weights) equals the one-process run exactly. That two processes
train and log exactly like one on the same fixed batch is test_update_distributed.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_utils.machinery.distributed import check_processes, free_port

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path: Path, processes: int) -> tuple[dict, list[dict], list[dict]]:
    out = tmp_path / f"p{processes}"
    args = ["-m", "course_utils", "ppo", "--config", "configs/smoke.yaml", "--set", f"output_dir={out}",
            "total_updates=2", "threads=1"]
    if processes > 1:  # the documented command, checked by --processes
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               f"--master_port={free_port()}", *args, "--processes", str(processes)]
    else:
        cmd = [sys.executable, *args]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "smoke" / "summary.json").read_text())  # written by rank 0 only
    read = lambda name: [json.loads(x) for x in (out / "smoke" / name).read_text().splitlines()]  # noqa: E731
    return summary, read("metrics.jsonl"), read("evals.jsonl")


def test_two_processes_stay_in_sync_and_report_global_numbers(tmp_path):
    one, metrics1, evals1 = run(tmp_path, 1)
    two, metrics2, evals2 = run(tmp_path, 2)
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert (one["engine"], two["engine"]) == ("NO", "MULTI_CPU")  # accelerate's engine: DDP over gloo
    assert two["ranks_in_sync"] is True
    assert [m["world_size"] for m in metrics2] == [2, 2]
    assert [m["episodes"] for m in metrics2] == [m["episodes"] for m in metrics1]
    # Every optimizer step was taken by both processes together (gradients averaged).
    assert [m["optimizer_steps"] for m in metrics2] == [m["optimizer_steps"] for m in metrics1]
    assert evals2[0] == evals1[0]


def test_two_processes_stopped_and_resumed_give_the_same_numbers(tmp_path):
    """Each rank samples its own share with its own random stream, so a resume must give every
    rank back its own RNG state (not rank 0's) for the numbers to match an uninterrupted run."""
    def torchrun(out: Path, *extra: str) -> list[dict]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               "-m", "course_utils", "ppo", "--config", "configs/smoke.yaml", "--set", f"output_dir={out}",
               "threads=1", *extra]
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        rows = [json.loads(x) for x in (out / "smoke" / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not (k.startswith("time_") or k.endswith("_per_s"))} for r in rows]

    full = torchrun(tmp_path / "full", "total_updates=3")
    torchrun(tmp_path / "resumed", "total_updates=2")
    resumed = torchrun(tmp_path / "resumed", "total_updates=3", "--resume")
    assert resumed == full


def test_two_processes_apply_the_same_learning_rate_under_a_time_budget(tmp_path):
    """lr_schedule: linear with a time budget (and target_kl on): the progress is read from each update's slowest
    process's time, a clock every process agrees on, so every process applies the same rate and
    the weights stay equal. (Each process reading its own clock gave rates a few parts in a million
    apart, and "ranks_in_sync": false.)"""
    out = tmp_path / "budget"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
           "-m", "course_utils", "ppo", "--config", "configs/smoke.yaml", "--set", f"output_dir={out}", "threads=1",
           "lr_schedule=linear", "max_train_minutes=0.1", "total_updates=1000", "eval_every=1000",
           "learning_rate=1e-3", "target_kl=0.05", "--processes", "2"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "smoke" / "summary.json").read_text())
    metrics = [json.loads(x) for x in (out / "smoke" / "metrics.jsonl").read_text().splitlines()]
    assert summary["world_size"] == 2 and summary["finished"]  # ended by the time budget
    assert summary["engine"] == "MULTI_CPU"
    # The rate of update k + 1 is set after update k from the time of updates 1 .. k - 1: with three
    # updates or more the clock, not the update count (k / 1000), has lowered it.
    assert len(metrics) >= 3, f"only {len(metrics)} updates in the budget: the machine is too slow for this test"
    assert metrics[2]["learning_rate"] < 1e-3 * (1 - 2 / 1000) - 1e-9
    assert summary["ranks_in_sync"] is True


def test_a_run_that_got_fewer_processes_than_asked_for_is_refused(tmp_path):
    """`accelerate launch --num_processes 2 --cpu` starts ONE process (its multi-CPU launch goes
    through mpirun): --processes 2 turns that into a one-line error naming the command that works,
    before any model loads."""
    cmd = [sys.executable, "-m", "course_utils", "ppo", "--config", "configs/smoke.yaml", "--processes", "2",
           "--set", f"output_dir={tmp_path}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "1 process(es) started" in result.stderr and "torchrun --nproc_per_node 2" in result.stderr
    assert not (tmp_path / "smoke").exists()


def test_one_process_under_accelerate_launch_cpu_is_warned_about(monkeypatch, capsys):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")  # what `accelerate launch --cpu` sets
    check_processes(SimpleNamespace(num_processes=1), None)
    assert "torchrun --nproc_per_node N" in capsys.readouterr().err
    monkeypatch.setenv("ACCELERATE_USE_CPU", "False")
    check_processes(SimpleNamespace(num_processes=1), None)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="--processes 2 was asked for but 1"):
        check_processes(SimpleNamespace(num_processes=1), 2)
