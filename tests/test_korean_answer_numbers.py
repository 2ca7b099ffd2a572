"""The numbers of the Korean-only answer blocks are the stored run's numbers.

Some Korean lessons restate, in a folded ``<details>`` block, what a code cell prints in English: the
answers the next code cell prints (weeks 3 and 4: the answers to the "things to try"), or a paragraph the
code cell just above printed (weeks 6a-10: "위 영어 문단을 한국어로 읽기"). The translation's hash guards
the English markdown, not the outputs, so a re-execution that changes a number would leave the Korean
block stale without any warning. This test reads every decimal number in such a block and requires it in
the source or the stored output of the code cells just before the block (back to the previous markdown
cell) or of the code cell just after it.
"""

from __future__ import annotations

import json
import re

import pytest

from course_utils.machinery.paths import NOTEBOOKS_DIR

KOREAN = sorted((NOTEBOOKS_DIR / "ko").glob("week*.ipynb"))
DECIMAL = re.compile(r"(?<![\d.])[-−]?\d+\.\d+")


def normalise(text: str) -> str:
    return text.replace("−", "-")


def code_text(cell) -> str:
    """A code cell's source and its stored text outputs (printed, plain and Markdown displays)."""
    if cell is None:
        return ""
    shown = "".join(cell["source"])
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        shown += "".join(output.get("text", "")) + "".join(data.get("text/plain", "")) + "".join(data.get("text/markdown", ""))
    return shown


def answer_blocks(path):
    """(cell index, numbers of the block, text of the code cells just before it and of the one just after)
    for each <details> block."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or "<details>" not in source:
            continue
        start = source.index("<details>")
        end = source.find("</details>", start)
        block = source[start:end if end >= 0 else len(source)]  # the folded block only, not the prose after it
        following = next((c for c in cells[i + 1:] if c["cell_type"] == "code"), None)
        preceding = []  # the code cells between the previous markdown cell and this one
        for c in reversed(cells[:i]):
            if c["cell_type"] != "code":
                break
            preceding.append(c)
        shown = "".join(map(code_text, preceding)) + code_text(following)
        yield i, [normalise(n) for n in DECIMAL.findall(block)], normalise(shown)


def test_the_korean_answer_blocks_are_found():
    found = [(p.stem, i) for p in KOREAN for i, numbers, _ in answer_blocks(p) if numbers]
    assert {stem for stem, _ in found} >= {"week03_advantage", "week04_ratio_clipping"}, found


@pytest.mark.parametrize("path", KOREAN, ids=lambda p: f"ko/{p.stem}")
def test_every_number_of_a_korean_answer_block_is_in_the_cell_it_restates(path):
    for i, numbers, shown in answer_blocks(path):
        missing = [n for n in numbers if n not in shown and n.lstrip("-") not in shown]
        assert not missing, (f"ko/{path.name} cell {i}: {missing} are not in the source or the stored output of the "
                             "next code cell: re-read the answers and update the Korean block in the translations file")
