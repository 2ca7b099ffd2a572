"""Every markdown cell of the lessons (English and Korean) renders: no stray ``**`` / ``__``, no lone ``$``.

Why a test and not a read-through: CommonMark (JupyterLab's marked, GitHub, markdown-it) decides
whether ``**`` opens or closes emphasis from the characters on either side of it (the *flanking*
rules, spec section 6.2). A closing ``**`` must be right-flanking: not preceded by whitespace, and, if
preceded by punctuation, followed by whitespace or punctuation. So ``**롤아웃(rollout)**은`` does not
close (``)`` is punctuation, ``은`` is a letter) and the reader sees the asterisks, while
``**롤아웃**(rollout)은`` does. Korean attaches particles straight to the word, so the Korean edition
is where this bites; the same holds for ``__``. Reading the source, the cell looks right; only
rendering tells. So every markdown cell is rendered with markdown-it-py (CommonMark plus tables),
and a ``**`` or ``__`` left in the rendered text (outside code) is a defect.

Maths first: the notebooks use MathJax, and JupyterLab lifts ``$$...$$`` and ``$...$`` out of the
source before the markdown parser sees it (an ``_`` or ``*`` inside a formula is not emphasis), so
the test does the same. An odd number of ``$`` in a cell (after the ``$$`` pairs) is a formula that
never closes, reported too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from course_utils.machinery.paths import NOTEBOOKS_DIR

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb")) + sorted((NOTEBOOKS_DIR / "ko").glob("*.ipynb"))
MARKDOWN = MarkdownIt("commonmark").enable("table")
LEFT_OVER = re.compile(r"\*\*|__")
"""Emphasis runs that should never reach the reader: a bold that did not close (or did not open)."""
MATH_PLACEHOLDER = "@@{}@@"
"""What a formula becomes before rendering: JupyterLab's own placeholder (``removeMath``), so that a
``**`` next to a formula meets the same neighbour (punctuation) that it meets in JupyterLab."""
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
"""A code span: a run of backticks closed by a run of the same length (CommonMark 6.1)."""
UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
CODE_MARK = "\x00{}\x00"
"""What code becomes while the formulas are found (no ``$`` in it), put back before rendering."""


def prose_and_code(source: str) -> list[tuple[str, bool]]:
    """The cell source cut into (text, is_code) pieces, in order: fenced blocks and code spans are code.

    Formulas are looked for in the prose only: a ``$`` inside code is a dollar, not a formula."""
    blocks: list[tuple[str, bool]] = []
    lines: list[str] = []
    fence = None  # the opening fence (```` ``` ```` or ``~~~``) while inside a fenced block
    for line in source.splitlines(keepends=True):
        if fence is None and FENCE.match(line):
            blocks.append(("".join(lines), False))
            lines, fence = [line], FENCE.match(line).group(1)
            continue
        lines.append(line)
        closing = line.strip()
        if fence is not None and closing.startswith(fence) and not closing.strip(fence[0]):
            blocks.append(("".join(lines), True))
            lines, fence = [], None
    blocks.append(("".join(lines), fence is not None))  # an unclosed fence runs to the end (CommonMark)
    pieces = []
    for text, is_code in blocks:
        start = 0
        for span in ([] if is_code else CODE_SPAN.finditer(text)):
            pieces += [(text[start:span.start()], False), (span.group(0), True)]
            start = span.end()
        pieces.append((text[start:], is_code))
    return [(text, is_code) for text, is_code in pieces if text]


def lift_maths(source: str) -> tuple[str, list[str]]:
    """The source with each ``$$...$$`` and ``$...$`` replaced by a placeholder, as JupyterLab does
    before markdown sees it, and the problems found: an odd count of unescaped ``$`` in the cell once
    the ``$$`` pairs are gone is a formula that never closes (MathJax then swallows or shows the rest).

    Code is set aside first and put back after, as JupyterLab does: a ``$`` in code is a dollar."""
    pieces = prose_and_code(source)
    code = [text for text, is_code in pieces if is_code]
    marks = iter(range(len(code)))
    text = "".join(CODE_MARK.format(next(marks)) if is_code else text for text, is_code in pieces)
    problems, count = [], 0

    def placeholder(match: re.Match) -> str:
        nonlocal count
        count += 1
        return MATH_PLACEHOLDER.format(count - 1)

    text = re.sub(r"(?<!\\)\$\$.+?(?<!\\)\$\$", placeholder, text, flags=re.S)
    dollars = len(UNESCAPED_DOLLAR.findall(text))
    # an inline formula, like JupyterLab's, does not run past a blank line
    text = re.sub(r"(?<!\\)\$(?!\$)(?:(?!\n\s*\n).)+?(?<!\\)\$", placeholder, text, flags=re.S)
    if dollars % 2:
        shown = re.sub(CODE_MARK.format(r"\d+"), "`code`", text)
        where = UNESCAPED_DOLLAR.search(shown).start()
        problems.append(f"unbalanced $ (an odd count, {dollars}), the lone one near {snippet(shown, where)!r}")
    return re.sub(CODE_MARK.format(r"(\d+)"), lambda mark: code[int(mark.group(1))], text), problems


def rendered_text(source: str) -> str:
    """The text a reader sees of a rendered markdown source: code spans, code blocks and HTML tags
    are left out (a ``**`` there is the author's), text inside raw HTML blocks is kept."""
    seen = []
    for token in MARKDOWN.parse(source):
        if token.type == "inline":
            for child in token.children or []:
                if child.type == "text":
                    seen.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    seen.append(" " if child.type == "softbreak" else "\n")
        elif token.type == "html_block":
            seen.append(re.sub(r"<[^>]*>", " ", token.content))
        seen.append("\n")
    return re.sub(r"@@\d+@@", "", "".join(seen))


def snippet(text: str, at: int, width: int = 30) -> str:
    """The text around one position, on one line: enough to find the place in the notebook."""
    return " ".join(text[max(0, at - width):at + width].split())


def render_problems(source: str) -> list[str]:
    """Every way one markdown cell fails to render as written: lone ``$``, stray ``**`` or ``__``.

    A bold that did not close leaves both its markers in the text, so two runs of the same marker on
    one line are reported as one place (showing the words between them), a run on its own as one."""
    lifted, problems = lift_maths(source)
    text = rendered_text(lifted)
    runs = list(LEFT_OVER.finditer(text))
    while runs:
        first = runs.pop(0)
        if runs and runs[0].group(0) == first.group(0) and "\n" not in text[first.end():runs[0].start()]:
            last = runs.pop(0)  # the opener and the closer of one emphasis that did not close
            shown = " ".join(text[max(0, first.start() - 15):last.end() + 15].split())
            problems.append(f"{first.group(0)}...{last.group(0)} shown literally: {shown!r}")
        else:
            problems.append(f"a literal {first.group(0)} shown: {snippet(text, first.start())!r}")
    return problems


def notebook_id(path: Path) -> str:
    """``week02_rollouts.ipynb`` or ``ko/week02_rollouts.ipynb``: which edition, at a glance."""
    return str(path.relative_to(NOTEBOOKS_DIR))


# ---------------------------------------------------------------------------------------------
# The check itself checks what it should (so a pass below means something)


@pytest.mark.parametrize("source", [
    "**롤아웃(rollout)**은 정책이 쓴 응답입니다.",
    "The **value head(s)**and more.",
    "A __bold(word)__x here.",
    "A ** lone pair.",
    "**$x$**는 수식입니다.",  # JupyterLab hides the formula as @@0@@: punctuation before the closer
])
def test_a_bold_that_commonmark_does_not_close_is_caught(source):
    problems = render_problems(source)
    assert len(problems) == 1 and "literal" in problems[0], (source, problems)


@pytest.mark.parametrize("source", [
    "**롤아웃**(rollout)은 정책이 쓴 응답입니다.",
    "**롤아웃(rollout)** 다음",
    "| a | b |\n|---|---|\n| **x** | `**kwargs` |",
    "The `__init__` method and\n\n```python\ndef f(**kwargs):\n    return __name__\n```\n",
    "A formula $x_t = a_{t}^{**}$ and $$\\sum_i x_i^{**}$$ in text, and a price `$5`.",
    "An escaped \\$5 is a dollar.",
    "<details><summary>Answer</summary>\n\n**bold** inside\n\n</details>",
])
def test_what_renders_is_not_reported(source):
    assert render_problems(source) == [], source


def test_a_formula_that_never_closes_is_caught():
    problems = render_problems("The ratio $r = \\pi / \\pi_{old} is one at the start.")
    assert len(problems) == 1 and "unbalanced $" in problems[0]


# ---------------------------------------------------------------------------------------------
# The lessons


def test_every_lesson_and_its_korean_edition_is_checked():
    names = {notebook_id(path) for path in NOTEBOOKS}
    assert "week01_four_models.ipynb" in names and "ko/week01_four_models.ipynb" in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_every_markdown_cell_renders_as_written(path):
    """Names the notebook, the cell (0-based index, as the .ipynb counts) and what the reader sees."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    problems = [f"{notebook_id(path)} cell {index}: {problem}"
                for index, cell in enumerate(cells) if cell["cell_type"] == "markdown"
                for problem in render_problems("".join(cell["source"]))]
    assert not problems, (
        f"{len(problems)} place(s) where markdown does not render as written (CommonMark closes `**` before a "
        "letter only if no punctuation precedes it: write `**롤아웃**(rollout)은`, not `**롤아웃(rollout)**은`; "
        "for the Korean edition edit notebooks/translations/ko/*.yaml and run `python -m course_utils translate`):\n"
        + "\n".join(problems))
