"""Design (h), retention: the forward KL from the start against independent references (a loop, a
brute-force sum over every sequence of a toy model, unpadded forwards of the tiny model), the gain
and change arithmetic, and the post-hoc measures of a seed on the tiny model."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from course_utils import retention, tasks
from course_utils.machinery import hub


def test_the_answer_kl_is_the_sum_over_real_positions_of_the_kl_over_the_vocabulary():
    g = torch.Generator().manual_seed(0)
    start, cur = torch.randn(2, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    expected = []
    for b in range(2):  # by hand: softmax and the sum written out, position by position
        total = 0.0
        for t in range(3):
            if mask[b, t]:
                zp = sum(math.exp(x) for x in start[b, t].tolist())
                zq = sum(math.exp(x) for x in cur[b, t].tolist())
                for a in range(5):
                    p, q = math.exp(start[b, t, a]) / zp, math.exp(cur[b, t, a]) / zq
                    total += p * math.log(p / q)
        expected.append(total)
    got = retention.sequence_forward_kl(start, cur, mask)
    assert got.shape == (2,) and torch.allclose(got, torch.tensor(expected), atol=1e-5)
    assert not torch.allclose(got, retention.sequence_forward_kl(cur, start, mask), atol=1e-3)  # a direction
    assert torch.allclose(retention.sequence_forward_kl(start, start, mask), torch.zeros(2), atol=1e-6)


def toy_logits(table: torch.Tensor, sequence: tuple) -> torch.Tensor:
    """A toy autoregressive model over V tokens: the logits after each prefix of ``sequence``, read
    from ``table[prefix id]`` (prefix id: the prefix as a number in base V, with its length)."""
    rows = []
    for t in range(len(sequence)):
        prefix_id = sum(a * 3 ** i for i, a in enumerate(sequence[:t])) + 3 ** t - 1  # a distinct id per prefix
        rows.append(table[prefix_id])
    return torch.stack(rows)[None]  # [1, T, V]


def test_the_mean_over_the_starts_answers_is_the_kl_between_the_two_sequence_distributions():
    g = torch.Generator().manual_seed(1)
    v, t = 3, 3
    start_table, table = torch.randn(40, v, generator=g), torch.randn(40, v, generator=g)

    def logprob(tab, seq):
        lp = torch.log_softmax(toy_logits(tab, seq)[0], -1)
        return float(sum(lp[i, a] for i, a in enumerate(seq)))

    sequences = list(itertools.product(range(v), repeat=t))
    p = {s: math.exp(logprob(start_table, s)) for s in sequences}
    assert sum(p.values()) == pytest.approx(1.0)
    # Brute force: KL between the two distributions over all 27 answers.
    exact = sum(p[s] * (logprob(start_table, s) - logprob(table, s)) for s in sequences)
    # The estimator's expectation under the start: the per-answer sum weighted by p(answer).
    ones = torch.ones(1, t)
    expectation = sum(p[s] * float(retention.sequence_forward_kl(toy_logits(start_table, s), toy_logits(table, s), ones))
                      for s in sequences)
    assert expectation == pytest.approx(exact, rel=1e-5) and exact > 0.05
    reverse = sum(math.exp(logprob(table, s)) * (logprob(table, s) - logprob(start_table, s)) for s in sequences)
    assert abs(reverse - exact) > 1e-3  # the two directions differ here, so the test tells them apart


@pytest.fixture(scope="module")
def two_tiny_policies():
    """The tiny model (the start) and the same with a random non-zero LoRA adapter (the trained policy)."""
    from course_utils.models import LoRASettings, load_bundle

    start = load_bundle(hub.TINY_MODEL, device="cpu", seed=0)
    moved = load_bundle(hub.TINY_MODEL, lora=LoRASettings(rank=4, alpha=8), device="cpu", seed=0)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, parameter in moved.policy.lm.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=g))
    return start, moved


def test_the_kl_from_the_start_on_the_tiny_model_matches_unpadded_forwards(two_tiny_policies):
    from course_utils.rollout import SamplingSettings, generate

    start, moved = two_tiny_policies
    prompts = [r.prompt for r in tasks.load_split("test")[:3]]
    got = retention.forward_kl_from_start(start, moved, start.tokenizer, prompts, samples=2, max_new_tokens=5,
                                          seed=7, chunk=16)
    assert got["answers"] == 6 and got["kl_per_answer"] > 0
    assert got["kl_per_token"] * got["tokens"] == pytest.approx(got["kl_per_answer"] * got["answers"])
    # Reference: the same answers (same sampler, seed and chunk), then one plain forward per answer
    # without padding, the KL summed over the vocabulary at each answer position.
    r = generate(start.policy, start.tokenizer, [p for p in prompts for _ in range(2)],
                 SamplingSettings(temperature=1.0, max_new_tokens=5, do_sample=True), seed=7)
    totals = []
    for row in range(6):
        prompt = r.query_ids[row][r.query_mask[row].bool()]
        n = int(r.response_mask[row].sum())
        ids = torch.cat([prompt, r.response_ids[row, :n]])[None]
        with torch.no_grad():
            lp = [torch.log_softmax(m.policy.lm(input_ids=ids).logits[0].double(), -1) for m in (start, moved)]
        first = len(prompt) - 1  # the logits there predict the first answer token
        kl = sum(float((lp[0][i].exp() * (lp[0][i] - lp[1][i])).sum()) for i in range(first, first + n))
        totals.append(kl)
    assert got["kl_per_answer"] == pytest.approx(sum(totals) / 6, rel=1e-3)
    assert retention.forward_kl_from_start(start, start, start.tokenizer, prompts, samples=2, max_new_tokens=5,
                                           seed=7)["kl_per_answer"] == pytest.approx(0.0, abs=1e-5)


def test_gain_on_the_trained_families_and_change_on_the_others():
    before = {"a": 0.2, "b": 0.4, "c": 0.5, "d": 0.9}
    after = {"a": 0.6, "b": 0.6, "c": 0.1, "d": 0.9}
    out = retention.gain_and_change(before, after, ["a", "b"])
    assert out["gain_trained"] == pytest.approx(30.0) and out["change_others"] == pytest.approx(-20.0)
    with pytest.raises(ValueError, match="nothing measures forgetting"):
        retention.gain_and_change(before, after, ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"\['e'\]"):
        retention.gain_and_change(before, after, ["e"])


def test_measure_seed_writes_every_familys_pass_rate_the_gain_the_change_and_the_kl(two_tiny_policies, tiny_model_dir,
                                                                                    monkeypatch):
    from course_utils.comparison import retention_arms

    start, moved = two_tiny_policies
    folder = tiny_model_dir  # the start's folder: the tiny model (its zero LoRA adapter changes nothing)
    monkeypatch.setattr(retention_arms, "MAX_NEW_TOKENS", 4)  # seconds, not minutes, on the tiny model
    trained = ["json_object", "uppercase_word"]
    out = retention_arms.measure_seed(str(folder), moved, trained, seed=0, samples=1)
    assert set(out["before"]) == set(out["after"]) == set(tasks.TASK_FAMILIES)
    assert out["gain_trained"] == pytest.approx(retention.gain_and_change(out["before"], out["after"], trained)["gain_trained"])
    assert out["kl_from_start"]["trained"]["answers"] == 20 and out["kl_from_start"]["others"]["answers"] == 80
    assert out["kl_from_start"]["trained"]["kl_per_answer"] > 0
    same = retention_arms.measure_seed(str(folder), start, trained, seed=0, samples=1)
    assert same["kl_from_start"]["others"]["kl_per_answer"] == pytest.approx(0.0, abs=1e-5)
    assert same["gain_trained"] == 0 and same["change_others"] == 0


def test_a_ppo_runs_curve_is_its_gain_and_change_at_each_evaluation(tmp_path):
    from course_utils.comparison import retention_arms

    evals = [{"update": 0, "pass_rate_per_task": {"a": 0.0, "b": 0.5}},
             {"update": 2, "pass_rate_per_task": {"a": 0.5, "b": 0.3}}]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"time_update_s": 30.0}) + "\n" for _ in range(2)))
    curve = retention_arms.ppo_curve(tmp_path, ["a"])
    assert [(p["update"], p["training_minutes"]) for p in curve] == [(0, 0.0), (2, 1.0)]
    assert curve[1]["gain_trained"] == pytest.approx(50.0) and curve[1]["change_others"] == pytest.approx(-20.0)


# ---------------------------------------------------------------------------------------------
# PPO on a subset of the families, evaluated on every family


def test_ppo_trains_on_task_families_and_evaluates_on_eval_families():
    from course_utils.config import PPOConfig
    from course_utils.trainer import load_prompts

    trained = ["json_object", "uppercase_word"]
    config = PPOConfig(task_families=trained, eval_families=list(tasks.TASK_FAMILIES), eval_prompts=100)
    train, evaluated, _, _ = load_prompts(config)
    assert {r.family for r in train} == set(trained) and len(train) == 80
    assert {r.family for r in evaluated} == set(tasks.TASK_FAMILIES) and len(evaluated) == 100
    _, narrow, _, _ = load_prompts(PPOConfig(task_families=trained, eval_prompts=100))
    assert {r.family for r in narrow} == set(trained)  # without eval_families: as before
    with pytest.raises(ValueError, match=r"eval_families has unknown families \['json'\]"):
        PPOConfig(eval_families=["json"]).validate()


def test_an_evaluation_of_every_family_records_the_pass_rate_on_the_trained_ones(tmp_path, monkeypatch):
    from pathlib import Path

    from course_utils import trainer as tr
    from course_utils.config import load_config

    trained = ["json_object", "uppercase_word"]
    smoke = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
    config = load_config(smoke, task_families=trained, eval_families=list(tasks.TASK_FAMILIES), eval_prompts=20,
                         output_dir=str(tmp_path))
    trainer = tr.PPOTrainer(config, quiet=True)
    gold = {r.prompt: r.target for r in trainer.eval_records if r.family in trained}
    # Right answers on the trained families' prompts only: 4 of 20 prompts pass, all of them trained.
    monkeypatch.setattr(tr, "greedy_answers", lambda bundle, prompts, *a, **k: [gold.get(p, "?") for p in prompts])
    result = trainer.evaluate()
    assert set(result["pass_rate_per_task"]) == set(tasks.TASK_FAMILIES)
    assert result["pass_rate"] == pytest.approx(0.2) and result["pass_rate_trained"] == pytest.approx(1.0)


def test_the_held_out_stop_rule_reads_the_trained_families_when_others_are_evaluated():
    from types import SimpleNamespace

    from course_utils.machinery import stop_rules

    config = SimpleNamespace(stop_hacking_patience=1, eval_every=1)
    history = [{"score": 0.1}, {"score": 0.9}]
    # The trained families improved while the others were forgotten: not reward hacking.
    evals = [{"pass_rate": 0.5, "pass_rate_trained": 0.3}, {"pass_rate": 0.4, "pass_rate_trained": 0.6}]
    stop, _ = stop_rules.check_heldout(history, evals, config, stop_rules.Streaks())
    assert stop is None
    plain = [{"pass_rate": 0.5}, {"pass_rate": 0.4}]  # every family trained: the overall rate decides
    assert stop_rules.check_heldout(history, plain, config, stop_rules.Streaks())[0] is not None


# ---------------------------------------------------------------------------------------------
# assemble_designs.py --retention-arm: the arm -> held-out set -> per-seed shape, paired by seed


def load_assemble_designs():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "runs" / "example" / "designs" / "assemble_designs.py"
    spec = importlib.util.spec_from_file_location("assemble_designs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_json(tmp_path, arm: str, change: float, kl: float):
    """A finished design (h) arm as bench-learning writes it: two seeds, trained on a and b of a, b, c."""
    seeds, measured = [], []
    for seed in (0, 1):
        before, after = {"a": 0.2, "b": 0.4, "c": 0.6}, {"a": 0.6, "b": 0.6, "c": 0.6 + change / 100}
        run = {"seed": seed, "sft": {"model": str(tmp_path / f"w{seed}" / "model")}}
        run.update({"model": str(tmp_path / f"s{seed}" / "model"), "steps": 50} if arm == "sft_continue"
                   else {"run_dir": str(tmp_path / f"p{seed}"), "updates": 40})
        seeds.append(run)
        measured.append({"seed": seed, "before": before, "after": after,
                         **retention.gain_and_change(before, after, ["a", "b"]),
                         "kl_from_start": {"trained": {"kl_per_answer": kl}, "others": {"kl_per_answer": kl / 2}},
                         "curve": [{"gain_trained": 0, "change_others": 0}, {"gain_trained": 30, "change_others": change}]})
    report = {"arm": arm, "seeds": seeds, "retention": {"train_families": ["a", "b"], "seeds": measured}}
    path = tmp_path / f"{arm}.json"
    path.write_text(json.dumps(report))
    return path


def test_assemble_writes_design_h_per_seed_and_ppo_minus_sft_paired_by_seed(tmp_path, monkeypatch):
    assemble = load_assemble_designs()
    monkeypatch.setattr(assemble, "keep_run", lambda *a, **k: None)  # no copies into the repository
    report = {"designs": {}}
    assemble.add_retention_arm(report, "sft_continue", bench_json(tmp_path, "sft_continue", -30.0, 2.0))
    design = assemble.add_retention_arm(report, "sft_ppo_checker", bench_json(tmp_path, "ppo", -10.0, 0.5))
    sft_arm, ppo = design["arms"]["sft_continue_retention"], design["arms"]["sft_ppo_checker_retention"]
    assert sft_arm["test_trained"] == pytest.approx([60.0, 60.0]) and sft_arm["start_test_trained"] == pytest.approx([30.0] * 2)
    assert sft_arm["test_others"] == pytest.approx([30.0, 30.0]) and sft_arm["change_others"] == pytest.approx([-30.0] * 2)
    assert ppo["kl_trained"] == [0.5, 0.5] and ppo["kl_others"] == [0.25, 0.25] and ppo["seeds"] == [0, 1]
    assert ppo["ppo_updates"] == [40, 40] and sft_arm["sft_steps"] == [50, 50] and len(sft_arm["curves"]) == 2
    assert design["ppo_minus_sft_paired"]["change_others"]["mean"] == pytest.approx(20.0)
    assert design["summary"]["sft_ppo_checker_retention"]["gain_trained"]["mean"] == pytest.approx(30.0)
    equal = design["at_equal_gain"]  # both reach 30 points: PPO lost 10 where SFT lost 30
    assert equal["gain"] == [30, 30] and equal["ppo_change"] == [-10, -10] and equal["ppo_keeps_half"] == [True, True]
    with pytest.raises(SystemExit, match="not a finished sft_continue arm"):
        assemble.add_retention_arm(report, "sft_continue", bench_json(tmp_path, "ppo", -10.0, 0.5))


def test_assemble_draws_the_designs_figures_from_the_committed_report(tmp_path):
    paths = load_assemble_designs().draw_figures(tmp_path)
    assert sorted(p.name for p in paths) == ["noise_crossover.png", "retention.png"]
    for path in paths:  # a PNG, not an empty file
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_the_trained_families_are_the_reachable_ones_with_the_most_room():
    greedy = {"a": 0.1, "b": 0.5, "c": 1.0, "d": 0.0, "e": 0.5, "f": 0.3, "g": 0.6}
    pass_at_k = {"a": 0.9, "b": 0.7, "c": 1.0, "d": 0.2, "e": 1.0, "f": 0.9, "g": 0.6}
    # c and g: no room; d: too rarely passed; e: a closed-label family (its pass@k is guessing).
    # Room: a 0.8, f 0.6, b 0.2.
    assert retention.choose_trained_families(greedy, pass_at_k, closed_label=["e"], n=2) == ["a", "f"]
    assert retention.choose_trained_families(greedy, pass_at_k, closed_label=["e"]) == ["a", "f", "b"]
    assert retention.choose_trained_families(greedy, pass_at_k, n=2) == ["a", "f"]  # e's room 0.5 < f's 0.6
    assert retention.choose_trained_families(greedy, pass_at_k, n=3) == ["a", "f", "e"]
    with pytest.raises(ValueError, match="only 1 famil"):
        retention.choose_trained_families({"a": 0.1, "b": 0.9}, {"a": 0.9, "b": 0.9})


def test_an_sft_runs_curve_goes_from_its_start_through_its_evaluations_to_its_end(tmp_path):
    from course_utils.comparison import retention_arms

    metrics = {"config": {"eval_split": "test"}, "steps": 120, "train_seconds": 600.0,
               "before": {"test": {"per_family": {"a": 0.0, "b": 0.5}}},
               "curve": [{"step": 60, "train_seconds": 300.0, "per_family": {"a": 0.5, "b": 0.4}}],
               "after": {"test": {"per_family": {"a": 1.0, "b": 0.2}}}}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    curve = retention_arms.sft_curve(tmp_path, ["a"])
    assert [(p["step"], p["training_minutes"]) for p in curve] == [(0, 0.0), (60, 5.0), (120, 10.0)]
    assert [p["gain_trained"] for p in curve] == pytest.approx([0, 50, 100])
    assert [p["change_others"] for p in curve] == pytest.approx([0, -10, -30])


def test_the_change_at_a_gain_is_read_where_the_path_first_reaches_it():
    path = [{"gain_trained": 0, "change_others": 0}, {"gain_trained": 20, "change_others": -4},
            {"gain_trained": 10, "change_others": -6}, {"gain_trained": 40, "change_others": -10}]
    assert retention.change_at_gain(path, 10) == pytest.approx(-2.0)  # halfway along the first segment
    assert retention.change_at_gain(path, 20) == pytest.approx(-4.0)
    assert retention.change_at_gain(path, 30) == pytest.approx(-6 + (30 - 10) / 30 * -4)  # from 10 up to 40
    assert retention.change_at_gain(path, 40) == pytest.approx(-10.0)
    assert retention.change_at_gain(path, 41) is None
    assert retention.change_at_gain(path, 0) == 0


def test_measure_arm_reads_a_finished_ppo_run_trained_on_a_subset(tmp_path, tiny_model_dir, monkeypatch):
    """The whole post-hoc path on a real (smoke) PPO run: its final policy from the checkpoint, its
    path from evals.jsonl, every family's pass rate and the KL from its start (the tiny model)."""
    from pathlib import Path

    from course_utils.comparison import retention_arms
    from course_utils.config import load_config
    from course_utils.trainer import PPOTrainer

    trained = ["json_object", "uppercase_word"]
    smoke = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
    config = load_config(smoke, task_families=trained, eval_families=list(tasks.TASK_FAMILIES), eval_prompts=20,
                         total_updates=2, eval_every=1, output_dir=str(tmp_path))
    PPOTrainer(config, quiet=True).train()
    monkeypatch.setattr(retention_arms, "MAX_NEW_TOKENS", 4)
    report = {"seeds": [{"seed": 0, "run_dir": str(config.run_dir), "sft": {"model": str(tiny_model_dir)}}]}
    seed = retention_arms.measure_arm(report, trained, samples=1)["seeds"][0]
    assert [p["update"] for p in seed["curve"]] == [0, 1, 2] and seed["curve"][0]["gain_trained"] == 0
    assert set(seed["after"]) == set(tasks.TASK_FAMILIES)
    kl = seed["kl_from_start"]
    assert kl["trained"]["answers"] == 20 and kl["others"]["answers"] == 80
    assert math.isfinite(kl["trained"]["kl_per_answer"]) and math.isfinite(kl["others"]["kl_per_answer"])
