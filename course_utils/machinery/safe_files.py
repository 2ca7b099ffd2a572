"""Files the kit writes, written so that bad input or a fault loses nothing.

* Strict JSON: ``dumps`` writes ``null`` where a value is NaN or infinite. Python's ``json`` writes
  a bare ``NaN``, which strict parsers (JavaScript, jq, Go, pandas with ``engine="pyarrow"``)
  reject, so one NaN would make a whole ``summary.json`` unreadable outside Python.
* Atomic text: ``write_text_atomic`` writes a temporary file beside the target and renames it, so a
  full disk or a kill leaves the old file, never half of the new one.
* Up-front checks, before any model loads: ``check_writable`` (a read-only output folder is named
  at once, not after 15 minutes of training) and ``check_run_folder`` (a run folder that already
  holds a run is neither wiped by accident nor resumed from nothing).
* A run started over never leaves a folder that describes two runs: ``move_run_aside`` moves the
  old run out of the folder in renames before the new one writes anything, and keeps it (beside
  the folder) until the new run finishes (``drop_replaced_run``); ``swap_in`` puts a run written
  elsewhere in place of the old one as a whole. ``deferred_interrupt`` holds a Ctrl-C that arrives
  during such renames until they are done.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

# What "this folder holds a run" means: something a learner would lose by starting over.
RUN_MARKERS = ("checkpoint/state.pt", ".checkpoint.old/state.pt", "metrics.jsonl", "summary.json")
# What ``--overwrite`` removes before a fresh run: the old run's log and state, so a later
# ``--resume`` can never continue the old run inside the new one's log.
RUN_STATE = ("checkpoint", ".checkpoint.old", ".checkpoint.tmp", "best_policy", "metrics.jsonl", "evals.jsonl",
             "summary.json")
# What a PPO run writes at its end (``summary.json``, the finished-run marker, first): removed when a
# finished run is resumed, so that an interrupted resume never looks finished with the old ending.
RUN_ENDING = ("summary.json", "report.md", "curves.png", "samples.json", "versions.json", "policy")
# Everything a PPO run writes into its folder; any other entry is the learner's and stays.
RUN_OUTPUTS = (*RUN_STATE, *RUN_ENDING[1:], "config.json", "manifest.json", "checkpoints.jsonl")
FINISHED = "summary.json"


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


def is_finished(run_dir: str | os.PathLike) -> bool:
    """True when ``run_dir`` holds a finished run: its summary, written last, is there."""
    return (Path(run_dir) / FINISHED).is_file()


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


def remove_run_state(run_dir: str | os.PathLike, names=RUN_STATE) -> None:
    """Delete the entries ``names`` (default ``RUN_STATE``) of ``run_dir``: only those, a run folder
    may hold a learner's own notes."""
    for name in names:
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def replaced_run(run_dir: str | os.PathLike) -> Path:
    """Where ``move_run_aside`` keeps the run that a new one replaces: ``.<name>.replaced`` beside it."""
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.replaced"


@contextmanager
def one_writer(run_dir: str | os.PathLike, fix: str):
    """Hold ``run_dir``'s writer lock for the block: one process at a time trains into a run folder.
    A second one (a second kernel running the same notebook cell) is refused at once, in one
    ValueError that ends with ``fix``, before it moves or writes anything. The lock is a file beside
    the folder (``.<name>.lock``, removed on release), so that a run moved aside by an overwrite keeps
    no lock of its own. Where ``fcntl`` is missing (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    path = run_dir.parent / f".{run_dir.name}.lock"
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ValueError(f"another process is training into {run_dir} right now (a second kernel running the "
                             f"same cell?): {fix}") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # still held: no other process can lock it before it is gone


def move_run_aside(run_dir: str | os.PathLike, outputs=RUN_OUTPUTS) -> Path | None:
    """Empty ``run_dir`` of the run it holds before a new run starts there; returns the folder
    that keeps the old run (``replaced_run``) or None when there was none.

    The whole folder is renamed (one rename: an interrupt leaves it in one place or the other,
    never half moved), a fresh ``run_dir`` is made, and the entries that are not ``outputs`` (a
    learner's notes) are moved back. A finished run, or the first run replaced, is kept until the
    new run finishes (``drop_replaced_run``); an unfinished run replaced while an earlier finished
    one is kept is deleted, so the kept one is always the last finished run."""
    run_dir, aside = Path(run_dir), replaced_run(run_dir)
    if not any((run_dir / name).exists() for name in outputs):  # no run here (perhaps notes): nothing to move
        run_dir.mkdir(parents=True, exist_ok=True)
        return aside if aside.is_dir() else None
    keep = is_finished(run_dir) or not aside.is_dir()
    target = aside if keep else run_dir.parent / f".{run_dir.name}.discarded"
    shutil.rmtree(target, ignore_errors=True)
    with deferred_interrupt():  # three renames: Ctrl-C waits until the folder is whole again
        os.replace(run_dir, target)
        run_dir.mkdir()
        restore_notes(target, run_dir, outputs)
    if not keep:
        shutil.rmtree(target, ignore_errors=True)
    return aside


def restore_notes(source: Path, run_dir: Path, outputs) -> None:
    """Move the entries of ``source`` that are not run ``outputs`` (nor hidden) back into ``run_dir``."""
    for entry in sorted(Path(source).iterdir()):
        if entry.name not in outputs and not entry.name.startswith(".") and not (run_dir / entry.name).exists():
            os.replace(entry, run_dir / entry.name)


def drop_replaced_run(run_dir: str | os.PathLike, outputs=RUN_OUTPUTS) -> Path | None:
    """Once a new run in ``run_dir`` has finished: delete the run it replaced (any note still with
    it moved back first). Returns the folder deleted, or None when there was none."""
    aside = replaced_run(run_dir)
    if not aside.is_dir():
        return None
    restore_notes(aside, Path(run_dir), outputs)
    shutil.rmtree(aside, ignore_errors=True)
    return aside


@contextmanager
def deferred_interrupt():
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then raise
    it: a few renames that must happen together are never cut between two of them. Only the main
    thread receives signals; elsewhere (or where the handler cannot be set) the block runs as is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def swap_in(new: str | os.PathLike, run_dir: str | os.PathLike, outputs) -> Path:
    """Put the complete run folder ``new`` (written beside ``run_dir``) in its place as a whole:
    the entries of the old folder that are not ``outputs`` (a learner's notes) move into ``new``
    first, then ``replace_folder``'s renames, all with Ctrl-C held until they are done. A fault
    before this leaves the old run whole; after it, the new one."""
    new, run_dir = Path(new), Path(run_dir)
    with deferred_interrupt():
        if run_dir.is_dir():
            restore_notes(run_dir, new, outputs)
        return replace_folder(new, run_dir)


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
    with deferred_interrupt():  # Ctrl-C between the two renames would leave no folder in place
        if final.exists():
            os.replace(final, old)
        os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)
    return final
