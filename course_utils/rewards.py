"""The reward: one interface, three kinds (the task checker, a learned model, a toy for tests).

The learned kind is ``reward_model.RewardModel`` (the course's own, or a hub classifier).

Every reward scores whole responses as *text*: ``score(prompts, responses, records) -> Tensor[B]``.
``reward_model.make_reward(config)`` builds the one a run's config names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from course_utils import tasks


@runtime_checkable
class RewardFunction(Protocol):
    """Anything that scores whole responses.

    ``score(prompts, responses, records=None) -> Tensor[B]``: one raw score per sequence,
    float32 on the cpu. ``prompts`` are the user prompts (plain text, not chat-rendered) and
    ``responses`` the decoded response texts (special tokens removed): the reward sees *text*,
    never the policy's token ids. ``records`` are the task records behind the prompts, needed by
    programmatic checkers and ignored by learned models.
    """

    def score(self, prompts: list[str], responses: list[str], records: list | None = None) -> torch.Tensor: ...


@dataclass
class CheckerReward:
    """Programmatic reward from the task checkers (``course_utils.tasks``).

    kind="binary": 1.0 if the checker passes the answer, else 0.0.
    kind="partial": ``tasks.partial_credit_reward(record, answer)`` in [0, 1], which gives some
    credit for answers that are close (the right format, some of the items...). Partial credit
    makes exploration easier and is also what the policy learns to game.
    """

    kind: str = "partial"
    name: str = "checker"

    def __post_init__(self):
        if self.kind not in ("partial", "binary"):
            raise ValueError(f"CheckerReward kind must be 'partial' or 'binary', got {self.kind!r}")

    def score(self, prompts: list[str], responses: list[str], records: list | None = None) -> torch.Tensor:
        if records is None:
            raise ValueError(
                "CheckerReward needs the task records behind the prompts (records=[...]) to know "
                "what a correct answer is; pass the records you drew the prompts from."
            )
        if not (len(prompts) == len(responses) == len(records)):
            raise ValueError(
                f"prompts ({len(prompts)}), responses ({len(responses)}) and records ({len(records)}) "
                "must have the same length"
            )
        reward_of = tasks.binary_reward if self.kind == "binary" else tasks.partial_credit_reward
        values = [float(reward_of(record, answer)) for record, answer in zip(records, responses)]
        return torch.tensor(values, dtype=torch.float32)

    def describe(self) -> dict:
        return {"kind": f"checker ({self.kind})", "weights": "none (programmatic)"}


@dataclass
class LetterFractionReward:
    """A toy reward for smoke tests on the random tiny model: the fraction of the response's
    characters that are ASCII letters. A random model earns varied scores, so advantages are not
    all zero and the PPO machinery really moves; it teaches nothing about the tasks."""

    name: str = "letters"

    def score(self, prompts: list[str], responses: list[str], records: list | None = None) -> torch.Tensor:
        fractions = [sum(c.isascii() and c.isalpha() for c in r) / max(len(r), 1) for r in responses]
        return torch.tensor(fractions, dtype=torch.float32)

    def describe(self) -> dict:
        return {"kind": "toy", "what": "fraction of ASCII letters in the response"}
