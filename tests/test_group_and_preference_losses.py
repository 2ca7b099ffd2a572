"""GRPO's group advantage and DPO's loss (lesson 11's comparison) against plain loops and TRL's own
code: trl.trainer.utils.nanstd is the std TRL's GRPOTrainer divides by, and its DPOTrainer's
"sigmoid" loss is -logsigmoid(beta * delta) on the chosen/rejected log-ratios."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils import ppo_math as pm


def loop_grpo(scores: list[float], k: int, scale: bool, eps: float = 1e-4) -> list[float]:
    out = []
    for start in range(0, len(scores), k):
        group = scores[start:start + k]
        mean = sum(group) / k
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (k - 1))
        out += [(x - mean) / (std + eps) if scale else x - mean for x in group]
    return out


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("scale", [True, False])
def test_group_advantages_match_a_plain_loop(k, scale):
    scores = torch.rand(4 * k, generator=torch.Generator().manual_seed(k))
    expected = torch.tensor(loop_grpo(scores.tolist(), k, scale))
    assert torch.allclose(pm.group_normalized_advantages(scores, k, scale=scale), expected, atol=1e-5)


def test_group_advantages_use_trls_std_and_relate_to_rloo():
    from trl.trainer.utils import nanstd

    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    groups = scores.view(-1, 4)
    trl = (groups - groups.mean(1, keepdim=True)) / (nanstd(groups, dim=1).unsqueeze(1) + 1e-4)
    assert torch.allclose(pm.group_normalized_advantages(scores, 4), trl.reshape(-1), atol=1e-6)
    # RLOO's centred score is k/(k-1) times GRPO's unscaled one
    assert torch.allclose(pm.leave_one_out_baseline(scores, 4), 4 / 3 * pm.group_normalized_advantages(scores, 4, scale=False))
    assert pm.group_normalized_advantages(torch.ones(4), 4).abs().max() == 0  # a uniform group: no signal
    with pytest.raises(ValueError, match="group_size >= 2"):
        pm.group_normalized_advantages(scores, 3)


def test_dpo_loss_matches_the_formula_and_prefers_the_chosen_answer():
    chosen, rejected = torch.tensor([-5.0, -7.0]), torch.tensor([-6.0, -6.5])
    ref_chosen, ref_rejected = torch.tensor([-5.5, -7.0]), torch.tensor([-5.5, -6.0])
    beta = 0.1
    expected = 0.0
    for c, r, rc, rr in zip(chosen.tolist(), rejected.tolist(), ref_chosen.tolist(), ref_rejected.tolist()):
        margin = (c - rc) - (r - rr)
        expected += -math.log(1 / (1 + math.exp(-beta * margin))) / 2
    assert pm.dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).item() == pytest.approx(expected, rel=1e-6)
    # at the reference the loss is log 2; raising the chosen answer's log-prob lowers it
    same = pm.dpo_loss(ref_chosen, ref_rejected, ref_chosen, ref_rejected, beta)
    assert same.item() == pytest.approx(math.log(2))
    assert pm.dpo_loss(ref_chosen + 1, ref_rejected, ref_chosen, ref_rejected, beta) < same
