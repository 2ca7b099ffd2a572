"""Reliability, round three (issue 53, item 6): thirty more things a learner or an instructor does in
the notebooks, tried for real (docs/reliability/round_three_probe.md lists all thirty with the
kit's answer). Each test here is one that was bad: it fails on the code before its fix. The
standard is the issue's: one clear line naming the fix, nothing lost, and never a wrong number
printed as if it were right (a verdict object counted as a pass, NaN read as a verdict)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from course_utils import reward_model as rm
from course_utils import ppo_math, tasks
from course_utils.device import set_threads
from course_utils.lesson_aids import capstone, diagnostics, exercises, widgets
from course_utils.machinery import lesson_runner

torch.set_num_threads(1)


# ---------------------------------------------------------------- every lesson's first cell


def test_a_course_threads_that_is_not_a_number_is_named_with_the_fix(monkeypatch):
    # probe #1: export COURSE_THREADS=four, then the first cell's set_threads()
    monkeypatch.setenv("COURSE_THREADS", "four")
    with pytest.raises(ValueError, match=r"\$COURSE_THREADS is 'four'.*export COURSE_THREADS=4"):
        set_threads()
    before = torch.get_num_threads()
    monkeypatch.setenv("COURSE_THREADS", " 2 ")  # stray spaces from a shell line still read
    assert set_threads() == 2
    torch.set_num_threads(before)


# ---------------------------------------------------------------- the exercises (weeks 2-5)


def ratio_on_another_device(logprobs, old_logprobs):
    # a learner on a Mac or a GPU machine moves the result with .to(device); "meta" stands in for it here
    return torch.exp(logprobs - old_logprobs).to("meta")


@pytest.mark.parametrize("lang, words", [("en", "is on device meta, expected cpu"), ("ko", "장치")])
def test_a_result_on_another_device_is_named_with_the_fix(lang, words):
    # probe #13: before, "your result could not be compared (RuntimeError: Tensor on device cpu is not on
    # the expected device meta!)" and the exercise's general hint
    result = exercises.check("probability_ratio", ratio_on_another_device, lang=lang)
    assert not result.passed
    assert words in result.message
    assert ".to(" in result.message and "could not be compared" not in result.message


# ---------------------------------------------------------------- views and helpers behind the cells


@pytest.fixture
def graded():
    records = tasks.load_split("test")[:6]
    answers = [r.target if k % 2 == 0 else "nope" for k, r in enumerate(records)]
    return records, answers, [1.0, -1.0, 0.8, -0.5, 0.9, 0.2]


def test_score_threshold_view_reads_check_verdicts_as_their_passed(graded):
    # probe #18 (week 6b): passed = [tasks.check(r, a) for ...] without .passed counted every answer as a pass
    records, answers, scores = graded
    verdicts = [tasks.check(r, a) for r, a in zip(records, answers)]
    flags = [v.passed for v in verdicts]
    assert widgets.score_threshold_view(scores, verdicts, 0.5)[1] == widgets.score_threshold_view(scores, flags, 0.5)[1]
    assert widgets.score_threshold_view(scores, verdicts, 0.5)[1]["passing"] == 3


def test_score_threshold_view_names_a_length_mismatch(graded):
    # probe #19: before, numpy's "operands could not be broadcast together with shapes (6,) (5,)"
    _, _, scores = graded
    with pytest.raises(ValueError, match="6 scores and 5 verdicts"):
        widgets.score_threshold_view(scores, [True, False, True, False, True], 0.5)


def test_paired_pass_change_reads_check_verdicts_and_refuses_other_things(graded):
    # probe #28 (week 8): the verdict objects are always truthy, so nothing was ever gained or lost
    records, answers, _ = graded
    before = [tasks.check(r, a) for r, a in zip(records, answers)]
    after = [tasks.check(r, r.target) for r in records]
    change = diagnostics.paired_pass_change(before, after)
    assert (change["gained"], change["lost"]) == (3, 0)
    assert change == diagnostics.paired_pass_change([v.passed for v in before], [v.passed for v in after])
    assert diagnostics.paired_pass_change(np.array([True, False]), torch.tensor([1, 1]))["gained"] == 1
    with pytest.raises(ValueError, match=r"passed_after\[0\] is 'pass'.*\.passed"):
        diagnostics.paired_pass_change([True], ["pass"])


def test_beta_view_names_labels_that_do_not_match_the_batch():
    # probe #16 (week 5): before, matplotlib's "The number of FixedLocator locations (3) ... labels (2)"
    g = torch.Generator().manual_seed(0)
    logprobs, ref = -torch.rand(3, 5, generator=g, dtype=torch.float64), -torch.rand(3, 5, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match="3 responses need 3 labels, got 2"):
        widgets.beta_view(0.1, torch.tensor([1.0, 0.5, 0.0]), logprobs, ref, torch.ones(3, 5), ["a", "b"])


def test_clipping_view_names_log_probs_of_two_shapes():
    # probe #14 (week 4): before, torch's "The size of tensor a (6) must match the size of tensor b (5)"
    with pytest.raises(ValueError, match=r"one shape \[B, T\].*\(4, 6\), \(4, 5\)"):
        widgets.clipping_view(0.2, 1.0, torch.zeros(4, 6), torch.zeros(4, 5))
    with pytest.raises(ValueError, match=r"and mask"):
        widgets.clipping_view(0.2, 1.0, torch.zeros(4, 6), torch.zeros(4, 6), torch.ones(4, 5))
    assert widgets.clipping_view(0.2, 1.0, torch.zeros(4, 6), torch.zeros(4, 6))[1] == 0.0


@pytest.mark.parametrize("missing", [float("nan"), None])
def test_compare_refuses_a_seed_without_a_number(missing):
    # probe #32 (week 11): "A − B = +nan ± nan (95% interval [+nan, +nan] ...): level within noise"
    with pytest.raises(ValueError, match=r"arm a has no number at position\(s\) \[1\].*leave a missing seed out of both"):
        capstone.compare([60.0, missing, 62.0], [55.0, 57.0, 58.0])
    assert capstone.compare([60.0, 62.0], [55.0, 58.0]).paired


def test_bradley_terry_loss_takes_plain_numbers():
    # probe #20 (week 6b): before, AttributeError: 'list' object has no attribute 'shape'
    loss = rm.bradley_terry_loss([2.0, 0.0], [0.0, 0.0])
    expected = rm.bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0]))
    assert torch.equal(loss, expected) and math.isfinite(loss.item())


# ---------------------------------------------------------------- the instructor's commands


def test_lessons_resume_names_a_report_it_cannot_read(tmp_path):
    # probe #36: `lessons --resume` on a report.json cut short answered "Expecting value: line 1 column 14"
    (tmp_path / "report.json").write_text('{"lessons": [', encoding="utf-8")
    with pytest.raises(ValueError, match=r"report\.json is not a lessons report.*delete it.*without --resume"):
        lesson_runner.prepare_out(tmp_path, resume=True)
    (tmp_path / "report.json").write_text(json.dumps({"lessons": [{"lesson": "week01_x", "status": "ok"}]}))
    assert list(lesson_runner.prepare_out(tmp_path, resume=True)) == ["week01_x"]


def test_site_out_naming_a_file_is_refused_and_the_file_kept(tmp_path):
    # probe #41: before, the disk-error line "could not write README.md: Not a directory ... the last
    # complete checkpoint or model is intact" (no checkpoint is involved in building the site)
    from course_utils.machinery import site

    a_file = tmp_path / "README.md"
    a_file.write_text("kept", encoding="utf-8")
    with pytest.raises(ValueError, match=r"--out .*README\.md is a file; give a folder for the site"):
        site.build(a_file, ["week04_ratio_clipping"], repo="https://example.org/course.git")
    assert a_file.read_text(encoding="utf-8") == "kept"


def test_translate_names_a_misspelt_lesson_instead_of_offering_a_skeleton():
    # probe #38: `translate --stamp week3_advantage` said "start one with `translate --skeleton
    # week3_advantage`", a translations file for a lesson that does not exist
    from course_utils.machinery import translations

    with pytest.raises(ValueError, match=r"no lesson 'week3_advantage'; lessons: week01_four_models, .*week03_advantage"):
        translations.lessons(only=["week3_advantage"])


# ---------------------------------------------------------------- a rollout's rows (weeks 1 and 2)


def test_show_rollout_names_a_row_the_rollout_lacks(tiny_tokenizer):
    # probe #6 (week 2): show_rollout(rollout, tokenizer, 4) on a batch of 4 gave numpy/torch's
    # "index 4 is out of bounds for dimension 0 with size 4"
    from types import SimpleNamespace

    from course_utils.lesson_aids.token_views import show_rollout

    eos = tiny_tokenizer.eos_token_id
    rollout = SimpleNamespace(query_ids=torch.tensor([[eos, 5, 6], [7, 8, 9]]), query_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
                              response_ids=torch.tensor([[10, eos], [11, 12]]),
                              response_mask=torch.tensor([[1.0, 1.0], [1.0, 1.0]]),
                              ended_with_eos=torch.tensor([True, False]))
    with pytest.raises(IndexError, match=r"row 2 is not in this rollout: it has 2 rows, 0 to 1"):
        show_rollout(rollout, tiny_tokenizer, 2)
    assert show_rollout(rollout, tiny_tokenizer, -1).startswith("row 1: 2 response tokens")  # counted from the end
    with pytest.raises(TypeError, match="row must be a row number"):
        show_rollout(rollout, tiny_tokenizer, "0")


# ---------------------------------------------------------------- week 7's training cell


def smoke(output_dir, **overrides):
    from course_utils.config import load_config
    from course_utils.machinery.paths import CONFIGS_DIR

    return load_config(CONFIGS_DIR / "smoke.yaml", output_dir=str(output_dir),
                       **{"total_updates": 2, "eval_every": 2, "eval_prompts": 2, "num_sample_prompts": 2, **overrides})


def test_a_finished_run_in_a_read_only_folder_is_read_back_and_only_a_new_run_is_refused(tmp_path, monkeypatch):
    # probe #24: week 7's training cell run again over a finished run in a read-only folder (a shared
    # course folder, a read-only mount) was refused with "cannot write into ...: choose another output_dir
    # (--set output_dir=DIR)", although reading the run back writes nothing, and named a command
    import errno

    from course_utils.machinery import safe_files
    from course_utils.trainer import PPOTrainer

    PPOTrainer(smoke(tmp_path), quiet=True).train()
    run_dir = tmp_path / "smoke"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    def read_only(*args, **kwargs):  # chmod does not stop root, who runs the tests in CI
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(safe_files.tempfile, "TemporaryFile", read_only)
    trainer = PPOTrainer(smoke(tmp_path), quiet=True)
    assert trainer.train()["updates"] == 2 and len(trainer.history) == 2
    with pytest.raises(ValueError, match=r"cannot write into .*smoke \(Read-only file system\): choose another "
                                         r"output_dir \(load_config\(\.\.\., output_dir=DIR\)"):
        trainer.train(if_exists="overwrite")
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_second_kernel_training_into_the_same_folder_is_refused_before_it_moves_anything(tmp_path):
    # probe #46: the week 7 lab cell (train(if_exists="overwrite")) in a second kernel while the first
    # kernel's run was training moved that run aside under it; see the probe table for what followed
    pytest.importorskip("fcntl")
    from course_utils.machinery import safe_files
    from course_utils.trainer import PPOTrainer

    trainer = PPOTrainer(smoke(tmp_path), quiet=True)
    with safe_files.one_writer(tmp_path / "smoke", "the first kernel's"):  # the first kernel, mid-run
        (tmp_path / "smoke" / "metrics.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "smoke" / "metrics.jsonl").write_text("the first kernel's log\n")
        for how in ({"if_exists": "overwrite"}, {}):
            with pytest.raises(ValueError, match=r"another process is training into .*smoke right now \(a second "
                                                 r"kernel running the same cell\?\): wait until it ends"):
                trainer.train(**how)
        assert sorted(p.name for p in tmp_path.iterdir()) == [".smoke.lock", "smoke"]  # nothing moved aside
        assert (tmp_path / "smoke" / "metrics.jsonl").read_text() == "the first kernel's log\n"
    (tmp_path / "smoke" / "metrics.jsonl").unlink()
    assert trainer.train()["updates"] == 2  # once the first has ended
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke"]  # the lock goes with the run that held it
