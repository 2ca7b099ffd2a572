"""Design 1's record and its pre-registered decision, on run folders written by hand in the shapes
the sft and ppo commands write (the real runs take 40 minutes a seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils import tasks
from course_utils.comparison import rl_after_sft as d1
from course_utils.lesson_aids.capstone import compare
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
