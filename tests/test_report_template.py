"""The run report's definitions say what the trainer logs (machinery.report.CURVES)."""

import torch

from course_utils import ppo_math
from course_utils.machinery import report

torch.set_num_threads(1)


def test_clip_fraction_definition_is_what_clipped_surrogate_logs():
    definition = dict((key, hint) for key, _, hint in report.CURVES)["policy_clipfrac"]
    # Four tokens, every ratio outside the band [0.8, 1.2]. Only the two whose advantage pushes them
    # further out are clipped; "the share of tokens whose ratio left the band" would say 1.0.
    ratio = torch.tensor([[1.5, 1.5, 0.5, 0.5]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0]], dtype=torch.float64)
    old = torch.zeros_like(ratio)
    _, clipfrac = ppo_math.clipped_surrogate(ratio.log(), old, advantages, torch.ones_like(ratio), 0.2)
    assert clipfrac.item() == 0.5
    assert "r > 1 + ε with A > 0" in definition and "r < 1 - ε with A < 0" in definition
    assert "not counted" in definition and "averaged over the update's steps" in definition
