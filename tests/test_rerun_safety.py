"""Issue 53: a notebook's training cell run again, or stopped with Ctrl-C, never loses a finished run
and never leaves a folder that describes two runs; every message names the notebook's way on; the
cells downstream check what they read. PPO (weeks 7 and 8), the SFT warm-up (week 6a) and the
reward model (week 6b), each on the tiny test models. Ctrl-C is simulated by raising
KeyboardInterrupt at a chosen point (a training callback, or a function the run calls)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from course_utils import reward_model as rm
from course_utils import sft
from course_utils.config import load_config
from course_utils.machinery import checkpoint, hub, report, safe_files
from course_utils.trainer import PPOTrainer, interrupted_message, read_run

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"


def smoke(output_dir: Path, **overrides):
    """The smoke preset, 2 updates, evaluated at 0 and 2 on 2 prompts, run folder ``output_dir/smoke``."""
    return load_config(SMOKE, output_dir=str(output_dir), **{"total_updates": 2, "eval_every": 2, "eval_prompts": 2,
                                                             "num_sample_prompts": 2, **overrides})


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what must be found again untouched."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def interrupt_at(update: int):
    """A training callback: Ctrl-C right after ``update`` is logged, before its checkpoint is saved."""
    def callback(trainer, metrics):
        if metrics["update"] == update:
            raise KeyboardInterrupt
    return callback


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def no_training(monkeypatch):
    monkeypatch.setattr(PPOTrainer, "ppo_update", lambda self: pytest.fail("a PPO update ran"))


def logged_updates(run: Path) -> list[int]:
    return [json.loads(line)["update"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished smoke run (2 updates); tests copy it."""
    out = tmp_path_factory.mktemp("finished")
    PPOTrainer(smoke(out), quiet=True).train()
    return out / "smoke"


def copy_of(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "smoke")
    return tmp_path / "smoke"


# ---------------------------------------------------------------------------------------------
# PPO (week 7's training cell, week 7's lab, week 8's short run)
# ---------------------------------------------------------------------------------------------


def test_running_the_training_cell_again_reads_the_finished_run_back(finished_run, tmp_path, monkeypatch, capsys):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    run = copy_of(finished_run, tmp_path)
    before, summary = snapshot(run), json.loads((run / "summary.json").read_text())
    no_training(monkeypatch)
    trainer = PPOTrainer(smoke(tmp_path), quiet=True)
    assert trainer.train() == summary
    assert snapshot(run) == before  # not a byte of the finished run changed
    said = capsys.readouterr().out
    assert "read back and nothing is trained" in said and 'train(if_exists="overwrite")' in said
    assert [h["update"] for h in trainer.history] == [1, 2] and [e["update"] for e in trainer.evals] == [0, 2]
    assert trainer.update == 2 and trainer.stop is None and trainer.best["folder"] == "best_policy"
    # The live policy is the run's final one, as week 7 checks against policy/.
    saved = load_file(run / "policy" / "adapter_model.safetensors")
    live = get_peft_model_state_dict(trainer.policy.lm)
    assert saved.keys() == live.keys() and all(torch.equal(saved[k], live[k].cpu()) for k in saved)
    head = torch.load(run / "policy" / "value_head.pt")
    assert torch.equal(head["weight"], trainer.policy.value_head.weight.detach().cpu())


def test_a_finished_run_with_other_settings_is_refused_naming_the_ways(finished_run, tmp_path, monkeypatch):
    run = copy_of(finished_run, tmp_path)
    before = snapshot(run)
    no_training(monkeypatch)
    trainer = PPOTrainer(smoke(tmp_path, learning_rate=0.123), quiet=True)  # week 7's lab after its knob changed
    with pytest.raises(ValueError, match=r'learning_rate .* -> 0\.123.*train\(if_exists="overwrite"\)') as caught:
        trainer.train()
    assert "\n" not in str(caught.value) and "--" not in str(caught.value)  # one line, no command-line flag
    assert snapshot(run) == before


def test_an_interrupted_run_continues_when_the_cell_runs_again(tmp_path):
    config = smoke(tmp_path, total_updates=3, eval_every=3)
    with pytest.raises(KeyboardInterrupt) as caught:
        PPOTrainer(config, callbacks=[interrupt_at(2)], quiet=True).train()
    message = str(caught.value)
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert "checkpoint of update 1 is kept" in message and "this cell run again" in message, message
    assert "--resume" not in message and "command" not in message  # a notebook has no command
    done = []
    summary = PPOTrainer(config, callbacks=[lambda t, m: done.append(m["update"])], quiet=True).train()
    assert done == [2, 3] and summary["updates"] == 3  # continued from the checkpoint, not from update 1
    assert logged_updates(tmp_path / "smoke") == [1, 2, 3]


@pytest.mark.parametrize("moment", ["first evaluation", "first update"])
def test_interrupting_an_overwrite_never_leaves_a_folder_that_describes_two_runs(finished_run, tmp_path, monkeypatch,
                                                                                 moment):
    run = copy_of(finished_run, tmp_path)
    (run / "notes.txt").write_text("mine")
    old = {name: data for name, data in snapshot(run).items() if name != "notes.txt"}
    callbacks = [interrupt_at(1)] if moment == "first update" else []
    if moment == "first evaluation":
        monkeypatch.setattr(PPOTrainer, "evaluate", ctrl_c)
    trainer = PPOTrainer(smoke(tmp_path), callbacks=callbacks, quiet=True)
    with pytest.raises(KeyboardInterrupt) as caught:
        trainer.train(if_exists="overwrite")
    message, aside = str(caught.value), safe_files.replaced_run(run)
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert snapshot(aside) == old  # the finished run, whole, beside the folder
    for name in ("summary.json", "report.md", "curves.png", "checkpoint", "policy", "samples.json"):
        assert not (run / name).exists(), name  # nothing of the old run's ending is left with the new run
    assert logged_updates(run) == ([1] if moment == "first update" else [])
    assert (run / "notes.txt").read_text() == "mine"
    # What the message says is true: there is no checkpoint to resume, and the old run is where it says.
    assert "nothing to resume" in message and checkpoint.saved_update(run) is None
    assert str(aside) in message and "this cell run again" in message
    monkeypatch.undo()
    summary = PPOTrainer(smoke(tmp_path), quiet=True).train()  # the cell run again: a new run, finished
    assert summary["updates"] == 2 and logged_updates(run) == [1, 2]
    assert not aside.exists() and (run / "notes.txt").read_text() == "mine"  # the replaced run goes only now


def test_ctrl_c_while_the_report_is_written_is_the_kits_message_and_the_cell_finishes_it(tmp_path, monkeypatch):
    config, run = smoke(tmp_path), tmp_path / "smoke"
    real = report.write_report
    monkeypatch.setattr(report, "write_report", ctrl_c)
    with pytest.raises(KeyboardInterrupt) as caught:
        PPOTrainer(config, quiet=True).train()
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert "while the run's report was written, after 2 update(s)" in str(caught.value)
    assert "checkpoint of update 2 is kept" in str(caught.value)
    assert not (run / "summary.json").exists()  # not finished: the next run of the cell finishes it
    monkeypatch.setattr(report, "write_report", real)
    no_training(monkeypatch)
    summary = PPOTrainer(config, quiet=True).train()
    assert summary["updates"] == 2 and (run / "report.md").is_file() and (run / "summary.json").is_file()


def test_resuming_a_finished_run_removes_its_ending_first(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    config = smoke(tmp_path, total_updates=4, eval_every=2)  # two more updates, on purpose
    with pytest.raises(KeyboardInterrupt) as caught:
        PPOTrainer(config, callbacks=[interrupt_at(3)], quiet=True).train(if_exists="resume")
    assert "checkpoint of update 2 is kept" in str(caught.value)
    for name in safe_files.RUN_ENDING:
        assert not (run / name).exists(), name  # the folder no longer claims a finished run of 2 updates
    assert PPOTrainer(config, quiet=True).train()["updates"] == 4  # the cell run again continues it
    assert logged_updates(run) == [1, 2, 3, 4]


def test_nothing_to_resume_is_said_only_when_the_folder_has_no_checkpoint(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    said = interrupted_message(run, 0)  # stopped while the finished run was read back, before any update
    assert "nothing to resume" not in said and f"the finished run in {run} is as it was" in said
    (run / "summary.json").unlink()  # now an unfinished run with the checkpoint of update 2
    said = interrupted_message(run, 0)  # a trainer that has not loaded the checkpoint on disk
    assert "nothing to resume" not in said and "checkpoint of update 2" in said
    assert "nothing to resume" in interrupted_message(tmp_path / "empty", 0)
    command = "python -m course_utils ppo --config configs/smoke.yaml"
    from_cli = interrupted_message(run, 2, command)
    assert f"`{command} --resume`" in from_cli and "cell" not in from_cli
    assert f"`{command} --overwrite`" in interrupted_message(tmp_path / "empty", 0, command)


def test_if_exists_takes_three_words_and_resume_needs_a_checkpoint(tmp_path):
    trainer = PPOTrainer(smoke(tmp_path), quiet=True)
    with pytest.raises(ValueError, match="if_exists must be one of keep, resume, overwrite"):
        trainer.train(if_exists="replace")
    with pytest.raises(ValueError, match=r'no checkpoint in .* to resume from.*train\(\) starts the run'):
        trainer.train(if_exists="resume")
    assert not (tmp_path / "smoke" / "metrics.jsonl").exists()  # refused before anything was written


# ---------------------------------------------------------------------------------------------
# Week 8 reads week 7's run: a run stopped in its first update is named, not an IndexError
# ---------------------------------------------------------------------------------------------


def test_reading_a_run_stopped_in_its_first_update_names_what_is_missing_and_the_cell(tmp_path, monkeypatch):
    config, run = smoke(tmp_path), tmp_path / "smoke"
    monkeypatch.setattr(PPOTrainer, "ppo_update", ctrl_c)  # stopped inside its first update
    with pytest.raises(KeyboardInterrupt):
        PPOTrainer(config, quiet=True).train()
    assert (run / "metrics.jsonl").read_text() == ""  # what week 8 found: sorted([])[0] -> IndexError
    week7 = "week 7's training cell (section 3)"
    with pytest.raises(ValueError, match=r"holds 0 logged update\(s\).*run week 7's training cell \(section 3\) again") \
            as caught:
        read_run(run, made_by=week7)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match=r"holds no PPO run \(no config.json\): week 7's training cell"):
        read_run(tmp_path / "week07", made_by=week7)
    (run / "evals.jsonl").write_text('{"update": 0, "pass_rate": 0.5}\n{"upda')  # a line cut short
    (run / "metrics.jsonl").write_text('{"update": 1}\n')
    with pytest.raises(ValueError, match=r"evals.jsonl holds a line that is not JSON"):
        read_run(run, made_by=week7)


def test_reading_a_finished_run_gives_its_logs(finished_run):
    logs = read_run(finished_run)
    assert [h["update"] for h in logs.history] == [1, 2] and logs.summary["updates"] == 2
    assert logs.config["run_name"] == "smoke" and logs.evals[0]["update"] == 0


# ---------------------------------------------------------------------------------------------
# The SFT warm-up (week 6a's training cell)
# ---------------------------------------------------------------------------------------------


def sft_config(output_dir: Path, **changes) -> sft.SFTConfig:
    return sft.SFTConfig(model=hub.TINY_MODEL, demos=4, batch_size=4, eval_prompts=2, max_new_tokens=2, lora_rank=2,
                         lora_alpha=4, threads=1, output_dir=str(output_dir), run_name="s", **changes)


@pytest.fixture(scope="module")
def finished_sft(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished_sft")
    sft.train_sft(sft_config(out), progress=False)
    return out / "s"


def test_running_the_sft_cell_again_reads_the_finished_warm_up_back(finished_sft, tmp_path, monkeypatch, capsys):
    run = tmp_path / "s"
    shutil.copytree(finished_sft, run)
    before = snapshot(run)
    monkeypatch.setattr(sft, "sft_steps", lambda *a, **k: pytest.fail("the warm-up trained again"))
    metrics = sft.train_sft(sft_config(tmp_path), progress=False)
    assert metrics == json.loads((run / "metrics.json").read_text()) and metrics["steps"] == 1
    assert snapshot(run) == before
    assert "read back and nothing is trained" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r'learning_rate .* -> 0\.5.*if_exists="overwrite"'):
        sft.train_sft(sft_config(tmp_path, learning_rate=0.5), progress=False)
    assert snapshot(run) == before


@pytest.mark.parametrize("moment", ["saving the model", "writing the report"])
def test_an_interrupted_sft_overwrite_leaves_the_earlier_warm_up_whole(finished_sft, tmp_path, monkeypatch, moment):
    from transformers import PreTrainedModel

    run = tmp_path / "s"
    shutil.copytree(finished_sft, run)
    (run / "notes.txt").write_text("mine")
    before = snapshot(run)
    if moment == "saving the model":
        monkeypatch.setattr(PreTrainedModel, "save_pretrained", ctrl_c)
    else:  # the new model is saved, its report is not: the old metrics.json must not describe it
        monkeypatch.setattr(report, "write_sft_report", ctrl_c)
    with pytest.raises(KeyboardInterrupt) as caught:
        sft.train_sft(sft_config(tmp_path), progress=False, if_exists="overwrite")
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert f"{run / 'model'} is as it was before this run" in str(caught.value)
    assert "Run this cell again" in str(caught.value) and "command" not in str(caught.value)
    assert snapshot(run) == before  # the earlier warm-up, whole, and the notes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no half-written copy beside it


def test_an_sft_overwrite_replaces_the_run_as_a_whole_and_keeps_notes(finished_sft, tmp_path):
    run = tmp_path / "s"
    shutil.copytree(finished_sft, run)
    (run / "notes.txt").write_text("mine")
    (run / "report.md").write_text("the earlier report")
    sft.train_sft(sft_config(tmp_path), progress=False, if_exists="overwrite")
    assert (run / "report.md").read_text() != "the earlier report" and (run / "notes.txt").read_text() == "mine"
    assert sft.complete_model(run / "model") and sorted(p.name for p in tmp_path.iterdir()) == ["s"]


# ---------------------------------------------------------------------------------------------
# The reward model (week 6b's training cell)
# ---------------------------------------------------------------------------------------------

PAIRS = [
    {"prompt": "Add 23 and 41. Reply with one line: RESULT: <sum>", "chosen": "RESULT: 64", "rejected": "RESULT:64"},
    {"prompt": "Add 23 and 41. Reply with one line: RESULT: <sum>", "chosen": "RESULT: 64", "rejected": "RESULT: 66"},
    {"prompt": "Is 14 an even number? Answer Yes or No only.", "chosen": "Yes", "rejected": "No"},
    {"prompt": "Write the word lemon inside square brackets. Reply with nothing else.", "chosen": "[lemon]",
     "rejected": "Sure! Here is the answer: [lemon]"},
]
SETTINGS = rm.TrainSettings(epochs=2, batch_size=2, lr=1e-2)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A 2-layer, 32-wide BERT with random weights and the real MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = AutoTokenizer.from_pretrained(rm.backbone_folder())
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def fresh_rm(backbone: Path, seed: int = 0) -> rm.RewardModel:
    """As lesson 6b builds it: seeded with the settings' seed, then built."""
    from course_utils.device import seed_everything

    seed_everything(seed)
    return rm.build_reward_model(backbone, max_length=48, device="cpu")


def scores(model) -> torch.Tensor:
    return model.score([p["prompt"] for p in PAIRS], [p["rejected"] for p in PAIRS])


def interrupt_the_second_step(monkeypatch):
    real, calls = rm.bradley_terry_loss, []

    def loss(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(rm, "bradley_terry_loss", loss)


def test_training_a_trained_reward_model_again_is_refused_in_one_line(tiny_bert):
    model = fresh_rm(tiny_bert)
    rm.train_reward_model(model, PAIRS, SETTINGS, progress=False)
    with pytest.raises(ValueError, match=r"trained already \(\d+ step\(s\) on this model\).*rm.build_reward_model\) again") as caught:
        rm.train_reward_model(model, PAIRS, SETTINGS, progress=False)  # week 6b's cell run again: today an AssertionError
    assert "\n" not in str(caught.value)
    rm.train_reward_model(model, PAIRS, SETTINGS, progress=False, continue_training=True)  # on purpose: allowed


def test_ctrl_c_in_reward_model_training_is_the_kits_message(tiny_bert, monkeypatch):
    model = fresh_rm(tiny_bert)
    interrupt_the_second_step(monkeypatch)
    with pytest.raises(KeyboardInterrupt) as caught:
        rm.train_reward_model(model, PAIRS, SETTINGS, progress=False)
    assert isinstance(caught.value, safe_files.Interrupted), type(caught.value)
    assert re.search(r"interrupted after 1 of \d+ reward-model steps", str(caught.value)), str(caught.value)
    with pytest.raises(ValueError, match="trained already"):  # the part-trained model is not trained on silently
        rm.train_reward_model(model, PAIRS, SETTINGS, progress=False)


def test_train_and_save_keeps_a_finished_model_and_restarts_an_interrupted_one(tiny_bert, tmp_path, monkeypatch, capsys):
    straight = fresh_rm(tiny_bert)
    expected = rm.train_reward_model(straight, PAIRS, SETTINGS, progress=False)
    folder, model = tmp_path / "reward_model", fresh_rm(tiny_bert)
    interrupt_the_second_step(monkeypatch)
    with pytest.raises(KeyboardInterrupt) as caught:
        rm.train_and_save(model, PAIRS, SETTINGS, folder, progress=False)
    assert "Run this cell again" in str(caught.value) and not folder.exists()
    monkeypatch.undo()
    history = rm.train_and_save(model, PAIRS, SETTINGS, folder, progress=False)  # from the fresh start again
    assert history["loss"] == pytest.approx(expected["loss"], rel=1e-6, abs=1e-7)
    torch.testing.assert_close(scores(model), scores(straight))
    saved = snapshot(folder)
    monkeypatch.setattr(rm, "train_reward_model", lambda *a, **k: pytest.fail("trained again"))
    again = rm.train_and_save(model, PAIRS, SETTINGS, folder, progress=False)  # the cell run again: kept
    assert again["loss"] == history["loss"] and snapshot(folder) == saved
    assert "it is loaded and nothing is trained" in capsys.readouterr().out
    torch.testing.assert_close(scores(model), scores(straight))
    with pytest.raises(ValueError, match=r"trained otherwise \(lr 0\.01 -> 0\.5\).*if_exists=\"overwrite\""):
        rm.train_and_save(model, PAIRS, rm.TrainSettings(epochs=2, batch_size=2, lr=0.5), folder, progress=False)


def test_saving_a_reward_model_is_whole_or_not_at_all(tiny_bert, tmp_path, monkeypatch):
    import safetensors.torch

    folder = tmp_path / "reward_model"
    fresh_rm(tiny_bert, seed=0).save(folder)
    before = snapshot(folder)
    other = fresh_rm(tiny_bert, seed=1)  # other marker embeddings: other encoder bytes
    monkeypatch.setattr(safetensors.torch, "save_file", ctrl_c)  # Ctrl-C once the encoder is written
    with pytest.raises(KeyboardInterrupt):
        other.save(folder)
    assert snapshot(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ["reward_model"]
