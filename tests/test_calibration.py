"""Choosing the CPU fast paths by measurement (machinery.calibration): the choice is made, cached,
honoured by the trainer and overridable; a damaged cache is measured again with a one-line warning.

The stopwatch is replaced wherever a test depends on which candidate wins: a fake clock for
``measure``, a fake ``measure_candidates`` (fixed times, counted calls) for ``resolve`` and the
trainer. One test runs the real measurements on the tiny model, and asserts nothing on times."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from course_utils.config import load_config
from course_utils.machinery import calibration as cal
from course_utils.machinery.calibration import Candidate

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
PLAIN, PACKED, LOOP, BOTH = (Candidate(False, False), Candidate(True, False), Candidate(False, True),
                             Candidate(True, True))


@pytest.fixture()
def cache_file(tmp_path, monkeypatch):
    """An empty cache of this test's own (conftest pins the suite's)."""
    path = tmp_path / "cache" / "fast_paths.json"
    monkeypatch.setenv(cal.CACHE_ENV_VAR, str(path))
    return path


@pytest.fixture()
def fake_measure(monkeypatch):
    """``measure_candidates`` answering fixed seconds per candidate; ``calls`` counts measurements."""
    state = SimpleNamespace(calls=0, times={PLAIN.name: 1.0, PACKED.name: 1.2, LOOP.name: 0.7, BOTH.name: 0.8})

    def fake(bundle, prompts, candidates, forwards, new_tokens=32):
        state.calls += 1
        state.measured = [c.name for c in candidates]
        return {c.name: state.times.get(c.name, 9.9) for c in candidates}

    monkeypatch.setattr(cal, "measure_candidates", fake)
    return state


@pytest.fixture(scope="module")
def tiny_bundle(tiny_model_dir):
    from course_utils.models import LoRASettings, load_bundle

    return load_bundle(tiny_model_dir, lora=LoRASettings(rank=4, alpha=8), device="cpu", seed=0)


def config(**overrides):
    return load_config(SMOKE, **overrides)


# ---------------------------------------------------------------- measuring and choosing


def test_measure_alternates_the_candidates_and_takes_medians():
    now, order = [0.0], []
    cost = {"a": [1.0, 5.0, 1.0], "b": [2.0, 2.0, 2.0]}  # a has one noisy sample of 5 s

    def workload(name):
        def run(tokens):
            order.append((name, tokens))
            if tokens > 1:
                now[0] += cost[name][sum(1 for n, t in order if n == name and t > 1) - 1]
        return run

    times = cal.measure({"a": workload("a"), "b": workload("b")}, rounds=3, tokens=8, clock=lambda: now[0])
    assert times == {"a": 1.0, "b": 2.0}  # the median: one noisy sample does not decide
    assert order[:2] == [("a", 1), ("b", 1)]  # an untimed 1-token warm-up each
    assert [n for n, _ in order[2:]] == ["a", "b", "b", "a", "a", "b"]  # each round starts one further on


def test_the_fastest_wins_only_by_more_than_the_margin():
    allowed = [PLAIN, PACKED, LOOP, BOTH]
    assert cal.choose({PLAIN.name: 1.0, PACKED.name: 0.9, LOOP.name: 1.0, BOTH.name: 0.7}, allowed) == BOTH
    near_tie = {PLAIN.name: 1.0, PACKED.name: 0.97, LOOP.name: 0.99, BOTH.name: 0.96}
    assert cal.choose(near_tie, allowed) == PLAIN  # within 5%: plain PyTorch is kept
    # With the packed kernels fixed on by the config, "plain" is the packed path without the loop.
    assert cal.choose(near_tie, [PACKED, BOTH]) == PACKED


def test_bfloat16_is_a_candidate_only_where_the_cpu_has_it(tiny_bundle, monkeypatch):
    monkeypatch.setattr(cal, "packed_available", lambda policy, dtype=torch.float32: True)
    without = {"flags": ["avx2", "avx512f", "avx512_vnni"]}
    native = {"flags": ["avx2", "avx512f", "avx512_bf16"]}
    policy = tiny_bundle.policy
    assert {c.sampling_dtype for c in cal.candidates_for(policy, without, "auto")} == {"float32"}
    assert {c.sampling_dtype for c in cal.candidates_for(policy, native, "float32")} == {"float32"}
    assert {c.sampling_dtype for c in cal.candidates_for(policy, native, "auto")} == {"float32", "bfloat16"}
    assert len(cal.candidates_for(policy, without, "float32")) == 4


def test_the_estimate_recovers_a_known_linear_cost(tiny_bundle, monkeypatch):
    """Fake workloads whose seconds follow a known cost model (a forward costs ``a`` per row-token,
    a decode step ``b[candidate]`` whatever the prompt): the estimate must be that model's cost of
    the run's update, prefill + new_tokens steps + forwards over prompt + new_tokens tokens, for
    the run's rows, though the forwards were timed on fewer rows and the steps over fewer tokens."""
    a = {False: 1e-3, True: 0.5e-3}
    b = {PLAIN.name: 0.05, BOTH.name: 0.02}
    seen = {}

    def fake_measure(workloads, rounds=3, tokens=cal.TOKENS, clock=None):
        out = {}
        for name in workloads:
            kind, _, which = name.partition(" ")
            if kind == "sample":
                out[name] = tokens * b[which]
            else:
                rows, lq = seen["forward rows"], seen["prompt tokens"]
                out[name] = a[which == "True"] * rows * (lq + tokens)
        return out

    real_forward_run = cal.forward_run

    def spy_forward_run(bundle, rollout, packed):
        seen["forward rows"], seen["prompt tokens"] = rollout.query_ids.shape
        return real_forward_run(bundle, rollout, packed)

    monkeypatch.setattr(cal, "measure", fake_measure)
    monkeypatch.setattr(cal, "forward_run", spy_forward_run)
    prompts = ["Hi", "Add 2 and 3.", "Name a colour.", "Say yes.", "Count to three.", "Spell cat."]
    times = cal.measure_candidates(tiny_bundle, prompts, [PLAIN, BOTH], forwards=3, new_tokens=20)
    assert seen["forward rows"] == cal.FORWARD_ROWS < len(prompts)
    lq, rows = seen["prompt tokens"], len(prompts)
    for c in (PLAIN, BOTH):
        truth = a[c.packed_cpu_linears] * rows * (lq + 3 * (lq + 20)) + 20 * b[c.name]
        assert times[c.name] == pytest.approx(truth, rel=1e-9)


# ---------------------------------------------------------------- resolve: made, cached, overridable


def test_auto_is_measured_once_then_read_from_the_cache(tiny_bundle, cache_file, fake_measure):
    first = cal.resolve(config(), tiny_bundle, ["Hi"] * 4, log=lambda m: None)
    assert first["how"] == "measured" and fake_measure.calls == 1
    assert first["chosen"] == {"packed_cpu_linears": False, "decode_loop": True, "sampling_dtype": "float32"}
    assert first["times_s"][LOOP.name] == 0.7 and first["requested"]["packed_cpu_linears"] == "auto"
    stored = json.loads(cache_file.read_text())
    assert [e["key"]["rows"] for e in stored["entries"].values()] == [4]
    second = cal.resolve(config(), tiny_bundle, ["Hi"] * 4, log=lambda m: None)
    assert second["how"] == "cached" and fake_measure.calls == 1 and second["chosen"] == first["chosen"]
    cal.resolve(config(), tiny_bundle, ["Hi"] * 8, log=lambda m: None)  # other rows: another key
    assert fake_measure.calls == 2
    cal.resolve(config(max_new_tokens=9), tiny_bundle, ["Hi"] * 8, log=lambda m: None)  # other lengths too
    assert fake_measure.calls == 3
    # Another folder of the same shapes (each seed's SFT warm-up) reads the same answer.
    again = cal.resolve(config(max_new_tokens=9, model="/somewhere/else/model"), tiny_bundle, ["Hi"] * 8,
                        log=lambda m: None)
    assert again["how"] == "cached" and fake_measure.calls == 3


def test_explicit_values_are_honoured_without_measuring(tiny_bundle, cache_file, fake_measure):
    record = cal.resolve(config(packed_cpu_linears=True, decode_loop=False), tiny_bundle, ["Hi"], log=print)
    assert record["how"] == "set in the config" and fake_measure.calls == 0 and not cache_file.exists()
    assert record["chosen"] == {"packed_cpu_linears": True, "decode_loop": False, "sampling_dtype": "float32"}
    # One switch fixed, the other measured: only the candidates with the fixed value are timed.
    record = cal.resolve(config(packed_cpu_linears=True), tiny_bundle, ["Hi"], log=lambda m: None)
    assert record["chosen"]["packed_cpu_linears"] is True and record["chosen"]["decode_loop"] is True
    assert sorted(fake_measure.measured) == sorted([PACKED.name, BOTH.name])


def test_auto_off_the_cpu_is_the_plain_path(monkeypatch, fake_measure):
    gpu = SimpleNamespace(policy=SimpleNamespace(device=torch.device("cuda")))
    record = cal.resolve(config(), gpu, ["Hi"])
    assert record["chosen"] == {"packed_cpu_linears": False, "decode_loop": False, "sampling_dtype": "float32"}
    assert "CPU-only" in record["how"] and fake_measure.calls == 0


def test_the_cache_key_changes_with_the_versions_and_the_machine(tiny_bundle):
    host = cal.host_info()
    key = lambda **kw: cal.cache_key(cal.key_fields(tiny_bundle, 4, **kw))  # noqa: E731
    base = key(host=host, versions={"torch": "2.9.0", "transformers": "5.24.0"})
    assert base == key(host=host, versions={"torch": "2.9.0", "transformers": "5.24.0"})
    assert base != key(host=host, versions={"torch": "2.10.0", "transformers": "5.24.0"})
    assert base != key(host=host, versions={"torch": "2.9.0", "transformers": "5.25.0"})
    assert base != key(host={**host, "cpu_model": "Intel Xeon"}, versions={"torch": "2.9.0", "transformers": "5.24.0"})
    assert base != key(host={**host, "flags": ["avx2"]}, versions={"torch": "2.9.0", "transformers": "5.24.0"})


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"format": 99, "entries": {}}', "\udcff"])
def test_a_damaged_cache_is_measured_again_with_a_one_line_warning(tiny_bundle, cache_file, fake_measure, content):
    cache_file.parent.mkdir(parents=True)
    cache_file.write_text(content, encoding="utf-8", errors="surrogateescape")
    lines = []
    record = cal.resolve(config(), tiny_bundle, ["Hi"], log=lines.append)
    warnings = [line for line in lines if "unreadable" in line]
    assert len(warnings) == 1 and "\n" not in warnings[0] and str(cache_file) in warnings[0]
    assert record["how"] == "measured" and fake_measure.calls == 1
    assert json.loads(cache_file.read_text())["format"] == cal.FORMAT  # rewritten whole


def test_the_cache_lives_under_xdg_cache_home_unless_overridden(tmp_path, monkeypatch):
    monkeypatch.delenv(cal.CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cal.cache_path() == tmp_path / "course_utils" / "fast_paths.json"
    monkeypatch.setenv(cal.CACHE_ENV_VAR, str(tmp_path / "mine.json"))
    assert cal.cache_path() == tmp_path / "mine.json"


# ---------------------------------------------------------------- the trainer honours it


def test_the_trainer_runs_with_what_was_chosen_and_records_it(tmp_path, cache_file, fake_measure, monkeypatch):
    from course_utils import update
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(config(output_dir=str(tmp_path), total_updates=1), quiet=True)
    assert (trainer.config.packed_cpu_linears, trainer.config.decode_loop) == (False, True)
    assert trainer.fast_paths["how"] == "measured" and fake_measure.calls == 1
    asked = []
    real = update.collect_rollout

    def spy(*args, **kwargs):
        asked.append((kwargs["packed"], kwargs["decode_loop"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(update, "collect_rollout", spy)
    trainer.train()
    assert asked == [(False, True)]
    manifest = json.loads((tmp_path / "smoke" / "manifest.json").read_text())
    assert manifest["fast_paths"]["chosen"]["decode_loop"] is True
    assert manifest["fast_paths"]["host"]["cpu_model"]
    PPOTrainer(config(output_dir=str(tmp_path / "again")), quiet=True)  # a second run reads the cache
    assert fake_measure.calls == 1


def test_an_undecided_auto_is_refused_where_a_switch_is_needed(tiny_bundle):
    from course_utils.machinery.packed_linear import packed_linears
    from course_utils.rollout import generate

    with pytest.raises(ValueError, match="calibration"), packed_linears(tiny_bundle.policy, "auto"):
        pass
    with pytest.raises(ValueError, match="calibration"):
        generate(tiny_bundle, prompts=["Hi"], decode_loop="auto")


def test_config_switches_take_true_false_or_auto():
    assert config().packed_cpu_linears == "auto" and config().decode_loop == "auto"
    assert config(decode_loop=False).decode_loop is False
    with pytest.raises(ValueError, match="decode_loop must be true, false or auto"):
        config(decode_loop="yes")


# ---------------------------------------------------------------- the real stopwatch, once


def test_the_real_measurement_runs_and_leaves_the_run_as_it_was(tiny_bundle, monkeypatch):
    monkeypatch.setattr(cal, "ROUNDS", 1)
    policy = tiny_bundle.policy
    policy.train()
    rng = torch.random.get_rng_state()
    times = cal.measure_candidates(tiny_bundle, ["Hi", "Add 2 and 3."], [PLAIN, BOTH], forwards=2)
    assert set(times) == {PLAIN.name, BOTH.name} and all(t > 0 for t in times.values())
    assert policy.training and torch.equal(rng, torch.random.get_rng_state())


def test_sft_evaluations_take_what_was_chosen_and_the_command_line_can_fix_it(tmp_path, cache_file, fake_measure,
                                                                            monkeypatch):
    """The SFT warm-up's greedy evaluations are sampling only (no other forward): measured with
    ``forwards=0`` for the evaluation's own rows, honoured in every evaluation, recorded in
    metrics.json; ``--decode-loop false`` on the command line is a False, never the string."""
    from course_utils import rollout, sft
    from course_utils.machinery import hub

    asked, measured_forwards = [], []
    real_fake = cal.measure_candidates

    def counting(bundle, prompts, candidates, forwards, new_tokens=32):
        measured_forwards.append((forwards, len(prompts), new_tokens))
        return real_fake(bundle, prompts, candidates, forwards, new_tokens)

    real_greedy = rollout.greedy_answers

    def spy(*args, **kwargs):
        asked.append((kwargs["packed"], kwargs["decode_loop"]))
        return real_greedy(*args, **kwargs)

    monkeypatch.setattr(cal, "measure_candidates", counting)
    monkeypatch.setattr(sft, "greedy_answers", spy)
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=8, epochs=1, batch_size=8, eval_prompts=6, max_new_tokens=3,
                           output_dir=str(tmp_path), run_name="sft", threads=2, lora_rank=4, lora_alpha=8)
    metrics = sft.train_sft(config, progress=False)
    assert measured_forwards == [(0, 6, 3)]
    assert set(asked) == {(False, True)} and len(asked) == 4  # before and after, two splits each
    assert metrics["fast_paths"]["how"] == "measured" and metrics["config"]["decode_loop"] is True
    with pytest.raises(ValueError, match="decode_loop must be true, false or auto"):
        sft.SFTConfig(decode_loop="yes").validate()
    parsed = []

    def stop(config, **kwargs):
        parsed.append(config)
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "train_sft", stop)
    with pytest.raises(BaseException):  # the interruption main reports; only the parsed config matters here
        sft.main(["--decode-loop", "false", "--output-dir", str(tmp_path / "cli")])
    assert parsed[0].decode_loop is False and parsed[0].packed_cpu_linears == "auto"
