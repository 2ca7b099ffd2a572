"""A run made from notebooks/ (its model given as ``../runs/sft-cpu/model``) is read again from
notebooks/ko/ (the Korean edition, where the same folder is ``../../runs/sft-cpu/model``): the
model it names is the same folder, found through the manifest's ``model_resolved``."""

import json
import os
from pathlib import Path

import pytest

from course_utils.config import PPOConfig
from course_utils.trainer import check_same_run, model_resolved, read_run


@pytest.fixture
def two_folders(tmp_path, monkeypatch):
    """repo/runs/sft/model (the model), repo/runs/week07 (the run), repo/notebooks/ko (where we read it)."""
    model = tmp_path / "runs" / "sft" / "model"
    model.mkdir(parents=True)
    run = tmp_path / "runs" / "week07"
    run.mkdir()
    (tmp_path / "notebooks" / "ko").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "notebooks")
    saved = PPOConfig(model="../runs/sft/model", output_dir=str(run.parent), run_name="week07")
    (run / "config.json").write_text(json.dumps(saved.to_dict()))
    (run / "manifest.json").write_text(json.dumps({"folder": "../runs/sft/model", **model_resolved(saved.model)}))
    (run / "metrics.jsonl").write_text(json.dumps({"update": 1}) + "\n")
    (run / "evals.jsonl").write_text(json.dumps({"update": 0, "pass_rate": 0.5}) + "\n")
    (run / "summary.json").write_text(json.dumps({"updates": 1}))
    monkeypatch.chdir(tmp_path / "notebooks" / "ko")
    return run, model


def test_the_manifest_records_the_absolute_folder_of_a_local_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    assert model_resolved("m") == {"model_resolved": str((tmp_path / "m").resolve())}
    assert model_resolved("smollm2-135m-instruct") == {}  # a preset name is the same from anywhere


def test_read_run_names_the_model_from_the_folder_it_is_read_in(two_folders):
    run, model = two_folders
    config = read_run(run, min_updates=1).config
    assert config["model"] == os.path.join("..", "..", "runs", "sft", "model")
    assert os.path.realpath(config["model"]) == os.path.realpath(model)


def test_a_finished_run_is_the_same_run_when_only_the_way_to_its_model_differs(two_folders):
    run, _ = two_folders
    same = PPOConfig(model="../../runs/sft/model", output_dir=str(run.parent), run_name="week07")
    check_same_run(run, same)  # no refusal: the same folder, named from notebooks/ko/
    other = run.parent / "other"
    other.mkdir()
    with pytest.raises(ValueError, match="model '../runs/sft/model' -> '../../runs/other'"):
        check_same_run(run, PPOConfig(model="../../runs/other", output_dir=str(run.parent), run_name="week07"))


def test_a_checkpoint_loads_when_only_the_way_to_its_model_differs(tmp_path, monkeypatch):
    """Week 8 restores week 7's checkpoint from notebooks/ko/ when week 7 ran from notebooks/ (or the
    reverse): the model path differs as a string, the folder is the same."""
    import shutil

    from course_utils.config import load_config
    from course_utils.machinery import hub
    from course_utils.trainer import PPOTrainer

    model = tmp_path / "runs" / "tiny"
    shutil.copytree(hub.resolve_model(hub.TINY_MODEL), model)
    (tmp_path / "notebooks" / "ko").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "notebooks")
    smoke = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
    PPOTrainer(load_config(smoke, model="../runs/tiny", output_dir=str(tmp_path / "runs"), run_name="week07",
                           total_updates=1, eval_every=1, eval_prompts=2, num_sample_prompts=2), quiet=True).train()
    monkeypatch.chdir(tmp_path / "notebooks" / "ko")
    config = read_run(tmp_path / "runs" / "week07").config
    assert config["model"] == os.path.join("..", "..", "runs", "tiny")
    inspector = PPOTrainer(PPOConfig(**config), quiet=True)
    assert inspector.load_checkpoint() and inspector.update == 1
