"""Apple's MPS backend has no float64 ("Cannot convert a MPS Tensor to float64 dtype"). Every tensor
operation of one PPO update (rollout, scores, shaping, GAE, whitening, the minibatch losses, the
optimizer step, the metrics) is recorded here on the CPU, and none may be float64."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from course_utils.config import load_config

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


class Float64Spy(TorchDispatchMode):
    """Records every ATen op that reads or writes a float64 tensor."""

    def __init__(self):
        super().__init__()
        self.float64_ops: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if any(t.dtype == torch.float64 for t in tensors):
            self.float64_ops.append(str(func))
        return out


def test_one_update_runs_without_a_single_float64_op(tmp_path):
    from course_utils.trainer import PPOTrainer

    # Adaptive KL and reward whitening on, so that every optional branch of the update runs.
    config = load_config(SMOKE, output_dir=str(tmp_path), threads=2, adaptive_kl=True, whiten_rewards=True,
                         ent_coef=0.01, missing_eos_penalty=0.5)
    trainer = PPOTrainer(config, quiet=True)
    spy = Float64Spy()
    with spy:
        metrics = trainer.ppo_update()
    assert spy.ops > 1000  # the spy really saw the update
    assert metrics["optimizer_steps"] == 4
    assert not spy.float64_ops, sorted(set(spy.float64_ops))


def test_the_spy_does_see_float64():
    spy = Float64Spy()
    with spy:
        torch.ones(3).double().sum()
    assert spy.float64_ops
