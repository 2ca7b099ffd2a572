"""One process of the two-process whitening test (run by tests/test_whiten_distributed.py).

Usage: python tests/whiten_worker.py RANK WORLD_SIZE PORT DATA.pt OUT.pt

Joins a gloo process group on 127.0.0.1:PORT, whitens its own share of each scenario in DATA.pt
with course_utils.ppo_math.masked_whiten (which all-reduces the statistics because the group is
initialised), and saves the results to OUT.pt.
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from course_utils.machinery.distributed import all_reduce_mean_
from course_utils.ppo_math import global_masked_mean_var, masked_mean, masked_whiten
from course_utils.machinery.distributed import token_share_weight


def loss_gradient(x: torch.Tensor, mask: torch.Tensor, weighted: bool) -> torch.Tensor:
    """d/dw of this process's token-mean loss masked_mean(x * w), averaged over processes."""
    w = torch.ones(x.shape[1], dtype=x.dtype, requires_grad=True)
    loss = masked_mean(x * w, mask) if mask.sum() > 0 else (x * w).sum() * 0.0
    (loss * (token_share_weight(mask) if weighted else 1.0)).backward()
    grads = [w.grad]
    all_reduce_mean_(grads)
    return grads[0]


def main() -> None:
    rank, world_size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data_path, out_path = sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    results = []
    for scenario in torch.load(data_path):
        x, mask = scenario["x_parts"][rank], scenario["mask_parts"][rank]
        mean, var = global_masked_mean_var(x, mask)
        results.append(
            {
                "whitened": masked_whiten(x, mask),
                "rescaled": masked_whiten(x, mask, shift_mean=False),
                "whitened_float32": masked_whiten(x.float(), mask),
                "mean": mean,
                "var": var,
                "loss_grad": loss_gradient(x, mask, weighted=True),
                "loss_grad_unweighted": loss_gradient(x, mask, weighted=False),
            }
        )
    torch.save(results, out_path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
