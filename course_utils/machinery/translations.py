"""The lessons in another language: a translations file per lesson, merged into the English notebook.

One source of truth for code. A translated notebook (``notebooks/ko/week01_four_models.ipynb``) is
never edited by hand: it is the English notebook with its markdown cells replaced and, in the quiz
cells, the English string literals (questions, options, feedback, hints, checklist items) replaced
by translated ones. Every other code cell, and every output, is the English notebook's (but for the
``lang`` argument and the outputs rendered again in the language, below).

The translations file (``notebooks/translations/ko/week01_four_models.yaml``) is keyed by the
English cell id (nbformat 4.5). Each entry records the SHA-256 of the English cell source it
translates, so a changed English cell is caught (the drift check, ``translate --check`` and
``tests/test_translations.py``)::

    notebook: week01_four_models.ipynb
    language: ko
    cells:
      "9f0fe159":                       # a markdown cell: the whole translated cell
        source_sha256: "5be0..."
        markdown: |-
          ## 1. 네 모델, 네 가지 역할
          ...
      "e9e3e34e":                       # a quiz cell: English literal -> translated literal
        source_sha256: "0c41..."
        strings:
          - en: "Why is the reward model frozen while PPO trains the policy?"
            ko: "PPO가 정책을 학습하는 동안 보상 모델을 고정해 두는 이유는 무엇일까요?"

YAML, not JSON, because a translator reads and reviews whole markdown cells: a block scalar keeps
them as they are written, one line per line, where JSON would put each cell on one line full of
``\\n`` and ``\\"``. An f-string is written as its template, placeholders and all
(``"rank {lora.rank} adds {q_proj_lora:,} parameters"``); the translation must use the same
placeholders. An entry whose ``source_sha256`` is empty is translated but not yet stamped.

A quiz cell's output is the quiz rendered again from the translated cell through
``lesson_aids.quiz``'s classes, without a kernel: the arguments a quiz shows are literals, and an
f-string's placeholders take the values the English output shows for them. Its saved widget view
is dropped (it would show the English widget); the text and HTML views remain.

One option order. A choice question shows its options in a shuffle seeded by its text
(``quiz.display_order``), so a translated question would show them in another order, under other
letters, than the English one. The merge adds ``order_key=`` the English question (as written in
English, an f-string with its placeholders) to each ``MultipleChoice`` and ``MultiSelect`` call of
a translated quiz cell (``with_order_keys``): both lessons show every question's options in one
order, one answer key serves both, and the spread of keys over the letters that the English
quizzes are written for holds in every language.

The fixed phrases around the texts (a quiz's "Correct." and "Try again", the call to make, its
buttons; an exercise check's verdict, diagnosis and hints) are the library's, in the language its
``lang`` argument names. The merge adds ``lang="<language>"`` to each outermost quiz call of a quiz
cell (``Quiz``, ``checklist``: their questions follow), to each ``exercises.check`` and
``exercises.hint`` call, and to each ``show_glossary`` call (``with_language``); with
``order_key`` (above), nothing else of the code changes. The output of an ``exercises.hint`` cell, and of an ``exercises.check`` cell that
shows "not attempted yet" (the committed state of every exercise), is rendered again in that
language, without a kernel. So is the output of the glossary cell that ends a lesson
(``show_glossary([...])`` on a literal list of terms: the table's header and meanings in that
language, ``lesson_aids.glossary.MEANINGS_KO``).

    python -m course_utils translate                   # write notebooks/ko/*.ipynb, report drift
    python -m course_utils translate --check           # CI: exit 1 naming every stale cell
    python -m course_utils translate --stamp week01_four_models 9f0fe159   # translation updated
    python -m course_utils translate --skeleton week06a_sft_warm_up         # start a new lesson
    python -m course_utils translate --stamp README "## Speed"              # README.ko.md's section updated

README.ko.md is checked the same way, section by section (``readme_drift``, at the end of this module):
``translate --check`` with no lesson named checks it too.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import inspect
import io
import json
import re
import shlex
import subprocess
import sys
import tokenize
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

from course_utils.machinery import notebook_clean
from course_utils.machinery.paths import NOTEBOOKS_DIR, README, README_KO

LANGUAGE = "ko"
QUIZ_CALLS = ("MultipleChoice", "MultiSelect", "NumericAnswer", "Quiz", "checklist", "Checklist")
"""Calls that make a code cell a quiz cell: its string literals are translated."""
SHOWN_ARGS = {"MultipleChoice": ("question", "options", "order_key"),
              "MultiSelect": ("question", "options", "order_key"),
              "NumericAnswer": ("question",), "Quiz": ("title", "questions"),
              "checklist": ("items", "title"), "Checklist": ("items", "title")}
"""The arguments whose text a quiz shows (its output), or whose text decides the order it shows the
options in (``order_key``); the others (feedback, hints) show when checked."""
EXERCISE_CALLS = ("check", "hint")
"""``exercises.<name>(...)`` calls whose messages come in the language of their ``lang`` argument."""
GLOSSARY_CALLS = ("show_glossary",)
"""Calls whose table (header, meanings) comes in the language of their ``lang`` argument."""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
LINE_WIDTH = 110
"""Display columns (a Hangul syllable is two) past which a translated literal is split into pieces."""


def translations_dir(notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE) -> Path:
    return Path(notebooks_dir) / "translations" / language


def output_dir(notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE) -> Path:
    return Path(notebooks_dir) / language


def source_sha256(cell) -> str:
    """SHA-256 of a cell's source text (a list of lines is joined first, as Jupyter shows it)."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# The translations file


@dataclass
class Entry:
    """One translated cell: ``markdown`` (the whole cell) or ``strings`` ([(English, translation)])."""

    source_sha256: str
    markdown: str | None = None
    strings: list[tuple[str, str]] | None = None


@dataclass
class Translations:
    notebook: str
    language: str
    cells: dict[str, Entry] = field(default_factory=dict)


def _entry(cell_id, raw, where: str) -> Entry:
    if not isinstance(cell_id, str):
        raise ValueError(f"{where}: cell id {cell_id!r} is not a string; quote it (\"{cell_id}\")")
    if not isinstance(raw, dict) or set(raw) - {"source_sha256", "markdown", "strings"}:
        raise ValueError(f"{where}: cell {cell_id} needs source_sha256 and one of markdown / strings, got {raw!r:.80}")
    digest = raw.get("source_sha256") or ""
    if ("markdown" in raw) == ("strings" in raw):
        raise ValueError(f"{where}: cell {cell_id} needs exactly one of markdown / strings")
    if "markdown" in raw:
        if not isinstance(raw["markdown"], str):
            raise ValueError(f"{where}: cell {cell_id}: markdown must be text")
        return Entry(str(digest), markdown=raw["markdown"])
    pairs = []
    for item in raw["strings"] or []:
        if not (isinstance(item, dict) and set(item) == {"en", "ko"} and all(isinstance(v, str) for v in item.values())):
            raise ValueError(f"{where}: cell {cell_id}: each string is {{en: ..., ko: ...}}, got {item!r:.80}")
        pairs.append((item["en"], item["ko"]))
    return Entry(str(digest), strings=pairs)


def load_translations(path: Path) -> Translations:
    """Read and check one translations file; a malformed one is a ValueError naming the file and cell."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not valid YAML ({' '.join(str(error).split())[:160]})") from None
    if not isinstance(raw, dict) or not {"notebook", "language", "cells"} <= set(raw):
        raise ValueError(f"{path}: needs the keys notebook, language and cells")
    cells = {cell_id: _entry(cell_id, entry, str(path)) for cell_id, entry in (raw["cells"] or {}).items()}
    return Translations(str(raw["notebook"]), str(raw["language"]), cells)


def _yaml_text(value: str, indent: str) -> str:
    """``value`` as a YAML scalar: a literal block (``|``) for text of several lines when that keeps it
    exactly, else a double-quoted string (JSON's escapes are YAML's)."""
    quoted = json.dumps(value, ensure_ascii=False)
    if "\n" not in value.rstrip("\n") or "\t" in value or "\r" in value or value.startswith(" "):
        return quoted
    body = value.rstrip("\n")
    chomp = {0: "-", 1: ""}.get(len(value) - len(body), "+")
    lines = (body if chomp != "+" else value[:-1]).split("\n")
    block = f"|{chomp}\n" + "\n".join(f"{indent}{line}" if line else "" for line in lines)
    try:
        exact = yaml.safe_load(f"k: {block}\n")["k"] == value
    except yaml.YAMLError:
        exact = False
    return block if exact else quoted


def dump_translations(t: Translations) -> str:
    """The canonical text of a translations file (what ``--stamp`` and ``--skeleton`` write)."""
    out = [f"notebook: {json.dumps(t.notebook)}", f"language: {json.dumps(t.language)}", "cells:"]
    for cell_id, e in t.cells.items():
        out += [f"  {json.dumps(cell_id)}:", f"    source_sha256: {json.dumps(e.source_sha256)}"]
        if e.markdown is not None:
            out.append(f"    markdown: {_yaml_text(e.markdown, ' ' * 6)}")
        else:
            out.append("    strings:" + ("" if e.strings else " []"))
            for en, ko in e.strings:
                out += [f"      - en: {_yaml_text(en, ' ' * 10)}", f"        ko: {_yaml_text(ko, ' ' * 10)}"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# String literals of a quiz cell


def _parseable(source: str) -> str:
    """The cell source with IPython magics (``%matplotlib``, ``!pip``) blanked, same length per line."""
    return "\n".join(" " * len(line) if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def is_quiz_cell(cell) -> bool:
    """A code cell that builds a quiz or a checklist (a call to one of ``QUIZ_CALLS``)."""
    if cell["cell_type"] != "code":
        return False
    try:
        tree = ast.parse(_parseable(_text(cell["source"])))
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in QUIZ_CALLS
               for n in ast.walk(tree))


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)


def _field_key(node: ast.FormattedValue, source: str) -> str:
    """A placeholder as written: ``{expr!r:spec}`` with the expression's own source text."""
    conversion = {-1: "", 115: "!s", 114: "!r", 97: "!a"}[node.conversion]
    spec = f":{_template(node.format_spec, source)}" if node.format_spec is not None else ""
    return "{" + ast.get_source_segment(source, node.value) + conversion + spec + "}"


def _template(node: ast.JoinedStr, source: str) -> str:
    """An f-string's template: its literal text with braces doubled, its placeholders as written."""
    return "".join(part.value.replace("{", "{{").replace("}", "}}") if isinstance(part, ast.Constant)
                   else _field_key(part, source) for part in node.values)


@dataclass
class Literal:
    """A string literal of a cell (implicitly concatenated pieces count as one)."""

    start: int           # character offsets into the source
    end: int
    key: str             # its value; for an f-string, its template
    is_f: bool
    column: int          # the column it starts at
    in_brackets: bool    # inside (), [] or {}: it may be split over lines
    in_quiz: bool        # quiz text a learner reads (quiz_only_names), not data the code uses


def _offsets(source: str):
    starts, total = [], 0
    for line in source.split("\n"):
        starts.append(total)
        total += len(line) + 1
    lines = source.split("\n")

    def char_offset(lineno: int, byte_col: int) -> int:
        return starts[lineno - 1] + len(lines[lineno - 1].encode("utf-8")[:byte_col].decode("utf-8"))
    return char_offset


def _bracket_depths(source: str) -> dict[tuple[int, int], int]:
    """Bracket depth at the start of every string token, by (line, character column)."""
    depth, depths = 0, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.STRING:
            depths[tok.start] = depth
    return depths


def _is_quiz_call_node(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in QUIZ_CALLS


def quiz_only_names(tree) -> set[str]:
    """The variables of a cell that quiz calls read and nothing else reads: their text is what the
    quiz shows (options built before the call, ``options = {...}; MultipleChoice(q, options, ...)``,
    or a word put into a question's f-string), never data the code computes with."""
    inside, outside = set(), set()

    def visit(node, in_quiz: bool):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            (inside if in_quiz else outside).add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, in_quiz or _is_quiz_call_node(node))

    visit(tree, False)
    return inside - outside


def string_literals(source: str) -> list[Literal]:
    """Every top-level string literal of ``source`` (not the pieces inside an f-string), in order.

    A literal is ``in_quiz`` inside a quiz call, and inside the value assigned to a variable that
    only quiz calls read (``quiz_only_names``)."""
    parseable = _parseable(source)
    tree, char_offset, depths = ast.parse(parseable), _offsets(parseable), _bracket_depths(parseable)
    found: list[Literal] = []
    shown_names = quiz_only_names(tree)

    def visit(node, in_quiz: bool):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in shown_names):
            visit(node.value, True)
            return
        is_f = isinstance(node, ast.JoinedStr)
        if is_f or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            start = char_offset(node.lineno, node.col_offset)
            column = start - char_offset(node.lineno, 0)
            key = _template(node, parseable) if is_f else node.value
            found.append(Literal(start, char_offset(node.end_lineno, node.end_col_offset), key, is_f, column,
                                 depths.get((node.lineno, column), 0) > 0, in_quiz))
            return  # the parts of an f-string are not literals of their own
        in_quiz = in_quiz or _is_quiz_call_node(node)
        for child in ast.iter_child_nodes(node):
            visit(child, in_quiz)

    visit(tree, False)
    return sorted(found, key=lambda lit: lit.start)


def _placeholders(template: str) -> list[str]:
    """The ``{...}`` fields of an f-string template (``{{`` and ``}}`` are literal braces)."""
    fields, i = [], 0
    while i < len(template):
        if template.startswith(("{{", "}}"), i):
            i += 2
        elif template[i] == "{":
            depth, j = 0, i
            while j < len(template):
                depth += {"{": 1, "}": -1}.get(template[j], 0)
                if depth == 0:
                    break
                j += 1
            fields.append(template[i:j + 1])
            i = j + 1
        else:
            i += 1
    return fields


def _segments(template: str, is_f: bool) -> list[tuple[str, bool]]:
    """``template`` cut into (text, is_placeholder) pieces, literal text split after each space."""
    pieces, rest = [], template
    for placeholder in (_placeholders(template) if is_f else []):
        before, _, rest = rest.partition(placeholder)
        pieces += [(word, False) for word in re.findall(r"[^ ]* *", before) if word] + [(placeholder, True)]
    return pieces + [(word, False) for word in re.findall(r"[^ ]* *", rest) if word]


def _quote(text: str, is_f: bool) -> str:
    """One Python literal for ``text`` (an f-string template when ``is_f``)."""
    fields = "".join(_placeholders(text)) if is_f else ""
    quote = '"' if '"' not in fields else "'"
    if quote in fields:
        raise ValueError(f"a placeholder uses both quote characters: {text!r}")
    escaped = (text.replace("\\", "\\\\").replace(quote, "\\" + quote).replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    if is_f:  # placeholders are code: put them back as written
        for placeholder in _placeholders(text):
            escaped = escaped.replace(placeholder.replace(quote, "\\" + quote), placeholder, 1)
    return ("f" if is_f else "") + quote + escaped + quote


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def literal_code(text: str, is_f: bool, column: int, in_brackets: bool) -> str:
    """Python code for the literal ``text``, split into implicitly concatenated pieces at spaces
    (one per line, aligned at ``column``) when inside brackets and wider than ``LINE_WIDTH``."""
    whole = _quote(text, is_f and bool(_placeholders(text)))
    if not in_brackets or column + _width(whole) <= LINE_WIDTH:
        return whole
    lines, current = [], []
    for piece in _segments(text, is_f):
        candidate = "".join(t for t, _ in current + [piece])
        if current and column + _width(candidate) + 3 > LINE_WIDTH:
            lines.append(current)
            current = []
        current.append(piece)
    lines.append(current)
    code = []
    for pieces in lines:
        chunk = "".join(t for t, _ in pieces)
        has_field = any(is_field for _, is_field in pieces)
        if is_f and not has_field:
            chunk = chunk.replace("{{", "{").replace("}}", "}")
        code.append(_quote(chunk, is_f and has_field))
    return ("\n" + " " * column).join(code)


def translate_code(source: str, strings: list[tuple[str, str]], strict: bool = True) -> str:
    """``source`` with every literal whose value (f-string: template) is an English key of
    ``strings`` replaced by its translation; the rest of the code is left as written.

    ``strict``: an English string that is not in the source, or a translated f-string whose
    placeholders differ from the English ones, is a ValueError (a translator's slip); otherwise
    such strings are skipped (a cell whose English changed since it was translated).
    """
    table = dict(strings)
    literals = [lit for lit in string_literals(source) if lit.in_quiz]  # data the code reads stays as it is
    if strict:
        unknown = [en for en in table if en not in {lit.key for lit in literals}]
        if unknown:
            raise ValueError(f"no string literal {unknown[0]!r:.90} among the cell's quiz texts (check the en: text)")
    out, last = [], 0
    for lit in literals:
        korean = table.get(lit.key)
        if korean is None:
            continue
        if lit.is_f and sorted(set(_placeholders(korean))) != sorted(set(_placeholders(lit.key))):
            if strict:
                raise ValueError(f"the translation of {lit.key!r:.70} must use the placeholders "
                                 f"{sorted(set(_placeholders(lit.key)))}, got {sorted(set(_placeholders(korean)))}")
            continue
        out += [source[last:lit.start], literal_code(korean, lit.is_f, lit.column, lit.in_brackets)]
        last = lit.end
    return "".join(out) + source[last:]


def prose_literals(source: str) -> list[str]:
    """The texts to translate in a quiz cell: literals passed to a quiz call, or assigned to a variable
    that only quiz calls read (``quiz_only_names``), that read as prose (a space and a letter; option
    labels and ``units`` do not). Literals elsewhere in the cell are data the code reads, and are
    never translated."""
    return list(dict.fromkeys(lit.key for lit in string_literals(source)
                              if lit.in_quiz and " " in lit.key.strip() and re.search(r"[A-Za-z]", lit.key)))


# ---------------------------------------------------------------------------------------------
# The language of the library's own phrases: lang="ko" on quiz and exercise calls


def _is_quiz_call(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in QUIZ_CALLS


def _is_exercise_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EXERCISE_CALLS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "exercises")


def _is_glossary_call(node) -> bool:
    """``show_glossary(...)`` (or ``glossary.show_glossary(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id in GLOSSARY_CALLS) or (
        isinstance(func, ast.Attribute) and func.attr in GLOSSARY_CALLS
        and isinstance(func.value, ast.Name) and func.value.id == "glossary")


def language_calls(source: str) -> list[ast.Call]:
    """The calls that take the lesson's language: each outermost quiz call (a question inside
    ``Quiz(...)`` follows the quiz), each ``exercises.check`` / ``exercises.hint`` call and each
    ``show_glossary`` call."""
    found: list[ast.Call] = []

    def visit(node, in_quiz: bool):
        if _is_exercise_call(node) or _is_glossary_call(node) or (_is_quiz_call(node) and not in_quiz):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child, in_quiz or _is_quiz_call(node))

    visit(ast.parse(_parseable(source)), False)
    return found


def with_language(source: str, language: str) -> str:
    """``source`` with ``lang="<language>"`` added to each of its ``language_calls`` that has no
    ``lang`` argument yet (the same source for English, the default)."""
    if language == "en":
        return source
    parseable = _parseable(source)
    char_offset = _offsets(parseable)
    inserts = []
    for call in language_calls(source):
        if any(k.arg == "lang" for k in call.keywords):
            continue
        close = char_offset(call.end_lineno, call.end_col_offset) - 1  # the call's ")"
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if not arguments:
            inserts.append((close, f'lang="{language}"'))
            continue
        last = max(arguments, key=lambda n: (n.end_lineno, n.end_col_offset))
        end = char_offset(last.end_lineno, last.end_col_offset)
        between = parseable[end:close]
        code = re.sub(r"#[^\n]*", "", between)  # what follows the last argument: a comma, a ")" ...
        if ")" in code:  # a parenthesised last argument: add the keyword just before the call's ")"
            inserts.append((close, f', lang="{language}"'))
        elif "," in code:  # a trailing comma: keep it last
            comma = end + between.index(",") + 1
            inserts.append((comma, f' lang="{language}",'))
        else:
            inserts.append((end, f', lang="{language}"'))
    for position, text in sorted(inserts, reverse=True):
        source = source[:position] + text + source[position:]
    return source


# ---------------------------------------------------------------------------------------------
# One option order for both languages: order_key="<the English question>" on the choice questions


ORDERED_CALLS = ("MultipleChoice", "MultiSelect")
"""Question calls that show their options in a shuffle seeded by the question text (``quiz.display_order``)."""


def _ordered_calls(tree) -> list[ast.Call]:
    """The ``ORDERED_CALLS`` of a cell, in the order they are written."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in ORDERED_CALLS]
    return sorted(calls, key=lambda n: (n.lineno, n.col_offset))


def _question_node(call: ast.Call):
    return call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "question"), None)


def _after_last_argument(parseable: str, char_offset, call: ast.Call) -> tuple[int, bool]:
    """Where a keyword argument goes after the call's last argument: the offset, and whether it goes
    after a trailing comma (then it takes the comma itself) rather than before the next one."""
    last = max([*call.args, *(k.value for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
    end, close = char_offset(last.end_lineno, last.end_col_offset), char_offset(call.end_lineno, call.end_col_offset) - 1
    position, trailing = end, False
    for match in re.finditer(r"#[^\n]*|[),]", parseable[end:close]):
        if match.group() == ")":  # the closing bracket of a parenthesised last argument
            position = end + match.end()
        elif match.group() == ",":
            position, trailing = end + match.end(), True
    return position, trailing


def _assigned(tree) -> dict[str, str]:
    """Name -> the code (``ast.dump``) of the value each plain ``name = value`` statement of a cell assigns."""
    return {node.targets[0].id: ast.dump(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}


def translated_question_variables(source: str, english_source: str) -> list[str]:
    """The placeholders of the shuffled choice questions of ``english_source`` that are variables whose
    assignment ``source`` (the translated cell) changes: their text differs between the lessons, so under a
    kernel the translated question's ``order_key`` (the English question as code) takes the translated text
    and seeds another option order than the English one. Write such a text into the question or an option,
    or give the English call an ``order_key`` of its own."""
    tree, english_tree = ast.parse(_parseable(source)), ast.parse(_parseable(english_source))
    assigned, english_assigned = _assigned(tree), _assigned(english_tree)
    found = []
    for call in _ordered_calls(english_tree):
        keywords = {k.arg: k.value for k in call.keywords}
        shuffle = keywords.get("shuffle")
        if "order_key" in keywords or (isinstance(shuffle, ast.Constant) and shuffle.value is False):
            continue
        question = _question_node(call)
        found += [part.value.id for part in getattr(question, "values", [])
                  if isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
                  and assigned.get(part.value.id) != english_assigned.get(part.value.id)]
    return list(dict.fromkeys(found))


def with_order_keys(source: str, english_source: str) -> str:
    """``source`` (a quiz cell translated from ``english_source``) with ``order_key=`` the English
    question added to each ``MultipleChoice`` / ``MultiSelect`` call that shuffles and has no
    ``order_key`` yet: the translated question shows its options in the English order, under the
    same letters (``quiz.display_order``), whatever its own text. The English question is written as
    it is in English (an f-string keeps its placeholders, which take the same values in both lessons).

    The calls of the two sources are paired in the order they are written (``translate_code`` changes
    only literals). A question that is not a string literal or an f-string is a ValueError: pass
    ``order_key`` in the English cell, or write the question in the call.

    An f-string question whose placeholder is a variable the translation gives another text
    (``where = "the sampler"``, translated) defeats this under a kernel: its ``order_key`` takes that text
    too. The stored output keeps the English order (``render_quiz``'s ``order_shown``), and
    ``translated_question_variables`` names such placeholders (a test lists them)."""
    parseable = _parseable(source)
    english_parseable = _parseable(english_source)
    calls, english_calls = _ordered_calls(ast.parse(parseable)), _ordered_calls(ast.parse(english_parseable))
    if [c.func.id for c in calls] != [c.func.id for c in english_calls]:
        raise ValueError("the translated cell's questions are not the English cell's")
    char_offset, inserts = _offsets(parseable), []
    for call, english in zip(calls, english_calls):
        keywords = {k.arg: k.value for k in call.keywords}
        shuffle = keywords.get("shuffle")
        if "order_key" in keywords or (isinstance(shuffle, ast.Constant) and shuffle.value is False):
            continue
        question = _question_node(english)
        if not (isinstance(question, ast.JoinedStr) or (isinstance(question, ast.Constant)
                                                        and isinstance(question.value, str))):
            raise ValueError(f"{english.func.id}(...) in line {english.lineno}: its question is not a string literal "
                             "or an f-string, so the translation cannot give it the English option order; write the "
                             "question in the call, or pass order_key")
        text = _template(question, english_parseable) if isinstance(question, ast.JoinedStr) else question.value
        shown = _question_node(call)  # the new argument goes on a line of its own, under the question
        indent = char_offset(shown.lineno, shown.col_offset) - char_offset(shown.lineno, 0)
        code = "order_key=" + literal_code(text, isinstance(question, ast.JoinedStr), indent + len("order_key="), True)
        position, trailing = _after_last_argument(parseable, char_offset, call)
        inserts.append((position, f"\n{' ' * indent}{code}," if trailing else f",\n{' ' * indent}{code}"))
    for position, text in sorted(inserts, reverse=True):
        source = source[:position] + text + source[position:]
    return source


def _raises_not_implemented(*args, **kwargs):
    """A learner's function not written yet (the committed state of every exercise cell)."""
    raise NotImplementedError


def exercise_output(english_source: str, english_text: str, language: str):
    """What an exercise cell (its last line ``exercises.hint(name)`` or ``exercises.check(name, fn)``)
    displays in ``language``, or None when that cannot be known without running the lesson: a check
    is rendered again only when the English output is the "not attempted yet" verdict."""
    from course_utils.lesson_aids import exercises

    body = ast.parse(_parseable(english_source)).body
    call = body[-1].value if body and isinstance(body[-1], ast.Expr) else None
    if not (_is_exercise_call(call) and call.args and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)):
        return None
    name = call.args[0].value
    if call.func.attr == "hint":
        return exercises.hint(name, lang=language)
    english = exercises.check(name, _raises_not_implemented)
    if english.attempted or english.message != english_text:
        return None
    return exercises.check(name, _raises_not_implemented, lang=language)


def _code_cell_calls(cell, is_call) -> bool:
    """A code cell with at least one language-aware call that ``is_call`` accepts (False for code
    that does not parse: it is shown as it is)."""
    if cell["cell_type"] != "code":
        return False
    try:
        return any(is_call(c) for c in language_calls(_text(cell["source"])))
    except SyntaxError:
        return False


def is_exercise_cell(cell) -> bool:
    """A code cell that calls ``exercises.check`` or ``exercises.hint``."""
    return _code_cell_calls(cell, _is_exercise_call)


def is_glossary_cell(cell) -> bool:
    """A code cell that calls ``show_glossary`` (the glossary table that ends a lesson)."""
    return _code_cell_calls(cell, _is_glossary_call)


def glossary_output(english_source: str, english_text: str, language: str):
    """The glossary table a cell ending in ``show_glossary([...])`` displays in ``language``, or None
    when that cannot be known without running the lesson: the terms must be a literal list (the
    table uses nothing else), and the English output must be the table of those terms (its header,
    then one row per term in that order; the Korean terms and meanings are taken from the glossary
    as it is now, so an English output older than a glossary edit still counts)."""
    from course_utils.lesson_aids import glossary

    body = ast.parse(_parseable(english_source)).body
    call = body[-1].value if body and isinstance(body[-1], ast.Expr) else None
    if not _is_glossary_call(call) or [k.arg for k in call.keywords if k.arg != "lang"] or len(call.args) > 1:
        return None
    if call.args:
        listed = call.args[0]
        if not (isinstance(listed, (ast.List, ast.Tuple)) and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in listed.elts)):
            return None
        terms = [item.value for item in listed.elts]
    else:
        terms = list(glossary.GLOSSARY)
    english = str(glossary.show_glossary(terms)).split("\n")
    stored = english_text.split("\n")
    if len(stored) != len(english) or stored[0] != english[0] or [
            line.split(" | ")[0] for line in stored[1:]] != [line.split(" | ")[0] for line in english[1:]]:
        return None
    return glossary.show_glossary(terms, lang=language)


# ---------------------------------------------------------------------------------------------
# Rendering a quiz cell's output without a kernel


class _Unknown:
    """A value that only a kernel running the lesson would know (a computed number)."""


UNKNOWN = _Unknown()


class _Renderer:
    """Builds the quiz objects of one cell from its source, as the cell would, without running the
    lesson: literals are literal, an f-string is filled with the placeholder values ``shown``
    (placeholder -> text, read from the English output), and everything else is UNKNOWN."""

    def __init__(self, source: str, shown: dict[str, str], complete: bool = True, order_shown=None):
        self.source, self.shown, self.complete, self.env = _parseable(source), shown, complete, {}
        self.order_shown = shown if order_shown is None else order_shown

    def value(self, node, required: bool):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.JoinedStr):
            template = _template(node, self.source)
            missing = [p for p in _placeholders(template) if p not in self.shown]
            if missing and required and self.complete:
                raise ValueError(f"cannot show {template!r:.80}: the English output shows no value for {missing[0]}")
            text = template
            for placeholder in _placeholders(template):
                text = text.replace(placeholder, self.shown.get(placeholder, placeholder), 1)
            return text.replace("{{", "{").replace("}}", "}")
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(item, required) for item in node.elts]
        if isinstance(node, ast.Dict):
            return {self.value(k, required): self.value(v, required) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return -node.operand.value
        if isinstance(node, ast.Name):
            return self.env.get(node.id, UNKNOWN)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in QUIZ_CALLS:
            return self.build(node)
        if isinstance(node, ast.DictComp):
            return self.dict_comprehension(node, required)
        return UNKNOWN

    def dict_comprehension(self, node: ast.DictComp, required: bool):
        """``{k: v for a, b in known.items()}`` over a dict the cell built from literals (week 6b's options
        ``{label: kind for label, kind in shortlist.items()}``); anything else is UNKNOWN."""
        generator = node.generators[0] if len(node.generators) == 1 else None
        iterated = generator.iter if generator is not None else None
        if not (generator is not None and not generator.ifs and not generator.is_async
                and isinstance(iterated, ast.Call) and not iterated.args and not iterated.keywords
                and isinstance(iterated.func, ast.Attribute) and iterated.func.attr == "items"
                and isinstance(iterated.func.value, ast.Name)
                and isinstance(generator.target, ast.Tuple) and len(generator.target.elts) == 2
                and all(isinstance(name, ast.Name) for name in generator.target.elts)):
            return UNKNOWN
        known = self.env.get(iterated.func.value.id, UNKNOWN)
        if not isinstance(known, dict) or _has_unknown(known):
            return UNKNOWN
        saved, result = dict(self.env), {}
        try:
            for key, value in known.items():
                self.env[generator.target.elts[0].id], self.env[generator.target.elts[1].id] = key, value
                result[self.value(node.key, required)] = self.value(node.value, required)
        finally:
            self.env = saved
        return result

    def build(self, call: ast.Call):
        """One quiz object through the public classes of ``lesson_aids.quiz``."""
        from course_utils.lesson_aids import quiz

        name = call.func.id
        parameters = list(inspect.signature(getattr(quiz, name)).parameters)
        given = dict(zip(parameters, call.args)) | {k.arg: k.value for k in call.keywords}
        kwargs = {k: self.value(node, required=k in SHOWN_ARGS[name])
                  for k, node in given.items() if k != "order_key"}
        if "order_key" in given:  # the English question as the English output shows it: the English order
            shown, self.shown = self.shown, self.order_shown
            try:
                kwargs["order_key"] = self.value(given["order_key"], required=True)
            finally:
                self.shown = shown
        # An answer key computed by the lesson is not shown (only check() reads it): a stand-in will do.
        if name == "NumericAnswer" and _has_unknown(kwargs.get("answer")):
            kwargs["answer"] = 0.0
        for key in ("answer", "answers"):
            if name in ("MultipleChoice", "MultiSelect") and key in kwargs and _has_unknown(kwargs[key]) \
                    and not _has_unknown(kwargs.get("options")):
                first = next(iter(kwargs["options"])) if isinstance(kwargs["options"], dict) else "a"
                kwargs[key] = first if key == "answer" else [first]
        if any(_has_unknown(kwargs.get(k)) for k in SHOWN_ARGS[name]):
            raise ValueError(f"{name}(...) in line {call.lineno}: what it shows is computed by the lesson; "
                             "only literals and f-strings of shown values can be rendered")
        kwargs = {k: v for k, v in kwargs.items() if not _has_unknown(v)}
        return getattr(quiz, name)(**kwargs)

    def displayed(self):
        """The object the cell's last expression displays (None when the cell displays nothing)."""
        body = ast.parse(self.source).body
        for statement in body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                    isinstance(statement.targets[0], ast.Name):
                try:
                    self.env[statement.targets[0].id] = self.value(statement.value, required=False)
                except ValueError:
                    self.env[statement.targets[0].id] = UNKNOWN
        last = body[-1] if body else None
        if isinstance(last, ast.Expr):
            value = self.value(last.value, required=True)
            return None if value is UNKNOWN else value
        return None


def _has_unknown(value) -> bool:
    if value is UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    return isinstance(value, list) and any(_has_unknown(v) for v in value)


def shown_values(english_source: str, english_text: str) -> dict[str, str]:
    """Placeholder -> the text it rendered to, for each f-string of the cell whose rendered line
    appears in the English output (a question, an option, a title)."""
    values: dict[str, str] = {}
    for lit in string_literals(english_source):
        placeholders = _placeholders(lit.key) if lit.is_f else []
        if not placeholders:
            continue
        parts = re.split("(" + "|".join(map(re.escape, placeholders)) + ")", lit.key)
        pattern = "".join("(.*?)" if i % 2 else re.escape(part.replace("{{", "{").replace("}}", "}"))
                          for i, part in enumerate(parts))
        match = re.search(pattern + "$", english_text, flags=re.MULTILINE)
        if match:
            for placeholder, text in zip(parts[1::2], match.groups()):
                if values.setdefault(placeholder, text) != text:
                    raise ValueError(f"the English output shows {placeholder} as both {values[placeholder]!r} and {text!r}")
    return values


def translated_shown_values(english_source: str, shown: dict[str, str],
                            strings: list[tuple[str, str]]) -> dict[str, str]:
    """``shown`` (placeholder -> the English output's text) as the translated cell would show it.

    A placeholder that is just a name the cell assigns from string literals, a variable only quiz calls
    read (``q_old_source = "the sampler itself" if ... else "a separate forward pass"``, week 9's Q6),
    shows whichever literal the lesson chose; the translated cell assigns the translated literals, so a
    kernel running it would show that literal's translation (``strings``), not the English text. Where
    the literal the lesson chose is an f-string (``gap = f"{n} points above" if n > 0 else ...``, week 7's
    lab question), the English text is read back against each such f-string's template and the one it
    fits gives its translation, filled with the same placeholder values (``_refilled``). Other
    placeholders (numbers, names the code computes with) keep the English output's text."""
    table = {en: ko for en, ko in strings if ko}
    parseable = _parseable(english_source)
    tree = ast.parse(parseable)
    chosen: dict[str, set[str]] = {}
    templates: dict[str, list[str]] = {}
    quiz_only = quiz_only_names(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in quiz_only):
            continue
        name = node.targets[0].id
        found, todo = chosen.setdefault(name, set()), [node.value]
        while todo:  # the literals the value may be, not the pieces of an f-string
            part = todo.pop()
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                found.add(part.value)
            elif isinstance(part, ast.JoinedStr):
                templates.setdefault(name, []).append(_template(part, parseable))
            else:
                todo += list(ast.iter_child_nodes(part))
    out = dict(shown)
    for placeholder, text in shown.items():
        name = placeholder[1:-1]
        if not name.isidentifier():
            continue
        if text in chosen.get(name, ()) and text in table:
            out[placeholder] = table[text]
            continue
        filled = [f for f in (_refilled(t, text, table.get(t)) for t in templates.get(name, ())) if f is not None]
        if len(filled) == 1:  # exactly one of the f-strings renders to the English text
            out[placeholder] = filled[0]
    return out


def _refilled(template: str, text: str, translation: str | None) -> str | None:
    """``translation`` (an f-string template) with each placeholder replaced by the text that ``text``, the
    English f-string ``template`` as rendered, shows for it; None without a translation, or when ``text``
    is not ``template`` rendered (nor renders a placeholder two ways)."""
    if translation is None:
        return None
    unbraced = lambda part: part.replace("{{", "{").replace("}}", "}")  # noqa: E731
    placeholders = _placeholders(template)
    split = re.compile("(" + "|".join(map(re.escape, placeholders)) + ")") if placeholders else None
    parts = split.split(template) if split else [template]
    match = re.fullmatch("".join("(.*?)" if i % 2 else re.escape(unbraced(part)) for i, part in enumerate(parts)),
                         text, flags=re.S)
    if match is None:
        return None
    values: dict[str, str] = {}
    for placeholder, value in zip(parts[1::2], match.groups()):
        if values.setdefault(placeholder, value) != value:
            return None
    pieces = split.split(translation) if split else [translation]
    return "".join(values.get(piece, piece) if i % 2 else unbraced(piece) for i, piece in enumerate(pieces))


def render_quiz(source: str, shown: dict[str, str], complete: bool = True, order_shown=None):
    """The quiz object (or checklist) a quiz cell displays, built from its source; None if none.

    ``complete``: a shown f-string needs a value for every placeholder (the cell's output); with
    False a placeholder without one stays as written (enough to check() the texts headless).
    ``order_shown``: the placeholder values of an ``order_key`` f-string (default ``shown``); a translated
    cell passes the English output's values, so that its options keep the English order even where
    ``shown`` holds a translated text (``translated_shown_values``)."""
    return _Renderer(source, shown, complete, order_shown).displayed()


def _display_data(obj) -> dict:
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(obj)
    return data


# ---------------------------------------------------------------------------------------------
# Merge and drift


def translatable(cell) -> bool:
    return cell["cell_type"] == "markdown" or is_quiz_cell(cell)


@dataclass
class DriftReport:
    """Where a translation and its English notebook disagree (all lists of cell ids)."""

    notebook: str
    stale: list[str] = field(default_factory=list)         # English changed since it was translated
    missing: list[str] = field(default_factory=list)       # translatable cells with no translation
    orphaned: list[str] = field(default_factory=list)      # translations of cells that no longer exist
    unstamped: list[str] = field(default_factory=list)     # translated, source_sha256 not recorded yet
    untranslated: list[tuple[str, str]] = field(default_factory=list)  # (cell, English prose literal)
    first_lines: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.stale or self.missing or self.orphaned or self.unstamped or self.untranslated)

    def lines(self) -> list[str]:
        """One line per problem, naming the notebook, the cell and what to do."""
        name, stem = self.notebook, Path(self.notebook).stem
        where = lambda c: f"{name}: cell {c} ({self.first_lines.get(c, '')!r:.60})"  # noqa: E731
        out = [f"{where(c)} changed in English since it was translated: update its translation, then "
               f"`python -m course_utils translate --stamp {stem} {c}`" for c in self.stale]
        out += [f"{where(c)} has no translation: add it to the translations file" for c in self.missing]
        out += [f"{name}: cell {c} no longer exists in English: remove its translation" for c in self.orphaned]
        out += [f"{where(c)} is translated but not stamped: `python -m course_utils translate --stamp {stem} {c}`"
                for c in self.unstamped]
        out += [f"{where(c)}: the string {s!r:.70} is not translated" for c, s in self.untranslated]
        return out


def drift(english_nb, t: Translations) -> DriftReport:
    """Compare a translation with the current English notebook."""
    report = DriftReport(t.notebook)
    cells = {cell["id"]: cell for cell in english_nb["cells"]}
    for cell_id, cell in cells.items():
        report.first_lines[cell_id] = next((ln.strip() for ln in _text(cell["source"]).split("\n") if ln.strip()), "")
        entry = t.cells.get(cell_id)
        if not translatable(cell):
            if entry is not None:
                report.stale.append(cell_id)
            continue
        kind_ok = entry is not None and (entry.markdown is not None) == (cell["cell_type"] == "markdown")
        if entry is None or (entry.markdown is not None and not entry.markdown.strip()):
            report.missing.append(cell_id)
        elif not kind_ok:
            report.stale.append(cell_id)
        elif not entry.source_sha256:
            report.unstamped.append(cell_id)
        elif entry.source_sha256 != source_sha256(cell):
            report.stale.append(cell_id)
        elif entry.strings is not None:
            done = {en for en, ko in entry.strings if ko}
            report.untranslated += [(cell_id, s) for s in prose_literals(_text(cell["source"])) if s not in done]
    report.orphaned = [c for c in t.cells if c not in cells]
    return report


def _prune_widget_state(nb) -> None:
    """Keep only the saved widget models that a remaining widget view still reaches."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state")
    if state is None:
        return
    todo = [o["data"][WIDGET_VIEW]["model_id"] for c in nb["cells"] for o in c.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {})]
    keep = set()
    while todo:
        model_id = todo.pop()
        if model_id in keep or model_id not in state:
            continue
        keep.add(model_id)
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[model_id]))
    nb["metadata"]["widgets"][WIDGET_STATE]["state"] = {k: v for k, v in state.items() if k in keep}


def _merge_quiz_cell(cell, entry: Entry, current: bool, language: str) -> None:
    english = _text(cell["source"])
    korean = translate_code(english, [(en, ko) for en, ko in entry.strings if ko], strict=current)
    korean = with_language(with_order_keys(korean, english), language)
    cell["source"] = korean
    for output in cell.get("outputs", []):
        if output.get("output_type") != "execute_result":
            continue
        data = output["data"]
        english_shown = shown_values(english, _text(data.get("text/plain", "")))
        obj = render_quiz(korean, translated_shown_values(english, english_shown, entry.strings),
                          order_shown=english_shown)
        if obj is None:
            raise ValueError(f"cell {cell['id']}: its output is not a quiz this module can render again")
        output["data"] = {k: v for k, v in _display_data(obj).items() if k in ("text/plain", "text/html")}


def _merge_exercise_cell(cell, language: str) -> None:
    """``lang`` on the exercise calls; the output rendered again in ``language`` where it can be."""
    english = _text(cell["source"])
    cell["source"] = with_language(english, language)
    for output in cell.get("outputs", []):
        if output.get("output_type") != "execute_result":
            continue
        obj = exercise_output(english, _text(output["data"].get("text/plain", "")), language)
        if obj is not None:
            output["data"] = {k: v for k, v in _display_data(obj).items() if k in output["data"]}


def _merge_glossary_cell(cell, language: str) -> None:
    """``lang`` on the ``show_glossary`` call; the table rendered again in ``language``."""
    english = _text(cell["source"])
    cell["source"] = with_language(english, language)
    for output in cell.get("outputs", []):
        if output.get("output_type") != "execute_result":
            continue
        obj = glossary_output(english, _text(output["data"].get("text/plain", "")), language)
        if obj is None:
            raise ValueError(f"cell {cell['id']}: its output is not the glossary table of a literal list of terms, "
                             "which this module can render again; list the terms in the call and re-execute the "
                             "English notebook")
        output["data"] = {k: v for k, v in _display_data(obj).items() if k in output["data"]}


def rerender_changed_quizzes(nb, before_nb=None) -> list[str]:
    """Bring the stored output of every quiz cell of ``nb`` whose source changed since ``before_nb`` (the
    same lesson as committed, its outputs those of its last execution) up to date, without a kernel;
    with ``before_nb`` None, of every quiz cell (after a change to what ``lesson_aids.quiz`` prints).

    A quiz shows only literals and f-strings; the f-strings' placeholders take the values the old output
    shows (``shown_values`` of the old source), so a rewritten option or a key moved to another authored
    label shows exactly what a kernel would show, in the same display order. A new placeholder, or a shown
    value computed by the lesson, raises: that change needs the lesson re-executed. The widget view is
    dropped (its model would show the old options); the text and HTML views remain, as in a translated
    lesson, until the next execution stores a widget again. Returns the ids of the cells rendered again.
    """
    before = {cell.get("id"): cell for cell in (nb if before_nb is None else before_nb)["cells"]}
    done = []
    for cell in nb["cells"]:
        old = before.get(cell.get("id"))
        if not is_quiz_cell(cell) or old is None or \
                (before_nb is not None and _text(old["source"]) == _text(cell["source"])):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") != "execute_result":
                continue
            shown = shown_values(_text(old["source"]), _text(output["data"].get("text/plain", "")))
            obj = render_quiz(_text(cell["source"]), shown)
            if obj is None:
                raise ValueError(f"cell {cell['id']}: the new quiz shows a value its stored output does not (a new "
                                 "placeholder, or a text the lesson computes); re-execute the lesson instead")
            output["data"] = {k: v for k, v in _display_data(obj).items() if k in ("text/plain", "text/html")}
        done.append(cell["id"])
    _prune_widget_state(nb)
    return done


def merge(english_nb, t: Translations):
    """The translated notebook: ``english_nb`` (not changed) with the translations of ``t`` merged in.

    Cells keep their ids, code and outputs; markdown cells take their translation, quiz cells their
    translated literals and a re-rendered output, and quiz, exercise and glossary calls ``lang``
    (module docstring). A cell without a translation stays English, and a stale one (its English changed
    since) keeps its old translation: ``drift`` reports both.
    """
    nb = copy.deepcopy(english_nb)
    for cell in nb["cells"]:
        if is_exercise_cell(cell):
            _merge_exercise_cell(cell, t.language)
        elif is_glossary_cell(cell):
            _merge_glossary_cell(cell, t.language)
        entry = t.cells.get(cell.get("id"))
        if entry is None or not translatable(cell):
            continue
        current = entry.source_sha256 in ("", source_sha256(cell))
        if cell["cell_type"] == "markdown" and entry.markdown is not None and entry.markdown.strip():
            cell["source"] = entry.markdown
        elif cell["cell_type"] == "code" and entry.strings is not None:
            _merge_quiz_cell(cell, entry, current, t.language)
    _prune_widget_state(nb)
    notebook_clean.clean_notebook(nb)  # no execution timestamps, whatever state the English one is in
    nb["metadata"]["translation"] = {
        "language": t.language, "english": f"../{t.notebook}",
        "generated_by": "python -m course_utils translate (edit the translations file, not this notebook)",
        "translations": f"../translations/{t.language}/{Path(t.notebook).stem}.yaml"}
    return nbformat.from_dict(nb)


def notebook_text(nb) -> str:
    """The repository's notebook layout (nbformat's, indent 1, UTF-8 kept, final newline)."""
    return nbformat.writes(nbformat.from_dict(nb)) + "\n"


# ---------------------------------------------------------------------------------------------
# Files and the command line


@dataclass
class Lesson:
    """One translated lesson: its translations file, English notebook and generated notebook."""

    translations_file: Path
    english: Path
    generated: Path

    @property
    def name(self) -> str:
        return self.english.name


def lessons(notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE, only=()) -> list[Lesson]:
    """The lessons that have a translations file (all of them, or the ``only`` ones by name)."""
    folder = translations_dir(notebooks_dir, language)
    files = sorted(folder.glob("*.yaml"))
    wanted = {Path(n).stem for n in only}
    unknown = wanted - {f.stem for f in files}
    if unknown:
        name = sorted(unknown)[0]
        if not (Path(notebooks_dir) / f"{name}.ipynb").is_file():  # a misspelt lesson: no skeleton to start
            known = ", ".join(p.stem for p in sorted(Path(notebooks_dir).glob("week*.ipynb")))
            raise ValueError(f"no lesson {name!r}; lessons: {known}")
        raise ValueError(f"no translations file {folder / (name + '.yaml')}; "
                         f"start one with `python -m course_utils translate --skeleton {name}`")
    return [Lesson(f, Path(notebooks_dir) / f"{f.stem}.ipynb", output_dir(notebooks_dir, language) / f"{f.stem}.ipynb")
            for f in files if not wanted or f.stem in wanted]


def read_english(lesson: Lesson):
    if not lesson.english.is_file():
        raise ValueError(f"{lesson.translations_file} translates {lesson.english}, which does not exist; "
                         "rename or delete the translations file")
    return nbformat.read(lesson.english, as_version=4)


def check(notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE, only=()) -> list[str]:
    """Every problem, one line each: stale, missing and orphaned translations, and generated
    notebooks that differ from the merge (edited by hand, or not regenerated)."""
    problems = []
    for lesson in lessons(notebooks_dir, language, only):
        english, t = read_english(lesson), load_translations(lesson.translations_file)
        problems += drift(english, t).lines()
        text = notebook_text(merge(english, t))
        if not lesson.generated.is_file() or lesson.generated.read_text(encoding="utf-8") != text:
            problems.append(f"{lesson.generated} is not the merge of {lesson.english.name} and its translations: "
                            "run `python -m course_utils translate` (never edit it by hand)")
    return problems


def write(notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE, only=()) -> list[str]:
    """Write every translated notebook; return the drift lines (written anyway: a stale cell keeps
    its old translation, a missing one stays English)."""
    problems = []
    for lesson in lessons(notebooks_dir, language, only):
        english, t = read_english(lesson), load_translations(lesson.translations_file)
        problems += drift(english, t).lines()
        lesson.generated.parent.mkdir(parents=True, exist_ok=True)
        text = notebook_text(merge(english, t))
        if not lesson.generated.is_file() or lesson.generated.read_text(encoding="utf-8") != text:
            lesson.generated.write_text(text, encoding="utf-8")
        print(f"{lesson.generated}")
    return problems


def stamp(name: str, cell_ids=(), notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE) -> list[str]:
    """Record the current English hash for ``cell_ids`` (their translations were brought up to
    date), or for every entry with an empty hash when none are named. Returns the stamped ids."""
    lesson = lessons(notebooks_dir, language, [name])[0]
    english, t = read_english(lesson), load_translations(lesson.translations_file)
    cells = {cell["id"]: cell for cell in english["cells"]}
    ids = list(cell_ids) or [c for c, e in t.cells.items() if not e.source_sha256]
    for cell_id in ids:
        if cell_id not in t.cells or cell_id not in cells:
            raise ValueError(f"cell {cell_id} is not in both {lesson.translations_file.name} and {lesson.english.name}")
        entry = t.cells[cell_id]
        if entry.strings is not None:  # a translator's slip shows now, not in CI
            translate_code(_text(cells[cell_id]["source"]), [(en, ko) for en, ko in entry.strings if ko])
        entry.source_sha256 = source_sha256(cells[cell_id])
    lesson.translations_file.write_text(dump_translations(t), encoding="utf-8")
    return ids


def skeleton(name: str, notebooks_dir: Path = NOTEBOOKS_DIR, language: str = LANGUAGE) -> Path:
    """Start a translations file for a lesson: every translatable cell with an empty translation
    (quiz cells list their English prose literals)."""
    english_path = Path(notebooks_dir) / f"{Path(name).stem}.ipynb"
    target = translations_dir(notebooks_dir, language) / f"{english_path.stem}.yaml"
    if not english_path.is_file():
        raise ValueError(f"no English notebook {english_path}")
    if target.exists():
        raise ValueError(f"{target} exists already; edit it instead")
    english = nbformat.read(english_path, as_version=4)
    t = Translations(english_path.name, language)
    for cell in english["cells"]:
        if cell["cell_type"] == "markdown":
            t.cells[cell["id"]] = Entry("", markdown="")
        elif is_quiz_cell(cell):
            t.cells[cell["id"]] = Entry("", strings=[(s, "") for s in prose_literals(_text(cell["source"]))])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dump_translations(t), encoding="utf-8")
    return target


# ---------------------------------------------------------------------------------------------
# The README: README.ko.md translates README.md section by section, each section stamped
#
# Under each Korean heading a comment names the English section it translates and the SHA-256 of
# that section as it was translated (several, when one Korean section covers several English ones):
#
#     ## 속도
#     <!-- en: "## Speed" sha256: 3f1c... -->
#
# A section is a heading (any level, outside fenced code) and the text up to the next heading; the
# generated glossary block is left out of its hash (its Korean table is generated too, and checked
# by its own test). Every English section must be stamped somewhere in the Korean README, so a
# section changed or added in English and not in Korean fails the check (``translate --check``,
# ``tests/test_readme_translation.py``). After a reviewed update of the Korean text:
#
#     python -m course_utils translate --stamp README "## Speed"     # or no heading: the empty stamps

README_STAMP = re.compile(r'^<!-- en: "(?P<heading>[^"\n]*)" sha256:(?: (?P<sha>[0-9a-f]+))? -->[ \t]*$', re.M)
"""One stamp line of README.ko.md: the English heading line it translates and that section's hash."""
README_HEADING = re.compile(r"^#{1,6} \S")
README_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
GLOSSARY_BLOCK = re.compile(r"(<!-- glossary:start[^\n]*-->\n).*?(<!-- glossary:end -->)", re.S)


def readme_sections(text: str) -> dict[str, str]:
    """The README cut at its headings (``#`` to ``######``; not ``#`` lines inside fenced code):
    heading line -> the section, heading included, up to the next heading. Text before the first
    heading is not a section. Raises ValueError on a heading that occurs twice (a stamp must name one)."""
    sections: dict[str, list[str]] = {}
    current, fence = None, None
    for line in text.splitlines(keepends=True):
        opening = README_FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
        elif fence is None and README_HEADING.match(line):
            current = line.rstrip()
            if current in sections or '"' in current:
                raise ValueError(f"the heading {current!r} occurs twice in the README or holds a double quote: "
                                 "a stamp could not name it")
            sections[current] = []
        if current is not None:
            sections[current].append(line)
    return {heading: "".join(lines) for heading, lines in sections.items()}


def readme_section_sha256(section: str) -> str:
    """SHA-256 of one README section, its generated glossary table left out and trailing blank lines
    ignored: what a Korean stamp records."""
    body = GLOSSARY_BLOCK.sub(r"\1\2", section).rstrip() + "\n"
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def readme_hashes(english: str) -> dict[str, str]:
    """Every section of the English README with its hash: heading line -> SHA-256."""
    return {heading: readme_section_sha256(text) for heading, text in readme_sections(english).items()}


def readme_drift(english: str, translated: str, name: str = "README.ko.md") -> list[str]:
    """One line per problem between README.md (``english``) and its translation: a stamp whose English
    section changed since (stale), names no English section (orphaned) or has no hash yet
    (unstamped), an English section stamped twice, and an English section that no stamp names."""
    hashes, problems, seen = readme_hashes(english), [], set()
    for match in README_STAMP.finditer(translated):
        heading, sha = match.group("heading"), match.group("sha") or ""
        line = translated.count("\n", 0, match.start()) + 1
        restamp = f"`python -m course_utils translate --stamp README {shlex.quote(heading)}`"
        if heading not in hashes:
            problems.append(f"{name} line {line}: the stamp names {heading!r}, which is not a heading of README.md: "
                            "point it at the section it translates, or remove it with its translation")
        elif heading in seen:
            problems.append(f"{name} line {line}: {heading!r} is stamped twice: one Korean section translates it")
        elif not sha:
            problems.append(f"{name} line {line}: {heading!r} is translated but not stamped: {restamp}")
        elif sha != hashes[heading]:
            problems.append(f"{name} line {line}: {heading!r} changed in README.md since it was translated: "
                            f"update its translation, then {restamp}")
        seen.add(heading)
    problems += [f"README.md's section {heading!r} has no translation in {name}: translate it under a heading "
                 f'followed by `<!-- en: "{heading}" sha256: -->`, then '
                 f"`python -m course_utils translate --stamp README`" for heading in hashes if heading not in seen]
    return problems


def stamp_readme(english: str, translated: str, headings=()) -> tuple[str, list[str]]:
    """``translated`` with the current English hash recorded in the stamps of ``headings`` (their
    translations were brought up to date), or in every empty stamp when none are named; and the
    headings stamped. Raises ValueError for a heading the English README or the stamps lack."""
    hashes = readme_hashes(english)
    stamped = {m.group("heading"): m.group("sha") or "" for m in README_STAMP.finditer(translated)}
    wanted = list(headings) or [h for h, sha in stamped.items() if not sha]
    for heading in wanted:
        if heading not in hashes or heading not in stamped:
            raise ValueError(f"{heading!r} is not both a heading of README.md and stamped in README.ko.md")

    def restamp(match: re.Match) -> str:
        heading = match.group("heading")
        if heading not in wanted or heading not in hashes:
            return match.group(0)
        return f'<!-- en: "{heading}" sha256: {hashes[heading]} -->'

    return README_STAMP.sub(restamp, translated), wanted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils translate",
        description="merge the translations files into the translated notebooks (notebooks/<language>/)")
    parser.add_argument("notebooks", nargs="*", help="lesson names (default: every lesson with a translations file); "
                        "with --stamp: the lesson, then its cell ids, or README, then its English headings")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every stale, missing or "
                        "orphaned translation and every generated notebook that is out of date (CI); with no "
                        "lesson named, README.ko.md's sections against README.md's too")
    parser.add_argument("--stamp", action="store_true", help="record the English hash of the named cells "
                        "(default: of every entry with an empty hash) after updating their translations; "
                        "`--stamp README \"## Speed\"`: of README.ko.md's stamp for that section of README.md")
    parser.add_argument("--skeleton", action="store_true", help="start a translations file for the named lesson")
    parser.add_argument("--rerender-quizzes", metavar="REV", default=None,
                        help="for the named English lessons: render again, without a kernel, the output of each quiz "
                        "cell whose source changed since git revision REV (e.g. HEAD), or with REV 'all' of every "
                        "quiz cell (after a change to what lesson_aids.quiz prints); see rerender_changed_quizzes")
    parser.add_argument("--language", default=LANGUAGE)
    parser.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS_DIR, help=argparse.SUPPRESS)  # tests
    args = parser.parse_args(argv)
    where = {"notebooks_dir": args.notebooks_dir, "language": args.language}
    if args.rerender_quizzes:
        if not args.notebooks:
            raise ValueError("name the English lessons, e.g. `translate --rerender-quizzes HEAD week07_ppo_run`")
        for name in args.notebooks:
            path = args.notebooks_dir / f"{name}.ipynb"
            if not path.is_file():
                raise ValueError(f"no lesson {path}; lessons: {' '.join(p.stem for p in sorted(args.notebooks_dir.glob('week*.ipynb')))}")
            nb = json.loads(path.read_text(encoding="utf-8"))
            if args.rerender_quizzes == "all":
                done = rerender_changed_quizzes(nb)
            else:
                relative = path.resolve().relative_to(README.parent)
                committed = subprocess.run(["git", "-C", str(README.parent), "show",
                                            f"{args.rerender_quizzes}:{relative}"], capture_output=True, text=True)
                if committed.returncode:
                    raise ValueError(f"git has no {relative} at {args.rerender_quizzes}: {committed.stderr.strip()}")
                done = rerender_changed_quizzes(nb, json.loads(committed.stdout))
            path.write_text(notebook_text(nb), encoding="utf-8")
            print(f"{name}: {len(done)} quiz cell(s) rendered again: {' '.join(done) or '-'}")
        return
    if args.stamp and args.notebooks[:1] == ["README"]:
        text, headings = stamp_readme(README.read_text(encoding="utf-8"), README_KO.read_text(encoding="utf-8"),
                                      args.notebooks[1:])
        README_KO.write_text(text, encoding="utf-8")
        print(f"stamped {len(headings)} section(s) of {README_KO.name}: {'; '.join(headings)}")
        return
    if args.stamp or args.skeleton:
        if not args.notebooks:
            raise ValueError("name the lesson, e.g. `translate --stamp week01_four_models 9f0fe159`")
        if args.skeleton:
            for name in args.notebooks:
                print(skeleton(name, **where))
            return
        ids = stamp(args.notebooks[0], args.notebooks[1:], **where)
        print(f"stamped {len(ids)} cell(s) of {args.notebooks[0]}: {' '.join(ids)}")
        return
    if args.check:
        problems = check(only=args.notebooks, **where)
        if not args.notebooks and args.notebooks_dir == NOTEBOOKS_DIR and args.language == LANGUAGE:
            problems += readme_drift(README.read_text(encoding="utf-8"), README_KO.read_text(encoding="utf-8"))
        print("\n".join(problems) if problems else "translations: up to date")
        if problems:
            sys.exit(1)
        return
    problems = write(only=args.notebooks, **where)
    if problems:
        print("\n".join(["", "drift (the notebooks were written anyway):", *problems]))
