"""Family-balanced prompt sampling: more of the batch where the reward still varies.

With a binary reward, Bae et al. 2025 bound the expected policy improvement from below by the
variance p(1 - p) of the success rates of the prompts trained on: a family the policy
always passes (p = 1) or never passes (p = 0) gives every sample the same reward, so after the
baseline its advantages are about zero and it only spends rollout time. This stream keeps a
running estimate of each family's success rate on the training rollouts and draws the families
of the next batch with probability proportional to

    weight_f = p_f (1 - p_f) + floor        p_f = (successes_f + 1) / (trials_f + 2)

(``family_weights``), where successes and trials decay by ``decay`` every update so the estimate
follows the policy. The floor keeps solved and out-of-reach families in the batches, faded out
rather than dropped, so that a solved family is still watched and can still be defended.

A caution, measured (week 7, section 3; ``runs/example/rlhf_learning.json``): p(1 - p) is the
variance of the reward, how often the rewards of a prompt differ, not a measure of what can be learned.
A family answered at chance (Yes/No on a balanced set) has the largest p(1 - p), but while the answer
does not depend on the number its passes reward guesses, not the rule; and a
family the policy rarely passes but could learn is faded out. On the course's tasks this sampling
did worse than plain shuffled batches.

It hands out batches exactly like ``trainer.PromptStream`` (same ``next_batch``, same ``cursor``,
same share per process under torchrun) and is resumable from its ``state_dict``.
"""

from __future__ import annotations

import torch


def success_rate_estimates(successes: dict[str, float], trials: dict[str, float]) -> dict[str, float]:
    """Per family: ``(successes + 1) / (trials + 2)``, the Laplace estimate of the success rate
    (0.5 for a family never sampled yet, never exactly 0 or 1)."""
    return {f: (successes[f] + 1.0) / (trials[f] + 2.0) for f in successes}


def family_weights(rates: dict[str, float], floor: float) -> dict[str, float]:
    """Per family: ``p (1 - p) + floor`` normalised to sum to 1, the share of the next batch it
    gets on average (p: its success rate estimate). The maximum, 0.25 + floor, is at p = 0.5."""
    raw = {f: p * (1.0 - p) + floor for f, p in rates.items()}
    total = sum(raw.values())
    return {f: w / total for f, w in raw.items()}


class SuccessVarianceStream:
    """Yields batches of prompt records, families drawn by ``family_weights``.

    records: the training prompts (``tasks.PromptRecord``); batch_size: prompts per update (the
    episodes per update divided by ``samples_per_prompt``);
    decay: how much of the past successes and trials is kept per update (0.9: about the last
    ten updates); floor: the weight every family keeps (see ``family_weights``). Within a family
    the prompts come in a seeded shuffled order, every prompt once per pass of that family.
    Call ``observe(families, passed)`` with the checker's verdicts on the batch just scored.
    """

    def __init__(self, records: list, batch_size: int, seed: int, decay: float = 0.9, floor: float = 0.02,
                 rank: int = 0, world_size: int = 1):
        if len(records) < batch_size:
            raise ValueError(f"{len(records)} prompts cannot fill a batch of {batch_size}; lower batch_size")
        self.batch_size, self.seed, self.decay, self.floor = batch_size, seed, decay, floor
        self.rank, self.world_size = rank, world_size
        self.by_family: dict[str, list] = {}
        for record in records:
            self.by_family.setdefault(record.family, []).append(record)
        self.families = sorted(self.by_family)
        self.cursor = 0  # batches handed out so far
        self.taken = {f: 0 for f in self.families}  # prompts handed out per family
        self.successes = {f: 0.0 for f in self.families}
        self.trials = {f: 0.0 for f in self.families}

    def weights(self) -> dict[str, float]:
        """The share of the next batch each family gets on average."""
        return family_weights(success_rate_estimates(self.successes, self.trials), self.floor)

    def _next_of(self, family: str):
        pool = self.by_family[family]
        lap, position = divmod(self.taken[family], len(pool))
        index = self.families.index(family)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index * 1009 + lap)
        self.taken[family] += 1
        return pool[torch.randperm(len(pool), generator=generator)[position].item()]

    def next_batch(self) -> list:
        weights = self.weights()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + 7919 * (self.cursor + 1))
        drawn = torch.multinomial(torch.tensor([weights[f] for f in self.families]), self.batch_size,
                                  replacement=True, generator=generator)
        batch = [self._next_of(self.families[i]) for i in drawn.tolist()]
        self.cursor += 1
        # Under torchrun every process computes the same global batch and takes its share.
        return batch[self.rank::self.world_size]

    def observe(self, families: list[str], passed: list[bool]) -> None:
        """Fold one scored batch (every process's episodes) into the success-rate estimates."""
        for f in self.families:
            self.successes[f] *= self.decay
            self.trials[f] *= self.decay
        for family, ok in zip(families, passed):
            self.successes[family] += float(ok)
            self.trials[family] += 1.0

    def state_dict(self) -> dict:
        return {"cursor": self.cursor, "taken": dict(self.taken), "successes": dict(self.successes),
                "trials": dict(self.trials)}

    def load_state_dict(self, state: dict) -> None:
        self.cursor = state["cursor"]
        self.taken, self.successes, self.trials = dict(state["taken"]), dict(state["successes"]), dict(state["trials"])
