"""The command line in front of a user: bad input gives one line, ``error: ...`` with the fix, and
exit status 2; ``--debug`` shows the traceback instead. The end of a run is a short summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils import __main__ as cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    return stopped.value.code, out, err


@pytest.mark.parametrize("settings, words", [
    (["cliprange=0"], "cliprange must be > 0"),
    (["batch_size=6", "num_minibatches=4"], "divisible by num_minibatches"),
    (["clip_range=0.2"], "Unknown config field"),
    (["learning_rate=fast"], "learning_rate must be a number"),
    (["kl_estimator=k9"], "kl_estimator must be one of"),
    (["learning_rate=-1"], "learning_rate must be > 0"),
    (["reward=learned"], "needs reward_model_path"),
    (["max_rollout_age=-3"], "max_rollout_age must be >= 0"),
])
def test_bad_config_values_give_one_line(capsys, tmp_path, settings, words):
    code, out, err = run_cli(capsys, "ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}", *settings)
    assert code == 2 and words in err, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err + out


def test_missing_files_and_folders_give_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ppo", "--config", "configs/nope.yaml")
    assert code == 2 and "Presets:" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}",
                           f"model={tmp_path / 'no-such-model'}")
    assert code == 2 and "does not exist" in err and err.count("\n") == 1


def test_a_broken_yaml_file_gives_one_line(capsys, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("batch_size: [4\nseed: 0\n")
    code, _, err = run_cli(capsys, "ppo", "--config", str(broken))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_prompts_longer_than_the_context_give_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}",
                           "max_new_tokens=100000")
    assert code == 2 and "max_new_tokens" in err and err.count("\n") == 1, err


def test_a_damaged_checkpoint_is_named_with_the_fix(capsys, tmp_path):
    folder = tmp_path / "smoke" / "checkpoint"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"PK\x03\x04 not a real zip archive")
    code, _, err = run_cli(capsys, "ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}", "--resume")
    assert code == 2 and "is damaged" in err and "start the run fresh" in err and str(folder) in err


def test_a_resume_that_changes_the_prompt_stream_is_refused_with_the_fix(capsys, tmp_path):
    base = ("ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}", "total_updates=1")
    cli.main(list(base))
    capsys.readouterr()
    code, _, err = run_cli(capsys, *base, "batch_size=2", "num_minibatches=1", "--resume")
    assert code == 2 and err.count("\n") == 1, err
    assert "batch_size=4" in err and "batch_size=2" in err and "another run_name" in err, err
    # A change that does not alter what was trained on (one more update, another learning rate) resumes.
    cli.main([*base[:-1], "total_updates=2", "learning_rate=0.0001", "--resume"])
    out = capsys.readouterr().out
    assert "resumed from update 1" in out and "learning_rate 0.0002 -> 0.0001" in out, out


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(ValueError, match="cliprange"):
        cli.main(["ppo", "--config", SMOKE, "--set", "cliprange=0", "--debug"])


def test_a_run_ends_with_a_short_summary_and_keeps_the_json(capsys, tmp_path):
    cli.main(["ppo", "--config", SMOKE, "--set", f"output_dir={tmp_path}", "total_updates=2"])
    out = capsys.readouterr().out
    assert "held-out pass rate:" in out and "report.md" in out
    assert "{" not in out  # the JSON summary is in summary.json, not on the terminal
    summary = json.loads((tmp_path / "smoke" / "summary.json").read_text())
    assert summary["updates"] == 2
