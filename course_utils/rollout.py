"""Rollouts: from prompts to the tensors the PPO maths expects.

One rollout step, in order:

1. ``render_prompts``   chat template with ``add_generation_prompt=True`` (the model answers as
                        the assistant), then left padding (``left_pad``) so every prompt ends at
                        the same column and generation continues all rows from there.
2. ``generate``         sample responses with explicit settings (temperature, top_k=0, top_p=1;
                        nothing from the model's generation_config), LoRA merged for speed.
3. ``response_mask_from_ids``  1 on every generated token up to and including the first EOS,
                        0 after it. Built from *positions*, never from ``ids != pad_id``:
                        SmolLM2's pad token IS its EOS token ``<|im_end|>``, and the chat prompt
                        itself contains ``<|im_end|>``.
4. ``sequence_forward`` one forward pass over prompt + response: log π(a_t | s_t) for each
                        response token (with the sampling temperature) and the values V(s_t).
                        Run once with the policy (old log-probs, values) and once with the
                        reference (reference log-probs).

State and action: the state s_t is the prompt plus the response tokens before t; the action a_t
is response token t. A causal LM's output at sequence position p predicts the token at p + 1, so
the logits (and the hidden state for V) that belong to response token t sit one position earlier.

``collect_rollout`` does all of this and times each phase (``rollout.timings``).
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch

from course_utils.machinery import hub
from course_utils.machinery import decode_loop as fast_decode
from course_utils.machinery.packed_linear import available as packed_linear_available
from course_utils.machinery.packed_linear import packed_linears
from course_utils.ppo_math import last_token_index, logprobs_from_logits

__all__ = [
    "SamplingSettings",
    "Rollout",
    "render_prompts",
    "left_pad",
    "tokenize_prompts",
    "stop_token_ids",
    "response_mask_from_ids",
    "positions_from_attention_mask",
    "sequence_forward",
    "generate",
    "collect_rollout",
    "greedy_answers",
]


# ---------------------------------------------------------------------------------------------
# Settings and the rollout record
# ---------------------------------------------------------------------------------------------


@dataclass
class SamplingSettings:
    """How responses are sampled. Every field is passed to ``generate`` explicitly, and the
    model's own generation_config is ignored, so nothing hidden (a repetition penalty, a default
    top_k=50, a forced EOS) changes the distribution we sample from.

    temperature: sample from softmax(logits / temperature). The log-probs of the rollout and of
        every training forward use the same temperature, or the PPO ratio compares two
        different policies.
    top_k: 0 = off. Any truncation (top_k > 0, top_p < 1) makes the sampler differ from the
        full softmax that the log-probs are computed from; keep them off for PPO.
    top_p: 1.0 = off (nucleus sampling disabled), see top_k.
    max_new_tokens: longest response; a response that reaches it without EOS is "truncated".
    do_sample: False = greedy decoding (for evaluation, not for PPO rollouts).
    min_new_tokens: 0 = off. A value > 0 bans EOS for that many tokens, which also makes the
        sampler differ from the log-probs; only for benchmarks that need fixed-length responses.
    """

    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 32
    do_sample: bool = True
    min_new_tokens: int = 0

    def check(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use do_sample=False for greedy decoding")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.do_sample and (self.top_k not in (0, None) or self.top_p < 1.0 or self.min_new_tokens > 0):
            warnings.warn(
                f"top_k={self.top_k}, top_p={self.top_p}, min_new_tokens={self.min_new_tokens}: the "
                "sampler changes the distribution (truncates it or bans EOS), but the "
                "log-probs are computed from the full softmax, so the rollout is slightly off-policy. "
                "Use top_k=0, top_p=1.0, min_new_tokens=0 for PPO.",
                stacklevel=3,
            )

    def generation_config(
        self, eos_token_ids: list[int], pad_token_id: int, output_logits: bool = False, output_hidden_states: bool = False
    ):
        """A complete transformers GenerationConfig: every processor that could change the
        distribution is set to its neutral value explicitly."""
        from transformers import GenerationConfig

        sampling = dict(temperature=self.temperature, top_k=self.top_k or 0, top_p=self.top_p) if self.do_sample else {}
        return GenerationConfig(
            do_sample=self.do_sample,
            **sampling,
            max_new_tokens=self.max_new_tokens,
            min_new_tokens=self.min_new_tokens or None,
            num_beams=1,
            repetition_penalty=1.0,
            encoder_repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            length_penalty=1.0,
            renormalize_logits=False,
            remove_invalid_values=False,
            eos_token_id=list(eos_token_ids),
            pad_token_id=pad_token_id,
            use_cache=True,
            return_dict_in_generate=True,
            output_logits=output_logits,
            output_hidden_states=output_hidden_states,
        )


_TENSOR_FIELDS = (
    "query_ids", "query_mask", "response_ids", "response_mask", "last_index", "ended_with_eos",
    "truncated", "old_logprobs", "ref_logprobs", "values", "generation_logprobs", "generation_values",
)


@dataclass
class Rollout:
    """One batch of sampled responses and everything PPO needs about them.

    Shapes (B prompts, Lq prompt columns, T response columns):
      query_ids [B, Lq] long        chat-rendered prompts, LEFT padded with the pad id
      query_mask [B, Lq] long       1 on prompt tokens, 0 on left padding
      response_ids [B, T] long      generated tokens; positions after the first EOS hold pad id
      response_mask [B, T] float    1.0 up to and including the first EOS, 0.0 after it
      last_index [B] long           index of the last real response token (the EOS, or T - 1
                                    when truncated); -1 for a row with no response token
      ended_with_eos [B] bool       the response contains an EOS
      truncated [B] bool            the response hit max_new_tokens without an EOS
      old_logprobs [B, T] float32   log π_old(a_t | s_t) at the sampling temperature; 0 outside mask
      ref_logprobs [B, T] float32   log π_ref(a_t | s_t), same temperature; 0 outside mask
      values [B, T] float32         V(s_t) of the state before token t; 0 outside mask
      generation_logprobs [B, T]    optional: log-probs from the sampler's own logits
      generation_values [B, T]      optional: values from the sampler's own hidden states
    Plus: prompts (user text), response_texts (decoded without special tokens: what the reward
    sees), records (task records, if any), settings, timings (seconds per phase).
    """

    query_ids: torch.Tensor
    query_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    last_index: torch.Tensor
    ended_with_eos: torch.Tensor
    truncated: torch.Tensor
    prompts: list[str]
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    response_texts: list[str] = field(default_factory=list)
    records: list | None = None
    settings: SamplingSettings | None = None
    generation_logprobs: torch.Tensor | None = None
    generation_values: torch.Tensor | None = None
    timings: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.query_ids.shape[0]

    @property
    def num_tokens(self) -> int:
        """Number of real response tokens in the batch (the sum of the mask)."""
        return int(self.response_mask.sum().item())

    @property
    def response_lengths(self) -> torch.Tensor:
        """Real tokens per response, EOS included: shape [B]."""
        return self.response_mask.sum(-1).long()

    def to(self, device) -> "Rollout":
        moved = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS if getattr(self, name) is not None}
        return replace(self, **moved)

    def select(self, indices) -> "Rollout":
        """The rows ``indices`` (a list, range or 1-D tensor) as a new Rollout, e.g. a minibatch."""
        index = torch.as_tensor(list(indices) if not isinstance(indices, torch.Tensor) else indices, dtype=torch.long)
        picked = {
            name: getattr(self, name)[index.to(getattr(self, name).device)]
            for name in _TENSOR_FIELDS
            if getattr(self, name) is not None
        }
        rows = index.tolist()

        def take(items):
            return [items[i] for i in rows] if items else items

        return replace(
            self, **picked, prompts=take(self.prompts), response_texts=take(self.response_texts),
            records=take(self.records) if self.records is not None else None,
        )

    def __len__(self) -> int:
        return self.batch_size

    def __repr__(self) -> str:
        b, t = self.response_ids.shape
        parts = [
            f"{b} responses x {t} columns", f"{self.num_tokens} real tokens",
            f"{int(self.ended_with_eos.sum())} ended with EOS", f"{int(self.truncated.sum())} truncated",
        ]
        missing = [n for n in ("old_logprobs", "ref_logprobs", "values") if getattr(self, n) is None]
        if missing:
            parts.append("not yet computed: " + ", ".join(missing))
        if self.timings:
            parts.append(", ".join(f"{k} {v:.2f}" for k, v in self.timings.items()))
        return f"Rollout({'; '.join(parts)})"


# ---------------------------------------------------------------------------------------------
# 1. Prompts: chat template, token ids, left padding
# ---------------------------------------------------------------------------------------------


def render_prompts(tokenizer, prompts: Sequence[str], system: str | None = None) -> list[str]:
    """Render each user prompt with the tokenizer's chat template, ending with the assistant
    header (``add_generation_prompt=True``) so the model's next token starts its answer.

    SmolLM2 example (its template adds a default system message when none is given):
    ``<|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n``
    """
    hub.require_template(tokenizer, str(getattr(tokenizer, "name_or_path", "this model")))
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string; wrap it: [prompt]")
    if len(prompts) == 0:
        raise ValueError("no prompts given: pass a non-empty list of strings")
    rendered = []
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {i} is a {type(prompt).__name__}, not a string")
        if not prompt.strip():
            raise ValueError(
                f"prompt {i} is empty: there is nothing to answer. Remove it or give it some text."
            )
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        rendered.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return rendered


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token lists into ``(ids [B, L], mask [B, L])`` with padding on the LEFT.

    Left padding puts the last prompt token of every row in the same column, so each generation
    step appends one column for all rows. ``mask`` is 1 on tokens and 0 on padding; it comes from
    the lengths, not from comparing ids with ``pad_id`` (the pad id may occur in the prompt).
    """
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, width - len(seq):] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq):] = 1
    return ids, mask


def tokenize_prompts(
    tokenizer, prompts: Sequence[str], system: str | None = None, max_new_tokens: int = 0,
    max_context: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Render, tokenize and left-pad the prompts: ``(query_ids [B, Lq], query_mask [B, Lq])``.

    The rendered text already holds the template's special tokens, so the tokenizer is told not
    to add its own (some tokenizers would prepend a second BOS). Raises ValueError when a prompt
    plus ``max_new_tokens`` does not fit in ``max_context`` positions.
    """
    rendered = render_prompts(tokenizer, prompts, system)
    token_lists = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in rendered]
    longest = max(map(len, token_lists), default=0)
    if max_context is not None and longest + max_new_tokens > max_context:
        which = 1 + max(range(len(token_lists)), key=lambda i: len(token_lists[i]))  # 1-based, as a person counts
        fix = (f"use max_new_tokens={max_context - longest} (the largest that fits) or less" if longest < max_context
               else f"shorten the prompt to at most {max_context - max(max_new_tokens, 1)} tokens, or lower max_new_tokens")
        raise ValueError(f"prompt {which} is {longest} tokens after the chat template; with max_new_tokens={max_new_tokens} "
                         f"the sequence could reach {longest + max_new_tokens} tokens, but the model has "
                         f"{max_context} positions. Fix: {fix}.")
    return left_pad(token_lists, tokenizer.pad_token_id)


def longest_prompt(tokenizer, prompts: Sequence[str], model=None, system: str | None = None) -> tuple[int, int | None]:
    """``(tokens of the longest prompt after the chat template, the model's positions or None)``:
    what a run checks up front, so that max_new_tokens is refused before the first rollout."""
    unique = sorted(set(prompts))
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"])
               for text in render_prompts(tokenizer, unique, system)] if unique else [0]
    return max(lengths), getattr(getattr(model, "config", None), "max_position_embeddings", None)


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """The token ids that end a response: the tokenizer's EOS plus any the model's
    generation_config lists (Qwen lists two). The same set drives generation and the mask."""
    ids = []
    candidates = [tokenizer.eos_token_id]
    config = getattr(model, "generation_config", None)
    if config is not None and config.eos_token_id is not None:
        extra = config.eos_token_id
        candidates += list(extra) if isinstance(extra, (list, tuple)) else [extra]
    for i in candidates:
        if i is not None and int(i) not in ids:
            ids.append(int(i))
    if not ids:
        raise ValueError("the tokenizer has no EOS token: set tokenizer.eos_token before rolling out")
    return ids


# ---------------------------------------------------------------------------------------------
# 2. The response mask
# ---------------------------------------------------------------------------------------------


def response_mask_from_ids(
    response_ids: torch.Tensor, eos_token_id: int | Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which generated positions are real actions: ``(mask, last_index, ended_with_eos, truncated)``.

        eos_before[t] = number of EOS tokens at positions < t
        mask[t]       = 1 if eos_before[t] == 0 else 0      (the first EOS itself is kept: 1)

    The first EOS is an action the policy chose (stopping), so it is trained on; everything after
    it is padding. Position-based on purpose: with pad == eos, ``ids != pad_id`` would drop the
    real EOS, and it says nothing about the prompt, which itself contains ``<|im_end|>``.

    Shapes: ``response_ids [B, T]`` -> ``mask [B, T]`` float32, ``last_index [B]`` long (the EOS
    position, ``T - 1`` when truncated, -1 when T == 0), ``ended_with_eos [B]`` bool,
    ``truncated [B]`` bool (no EOS within the T tokens). An EOS as the very first token (an empty
    answer) gives mask [1, 0, 0, ...] and last_index 0.
    """
    if response_ids.dim() != 2:
        raise ValueError(f"response_ids must be [B, T], got shape {tuple(response_ids.shape)}")
    # One id or several, as a Python int, a numpy integer, a 0-d tensor or any sequence of them.
    eos = torch.as_tensor(eos_token_id, device=response_ids.device).reshape(-1).long()
    is_eos = torch.isin(response_ids, eos).long()
    eos_before = torch.cumsum(is_eos, dim=-1) - is_eos
    mask = (eos_before == 0).float()
    ended_with_eos = is_eos.bool().any(dim=-1)
    if response_ids.shape[1] == 0:  # no generated column at all: nothing is real, nothing truncated
        none = torch.full((response_ids.shape[0],), -1, dtype=torch.long, device=response_ids.device)
        return mask, none, ended_with_eos, ended_with_eos.clone()
    return mask, last_token_index(mask), ended_with_eos, ~ended_with_eos


# ---------------------------------------------------------------------------------------------
# 3. Log-probs and values of a given response (one forward pass)
# ---------------------------------------------------------------------------------------------


def positions_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding: the first real token gets position 0.

        position[b, p] = (number of real tokens in row b at columns <= p) - 1, clamped at 0

    transformers' ``generate`` computes the same numbers for a left-padded batch. A forward pass
    without them numbers the columns instead, which shifts every real token of a padded row by the
    same offset. Rotary embeddings (SmolLM2, Llama, Qwen) see only position differences, so for them
    the shift changes nothing beyond round-off (week 2 measures it); with absolute position
    embeddings (GPT-2, OPT) it changes the input, and the PPO ratio would not start at 1. Passing
    them keeps the training forward the same computation as the sampler's for any architecture.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def sequence_forward(
    policy,
    query_ids: torch.Tensor,
    query_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs and values of each response token from one pass over prompt + response.

    With the sequence x = [query (Lq columns) | response (T columns)]:

        logprobs[b, t] = log softmax(logits[b, Lq - 1 + t] / τ)[response_ids[b, t]]
        values[b, t]   = V(hidden[b, Lq - 1 + t])

    Position Lq - 1 + t holds the last token of the state s_t (the prompt and the response tokens
    before t), so its logits predict a_t = response token t, and its hidden state gives V(s_t):
    the value of the state *before* the action. This is the convention of TRL's PPOTrainer and
    OpenRLHF (``values[:, context_length - 1 : -1]``).

    ``policy``: a ``PolicyWithValue`` (or anything with its forward signature).
    Shapes: query ``[B, Lq]``, response ``[B, T]`` -> ``logprobs [B, T]``, ``values [B, T]`` (both
    float32, exactly 0 where ``response_mask`` is 0) and ``logits [B, T, V]`` (the raw logits
    that predict each response token, not divided by τ; for the entropy bonus).
    Gradients flow when called outside ``torch.no_grad()`` (the training forward).
    """
    if query_ids.shape != query_mask.shape or response_ids.shape != response_mask.shape:
        raise ValueError(
            f"shape mismatch: query_ids {tuple(query_ids.shape)} vs query_mask {tuple(query_mask.shape)}, "
            f"response_ids {tuple(response_ids.shape)} vs response_mask {tuple(response_mask.shape)}"
        )
    lq, t = query_ids.shape[1], response_ids.shape[1]
    if t == 0:
        zeros = torch.zeros(response_ids.shape, dtype=torch.float32, device=response_ids.device)
        return zeros, zeros.clone(), torch.zeros((*response_ids.shape, 0), device=response_ids.device)
    input_ids = torch.cat([query_ids, response_ids], dim=1)
    # Tokens after the first EOS are masked out of attention: they are padding.
    attention_mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    position_ids = positions_from_attention_mask(attention_mask)
    # Only the last T + 1 positions' logits are needed: positions Lq - 1 ... Lq + T - 2 predict
    # the response; the very last position predicts a token after the response and is dropped.
    logits, values = policy(input_ids, attention_mask, position_ids=position_ids, logits_to_keep=t + 1)
    logits = logits[:, :-1]
    values = values[:, lq - 1 : lq + t - 1].float()
    logprobs = logprobs_from_logits(logits, response_ids, temperature)
    keep = response_mask.bool()
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    return torch.where(keep, logprobs.float(), zero), torch.where(keep, values, zero), logits


@torch.no_grad()
def _batched_forward(policy, rollout: Rollout, temperature: float, batch_size: int | None):
    """``sequence_forward`` over the rollout in chunks of ``batch_size`` rows (None = all at once)."""
    n = rollout.batch_size
    step = batch_size or n
    logprobs, values = [], []
    for start in range(0, n, step):
        rows = slice(start, start + step)
        lp, v, _ = sequence_forward(
            policy, rollout.query_ids[rows], rollout.query_mask[rows], rollout.response_ids[rows],
            rollout.response_mask[rows], temperature,
        )
        logprobs.append(lp)
        values.append(v)
    return torch.cat(logprobs), torch.cat(values)


# ---------------------------------------------------------------------------------------------
# 4. Generation and the full rollout
# ---------------------------------------------------------------------------------------------


@contextmanager
def _explicit_generation_config(model, config):
    """Replace the model's generation_config for the block. transformers fills every unset
    field of the config we pass from the model's own generation_config; swapping it guarantees
    that only our explicit settings (and library defaults we override) apply."""
    old = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = old


@contextmanager
def _eval_mode(module):
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _final_norm(model):
    """The normalisation module that produces the last hidden state (``model.model.norm`` in
    Llama, Qwen2, Mistral, ...), or None for an architecture without one."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    norm = getattr(decoder, "norm", None)
    return norm if isinstance(norm, torch.nn.Module) else None


def _unpack(model, tokenizer):
    """Accept a ModelBundle or a PolicyWithValue (+ tokenizer)."""
    if hasattr(model, "policy") and hasattr(model, "tokenizer"):
        return model.policy, tokenizer or model.tokenizer
    if tokenizer is None:
        raise ValueError("pass the tokenizer when generating with a policy rather than a ModelBundle")
    return model, tokenizer


@torch.no_grad()
def generate(
    model,
    tokenizer=None,
    prompts: Sequence[str] = (),
    settings: SamplingSettings | None = None,
    seed: int | None = None,
    *,
    system: str | None = None,
    merge_lora: bool | None = None,
    keep_generation_logprobs: bool = False,
    keep_generation_values: bool = False,
    packed: bool = True,
    decode_loop: bool = True,
    sampling_dtype: str = "float32",
) -> Rollout:
    """Sample one response per prompt; return a Rollout without log-probs or values yet.

    model: a ``ModelBundle`` (then ``tokenizer`` may be None) or a ``PolicyWithValue``.
    seed: if given, sampling uses this seed without disturbing the global RNG state.
    merge_lora: fold the LoRA update into the weights while generating (one matmul per
        projection instead of three; unmerged afterwards, see ``PolicyWithValue.merged_adapter``).
        Only in float32: folded into bfloat16 weights the update is rounded, and the sampler would
        no longer be π_old (measured on the cuda preset: 0.048 nats mean |Δ log-prob|, a quarter
        of the clip range). None (default): merge in float32 except on the packed CPU path, where
        merging means re-packing every adapted weight for each rollout. Measured here (2 cores):
        the learning presets' adapters (r16 on all seven projections, 16 prompts x 16 tokens)
        sample in 2.02 s unmerged against 2.81 s merged; the bench's (r8 on q, v; 8 x 32) in
        1.91 s against 1.93 s.
    keep_generation_logprobs: also store the log-probs computed from the sampler's own logits
        (``rollout.generation_logprobs``), to check them against ``sequence_forward``.
    keep_generation_values: also store V(s_t) from the sampler's own last hidden states
        (``rollout.generation_values``): the state that predicted token t, as in sequence_forward.
    packed: on a CPU in float32, compute the linear layers through oneDNN-packed copies of their
        weights (``machinery.packed_linear``): the same distribution, about 1.5x faster here.
    decode_loop: on a CPU, sample with ``machinery.decode_loop`` (a pre-allocated cache, two
        uniform numbers per token) instead of transformers' ``generate``: the same distribution,
        rules and log-probs, with less work per token. Elsewhere, or with top_k/top_p, ``generate``.
    sampling_dtype: "bfloat16" (opt-in, the packed CPU path only) multiplies through bfloat16
        copies of the weights: faster, and π_old only up to bfloat16 rounding (``PPOConfig``).
    """
    policy, tokenizer = _unpack(model, tokenizer)
    _refuse_auto(packed=packed, decode_loop=decode_loop)
    compute_dtype = sampling_compute_dtype(policy, sampling_dtype, packed)
    settings = settings or SamplingSettings()
    settings.check()
    device, base = policy.device, policy.base_model
    query_ids, query_mask = tokenize_prompts(tokenizer, prompts, system, settings.max_new_tokens,
                                             getattr(base.config, "max_position_embeddings", None))
    query_ids, query_mask = query_ids.to(device), query_mask.to(device)
    eos_ids = stop_token_ids(tokenizer, base)
    # Values need each step's last hidden state: a hook on the final norm (read by the LM head) records
    # just that; output_hidden_states would collect every layer (up to ~10% of the sampling time).
    final_norm = _final_norm(base) if keep_generation_values else None
    config = settings.generation_config(
        eos_ids, tokenizer.pad_token_id, output_logits=keep_generation_logprobs,
        output_hidden_states=keep_generation_values and final_norm is None,
    )
    last_hidden: list[torch.Tensor] = []
    hook = (final_norm.register_forward_hook(lambda _module, _inputs, out: last_hidden.append(out[:, -1]))
            if final_norm is not None else None)
    rng = torch.random.fork_rng(devices=[device] if device.type == "cuda" else []) if seed is not None else nullcontext()
    merged = _lora_merged_for_sampling(policy, merge_lora, packed)
    try:
        with rng, _eval_mode(policy), merged, packed_linears(policy, packed, compute_dtype), \
                _explicit_generation_config(base, config):
            if seed is not None:
                torch.manual_seed(seed)
            out = _draw(policy, query_ids, query_mask, settings, config, decode_loop)
    finally:
        if hook is not None:
            hook.remove()
    lq = query_ids.shape[1]
    raw = out.sequences[:, lq:]
    mask, last_index, ended, truncated = response_mask_from_ids(raw, eos_ids)
    # After the first EOS transformers writes the pad id anyway; we make it explicit.
    response_ids = torch.where(mask.bool(), raw, torch.full_like(raw, tokenizer.pad_token_id))
    rollout = Rollout(query_ids=query_ids, query_mask=query_mask, response_ids=response_ids, response_mask=mask,
                      last_index=last_index, ended_with_eos=ended, truncated=truncated, prompts=list(prompts),
                      settings=settings)
    if keep_generation_logprobs:
        rollout.generation_logprobs = _sampler_logprobs(out, response_ids, mask, settings.temperature)
    if keep_generation_values:
        steps = last_hidden[: raw.shape[1]] if final_norm is not None else [h[-1][:, -1] for h in out.hidden_states]
        rollout.generation_values = _sampler_values(policy, steps, mask)
    return rollout


def _refuse_auto(**switches) -> None:
    """A config's "auto" is truthy: passed on undecided it would switch a fast path on unasked."""
    undecided = {name: value for name, value in switches.items() if isinstance(value, str)}
    if undecided:
        raise ValueError(f"generate: {undecided}; pass true or false (a config's \"auto\" is decided by "
                         "machinery.calibration.resolve, which PPOTrainer runs when it starts)")


def sampling_compute_dtype(policy, sampling_dtype: str, packed: bool) -> torch.dtype:
    """The dtype the packed linear layers sample in; bfloat16 only where it can run."""
    if sampling_dtype == "float32":
        return torch.float32
    if sampling_dtype != "bfloat16":
        raise ValueError(f'sampling_dtype must be "float32" or "bfloat16", got {sampling_dtype!r}')
    if not packed:
        raise ValueError("sampling_dtype='bfloat16' runs on the packed CPU path, which is off here "
                         "(packed=False / packed_cpu_linears=false): turn it on, or use sampling_dtype=float32.")
    if not packed_linear_available(policy, torch.bfloat16):
        raise ValueError(f"sampling_dtype='bfloat16' needs float32 weights on a CPU whose oneDNN has bfloat16 kernels; "
                         f"this policy is {policy.dtype} on {policy.device}: use sampling_dtype=float32.")
    return torch.bfloat16


def _lora_merged_for_sampling(policy, merge_lora: bool | None, packed: bool):
    """``generate``'s rule for ``merge_lora``: float32 only; None merges except where the packed
    CPU path runs (``machinery.packed_linear.available``: a CPU, float32, oneDNN)."""
    if merge_lora is None:
        merge_lora = not (packed and packed_linear_available(policy))
    return policy.merged_adapter() if merge_lora and policy.dtype == torch.float32 else nullcontext()


def _draw(policy, query_ids, query_mask, settings, config, decode_loop: bool):
    """The sampling itself: the library's loop on a CPU, else transformers' generate. The loop
    records values through the final-norm hook; where it is missing (output_hidden_states),
    and for top_k/top_p, generate samples."""
    use_loop = (decode_loop and policy.device.type == "cpu" and fast_decode.supports(settings)
                and not config.output_hidden_states)
    if not use_loop:
        return policy.lm.generate(input_ids=query_ids, attention_mask=query_mask, generation_config=config)
    return fast_decode.decode(policy.lm, policy.base_model.config, query_ids, query_mask,
                              positions_from_attention_mask(query_mask), settings, config.eos_token_id,
                              config.pad_token_id, keep_logits=bool(config.output_logits))


def _sampler_logprobs(out, response_ids: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probs of the sampled tokens from the sampler's own raw logits (before any warper).
    One step at a time: each step's [B, V] stays in the cache, where stacking them into [B, T, V]
    first made log-softmax over 50 MB (8 x 32 tokens) take ~0.2 s of a 2 s rollout."""
    lp = torch.cat([logprobs_from_logits(step[:, None], response_ids[:, t:t + 1], temperature)
                    for t, step in enumerate(out.logits[:response_ids.shape[1]])], dim=1)
    return torch.where(mask.bool(), lp, torch.zeros((), device=lp.device))


def _sampler_values(policy, steps: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """V(s_t) from the sampler's last hidden states.

    At each step the final norm sees the positions fed at that step: the whole prompt at step 0,
    one token afterwards. Its last position is the state whose logits chose token ``step``, i.e.
    s_t in V(s_t) (the same tensor as ``out.hidden_states[step][-1][:, -1]``)."""
    hidden = torch.stack(steps, dim=1)  # [B, T, H]
    head = policy.value_head
    values = head(hidden.to(head.weight.dtype)).squeeze(-1)
    return torch.where(mask.bool(), values, torch.zeros((), device=values.device))


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Response texts as the reward sees them: the real tokens, special tokens (the EOS) removed."""
    lengths = response_mask.sum(-1).long().tolist()
    return [tokenizer.decode(row[:n].tolist(), skip_special_tokens=True) for row, n in zip(response_ids, lengths)]


ANSWER_CHUNK = 32
"""Prompts answered per batch by ``greedy_answers`` and ``sampled_answers``."""


def greedy_answers(model, prompts: Sequence[str], max_new_tokens: int, chunk: int = ANSWER_CHUNK, *, tokenizer=None,
                   progress: bool = False, packed: bool = True, decode_loop: bool = True) -> list[str]:
    """Greedy answers to ``prompts`` (chat template, special tokens removed), ``chunk`` at a time:
    what every held-out evaluation reads (the trainer's, the SFT report's, the reward model's).
    ``model``: a ModelBundle, or a PolicyWithValue with its ``tokenizer``. ``packed`` and
    ``decode_loop`` as in ``generate``: a run that turned them off (``packed_cpu_linears: false``
    to save the packed copies' memory) must not get them back at its evaluations."""
    settings = SamplingSettings(max_new_tokens=max_new_tokens, do_sample=False)
    return _answers(model, prompts, settings, chunk, tokenizer, progress, "greedy answers",
                    packed=packed, decode_loop=decode_loop)


def sampled_answers(model, prompts: Sequence[str], samples: int, max_new_tokens: int, temperature: float = 1.0,
                    chunk: int = ANSWER_CHUNK, *, seed: int = 0, tokenizer=None,
                    progress: bool = False) -> list[list[str]]:
    """``samples`` answers to every prompt, sampled from the policy at ``temperature`` (the
    rollout's distribution, not greedy): ``out[i]`` holds prompt i's answers. For pass@k."""
    settings = SamplingSettings(temperature=temperature, max_new_tokens=max_new_tokens, do_sample=True)
    repeated = [p for p in prompts for _ in range(samples)]
    flat = _answers(model, repeated, settings, chunk, tokenizer, progress, f"{samples} samples per prompt", seed)
    return [flat[i * samples:(i + 1) * samples] for i in range(len(prompts))]


def _answers(model, prompts, settings: SamplingSettings, chunk: int, tokenizer, progress: bool, what: str,
             seed: int | None = None, packed: bool = True, decode_loop: bool = True) -> list[str]:
    from tqdm.auto import tqdm

    policy, tokenizer = _unpack(model, tokenizer)
    answers: list[str] = []
    for i in tqdm(range(0, len(prompts), chunk), desc=what, disable=not progress):
        chunk_seed = None if seed is None else seed + i  # each chunk its own stream, reproducible
        result = generate(policy, tokenizer, prompts=list(prompts[i:i + chunk]), settings=settings, seed=chunk_seed,
                          packed=packed, decode_loop=decode_loop)
        answers.extend(decode_responses(tokenizer, result.response_ids, result.response_mask))
    return answers


def _check_rollout_request(bundle, prompts, records, old_logprobs_from: str) -> None:
    """Refuse, with the fix, the requests ``collect_rollout`` cannot serve faithfully."""
    if old_logprobs_from not in ("forward", "generation"):
        raise ValueError(f"old_logprobs_from must be 'forward' or 'generation', got {old_logprobs_from!r}")
    if old_logprobs_from == "generation" and bundle.policy.dtype != torch.float32:
        raise ValueError(
            f"old_logprobs_from='generation' needs float32 weights (the policy is {bundle.policy.dtype}): "
            "in half precision merged-weight log-probs differ from the training forward. Use 'forward'."
        )
    if old_logprobs_from == "generation" and bundle.policy.value_model is not None:
        raise ValueError("old_logprobs_from='generation' reads values from the policy's hidden states; "
                         "with a separate value model use 'forward'.")
    if records is not None and len(records) != len(prompts):
        raise ValueError(f"{len(records)} records for {len(prompts)} prompts: give one record per prompt")


def collect_rollout(
    bundle,
    prompts: Sequence[str],
    settings: SamplingSettings | None = None,
    records: list | None = None,
    seed: int | None = None,
    *,
    system: str | None = None,
    merge_lora: bool | None = None,
    forward_batch_size: int | None = None,
    keep_generation_logprobs: bool = False,
    old_logprobs_from: str = "forward",
    packed: bool = True,
    decode_loop: bool = True,
    sampling_dtype: str = "float32",
) -> Rollout:
    """Generate responses and compute everything PPO needs, timing each phase.

    Phases (seconds in ``rollout.timings``):
      generate_s            sampling (``generate``'s ``merge_lora`` says when LoRA is merged)
      policy_forward_s      one no-grad forward: old log-probs AND values (shared backbone)
      reference_forward_s   one no-grad forward with the adapter off (or the frozen copy)
      decode_s              token ids -> response texts for the reward
    ``forward_batch_size`` splits the two forwards into chunks to cap memory (None: whole batch).
    ``packed``: sampling and the two frozen forwards run through oneDNN-packed weights on a CPU
    (``machinery.packed_linear``; float32 in another summation order, ~1e-5 in the log-probs).
    ``decode_loop``: on a CPU, sample with ``machinery.decode_loop`` rather than ``generate``.
    ``sampling_dtype``: "bfloat16" samples through bfloat16 weight copies (``generate``); the two
    forwards stay float32.

    old_logprobs_from="forward" (default): old log-probs and values come from a separate no-grad
    forward with the unmerged weights, the same computation as the training forward, so the
    first PPO ratio is 1 up to batch-size round-off in any precision.
    old_logprobs_from="generation": take them from the sampler's own logits and hidden states
    and skip that forward (policy_forward_s = 0). They were computed with the KV cache (and the
    merged weights where LoRA is merged), so they differ from the training forward by round-off: ~1e-5 in float32
    (tested), much more in bfloat16, where this option is refused.
    The reward itself is not computed here: ``bundle.reward.score(r.prompts, r.response_texts, r.records)``.
    """
    settings = settings or SamplingSettings()
    _check_rollout_request(bundle, prompts, records, old_logprobs_from)
    reuse = old_logprobs_from == "generation"
    policy, tokenizer, device = bundle.policy, bundle.tokenizer, bundle.policy.device
    timings = {}

    _sync(device)
    start = time.perf_counter()
    rollout = generate(bundle, tokenizer, prompts, settings, seed, system=system, merge_lora=merge_lora,
                       keep_generation_logprobs=keep_generation_logprobs or reuse, keep_generation_values=reuse,
                       packed=packed, decode_loop=decode_loop, sampling_dtype=sampling_dtype)
    _sync(device)
    timings["generate_s"] = time.perf_counter() - start

    start = time.perf_counter()
    with _eval_mode(policy), torch.no_grad(), packed_linears(policy, packed):
        if reuse:
            rollout.old_logprobs, rollout.values = rollout.generation_logprobs, rollout.generation_values
        else:
            rollout.old_logprobs, rollout.values = _batched_forward(policy, rollout, settings.temperature, forward_batch_size)
        _sync(device)
        timings["policy_forward_s"] = time.perf_counter() - start

        start = time.perf_counter()
        with bundle.reference_model() as reference, packed_linears(reference, packed):  # a copy: packed too
            rollout.ref_logprobs, _ = _batched_forward(reference, rollout, settings.temperature, forward_batch_size)
    _sync(device)
    timings["reference_forward_s"] = time.perf_counter() - start

    start = time.perf_counter()
    rollout.response_texts = decode_responses(tokenizer, rollout.response_ids, rollout.response_mask)
    timings["decode_s"] = time.perf_counter() - start
    timings["total_s"] = sum(timings.values())
    rollout.records = list(records) if records is not None else None
    rollout.timings = timings
    return rollout
