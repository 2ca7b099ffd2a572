"""The trainer under torchrun: two CPU processes (gloo) on the tiny model.

Exact equality of global whitening with one process is proven on fixed tensors in
test_whiten_distributed.py. A whole run cannot match one process token for token (each process
samples its own half of the batch with its own random stream), so here we check what must hold:
both processes end with identical weights, metrics count the global batch, and the evaluation
before training (greedy, same weights) equals the one-process run exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from course_utils.machinery.distributed import free_port

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path: Path, processes: int) -> tuple[dict, list[dict], list[dict]]:
    out = tmp_path / f"p{processes}"
    args = ["-m", "course_utils", "ppo", "--config", "configs/smoke.yaml", "--set", f"output_dir={out}",
            "total_updates=2", "threads=1"]
    if processes > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               f"--master_port={free_port()}", *args]
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
