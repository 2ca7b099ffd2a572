"""The reward: one interface, three kinds (the task checker, a learned model, a toy for tests).

The learned kind is ``reward_model.RewardModel`` (the course's own, or a hub classifier).

Every reward scores whole responses as *text*: ``score(prompts, responses, records) -> Tensor[B]``.
``reward_model.make_reward(config)`` builds the one a run's config names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
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
class NoisyJudge:
    """The strict checker seen through a judge that errs one way (lesson 11's design 2, "a judge
    you can ask only once"): a right answer always passes; a wrong one passes with probability
    ``epsilon``, independently at every check, from a generator seeded with ``seed``:

        P(pass | right) = 1,    P(pass | wrong) = epsilon

    One random number is drawn per check, right answer or not, so the stream of draws depends
    only on how many checks were made. ``calls`` counts the checks (the judge's cost). With
    ``epsilon`` 0 it is the checker itself. The same judge pays PPO (``CheckerReward(judge=...)``)
    and filters SFT's self-samples (``sft.passing_self_samples``); evaluation never uses it."""

    epsilon: float = 0.0
    seed: int = 0
    calls: int = field(default=0, init=False)

    def __post_init__(self):
        if not (isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and 0 <= self.epsilon < 1):
            raise ValueError(f"the judge's error rate epsilon must be in [0, 1), got {self.epsilon!r}")
        self._draws = np.random.default_rng(self.seed)

    def passes(self, record, answer: str) -> bool:
        """One check of ``answer`` to ``record``'s prompt (one judge call)."""
        self.calls += 1
        lucky = bool(self._draws.random() < self.epsilon)
        return tasks.check(record, answer).passed or lucky


@dataclass
class CheckerReward:
    """Programmatic reward from the task checkers (``course_utils.tasks``).

    kind="binary": 1.0 if the checker passes the answer, else 0.0.
    kind="partial": ``tasks.partial_credit_reward(record, answer)`` in [0, 1], which gives some
    credit for answers that are close (the right format, some of the items...). Partial credit
    makes exploration easier and is also what the policy learns to game.
    judge: with kind="binary", a ``NoisyJudge`` that checks instead of the strict checker
    (``checker_noise`` in the run's config): 1.0 when the judge passes the answer.
    """

    kind: str = "partial"
    name: str = "checker"
    judge: NoisyJudge | None = None

    def __post_init__(self):
        if self.kind not in ("partial", "binary"):
            raise ValueError(f"CheckerReward kind must be 'partial' or 'binary', got {self.kind!r}")
        if self.judge is not None and self.kind != "binary":
            raise ValueError("a noisy judge passes or fails an answer: it needs kind='binary'")

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
        if self.judge is not None:
            return torch.tensor([float(self.judge.passes(r, a)) for r, a in zip(records, responses)], dtype=torch.float32)
        reward_of = tasks.binary_reward if self.kind == "binary" else tasks.partial_credit_reward
        values = [float(reward_of(record, answer)) for record, answer in zip(records, responses)]
        return torch.tensor(values, dtype=torch.float32)

    def describe(self) -> dict:
        noise = f", a wrong answer passes with probability {self.judge.epsilon:g}" if self.judge else ""
        return {"kind": f"checker ({self.kind}{noise})", "weights": "none (programmatic)"}


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
