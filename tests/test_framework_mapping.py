"""docs/trl_config_mapping.md names only flags, keys and fields that exist.

Every backticked name in the doc's TRL, OpenRLHF and verl columns is looked up in
tests/data/framework_names.json, a snapshot of what those projects define (OpenRLHF's argparse
options, verl's flattened Hydra config, TRL's PPOConfig fields and PPOTrainer arguments) written by
tests/data/make_framework_names.py from the revisions the doc's header names. The TRL names are
also checked against the installed trl, read from its source files (importing trl would pull in
torch and transformers and take seconds).

How a backticked token in a checked column is read (the doc's header states the same rule):

* a quoted string (``"k3"``) or a number is a value; a token with ``(`` or ``/`` is code or a
  file path: none of these is checked;
* OpenRLHF column: ``--x.y`` (anything after a space or ``=`` is a value) is a flag;
* verl column: a dotted path, optionally ``path: value``, is a key; ``arr.`` stands for
  ``actor_rollout_ref.``;
* TRL column: ``name=...`` is a ``PPOTrainer`` argument, ``name`` or ``name: value`` a
  ``PPOConfig`` field, and a dotted name (``transformers.AutoModelForSequenceClassification``) a
  reference to code.

Any other token in those columns is reported, so a key written relative to another one
(``clip_ratio_low`` for ``arr.actor.clip_ratio_low``) cannot slip through unchecked. A column's
header must name the revision the snapshot was made from (``OpenRLHF v0.11.0``, ``verl v0.9.1``,
``TRL 1.12.0``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "trl_config_mapping.md"
SNAPSHOT = ROOT / "tests" / "data" / "framework_names.json"

LITERAL = re.compile(r'"[^"]*"|-?\d+(\.\d+)?([eE]-?\d+)?')
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
FLAG = re.compile(r"--([A-Za-z0-9_][A-Za-z0-9_.\-]*)(?:[ =].*)?")
KEY = re.compile(rf"({IDENT}(?:\.{IDENT})+)(?:: .+)?")
TRAINER_ARG = re.compile(rf"({IDENT})=(?!=).*")
FIELD = re.compile(rf"({IDENT})(?:: .+)?")
DOTTED_CODE = re.compile(rf"{IDENT}(?:\.{IDENT})+")


def load_snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def split_row(line: str) -> list[str]:
    """The cells of a Markdown table row; a ``|`` inside backticks does not split."""
    cells, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header cells, body rows) of every table in the Markdown text."""
    found, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(split_row(line))
            continue
        if len(block) >= 2:
            found.append((block[0], block[2:]))
        block = []
    return found


def column_kinds(snapshot: dict) -> dict[str, tuple[str, str]]:
    """Table header -> (kind of names, snapshot entry) for the columns that are checked."""
    kinds = {f"TRL {snapshot['trl']['version']}": ("trl", "trl"),
             f"verl {snapshot['verl']['revision']}": ("verl", "verl")}
    for entry in ("openrlhf", "openrlhf_flat"):
        kinds[f"OpenRLHF {snapshot[entry]['revision']}"] = ("openrlhf", entry)
    return kinds


def classify(kind: str, token: str) -> tuple[str, str] | None:
    """(what, name) for a backticked token of a column of this kind; None for values and code.
    Raises ValueError for a token the rule above cannot place."""
    if LITERAL.fullmatch(token):
        return None
    if kind == "trl" and (m := TRAINER_ARG.fullmatch(token)):
        return "trainer_args", m.group(1)
    if "(" in token or "/" in token:
        return None
    if kind == "openrlhf" and (m := FLAG.fullmatch(token)):
        return "flags", m.group(1)
    if kind == "verl" and (m := KEY.fullmatch(token)):
        return "keys", re.sub(r"^arr\.", "actor_rollout_ref.", m.group(1))
    if kind == "trl" and (m := FIELD.fullmatch(token)):
        return "fields", m.group(1)
    if kind == "trl" and DOTTED_CODE.fullmatch(token):
        return None
    raise ValueError(f"`{token}` in a {kind} column is none of the forms the rule allows")


def doc_names(text: str, snapshot: dict) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The names the doc's checked columns use, as (snapshot entry, what, name, table row), and
    the problems met while reading them (unknown revision in a header, unreadable token)."""
    kinds = column_kinds(snapshot)
    names, problems = [], []
    for headers, rows in tables(text):
        for col, header in enumerate(headers):
            if header not in kinds:
                if re.match(r"(TRL|OpenRLHF|verl)\b", header):
                    problems.append(f"column `{header}` names a revision the snapshot was not made from")
                continue
            kind, entry = kinds[header]
            for row in rows:
                cell = row[col] if col < len(row) else ""
                for token in re.findall(r"`([^`]+)`", cell):
                    try:
                        found = classify(kind, token.strip())
                    except ValueError as err:
                        problems.append(f"{err} (row {row[0]})")
                        continue
                    if found:
                        names.append((entry, *found, row[0]))
    return names, problems


def missing_names(text: str, snapshot: dict) -> list[str]:
    """Every name the doc uses that the snapshot does not define, plus the reading problems."""
    names, problems = doc_names(text, snapshot)
    known = {(entry, what): set(values) for entry, data in snapshot.items()
             for what, values in data.items() if isinstance(values, list)}
    for entry, what, name, row in names:
        if name not in known.get((entry, what), set()):
            problems.append(f"{entry} {what}: `{name}` does not exist (row {row})")
    return problems


# --- the checking function itself -------------------------------------------------------------

FAKE_DOC = """
| ours | TRL 1.12.0 | OpenRLHF v0.11.0 | verl v0.9.1 |
|---|---|---|---|
| `good` | `cliprange`, `model=`, `stop_token: "eos"`, `"k1"` | `--actor.eps_clip` (`"all-linear"`) | `arr.actor.clip_ratio`, `algorithm.kl_ctrl.type: adaptive` |
| `bad` | `no_such_field`, `no_such_arg=` | `--no_such_flag` | `algorithm.no_such_key` |
| `unreadable` | | `k1` | `clip_ratio_low` |

| OpenRLHF v9.9.9 |
|---|
| `--eps_clip` |
"""


def test_the_check_reports_made_up_names_and_accepts_real_ones():
    problems = missing_names(FAKE_DOC, load_snapshot())
    assert any("`no_such_field` does not exist" in p for p in problems)
    assert any("trainer_args: `no_such_arg` does not exist" in p for p in problems)
    assert any("flags: `no_such_flag` does not exist" in p for p in problems)
    assert any("keys: `algorithm.no_such_key` does not exist" in p for p in problems)
    assert any("`k1` in a openrlhf column" in p for p in problems)
    assert any("`clip_ratio_low` in a verl column" in p for p in problems)
    assert any("`OpenRLHF v9.9.9` names a revision" in p for p in problems)
    assert len(problems) == 7, problems  # nothing from the `good` row


def test_split_row_keeps_pipes_inside_backticks():
    assert split_row("| a | `x | y` | b |") == ["a", "`x | y`", "b"]


# --- the doc --------------------------------------------------------------------------------

def test_every_name_in_the_mapping_exists_in_its_framework():
    assert missing_names(DOC.read_text(), load_snapshot()) == []


def test_the_doc_checks_enough_names_to_mean_something():
    names, _ = doc_names(DOC.read_text(), load_snapshot())
    counts = {}
    for entry, what, name, _row in names:
        counts.setdefault((entry, what), set()).add(name)
    sizes = {k: len(v) for k, v in counts.items()}
    assert sizes[("openrlhf", "flags")] >= 40 and sizes[("openrlhf_flat", "flags")] >= 40, sizes
    assert sizes[("verl", "keys")] >= 40 and sizes[("trl", "fields")] >= 30, sizes
    assert sizes[("trl", "trainer_args")] >= 5, sizes


def test_the_rename_table_covers_every_openrlhf_flag_in_the_mapping():
    snapshot = load_snapshot()
    text = DOC.read_text()
    current = f"OpenRLHF {snapshot['openrlhf']['revision']}"
    flat = f"OpenRLHF {snapshot['openrlhf_flat']['revision']}"
    rename = [(headers, rows) for headers, rows in tables(text) if flat in headers]
    assert len(rename) == 1, "one table maps the current flags to the flat ones"
    headers, rows = rename[0]
    col = headers.index(current)
    renamed = {classify("openrlhf", t)[1] for row in rows for t in re.findall(r"`([^`]+)`", row[col])}
    used = {name for entry, _what, name, _row in doc_names(text, snapshot)[0] if entry == "openrlhf"}
    assert used - renamed == set()


def test_the_doc_header_names_the_commits_of_the_snapshot():
    """A snapshot read from a git mirror names its commit (7 hex digits in the doc); one read from
    a release wheel (verl, newer than the mirror) names the wheel's sha256 (12 hex digits)."""
    text = DOC.read_text()
    snapshot = load_snapshot()
    for entry in ("openrlhf", "openrlhf_flat", "verl"):
        source = snapshot[entry]["source"]
        commit = re.search(r"@([0-9a-f]{40}):", source)
        wheel = re.search(r"sha256=([0-9a-f]{64}):", source)
        assert commit or wheel, (entry, source)
        named = commit.group(1)[:7] if commit else wheel.group(1)[:12]
        assert f"`{named}`" in text, (entry, named)


# --- the installed trl ----------------------------------------------------------------------

def _class(path: Path, name: str) -> ast.ClassDef:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no class {name} in {path}")


def installed_trl_names() -> dict[str, set[str]]:
    """PPOConfig's dataclass fields and PPOTrainer.__init__'s parameters, read from the installed
    trl and transformers sources without importing them. The class chain
    PPOConfig -> _BaseConfig -> TrainingArguments is asserted, so a restructured trl fails here
    instead of being read wrongly."""
    trl_dir = Path(importlib.util.find_spec("trl").origin).parent
    tf_dir = Path(importlib.util.find_spec("transformers").origin).parent
    chain = [(trl_dir / "experimental/ppo/ppo_config.py", "PPOConfig", ["_BaseConfig"]),
             (trl_dir / "trainer/base_config.py", "_BaseConfig", ["TrainingArguments"]),
             (tf_dir / "training_args.py", "TrainingArguments", [])]
    fields = set()
    for path, name, bases in chain:
        cls = _class(path, name)
        assert [ast.unparse(b) for b in cls.bases] == bases, (name, [ast.unparse(b) for b in cls.bases])
        fields |= {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)
                   and isinstance(s.target, ast.Name) and "ClassVar" not in ast.unparse(s.annotation)}
    init = next(f for f in _class(trl_dir / "experimental/ppo/ppo_trainer.py", "PPOTrainer").body
                if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    params = {a.arg for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs} - {"self"}
    return {"fields": fields, "trainer_args": params}


def test_trl_names_exist_in_the_installed_trl():
    snapshot = load_snapshot()
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed")
    version = importlib.metadata.version("trl")
    if version != snapshot["trl"]["version"]:
        pytest.skip(f"trl {version} is installed; the mapping is for trl {snapshot['trl']['version']}")
    installed = installed_trl_names()
    assert installed["fields"] == set(snapshot["trl"]["fields"])
    assert installed["trainer_args"] == set(snapshot["trl"]["trainer_args"])
    names, _ = doc_names(DOC.read_text(), snapshot)
    missing = [(what, name) for entry, what, name, _row in names
               if entry == "trl" and name not in installed[what]]
    assert missing == []
