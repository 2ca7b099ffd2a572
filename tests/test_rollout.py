"""Rollouts: chat rendering, left padding, masks built from positions, log-probs and values that
match an unpadded per-row reference, the PPO ratio starting at 1, merged-LoRA generation, and
the clear errors. All on the tiny model except one test on the real default model (slow)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings as hyp_settings, strategies as st

from course_utils.machinery import hub
from course_utils.models import load_bundle
from course_utils.ppo_math import probability_ratio
from course_utils.rollout import (
    SamplingSettings,
    collect_rollout,
    decode_responses,
    generate,
    left_pad,
    positions_from_attention_mask,
    render_prompts,
    response_mask_from_ids,
    sequence_forward,
    stop_token_ids,
    tokenize_prompts,
)
from course_utils.lesson_aids.token_views import format_masked_tokens, masked_tokens_html, show_rollout, token_pieces

torch.set_num_threads(1)

EOS = 2  # SmolLM2: <|im_end|> is both the EOS and the pad token
PROMPTS = ["Hi", "What is 2 + 2? Answer briefly.", "x", "Write the word cat in capitals, nothing else."]


def eos_biased(bundle, bias: float = 9.0):
    """Make the random tiny model stop often (a hook adds `bias` to the EOS logit), so one batch
    holds empty responses, short ones and truncated ones. The hook acts on the LM head, so
    generation and every forward see the same, still consistent, policy."""

    def hook(module, inputs, output):
        output = output.clone()
        output[..., EOS] += bias
        return output

    bundle.policy.base_model.lm_head.register_forward_hook(hook)
    return bundle


def randomise_lora(bundle, std: float = 0.05, seed: int = 1):
    """Give the adapter non-zero B matrices, so policy != reference and merging changes weights."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in bundle.policy.lm.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return bundle


@pytest.fixture(scope="module")
def bundle(tiny_model_dir):
    """A tiny LoRA bundle with a non-zero adapter and a stop-happy EOS (not mutated by tests)."""
    return randomise_lora(eos_biased(load_bundle(tiny_model_dir, device="cpu", seed=0)))


@pytest.fixture(scope="module")
def rollout(bundle):
    prompts = PROMPTS * 2
    return collect_rollout(bundle, prompts, SamplingSettings(max_new_tokens=8), seed=3, keep_generation_logprobs=True)


# ----------------------------------------------------------------------------- masks


def mask_by_loop(ids: list[int], eos_ids: set[int]) -> tuple[list[float], int, bool, bool]:
    """Independent reference: walk the tokens, keep them until (and including) the first EOS."""
    mask, stopped = [], False
    for token in ids:
        mask.append(0.0 if stopped else 1.0)
        if token in eos_ids and not stopped:
            stopped = True
    last = max((i for i, m in enumerate(mask) if m), default=-1)
    return mask, last, stopped, (not stopped) and len(ids) > 0


@pytest.mark.parametrize(
    "ids, mask, last, ended, truncated",
    [
        ([EOS, 7, 8, 9], [1, 0, 0, 0], 0, True, False),  # EOS as the first token: an empty answer, kept
        ([5, 6, 7, 8], [1, 1, 1, 1], 3, False, True),  # no EOS: truncated at max length
        ([5, EOS, EOS, EOS], [1, 1, 0, 0], 1, True, False),  # pad == eos: the real EOS stays in
        ([5, 6, 7, EOS], [1, 1, 1, 1], 3, True, False),  # EOS exactly at the last position
        ([5, EOS, 6, EOS], [1, 1, 0, 0], 1, True, False),  # tokens after the first EOS are out
    ],
)
def test_response_mask_crafted_cases(ids, mask, last, ended, truncated):
    m, li, e, t = response_mask_from_ids(torch.tensor([ids]), EOS)
    assert m.tolist() == [[float(x) for x in mask]]
    assert m.dtype == torch.float32
    assert li.tolist() == [last] and e.tolist() == [ended] and t.tolist() == [truncated]


def test_mask_is_not_ids_not_equal_pad():
    """With pad == eos, the shortcut `ids != pad_id` drops the one EOS the policy chose."""
    ids = torch.tensor([[5, 6, EOS, EOS, EOS]])
    mask, *_ = response_mask_from_ids(ids, EOS)
    naive = (ids != EOS).float()
    assert mask.sum() == 3 and naive.sum() == 2
    assert mask[0, 2] == 1 and naive[0, 2] == 0


def test_batch_rows_of_different_lengths():
    ids = torch.tensor([
        [EOS, EOS, EOS, EOS, EOS],  # empty answer, then padding
        [11, 12, EOS, EOS, EOS],
        [11, 12, 13, 14, EOS],
        [11, 12, 13, 14, 15],  # truncated
    ])
    mask, last, ended, truncated = response_mask_from_ids(ids, EOS)
    assert mask.sum(-1).tolist() == [1, 3, 5, 5]
    assert last.tolist() == [0, 2, 4, 4]
    assert ended.tolist() == [True, True, True, False]
    assert truncated.tolist() == [False, False, False, True]


def test_several_stop_tokens():
    ids = torch.tensor([[5, 99, 6, EOS], [5, 6, EOS, 99]])
    mask, last, ended, _ = response_mask_from_ids(ids, [EOS, 99])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert last.tolist() == [1, 2]


@pytest.mark.parametrize("eos", [np.int64(EOS), torch.tensor(EOS), np.array([EOS, 99]), torch.tensor([EOS, 99]), (EOS,)],
                         ids=["numpy-int", "0-d-tensor", "numpy-array", "tensor", "tuple"])
def test_stop_ids_may_come_as_numpy_or_tensors(eos):
    ids = torch.tensor([[5, EOS, 6], [5, 6, 7]])
    mask, last, ended, _ = response_mask_from_ids(ids, eos)
    assert mask.tolist() == [[1, 1, 0], [1, 1, 1]] and ended.tolist() == [True, False]


def test_zero_width_response_is_defined():
    mask, last, ended, truncated = response_mask_from_ids(torch.zeros((2, 0), dtype=torch.long), EOS)
    assert mask.shape == (2, 0) and last.tolist() == [-1, -1]
    assert ended.tolist() == [False, False] and truncated.tolist() == [False, False]


@hyp_settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=6, max_size=6), min_size=1, max_size=5))
def test_response_mask_matches_plain_loop(rows):
    mask, last, ended, truncated = response_mask_from_ids(torch.tensor(rows), [EOS, 4])
    for b, ids in enumerate(rows):
        ref_mask, ref_last, ref_ended, ref_trunc = mask_by_loop(ids, {EOS, 4})
        assert mask[b].tolist() == ref_mask
        assert (int(last[b]), bool(ended[b]), bool(truncated[b])) == (ref_last, ref_ended, ref_trunc)


# ----------------------------------------------------------------------------- prompts


def test_render_prompts_uses_the_chat_template_with_generation_prompt(tiny_tokenizer):
    (text,) = render_prompts(tiny_tokenizer, ["Hi"])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    (with_system,) = render_prompts(tiny_tokenizer, ["Hi"], system="Be brief.")
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_no_chat_template_is_a_clear_error(tiny_tokenizer):
    bare = copy.deepcopy(tiny_tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        render_prompts(bare, ["Hi"])


def test_empty_prompts_are_clear_errors(tiny_tokenizer):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        render_prompts(tiny_tokenizer, ["Hi", "   "])
    with pytest.raises(ValueError, match="no prompts"):
        render_prompts(tiny_tokenizer, [])
    with pytest.raises(TypeError, match="list of strings"):
        render_prompts(tiny_tokenizer, "Hi")


def test_prompt_longer_than_the_context_is_a_clear_error(tiny_tokenizer):
    long_prompt = "word " * 600  # the tiny model has 512 positions
    with pytest.raises(ValueError, match=r"prompt 2 is \d+ tokens .* 512 positions.*max_new_tokens"):
        tokenize_prompts(tiny_tokenizer, ["Hi", long_prompt], max_new_tokens=16, max_context=512)


def test_prompt_too_long_raises_before_generation(bundle):
    with pytest.raises(ValueError, match="shorten the prompt to at most 504 tokens"):
        generate(bundle, None, ["Hi", "word " * 600], SamplingSettings(max_new_tokens=8))


def test_left_pad_mask_comes_from_lengths():
    ids, mask = left_pad([[7, EOS, 8], [9]], pad_id=EOS)
    assert ids.tolist() == [[7, EOS, 8], [EOS, EOS, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]  # the EOS inside row 0 is a prompt token


def test_prompt_containing_im_end_keeps_its_mask(tiny_tokenizer):
    """The chat prompt holds <|im_end|> (= pad) several times; its query mask must still be 1 on
    every prompt token, and the response mask must be 0 on all of them."""
    prompts = ["Say <|im_end|> twice: <|im_end|>", "ok"]
    query_ids, query_mask = tokenize_prompts(tiny_tokenizer, prompts)
    lengths = [len(tiny_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in render_prompts(tiny_tokenizer, prompts)]
    assert query_mask.sum(-1).tolist() == lengths
    row0 = query_ids[0][query_mask[0].bool()]
    assert (row0 == EOS).sum() >= 4  # template ends + the two in the text
    assert (query_mask != (query_ids != EOS).long()).any()  # `ids != pad` would get it wrong


def test_positions_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert positions_from_attention_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


# ----------------------------------------------------------------------------- log-probs and values


def per_row_reference(policy, query_ids, query_mask, response_ids, response_mask, temperature):
    """Independent reference: for each row alone, strip the padding, run the plain causal LM on
    [prompt tokens + response tokens] with default positions and no mask, and read
    log softmax(logits / T) one position to the left of each response token."""
    lm = policy.base_model if not policy.is_lora else policy.lm
    logprobs = torch.zeros(response_ids.shape)
    values = torch.zeros(response_ids.shape)
    for b in range(query_ids.shape[0]):
        prompt = query_ids[b][query_mask[b].bool()]
        n = int(response_mask[b].sum())
        seq = torch.cat([prompt, response_ids[b, :n]]).unsqueeze(0)
        out = lm(input_ids=seq, output_hidden_states=True)
        logp = torch.log_softmax(out.logits[0] / temperature, dim=-1)
        hidden = out.hidden_states[-1][0]
        for t in range(n):
            p = len(prompt) - 1 + t  # the position that predicts response token t
            logprobs[b, t] = logp[p, response_ids[b, t]]
            values[b, t] = policy.value_head(hidden[p]).squeeze()
    return logprobs, values


@torch.no_grad()
def test_sequence_forward_matches_unpadded_per_row_reference(bundle, rollout):
    policy = bundle.policy
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)  # non-zero values for this check
    try:
        args = (rollout.query_ids, rollout.query_mask, rollout.response_ids, rollout.response_mask)
        logprobs, values, logits = sequence_forward(policy, *args, temperature=0.7)
        ref_lp, ref_v = per_row_reference(policy, *args, temperature=0.7)
    finally:
        torch.nn.init.zeros_(policy.value_head.weight)
    keep = rollout.response_mask.bool()
    assert rollout.query_mask.min() == 0  # the batch really is left padded
    torch.testing.assert_close(logprobs[keep], ref_lp[keep], atol=1e-4, rtol=0)
    torch.testing.assert_close(values[keep], ref_v[keep], atol=1e-4, rtol=0)
    assert (logprobs[~keep] == 0).all() and (values[~keep] == 0).all()
    assert logits.shape == (*rollout.response_ids.shape, len(bundle.tokenizer))


def test_rollout_has_empty_short_and_truncated_rows(rollout):
    """The EOS-biased tiny model gives a batch that exercises every mask case at once."""
    lengths = rollout.response_lengths.tolist()
    assert 1 in lengths  # EOS as the first token
    assert rollout.truncated.any() or max(lengths) > 1
    for b in range(rollout.batch_size):
        ids = rollout.response_ids[b].tolist()
        ref_mask, ref_last, ref_ended, ref_trunc = mask_by_loop(ids, {EOS})
        assert rollout.response_mask[b].tolist() == ref_mask
        assert int(rollout.last_index[b]) == ref_last
        assert bool(rollout.ended_with_eos[b]) == ref_ended and bool(rollout.truncated[b]) == ref_trunc
        # after the first EOS the ids are the pad id
        assert all(i == EOS for i, m in zip(ids, ref_mask) if not m)


def test_empty_response_is_one_real_action(rollout, bundle):
    empty = [b for b in range(rollout.batch_size) if rollout.response_lengths[b] == 1]
    assert empty
    for b in empty:
        assert rollout.response_ids[b, 0] == EOS and rollout.last_index[b] == 0
        assert rollout.old_logprobs[b, 0] < 0 and (rollout.old_logprobs[b, 1:] == 0).all()
        assert rollout.response_texts[b] == ""


def test_generation_logprobs_equal_forward_logprobs(rollout):
    """The sampler's own logits (merged LoRA, KV cache) and the no-grad forward (unmerged,
    whole sequence) give the same log-probs."""
    keep = rollout.response_mask.bool()
    diff = (rollout.generation_logprobs - rollout.old_logprobs)[keep].abs().max()
    assert diff < 1e-4


def test_ratio_is_one_at_the_first_ppo_step(bundle, rollout):
    """The training forward (train mode, gradients on, minibatch of rows) reproduces the old
    log-probs: the first ratio π/π_old is 1 within 1e-4."""
    policy = bundle.policy
    policy.train()
    try:
        for rows in ([0, 1, 2, 3], [4, 5, 6, 7]):
            mb = rollout.select(rows)
            logprobs, values, _ = sequence_forward(
                policy, mb.query_ids, mb.query_mask, mb.response_ids, mb.response_mask, mb.settings.temperature
            )
            assert logprobs.requires_grad
            ratio = probability_ratio(logprobs, mb.old_logprobs)
            keep = mb.response_mask.bool()
            assert (ratio[keep] - 1).abs().max() < 1e-4
            torch.testing.assert_close(values.detach(), mb.values, atol=1e-5, rtol=0)
    finally:
        policy.eval()


def test_reference_logprobs_differ_from_policy_and_match_adapter_off(bundle, rollout):
    keep = rollout.response_mask.bool()
    assert (rollout.old_logprobs - rollout.ref_logprobs)[keep].abs().max() > 1e-3  # the adapter matters
    with torch.no_grad(), bundle.policy.reference_mode():
        ref, _, _ = sequence_forward(bundle.policy, rollout.query_ids, rollout.query_mask, rollout.response_ids,
                                     rollout.response_mask, rollout.settings.temperature)
    torch.testing.assert_close(ref, rollout.ref_logprobs, atol=1e-6, rtol=0)


def test_values_start_at_zero(rollout):
    assert (rollout.values == 0).all()


def test_merge_then_unmerge_restores_the_weights(bundle):
    lm = bundle.policy.lm
    before = {n: p.detach().clone() for n, p in lm.named_parameters() if "base_layer" in n}
    with torch.no_grad(), bundle.policy.merged_adapter():
        changed = max((p - before[n]).abs().max().item() for n, p in lm.named_parameters() if "base_layer" in n)
    after = max((p.detach() - before[n]).abs().max().item() for n, p in lm.named_parameters() if "base_layer" in n)
    assert changed > 1e-4  # merging really folded the adapter in
    assert after < 1e-6  # unmerging gives the weights back up to round-off


def test_merge_in_bfloat16_restores_the_weights_bit_for_bit(tiny_model_dir):
    """In bfloat16 a merge/unmerge round trip would round each weight by up to 0.4%; the saved
    copy puts the exact weights back, so the reference cannot drift."""
    half = randomise_lora(load_bundle(tiny_model_dir, device="cpu", dtype=torch.bfloat16))
    lm = half.policy.lm
    before = {n: p.detach().clone() for n, p in lm.named_parameters() if "base_layer" in n}
    with torch.no_grad():
        with half.policy.merged_adapter(exact=False):
            pass
        rounded = any(not torch.equal(p, before[n]) for n, p in lm.named_parameters() if "base_layer" in n)
        for n, p in lm.named_parameters():  # undo the rounding for the real check below
            if n in before:
                p.copy_(before[n])
        generate(half, None, PROMPTS[:2], SamplingSettings(max_new_tokens=3), seed=0)  # exact by default
    assert rounded  # the plain round trip does change bfloat16 weights ...
    assert all(torch.equal(p, before[n]) for n, p in lm.named_parameters() if "base_layer" in n)  # ... ours does not


def test_merged_and_unmerged_generation_agree(bundle):
    settings = SamplingSettings(max_new_tokens=6)
    merged = generate(bundle, None, PROMPTS, settings, seed=11, merge_lora=True, keep_generation_logprobs=True)
    plain = generate(bundle, None, PROMPTS, settings, seed=11, merge_lora=False, keep_generation_logprobs=True)
    assert torch.equal(merged.response_ids, plain.response_ids)
    torch.testing.assert_close(merged.generation_logprobs, plain.generation_logprobs, atol=1e-4, rtol=0)


def test_seed_reproduces_and_leaves_global_rng_alone(bundle):
    settings = SamplingSettings(max_new_tokens=6)
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = generate(bundle, None, PROMPTS, settings, seed=5)
    after = torch.rand(1)
    b = generate(bundle, None, PROMPTS, settings, seed=5)
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(after, expected_next)


def test_model_generation_config_cannot_change_sampling(bundle):
    base = bundle.policy.base_model
    settings = SamplingSettings(max_new_tokens=6)
    clean = generate(bundle, None, PROMPTS, settings, seed=7)
    saved = copy.deepcopy(base.generation_config)
    base.generation_config.repetition_penalty = 50.0
    base.generation_config.top_k = 1
    base.generation_config.no_repeat_ngram_size = 1
    try:
        hidden_settings = generate(bundle, None, PROMPTS, settings, seed=7)
        assert base.generation_config.repetition_penalty == 50.0  # restored after generate
    finally:
        base.generation_config = saved
    assert torch.equal(clean.response_ids, hidden_settings.response_ids)


def test_truncating_samplers_warn():
    with pytest.warns(UserWarning, match="off-policy"):
        SamplingSettings(top_k=50).check()
    with pytest.raises(ValueError, match="temperature"):
        SamplingSettings(temperature=0).check()


def test_stop_token_ids_include_generation_config_extras(tiny_tokenizer):
    class Model:
        class generation_config:
            eos_token_id = [EOS, 77]

    assert stop_token_ids(tiny_tokenizer, Model()) == [EOS, 77]
    assert stop_token_ids(tiny_tokenizer) == [EOS]


# ----------------------------------------------------------------------------- the Rollout record


def test_rollout_shapes_and_timings(rollout):
    b, t = rollout.response_ids.shape
    assert rollout.query_ids.shape[0] == b and rollout.query_mask.shape == rollout.query_ids.shape
    for name in ("response_mask", "old_logprobs", "ref_logprobs", "values"):
        assert getattr(rollout, name).shape == (b, t)
        assert getattr(rollout, name).dtype == torch.float32
    assert rollout.last_index.dtype == torch.long and rollout.truncated.dtype == torch.bool
    assert rollout.num_tokens == int(rollout.response_mask.sum())
    assert set(rollout.timings) >= {"generate_s", "policy_forward_s", "reference_forward_s", "decode_s"}
    assert len(rollout.response_texts) == b and len(rollout.prompts) == b


def test_select_takes_rows(rollout):
    part = rollout.select([2, 0])
    assert torch.equal(part.response_ids, rollout.response_ids[[2, 0]])
    assert part.prompts == [rollout.prompts[2], rollout.prompts[0]]
    assert part.response_texts == [rollout.response_texts[2], rollout.response_texts[0]]
    assert part.to("cpu").batch_size == 2


def test_response_texts_drop_special_tokens(tiny_tokenizer):
    ids = torch.tensor([tiny_tokenizer("Hello there", add_special_tokens=False)["input_ids"] + [EOS, EOS]])
    mask, *_ = response_mask_from_ids(ids, EOS)
    assert decode_responses(tiny_tokenizer, ids, mask) == ["Hello there"]


def test_collect_rollout_checks_records_length(bundle):
    with pytest.raises(ValueError, match="one record per prompt"):
        collect_rollout(bundle, ["a", "b"], SamplingSettings(max_new_tokens=2), records=[{}])


# ----------------------------------------------------------------------------- pictures of the mask


def test_masked_token_text_and_html(tiny_tokenizer):
    ids = tiny_tokenizer("Hi there", add_special_tokens=False)["input_ids"] + [EOS, EOS]
    mask = [0] * (len(ids) - 2) + [1, 0]
    text = format_masked_tokens(tiny_tokenizer, ids, mask)
    assert text.endswith("[<|im_end|>]<|im_end|>")  # the kept EOS in brackets, the pad EOS not
    html = masked_tokens_html(tiny_tokenizer, ids, mask, title="demo")
    assert html.count("<span") == len(ids)
    assert "&lt;|im_end|&gt;" in html and "<|im_end|>" not in html
    assert html.count("#c6efce") == 1
    assert token_pieces(tiny_tokenizer, tiny_tokenizer("a\nb", add_special_tokens=False)["input_ids"])[1] == "↵"
    with pytest.raises(ValueError, match="mask entries"):
        format_masked_tokens(tiny_tokenizer, ids, mask[:-1])


def test_show_rollout_draws_prompt_and_response(rollout, bundle):
    text = show_rollout(rollout, bundle.tokenizer, 0)
    assert "<|im_start|>assistant↵" in text and "response tokens" in text
    assert "<span" in show_rollout(rollout, bundle.tokenizer, 0, html=True)


# ----------------------------------------------------------------------------- the real model


@pytest.mark.slow
def test_real_model_ratio_and_merge_consistency():
    """SmolLM2-135M-Instruct with a non-zero rank-16 adapter: merged generation, unmerged forward
    and the training forward agree (ratio 1 within 1e-4); unmerging restores the weights."""
    bundle = randomise_lora(load_bundle(hub.DEFAULT_MODEL, device="cpu", seed=0), std=0.01)
    lm = bundle.policy.lm
    before = {n: p.detach().clone() for n, p in lm.named_parameters() if "base_layer" in n}
    prompts = ["What is 2 + 3? Answer with a number.", "Say hi.", "Name one colour."]
    r = collect_rollout(bundle, prompts, SamplingSettings(max_new_tokens=12), seed=0, keep_generation_logprobs=True)
    keep = r.response_mask.bool()
    assert max((p.detach() - before[n]).abs().max().item() for n, p in lm.named_parameters() if "base_layer" in n) < 1e-6
    assert (r.generation_logprobs - r.old_logprobs)[keep].abs().max() < 1e-4
    bundle.policy.train()
    logprobs, _, _ = sequence_forward(bundle.policy, r.query_ids, r.query_mask, r.response_ids, r.response_mask, 0.8)
    assert (probability_ratio(logprobs, r.old_logprobs)[keep] - 1).abs().max() < 1e-4
    assert (r.old_logprobs - r.ref_logprobs)[keep].abs().max() > 1e-3
    assert all(isinstance(t, str) for t in r.response_texts) and r.response_texts[0].strip()


def test_show_rollout_hides_left_padding_unless_asked(rollout, bundle):
    row = int(rollout.query_mask.sum(-1).argmin())  # the row with the most left padding
    pads = int((rollout.query_mask[row] == 0).sum())
    assert pads > 0
    hidden = show_rollout(rollout, bundle.tokenizer, row, html=True)
    shown = show_rollout(rollout, bundle.tokenizer, row, html=True, show_padding=True)
    assert shown.count("<span") - hidden.count("<span") == pads
    assert f"{pads} left-padding tokens not shown" in hidden


def test_rollout_repr_is_short(rollout):
    text = repr(rollout)
    assert text.startswith("Rollout(8 responses") and "tensor" not in text and "generate_s" in text


def test_old_logprobs_and_values_can_come_from_the_generation(bundle):
    """old_logprobs_from='generation' skips the policy forward; its numbers (merged weights, KV
    cache, hidden states of the sampler) match the forward's within float32 round-off."""
    policy = bundle.policy
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    try:
        settings = SamplingSettings(max_new_tokens=8)
        reused = collect_rollout(bundle, PROMPTS, settings, seed=21, old_logprobs_from="generation")
        forward = collect_rollout(bundle, PROMPTS, settings, seed=21)
    finally:
        torch.nn.init.zeros_(policy.value_head.weight)
    assert torch.equal(reused.response_ids, forward.response_ids)
    keep = forward.response_mask.bool()
    assert forward.values[keep].abs().max() > 1e-3  # the check below is not 0 == 0
    torch.testing.assert_close(reused.old_logprobs, forward.old_logprobs, atol=1e-4, rtol=0)
    torch.testing.assert_close(reused.values, forward.values, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="'forward' or 'generation'"):
        collect_rollout(bundle, PROMPTS, settings, old_logprobs_from="cache")


def test_generation_values_from_the_norm_hook_equal_hidden_states(bundle, monkeypatch):
    """The sampler's values come from a hook on the final norm; they must be the very numbers
    output_hidden_states gives, and the hook must be gone afterwards."""
    import course_utils.rollout as rollout_module

    policy = bundle.policy
    norm = rollout_module._final_norm(policy.base_model)
    assert norm is not None and not norm._forward_hooks
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    try:
        settings = SamplingSettings(max_new_tokens=8)
        hooked = generate(bundle, prompts=PROMPTS, settings=settings, seed=5, keep_generation_values=True,
                          decode_loop=False)
        assert not norm._forward_hooks
        monkeypatch.setattr(rollout_module, "_final_norm", lambda model: None)
        collected = generate(bundle, prompts=PROMPTS, settings=settings, seed=5, keep_generation_values=True,
                             decode_loop=False)
    finally:
        torch.nn.init.zeros_(policy.value_head.weight)
    assert torch.equal(hooked.response_ids, collected.response_ids)
    assert hooked.generation_values.abs().max() > 1e-3
    assert torch.equal(hooked.generation_values, collected.generation_values)
