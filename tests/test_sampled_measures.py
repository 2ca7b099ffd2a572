"""``python -m course_utils measure``: pass@1, pass@k and token entropy of a run's policy, sampled."""

from __future__ import annotations

import json

import pytest
import torch

from course_utils import ppo_math as pm
from course_utils import sft, tasks
from course_utils.comparison import sampled_measures as sm
from course_utils.machinery import hub
from course_utils.models import LoRASettings, load_bundle
from course_utils.rollout import SamplingSettings, generate, sequence_forward
from course_utils.trainer import balanced_subset


@pytest.fixture(scope="module")
def bundle():
    torch.set_num_threads(2)
    return load_bundle(hub.TINY_MODEL, lora=LoRASettings(rank=4, alpha=8), device="cpu", seed=0)


def test_pass_rates_agree_with_sft_and_entropy_with_a_direct_forward(bundle):
    records = balanced_subset(tasks.load_split("validation"), 5)
    result = sm.sampled_measures(bundle, records, samples=3, max_new_tokens=4, seed=7, chunk=4)
    # the same draws as rollout.sampled_answers with the same chunks and seed, graded the same way
    from course_utils import rollout
    same = rollout.sampled_answers(bundle, [r.prompt for r in records], 3, 4, seed=7, chunk=4)
    counts = [sum(tasks.check(r, a).passed for a in group) for r, group in zip(records, same)]
    assert result["pass_at_1"] == pytest.approx(sum(c / 3 for c in counts) / 5)
    assert result["pass_at_k"] == pytest.approx(sum(c > 0 for c in counts) / 5)
    assert result["k"] == 3 and result["prompts"] == 5 and set(result["per_family"]) == {r.family for r in records}
    # the entropy: mean over every answer token, recomputed chunk by chunk from the same draws
    repeated = [r for r in records for _ in range(3)]
    total, count = 0.0, 0.0
    for i in range(0, len(repeated), 4):
        out = generate(bundle.policy, bundle.tokenizer, prompts=[r.prompt for r in repeated[i:i + 4]],
                       settings=SamplingSettings(temperature=1.0, max_new_tokens=4, do_sample=True), seed=7 + i)
        with torch.no_grad():
            _, _, logits = sequence_forward(bundle.policy, out.query_ids, out.query_mask, out.response_ids,
                                            out.response_mask)
        total += float(pm.masked_sum(pm.entropy_from_logits(logits), out.response_mask))
        count += float(out.response_mask.sum())
    assert result["entropy"] == pytest.approx(total / count, rel=1e-5)
    assert result["entropy"] > 0.5  # the random tiny model is far from deterministic
    with pytest.raises(ValueError, match="samples must be >= 1"):
        sm.sampled_measures(bundle, records, samples=0)


def test_the_command_measures_an_sft_run_and_refuses_a_folder_that_is_none(tmp_path, capsys):
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=4, epochs=1, batch_size=4, eval_prompts=10, max_new_tokens=2,
                           output_dir=str(tmp_path), run_name="run", threads=2, lora_rank=4, lora_alpha=8)
    sft.train_sft(config, progress=False)
    out = sm.main([str(tmp_path / "run"), "--prompts", "4", "--samples", "2"])
    saved = json.loads((tmp_path / "run" / "sampled_validation.json").read_text())
    assert saved == out[str(tmp_path / "run")] and saved["seed"] == 0 and saved["prompts"] == 4
    assert "pass@2" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="neither an SFT run"):
        sm.main([str(tmp_path)])
