"""Files the kit writes, written so that bad input or a fault loses nothing.

* Strict JSON: ``dumps`` writes ``null`` where a value is NaN or infinite. Python's ``json`` writes
  a bare ``NaN``, which strict parsers (JavaScript, jq, Go, pandas with ``engine="pyarrow"``)
  reject, so one NaN would make a whole ``summary.json`` unreadable outside Python.
* Atomic text: ``write_text_atomic`` writes a temporary file beside the target and renames it, so a
  full disk or a kill leaves the old file, never half of the new one.
* Up-front checks, before any model loads: ``check_writable`` (a read-only output folder is named
  at once, not after 15 minutes of training) and ``check_run_folder`` (a run folder that already
  holds a run is neither wiped by accident nor resumed from nothing).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

# What "this folder holds a run" means: something a learner would lose by starting over.
RUN_MARKERS = ("checkpoint/state.pt", ".checkpoint.old/state.pt", "metrics.jsonl", "summary.json")
# What ``--overwrite`` removes before a fresh run: the old run's log and state, so a later
# ``--resume`` can never continue the old run inside the new one's log.
RUN_STATE = ("checkpoint", ".checkpoint.old", ".checkpoint.tmp", "best_policy", "metrics.jsonl", "evals.jsonl",
             "summary.json")


# ---------------------------------------------------------------------------------------------
# Strict JSON
# ---------------------------------------------------------------------------------------------


def finite_or_none(value):
    """``value`` with every NaN or infinite float replaced by None, in nested dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def dumps(obj, **kwargs) -> str:
    """``json.dumps`` that never writes NaN/Infinity (they become null); ``allow_nan=False`` makes
    any value that slipped through an error here rather than in a learner's parser."""
    return json.dumps(finite_or_none(obj), allow_nan=False, **kwargs)


# ---------------------------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------------------------


def write_text_atomic(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename: a
    reader, a kill or a full disk sees the old file or the new one, never a truncated one."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding=encoding) as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, obj, indent: int | None = 2, default=None) -> Path:
    """Strict JSON (``dumps``), written atomically, with a final newline; ``default`` as in ``json.dumps``
    (e.g. ``str`` for paths and dtypes), applied before NaN is replaced."""
    if default is not None:
        obj = json.loads(json.dumps(obj, default=default))
    return write_text_atomic(path, dumps(obj, indent=indent) + "\n")


def write_jsonl(path: str | os.PathLike, rows) -> Path:
    """One strict JSON object per line, written atomically."""
    return write_text_atomic(path, "".join(dumps(row) + "\n" for row in rows))


# ---------------------------------------------------------------------------------------------
# Up-front checks
# ---------------------------------------------------------------------------------------------


def check_writable(folder: str | os.PathLike, fix: str = "choose another output folder") -> Path:
    """Create ``folder`` if needed and prove it takes a file; else one ValueError naming the folder,
    the system's reason and ``fix``. Called before a model loads, so nothing is trained in vain."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(f"cannot write into {folder} ({reason}): {fix}, or make it writable") from error
    return folder


def check_free_space(folder: str | os.PathLike, needed_bytes: int, what: str, fix: str) -> None:
    """Refuse up front (one ValueError) when ``folder``'s disk has less than ``needed_bytes`` free
    for ``what``: a save that would fill the disk is found before the training it would waste."""
    free = shutil.disk_usage(folder).free
    if free < needed_bytes:
        raise ValueError(f"{what} needs about {needed_bytes / 1e6:.0f} MB in {folder}, and its disk has "
                         f"{free / 1e6:.0f} MB free: {fix}")


def holds_run(run_dir: str | os.PathLike) -> bool:
    """True when ``run_dir`` holds a run that starting over would wipe (a checkpoint or logged updates)."""
    run_dir = Path(run_dir)
    return any((run_dir / marker).is_file() and (run_dir / marker).stat().st_size > 0 for marker in RUN_MARKERS)


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    """True when ``run_dir`` has a checkpoint to resume from (readable or not: a damaged one is
    reported by ``checkpoint.load`` with its own fix)."""
    run_dir = Path(run_dir)
    return any((run_dir / marker).is_file() for marker in RUN_MARKERS[:2])


def check_run_folder(run_dir: str | os.PathLike, resume: bool, overwrite: bool, resume_or_start: bool,
                     command: str) -> bool:
    """The rules of starting a run in ``run_dir``, checked before any model loads; returns whether
    to resume. ``command`` is the command line to quote in the messages.

    * ``--resume`` needs a checkpoint: without one, say so rather than quietly start afresh;
      ``--resume-or-start`` is the explicit "continue if you can, else start".
    * A fresh start into a folder that holds a run is refused (its log would be wiped at once),
      naming ``--resume`` and ``--overwrite``. With ``--overwrite`` the caller removes the old
      run's state (``remove_run_state``, on one process only)."""
    run_dir = Path(run_dir)
    if sum((resume, overwrite, resume_or_start)) > 1:
        raise ValueError("--resume, --resume-or-start and --overwrite exclude each other: keep the one you mean")
    if resume_or_start:
        return has_checkpoint(run_dir)
    if resume and not has_checkpoint(run_dir):
        raise ValueError(f"--resume: there is no checkpoint in {run_dir} to resume from. Fix: start the run "
                         f"without --resume, or use --resume-or-start (resume if there is one, else start)")
    if not resume and not overwrite and holds_run(run_dir):
        raise ValueError(f"{run_dir} already holds a run: continue it with `{command} --resume`, start it "
                         f"over with `{command} --overwrite`, or give this run another run_name")
    return resume


def remove_run_state(run_dir: str | os.PathLike) -> None:
    """Delete the files of ``RUN_STATE`` (only those: a run folder may hold a learner's own notes)."""
    for name in RUN_STATE:
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C that was handled: the message says what was kept and how to continue. A
    KeyboardInterrupt, so code that catches Ctrl-C (a notebook cell) still does; the command line
    prints the message and exits with 130, the shell's code for SIGINT."""


def replace_folder(new: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Put the complete folder ``new`` in the place of ``final`` by renames (the old one, if any,
    moved aside first and deleted last): a fault leaves the old folder or the new one whole."""
    new, final = Path(new), Path(final)
    old = final.parent / f".{final.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)
    return final
