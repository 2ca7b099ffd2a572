"""Committed notebooks without volatile metadata, as nbdev's clean step keeps them.

Executing a notebook stamps every code cell with ``metadata.execution`` (four iopub timestamps):
noise in every diff, and a record of when, not what. ``clean_notebook`` removes those stamps; outputs,
tags, ``source_hidden`` and the widget state stay (the lessons are committed executed on purpose).

It also settles progress bars. A ``tqdm.auto`` bar in a notebook is a widget whose plain-text
fallback is frozen at the moment it was first drawn ("0%| | 0/25"), which is what GitHub shows.
The widget state saved with the notebook holds the bar's final texts, so the fallback is rewritten
to the finished bar ("SFT steps: 100%|##########| 25/25 [00:50<00:00, ...]").

    python -m course_utils clean-notebooks            # rewrite notebooks/*.ipynb in place
    python -m course_utils clean-notebooks --check    # exit 1 naming the notebooks that need it (CI)
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path

VOLATILE_CELL_KEYS = ("execution",)
"""Cell metadata written by the kernel on every run (timestamps), never by an author."""


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def clean_notebook(nb: dict) -> bool:
    """Remove the volatile cell metadata from ``nb`` in place and settle its progress bars; return
    whether anything changed."""
    changed = False
    for cell in nb.get("cells", []):
        for key in VOLATILE_CELL_KEYS:
            if key in cell.get("metadata", {}):
                del cell["metadata"][key]
                changed = True
    return settle_progress_bars(nb) or changed


def final_bar_text(state: dict, model_id: str) -> str | None:
    """The finished text of a tqdm widget (an HBox of HTML, FloatProgress, HTML) from the saved
    widget state, or None if ``model_id`` is not such a bar."""
    model = state.get(model_id, {})
    children = [state.get(str(c).removeprefix("IPY_MODEL_"), {}) for c in model.get("state", {}).get("children", [])]
    if model.get("model_name") != "HBoxModel" or [c.get("model_name") for c in children] != \
            ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (c.get("state", {}) for c in children)
    total = bar.get("max") or 0
    filled = round(10 * min(1.0, (bar.get("value") or 0) / total)) if total else 0
    text = f"{html.unescape(left.get('value', ''))}|{'#' * filled}{' ' * (10 - filled)}|{html.unescape(right.get('value', ''))}"
    return text.replace("\u2007", " ")


def settle_progress_bars(nb: dict) -> bool:
    """Rewrite the plain-text fallback of every progress-bar output to its finished state."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    changed = False
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            text = final_bar_text(state, data[WIDGET_VIEW].get("model_id", ""))
            if text is not None and "".join(data.get("text/plain", [])) != text:
                data["text/plain"] = [text]
                changed = True
    return changed


def notebook_text(nb: dict) -> str:
    """The one JSON layout the repository uses (Jupyter's own: indent 1, UTF-8 kept)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def clean_files(paths: list[Path], check: bool = False) -> list[Path]:
    """Clean each notebook file (or only report, with ``check``); return the ones that were dirty."""
    dirty = []
    for path in paths:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path} is not a notebook (not JSON: {error}). Fix: restore it with "
                             f"`git checkout -- {path}`, or leave it off the command line") from None
        if clean_notebook(nb):
            dirty.append(path)
            if not check:
                path.write_text(notebook_text(nb), encoding="utf-8")
    return dirty


def main(argv: list[str] | None = None) -> None:
    from course_utils.machinery.paths import NOTEBOOKS_DIR

    parser = argparse.ArgumentParser(prog="python -m course_utils clean-notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs cleaning")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if missing := [str(p) for p in paths if not p.is_file()]:
        raise FileNotFoundError(f"no notebook file {', '.join(missing)}: give paths of .ipynb files, or none "
                                f"for every notebook in {NOTEBOOKS_DIR}")
    dirty = clean_files(paths, check=args.check)
    if args.check and dirty:
        names = ", ".join(p.name for p in dirty)
        raise SystemExit(f"{names}: execution timestamps in cell metadata. Fix: python -m course_utils clean-notebooks")
    print(f"{len(dirty)} of {len(paths)} notebook(s) {'need cleaning' if args.check else 'cleaned'}")
