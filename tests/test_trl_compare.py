"""Lesson 10's comparison harness (course_utils.comparison.trl_compare).

Pure functions are checked on hand-made tensors against plain loops. The harness itself runs
TRL 1.12.0's PPOTrainer and ours for real on a tiny model, edited so that it often emits EOS
(a random tiny model never does), so that the padding differences exist in the batch: the tensors
read out of TRL's loop must equal what TRL's own mask code gives, the score must sit where TRL's
code puts it, and the logged metrics must follow from the captured tensors.
"""

from __future__ import annotations

import json
import math
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils import ppo_math as pm
from course_utils.comparison import trl_adapter as ta
from course_utils.comparison import trl_compare as tc
from course_utils.rollout import response_mask_from_ids

torch.set_num_threads(1)
trl = pytest.importorskip("trl")
if trl.__version__ != ta.TRL_VERSION:  # pragma: no cover - depends on the environment
    pytest.skip(f"lesson 10 pins trl=={ta.TRL_VERSION}, found {trl.__version__}", allow_module_level=True)

EOS, PAD = 2, 0  # SmolLM2's <|im_end|>, and <|endoftext|>: the pad token TRL gets


# ---------------------------------------------------------------- a tiny model that stops


@pytest.fixture(scope="module")
def eos_model_dir(tmp_path_factory, tiny_model_dir):
    """The 2-layer test model edited so that EOS is likely at every step (about 1 in 5 at T = 0.8).

    Embedding dimension 0 is set to 1 for every token (1.85 for EOS) and no layer writes to it, so
    after the final norm it dominates the hidden state; with tied embeddings every token's logit
    gets the same large term, EOS a larger one.
    """
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("eos-tiny")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        embedding = model.model.embed_tokens.weight
        embedding[:, 0] = 1.0
        embedding[EOS, 0] = 1.85
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0].zero_()
            layer.mlp.down_proj.weight[0].zero_()
    model.save_pretrained(out)
    for f in Path(tiny_model_dir).iterdir():
        if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "generation_config.json"):
            shutil.copy(f, out / f.name)
    return out


def tiny_config(model, tmp_path, **overrides):
    values = dict(model=str(model), reward="letters", batch_size=4, max_new_tokens=8, ppo_epochs=2,
                  num_minibatches=2, total_updates=2, threads=1, output_dir=str(tmp_path), max_grad_norm=0.01)
    values.update(overrides)
    return tc.lesson_config(**values)


@pytest.fixture(scope="module")
def runs(eos_model_dir, tmp_path_factory):
    """TRL's PPOTrainer and ours, 2 updates each on the same configuration (in this process)."""
    config = tiny_config(eos_model_dir, tmp_path_factory.mktemp("runs"))
    return types.SimpleNamespace(config=config, trl=tc.run_trl(config), ours=tc.run_ours(config))


# ---------------------------------------------------------------- configuration


def test_trl_args_follow_our_config(tmp_path):
    config = tc.lesson_config()
    args = tc.trl_args_for(config, str(tmp_path))
    assert (args.response_length, args.temperature, args.num_ppo_epochs) == (32, 0.8, 2)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == config.batch_size == 8
    assert args.gradient_accumulation_steps == 1 and args.num_mini_batches == config.num_minibatches
    assert args.stop_token == "eos" and args.adam_epsilon == tc.ADAM_EPS and not args.bf16
    assert args.total_episodes == config.total_updates * config.batch_size
    rows = tc.config_mapping(config, args)
    assert all(r["same"] in (True, None) for r in rows), [r for r in rows if r["same"] is False]
    by_field = {r["ours"]: r for r in rows}
    assert by_field["lr_schedule"]["trl_value"] == "constant"
    assert by_field["ent_coef"]["same"] is None  # TRL has no such setting
    # A value TRL does not share shows up as a difference.
    other = tc.trl_args_for(tc.lesson_config(lr_schedule="linear"), str(tmp_path))
    assert {r["ours"]: r for r in tc.config_mapping(config, other)}["lr_schedule"]["same"] is False


@pytest.mark.parametrize("overrides, message", [
    ({"ent_coef": 0.01}, "set ent_coef=0"),
    ({"adaptive_kl": True}, "set adaptive_kl=False"),
    ({"whiten_advantages": False}, "set it True"),
    ({"kl_estimator": "k2"}, "k1 or k3 only"),
    ({"whiten_rewards": True}, "set whiten_rewards=False"),
    ({"target_kl": 0.01}, "set target_kl=0"),
])
def test_settings_trl_cannot_express_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tc.trl_args_for(tc.lesson_config(**overrides), str(tmp_path))


def test_mapping_doc_sections_are_read_from_the_docs():
    text = tc.mapping_doc_sections(["PPO", "KL to the reference"])
    assert text.startswith("## PPO") and "`cliprange`" in text and "`kl_coef`" in text
    assert "## Sampling" not in text
    with pytest.raises(ValueError, match="sections:"):
        tc.mapping_doc_sections(["No such section"])


def test_prompt_batches_are_the_ones_our_trainer_draws(tiny_model_dir, tmp_path):
    from course_utils.trainer import PPOTrainer

    config = tiny_config(tiny_model_dir, tmp_path, total_updates=3)
    trainer = PPOTrainer(config, quiet=True)
    expected = [[r.id for r in trainer.prompts.next_batch()] for _ in range(3)]
    assert [[r.id for r in batch] for batch in tc.prompt_batches(config, 3)] == expected


# ---------------------------------------------------------------- the reward adapter


def test_text_reward_model_scores_decoded_answers_like_our_trainer(tiny_model_dir, tiny_tokenizer):
    from course_utils import tasks
    from course_utils.comparison.trl_adapter import trl_prompt_ids, trl_tokenizer
    from course_utils.rewards import CheckerReward

    with pytest.raises(RuntimeError, match="occurs inside a prompt"):  # SmolLM2's own pad token is <|im_end|>
        trl_prompt_ids(tiny_tokenizer, ["Hi"])
    tokenizer = trl_tokenizer(tiny_model_dir)
    assert tokenizer.pad_token_id == PAD
    records = tasks.load_split("train")[:2]
    prompt_ids = trl_prompt_ids(tokenizer, [r.prompt for r in records])
    answers = [records[0].target, "a wrong answer"]  # full credit, then (almost) none
    width = max(map(len, prompt_ids))
    rows = []
    for ids, answer in zip(prompt_ids, answers):
        response = tokenizer(answer, add_special_tokens=False)["input_ids"] + [EOS, 99, 98]  # junk after EOS
        response = (response + [PAD] * 12)[:12]
        rows.append([PAD] * (width - len(ids)) + ids + response)
    query_responses = torch.tensor(rows)
    model = tc.TextRewardModel(CheckerReward("partial"), tokenizer, records, prompt_ids)
    _, scores, _ = model.trl_get_reward(query_responses, PAD, width)
    expected = CheckerReward("partial").score([r.prompt for r in records], answers, records)
    torch.testing.assert_close(scores, expected)
    assert scores[0] == 1.0 and scores[1] < 1.0
    unknown = query_responses.clone()
    unknown[:, width - 3] = 5  # a prompt TRL was never given
    with pytest.raises(KeyError, match="not one of the prompts"):
        model.trl_get_reward(unknown, PAD, width)


# ---------------------------------------------------------------- pure helpers


def plain_trl_masks(responses, pad, stop):
    """TRL's mask rules written as plain loops over one row at a time."""
    out = {"sequence_length": [], "padding_mask": [], "padding_mask_p1": [], "score_index": []}
    T = len(responses[0])
    for row in responses:
        row = list(row)
        if stop is not None and stop in row:
            cut = row.index(stop)
            row = row[:cut + 1] + [pad] * (T - cut - 1)
        first_pad = row.index(pad) if pad in row else T
        n = first_pad - 1
        out["sequence_length"].append(n)
        out["padding_mask"].append([t > n for t in range(T)])
        out["padding_mask_p1"].append([t > n + 1 for t in range(T)])
        out["score_index"].append(n + 1 if n + 1 < T else n)
    return {k: torch.tensor(v) for k, v in out.items()}


@pytest.mark.parametrize("pad", [PAD, EOS], ids=["pad!=eos", "pad==eos"])
def test_trl_masks_match_plain_loops(pad):
    responses = torch.tensor([[7, 8, EOS, 9, 9, 9], [EOS, 9, 9, 9, 9, 9], [5, 6, 7, 8, 9, 4], [5, 6, 7, 8, 9, EOS]])
    got = tc.trl_masks(responses, pad, EOS)
    expected = plain_trl_masks(responses.tolist(), pad, EOS)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    ours, *_ = response_mask_from_ids(responses, EOS)
    if pad == PAD:  # TRL's policy mask equals ours (the EOS is in); its score goes one past the EOS
        assert torch.equal(~got["padding_mask"], ours.bool())
        assert got["score_index"].tolist() == [3, 1, 5, 5]
    else:  # pad == eos: the EOS drops out, an EOS-only answer has no real token at all
        assert ((~got["padding_mask"]).sum(1) == ours.sum(1) - torch.tensor([1, 1, 0, 1])).all()
        assert got["sequence_length"].tolist() == [1, -1, 5, 4]


def test_trl_attention_mask_hides_prompt_turn_ends_when_pad_is_eos():
    ids = torch.tensor([[PAD, 1, 30, EOS, 1, 40, EOS, 1, 50, 60, EOS]])
    assert tc.trl_attention_mask(ids, PAD).tolist() == [[x != PAD for x in ids[0].tolist()]]
    with_eos_as_pad = tc.trl_attention_mask(ids, EOS)[0]
    assert (~with_eos_as_pad).sum() == 3 and not with_eos_as_pad[3] and with_eos_as_pad[0]


def test_microbatch_stats_against_numpy():
    g = torch.Generator().manual_seed(0)
    padding = torch.tensor([[False] * 5 + [True] * 3, [False] * 8, [False] * 2 + [True] * 6])
    new = torch.randn(3, 8, generator=g) * 0.1 - 2.0
    old = new + torch.randn(3, 8, generator=g) * 0.05
    new, old = new.masked_fill(padding, 1.0), old.masked_fill(padding, 1.0)  # INVALID_LOGPROB
    logits = torch.randn(3, 8, 11, generator=g)
    stats = tc.microbatch_stats(new, old, logits, padding, padding)
    real = ~padding.numpy()
    d = (new - old).numpy()
    p = np.exp(logits.numpy() - logits.numpy().max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    h = -(p * np.log(p)).sum(-1)
    assert stats["n_real"] == real.sum() == 15 and stats["n_all"] == 24
    assert math.isclose(stats["approxkl_trl"], 0.5 * (d**2).mean(), rel_tol=1e-5)
    assert math.isclose(stats["approxkl_real"], 0.5 * (d[real] ** 2).mean(), rel_tol=1e-5)
    assert math.isclose(stats["approxkl_real_k3"], (np.exp(d[real]) - 1 - d[real]).mean(), rel_tol=1e-4)
    # Padding contributes log-ratio 0: TRL's number is the real one diluted by n_real / n_all.
    assert math.isclose(stats["approxkl_trl"], stats["approxkl_real"] * 15 / 24, rel_tol=1e-5)
    assert math.isclose(stats["ratio_trl"], (np.exp(d[real]).sum() + 9) / 24, rel_tol=1e-5)
    assert math.isclose(stats["entropy_trl"], h.mean(), rel_tol=1e-5)
    assert math.isclose(stats["entropy_real"], h[real].mean(), rel_tol=1e-5)


def test_our_view_puts_the_score_on_the_eos_and_runs_gae_backwards():
    lp = torch.tensor([[-1.0, -2.0, -0.5, 1.0, 1.0], [-0.3, -0.4, -0.2, -0.1, -0.6]])
    ref = torch.tensor([[-1.2, -1.5, -0.5, 1.0, 1.0], [-0.3, -0.5, -0.1, -0.1, -0.9]])
    batch = {"responses": torch.tensor([[5, 6, EOS, PAD, PAD], [5, 6, 7, 8, 9]]), "logprobs": lp, "ref_logprobs": ref,
             "values": torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0], [0.5, 0.4, 0.3, 0.2, 0.1]]),
             "scores": torch.tensor([2.0, -1.0])}
    view = tc.our_view_of_trl_batch(batch, EOS, kl_coef=0.1, gamma=0.9, lam=0.8)
    assert view["mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert view["last_index"].tolist() == [2, 4]
    for i in range(2):  # a plain loop: KL penalty per real token, the score on the last one, GAE
        n = int(view["mask"][i].sum())
        r = [-0.1 * (lp[i, t] - ref[i, t]).item() for t in range(n)]
        r[-1] += batch["scores"][i].item()
        v = batch["values"][i, :n].tolist()
        adv, running = [0.0] * n, 0.0
        for t in reversed(range(n)):
            nxt = v[t + 1] if t + 1 < n else 0.0
            running = r[t] + 0.9 * nxt - v[t] + 0.9 * 0.8 * running
            adv[t] = running
        assert torch.allclose(view["rewards"][i, :n], torch.tensor(r), atol=1e-6)
        assert torch.allclose(view["advantages"][i, :n], torch.tensor(adv), atol=1e-6)
        assert (view["rewards"][i, n:] == 0).all() and (view["values"][i, n:] == 0).all()


def test_side_by_side_means_markdown_and_plot():
    ours = [{"score": 0.2, "approx_kl": 1e-4, "entropy": 2.0}, {"score": 0.4, "approx_kl": 3e-4, "entropy": 2.5}]
    trl_logs = [{"objective/scores": 0.1, "policy/approxkl_avg": 2e-5, "val/ratio_var": math.nan},
                {"objective/scores": 0.3, "policy/approxkl_avg": 4e-5, "val/ratio_var": math.nan}]
    rows = {r["trl"]: r for r in tc.side_by_side(ours, trl_logs)}
    scores = rows["objective/scores"]
    assert math.isclose(scores["trl_mean"], 0.2) and math.isclose(scores["our_mean"], 0.3)
    assert rows["objective/scores"]["our_values"] == [0.2, 0.4]
    assert math.isnan(rows["val/ratio_var"]["trl_mean"]) and math.isnan(rows["objective/kl"]["trl_mean"])
    assert rows["objective/entropy"]["ours"] is None and math.isnan(rows["objective/entropy"]["our_mean"])
    text = tc.side_by_side_markdown(list(rows.values()))
    assert text.count("\n") == len(rows) + 1 and "| `objective/scores` | 0.2 | `score` | 0.3 |" in text
    fig = tc.plot_side_by_side(list(rows.values()), names=["objective/scores", "policy/approxkl_avg"])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2
    # One bar per update and trainer, side by side around the update's integer tick.
    scores_panel = visible[0]
    assert len(scores_panel.patches) == 4
    assert [round(b.get_height(), 6) for b in scores_panel.patches] == [0.1, 0.3, 0.2, 0.4]  # TRL, then ours
    centres = [b.get_x() + b.get_width() / 2 for b in scores_panel.patches]
    assert centres[0] < 1 < centres[2] and centres[1] < 2 < centres[3]
    assert list(scores_panel.get_xticks()) == [1, 2]
    with pytest.raises(ValueError, match="TRL metric names"):
        tc.plot_side_by_side(list(rows.values()), names=["score"])


def test_side_by_side_plot_shows_ratio_minus_one_names_both_metrics_and_keeps_legends_off_the_bars():
    """The ratio panel of lesson 10 looked like 1.0 everywhere on a 0-1 axis, a legend covered a bar,
    and the titles used only our names while the table uses TRL's."""
    ours = [{"ratio_mean": 0.986, "approx_kl": 3e-3}, {"ratio_mean": 1.001, "approx_kl": 3e-4}]
    trl_logs = [{"val/ratio": 0.999, "policy/approxkl_avg": 6e-4}, {"val/ratio": 1.0002, "policy/approxkl_avg": 1e-4}]
    rows = tc.side_by_side(ours, trl_logs)
    fig = tc.plot_side_by_side(rows, names=["val/ratio", "policy/approxkl_avg"])
    kl_panel, ratio_panel = [ax for ax in fig.axes if ax.get_visible()]  # in METRIC_PAIRS order
    # drawn as ratio - 1: TRL's bars, then ours
    assert [b.get_height() for b in ratio_panel.patches] == pytest.approx([-0.001, 0.0002, -0.014, 0.001])
    assert "val/ratio / ratio_mean" in ratio_panel.get_title() and "drawn as ratio − 1" in ratio_panel.get_title()
    assert "policy/approxkl_avg / approx_kl" in kl_panel.get_title() and "k2" in kl_panel.get_title()
    assert "padding" in kl_panel.get_title()
    # one legend for the figure, none inside a panel
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["TRL", "ours"]


def test_map_trl_metrics_uses_our_names():
    log = {"objective/kl": 1.5, "objective/entropy": 40.0, "loss/policy_avg": -0.1, "eps": 3}
    assert tc.map_trl_metrics(log) == {"kl_per_sequence": 1.5, "policy_loss": -0.1}


def test_ppo_memory_by_the_zero_rule_of_thumb():
    parts = tc.ppo_memory_gb(1e9)
    assert parts == {"policy": 16.0, "critic": 16.0, "reference": 2.0, "reward": 2.0, "total": 36.0}
    assert tc.ppo_memory_gb(7e9, critic_params=1e9)["total"] == pytest.approx(7 * 18 + 18)


def test_whitening_on_two_processes_is_global_and_trl_is_local():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 7, generator=g, dtype=torch.float64)
    x[:3] += 2.0  # the two halves differ in distribution, so local statistics differ from global ones
    lengths = torch.tensor([7, 3, 1, 5, 7, 2])
    mask = (torch.arange(7)[None] < lengths[:, None]).double()
    out = tc.whiten_on_processes(x, mask, world_size=2)
    assert out["parts"] == [(0, 3), (3, 6)]
    torch.testing.assert_close(out["global"], out["one_process"], atol=1e-9, rtol=0)
    real = x[mask.bool()]
    by_hand = torch.where(mask.bool(), (x - real.mean()) / real.std(), torch.zeros(()))
    torch.testing.assert_close(out["one_process"], by_hand, atol=1e-6, rtol=0)
    for a, b in out["parts"]:  # TRL: each process whitens its own rows
        part = x[a:b][mask[a:b].bool()]
        local = torch.where(mask[a:b].bool(), (x[a:b] - part.mean()) / part.std(), torch.zeros(()))
        torch.testing.assert_close(out["local_trl"][a:b], local, atol=1e-6, rtol=0)
    assert (out["local_trl"] - out["global"]).abs().max() > 0.5


# ---------------------------------------------------------------- the two trainers, for real


def test_both_trainers_see_the_same_prompts_and_take_the_same_steps(runs):
    config = runs.config
    assert runs.trl["prompts"] == runs.ours["prompts"]
    steps = config.ppo_epochs * config.num_minibatches
    assert runs.trl["optimizer_steps"] == [steps] * 2 == [m["optimizer_steps"] for m in runs.ours["metrics"]]
    assert len(runs.trl["metrics"]) == 2 and len(runs.trl["batches"]) == 2
    assert runs.trl["info"]["reward_calls"] == 2 and runs.trl["info"]["stop_token_id"] == EOS
    for pair in tc.METRIC_PAIRS:  # every name in the mapping exists on its side
        assert pair.trl in runs.trl["metrics"][0], pair.trl
        assert pair.ours is None or pair.ours in runs.ours["metrics"][0], pair.ours
    assert runs.trl["mapped"][0]["episodes"] == runs.ours["metrics"][0]["episodes"] == config.batch_size


def test_gradient_accumulation_merges_minibatches_into_one_step(eos_model_dir, tmp_path, monkeypatch):
    # Why trl_args_for sets gradient_accumulation_steps = 1: with accumulation m, TRL steps once per epoch.
    config = tiny_config(eos_model_dir, tmp_path, total_updates=1)
    original = tc.trl_args_for

    def accumulating(config, output_dir, total_updates=None):
        args = original(config, output_dir, total_updates)
        args.per_device_train_batch_size = config.batch_size // config.num_minibatches
        args.gradient_accumulation_steps = config.num_minibatches
        return args

    monkeypatch.setattr(tc, "trl_args_for", accumulating)
    result = tc.run_trl(config, 1, capture=False)
    assert result["optimizer_steps"] == [config.ppo_epochs]
    assert len(result["microbatches"][0]) == config.ppo_epochs * config.num_minibatches


def test_captured_masks_are_what_trls_own_code_gives(runs):
    early = 0
    for batch in runs.trl["batches"]:
        masks = tc.trl_masks(batch["responses"], PAD, EOS)
        assert torch.equal(masks["postprocessed"], batch["postprocessed_responses"])
        assert torch.equal(masks["sequence_length"], batch["sequence_lengths"])
        assert torch.equal(masks["padding_mask"], batch["padding_mask"])
        assert torch.equal(masks["padding_mask_p1"], batch["padding_mask_p1"])
        assert torch.equal(masks["score_index"], batch["actual_end"])
        early += int((batch["sequence_lengths"] < batch["responses"].shape[1] - 1).sum())
    assert early > 0, "no response ended before the window: the EOS-prone model no longer stops"


def test_trl_score_sits_one_past_the_eos_and_ours_on_it(runs):
    config = runs.config
    for batch in runs.trl["batches"]:
        score_part = batch["rewards"] - batch["non_score_reward"]
        rows = torch.arange(len(batch["scores"]))
        torch.testing.assert_close(score_part[rows, batch["actual_end"]], batch["scores"])
        score_part[rows, batch["actual_end"]] = 0
        assert score_part.abs().max() < 1e-6  # nowhere else
        view = tc.our_view_of_trl_batch(batch, EOS, config.kl_coef, config.gamma, config.lam)
        assert torch.equal(view["mask"].bool(), ~batch["padding_mask"])  # pad != eos: same policy mask
        ended = view["last_index"] < batch["responses"].shape[1] - 1
        assert torch.equal(batch["actual_end"][ended], view["last_index"][ended] + 1)
        assert torch.equal(batch["actual_end"][~ended], view["last_index"][~ended])
        torch.testing.assert_close(view["rewards"][rows, view["last_index"]],
                                   batch["scores"] - config.kl_coef * batch["kl"][rows, view["last_index"]])


def test_trl_kl_and_logged_objectives_follow_from_its_tensors(runs):
    for batch, log in zip(runs.trl["batches"], runs.trl["metrics"]):
        real = ~batch["padding_mask"]
        ours = pm.kl_estimate(batch["logprobs"], batch["ref_logprobs"], "k1")
        torch.testing.assert_close(batch["kl"][real], ours[real])  # logr = ref - logprobs, kl = -logr
        assert (batch["kl"][~real] == 0).all()  # INVALID_LOGPROB on both sides: log-ratio 0
        assert math.isclose(log["objective/kl"], batch["kl"].sum(1).mean().item(), rel_tol=1e-5, abs_tol=1e-7)
        assert math.isclose(log["objective/scores"], batch["scores"].mean().item(), rel_tol=1e-6)


def test_trl_whitens_the_raw_advantages_locally_and_zeroes_padding(runs):
    for batch in runs.trl["batches"]:
        real = ~batch["padding_mask"]
        expected = pm.masked_whiten(batch["raw_advantages"], real, distributed=False)
        torch.testing.assert_close(batch["advantages"], expected, atol=1e-5, rtol=1e-5)


def test_trl_metrics_are_averaged_over_padding(runs):
    for log, micro in zip(runs.trl["metrics"], runs.trl["microbatches"]):
        assert len(micro) == runs.config.ppo_epochs * runs.config.num_minibatches
        for mb in micro:
            assert math.isclose(mb["approxkl_trl"], mb["approxkl_real"] * mb["n_real"] / mb["n_all"],
                                rel_tol=1e-4, abs_tol=1e-12)
            assert mb["n_value"] >= mb["n_real"]  # the value mask is one position longer where there is room
        for key, name in (("approxkl_trl", "policy/approxkl_avg"), ("ratio_trl", "val/ratio"),
                          ("entropy_trl", "policy/entropy_avg")):
            assert math.isclose(log[name], np.mean([mb[key] for mb in micro]), rel_tol=1e-5, abs_tol=1e-9), name
    padded = [mb for micro in runs.trl["microbatches"] for mb in micro if mb["n_real"] < mb["n_all"]]
    assert padded, "no padded micro-batch"
    assert any(not math.isclose(mb["entropy_trl"], mb["entropy_real"], rel_tol=1e-3) for mb in padded)


def test_trl_loss_has_no_entropy_term_and_its_gradients_are_never_clipped(runs):
    for micro in runs.trl["microbatches"]:
        for mb in micro:
            assert math.isclose(mb["loss"], mb["pg_plus_vf"], rel_tol=1e-6, abs_tol=1e-9)
    norms = [n for update in runs.trl["grad_norms"] for n in update]
    limit = runs.trl["info"]["max_grad_norm"]
    assert limit == runs.config.max_grad_norm == 0.01
    # Norms measured right before each optimizer step: clipping would have left them <= limit.
    assert len(norms) == sum(runs.trl["optimizer_steps"]) and min(norms) > limit
    # Ours logs the norm before clipping it to the same limit.
    assert all(m["grad_norm"] > limit for m in runs.ours["metrics"])


def test_results_survive_a_save_and_load(runs, tmp_path):
    tc.save_result(runs.trl, tmp_path)
    loaded = tc.load_result(tmp_path)
    assert loaded["metrics"] == json.loads(json.dumps(runs.trl["metrics"]))
    for got, expected in zip(loaded["batches"], runs.trl["batches"]):
        assert set(got) == set(expected) and all(torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k]))
                                                 for k in expected)
    mb, mb0 = loaded["microbatches"][0][0], runs.trl["microbatches"][0][0]
    assert torch.equal(mb["logprobs_diff"], mb0["logprobs_diff"]) and mb["approxkl_trl"] == mb0["approxkl_trl"]


def test_run_in_child_returns_the_result_and_reports_a_failure(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path / "runs", total_updates=1)
    result = tc.run_in_child("ours", config, 1, tmp_path / "ours")
    assert result["side"] == "ours" and len(result["metrics"]) == 1 and result["info"]["child_wall_s"] > 0
    assert (tmp_path / "ours" / tc.RESULT_JSON).is_file()
    bad = tiny_config("no-such-model", tmp_path / "runs", total_updates=1)
    with pytest.raises(RuntimeError, match="no-such-model"):
        tc.run_in_child("ours", bad, 1, tmp_path / "bad")
    with pytest.raises(ValueError, match='"trl" or "ours"'):
        tc.run_in_child("both", config, 1, tmp_path / "x")


def test_our_loop_on_two_processes_counts_the_global_batch(tmp_path):
    common = {"model": "tiny-smollm2", "reward": "letters", "lora_rank": 4, "lora_alpha": 8, "batch_size": 4,
              "num_minibatches": 2, "ppo_epochs": 1, "max_new_tokens": 8, "total_updates": 1, "eval_every": 1,
              "eval_prompts": 4, "num_sample_prompts": 2, "threads": 1, "stop_min_entropy": 0.0,
              "stop_max_entropy": 20.0, "output_dir": str(tmp_path)}
    one = tc.run_ppo_processes(1, {**common, "run_name": "p1"})
    two = tc.run_ppo_processes(2, {**common, "run_name": "p2"})
    assert one["summary"]["world_size"] == 1 and two["summary"]["world_size"] == 2
    assert two["summary"]["ranks_in_sync"] is True
    assert two["metrics"][0]["episodes"] == one["metrics"][0]["episodes"] == 4
    assert two["metrics"][0]["optimizer_steps"] == one["metrics"][0]["optimizer_steps"]
    assert two["evals"][0] == one["evals"][0]  # greedy answers of the same weights before training
    assert "torch.distributed.run" in two["command"]
    with pytest.raises(ValueError, match=">= 1"):
        tc.run_ppo_processes(0, common)


def test_the_one_monkeypatch_context_puts_trl_back_even_on_an_error():
    from trl.experimental.ppo import ppo_trainer as trl_ppo

    before = trl_ppo.get_reward
    with pytest.raises(RuntimeError, match="boom"):
        with ta.patched_trl(get_reward=lambda original: ("wrapped", original)):
            assert trl_ppo.get_reward == ("wrapped", before)
            raise RuntimeError("boom")
    assert trl_ppo.get_reward is before
