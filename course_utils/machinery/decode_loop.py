"""A plain KV-cache sampling loop: what ``generate`` does for a PPO rollout, without its machinery.

transformers' ``generate`` serves every decoding strategy, and on a CPU a rollout pays for that on
every token (measured on 2 cores, SmolLM2-135M, 8 prompts x 32 tokens):

- its cache grows by concatenation: each step copies every layer's keys and values (~8 ms);
- ``torch.multinomial`` draws one exponential random number per vocabulary entry, 8 x 49,152 per
  token (~8 ms), to pick 8 tokens;
- logits processors and stopping criteria run between the steps.

This loop samples the same distribution with less work per token:

- a pre-allocated cache (transformers' ``StaticCache``), written in place;
- the next token drawn by inverting the cumulative distribution of softmax(logits / T) with two
  uniform numbers per row (a block of the vocabulary, then a token inside it; float32);
- the rules of ``generate`` kept: EOS banned for ``min_new_tokens`` tokens, a finished row fed the
  pad id, the loop ending when every row has ended or after ``max_new_tokens``.

Same distribution is not same tokens: under a seed this loop consumes random numbers differently
from ``generate``. With ``sampler="multinomial"`` it draws exactly as ``generate`` does, which is
how the tests check it token for token; the default sampler is checked against the exact
softmax by frequency (``tests/test_decode_loop.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SAMPLERS = ("inverse_cdf", "multinomial")


@dataclass
class DecodeOutput:
    """The fields of ``generate``'s output that the rollout reads.

    sequences: [B, L_prompt + T] prompt ids followed by the T sampled ids (pad after an EOS).
    logits: T tensors [B, V], the raw logits each token was drawn from (before temperature and
        the EOS ban), as ``generate(output_logits=True)`` returns them; None unless asked for."""

    sequences: torch.Tensor
    logits: tuple[torch.Tensor, ...] | None = None


def supports(settings) -> bool:
    """True for the settings this loop reproduces: greedy, or sampling from the full softmax
    (``top_k``/``top_p`` truncation is left to ``generate``)."""
    return not settings.do_sample or ((settings.top_k or 0) == 0 and settings.top_p >= 1.0)


def draw_inverse_cdf(scores: torch.Tensor, temperature: float, block: int = 256) -> torch.Tensor:
    """One token per row from softmax(scores / temperature), [B, V] -> [B], by inverting the CDF.

    Two uniform numbers per row: the first picks a block of ``block`` consecutive tokens with
    probability equal to its mass m_b, the second a token inside it with probability p / m_b, so
    P(token) = m_b · p / m_b = p. Why two short running sums rather than one over the vocabulary:
    float32 (MPS has no float64) rounds each running sum against its total. Over 49,152 tokens a
    rare token's width is rounded against a total near 1 (up to ~1e-3 of probability misplaced
    over the vocabulary); inside a block only against that block's mass, and the 192 block
    totals misplace at most ~1e-5. A token of probability 0 (a banned EOS) is never drawn.
    """
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    batch, vocab = probs.shape
    blocks = torch.nn.functional.pad(probs, (0, (-vocab) % block)).view(batch, -1, block)
    mass = blocks.sum(dim=-1)  # [B, number of blocks]
    chosen = _invert(mass.cumsum(dim=-1))
    inside = blocks[torch.arange(batch, device=probs.device), chosen]  # [B, block]
    return (chosen * block + _invert(inside.cumsum(dim=-1))).clamp_(max=vocab - 1)


def _invert(cdf: torch.Tensor) -> torch.Tensor:
    """[B, K] running sums -> [B] index of the interval that u ~ Uniform(0, total) falls in."""
    u = torch.rand(cdf.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


def draw_multinomial(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """What ``generate`` does: ``torch.multinomial`` on the float32 softmax of scores / T."""
    return torch.multinomial(torch.softmax(scores / temperature, dim=-1), num_samples=1).squeeze(-1)


@torch.no_grad()
def decode(lm, config, query_ids: torch.Tensor, query_mask: torch.Tensor, positions: torch.Tensor, settings,
           eos_ids: list[int], pad_id: int, *, keep_logits: bool = False, sampler: str = "inverse_cdf") -> DecodeOutput:
    """Sample up to ``settings.max_new_tokens`` tokens after left-padded prompts.

    lm: the causal LM (a transformers model or a peft wrapper of one), already in eval mode.
    config: the model's config, for the size of the cache.
    query_ids, query_mask: [B, L_prompt], left-padded (``rollout.tokenize_prompts``).
    positions: [B, L_prompt] their position ids (``rollout.positions_from_attention_mask``).
    settings: ``rollout.SamplingSettings`` for which ``supports`` is True.
    Random numbers come from the global generator (``rollout.generate`` seeds it).
    """
    from transformers import StaticCache

    if not supports(settings):
        raise ValueError("the decode loop samples the full softmax only; use generate for top_k/top_p")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    draw = draw_inverse_cdf if sampler == "inverse_cdf" else draw_multinomial
    batch, prompt_len = query_ids.shape
    steps = settings.max_new_tokens
    device = query_ids.device
    eos = torch.tensor(eos_ids, device=device)
    cache = StaticCache(config=config, max_cache_len=prompt_len + steps)
    mask = torch.cat([query_mask, torch.ones(batch, steps, dtype=query_mask.dtype, device=device)], dim=1)
    out = lm(input_ids=query_ids, attention_mask=query_mask, position_ids=positions, cache=cache,
             use_cache=True, cache_position=torch.arange(prompt_len, device=device), logits_to_keep=1)
    position = positions[:, -1:]
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    tokens, raw_logits = [], []
    for step in range(steps):
        logits = out.logits[:, -1].float()
        if keep_logits:
            raw_logits.append(logits)
        scores = logits
        if step < settings.min_new_tokens:
            scores = logits.clone()
            scores[:, eos] = float("-inf")
        token = draw(scores, settings.temperature) if settings.do_sample else scores.argmax(dim=-1)
        token = torch.where(unfinished, token, torch.full_like(token, pad_id))
        tokens.append(token)
        unfinished &= ~torch.isin(token, eos)
        if step == steps - 1 or not unfinished.any():
            break
        position = position + 1
        cursor = prompt_len + step
        out = lm(input_ids=token[:, None], attention_mask=mask[:, :cursor + 1], position_ids=position,
                 cache=cache, use_cache=True, cache_position=torch.tensor([cursor], device=device))
    sequences = torch.cat([query_ids, torch.stack(tokens, dim=1)], dim=1)
    return DecodeOutput(sequences=sequences, logits=tuple(raw_logits) if keep_logits else None)
