"""Committed notebooks carry no execution timestamps (the CI check), and the cleaner removes only those."""

from __future__ import annotations

import json

import pytest

from course_utils.machinery import notebook_clean
from course_utils.machinery.paths import NOTEBOOKS_DIR


def test_the_cleaner_drops_timestamps_and_keeps_everything_an_author_wrote(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": "1", "outputs": [{"output_type": "stream", "text": "1"}],
                     "metadata": {"execution": {"iopub.execute_input": "2026-12-01T13:10:02Z"}, "tags": ["x"],
                                  "jupyter": {"source_hidden": True}}},
                    {"cell_type": "markdown", "source": "# hi", "metadata": {}}],
          "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "a.ipynb"
    path.write_text(json.dumps(nb))
    assert notebook_clean.clean_files([path], check=True) == [path]
    assert "execution" in path.read_text()  # --check changes nothing
    assert notebook_clean.clean_files([path]) == [path]
    cleaned = json.loads(path.read_text())
    assert cleaned["cells"][0]["metadata"] == {"tags": ["x"], "jupyter": {"source_hidden": True}}
    assert cleaned["cells"][0]["outputs"] == nb["cells"][0]["outputs"] and cleaned["metadata"] == nb["metadata"]
    assert notebook_clean.clean_files([path]) == []  # idempotent
    with pytest.raises(SystemExit, match="clean-notebooks"):
        path.write_text(json.dumps(nb))
        notebook_clean.main([str(path), "--check"])


def test_a_progress_bar_shows_its_finished_state_not_the_frozen_first_frame():
    state = {"bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}},
             "l": {"model_name": "HTMLModel", "state": {"value": "SFT\u2007steps:\u2007100%"}},
             "p": {"model_name": "FloatProgressModel", "state": {"value": 25.0, "max": 25.0}},
             "r": {"model_name": "HTMLModel", "state": {"value": "\u200725/25\u2007[00:50&lt;00:00]"}},
             "other": {"model_name": "VBoxModel", "state": {"children": []}}}
    frozen = "SFT steps:   0%|          | 0/25 [00:00<?, ?it/s]"
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "", "outputs": [
        {"output_type": "display_data", "data": {notebook_clean.WIDGET_VIEW: {"model_id": "bar"}, "text/plain": [frozen]}},
        {"output_type": "display_data", "data": {notebook_clean.WIDGET_VIEW: {"model_id": "other"}, "text/plain": ["VBox()"]}}]}],
          "metadata": {"widgets": {notebook_clean.WIDGET_STATE: {"state": state}}}}
    assert notebook_clean.clean_notebook(nb)
    outputs = nb["cells"][0]["outputs"]
    assert outputs[0]["data"]["text/plain"] == ["SFT steps: 100%|##########| 25/25 [00:50<00:00]"]
    assert outputs[1]["data"]["text/plain"] == ["VBox()"]  # not a progress bar: left alone
    assert not notebook_clean.clean_notebook(nb)  # idempotent


def test_every_committed_notebook_is_clean():
    notebooks = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    assert notebooks
    dirty = notebook_clean.clean_files(notebooks, check=True)
    assert not dirty, f"{[p.name for p in dirty]}: run `python -m course_utils clean-notebooks` before committing"
