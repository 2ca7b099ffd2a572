"""Install the torch build that fits this machine, before `pip install -r requirements.txt` (`make setup`).

    Linux without an NVIDIA GPU   the CPU build, from PyTorch's CPU index (one wheel of a few
                                  hundred MB, not the CUDA build's gigabytes of nvidia-* libraries);
                                  PyPI's build when that index cannot be reached or fails
    Linux with an NVIDIA GPU      PyPI's build (on Linux it is the CUDA build)
    macOS                         PyPI's build (CPU and MPS)

The version is requirements.txt's exact pin (torch==X), so `pip install -r requirements.txt` that
follows finds torch installed and leaves it. pip's own settings (an index, --find-links, a wheel
folder) apply to every command here. Standard library only: it runs before anything is installed.

    python scripts/torch_install.py                 # decide and install
    python scripts/torch_install.py --print         # print the pip command and install nothing
    python scripts/torch_install.py --build cpu     # or pypi: override the choice
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
BUILDS = ("auto", "cpu", "pypi")


def pinned_torch(requirements: Path = REQUIREMENTS) -> str:
    """requirements.txt's ``torch==X`` line: the one place the version is written."""
    for line in requirements.read_text().splitlines():
        if re.fullmatch(r"torch==[0-9][0-9A-Za-z.+]*", line.split("#")[0].strip()):
            return line.split("#")[0].strip()
    raise SystemExit(f"error: {requirements} has no exact torch==X pin; it must have one (a looser pin lets pip "
                     "pull a multi-GB CUDA build)")


def has_nvidia_gpu(which=shutil.which, exists=os.path.exists) -> bool:
    """An NVIDIA driver is present: ``nvidia-smi`` on the PATH (also WSL's), or /proc/driver/nvidia."""
    return bool(which("nvidia-smi")) or exists("/proc/driver/nvidia") or exists("/usr/lib/wsl/lib/nvidia-smi")


def choose_build(system: str, gpu: bool, requested: str = "auto") -> str:
    """"cpu" (PyTorch's CPU index) or "pypi" for ``system`` (platform.system()) and ``gpu``."""
    if requested not in BUILDS:
        raise SystemExit(f"error: --build must be one of {', '.join(BUILDS)}, got {requested!r}")
    if requested != "auto":
        return requested
    return "cpu" if system == "Linux" and not gpu else "pypi"


def index_reachable(url: str = CPU_INDEX, timeout: float = 10.0) -> bool:
    """True when ``url``'s torch page answers within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pip_command(python: str, build: str, pin: str) -> list[str]:
    """The pip command that installs ``pin`` as ``build``: from the CPU index (it also serves
    torch's dependencies), or as PyPI (and pip's configured indexes) have it."""
    command = [python, "-m", "pip", "install", "-q", pin]
    return command + ["--index-url", CPU_INDEX] if build == "cpu" else command


def installed_torch() -> str | None:
    """The torch version installed for this Python (e.g. "2.13.0+cpu"), or None."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def plan(system: str, gpu: bool, requested: str, reachable, pin: str, python: str) -> tuple[list[list[str]], str]:
    """The pip commands to try in order (the next one only if the one before fails) and the line
    that says why. ``reachable``: a function answering whether the CPU index can be reached."""
    build = choose_build(system, gpu, requested)
    pypi = pip_command(python, "pypi", pin)
    if build == "pypi":
        why = {"Darwin": "macOS: PyPI's build (CPU and MPS)",
               "Linux": "an NVIDIA GPU: PyPI's build (the CUDA build, with its nvidia-* libraries, several GB)"}
        return [pypi], why.get(system, "PyPI's build") if requested == "auto" else "PyPI's build, as asked"
    if not reachable():
        return [pypi], (f"the CPU build was wanted, but {CPU_INDEX} cannot be reached: PyPI's build instead (on "
                        "Linux the CUDA build, several GB; pip's own settings may still find a CPU wheel)")
    return [pip_command(python, "cpu", pin), pypi], f"no NVIDIA GPU: the CPU build from {CPU_INDEX}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.environ.get("TORCH_BUILD", "auto"), help="auto (default), cpu or pypi")
    parser.add_argument("--print", action="store_true", help="print the pip command(s) and install nothing")
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip installs (default: this one)")
    args = parser.parse_args(argv)
    pin = pinned_torch()
    have = installed_torch() if args.python == sys.executable else None
    if have and have.split("+")[0] == pin.split("==")[1] and not args.print:
        print(f"torch {have} is installed already")
        return 0
    commands, why = plan(platform.system(), has_nvidia_gpu(), args.build, index_reachable, pin, args.python)
    print(f"torch: {why}")
    if args.print:
        print("\n".join(("if that fails: " if number else "") + " ".join(c) for number, c in enumerate(commands)))
        return 0
    for number, command in enumerate(commands):
        print(" ".join(command))
        if subprocess.run(command).returncode == 0:
            return 0
        if number + 1 < len(commands):
            print("that failed: PyPI's build instead")
    return 1


if __name__ == "__main__":
    sys.exit(main())
