"""The library's sampling loop (machinery.decode_loop) samples what transformers' generate samples.

- drawing with torch.multinomial, as generate does, it returns generate's tokens exactly under a
  seed, with the same EOS rule, the same EOS ban (min_new_tokens) and the same raw logits;
- its own sampler (two uniform numbers per row, inverted through a block's and a token's CDF) draws
  each token with the softmax's probability (checked by frequency against the exact softmax);
- the log-probs it keeps equal a separate forward's, and the responses stop at EOS as before."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from conftest import PROMPTS, stops_at_several_lengths

from course_utils.machinery import decode_loop
from course_utils.rollout import SamplingSettings, collect_rollout, generate, positions_from_attention_mask

SETTINGS = SamplingSettings(max_new_tokens=24, temperature=1.0)
FIELDS = ("response_ids", "response_mask", "last_index", "ended_with_eos", "truncated")


@pytest.fixture()
def multinomial_loop(monkeypatch):
    monkeypatch.setattr(decode_loop, "decode", functools.partial(decode_loop.decode, sampler="multinomial"))


@pytest.mark.parametrize("settings", [
    SETTINGS,
    SamplingSettings(max_new_tokens=24, temperature=0.7),
    SamplingSettings(max_new_tokens=24, do_sample=False),
    SamplingSettings(max_new_tokens=12, temperature=1.0, min_new_tokens=6),
], ids=["t1", "t0.7", "greedy", "eos-banned-6"])
def test_drawing_as_generate_does_gives_generates_tokens(stopping_bundle, multinomial_loop, settings):
    kept = dict(keep_generation_logprobs=True, keep_generation_values=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*min_new_tokens.*")  # the off-policy note
        reference = generate(stopping_bundle, prompts=PROMPTS, settings=settings, seed=3, decode_loop=False, **kept)
        loop = generate(stopping_bundle, prompts=PROMPTS, settings=settings, seed=3, decode_loop=True, **kept)
    for name in FIELDS:
        assert torch.equal(getattr(loop, name), getattr(reference, name)), name
    assert torch.allclose(loop.generation_logprobs, reference.generation_logprobs, atol=1e-5, rtol=0)
    assert torch.allclose(loop.generation_values, reference.generation_values, atol=1e-5, rtol=0)
    lengths = loop.response_mask.sum(1)
    if settings.min_new_tokens:
        assert bool((lengths >= settings.min_new_tokens).all())
    elif settings.do_sample and settings.temperature == 1.0:
        assert stops_at_several_lengths(loop), "the test needs responses that stop at EOS at different lengths"


def frequencies_match(counts: torch.Tensor, probs: torch.Tensor, rows: int) -> bool:
    """Every frequency within 4.5 binomial standard errors of its exact probability."""
    se = (probs * (1 - probs) / rows).sqrt()
    return bool(((counts / rows - probs).abs() <= 4.5 * se + 1e-9).all())


@pytest.mark.parametrize("block", [256, 4, 2])  # one block; blocks and a padded last block; pairs
def test_the_inverse_cdf_draws_each_token_with_its_softmax_probability(block):
    scores = torch.tensor([2.0, 0.5, -1.0, float("-inf"), 1.0, -3.0, 0.0])
    temperature = 0.8
    exact = torch.softmax(scores.double() / temperature, dim=0)
    rows = 40_000
    torch.manual_seed(0)
    drawn = decode_loop.draw_inverse_cdf(scores.expand(rows, -1), temperature, block=block)
    counts = torch.bincount(drawn, minlength=len(scores)).double()
    assert counts[3] == 0  # a banned token (score -inf) is never drawn
    assert frequencies_match(counts, exact, rows)
    # generate's own sampler, an independent draw, agrees too (the reference is not the only judge).
    torch.manual_seed(1)
    other = torch.bincount(decode_loop.draw_multinomial(scores.expand(rows, -1), temperature), minlength=7).double()
    assert frequencies_match(other, exact, rows)


def test_several_blocks_and_a_padded_last_block_draw_at_the_softmax_rates():
    # 1,000 tokens: three full blocks of 256 and a padded fourth; the mass spread over all four.
    vocab, rows = 1_000, 20_000
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(vocab, generator=generator) * 0.5
    scores[[7, 300, 600, 990]] += torch.tensor([4.0, 3.0, 3.5, 4.5])
    exact = torch.softmax(scores.double() / 0.9, 0)
    torch.manual_seed(0)
    counts = torch.bincount(decode_loop.draw_inverse_cdf(scores.expand(rows, -1), 0.9), minlength=vocab).double()
    assert counts.sum() == rows and int(counts.nonzero().max()) < vocab
    assert frequencies_match(counts, exact, rows)
    block_counts = torch.nn.functional.pad(counts, (0, 24)).view(4, 256).sum(1)
    block_exact = torch.nn.functional.pad(exact, (0, 24)).view(4, 256).sum(1)
    assert frequencies_match(block_counts, block_exact, rows)


def test_the_default_loop_keeps_the_eos_rule_and_log_probs_equal_a_forward(stopping_bundle):
    rollouts = [collect_rollout(stopping_bundle, PROMPTS, SETTINGS, seed=seed, old_logprobs_from=source)
                for seed in (3, 4) for source in ("forward", "generation")]
    for rollout in rollouts:
        ids, mask = rollout.response_ids, rollout.response_mask
        for row in range(len(PROMPTS)):
            n = int(mask[row].sum())
            assert bool((mask[row, :n] == 1).all()) and bool((mask[row, n:] == 0).all())
            assert bool((ids[row, n:] == stopping_bundle.tokenizer.pad_token_id).all())
            assert bool(rollout.ended_with_eos[row]) != bool(rollout.truncated[row])
    forward, from_sampler = rollouts[0], rollouts[1]  # seed 3: the same responses either way
    assert torch.equal(forward.response_ids, from_sampler.response_ids)
    assert torch.allclose(from_sampler.old_logprobs, forward.old_logprobs, atol=1e-5, rtol=0)
    assert torch.allclose(from_sampler.values, forward.values, atol=1e-5, rtol=0)
    assert stops_at_several_lengths(forward)


def test_truncation_and_top_k_go_to_generate(stopping_bundle, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the decode loop was used")

    monkeypatch.setattr(decode_loop, "decode", refuse)
    truncated = SamplingSettings(max_new_tokens=4, top_k=5)
    with pytest.warns(UserWarning, match="top_k"):
        generate(stopping_bundle, prompts=PROMPTS[:2], settings=truncated, seed=0)
    generate(stopping_bundle, prompts=PROMPTS[:2], settings=SETTINGS, seed=0, decode_loop=False)
    assert not decode_loop.supports(truncated) and decode_loop.supports(SETTINGS)


def test_it_refuses_what_it_does_not_reproduce(stopping_bundle):
    from course_utils.rollout import tokenize_prompts

    ids, mask = tokenize_prompts(stopping_bundle.tokenizer, PROMPTS[:1], None, 4, None)
    lm, config = stopping_bundle.policy.lm, stopping_bundle.policy.base_model.config
    with pytest.raises(ValueError, match="top_k"):
        decode_loop.decode(lm, config, ids, mask, mask, SamplingSettings(top_p=0.9), [0], 0)
    with pytest.raises(ValueError, match="sampler"):
        decode_loop.decode(lm, config, ids, mask, mask, SETTINGS, [0], 0, sampler="gumbel")


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_the_loop_draws_generates_tokens_for_each_preset_architecture(architecture):
    """SmolLM2 is a Llama, the hub preset Qwen2.5 a Qwen2: both from a random 2-layer config, left
    padding, EOS likely, the loop (drawing as generate does) against generate itself."""
    import transformers

    kind = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}[architecture]
    config = getattr(transformers, kind[0])(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                            eos_token_id=1, pad_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    lm = getattr(transformers, kind[1])(config).eval()
    def likely_eos(module, inputs, logits):  # p(EOS) about 0.16 a step: rows end at different lengths
        logits = logits.clone()
        logits[..., 1] += 2.5
        return logits

    lm.get_output_embeddings().register_forward_hook(likely_eos)
    ids = torch.randint(2, 64, (5, 7))
    mask = torch.ones_like(ids)
    for row, pad in enumerate([3, 0, 5, 1, 0]):
        ids[row, :pad], mask[row, :pad] = 0, 0
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    positions = positions_from_attention_mask(mask)
    generation = settings.generation_config([1], 0, output_logits=True)
    generation.disable_compile = True
    torch.manual_seed(7)
    reference = lm.generate(input_ids=ids, attention_mask=mask, generation_config=generation)
    torch.manual_seed(7)
    loop = decode_loop.decode(lm, config, ids, mask, positions, settings, [1], 0, keep_logits=True,
                              sampler="multinomial")
    assert torch.equal(loop.sequences, reference.sequences)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(loop.logits, reference.logits))
    ends = [(row == 1).nonzero()[0].item() if bool((row == 1).any()) else None for row in loop.sequences[:, 7:]]
    assert len({e for e in ends if e is not None}) > 1  # rows ended at different steps: the pads after were checked
