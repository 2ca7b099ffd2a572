"""One process of the "two processes update like one" test (run by tests/test_update_distributed.py).

Usage (one process, then two on accelerate's engine, started the way the README documents):

    python tests/update_worker.py OUT_DIR BATCH_FILE [TARGET_KL [UPDATES]]
    torchrun --nproc_per_node 2 tests/update_worker.py OUT_DIR BATCH_FILE [TARGET_KL [UPDATES]]

The trainer builds its ``Accelerator`` (``machinery.distributed.make_accelerator``): under torchrun
that is ``DistributedType.MULTI_CPU`` over gloo, and the training forward goes through the
DDP-wrapped policy, whose backward averages the gradients. The one-process run samples one
batch of 8 episodes and saves it to BATCH_FILE; the two processes load it, so every run starts
from the same tensors. The batch is made uneven on purpose: rank 0's rows keep only a few real
tokens, and their old log-probs are shifted so that most of the batch's approximate KL sits in
those few tokens (a mean of the two processes' means would weigh them as much as rank 1's many
tokens). Then ``UPDATES`` (default 3) updates of step 5 (``update.optimise``: target_kl, gradient clipping and
the linear learning-rate schedule on), each on the same responses with π_old's log-probs and
values measured again by the current policy (a new rollout without sampling again). Each process
saves the trained weights, every update's step counts and metrics, and its engine to
OUT_DIR/rankR.pt.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"

ROWS = 8
UPDATES = 3
LENGTHS = [1, 2, 3, 2, 8, 8, 7, 8]  # real tokens per row at most: rank 0 holds rows 0-3, rank 1 rows 4-7
OLD_LOGPROB_SHIFT = 0.5  # added to π_old's log-probs on rank 0's tokens: ratio e^-0.5 there
SETTINGS = dict(batch_size=ROWS, num_minibatches=1, ppo_epochs=4, threads=1, learning_rate=3e-2,
                max_grad_norm=0.05, target_kl=0.02, lr_schedule="linear", total_updates=UPDATES)


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


@torch.no_grad()
def measured_by(batch, policy, temperature: float):
    """``batch`` with π_old's log-probs and values measured by ``policy`` as it is now, on all
    rows (the same forward in every run). The responses, advantages and returns stay."""
    from course_utils.rollout import sequence_forward

    r = batch.rollout
    policy.eval()
    logprobs, values, _ = sequence_forward(policy, r.query_ids, r.query_mask, r.response_ids, r.response_mask,
                                           temperature)
    return replace(batch, rollout=replace(r, old_logprobs=logprobs, values=values))


def main() -> None:
    out_dir, batch_file = Path(sys.argv[1]), Path(sys.argv[2])
    settings = dict(SETTINGS, target_kl=float(sys.argv[3])) if len(sys.argv) > 3 else SETTINGS
    updates_to_run = int(sys.argv[4]) if len(sys.argv) > 4 else UPDATES
    torch.set_num_threads(1)
    from course_utils import ppo_math as pm
    from course_utils import update as ppo
    from course_utils.config import load_config
    from course_utils.machinery.metrics import update_metrics
    from course_utils.trainer import PPOTrainer

    config = load_config(SMOKE, output_dir=str(out_dir / "run"), **settings)
    trainer = PPOTrainer(config, quiet=True)  # under torchrun: accelerate's MULTI_CPU engine (gloo)
    config = trainer.config  # the fast paths' "auto" decided (machinery.calibration), as the trainer runs them
    rank, world_size, accelerator = trainer.rank, trainer.world_size, trainer.accelerator
    if not batch_file.exists():
        assert world_size == 1, "the batch is sampled by the one-process run"
        torch.save(trainer.prepare_batch(), batch_file)
    full = torch.load(batch_file, weights_only=False)
    rows = torch.arange(rank * ROWS // world_size, (rank + 1) * ROWS // world_size)
    initial = [p.detach().clone() for p in trainer.params]
    updates = []
    for update in range(updates_to_run):
        part = uneven_batch(measured_by(full, trainer.policy, config.temperature)).select(rows)
        if update == 0:  # this process's own approximate KL before the first step
            with torch.no_grad():
                _, parts = ppo.minibatch_loss(trainer.policy, part, config)
            local_kl = float(pm.approx_kl(parts["logprobs"], part.rollout.old_logprobs, part.rollout.response_mask))
        learning_rate = trainer.scheduler.get_last_lr()[0]
        steps = ppo.optimise(trainer.policy, trainer.optimizer, part, config, model=trainer.ddp_policy,
                             accelerator=accelerator)
        trainer.scheduler.step()
        metrics = update_metrics(part, steps, config, update + 1, world_size, learning_rate,
                                 times={"train_s": 1.0, "update_s": 1.0})
        updates.append({"steps": steps, "metrics": {k: v for k, v in metrics.items()
                                                    if not (k.startswith("time_") or k.endswith("_per_s"))}})
    torch.save({"engine": accelerator.distributed_type.value, "backend": accelerator.state.backend,
                "ddp": isinstance(trainer.ddp_policy, torch.nn.parallel.DistributedDataParallel),
                "checksum": float(sum(getattr(full, name).double().sum() for name in full.PER_ROW)),
                "local_kl_before": local_kl, "tokens": float(part.rollout.response_mask.sum()),
                "updates": updates, "initial_params": initial, "params": [p.detach().clone() for p in trainer.params]},
               out_dir / f"rank{rank}.pt")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
