"""Our hand-written gradient average (``all_reduce_mean_``, taught in week 10) against DDP, the
trainer's: two gloo processes, each with half of one batch, through ``ddp_gradient_gaps``."""

from __future__ import annotations

import pytest
import torch

from course_utils.machinery.distributed import ddp_gradient_gaps, distributed_on

TOLERANCE = 1e-6


def all_reduce_sum_(tensors: list[torch.Tensor]) -> None:
    """``all_reduce_mean_`` without the division by the number of processes: a wrong average that the
    check must catch. Module level, so that the spawned processes can import it."""
    if distributed_on():
        for t in tensors:
            torch.distributed.all_reduce(t)


@pytest.fixture(scope="module")
def gaps() -> dict:
    return ddp_gradient_gaps(world_size=2)


def test_our_all_reduce_gives_ddps_gradients_and_one_process_on_the_whole_batch(gaps):
    assert (gaps["engine"], gaps["ddp"], gaps["world_size"]) == ("MULTI_CPU", True, 2)  # the trainer's DDP path
    assert gaps["all_reduce_vs_ddp"] <= TOLERANCE, gaps
    assert gaps["all_reduce_vs_one_process"] <= TOLERANCE, gaps
    assert gaps["ddp_vs_one_process"] <= TOLERANCE, gaps
    # The check can see a wrong average: one process's own gradient, not averaged, is far from the answer.
    assert gaps["local_vs_one_process"] > 1e-2, gaps
    assert gaps["wall_s"] < 60, gaps


def test_a_sum_without_the_division_is_caught():
    wrong = ddp_gradient_gaps(world_size=2, reduce=all_reduce_sum_)
    assert wrong["all_reduce_vs_ddp"] > 1e-2, wrong  # twice the average: off by the gradient itself
    assert wrong["all_reduce_vs_one_process"] > 1e-2, wrong
    assert wrong["ddp_vs_one_process"] <= TOLERANCE, wrong  # DDP is untouched by our reduction


def test_bad_arguments_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="divide the batch"):
        ddp_gradient_gaps(world_size=3)
    with pytest.raises(ValueError, match="at least 2"):
        ddp_gradient_gaps(world_size=1)


def reduction_that_fails_(tensors: list[torch.Tensor]) -> None:
    raise ValueError("no reduction here")


def test_a_failing_process_is_reported_in_one_line():
    with pytest.raises(RuntimeError) as error:
        ddp_gradient_gaps(world_size=2, reduce=reduction_that_fails_)
    message = str(error.value)
    assert "\n" not in message and "ValueError: no reduction here" in message, message


def reduction_that_aborts_(tensors: list[torch.Tensor]) -> None:
    """A process killed by a signal before it saves anything: no Python traceback, only stderr."""
    import os
    import sys

    print("simulated crash before saving", file=sys.stderr, flush=True)
    os.abort()


def test_a_process_killed_by_a_signal_is_reported_with_its_last_stderr_line():
    with pytest.raises(RuntimeError) as error:
        ddp_gradient_gaps(world_size=2, reduce=reduction_that_aborts_)
    message = str(error.value)
    assert "\n" not in message and "SIGABRT" in message, message
    assert "simulated crash before saving" in message, message


def mean_then_abort_at_exit_(tensors: list[torch.Tensor]) -> None:
    """The right average, then an abort when the process exits: what gloo's sockets closing at
    teardown can do, after every gradient is saved."""
    import atexit
    import os
    import sys

    from course_utils.machinery.distributed import all_reduce_mean_

    all_reduce_mean_(tensors)
    atexit.register(lambda: (print("simulated abort at exit", file=sys.stderr, flush=True), os.abort()))


def test_an_abort_after_every_gradient_is_saved_is_reported_not_raised():
    gaps = ddp_gradient_gaps(world_size=2, reduce=mean_then_abort_at_exit_)
    assert "SIGABRT" in gaps["teardown"] and "simulated abort at exit" in gaps["teardown"], gaps
    assert gaps["all_reduce_vs_ddp"] <= TOLERANCE and gaps["ddp_vs_one_process"] <= TOLERANCE, gaps


def test_a_clean_run_reports_no_teardown_problem(gaps):
    assert gaps["teardown"] is None, gaps
