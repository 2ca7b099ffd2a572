"""Several processes (``torchrun``, CPU: gloo): averaging, agreeing and summing across ranks.

Every function is a no-op on one process, so the trainer reads the same either way.
"""

from __future__ import annotations

import socket

import torch


def distributed_on() -> bool:
    """True inside an initialised ``torch.distributed`` process group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank_and_world_size() -> tuple[int, int]:
    if not distributed_on():
        return 0, 1
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def all_reduce_mean_(tensors: list[torch.Tensor]) -> None:
    """Average tensors (e.g. gradients) across processes, in place."""
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
    (one process skipping a step that the others take would deadlock the gradient all-reduce)."""
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
    """Under torchrun, the factor that turns this process's token-mean loss into its share of the
    GLOBAL token mean once the gradients are averaged over processes:

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
