"""Several processes: the engine that starts them, and agreeing and summing across ranks.

The trainer runs on an ``accelerate.Accelerator`` (``make_accelerator``): it joins the process
group that ``torchrun`` (CPU: gloo) or ``accelerate launch`` (GPUs: NCCL) started, and DDP
(``accelerator.prepare_model``) averages the gradients during the backward. Everything else that
must be global (whitening, the target-KL test, logged means and maxima, the time budget) goes
through the small helpers below, on ``torch.distributed``'s default group, which accelerate
initialises. Every helper is a no-op on one process, so the trainer reads the same either way.

``all_reduce_mean_`` is the exception: the trainer does not call it. It writes out DDP's gradient
average for week 10, and ``ddp_gradient_gaps`` checks it against DDP on two CPU processes.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch

SUPPORTED_ENGINES = ("NO", "MULTI_CPU", "MULTI_GPU")
"""accelerate's distributed types the trainer runs on: one process, DDP over gloo, DDP over NCCL.
Under the others (DeepSpeed, FSDP, ...) ``prepare_model`` does not return a DDP module, and the
trainer's optimizer step (not ``accelerator.prepare``d) would not be synchronised."""


def launched_processes() -> bool:
    """True when a launcher (torchrun, accelerate launch) started this process as one of a group."""
    return int(os.environ.get("LOCAL_RANK", -1)) != -1 or int(os.environ.get("WORLD_SIZE", 1)) > 1


def make_accelerator(device: torch.device):
    """The ``accelerate.Accelerator`` the trainer runs on, for ``device``. Under a launcher it
    initialises the process group (gloo on a CPU, NCCL on CUDA GPUs); alone it is one process
    (``DistributedType.NO``).

    * CPU: ``cpu=True`` and the gloo backend named, because with none named accelerate picks MPI
      wherever torch was built with it. Named only under a launcher: alone, a named backend makes
      accelerate ask a process group that does not exist for its size.
    * CPU and MPS stay float32 (``mixed_precision="no"``, whatever an accelerate config says):
      half precision is slow or unsupported there, and MPS has no float64 either.
    * CUDA: the launch config's mixed precision. bf16 is an autocast around the forward; fp16
      would need a gradient scaler on a prepared optimizer, which this trainer does not use.
    """
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    if device.type == "cpu":
        gloo = [InitProcessGroupKwargs(backend="gloo")] if launched_processes() else []
        accelerator = Accelerator(cpu=True, mixed_precision="no", kwargs_handlers=gloo)
    else:
        accelerator = Accelerator(mixed_precision="no" if device.type == "mps" else None)
    if accelerator.distributed_type.value not in SUPPORTED_ENGINES:
        raise ValueError(f"accelerate's {accelerator.distributed_type.value} engine is not supported by this trainer "
                         f"(it runs {', '.join(SUPPORTED_ENGINES)}). Fix: launch with configs/accelerate/multi_gpu.yaml "
                         "or single_gpu.yaml")
    if accelerator.mixed_precision == "fp16":
        raise ValueError("mixed_precision fp16 needs a gradient scaler, which this trainer does not use. "
                         "Fix: mixed_precision bf16 or no in the accelerate config")
    return accelerator


def check_processes(accelerator, expected: int | None) -> None:
    """Refuse a run that was asked for ``expected`` processes and got another number: a launcher
    that quietly starts one process would train on one with a batch meant for N. On a CPU
    ``accelerate launch --num_processes N --cpu`` is such a launcher (without an MPI hostfile it
    starts a single process), so a single process it started is warned about even unasked."""
    got = accelerator.num_processes
    if expected is not None and got != expected:
        raise ValueError(f"--processes {expected} was asked for but {got} process(es) started. Fix: on a CPU start "
                         f"`torchrun --nproc_per_node {expected} -m course_utils ppo ...`, on GPUs `accelerate launch "
                         f"--num_processes {expected} -m course_utils ppo ...`")
    if got == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        print("warning: ACCELERATE_USE_CPU is set and this is one process: `accelerate launch --cpu` starts one "
              "process without an MPI hostfile; for N CPU processes use `torchrun --nproc_per_node N -m course_utils "
              "ppo ...` (add --processes N to have the run check it)", file=sys.stderr)


def distributed_on() -> bool:
    """True inside an initialised ``torch.distributed`` process group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank_and_world_size() -> tuple[int, int]:
    if not distributed_on():
        return 0, 1
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def all_reduce_mean_(tensors: list[torch.Tensor]) -> None:
    """Average tensors (e.g. gradients) across processes, in place.

    Teaching only: what DDP does to the gradients during the backward, written out (week 10,
    ``tests/whiten_worker.py``), and checked against DDP by ``ddp_gradient_gaps``. The trainer's
    gradients are averaged by DDP (``accelerator.prepare_model``), not by this."""
    if not distributed_on():
        return
    world = torch.distributed.get_world_size()
    for t in tensors:
        torch.distributed.all_reduce(t)
        t.div_(world)


def params_in_sync(params: list[torch.Tensor]) -> bool:
    """True if every process holds the same weights (compares a checksum across processes)."""
    if not distributed_on():
        return True
    checksum = torch.stack([p.detach().double().sum() for p in params]).sum().reshape(1)
    low, high = checksum.clone(), checksum.clone()
    torch.distributed.all_reduce(low, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.all_reduce(high, op=torch.distributed.ReduceOp.MAX)
    return bool(low == high)


def all_processes_agree(flag: bool) -> bool:
    """True only if ``flag`` is true on every process, so all of them take the same branch
    (one process skipping a backward that the others run would deadlock DDP's gradient all-reduce)."""
    if not distributed_on():
        return flag
    t = torch.tensor([0.0 if flag else 1.0])
    torch.distributed.all_reduce(t)
    return bool(t.item() == 0)


def global_sum(values: list[float]) -> list[float]:
    """Element-wise sum of per-process numbers over all processes."""
    if not distributed_on():
        return values
    t = torch.tensor(values, dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return t.tolist()


def global_means(local_sums: list[float], local_count: float) -> list[float]:
    """Global means from each process's sums over its own items (tokens, episodes):

        mean_k = Σ_r sum_{r,k} / Σ_r count_r          (r over the processes; one all-reduce)

    what one process computes on the whole batch. A mean of per-process means would weigh a
    process holding few tokens as much as one holding many. A per-process token mean ``m_r``
    enters as ``sum = m_r · count_r``. NaN where the global count is 0."""
    *sums, count = global_sum([*local_sums, float(local_count)])
    return [s / count if count else float("nan") for s in sums]


def global_max(value: float) -> float:
    """The largest of a per-process number over all processes (e.g. a ratio's maximum, an
    update's time)."""
    if not distributed_on():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return float(t.item())


def gather_objects(obj) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every process (a plain list on one process)."""
    if not distributed_on():
        return [obj]
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, obj)
    return gathered


def token_share_weight(mask: torch.Tensor) -> float:
    """Under several processes, the factor that turns this process's token-mean loss into its share
    of the GLOBAL token mean once DDP has averaged the gradients over processes:

        weight = n_local · world_size / n_global      (n = real tokens of the minibatch)

    so that mean over processes of (weight · local mean) = Σ over all tokens / n_global. 1.0 on one
    process (and when every process holds the same number of tokens)."""
    if not distributed_on():
        return 1.0
    n_local = float(mask.sum())
    n_global = global_sum([n_local])[0]
    return n_local * torch.distributed.get_world_size() / max(n_global, 1.0)


def free_port() -> int:
    """A free TCP port on the loopback interface, for a local process group or server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- The lesson's check: our all-reduce against DDP (week 10, tests/test_ddp_gradients.py) -----------------------

_CHECK_ROWS, _CHECK_FEATURES = 8, 5


def _check_model_and_batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The tiny seeded model and batch of ``ddp_gradient_gaps``: the same in every process."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(_CHECK_ROWS, _CHECK_FEATURES, generator=g)
    y = torch.randn(_CHECK_ROWS, 1, generator=g)
    with torch.random.fork_rng(devices=[]):  # seeded weights, and the caller's random stream left as it was
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(_CHECK_FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, x, y


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1).clone() for p in model.parameters()])


def _ddp_gradients_worker(rank: int, world_size: int, port: int, out_dir: str, reduce) -> None:
    """One process of ``ddp_gradient_gaps`` (module level, so that spawn can start it): join the gloo
    group through ``make_accelerator`` as under torchrun, take this rank's rows, save three gradients.
    Its stderr goes to ``rank{rank}.err`` in ``out_dir``: a process killed by a signal raises no Python
    exception, and the last line it printed (gloo's or the C++ runtime's message) is all there is to quote."""
    stderr = open(Path(out_dir) / f"rank{rank}.err", "w")
    os.dup2(stderr.fileno(), 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    loopback = next((n for n in ("lo", "lo0") if n in names), None)
    if loopback:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread each, and accelerate does not warn that it set it
    torch.set_num_threads(1)
    accelerator = make_accelerator(torch.device("cpu"))
    try:
        model, x, y = _check_model_and_batch()
        rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
        x, y = x[rows], y[rows]
        torch.nn.functional.mse_loss(model(x), y).backward()  # this process's mean over its own rows
        local = _flat_grad(model)
        reduce([p.grad for p in model.parameters()])  # (a) our all-reduce, in place
        ddp = accelerator.prepare_model(_check_model_and_batch()[0])  # (b) the trainer's DDP wrapper
        accelerator.backward(torch.nn.functional.mse_loss(ddp(x), y))  # DDP averages during this backward
        partial = Path(out_dir) / f"rank{rank}.pt.partial"  # renamed once whole: a file there is complete
        torch.save({"local": local, "all_reduce": _flat_grad(model), "ddp": _flat_grad(ddp),
                    "engine": accelerator.distributed_type.value,
                    "is_ddp": isinstance(ddp, torch.nn.parallel.DistributedDataParallel)}, partial)
        partial.rename(Path(out_dir) / f"rank{rank}.pt")
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def ddp_gradient_gaps(world_size: int = 2, reduce=all_reduce_mean_, timeout: float = 120.0) -> dict:
    """Check ``all_reduce_mean_`` against DDP, on ``world_size`` CPU processes (gloo).

    What: every process takes its equal share of the rows of one batch and computes the gradient of
    a tiny seeded model's loss (a mean over its own rows) twice: (a) a plain backward, then ``reduce``
    (our ``all_reduce_mean_``); (b) the same model wrapped in DDP by ``accelerator.prepare_model``
    (``make_accelerator``, the trainer's path), then ``accelerator.backward``. One process also
    computes the gradient of the loss over the whole batch, which both should equal: the mean of
    equal-sized shares' means is the whole batch's mean.

    Why: the trainer leaves the gradient average to DDP; ``all_reduce_mean_`` writes out what DDP
    does, and this shows (week 10) and tests that the two agree. ``reduce`` is there to try another
    reduction (a sum, say); spawn must be able to import it, so it is a module-level function.

    Returns the largest absolute differences over all processes and parameters:
    ``all_reduce_vs_ddp``, ``all_reduce_vs_one_process``, ``ddp_vs_one_process``, and
    ``local_vs_one_process`` (one process's gradient before any averaging: what the average fixes);
    with ``world_size``, ``engine`` (accelerate's distributed type in the processes), ``ddp`` (the
    prepared model was a DDP module), ``wall_s`` and ``teardown``: None, or how a process ended
    badly after every process had saved its gradients (gloo's sockets closing at exit can abort a
    process; the gradients compared are whole, so this is reported, not raised). Raises a one-line
    ``RuntimeError`` if a process fails before all gradients are saved, quoting its exception or the
    last line it wrote to stderr, or if the processes do not finish within ``timeout`` seconds.
    """
    if world_size < 2 or _CHECK_ROWS % world_size:
        raise ValueError(f"world_size must be at least 2 and divide the batch's {_CHECK_ROWS} rows; got {world_size}")
    if getattr(reduce, "__module__", None) == "__main__" and not hasattr(sys.modules["__main__"], "__file__"):
        raise ValueError("reduce must be a function of an importable module: spawned processes cannot import one "
                         "defined in a notebook or an interactive session")
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    start = time.perf_counter()
    teardown = None
    with tempfile.TemporaryDirectory(prefix="ddp-gradients-") as out_dir:
        results = [Path(out_dir) / f"rank{r}.pt" for r in range(world_size)]
        context = mp.start_processes(_ddp_gradients_worker, args=(world_size, free_port(), out_dir, reduce),
                                     nprocs=world_size, join=False, start_method="spawn")
        try:
            while not context.join(timeout=max(timeout - (time.perf_counter() - start), 0.1)):
                if time.perf_counter() - start > timeout:
                    raise RuntimeError(f"the {world_size} DDP check processes did not finish within {timeout:.0f} s")
        except ProcessException as error:
            how = _how_it_failed(error, Path(out_dir) / f"rank{error.error_index}.err")
            if not all(path.exists() for path in results):
                raise RuntimeError(f"the DDP check failed in process {error.error_index}: {how}") from None
            teardown = f"process {error.error_index} after saving its gradients: {how}"
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
                    process.join(5)
        ranks = [torch.load(path) for path in results]
    model, x, y = _check_model_and_batch()
    torch.nn.functional.mse_loss(model(x), y).backward()
    one = _flat_grad(model)

    def gap(key: str, other: str | None = None) -> float:
        return max((r[key] - (r[other] if other else one)).abs().max().item() for r in ranks)

    return {"all_reduce_vs_ddp": gap("all_reduce", "ddp"), "all_reduce_vs_one_process": gap("all_reduce"),
            "ddp_vs_one_process": gap("ddp"), "local_vs_one_process": gap("local"), "world_size": world_size,
            "engine": ranks[0]["engine"], "ddp": all(r["is_ddp"] for r in ranks),
            "wall_s": time.perf_counter() - start, "teardown": teardown}


def _how_it_failed(error, stderr_file: Path) -> str:
    """One line on a failed check process: the last line of a raised exception's traceback; for a
    process killed by a signal, which signal and the last line it wrote to stderr."""
    message = str(error).strip()
    last = message.splitlines()[-1] if message else type(error).__name__
    if getattr(error, "signal_name", None):  # a ProcessExitedException: no Python traceback to quote
        printed = [line.strip() for line in stderr_file.read_text(errors="replace").splitlines()
                   if line.strip()] if stderr_file.exists() else []
        if printed:
            last += f" (its last line on stderr: {printed[-1]})"
    return last
