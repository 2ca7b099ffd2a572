"""Design 1's record and its pre-registered decision, on run folders written by hand in the shapes
the sft and ppo commands write (the real runs take 40 minutes a seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils import tasks
from course_utils.comparison import rl_after_sft as d1
from course_utils.lesson_aids.capstone import Comparison, compare
from course_utils.trainer import balanced_subset

HOST = {"cpu_model": "Test CPU", "flags": ["avx2"], "machine": "x86_64", "cpu_count": 2}
TEST = balanced_subset(tasks.load_split("test"), 10)


def answers(n_right: int) -> list[str]:
    """Answers to the 10 evaluated test prompts: the first ``n_right`` right, the rest wrong."""
    return [r.target if i < n_right else "no" for i, r in enumerate(TEST)]


def rates(rate: float) -> dict:
    return {"pass_rate": rate, "per_family": {"x": rate}}


def write_sft(folder: Path, seed: int, end: float, marks=()) -> None:
    folder.mkdir(parents=True)
    right = round(10 * end)
    metrics = {"config": {"seed": seed, "eval_split": "test"}, "steps": 100, "train_seconds": 1800.0 if marks else 600.0,
               "pool": 390, "self_sample_rounds": [{"step": 25, "accepted": 50}],
               "before": {"test": rates(0.5), "test_unseen": rates(0.4)},
               "after": {"test": {**rates(right / 10), "answers": answers(right)}, "test_unseen": rates(0.4)},
               "fast_paths": {"host": HOST},
               "checkpoints": [{"minutes": m, "step": 10 * m, "train_seconds": 60.0 * m, "test": rates(0.6),
                                "test_unseen": rates(0.4)} for m in marks]}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "sampled_validation.json").write_text(json.dumps(
        {"k": 16, "pass_at_1": 0.5, "pass_at_k": 0.8, "entropy": 0.3, "per_family": {}}))
    (folder / "model").mkdir()
    (folder / "model" / "model.safetensors").write_bytes(b"weights")


def write_ppo(folder: Path, seed: int, end: float) -> None:
    folder.mkdir(parents=True)
    right = round(10 * end)
    mark = lambda minutes, rate, final: {"minutes": minutes, "final": final, "update": 10, "train_seconds": 60.0 * minutes,  # noqa: E731
                                         "test": {"pass_rate": rate, "pass_rate_per_task": {"x": rate}},
                                         "test_unseen": {"pass_rate": 0.4, "pass_rate_per_task": {"x": 0.4}}}
    lines = [mark(5, 0.6, False), mark(15, 0.6, False), mark(30.1, right / 10, True)]
    (folder / "checkpoints.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "config.json").write_text(json.dumps({"seed": seed, "eval_split": "test", "batch_size": 16}))
    (folder / "summary.json").write_text(json.dumps({"updates": 2, "training_minutes": 30.1, "stop": None}))
    (folder / "evals.jsonl").write_text(json.dumps({"update": 2, "answers": answers(right)}) + "\n")
    (folder / "metrics.jsonl").write_text(json.dumps({"optimizer_steps": 4, "rows_trained": 8}) + "\n"
                                          + json.dumps({"optimizer_steps": 0, "rows_trained": 0}) + "\n")
    (folder / "manifest.json").write_text(json.dumps({"fast_paths": {"host": HOST}}))


def make_seed(runs: Path, seed: int, a: float, b: float, c: float) -> None:
    write_sft(runs / f"d1_start-seed{seed}", seed, 0.6)
    write_sft(runs / f"d1_A-seed{seed}", seed, a, marks=(5, 15))
    write_ppo(runs / f"d1_B-seed{seed}", seed, b)
    write_ppo(runs / f"d1_C-seed{seed}", seed, c)


def test_a_seed_is_read_kept_without_weights_and_recorded(tmp_path):
    make_seed(tmp_path / "runs", 0, a=0.7, b=0.6, c=0.8)
    record_file = tmp_path / "record.json"
    record = d1.main(["add", "0", str(tmp_path / "runs"), "--record", str(record_file),
                      "--keep-into", str(tmp_path / "kept")])
    assert set(record["arms"]) == {"A", "B", "C"} and record["one_host"]
    assert [p["minutes"] for p in record["arms"]["A"]["points"]] == [15, 25, 40.0]
    assert [p["minutes"] for p in record["arms"]["B"]["points"]] == [15, 25, 40.1]
    assert record["arms"]["B"]["points"][-1]["test"] == 60.0 and record["arms"]["C"]["test_passed"].count(True) == 8
    assert record["arms"]["C"]["updates_without_step"] == 1 and record["arms"]["C"]["rows_trained"] == 8
    assert record["start"]["sampled"]["pass_at_16"] == 80.0
    saved = json.loads(record_file.read_text())["designs"]["rl_after_sft"]["seeds"]["0"]
    assert saved["arms"]["A"]["points"][-1]["test"] == 70.0
    kept = {p.relative_to(tmp_path / "kept").as_posix() for p in (tmp_path / "kept").rglob("*") if p.is_file()}
    assert "seed0/A/metrics.json" in kept and "seed0/B/checkpoints.jsonl" in kept
    assert not any("safetensors" in k for k in kept)  # the models stay out of the record


@pytest.mark.parametrize("b_ends, expected", [
    ([0.8, 0.8, 0.9, 0.8, 0.8], "RL adds after the best SFT"),            # +10, +10, +20, +10, +10 over A's 0.7
    ([0.6, 0.6, 0.5, 0.6, 0.6], "rejection sampling stays the frontier at 3x the budget"),
    ([0.7, 0.8, 0.7, 0.8, 0.7], "level within noise"),  # +4, SE 2.4: t(4) = 2.78 puts 0 inside +4 ± 6.8
    ([0.9, 0.5, 0.7, 0.8, 0.6], "level within noise"),
])
def test_the_preregistered_rule_decides_b_against_a(tmp_path, b_ends, expected):
    runs = tmp_path / "runs"
    report = {"designs": {}}
    for seed, b in enumerate(b_ends):
        make_seed(runs, seed, a=0.7, b=b, c=0.7)
        d1.add_seed(report, d1.seed_record(runs, seed))
    decisions = {d["comparison"]: d for d in d1.decide(report["designs"]["rl_after_sft"])}
    assert decisions["B - A"]["decision"] == expected
    assert decisions["C - A"]["decision"] == "level within noise"  # identical to A in every seed: 0 ± 0
    assert decisions["B - A"]["mcnemar"]["n"] == 50


def test_a_difference_below_the_bar_outside_the_noise_is_called_small():
    # +3.4 points, SE 0.24: the interval [2.7, 4.1] excludes 0 but the mean is under the 5-point bar
    assert d1.preregistered_verdict(compare([73.0, 74.0, 73.0, 74.0, 73.0], [70.0] * 5)) == \
        "a small difference (ahead by less than 5 points)"
    assert d1.preregistered_verdict(compare([70.0] * 5, [73.0, 74.0, 73.0, 74.0, 73.0])) == \
        "a small difference (behind by less than 5 points)"


def test_fewer_than_five_seeds_decide_nothing_and_a_missing_start_is_named(tmp_path):
    result = compare([80.0, 80.0, 90.0], [70.0, 70.0, 70.0])
    assert d1.preregistered_verdict(result) == "not decided: 3 of 5 seeds"
    with pytest.raises(FileNotFoundError, match="no finished start"):
        d1.seed_record(tmp_path, 3)


def test_a_mean_past_the_bar_with_too_few_seeds_agreeing_is_level_by_the_rule_and_says_why():
    # Unreachable with five seeds and ties (3 equal gains and 2 zeros never clear t(4)), reachable with
    # more: the rule's "otherwise" is level, and the verdict must not claim "less than 5 points".
    result = Comparison(6.0, 1.0, 6, 2.447, 3.6, 8.4, 7, 3, 0, 4, True)
    verdict = d1.preregistered_verdict(result, seeds=5)
    assert verdict.startswith("level within noise (by the rule") and "only 3 of 7 seeds agree" in verdict
    assert "less than" not in verdict


def _design(values: dict[str, list[tuple[float, float, float, float]]]) -> dict:
    """A design 1 record from per arm, per seed (test, unseen, pass@16, entropy); "start" is the start."""
    def run(test, unseen, pass16, entropy):
        return {"points": [{"test": test - 1, "test_unseen": unseen}, {"final": True, "test": test, "test_unseen": unseen}],
                "sampled": {"pass_at_1": 50.0, "pass_at_16": pass16, "entropy": entropy}}
    seeds = len(values["start"])
    return {"seeds": {str(s): {"start": run(*values["start"][s]),
                               "arms": {arm: run(*v[s]) for arm, v in values.items() if arm != "start"}}
                      for s in range(seeds)}}


def test_the_prediction_is_read_part_by_part_and_the_secondary_gains_are_paired_with_the_start():
    jitter = (0.0, 1.0, -1.0, 0.5, -0.5)
    start = [(60.0, 40.0, 80.0, 0.40)] * 5
    a = [(70.0 + j, 40.0, 80.0 + j, 0.30) for j in jitter]
    as_predicted = _design({"start": start, "A": a,
                            "B": [(70.0 - j, 45.0 + j, 85.0, 0.40 + j / 100) for j in jitter],
                            "C": [(70.0 + j / 2, 46.0 - j, 86.0 - j, 0.41) for j in jitter]})
    outcomes = {p["part"]: p["outcome"] for p in d1.prediction_check(as_predicted)}
    assert set(outcomes.values()) == {"held"}, outcomes
    gains = {d["what"]: d for d in d1.secondary_readings(as_predicted)}
    assert gains["A's gain over the shared start, test"]["result"].difference == pytest.approx(10.0)
    assert gains["A's gain over the shared start, test"]["reading"] == "higher"

    # B far behind on test and on pass@16, C level with A on entropy, C's unseen gain within noise
    other = _design({"start": start, "A": a,
                     "B": [(60.0 - j, 45.0 + j, 70.0 + j, 0.40) for j in jitter],
                     "C": [(70.0 + j, 40.0 + 3 * j, 86.0 - j, 0.30 + j / 50) for j in jitter]})
    parts = d1.prediction_check(other)
    outcomes = {p["part"]: p["outcome"] for p in parts}
    assert outcomes["B and C level with A on test at 40 minutes (interval holds 0, mean under 5 points either way)"] \
        == "did not hold"
    assert outcomes["B and C ahead of A on pass@16"] == "did not hold"
    assert outcomes["B and C ahead of A on the unseen phrasings"] == "not shown"
    assert outcomes["A ends with the lowest entropy"] == "not shown"
    assert outcomes["C at least as good as B on test"] == "held"
    statuses = [st for p in parts for _, st in p["lines"]]
    assert statuses.count("the other way") == 2 and "not level: the mean is past the bar" not in statuses

    # level expected, the interval holds 0 but the mean is past the bar: not level, so the part fails
    wide = _design({"start": start, "A": a,
                    "B": [(70.0 + j - 6.0 + 8 * j, 40.0, 80.0, 0.3) for j in jitter], "C": a})
    first = d1.prediction_check(wide)[0]
    assert first["lines"][0][1] == "not level: the mean is past the bar" and first["outcome"] == "did not hold"
