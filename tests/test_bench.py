"""The speed/memory benchmark harness (course_utils.comparison.bench).

The smoke test runs both trainers for real on the tiny model (one timed update each, no warm-up,
4 episodes of 8 tokens) and checks the JSON it writes: keys, internal consistency, and that both
sides generated the same number of tokens. Other tests check the comparison and the memory
sampler on hand-made numbers, and that a failing child is reported. No test asserts a wall time.
"""

import dataclasses
import json
import math
import time

import numpy as np
import pytest

from course_utils.comparison import bench

SIDE_KEYS = {"s_per_update", "episodes_per_s", "peak_rss_gb", "peak_rss_updates_gb", "phases",
             "update_times_s", "response_tokens_per_update", "trainable_parameters", "computes"}


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    # Small batch and short responses keep the two child processes to seconds of compute each.
    returned = bench.main(["--model", "tiny-smollm2", "--updates", "1", "--warmup", "0", "--batch-size", "4",
                           "--response-length", "8", "--out", str(out)])
    written = json.loads(out.read_text())
    return returned, written


def test_smoke_json_has_both_trainers_and_the_ratios(smoke_report):
    returned, report = smoke_report
    assert set(report) == {"config", "ours", "trl", "ratios", "machine", "versions"}
    assert report == json.loads(json.dumps(returned))  # what main returns is what it wrote
    for side in ("ours", "trl"):
        result = report[side]
        assert "error" not in result, result.get("log_tail")
        assert SIDE_KEYS <= set(result), SIDE_KEYS - set(result)
        assert result["s_per_update"] > 0 and result["peak_rss_gb"] > 0
        assert result["episodes_per_s"] == pytest.approx(report["config"]["batch_size"] / result["s_per_update"])
        assert len(result["update_times_s"]) == 1 and result["phases"]
    assert set(report["ratios"]) >= {"episodes_per_s_ours_over_trl", "peak_rss_ours_over_trl",
                                     "update_over_building_blocks", "meets_targets", "targets"}
    assert report["versions"]["trl"] == "1.12.0"
    error = report["ours"]["sampler_logprob_error"]  # float32 sampling: the forward's log-probs to round-off
    assert error["sampling_dtype"] == "float32" and error["tokens"] > 0 and error["max_abs"] < 1e-3


def test_smoke_ratios_follow_from_the_numbers(smoke_report):
    _, report = smoke_report
    ours, trl, ratios = report["ours"], report["trl"], report["ratios"]
    assert ratios["episodes_per_s_ours_over_trl"] == pytest.approx(ours["episodes_per_s"] / trl["episodes_per_s"])
    assert ratios["peak_rss_ours_over_trl"] == pytest.approx(ours["peak_rss_gb"] / trl["peak_rss_gb"])
    blocks = ours["building_blocks"]
    parts = blocks["generation_s"] + blocks["frozen_forwards_s"] + blocks["train_forward_backward_s"]
    assert blocks["sum_s"] == pytest.approx(parts)
    assert ratios["update_over_building_blocks"] == pytest.approx(ours["s_per_update"] / parts)
    bound = ours["lower_bound_s"]
    assert 0 < bound["generation_s"] < bound["update_s"]
    assert ratios["update_over_lower_bound"] == pytest.approx(ours["s_per_update"] / bound["update_s"])
    assert ratios["generation_over_lower_bound"] == pytest.approx(blocks["generation_s"] / bound["generation_s"])
    # The default kernel is never faster than the faster of the two, so its floor is never lower.
    assert ours["lower_bound_default_kernel_s"]["update_s"] >= bound["update_s"]


def test_smoke_both_trainers_generate_full_length_responses(smoke_report):
    _, report = smoke_report
    full = report["config"]["batch_size"] * report["config"]["response_length"]
    assert report["config"]["full_length"] is True
    assert report["trl"]["response_tokens_per_update"] == full  # TRL never stops early
    assert report["ours"]["response_tokens_per_update"] == full  # ours: EOS banned for the benchmark
    # TRL's phases are timed around the functions its loop calls; they fit inside the update.
    trl_phases = report["trl"]["phases"]
    assert {"generation", "ref_forward", "value_and_reward_forwards", "train_forward", "backward"} <= set(trl_phases)
    assert sum(v for k, v in trl_phases.items() if k != "other") <= report["trl"]["update_times_s"][0] + 1e-6


def test_compare_on_hand_made_numbers():
    ours = {"s_per_update": 2.0, "episodes_per_s": 4.0, "peak_rss_gb": 1.5, "peak_rss_updates_gb": 1.2,
            "building_blocks": {"sum_s": 1.6}, "over_lower_bound": {"update": 1.25, "generation": 2.5}}
    trl = {"s_per_update": 8.0, "episodes_per_s": 1.0, "peak_rss_gb": 6.0, "peak_rss_updates_gb": 4.0}
    ratios = bench.compare(ours, trl)
    assert ratios["episodes_per_s_ours_over_trl"] == 4.0
    assert ratios["peak_rss_ours_over_trl"] == 0.25
    assert ratios["peak_rss_updates_ours_over_trl"] == 0.3
    assert ratios["update_over_building_blocks"] == 1.25
    assert ratios["meets_targets"] == {"episodes_per_s": True, "peak_rss": True, "update_over_building_blocks": False,
                                       "update_over_lower_bound": True, "generation_over_lower_bound": False}


def test_compare_at_the_target_boundaries_and_with_a_side_missing():
    ours = {"s_per_update": 1.2, "episodes_per_s": 3.0, "peak_rss_gb": 3.0, "peak_rss_updates_gb": 3.0,
            "building_blocks": {"sum_s": 1.0}}
    trl = {"s_per_update": 4.0, "episodes_per_s": 1.0, "peak_rss_gb": 6.0, "peak_rss_updates_gb": 6.0}
    met = bench.compare(ours, trl)["meets_targets"]
    assert met == {"episodes_per_s": True, "peak_rss": True, "update_over_building_blocks": True,
                   "update_over_lower_bound": None, "generation_over_lower_bound": None}
    trl_slower = dict(trl, episodes_per_s=1.01)
    assert bench.compare(ours, trl_slower)["meets_targets"]["episodes_per_s"] is False
    missing = bench.compare(ours, {"error": "the trl child exited with 1"})
    assert missing["episodes_per_s_ours_over_trl"] is None and missing["meets_targets"]["peak_rss"] is None
    assert missing["update_over_building_blocks"] == pytest.approx(1.2)


def test_summary_names_a_failed_side():
    report = {
        "config": dataclasses.asdict(bench.BenchConfig()),
        "ours": {"error": "the ours child exited with 1 after 3 s", "log_tail": ["ModelNotFoundError: nope"]},
        "trl": {"skipped": True},
    }
    report["ratios"] = bench.compare(report["ours"], report["trl"])
    text = bench.summary_text(report)
    assert "ours FAILED" in text and "ModelNotFoundError: nope" in text
    assert "target >= 3.0: n/a" in text


def test_median_phases_counts_a_missing_phase_as_zero():
    phases = bench.median_phases([{"a": 1.0, "b": 4.0}, {"a": 3.0}, {"a": 2.0, "b": 2.0}])
    assert phases == {"a": 2.0, "b": 2.0}  # b over (4, 0, 2)
    assert math.isnan(bench.median([]))


def test_peak_rss_sampler_sees_a_temporary_allocation():
    with bench.PeakRSSSampler(interval=0.001) as sampler:
        start = bench.current_rss_gb()
        block = np.ones(200_000_000 // 8)  # 200 MB, every page touched
        time.sleep(0.05)  # releases the GIL: the sampling thread runs while the block is alive
        del block
    assert sampler.peak - start > 0.15
    assert bench.ru_maxrss_gb() >= sampler.peak - 0.01  # the whole-life peak is never below it


def test_bad_arguments_are_refused_before_any_child_starts(tmp_path):
    for bad in (["--updates", "0"], ["--batch-size", "0"], ["--warmup", "-1"]):
        with pytest.raises(ValueError, match="must be >= "):
            bench.main([*bad, "--out", str(tmp_path / "b.json")])
    assert not (tmp_path / "b.json").exists()


def test_prompts_come_from_the_training_split():
    prompts, source = bench.load_prompts(10)
    assert len(prompts) == 10 and all(isinstance(p, str) and p for p in prompts)
    assert "train" in source


def test_a_failing_child_is_reported_in_the_json_and_the_exit_status(tmp_path, capsys):
    out = tmp_path / "bench.json"
    with pytest.raises(SystemExit, match="ours failed"):
        bench.main(["--only", "ours", "--model", "no-such-model", "--updates", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    assert "exited with" in report["ours"]["error"]
    assert any("no-such-model" in line for line in report["ours"]["log_tail"])  # the child's own message
    assert report["trl"] == {"skipped": True}
    assert report["ratios"]["episodes_per_s_ours_over_trl"] is None
    assert "ours FAILED" in capsys.readouterr().out


def test_busy_machine_warning_only_above_the_core_count():
    def report(load):
        return {"machine": {"cpu_count": 2, "load_average_before": [load, 0, 0]}, "ours": {}, "trl": {"skipped": True}}

    assert bench.busy_machine_note(report(2.4)) is None  # the benchmark's own 2 threads on 2 cores
    note = bench.busy_machine_note(report(7.9))
    assert note is not None and "7.9 on 2 cores" in note


def test_the_lower_bound_by_hand():
    # 1 GB/s and 1 GFLOP/s make the arithmetic visible: P = 1e6 parameters, 4 MB of weights.
    limits = {"read_gb_per_s": 1.0, "matmul_gflop_per_s": 1.0}
    lb = bench.lower_bound(limits, matmul_params=10**6, weight_bytes=4 * 10**6, batch=2, prompt_tokens=10,
                           response_tokens=5, epochs=2, old_logprobs_from="generation")
    # prefill 2*1e6*2*10 FLOPs = 0.04 s; each of 5 steps reads 4 MB (0.004 s) > 2*1e6*2 FLOPs (0.004 s)
    assert lb["generation_s"] == pytest.approx(0.04 + 5 * 0.004)
    full = 2 * 10**6 * 2 * 15 / 1e9
    assert lb["frozen_forwards_s"] == pytest.approx(full)  # the reference only
    assert lb["train_forward_backward_s"] == pytest.approx(2 * 2 * full)
    assert lb["update_s"] == pytest.approx(lb["generation_s"] + 5 * full)
    textbook = bench.lower_bound(limits, matmul_params=10**6, weight_bytes=4 * 10**6, batch=2, prompt_tokens=10,
                                 response_tokens=5, epochs=2, old_logprobs_from="forward")
    assert textbook["frozen_forwards_s"] == pytest.approx(2 * full)  # plus the old-policy forward


def test_machine_limits_are_positive_and_name_the_shape():
    limits = bench.machine_limits(hidden=32, intermediate=64, rows=16, repeats=1)
    assert limits["read_gb_per_s"] > 0 and limits["matmul_gflop_per_s"] > 0 and limits["matmul_shape"] == [16, 32, 64]
