"""make bench-learning: seeds run as ordinary trainer runs, read back into one JSON."""

import json
from types import SimpleNamespace
import math
from pathlib import Path

import pytest

from course_utils.comparison import bench_learning as bl
from course_utils.tasks import TASK_FAMILIES


def _seed(seed, before, after, tasks_before, tasks_after, verdicts, minutes=1.0):
    return {"seed": seed, "pass_before": before, "pass_after": after, "gain_points": 100 * (after - before),
            "per_task_before": tasks_before, "per_task_after": tasks_after, "training_minutes": minutes,
            "updates": 10, "task_outcomes": {t: {"verdict": v} for t, v in verdicts.items()},
            "curve": [{"update": 0, "training_minutes": 0.0, "pass_rate": before},
                      {"update": 10, "training_minutes": minutes, "pass_rate": after}]}


def test_summary_mean_and_sample_std_of_the_gain_and_per_task_tallies():
    seeds = [_seed(0, 0.05, 0.45, {"a": 0.0, "b": 0.1}, {"a": 0.8, "b": 0.1}, {"a": "learned", "b": "no change"}),
             _seed(1, 0.05, 0.25, {"a": 0.0, "b": 0.1}, {"a": 0.4, "b": 0.1}, {"a": "learned", "b": "hacked"}),
             _seed(2, 0.05, 0.35, {"a": 0.0, "b": 0.1}, {"a": 0.6, "b": 0.1}, {"a": "hacked", "b": "hacked"})]
    s = bl.summarise(seeds)
    gains = [40.0, 20.0, 30.0]
    mean = sum(gains) / 3
    std = math.sqrt(sum((g - mean) ** 2 for g in gains) / 2)  # sample std, written out
    assert s["gain_points_mean"] == pytest.approx(mean) and s["gain_points_std"] == pytest.approx(std)
    assert s["target_met"] is True  # mean 30 >= 30
    assert s["per_task"]["a"]["verdicts"] == {"hacked": 1, "learned": 2}
    assert s["per_task"]["a"]["pass_after_mean"] == pytest.approx(0.6)
    assert bl.summarise(seeds[1:2])["target_met"] is False and bl.summarise(seeds[1:2])["gain_points_std"] == 0.0
    fig = bl.plot_learning_curves(seeds, minutes=1.0)
    assert len(fig.axes[0].lines) == 3 + 2  # three seeds, the target line, the budget line


def test_variant_plot_puts_each_seed_and_the_mean_of_each_variant_on_its_own_row():
    import numpy as np

    a = {"seeds": [_seed(0, 0.05, 0.45, {}, {}, {}), _seed(1, 0.05, 0.25, {}, {}, {})]}
    b = {"seeds": [_seed(0, 0.05, 0.05, {}, {}, {})]}
    fig = bl.plot_variant_gains({"first": a, "second": b})
    ax = fig.axes[0]
    dots = {tuple(np.round(line.get_xdata(), 6)): tuple(line.get_ydata()) for line in ax.lines
            if line.get_marker() == "o"}
    assert dots == {(40.0, 20.0): (1, 1), (0.0,): (0,)}  # the first variant on the top row
    assert [t.get_text() for t in ax.get_yticklabels()] == ["second", "first"]
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["+0.0 ± 0.0 (1 seed)", f"+30.0 ± {np.std([40, 20], ddof=1):.1f} (2 seeds)"]


def test_two_smoke_seeds_in_parallel_end_to_end(tmp_path, capsys):
    out = tmp_path / "learning.json"
    report = bl.main(["--config", "configs/smoke.yaml", "--seeds", "0", "1", "--minutes", "0.0001",
                      "--parallel", "2", "--out", str(out), "--set", "total_updates=3", "eval_every=2"])
    saved = json.loads(out.read_text())
    assert saved["summary"] == json.loads(json.dumps(report["summary"]))
    assert [s["seed"] for s in saved["seeds"]] == [0, 1] and saved["threads_per_run"] >= 1
    for s in saved["seeds"]:
        assert s["updates"] == 1  # the tiny budget is spent by the first update
        assert s["finished"].startswith("training-time budget")
        assert [p["update"] for p in s["curve"]] == [0, 1]
        assert (tmp_path / "learning" / f"smoke-seed{s['seed']}" / "report.md").is_file()
    assert out.with_suffix(".png").is_file()
    assert "gain:" in capsys.readouterr().out


def test_a_typo_in_the_overrides_fails_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="Unknown config field"):
        bl.main(["--config", "configs/smoke.yaml", "--out", str(tmp_path / "x.json"), "--set", "learning_rat=1"])
    with pytest.raises(ValueError, match="unknown families"):
        bl.main(["--sft", "--demo-families", "lowercase", "--out", str(tmp_path / "x.json")])
    with pytest.raises(ValueError, match="add --sft"):
        bl.main(["--demo-families", "json_object", "--out", str(tmp_path / "x.json")])


def test_the_warm_up_runs_first_and_its_training_time_comes_out_of_the_budget(tmp_path, monkeypatch):
    ran = []

    def fake_run(cmd, **kwargs):  # stands in for `python -m course_utils sft ...`
        ran.append(cmd)
        folder = tmp_path / "cpu_sft-seed1-sft"
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps({
            "train_seconds": 48.0, "before": {"test": {"pass_rate": 0.05}}, "after": {"test": {"pass_rate": 0.46}}}))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(bl.child.subprocess, "run", fake_run)
    warm = bl.run_warm_up(1, "cpu_sft-seed1", tmp_path, threads=2, env={})
    assert ran[0][2:4] == ["course_utils", "sft"] and "--seed" in ran[0] and ran[0][ran[0].index("--seed") + 1] == "1"
    assert warm["model"] == str(tmp_path / "cpu_sft-seed1-sft" / "model")
    assert warm["train_minutes"] == 0.8 and warm["pass_after"] == {"test": 0.46}
    ppo = bl.child_command("configs/cpu_sft.yaml", 1, "cpu_sft-seed1", str(tmp_path), 15 - warm["train_minutes"], 2,
                           [f"model={warm['model']}"])
    assert "max_train_minutes=14.2" in ppo and f"model={warm['model']}" in ppo


def test_the_sft_full_control_trains_on_every_demo_for_the_whole_budget_and_runs_no_ppo(tmp_path, monkeypatch):
    ran = []

    real_run = bl.child.subprocess.run

    def fake_run(cmd, **kwargs):  # stands in for `python -m course_utils sft ...`; PPO must never start
        if cmd[2:3] != ["course_utils"]:
            return real_run(cmd, **kwargs)  # the machine description (lscpu and the like)
        ran.append(cmd)
        assert cmd[3] == "sft"
        folder = Path(cmd[cmd.index("--output-dir") + 1]) / cmd[cmd.index("--run-name") + 1]
        folder.mkdir(parents=True)
        seed = int(cmd[cmd.index("--seed") + 1])
        (folder / "metrics.json").write_text(json.dumps({
            "train_seconds": 900.0, "steps": 450, "epochs_done": 9.0,
            "before": {"test": {"pass_rate": 0.05}}, "after": {"test": {"pass_rate": 0.5 + seed / 100}}}))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(bl.child.subprocess, "run", fake_run)
    monkeypatch.setattr(bl.child, "start_child", lambda *a, **k: pytest.fail("the control arm started PPO"))
    out = tmp_path / "sft_full.json"
    report = bl.main(["--sft-full", "--seeds", "0", "2", "--minutes", "15", "--out", str(out)])
    assert len(ran) == 2
    for cmd in ran:
        assert cmd[cmd.index("--demos") + 1] == "400" and cmd[cmd.index("--max-train-minutes") + 1] == "15.0"
    assert [s["pass_after"]["test"] for s in report["seeds"]] == [0.5, 0.52]
    ran.clear()  # with demonstrations for two families only: their 80 demos, and the flag passed on
    bl.main(["--sft-full", "--seeds", "1", "--demo-families", "json_object", "uppercase_word", "--out", str(out)])
    assert ran[0][ran[0].index("--demos") + 1] == "80"
    assert ran[0][ran[0].index("--demo-families") + 1:][:2] == ["json_object", "uppercase_word"]
    assert json.loads(out.read_text())["demo_families"] == ["json_object", "uppercase_word"]
    assert report["summary"]["test"]["mean"] == pytest.approx(0.51)
    assert json.loads(out.read_text())["arm"] == "sft_full"


def test_the_noisy_teacher_and_filtered_sft_flags_reach_the_sft_and_name_the_arm(tmp_path, monkeypatch):
    ran = []
    real_run = bl.child.subprocess.run

    def fake_run(cmd, **kwargs):
        if cmd[2:3] != ["course_utils"]:
            return real_run(cmd, **kwargs)
        ran.append(cmd)
        folder = Path(cmd[cmd.index("--output-dir") + 1]) / cmd[cmd.index("--run-name") + 1]
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({
            "train_seconds": 900.0, "before": {"test": {"pass_rate": 0.05}}, "after": {"test": {"pass_rate": 0.6}}}))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(bl.child.subprocess, "run", fake_run)
    out = tmp_path / "f.json"
    report = bl.main(["--sft-full", "--seeds", "0", "--demo-noise", "0.75", "--demo-filter", "--self-samples", "4",
                      "--out", str(out)])
    cmd = ran[0]
    assert cmd[cmd.index("--demo-noise") + 1] == "0.75" and cmd[cmd.index("--demo-noise-style") + 1] == "habit"
    assert "--demo-filter" in cmd and cmd[cmd.index("--self-samples") + 1] == "4" and "--resample-every" in cmd
    assert report["arm"] == "sft_filtered" and cmd[cmd.index("--run-name") + 1] == "sft_filtered-seed0-sft"
    saved = json.loads(out.read_text())
    assert saved["demo_noise"] == 0.75 and saved["demo_filter"] and saved["self_samples"] == 4
    ran.clear()  # noise alone: the plain control's name, no filter flags
    assert bl.main(["--sft-full", "--seeds", "0", "--demo-noise", "0.25", "--out", str(out)])["arm"] == "sft_full"
    assert "--demo-filter" not in ran[0] and "--self-samples" not in ran[0]
    with pytest.raises(ValueError, match="--demo-noise applies to the SFT"):
        bl.main(["--demo-noise", "0.5", "--out", str(out)])


def fake_sft(tmp_path, ran, train_seconds=48.0):
    """Stands in for `python -m course_utils sft ...`: records the command, writes its metrics.json."""
    real_run = bl.child.subprocess.run

    def run(cmd, **kwargs):
        if cmd[2:3] != ["course_utils"]:
            return real_run(cmd, **kwargs)  # the machine description (lscpu and the like)
        ran.append(cmd)
        folder = Path(cmd[cmd.index("--output-dir") + 1]) / cmd[cmd.index("--run-name") + 1]
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({
            "train_seconds": train_seconds, "steps": 30, "before": {"test": {"pass_rate": 0.05}},
            "after": {"test": {"pass_rate": 0.46}}}))
        return SimpleNamespace(returncode=0)
    return run


def test_the_sft_continuation_starts_from_the_warm_up_on_the_trained_families_for_the_rest_of_the_budget(
        tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(bl.child.subprocess, "run", fake_sft(tmp_path, ran))
    monkeypatch.setattr(bl.child, "start_child", lambda *a, **k: pytest.fail("the SFT arm started PPO"))
    measured = []
    monkeypatch.setattr(bl.retention_arms, "measure_arm", lambda report, fams, k: measured.append(fams) or {"ok": k, "seeds": []})
    out = tmp_path / "h.json"
    report = bl.main(["--sft-continue", "--train-families", "json_object", "uppercase_word", "--seeds", "1",
                      "--minutes", "15", "--out", str(out)])
    warm, more = ran
    assert "--model" not in warm and warm[warm.index("--run-name") + 1] == "sft_continue-seed1-sft"
    assert more[more.index("--model") + 1] == str(tmp_path / "learning" / "sft_continue-seed1-sft" / "model")
    assert more[more.index("--demo-families") + 1:][:2] == ["json_object", "uppercase_word"]
    assert more[more.index("--demos") + 1] == "80"  # every train demonstration of the two families
    assert float(more[more.index("--max-train-minutes") + 1]) == pytest.approx(15 - 0.8)  # the warm-up's 48 s
    assert more[more.index("--eval-every") + 1] == str(bl.retention_arms.SFT_EVAL_EVERY)  # its curve
    assert measured == [["json_object", "uppercase_word"]] and report["retention"]["ok"] == 4
    assert json.loads(out.read_text())["retention"]["ok"] == 4 and report["arm"] == "sft_continue"


def test_the_ppo_retention_arm_trains_on_the_subset_and_evaluates_every_family(tmp_path, monkeypatch):
    from course_utils import tasks
    from course_utils.config import load_config
    from course_utils.trainer import parse_overrides

    started = []
    monkeypatch.setattr(bl, "run_warm_up", lambda *a, **k: {"model": "w/model", "train_minutes": 0.8})
    monkeypatch.setattr(bl.child, "start_child",
                        lambda cmd, *a, **k: started.append(cmd) or SimpleNamespace(poll=lambda: 0, returncode=0))
    monkeypatch.setattr(bl, "read_run", lambda run_dir: _seed(0, 0.4, 0.5, {}, {}, {}))
    monkeypatch.setattr(bl.retention_arms, "measure_arm", lambda report, fams, k: {"families": fams, "seeds": []})
    monkeypatch.setattr(bl.time, "sleep", lambda s: None)
    report = bl.main(["--config", "configs/cpu_sft.yaml", "--sft", "--train-families", "json_object",
                      "--seeds", "0", "--out", str(tmp_path / "p.json")])
    sets = started[0][started[0].index("--set") + 1:]
    config = load_config("configs/cpu_sft.yaml", **parse_overrides(sets))  # the child reads them so
    assert config.task_families == ["json_object"] and config.eval_families == list(tasks.TASK_FAMILIES)
    assert config.max_train_minutes == pytest.approx(14.2) and config.model == "w/model"
    assert report["retention"]["families"] == ["json_object"] and report["train_families"] == ["json_object"]


@pytest.mark.parametrize("argv, message", [
    (["--sft-continue"], "name the families it trains on"),
    (["--train-families", "json_object"], "needs one arm"),
    (["--sft-full", "--train-families", "json_object"], "needs one arm"),
    (["--sft", "--train-families", "jsn"], "unknown families"),
    (["--sft-continue", "--train-families", "json_object", "--demo-noise", "0.5"], "plain 200-demo warm-up"),
    (["--sft", "--train-families", *TASK_FAMILIES], "no family is left"),
])
def test_design_h_flags_that_cannot_run_are_refused_before_any_run(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        bl.main([*argv, "--out", str(tmp_path / "x.json")])
