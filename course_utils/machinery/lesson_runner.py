"""Run the lessons headless, in order, and write a report: the instructor's check that every lesson
runs on this machine (``python -m course_utils lessons``, ``make lessons``).

Each lesson runs top to bottom in a fresh kernel, with its own folder as the working directory, the way
JupyterLab's "Restart and run all" would: nbclient, the engine under nbconvert and nbval. The executed
copies go to ``build/lessons/`` (Korean ones to ``build/lessons/ko/``); the committed lessons are never
written. The report, ``report.json`` and ``report.md`` beside the copies, is rewritten after every
lesson, so an interruption loses at most the lesson that was running, and ``--resume`` skips lessons
that already passed and have not changed since. Lessons run in order because week 8 reads the run
that week 7 writes into ``runs/week07``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from course_utils.machinery.paths import NOTEBOOKS_DIR, REPO_ROOT
from course_utils.machinery.site import notebook_title

DEFAULT_OUT = REPO_ROOT / "build" / "lessons"
LANGUAGES = ("en", "ko", "all")
KERNEL_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
"""Set for the kernels unless the caller's environment already says otherwise (as ``make`` does)."""


def lesson_paths(names: list[str] | None = None, lang: str = "en", folder: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The lessons to run, in course order: ``folder/week*.ipynb`` (``lang="en"``), their Korean editions
    in ``folder/ko`` (``"ko"``), or each English lesson followed by its Korean edition (``"all"``). A name
    that is not a lesson is a ValueError naming the known ones."""
    if lang not in LANGUAGES:
        raise ValueError(f"--lang {lang!r}: choose one of {', '.join(LANGUAGES)}")
    english = sorted(folder.glob("week*.ipynb"))
    known = [p.stem for p in english]
    unknown = [name for name in names or [] if name not in known]
    if unknown:
        raise ValueError(f"no lesson {unknown[0]!r}; lessons: {', '.join(known)}")
    chosen = [p for p in english if not names or p.stem in names]
    paths = []
    for path in chosen:
        korean = folder / "ko" / path.name
        paths += {"en": [path], "ko": [korean], "all": [path, korean]}[lang]
    paths = [p for p in paths if p.is_file()]
    if not paths:
        raise ValueError(f"no {'Korean ' if lang == 'ko' else ''}edition of {', '.join(names or known)}; "
                         f"the Korean edition covers {korean_weeks(folder)}")
    return paths


def korean_weeks(folder: Path = NOTEBOOKS_DIR) -> str:
    """The weeks with a Korean edition (``folder/ko/week*.ipynb``), as a message names them: "weeks 1, 2, 6a"."""
    paths = sorted((folder / "ko").glob("week*.ipynb"))
    weeks = [path.stem.split("_")[0].removeprefix("week").lstrip("0") for path in paths]
    return f"weeks {', '.join(weeks)}" if weeks else "no weeks yet"


def lesson_key(path: Path) -> str:
    """``week03_advantage`` or ``ko/week03_advantage``: the name in the report and under the output folder."""
    return f"ko/{path.stem}" if path.parent.name == "ko" else path.stem


def outputs_summary(nb: dict) -> dict:
    """What a reader of the report wants per lesson: code cells run, figures drawn, warnings printed."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    figures = sum(1 for o in outputs if "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {}))
    warnings = sum(1 for o in outputs if o.get("name") == "stderr" and "Warning" in "".join(o.get("text", "")))
    return {"code_cells": len(code), "cells_run": sum(1 for c in code if c.get("execution_count")),
            "figures": figures, "warnings": warnings}


def failure(error: BaseException, nb: dict, index: int | None) -> dict:
    """The failing cell and the error on one line (the executed copy holds the whole traceback)."""
    name = getattr(error, "ename", None) or type(error).__name__
    value = getattr(error, "evalue", None)
    message = f"{name}: {value}" if value is not None else " ".join(str(error).split())[:300]
    first_line = ""
    if index is not None and index < len(nb["cells"]):
        first_line = next((l for l in "".join(nb["cells"][index]["source"]).splitlines() if l.strip()
                           and not l.startswith("#")), "")
    return {"cell": index, "message": message, "source": first_line[:120]}


def run_lesson(path: Path, out: Path, timeout: int, env: dict) -> dict:
    """Execute one lesson into ``out`` and return its report entry (never raises for the lesson's own
    errors: a failing cell is the finding; on Ctrl-C the partial copy is saved and the interrupt goes on
    to ``run``, which records it)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError
    from tqdm.auto import tqdm

    nb = nbformat.read(path, as_version=4)
    current = {"index": None}
    bar = tqdm(total=sum(1 for c in nb.cells if c.cell_type == "code"), desc=lesson_key(path), unit="cell",
               leave=False)
    client = NotebookClient(nb, timeout=timeout, startup_timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: current.update(index=cell_index),
                            on_cell_executed=lambda cell, cell_index, execute_reply: bar.update(
                                1 if cell.cell_type == "code" else 0))
    entry = {"lesson": lesson_key(path), "title": notebook_title(nb),
             "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "status": "ok"}
    start = time.perf_counter()
    try:
        client.execute(env=env)  # Ctrl-C propagates; the finally block still saves the partial copy
    except CellTimeoutError as error:
        entry.update(status="timed out", error=failure(error, nb, current["index"]))
    except Exception as error:  # a lesson's own error, a dead kernel: recorded, the next lesson still runs
        entry.update(status="failed", error=failure(error, nb, current["index"]))
    finally:
        bar.close()
        entry["wall_s"] = round(time.perf_counter() - start, 1)
        entry.update(outputs_summary(nb))
        target = out / f"{entry['lesson']}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        entry["executed"] = str(target.relative_to(out))
    return entry


def host_line() -> str:
    from course_utils.machinery.calibration import host_info
    from course_utils.machinery.versions import package_versions

    host, versions = host_info(), package_versions(("torch",))
    flags = f" ({' '.join(host['flags'])})" if host["flags"] else ""
    return f"{host['cpu_model']}{flags}, {host['cpu_count']} CPUs · torch {versions['torch']}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report_markdown(report: dict) -> str:
    entries = report["lessons"]
    passed = [e for e in entries if e["status"] == "ok"]
    minutes = sum(e["wall_s"] for e in entries) / 60
    lines = ["# The lessons, run headless", "",
             f"commit {report['commit']} · {report['started']} · {report['host']} · "
             + ("COURSE_FAST=1 (the long runs shortened)" if report["fast"] else "full length (no COURSE_FAST)"), "",
             f"**{len(passed)} of {len(entries)} lessons ran without an error** in {minutes:.1f} min of execution"
             + (f"; still to run: {', '.join(report['pending'])}" if report.get("pending") else "") + ".", "",
             "| lesson | title | result | wall | code cells run | figures | warnings |", "|---|---|---|---|---|---|---|"]
    for e in entries:
        result = e["status"] + (" (earlier run)" if e.get("reused") else "")
        lines.append(f"| [{e['lesson']}]({e['executed']}) | {e['title']} | {result} | {e['wall_s']:.0f} s | "
                     f"{e['cells_run']} / {e['code_cells']} | {e['figures']} | {e['warnings']} |")
    problems = [e for e in entries if e["status"] != "ok"]
    if problems:
        lines += ["", "## What went wrong", "", "Cells are counted from 0 over the whole notebook, markdown included "
                  "(as nbval counts them).", ""]
        for e in problems:
            error = e["error"]
            where = f"cell {error['cell']}" + (f" (`{error['source']}`)" if error["source"] else "")
            lines.append(f"- **{e['lesson']}**, {e['status']} at {where}: {error['message']}. The executed copy "
                         f"`{e['executed']}` shows the traceback; rerun this lesson alone with "
                         f"`python -m course_utils lessons --lessons {e['lesson'].removeprefix('ko/')}`.")
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict) -> None:
    """Both files, replaced whole (a crash mid-write leaves the previous report)."""
    for name, text in (("report.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n"),
                       ("report.md", report_markdown(report))):
        partial = out / f".{name}.partial"
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, out / name)


def prepare_out(out: Path, resume: bool) -> dict:
    """The earlier report's entries by lesson (for ``--resume``); a non-empty folder we did not write
    is refused, so nothing of the user's is overwritten."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder, e.g. --out {out.parent / 'lessons'}")
    earlier = out / "report.json"
    if out.is_dir() and any(out.iterdir()) and not earlier.is_file():
        raise ValueError(f"{out} is not empty and holds no lessons report; choose a new or empty folder with --out")
    out.mkdir(parents=True, exist_ok=True)
    if not resume or not earlier.is_file():
        return {}
    try:
        return {e["lesson"]: e for e in json.loads(earlier.read_text(encoding="utf-8"))["lessons"]}
    except (ValueError, KeyError, TypeError) as error:  # a report cut short or edited by hand
        raise ValueError(f"{earlier} is not a lessons report this runner can read ({type(error).__name__}: {error}): "
                         f"delete it (and run every lesson again), or run without --resume") from None


def run(paths: list[Path], out: Path = DEFAULT_OUT, fast: bool = False, timeout: int = 3600,
        resume: bool = False) -> dict:
    """Run ``paths`` in order into ``out``, rewriting the report after each; returns the report."""
    from tqdm.auto import tqdm

    out = Path(out)
    earlier = prepare_out(out, resume)
    env = {**KERNEL_ENV, **os.environ, **({"COURSE_FAST": "1"} if fast else {})}
    report = {"commit": commit(), "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "host": host_line(), "fast": fast, "lessons": [], "pending": [lesson_key(p) for p in paths]}
    for path in tqdm(paths, desc="lessons", unit="lesson"):
        key = lesson_key(path)
        before = earlier.get(key)
        same = before and before["status"] == "ok" and before.get("fast") == fast and \
            before["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        try:
            entry = {**before, "reused": True} if same else {**run_lesson(path, out, timeout, env), "fast": fast}
        except KeyboardInterrupt:
            report["lessons"].append({**partial_entry(out, path), "status": "interrupted"})
            report["pending"].remove(key)
            write_report(out, report)
            from course_utils.machinery.safe_files import Interrupted

            raise Interrupted(f"interrupted during {key}; the report so far is in {out / 'report.md'}; "
                              "rerun with --resume to skip the lessons that passed") from None
        report["lessons"].append(entry)
        report["pending"].remove(key)
        write_report(out, report)
    return report


def partial_entry(out: Path, path: Path) -> dict:
    """The entry of a lesson cut off by Ctrl-C, from its saved partial copy."""
    import nbformat

    key = lesson_key(path)
    copy = out / f"{key}.ipynb"
    nb = nbformat.read(copy, as_version=4) if copy.is_file() else nbformat.read(path, as_version=4)
    ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count")]
    return {"lesson": key, "title": notebook_title(nb), "source_sha256": "", "wall_s": 0.0,
            "executed": f"{key}.ipynb", "error": {"cell": ran[-1] if ran else None, "message": "Ctrl-C",
                                                  "source": ""}, **outputs_summary(nb)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_utils lessons", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", nargs="+", default=None, metavar="STEM",
                        help="only these lessons, e.g. week03_advantage week04_ratio_clipping (default: all, in order)")
    parser.add_argument("--lang", choices=LANGUAGES, default="en",
                        help=f"en (default), ko (the Korean editions, {korean_weeks()}) or all (each lesson, then its Korean edition)")
    parser.add_argument("--fast", action="store_true",
                        help="COURSE_FAST=1: the long training runs shortened, as the tests run them (about 15 min in all)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the executed copies and the report (default: build/lessons)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds one cell may take before it counts as failed (default: 3600)")
    parser.add_argument("--resume", action="store_true", help="skip lessons that passed in the folder's last report and have not changed")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        raise ValueError(f"--timeout {args.timeout}: give the seconds one cell may take, e.g. --timeout 3600")
    report = run(lesson_paths(args.lessons, args.lang), Path(args.out), args.fast, args.timeout, args.resume)
    failed = [e for e in report["lessons"] if e["status"] != "ok"]
    print(f"{len(report['lessons']) - len(failed)} of {len(report['lessons'])} lessons ran without an error; "
          f"report: {Path(args.out) / 'report.md'}")
    if failed:
        raise SystemExit(f"failed: {', '.join(e['lesson'] + ' (' + e['status'] + ')' for e in failed)}; "
                         "the report names each failing cell")
