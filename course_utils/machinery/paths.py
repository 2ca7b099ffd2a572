"""Where the repository's folders are: the one place that knows the layout on disk."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the folder holding ``course_utils/``, ``configs/``, ``data/`` and ``notebooks/``."""

CONFIGS_DIR = REPO_ROOT / "configs"
DATA_DIR = REPO_ROOT / "data"
FIGURES_DIR = REPO_ROOT / "figures"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
README = REPO_ROOT / "README.md"
README_KO = REPO_ROOT / "README.ko.md"
"""The Korean README: its sections say which English section (and which version) they translate."""
EXAMPLE_RUNS = REPO_ROOT / "runs" / "example"
"""The example runs' records (JSON, logs, figures) the lessons read."""
