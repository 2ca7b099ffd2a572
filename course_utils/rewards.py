"""The reward: one interface, three kinds (the task checker, a learned model, a toy for tests).

Every reward scores whole responses as *text*: ``score(prompts, responses, records) -> Tensor[B]``.
``make_reward(config)`` builds the one a run's config names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from course_utils import tasks
from course_utils.device import pick_device
from course_utils.machinery import hub
from course_utils.machinery.parameters import chat_template_sha256, count_parameters


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


@dataclass
class LearnedReward:
    """A learned scalar reward model with its OWN tokenizer and text format.

    The policy's tokens are decoded to text first (by the rollout); here that text is formatted
    and re-encoded with the reward model's tokenizer. Token ids are never passed from one model
    to the other: their vocabularies need not agree.

    model: a sequence-classification style scorer: ``model(input_ids=, attention_mask=)`` returns an
        object with ``.logits`` of shape ``[B, 1]`` (or ``[B]``), or that tensor directly.
        It is frozen (eval mode, no gradients) here.
    tokenizer: the reward model's tokenizer.
    template: ``"chat"`` renders [user: prompt, assistant: response] with the reward tokenizer's
        chat template; any other string is a format with ``{prompt}`` and ``{response}`` fields,
        e.g. ``"Question: {prompt}\\nAnswer: {response}"``.
    max_length: longer texts are cut from the LEFT, so the end of the response is always scored.
    add_special_tokens: whether the tokenizer adds its own special tokens ([CLS]/[SEP] for
        BERT-style encoders); None means "yes, unless the chat template already wrote them".
    """

    model: nn.Module
    tokenizer: Any
    template: str = "chat"
    max_length: int = 512
    batch_size: int = 16
    add_special_tokens: bool | None = None
    name: str = "learned reward model"

    def __post_init__(self):
        self.model.eval()
        self.model.requires_grad_(False)
        self.tokenizer.truncation_side = "left"
        if self.template == "chat":
            hub.require_template(self.tokenizer, "the reward model")
        elif "{response}" not in self.template:
            raise ValueError(
                f"Reward template {self.template!r} has no {{response}} field; use e.g. "
                "'Question: {prompt}\\nAnswer: {response}' or template='chat'."
            )

    @classmethod
    def from_folder(cls, path: str | Path, device=None, **kwargs) -> "LearnedReward":
        """Load a reward model saved by ``save_pretrained`` (a sequence-classification model with
        one label) and its tokenizer. A ``reward_config.json`` next to it may set ``template``
        and ``max_length``. (The reward-model lessons write such folders.)"""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = hub.check_model_folder(Path(path))
        if (folder / "reward_model.json").is_file():  # written by `python -m course_utils rm train`
            from course_utils.reward_model import load_reward_model

            return load_reward_model(folder, device=device)
        settings = {}
        config_file = folder / "reward_config.json"
        if config_file.is_file():
            saved = json.loads(config_file.read_text())
            settings = {k: saved[k] for k in ("template", "max_length", "add_special_tokens") if k in saved}
        settings.update(kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if "template" not in settings:
            settings["template"] = "chat" if getattr(tokenizer, "chat_template", None) else "{prompt}\n\n{response}"
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
        model.to(pick_device(device) if not isinstance(device, torch.device) else device)
        return cls(model=model, tokenizer=tokenizer, name=f"learned reward model ({folder.name})", **settings)

    def format_texts(self, prompts: list[str], responses: list[str]) -> list[str]:
        """The exact strings the reward model reads (its own template, not the policy's)."""
        if self.template == "chat":
            return [
                self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": p}, {"role": "assistant", "content": r}], tokenize=False
                )
                for p, r in zip(prompts, responses)
            ]
        return [self.template.format(prompt=p, response=r) for p, r in zip(prompts, responses)]

    @torch.no_grad()
    def score(self, prompts: list[str], responses: list[str], records: list | None = None) -> torch.Tensor:
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        texts = self.format_texts(prompts, responses)
        special = self.template != "chat" if self.add_special_tokens is None else self.add_special_tokens
        device = next(self.model.parameters()).device
        scores = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=special,
                return_tensors="pt",
            )
            out = self.model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
            logits = getattr(out, "logits", out)
            scores.append(logits.reshape(logits.shape[0], -1)[:, 0].float().cpu())
        return torch.cat(scores) if scores else torch.zeros(0)

    def describe(self) -> dict:
        trainable, frozen = count_parameters(self.model)
        return {
            "kind": "learned",
            "model": str(getattr(getattr(self.model, "config", None), "_name_or_path", type(self.model).__name__)),
            "tokenizer": type(self.tokenizer).__name__,
            "tokenizer_name": str(getattr(self.tokenizer, "name_or_path", "")),
            "template": self.template if self.template != "chat" else "chat",
            "chat_template_sha256": chat_template_sha256(self.tokenizer) if self.template == "chat" else None,
            "frozen_parameters": frozen,
        }




def make_reward(config, device=None) -> RewardFunction:
    """The reward function named by ``config.reward`` (checker, learned model or the toy)."""
    if config.reward == "learned":
        path = config.reward_model_path
        if path == "default":  # where `python -m course_utils rm train` saves it
            from course_utils.reward_model import default_model_dir

            path = default_model_dir()
        return LearnedReward.from_folder(path, device=device)
    if config.reward == "letters":
        return LetterFractionReward()
    return CheckerReward(kind="binary" if config.reward == "checker_binary" else "partial")
