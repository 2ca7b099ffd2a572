"""Reliability, round two (issue 31): six bugs, and bad input answered through the command line
with one line naming the problem and the fix, a non-zero exit, no traceback and nothing lost.

Every test goes through ``python -m course_utils`` in-process (``conftest.run_cli``), so a fault
(a full disk, a Ctrl-C) can be monkeypatched into a real run. Runs use the tiny model
(``configs/smoke.yaml``) and one or two updates; the checks that need no model are made to fail
before one would load (``no_model_loads``)."""

from __future__ import annotations

import errno
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import last_line, run_cli

from course_utils import models, sft
from course_utils import ppo_math as pm
from course_utils.machinery import hub, safe_files

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")


def ppo(tmp_path, *settings, flags=()):
    """The smoke preset's command line into ``tmp_path`` (run folder ``tmp_path/smoke``)."""
    return ("ppo", "--config", SMOKE, *flags, "--set", f"output_dir={tmp_path}", *settings)


def one_line_error(code: int, err: str, *words: str, exit_code: int = 2) -> str:
    """Assert the answer of a refused command: exit status, one line, no traceback, the words."""
    line = last_line(err)
    assert code == exit_code, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    for word in words:
        assert word in line, (word, line)
    return line


def strict_json_lines(path: Path) -> list[dict]:
    """Parse JSON lines the way a strict parser does: NaN or Infinity is an error."""
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}, which strict JSON parsers reject")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


@pytest.fixture()
def no_model_loads(monkeypatch):
    """Checks that must come before any model loads: loading one fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(models, "load_bundle", refuse)
    monkeypatch.setattr(sft.models, "load_bundle", refuse)


@pytest.fixture()
def data_copy(tmp_path, monkeypatch):
    """A copy of data/ that the test may break, made the kit's data folder ($COURSE_DATA_DIR)."""
    folder = tmp_path / "data"
    shutil.copytree(ROOT / "data", folder)
    monkeypatch.setenv("COURSE_DATA_DIR", str(folder))
    return folder


# ---------------------------------------------------------------------------------------------
# The six bugs
# ---------------------------------------------------------------------------------------------


def test_bug1_a_kl_early_stop_before_the_first_step_is_no_entropy_nan_stop(capsys, tmp_path):
    code, out, err = run_cli(capsys, *ppo(tmp_path, "old_logprobs_from=generation", "target_kl=1e-18",
                                          "total_updates=2", "eval_every=2"))
    assert code == 0, err[-2000:]
    summary = json.loads((tmp_path / "smoke" / "summary.json").read_text())
    assert summary["stop"] is None and summary["updates"] == 2, summary
    rows = strict_json_lines(tmp_path / "smoke" / "metrics.jsonl")
    assert [r["optimizer_steps"] for r in rows] == [0, 0]  # the early stop fired before every first step
    assert all(r["entropy"] is None and r["policy_loss"] is None for r in rows)  # not measured: null, not NaN


def test_bug2_evaluation_keeps_the_packed_copies_and_the_decode_loop_off(capsys, tmp_path, monkeypatch):
    from course_utils import rollout

    asked = []
    real = rollout.generate

    def recording(*args, **kwargs):
        asked.append((kwargs.get("packed", True), kwargs.get("decode_loop", True)))
        return real(*args, **kwargs)

    monkeypatch.setattr(rollout, "generate", recording)
    code, _, err = run_cli(capsys, *ppo(tmp_path, "packed_cpu_linears=false", "decode_loop=false", "total_updates=1"))
    assert code == 0, err[-2000:]
    assert asked and set(asked) == {(False, False)}, asked  # the evaluations' greedy answers included


@pytest.mark.parametrize("command", [
    lambda tmp: ppo(tmp, "eval_prompts=0"),
    lambda tmp: ("sft", "--eval-prompts", "0", "--output-dir", tmp),
])
def test_bug3_no_evaluation_prompts_is_refused_up_front(capsys, tmp_path, no_model_loads, command):
    code, _, err = run_cli(capsys, *command(tmp_path))
    one_line_error(code, err, "eval_prompts must be >= 1")
    assert not (tmp_path / "smoke").exists() and not (tmp_path / "sft-cpu").exists()


def test_a_run_whose_loss_goes_nan_stops_with_a_reason_and_writes_no_nan(capsys, tmp_path):
    """Through the command line: every training score NaN from the second update on (the fault
    injector), so the advantages and the loss are NaN; the run must stop on the nonfinite rule, say
    so, and leave strict JSON behind: no NaN or Infinity token in any file it wrote."""
    code, out, err = run_cli(capsys, *ppo(tmp_path, "inject_nan_reward_at=1", "total_updates=6", "eval_every=1"))
    assert code == 0, err[-2000:]
    run = tmp_path / "smoke"
    summary = json.loads((run / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))
    assert summary["stop"].startswith("[nonfinite]"), summary["stop"]
    assert summary["updates"] == 1 + 2  # one good update, then the patience of 2 non-finite ones
    assert f"stopped by a rule: {summary['stop']}" in out  # the reason, said on the command line
    rows = strict_json_lines(run / "metrics.jsonl")
    assert [r["nonfinite_steps"] > 0 or r["nonfinite_scores"] > 0 for r in rows] == [False, True, True]
    evals = strict_json_lines(run / "evals.jsonl")
    assert evals and all(math.isfinite(e["pass_rate"]) for e in evals), evals
    for path in run.rglob("*.json"):  # config, manifest, samples, versions, ...: strict JSON too
        json.loads(path.read_text(), parse_constant=lambda c, path=path: pytest.fail(f"{path} holds {c}"))
    for path in run.rglob("*.jsonl"):
        strict_json_lines(path)
    assert torch.load(run / "checkpoint" / "state.pt", weights_only=False)["update"] == 1  # the last finite one


def test_bug3_the_kit_never_writes_nan_into_json(tmp_path):
    row = {"entropy": math.nan, "nested": {"kl": [1.0, math.inf, -math.inf]}, "ok": 0.5}
    assert safe_files.dumps(row) == '{"entropy": null, "nested": {"kl": [1.0, null, null]}, "ok": 0.5}'
    safe_files.write_jsonl(tmp_path / "m.jsonl", [row])
    assert strict_json_lines(tmp_path / "m.jsonl")[0]["entropy"] is None


def test_bug4_a_horizon_shorter_than_a_batch_is_refused_and_beta_never_turns_negative(capsys, tmp_path, no_model_loads):
    code, _, err = run_cli(capsys, *ppo(tmp_path, "batch_size=8", "adaptive_kl=true", "kl_horizon=1", "kl_target=6"))
    one_line_error(code, err, "kl_horizon (1) must be >= batch_size (8)")
    controller = pm.AdaptiveKLController(0.02, target=6.0, horizon=1)  # the numbers, straight to the controller
    with pytest.raises(ValueError, match="beta"):
        controller.update(0.0, 8)  # 0.02 * (1 - 0.2 * 8) < 0
    assert controller.value == 0.02


@pytest.mark.parametrize("flag", [("--epochs", "0"), ("--max-pairs", "0")])
def test_bug5_rm_train_refuses_settings_that_train_nothing(capsys, tmp_path, flag):
    code, _, err = run_cli(capsys, "rm", "train", "--out", tmp_path / "rm", *flag, "--no-progress")
    one_line_error(code, err, f"{flag[0]} must be >= 1")
    assert not (tmp_path / "rm").exists()


def sft_tiny(tmp_path, *extra):
    return ("sft", "--model", hub.TINY_MODEL, "--demos", "4", "--batch-size", "4", "--eval-prompts", "2",
            "--max-new-tokens", "2", "--lora-rank", "2", "--lora-alpha", "4", "--threads", "1",
            "--output-dir", tmp_path, "--run-name", "s", *extra)


def test_bug6_a_save_cut_short_by_a_full_disk_leaves_the_old_model_whole(capsys, tmp_path, monkeypatch):
    from transformers import PreTrainedModel

    model = tmp_path / "s" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"the earlier model")

    def disk_full(self, folder, *args, **kwargs):
        # As a real save: the config is written, then the weights file is opened for writing (an
        # existing one is truncated and overwritten in place), then the disk fills part way.
        (Path(folder) / "config.json").write_text("{}")
        (Path(folder) / "model.safetensors").write_bytes(b"the first bytes of the new weights")
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "model.safetensors"))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", disk_full)
    code, _, err = run_cli(capsys, *sft_tiny(tmp_path, "--overwrite"))
    one_line_error(code, err, "No space left on device", "intact")
    assert (model / "model.safetensors").read_bytes() == b"the earlier model"  # the old model, untouched
    assert sorted(p.name for p in model.parent.iterdir() if p.name.startswith(".")) == []  # no half-written copy


def test_bug6_warm_start_retrains_over_a_config_without_weights(tmp_path, monkeypatch):
    config = sft.SFTConfig(output_dir=str(tmp_path), run_name="s")
    folder = config.run_dir / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # what a save cut short used to leave
    trained = []
    monkeypatch.setattr(sft, "train_sft", lambda cfg, progress=True: trained.append(cfg))
    assert sft.warm_start(config, progress=False) == folder and trained == [config]
    (folder / "model.safetensors").write_bytes(b"weights")
    sft.warm_start(config, progress=False)
    assert len(trained) == 1  # a complete model is kept


# ---------------------------------------------------------------------------------------------
# Bad data files: the file and the line
# ---------------------------------------------------------------------------------------------


def break_line(path: Path, number: int, raw: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = raw
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("raw, words", [
    (b'{"id": "x", "prompt": "tab\there"}\n', "not valid JSON"),
    (b'{"id": "train-x", "family": "uppercase_word", "split": "train", "prompt": "Hi"}\n', "lacks the field(s) ['target']"),
    (b'{"id": "train-x", "prompt": "caf\xe9"}\n', "is not UTF-8"),
])
def test_a_broken_line_of_a_data_file_is_named_with_its_file_and_line(capsys, tmp_path, data_copy, no_model_loads,
                                                                       raw, words):
    break_line(data_copy / "train.jsonl", 3, raw)
    code, _, err = run_cli(capsys, *ppo(tmp_path))
    one_line_error(code, err, words, f"{data_copy / 'train.jsonl'}, line 3", "python -m course_utils data")


def test_a_pair_without_its_rejected_answer_is_named_by_rm_train(capsys, tmp_path, data_copy):
    pair = json.loads((data_copy / "pairs_train.jsonl").read_text().splitlines()[0])
    del pair["rejected"]
    break_line(data_copy / "pairs_train.jsonl", 2, (json.dumps(pair) + "\n").encode())
    code, _, err = run_cli(capsys, "rm", "train", "--out", tmp_path / "rm", "--no-progress")
    one_line_error(code, err, "pairs_train.jsonl, line 2", "['rejected']")
    assert not (tmp_path / "rm").exists()


def test_an_empty_train_file_and_an_unknown_family_are_named_not_lower_batch_size(capsys, tmp_path, data_copy,
                                                                                 no_model_loads):
    (data_copy / "train.jsonl").write_text("")
    code, _, err = run_cli(capsys, *ppo(tmp_path))
    line = one_line_error(code, err, "train.jsonl has no prompts", "python -m course_utils data")
    assert "batch_size" not in line
    code, _, err = run_cli(capsys, "sft", "--output-dir", tmp_path)
    one_line_error(code, err, "the train split has no prompts")
    code, _, err = run_cli(capsys, *ppo(tmp_path, "task_families=[upper_case]"))
    one_line_error(code, err, "unknown families ['upper_case']", "uppercase_word")


# ---------------------------------------------------------------------------------------------
# The machine: a device it lacks, a folder it cannot write, a disk that fills, Ctrl-C
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_device_this_machine_lacks_is_one_line(capsys, tmp_path, no_model_loads):
    code, _, err = run_cli(capsys, *ppo(tmp_path, "device=cuda"))
    one_line_error(code, err, "CUDA is not available", "device=cpu")
    if not torch.backends.mps.is_available():
        code, _, err = run_cli(capsys, "sft", "--device", "mps", "--output-dir", tmp_path)
        one_line_error(code, err, "MPS is not available", "--device cpu")


def test_a_read_only_output_folder_is_refused_before_the_model_loads(capsys, tmp_path, monkeypatch, no_model_loads):
    def read_only(*args, **kwargs):  # chmod does not stop root, who runs the tests in CI
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(safe_files.tempfile, "TemporaryFile", read_only)
    code, _, err = run_cli(capsys, *ppo(tmp_path / "ro"))
    one_line_error(code, err, "cannot write into", "Permission denied", "output_dir")
    code, _, err = run_cli(capsys, "sft", "--output-dir", tmp_path / "ro")
    one_line_error(code, err, "cannot write into", "--output-dir")


def test_a_disk_that_fills_mid_run_keeps_the_last_good_checkpoint(capsys, tmp_path, monkeypatch):
    from course_utils.machinery import checkpoint

    saves = []
    real_save = checkpoint.torch.save

    def fills_at_the_second(state, path, *args, **kwargs):
        if Path(path).name == "state.pt":  # checkpoints only (not the value head)
            saves.append(path)
        if len(saves) == 2 and Path(path).name == "state.pt":
            Path(path).write_bytes(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(state, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", fills_at_the_second)
    code, _, err = run_cli(capsys, *ppo(tmp_path, "total_updates=2", "eval_every=2"))
    one_line_error(code, err, "No space left on device", "intact")
    assert checkpoint.load(tmp_path / "smoke")["update"] == 1  # the last good state, whole
    assert not (tmp_path / "smoke" / ".checkpoint.tmp").exists()  # the half-written one is cleared away


def interrupt_call(monkeypatch, owner, name: str, number: int = 1, before=None) -> None:
    """Ctrl-C arrives in call ``number`` of ``owner.name`` (the calls before it run for real);
    ``before(*args)`` runs first in that call (e.g. to write part of a file, as a real save would)."""
    real, calls = getattr(owner, name), []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == number:
            if before is not None:
                before(*args)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)


def interrupt_the_second_update(monkeypatch):
    """Ctrl-C arrives during the second PPO update (after one has been checkpointed)."""
    from course_utils.trainer import PPOTrainer

    interrupt_call(monkeypatch, PPOTrainer, "ppo_update", number=2)


def test_ctrl_c_keeps_the_checkpoint_says_how_to_resume_and_exits_130(capsys, tmp_path, monkeypatch):
    interrupt_the_second_update(monkeypatch)
    # --resume-or-start in an empty folder: nothing to resume, so the run starts.
    code, _, err = run_cli(capsys, *ppo(tmp_path, "total_updates=3", "eval_every=3", flags=("--resume-or-start",)))
    line = one_line_error(code, err, "interrupted after 1 update(s)", "update 1", "--resume", exit_code=130)
    assert f"--set output_dir={tmp_path}" in line  # the command to run again, ready to paste
    assert torch.load(tmp_path / "smoke" / "checkpoint" / "state.pt", weights_only=False)["update"] == 1


def test_ctrl_c_in_a_notebook_also_names_the_kept_checkpoint(tmp_path, monkeypatch):
    """``PPOTrainer.train`` called directly (a notebook cell, no command line around it): Ctrl-C
    ends in ``safe_files.Interrupted`` (still a KeyboardInterrupt) naming the checkpoint kept and
    the notebook's way on (the cell run again), not a command's flag (issue 53)."""
    from course_utils.config import load_config
    from course_utils.trainer import PPOTrainer

    interrupt_the_second_update(monkeypatch)
    trainer = PPOTrainer(load_config(SMOKE, output_dir=str(tmp_path), total_updates=3, eval_every=3), quiet=True)
    with pytest.raises(KeyboardInterrupt) as caught:
        trainer.train()
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert re.search(r"checkpoint of update 1 is kept in .*this cell run again", str(caught.value)), str(caught.value)
    assert "--resume" not in str(caught.value)


def earlier_model(folder: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """A model a previous run left in ``folder`` (the bytes to find there, untouched, after a fault)."""
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def assert_as_it_was(folder: Path, files: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # the old model, whole and alone
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []  # no half-written copy


def half_a_save(self, folder, *args, **kwargs):
    """As a real save cut short: the config and part of the new weights are written, then Ctrl-C."""
    (Path(folder) / "config.json").write_text("{}")
    (Path(folder) / "model.safetensors").write_bytes(b"the first bytes of the new weights")


SFT_MODEL = {"config.json": b"{}", "model.safetensors": b"the earlier model"}


@pytest.mark.parametrize("moment", ["training", "saving"])
def test_ctrl_c_during_sft_leaves_the_earlier_model_whole_and_exits_130(capsys, tmp_path, monkeypatch, moment):
    from transformers import PreTrainedModel

    model = tmp_path / "s" / "model"
    files = earlier_model(model, SFT_MODEL)
    if moment == "training":
        interrupt_call(monkeypatch, sft, "sft_loss")
    else:
        interrupt_call(monkeypatch, PreTrainedModel, "save_pretrained", before=half_a_save)
    code, _, err = run_cli(capsys, *sft_tiny(tmp_path, "--overwrite"))
    one_line_error(code, err, "interrupted", f"{model} is as it was before this run", "Rerun the same command",
                   exit_code=130)
    assert_as_it_was(model, files)


def test_ctrl_c_after_the_sft_run_is_in_place_says_it_is_saved(capsys, tmp_path, monkeypatch):
    """The new run (model, report, metrics) is swapped in as a whole; a Ctrl-C held until the swap is
    done (``safe_files.deferred_interrupt``) then says the new model is there. Before the swap, the
    earlier run is as it was (tests/test_rerun_safety.py)."""
    real = sft.safe_files.swap_in

    def swapped_then_interrupted(*args):
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(sft.safe_files, "swap_in", swapped_then_interrupted)
    code, _, err = run_cli(capsys, *sft_tiny(tmp_path))
    one_line_error(code, err, "interrupted after the new SFT model was saved in", "PPO can start from it",
                   exit_code=130)
    assert sft.complete_model(tmp_path / "s" / "model") and (tmp_path / "s" / "metrics.json").is_file()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A 2-layer, 32-wide BERT with random weights and the real MiniLM tokenizer: a quick backbone."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from course_utils import reward_model

    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = AutoTokenizer.from_pretrained(reward_model.backbone_folder())
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rm_train_tiny(out: Path, backbone: Path):
    return ("rm", "train", "--backbone", backbone, "--out", out, "--max-pairs", "4", "--epochs", "1",
            "--batch-size", "4", "--max-length", "48", "--threads", "1", "--no-progress")


REWARD_MODEL = {"reward_model.json": b'{"earlier": true}', "reward_head.safetensors": b"the earlier head",
                "metrics.json": b'{"earlier": true}'}


@pytest.mark.parametrize("moment", ["training", "saving", "evaluating"])
def test_ctrl_c_during_rm_train_leaves_the_earlier_model_whole_and_exits_130(capsys, tmp_path, monkeypatch,
                                                                              tiny_bert, moment):
    from course_utils import reward_model

    out = tmp_path / "rm"
    files = earlier_model(out, REWARD_MODEL)
    if moment == "training":
        interrupt_call(monkeypatch, reward_model, "train_reward_model")
    elif moment == "saving":  # the encoder is written, then Ctrl-C before the head and reward_model.json
        interrupt_call(monkeypatch, reward_model.RewardModel, "save",
                       before=lambda self, folder: self.encoder.save_pretrained(folder))
    else:  # the new model is saved; its metrics are not: the old metrics.json must not describe it
        interrupt_call(monkeypatch, reward_model, "evaluate")
    code, _, err = run_cli(capsys, *rm_train_tiny(out, tiny_bert))
    one_line_error(code, err, "interrupted", f"the reward model in {out} is as it was before this run",
                   "Rerun the same command", exit_code=130)
    assert_as_it_was(out, files)


def test_rm_train_writes_its_model_whole_and_refuses_a_folder_of_other_files(capsys, tmp_path, tiny_bert):
    from course_utils import reward_model

    out = tmp_path / "rm"
    earlier_model(out, REWARD_MODEL)
    code, _, err = run_cli(capsys, *rm_train_tiny(out, tiny_bert))
    assert code == 0, err[-2000:]
    assert json.loads((out / "metrics.json").read_text())["train"]["pairs"] == 4  # the new model and its metrics
    assert reward_model.load_reward_model(out, device="cpu").head is not None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # rm train replaces its folder as a whole: a folder of other files is refused, not emptied
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep me")
    code, _, err = run_cli(capsys, *rm_train_tiny(notes, tiny_bert))
    one_line_error(code, err, f"--out {notes} holds files but no reward model", "choose a new or empty folder")
    assert [p.name for p in notes.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("argv, words", [
    (("bench", "--updates", "0"), ("error: --updates must be >= 1, got 0", "e.g. --updates 1")),
    (("bench", "--warmup", "-1"), ("error: --warmup must be >= 0, got -1",)),
    (("bench-learning", "--config", SMOKE, "--minutes", "0"), ("error: --minutes must be > 0, got 0", "e.g. --minutes 5")),
    (("bench-learning", "--config", SMOKE, "--parallel", "0"), ("error: --parallel must be >= 1, got 0",)),
    (("bench-learning", "--config", SMOKE, "--demo-noise", "0.2"), ("error: --demo-noise applies to the SFT", "add --sft")),
])
def test_bench_and_bench_learning_answer_bad_arguments_with_an_error_line(capsys, tmp_path, no_model_loads, argv, words):
    code, _, err = run_cli(capsys, *argv, "--out", tmp_path / "out.json")
    one_line_error(code, err, *words)
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_data_out_naming_a_file_is_refused_and_the_file_kept(capsys, tmp_path):
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("mine")
    code, _, err = run_cli(capsys, "data", "--out", a_file)
    one_line_error(code, err, f"error: --out {a_file} is a file, not a folder", f"e.g. --out {tmp_path / 'a_file'}_data")
    assert a_file.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["a_file.txt"]


def test_lora_targets_the_model_lacks_are_named_with_the_layers_it_has(capsys, tmp_path):
    code, _, err = run_cli(capsys, *ppo(tmp_path, "lora_target_modules=[attn]"))
    line = one_line_error(code, err, "error: lora_target_modules ['attn'] match no layer of", "q_proj", "v_proj",
                          "e.g. lora_target_modules=[")
    assert "lm_head" not in line
    # one typo among good names is refused too (peft would leave that layer without an adapter)
    code, _, err = run_cli(capsys, *ppo(tmp_path / "b", "lora_target_modules=[q_proj,v_prj]"))
    one_line_error(code, err, "lora_target_modules ['v_prj'] match no layer")
    assert not (tmp_path / "smoke" / "checkpoint").exists()


# ---------------------------------------------------------------------------------------------
# The run folder: --resume without a checkpoint, a folder that holds a run
# ---------------------------------------------------------------------------------------------


def test_resume_without_a_checkpoint_says_so_and_starts_nothing(capsys, tmp_path, no_model_loads):
    code, _, err = run_cli(capsys, *ppo(tmp_path, flags=("--resume",)))
    one_line_error(code, err, "no checkpoint in", "--resume-or-start")
    assert not (tmp_path / "smoke").exists()


def test_a_folder_that_holds_a_run_is_not_wiped_without_resume_or_overwrite(capsys, tmp_path, no_model_loads):
    run = tmp_path / "smoke"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"update": 1}\n')
    code, _, err = run_cli(capsys, *ppo(tmp_path))
    one_line_error(code, err, "already holds a run", "--resume", "--overwrite")
    assert (run / "metrics.jsonl").read_text() == '{"update": 1}\n'
    code, _, err = run_cli(capsys, *ppo(tmp_path, flags=("--resume", "--overwrite")))
    one_line_error(code, err, "exclude each other")


def test_overwrite_starts_afresh_and_removes_the_old_checkpoint(capsys, tmp_path):
    run = tmp_path / "smoke"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "state.pt").write_bytes(b"an old run's state")
    (run / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, *ppo(tmp_path, "total_updates=1", flags=("--overwrite",)))
    assert code == 0, err[-2000:]
    assert torch.load(run / "checkpoint" / "state.pt", weights_only=False)["update"] == 1
    assert (run / "notes.txt").read_text() == "mine"  # only the run's own files are replaced


def test_overwrite_removes_the_old_run_before_the_new_one_saves_anything(capsys, tmp_path, monkeypatch):
    from course_utils.trainer import PPOTrainer

    run = tmp_path / "smoke"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "state.pt").write_bytes(b"an old run's state")
    (run / "notes.txt").write_text("mine")

    def interrupted(self):  # Ctrl-C in the new run's first update, before its first checkpoint
        raise KeyboardInterrupt

    monkeypatch.setattr(PPOTrainer, "ppo_update", interrupted)
    code, _, err = run_cli(capsys, *ppo(tmp_path, "total_updates=1", flags=("--overwrite",)))
    one_line_error(code, err, "before the first checkpoint", "--overwrite", exit_code=130)
    assert not (run / "checkpoint").exists()  # a later --resume cannot continue the old run in the new one's log
    assert (run / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------------------------------------
# Values that need the data or the model, checked before the model loads (or named with the fix)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting, words", [
    ("eval_split=tset", "eval_split must be one of"),
    ("task_families=[json]", "unknown families ['json']"),
    ("kl_target=0", "kl_target must be > 0"),
])
def test_values_checked_against_the_data_come_before_the_model(capsys, tmp_path, no_model_loads, setting, words):
    code, _, err = run_cli(capsys, *ppo(tmp_path, setting, "adaptive_kl=true"))
    one_line_error(code, err, words)


def test_a_response_longer_than_the_context_names_the_largest_max_new_tokens_that_fits(capsys, tmp_path):
    code, _, err = run_cli(capsys, *ppo(tmp_path, "max_new_tokens=600"))  # the tiny model has 512 positions
    line = one_line_error(code, err, "does not fit", "the largest that fits")
    largest = int(re.search(r"max_new_tokens=(\d+) \(the largest", line).group(1))
    longest = int(re.search(r"longest prompt is (\d+) tokens", line).group(1))
    assert largest >= 1 and largest + longest == 512
    assert not (tmp_path / "smoke" / "metrics.jsonl").exists()  # refused before any rollout
