"""Faults injected on purpose, to test that the stop rules fire and the checkpoint stays good."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class NaNRewardFrom:
    """Wraps a reward function: from update ``start`` on (0-based, as ``current_update()`` counts
    the update being prepared) every score is NaN. Only the training rollouts are scored through
    it; evaluation keeps the true reward."""

    reward: object
    start: int
    current_update: Callable[[], int]

    def score(self, prompts, responses, records=None) -> torch.Tensor:
        scores = self.reward.score(prompts, responses, records)
        if 0 <= self.start <= self.current_update():
            return torch.full_like(scores, float("nan"))
        return scores
