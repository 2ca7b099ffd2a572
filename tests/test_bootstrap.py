"""The launch path for learners without the repository: the setup cell each lesson page offers
(``site.bootstrap_source``), run in a fresh virtual environment, then week 1's first cells with it,
in one process as a Colab kernel would run them.

The repository URL is the local checkout (a clone of it at HEAD) instead of GitHub. So that CI does
not download gigabytes again, the fresh environment sees the already installed pinned packages
through a ``.pth`` line (their own ``.pth`` files, the editable course_utils among them, are not
processed): the setup cell's ``pip install`` of the pins then finds them satisfied, while the kit
itself must come from the clone, editable, exactly as in Colab. Slow (a minute or more): marked so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from course_utils.machinery import site

ROOT = Path(__file__).resolve().parents[1]
FIRST_CELLS = 4  # imports, lesson 1's two pictures, and loading the four models


def week1_first_cells() -> str:
    nb = json.loads((ROOT / "notebooks" / "week01_four_models.ipynb").read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"][:FIRST_CELLS]
    return "\n\n".join("".join(c["source"]) for c in cells)


@pytest.mark.slow
def test_the_setup_cell_installs_the_kit_in_a_fresh_environment(tmp_path):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    fresh_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    Path(fresh_site, "installed_pins.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "colab"  # the kernel's working folder; the setup cell clones into it
    work.mkdir()
    script = work / "lesson.ipy"
    script.write_text(site.bootstrap_source(str(ROOT), head.stdout.strip()) + "\n\n" + week1_first_cells()
                      + "\n\nimport course_utils; print('KIT FROM', course_utils.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", MPLBACKEND="Agg", PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run([python, "-m", "IPython", "--no-banner", "--colors=NoColor", str(script)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"KIT FROM {work / 'ppo-rlhf-course' / 'course_utils'}" in output, output[-2000:]
