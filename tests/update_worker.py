"""One process of the "two processes update like one" test (run by tests/test_update_distributed.py).

Usage: python tests/update_worker.py RANK WORLD_SIZE PORT OUT_DIR [TARGET_KL]

Every process first builds the same batch on its own (same seed, one thread, before any process
group exists), so the one-process run and both ranks start from identical tensors. The batch is
then made uneven on purpose: rank 0's rows keep only a few real tokens, and their old log-probs
are shifted so that most of the batch's approximate KL sits in those few tokens (a mean of the
two processes' means would weigh them as much as rank 1's many tokens). Then the process joins
the gloo group (WORLD_SIZE > 1), runs step 5 (``update.optimise``, target_kl and gradient
clipping on) and the update's metrics on its share of the rows, and saves the trained weights,
the step counts and the metrics to OUT_DIR/rankR.pt.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"

ROWS = 8
LENGTHS = [1, 2, 3, 2, 8, 8, 7, 8]  # real tokens per row at most: rank 0 holds rows 0-3, rank 1 rows 4-7
OLD_LOGPROB_SHIFT = 0.5  # added to π_old's log-probs on rank 0's tokens: ratio e^-0.5 there
SETTINGS = dict(batch_size=ROWS, num_minibatches=1, ppo_epochs=4, threads=1, learning_rate=3e-2,
                max_grad_norm=0.05, target_kl=0.02)


def uneven_batch(batch):
    """``batch`` with at most ``LENGTHS[i]`` real tokens in row i (zeros after them, as after an
    EOS) and π_old's log-probs shifted on rows 0-3."""
    r = batch.rollout
    keep = (torch.arange(r.response_mask.shape[1])[None, :] < torch.tensor(LENGTHS)[:, None]).to(r.response_mask.dtype)
    mask = r.response_mask * keep
    shift = torch.zeros_like(mask)
    shift[: ROWS // 2] = OLD_LOGPROB_SHIFT
    rollout = replace(r, response_mask=mask, last_index=mask.sum(1).long() - 1,
                      old_logprobs=(r.old_logprobs + shift) * mask, ref_logprobs=r.ref_logprobs * mask,
                      values=r.values * mask)
    per_token = {name: getattr(batch, name) * mask for name in batch.PER_ROW if name != "raw_scores"}
    return replace(batch, rollout=rollout, **per_token)


def main() -> None:
    rank, world_size, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    settings = dict(SETTINGS, target_kl=float(sys.argv[5])) if len(sys.argv) > 5 else SETTINGS
    torch.set_num_threads(1)
    from course_utils import ppo_math as pm
    from course_utils import update as ppo
    from course_utils.config import load_config
    from course_utils.machinery.metrics import update_metrics
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(out_dir / f"run{rank}"), **settings)
    trainer = PPOTrainer(config, quiet=True)  # one process so far: the same weights and batch everywhere
    batch = uneven_batch(trainer.prepare_batch())
    checksum = float(sum(getattr(batch, name).double().sum() for name in batch.PER_ROW))
    if world_size > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=1800))
    share = ROWS // world_size
    part = batch.select(torch.arange(rank * share, (rank + 1) * share))
    initial = [p.detach().clone() for p in trainer.params]
    with torch.no_grad():  # this process's own approximate KL before the first step
        _, parts = ppo.minibatch_loss(trainer.policy, part, config)
        local_kl = float(pm.approx_kl(parts["logprobs"], part.rollout.old_logprobs, part.rollout.response_mask))
    steps = ppo.optimise(trainer.policy, trainer.optimizer, part, config)
    metrics = update_metrics(part, steps, config, 1, world_size, config.learning_rate,
                             times={"train_s": 1.0, "update_s": 1.0})
    torch.save({"checksum": checksum, "local_kl_before": local_kl, "tokens": float(part.rollout.response_mask.sum()),
                "steps": steps, "initial_params": initial,
                "params": [p.detach().clone() for p in trainer.params],
                "metrics": {k: v for k, v in metrics.items() if not (k.startswith("time_") or k.endswith("_per_s"))}},
               out_dir / f"rank{rank}.pt")
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
