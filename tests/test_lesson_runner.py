"""`python -m course_utils lessons`: every lesson run headless, in order, with a report. Tested on
three small notebooks (a real kernel each): a failing lesson is reported with its cell and error and
does not stop the next; the committed lessons are never written; --resume skips what passed."""

from __future__ import annotations

import hashlib
import json

import nbformat
import pytest

from course_utils.machinery import lesson_runner


def write_lesson(folder, stem, *code, title="A lesson"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}")] + [nbformat.v4.new_code_cell(c) for c in code]
    path = folder / f"{stem}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture
def lessons(tmp_path):
    folder = tmp_path / "notebooks"
    (folder / "ko").mkdir(parents=True)
    write_lesson(folder, "week01_ok", "import os\nprint('fast =', os.environ.get('COURSE_FAST'))",
                 "print(open('marker.txt').read())", title="First")
    write_lesson(folder, "week02_bad", "x = 1", "raise ValueError('boom ' + str(x))", title="Second")
    write_lesson(folder, "week03_after", "print('still ran')", title="Third")
    write_lesson(folder / "ko", "week01_ok", "print('한국어')", title="첫째")
    (folder / "marker.txt").write_text("ran in the lesson's folder")  # the kernel's working directory
    return folder


def test_lesson_paths_order_and_bad_names(lessons):
    paths = lesson_runner.lesson_paths(lang="all", folder=lessons)
    assert [lesson_runner.lesson_key(p) for p in paths] == ["week01_ok", "ko/week01_ok", "week02_bad", "week03_after"]
    assert [p.stem for p in lesson_runner.lesson_paths(["week03_after"], folder=lessons)] == ["week03_after"]
    with pytest.raises(ValueError, match="no lesson 'week9'; lessons: week01_ok, week02_bad"):
        lesson_runner.lesson_paths(["week9"], folder=lessons)
    with pytest.raises(ValueError, match="no Korean edition of week02_bad; the Korean edition covers weeks 1$"):
        lesson_runner.lesson_paths(["week02_bad"], lang="ko", folder=lessons)
    with pytest.raises(ValueError, match="choose one of en, ko, all"):
        lesson_runner.lesson_paths(lang="fr", folder=lessons)


def test_korean_weeks_are_the_korean_notebooks(tmp_path):
    """The weeks the messages name as translated are the notebooks in ko/, not a list typed in."""
    assert lesson_runner.korean_weeks(tmp_path) == "no weeks yet"
    (tmp_path / "ko").mkdir()
    for stem in ("week10_trl", "week01_four", "week06a_sft"):
        write_lesson(tmp_path / "ko", stem, "x = 1")
    assert lesson_runner.korean_weeks(tmp_path) == "weeks 1, 6a, 10"


def test_run_reports_each_lesson_and_never_writes_the_sources(lessons, tmp_path):
    sources = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in lessons.rglob("*.ipynb")}
    out = tmp_path / "out"
    report = lesson_runner.run(lesson_runner.lesson_paths(lang="all", folder=lessons), out, fast=True, timeout=60)

    by_lesson = {e["lesson"]: e for e in report["lessons"]}
    assert [e["status"] for e in report["lessons"]] == ["ok", "ok", "failed", "ok"]  # the failure did not stop week 3
    error = by_lesson["week02_bad"]["error"]
    assert (error["cell"], error["message"], error["source"]) == (2, "ValueError: boom 1", "raise ValueError('boom ' + str(x))")
    assert by_lesson["week02_bad"]["cells_run"] == 2 and by_lesson["week03_after"]["code_cells"] == 1
    first = nbformat.read(out / "week01_ok.ipynb", as_version=4)
    printed = [o["text"] for c in first.cells if c.cell_type == "code" for o in c.outputs]
    assert printed == ["fast = 1\n", "ran in the lesson's folder\n"]  # COURSE_FAST reached the kernel
    assert (out / "ko" / "week01_ok.ipynb").is_file() and by_lesson["ko/week01_ok"]["title"] == "첫째"
    assert sources == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in lessons.rglob("*.ipynb")}

    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "**3 of 4 lessons ran without an error**" in markdown and "COURSE_FAST=1" in markdown
    assert "**week02_bad**, failed at cell 2 (`raise ValueError('boom ' + str(x))`): ValueError: boom 1" in markdown
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["pending"] == []


def test_resume_skips_what_passed_and_reruns_the_rest(lessons, tmp_path):
    out = tmp_path / "out"
    paths = lesson_runner.lesson_paths(folder=lessons)
    lesson_runner.run(paths, out, timeout=60)
    write_lesson(lessons, "week02_bad", "x = 1", "print(x)", title="Second, fixed")
    report = lesson_runner.run(paths, out, timeout=60, resume=True)
    assert [(e["lesson"], e["status"], bool(e.get("reused"))) for e in report["lessons"]] == [
        ("week01_ok", "ok", True), ("week02_bad", "ok", False), ("week03_after", "ok", True)]
    # A full-length run does not count as a COURSE_FAST one: everything runs again.
    again = lesson_runner.run(paths, out, fast=True, timeout=60, resume=True)
    assert not any(e.get("reused") for e in again["lessons"])


def test_refuses_a_folder_it_did_not_write(lessons, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="holds no lessons report; choose a new or empty folder"):
        lesson_runner.run(lesson_runner.lesson_paths(folder=lessons), foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
