"""The oneDNN-packed sampling path (machinery.packed_linear) samples the same distribution as the
plain one: the same tokens under a fixed seed, log-probs equal to float32 round-off, the same EOS
rule; and it leaves the model exactly as it found it."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import PROMPTS, stops_at_several_lengths

from course_utils.machinery import packed_linear
from course_utils.rollout import SamplingSettings, collect_rollout, generate, stop_token_ids

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")

SETTINGS = SamplingSettings(max_new_tokens=24, temperature=1.0)


@pytest.fixture()
def bundle(stopping_bundle, monkeypatch):
    # The tiny model's layers are below the size worth packing; pack them all for the test.
    monkeypatch.setattr(packed_linear, "MIN_ELEMENTS", 0)
    return stopping_bundle


def test_the_same_tokens_the_same_eos_rule_and_log_probs_to_round_off(bundle):
    plain = generate(bundle, prompts=PROMPTS, settings=SETTINGS, seed=3, keep_generation_logprobs=True, packed=False)
    fast = generate(bundle, prompts=PROMPTS, settings=SETTINGS, seed=3, keep_generation_logprobs=True, packed=True)
    assert torch.equal(fast.response_ids, plain.response_ids)
    for name in ("response_mask", "last_index", "ended_with_eos", "truncated"):
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name
    assert stops_at_several_lengths(plain), "the test needs responses that stop at EOS at different lengths"
    assert torch.allclose(fast.generation_logprobs, plain.generation_logprobs, atol=1e-5, rtol=0)


def test_frozen_forwards_agree_and_the_first_ratio_stays_one(bundle):
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    for old_logprobs_from in ("forward", "generation"):
        # Twice each: the second call reads the packed copies from the cache.
        plain = [collect_rollout(bundle, PROMPTS, settings, seed=5, packed=False, old_logprobs_from=old_logprobs_from)
                 for _ in range(2)]
        fast = [collect_rollout(bundle, PROMPTS, settings, seed=5, packed=True, old_logprobs_from=old_logprobs_from)
                for _ in range(2)]
        for a, b in zip(fast, plain):
            assert torch.equal(a.response_ids, b.response_ids)
            for name in ("old_logprobs", "ref_logprobs", "values"):
                assert torch.allclose(getattr(a, name), getattr(b, name), atol=1e-5, rtol=0), (old_logprobs_from, name)
        keep = plain[0].response_mask.bool()
        assert (plain[0].old_logprobs - plain[0].ref_logprobs)[keep].abs().max() > 1e-2  # the adapter matters


def test_a_packed_run_logs_what_a_plain_run_logs(tmp_path, monkeypatch):
    """Three smoke updates, packed and plain, same seed: every logged number agrees to float32
    round-off (a stale copy, sampling with the reference's weights, would log a KL of 0)."""
    from test_golden_metrics import run_variant

    overrides = {"total_updates": 3, "old_logprobs_from": "generation"}
    plain = run_variant(tmp_path / "plain", {**overrides, "packed_cpu_linears": False})
    monkeypatch.setattr(packed_linear, "MIN_ELEMENTS", 0)
    packed = run_variant(tmp_path / "packed", {**overrides, "packed_cpu_linears": True})
    assert plain["metrics"][-1]["kl_per_sequence"] != 0
    for a, b in zip(plain["metrics"], packed["metrics"]):
        for key in ("kl_per_sequence", "score", "policy_loss", "value_loss", "approx_kl", "response_length"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key


def test_merging_lora_in_for_packed_sampling_repacks_and_puts_the_base_copies_back(bundle):
    """merge_lora=True on the packed path: the adapted layers (and their groups) are packed with the
    merged weights for sampling, and the base copies come back afterwards, twice in a row."""
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    plain = generate(bundle, prompts=PROMPTS, settings=settings, seed=4, keep_generation_logprobs=True, packed=False)
    x = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        dense = bundle.policy.lm(input_ids=x).logits
    for _ in range(2):
        merged = generate(bundle, prompts=PROMPTS, settings=settings, seed=4, keep_generation_logprobs=True,
                          packed=True, merge_lora=True)
        assert torch.equal(merged.response_ids, plain.response_ids)
        assert torch.allclose(merged.generation_logprobs, plain.generation_logprobs, atol=1e-5, rtol=0)
        with torch.no_grad(), packed_linear.packed_linears(bundle.policy):  # the copies in the cache now
            assert torch.allclose(bundle.policy.lm(input_ids=x).logits, dense, atol=1e-4, rtol=0)
        with torch.no_grad(), bundle.reference_model() as reference, packed_linear.packed_linears(reference):
            assert not torch.allclose(reference.lm(input_ids=x).logits, dense, atol=1e-3)  # the adapter is off


def test_the_model_is_put_back_and_a_changed_weight_is_packed_again(bundle):
    policy = bundle.policy
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    linears = [m for m in policy.modules() if type(m) is nn.Linear]
    x = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        with packed_linear.packed_linears(policy) as swapped:
            assert swapped == len(linears) and all("forward" in m.__dict__ for m in linears)
            first = policy.lm(input_ids=x).logits
        assert [m for m in policy.modules() if type(m) is nn.Linear] == linears
        assert not any("forward" in m.__dict__ for m in linears)
        assert policy.state_dict().keys() == before.keys()
        assert all(torch.equal(v, before[k]) for k, v in policy.state_dict().items())
        # Change a weight in place: the cached packed copy is stale and must be rebuilt.
        layer = policy.base_model.model.layers[0].mlp.down_proj
        layer.weight.mul_(2.0)
        dense = policy.lm(input_ids=x).logits
        with packed_linear.packed_linears(policy):
            packed = policy.lm(input_ids=x).logits
    assert not torch.allclose(dense, first, atol=1e-4)
    assert torch.allclose(packed, dense, atol=1e-4, rtol=0)


def test_with_gradients_the_lora_gradients_match_the_dense_ones(bundle):
    policy = bundle.policy
    policy.train()
    x = torch.randint(0, 100, (3, 7))
    trainable = [p for name, p in policy.lm.named_parameters() if "lora_" in name]
    with torch.no_grad():  # a non-zero B, so that the gradient reaches A as well
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)

    def lora_grads():
        policy.zero_grad(set_to_none=True)
        policy.lm(input_ids=x).logits.square().mean().backward()
        return [p.grad.clone() for p in trainable]

    dense = lora_grads()
    with packed_linear.packed_linears(policy) as swapped:
        switched = [m for m in policy.modules() if "forward" in m.__dict__]
        packed = lora_grads()
    assert swapped == len(switched) > 0  # the frozen base layers, never a trainable one
    assert all(type(m) is nn.Linear and not m.weight.requires_grad for m in switched)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(packed, dense))
    assert any(float(g.abs().max()) > 0 for g in dense)


def test_skipped_where_it_does_not_apply(bundle):
    with torch.no_grad(), packed_linear.packed_linears(bundle.policy, enabled=False) as swapped:
        assert swapped == 0
    half = nn.Linear(8, 8).to(torch.bfloat16)
    assert not packed_linear.available(half)  # float32 only


def test_a_layer_keeps_its_hooks(bundle):
    # A forward hook on the LM head (as tests and tools add) still runs on the packed path.
    eos = stop_token_ids(bundle.tokenizer, bundle.policy.base_model)[0]
    head = bundle.policy.base_model.lm_head

    def push_eos(module, inputs, output):
        output = output.clone()
        output[..., eos] += 50.0
        return output

    handle = head.register_forward_hook(push_eos)
    try:
        fast = generate(bundle, prompts=PROMPTS, settings=SamplingSettings(max_new_tokens=4), seed=0, packed=True)
    finally:
        handle.remove()
    assert bool(fast.ended_with_eos.all()) and fast.response_mask.sum(1).tolist() == [1.0] * len(PROMPTS)


def test_q_k_v_and_gate_up_share_one_product_and_another_input_gets_its_own(bundle):
    """Layers that read one input are packed as one (FUSED_GROUPS); a member whose input a
    pre-hook changed must not be handed its slice of the product the first member computed."""
    policy = bundle.policy
    block = policy.base_model.model.layers[0]
    x = torch.randint(0, 100, (2, 5))
    doubled = block.self_attn.k_proj.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    try:
        with torch.no_grad():
            dense = policy.lm(input_ids=x).logits
            with packed_linear.packed_linears(policy):
                groups = {id(m.__dict__["forward"].func.__self__) for m in policy.modules()
                          if isinstance(m.__dict__.get("forward"), functools.partial)
                          and isinstance(m.__dict__["forward"].func.__self__, packed_linear._FusedGroup)}
                packed = policy.lm(input_ids=x).logits
    finally:
        doubled.remove()
    assert len(groups) == 2 * len(policy.base_model.model.layers)  # attention and MLP of each block
    assert torch.allclose(packed, dense, atol=1e-4, rtol=0)
    with torch.no_grad():
        assert not torch.allclose(policy.lm(input_ids=x).logits, dense, atol=1e-3)  # the hook matters


bf16 = pytest.mark.skipif(not packed_linear.available(nn.Linear(2, 2), torch.bfloat16),
                          reason="no bfloat16 oneDNN kernels on this CPU")


@bf16
def test_bfloat16_sampling_is_close_to_float32_but_not_equal_and_leaves_the_float32_copies_alone(bundle):
    """The opt-in bfloat16 sampler: its log-probs of its own tokens are off the float32 forward by
    bfloat16 rounding (more than float32 round-off, well inside the clip range); the float32
    copies used afterwards are untouched, and the bfloat16 ones are kept apart from them."""
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    fp32 = collect_rollout(bundle, PROMPTS, settings, seed=5, old_logprobs_from="generation")
    low = collect_rollout(bundle, PROMPTS, settings, seed=5, old_logprobs_from="generation", sampling_dtype="bfloat16")
    forward = collect_rollout(bundle, PROMPTS, settings, seed=5, old_logprobs_from="forward", sampling_dtype="bfloat16",
                              keep_generation_logprobs=True)
    keep = forward.response_mask.bool()
    error = (forward.generation_logprobs - forward.old_logprobs)[keep].abs()
    assert 1e-4 < error.mean() < 0.05 and error.max() < 0.2  # rounding, not float32 round-off, not a bug
    assert torch.equal(low.response_ids, forward.response_ids)  # same seed, same sampler
    assert torch.allclose(low.old_logprobs, forward.generation_logprobs, atol=1e-6)
    again = collect_rollout(bundle, PROMPTS, settings, seed=5, old_logprobs_from="generation")
    assert torch.allclose(again.old_logprobs, fp32.old_logprobs, atol=1e-6)  # float32 copies unchanged
    assert any(cache for cache in packed_linear._LOW[torch.bfloat16])
    packed_linear.forget([m for m in bundle.policy.modules() if type(m) is nn.Linear])
    assert not any(cache for cache in packed_linear._LOW[torch.bfloat16])


@bf16
def test_bfloat16_is_refused_with_gradients_and_off_the_packed_path(bundle):
    with pytest.raises(ValueError, match="sampling only"), packed_linear.packed_linears(bundle.policy,
                                                                                      compute_dtype=torch.bfloat16):
        pass
    with pytest.raises(ValueError, match="packed_cpu_linears=false"):
        generate(bundle, prompts=PROMPTS, settings=SETTINGS, packed=False, sampling_dtype="bfloat16")


@bf16
def test_a_changed_weight_is_packed_again_in_bfloat16(bundle):
    """The bfloat16 copies follow the weights like the float32 ones: an in-place change (an
    optimizer step) makes the next bfloat16 sample read the new weights."""
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0)
    before = generate(bundle, prompts=PROMPTS, settings=settings, seed=2, keep_generation_logprobs=True,
                      sampling_dtype="bfloat16")
    head = bundle.policy.lm.get_output_embeddings()
    with torch.no_grad():
        head.weight.mul_(3.0)  # sharper logits: other log-probs
    try:
        after = generate(bundle, prompts=PROMPTS, settings=settings, seed=2, keep_generation_logprobs=True,
                         sampling_dtype="bfloat16")
        plain = generate(bundle, prompts=PROMPTS, settings=settings, seed=2, keep_generation_logprobs=True,
                         packed=False)
    finally:
        with torch.no_grad():
            head.weight.div_(3.0)
    first = before.response_mask[:, 0].bool()
    assert (after.generation_logprobs[:, 0] - before.generation_logprobs[:, 0])[first].abs().max() > 1e-2
    assert torch.allclose(after.generation_logprobs[:, 0], plain.generation_logprobs[:, 0], atol=0.1)


def test_the_trainer_refuses_bfloat16_sampling_before_the_first_rollout(tmp_path):
    from course_utils.config import load_config
    from course_utils.trainer import PPOTrainer

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml", output_dir=str(tmp_path),
                         sampling_dtype="bfloat16", packed_cpu_linears=False)
    with pytest.raises(ValueError, match="packed_cpu_linears=false"):
        PPOTrainer(config, quiet=True)
