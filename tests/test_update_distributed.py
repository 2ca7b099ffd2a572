"""Step 5 and its logged statistics on two CPU processes under accelerate's engine equal one process
on the same global batch.

tests/update_worker.py takes one fixed batch (the tiny model, 8 episodes) whose halves hold very
different numbers of real tokens (8 on rank 0, about 30 on rank 1), with most of the approximate
KL in rank 0's few tokens. One process trains on all of it; two processes, started by
``torchrun --nproc_per_node 2`` with the trainer's ``Accelerator`` inside (MULTI_CPU, gloo, the
policy wrapped in DDP), each on their half, for three updates (target_kl, gradient clipping and
the linear learning-rate schedule on). Then:

* the target-KL early stop falls on the same step: the KL it tests is the global token mean
  Σ_r n_r·kl_r / Σ_r n_r, not the mean of the two processes' means (which here would stop
  before the first step);
* the weights after three updates are the same (DDP averages the gradients of the
  token-share-weighted losses: the gradient of the global token mean; gradient clipping active);
* every logged number is the same: token means from global sums and counts, ``ratio_max`` the
  maximum over processes, ``ratio_var`` pooled, ``explained_variance`` from global sums (also
  checked with the early stop off, so that the step statistics are compared on every step).
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import course_utils
from course_utils.machinery.distributed import free_port
from course_utils.ppo_math import TARGET_KL_FACTOR
from course_utils.update import STEP_STATS

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("update_worker.py")
sys.path.insert(0, str(WORKER.parent))
from update_worker import SETTINGS, UPDATES  # noqa: E402

COUNTS = ("optimizer_steps", "kl_stop_steps_skipped", "stale_steps_skipped", "nonfinite_steps")


def loopback_interface() -> str | None:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in ("lo", "lo0") if n in names), None)


def run_workers(out: Path, world_size: int, batch_file: Path, *extra: str) -> list[dict]:
    """One plain process, or ``world_size`` processes started by torchrun (the documented command)."""
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    if loopback_interface() and "GLOO_SOCKET_IFNAME" not in env:
        env["GLOO_SOCKET_IFNAME"] = loopback_interface()
    launcher = [] if world_size == 1 else ["-m", "torch.distributed.run", f"--nproc_per_node={world_size}",
                                           f"--master_port={free_port()}"]
    try:
        done = subprocess.run([sys.executable, *launcher, str(WORKER), str(out), str(batch_file), *extra], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker processes did not finish within 1800 s (blocked collective?)")
    assert done.returncode == 0, f"{world_size} process(es) failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def one_then_two(tmp: Path, *extra: str) -> tuple[dict, list[dict]]:
    one = run_workers(tmp / "one", 1, tmp / "batch.pt", *extra)[0]  # samples the batch and saves it
    return one, run_workers(tmp / "two", 2, tmp / "batch.pt", *extra)


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    return one_then_two(tmp_path_factory.mktemp("update_distributed"))


@pytest.fixture(scope="module")
def one_and_two_without_target_kl(tmp_path_factory):
    """The same without the early stop, for one update: its 4 steps taken on 1 and on 2 processes.
    (Not three: 12 steps of Adam at this learning rate amplify float rounding, the order in which
    1 and 2 processes sum, to 5% in a gradient norm by the third update; with the early stop each
    update takes one step and the weights stay within 1e-6.)"""
    return one_then_two(tmp_path_factory.mktemp("update_distributed_no_target_kl"), "0", "1")


def test_the_two_processes_run_on_accelerates_multi_cpu_engine(one_and_two):
    one, two = one_and_two
    assert (one["engine"], one["ddp"]) == ("NO", False)
    for rank in two:
        assert (rank["engine"], rank["backend"], rank["ddp"]) == ("MULTI_CPU", "gloo", True)


def test_the_training_path_leaves_the_gradient_average_to_ddp():
    """Our hand-written all-reduce is a lesson (week 10), not the trainer's gradient average."""
    package = Path(course_utils.__file__).resolve().parent
    for name in ("update.py", "trainer.py"):
        assert "all_reduce_mean_" not in (package / name).read_text(), name
    assert "accelerator.backward(loss)" in (package / "update.py").read_text()


def test_the_batch_is_the_same_in_every_run(one_and_two):
    one, two = one_and_two
    assert [r["checksum"] for r in two] == [one["checksum"]] * 2


def test_two_processes_stop_at_the_step_one_process_stops_at(one_and_two):
    one, two = one_and_two
    threshold = TARGET_KL_FACTOR * SETTINGS["target_kl"]
    # The batch tells the two rules apart: the mean of the processes' means is past the
    # threshold before the first step, the global token mean (one process's number) is not.
    tokens = [r["tokens"] for r in two]
    assert tokens[0] < tokens[1] / 2  # uneven token counts
    assert sum(r["local_kl_before"] for r in two) / 2 > threshold
    global_kl = sum(r["local_kl_before"] * n for r, n in zip(two, tokens)) / sum(tokens)
    assert global_kl == pytest.approx(one["local_kl_before"], rel=1e-5) and global_kl < threshold
    assert len(one["updates"]) == UPDATES
    assert all(u["steps"]["optimizer_steps"] > 0 for u in one["updates"]), [u["steps"] for u in one["updates"]]
    norms = [n for u in one["updates"] for n in u["steps"]["stats"]["grad_norm"]]
    assert min(norms) > SETTINGS["max_grad_norm"]  # clipping is active on every step
    for rank in two:
        for mine, ones in zip(rank["updates"], one["updates"]):
            assert {k: mine["steps"][k] for k in COUNTS} == {k: ones["steps"][k] for k in COUNTS}


def test_two_processes_reach_the_weights_of_one_process(one_and_two):
    one, two = one_and_two
    for rank in two:
        for p1, p2 in zip(one["params"], rank["params"]):
            torch.testing.assert_close(p2, p1, rtol=1e-6, atol=1e-6)
    assert any(not torch.equal(p, q) for p, q in zip(one["params"], one["initial_params"]))  # it did train


def test_the_learning_rate_follows_the_linear_schedule_on_every_process(one_and_two):
    one, two = one_and_two
    expected = [SETTINGS["learning_rate"] * (1 - k / UPDATES) for k in range(UPDATES)]
    for run in (one, *two):
        assert [u["metrics"]["learning_rate"] for u in run["updates"]] == pytest.approx(expected)


def test_two_processes_log_the_batch_statistics_of_one_process(one_and_two):
    """What the update logs about the batch (not the steps): explained variance, advantages,
    rewards, lengths. The explained variance was a mean of the two processes' values."""
    one, two = one_and_two
    assert one["updates"][0]["metrics"]["world_size"] == 1 and two[0]["updates"][0]["metrics"]["world_size"] == 2
    step_keys = {*STEP_STATS, "optimizer_steps", "kl_stop_steps_skipped", "policy_lag_max", "world_size"}
    for ones, *twos in zip(one["updates"], *(rank["updates"] for rank in two)):
        assert math.isfinite(ones["metrics"]["explained_variance"])
        for mine in twos:
            assert_same_numbers(mine["metrics"], ones["metrics"], skip=step_keys)


@pytest.mark.parametrize("early_stop", [True, False])
def test_two_processes_log_the_step_statistics_of_one_process(early_stop, request):
    """Each optimizer step's statistics, then the update's metrics: token means from global sums
    and counts (not a mean of the processes' means), ratio_var pooled, ratio_max the maximum
    over processes. Without the early stop every step is compared (the step statistics apart
    from the target-KL rule)."""
    one, two = request.getfixturevalue("one_and_two" if early_stop else "one_and_two_without_target_kl")
    for update, ones in enumerate(one["updates"]):
        if not early_stop:
            assert ones["steps"]["optimizer_steps"] == SETTINGS["ppo_epochs"]
        for rank in two:
            mine = rank["updates"][update]
            for key in STEP_STATS:  # step by step, before the update's mean over its steps
                assert mine["steps"]["stats"][key] == pytest.approx(ones["steps"]["stats"][key], rel=1e-5, abs=1e-6), \
                    (update, key)
            assert_same_numbers(mine["metrics"], ones["metrics"], skip={"world_size"})
        for key in STEP_STATS:
            assert math.isfinite(ones["metrics"][key]), key
        assert ones["metrics"]["ratio_var"] > 0  # rank 0's ratios start near e^-0.5, rank 1's near 1
    if not early_stop:  # the weights too, after the update's four steps
        for rank in two:
            for p1, p2 in zip(one["params"], rank["params"]):
                torch.testing.assert_close(p2, p1, rtol=1e-6, atol=1e-6)


def assert_same_numbers(actual: dict, expected: dict, skip=()) -> None:
    for key, value in expected.items():
        if key in skip:
            continue
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(actual[key]), key
        elif isinstance(value, float):
            assert math.isclose(actual[key], value, rel_tol=1e-5, abs_tol=1e-6), (key, actual[key], value)
        else:
            assert actual[key] == value, key
