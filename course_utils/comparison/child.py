"""Child processes: run one trainer in a fresh interpreter, its memory freed when it ends.

Every comparison runs its heavy side this way (``bench``, ``trl_compare``, ``bench_learning``),
so two trainers never share a process's peak memory, and a notebook never holds TRL's 7 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from course_utils.machinery.paths import REPO_ROOT


def child_env(threads: int | None = None, **extra: str) -> dict:
    """This process's environment for a child: the repository importable, the hub offline unless
    set, tokenizers and TRL quiet, output unbuffered, and ``threads`` BLAS threads when given."""
    env = dict(os.environ)
    env.update({"TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1",
                "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))})
    if threads:
        env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    env.update(extra)
    return env


def python_command(module: str, *args: str) -> list[str]:
    """``python -m module args...`` with this interpreter."""
    return [sys.executable, "-m", module, *map(str, args)]


def run_child(command: list[str], log_path: str | os.PathLike, threads: int | None = None,
              timeout: float | None = None, env: dict | None = None) -> tuple[int | str, float]:
    """Run ``command`` from the repository root, its output into ``log_path``; wait for it.
    Returns ``(exit code or "timeout", wall seconds)``."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                  env=env or child_env(threads), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    return code, time.perf_counter() - start


def start_child(command: list[str], log_path: str | os.PathLike, threads: int | None = None,
                env: dict | None = None) -> subprocess.Popen:
    """Start ``command`` from the repository root, its output into ``log_path``; do not wait."""
    with open(log_path, "w") as log:  # the child keeps its own copy of the file descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                env=env or child_env(threads))


def log_tail(log_path: str | os.PathLike, lines: int = 25) -> list[str]:
    """The last ``lines`` lines of a child's log (for an error message)."""
    path = Path(log_path)
    return path.read_text(errors="replace").splitlines()[-lines:] if path.is_file() else []
