"""Guard rails for the package layout: the formula index resolves, the imports form no cycle, the
algorithm layer imports neither the lesson aids nor the comparison harness, and its functions and
classes stay small enough to read on a screen or two."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import course_utils

PACKAGE = Path(course_utils.__file__).resolve().parent
ALGORITHM = sorted(p for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 60, 300


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """course_utils modules that ``path`` imports anywhere (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("course_utils"):
            found.add(node.module)
            for alias in node.names:  # `from course_utils.machinery import hub` imports a module
                if (PACKAGE.parent / (node.module.replace(".", "/") + f"/{alias.name}.py")).is_file():
                    found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("course_utils"))
    found.discard("course_utils")
    return found


def import_graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py")]
    return {module_name(p): imported_modules(p) - {module_name(p)} for p in files}


def test_the_formula_index_resolves():
    doc = course_utils.__doc__
    index = doc[doc.index("Formula index"):doc.index("Command line")]
    names = re.findall(r"\b([a-z_]+\.[A-Za-z_]+)\b", index)
    assert len(names) >= 25, names
    for name in names:
        module, attr = name.split(".")
        assert hasattr(importlib.import_module(f"course_utils.{module}"), attr), name


def test_every_module_is_in_the_package_map():
    doc = course_utils.__doc__
    for path in PACKAGE.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            assert re.search(rf"\b{path.stem}\b", doc), f"{path.stem} is missing from the package docstring"


def test_the_imports_form_no_cycle():
    graph = import_graph()
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_algorithm_layer_reads_neither_lesson_aids_nor_the_comparison_harness():
    graph = import_graph()
    for path in ALGORITHM:
        seen, todo = set(), [module_name(path)]
        while todo:  # everything it imports, directly or through another module
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        bad = sorted(m for m in seen if m.startswith(("course_utils.lesson_aids", "course_utils.comparison")))
        assert not bad, f"{path.name} imports {bad}"


def docstring_lines(node) -> int:
    """Lines of a function's docstring: they explain the code and are not counted against it."""
    body = getattr(node, "body", None)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body and isinstance(body[0], ast.Expr) \
            and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[0].end_lineno - body[0].lineno + 1
    return 0


def test_the_algorithm_layer_keeps_functions_and_classes_small():
    too_long = []
    for path in ALGORITHM:
        for node in ast.walk(ast.parse(path.read_text())):
            lines = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1 - docstring_lines(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and lines > MAX_FUNCTION_LINES:
                too_long.append(f"{path.name}: def {node.name} ({lines} lines)")
            if isinstance(node, ast.ClassDef) and lines > MAX_CLASS_LINES:
                too_long.append(f"{path.name}: class {node.name} ({lines} lines)")
    assert not too_long, too_long


def test_one_place_knows_where_the_repository_is():
    pattern = re.compile(r"Path\(__file__\)\.resolve\(\)\.parent|parents\[\d\]")
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if pattern.search(p.read_text()) and p.name != "paths.py"]
    assert not offenders, offenders


def test_the_installed_package_carries_every_subpackage():
    import tomllib

    from setuptools import find_packages

    settings = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(where=str(PACKAGE.parent), include=settings["include"]))
    folders = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert folders <= found, sorted(folders - found)


def test_trl_is_patched_in_one_place_and_children_start_in_one_place():
    patching = re.compile(r"setattr\(trl_ppo|trl_ppo\.\w+\s*=[^=]")
    starting = re.compile(r"subprocess\.(run|Popen)\(")
    for path in (PACKAGE / "comparison").glob("*.py"):
        text = path.read_text()
        if path.stem != "trl_adapter":
            assert not patching.search(text), f"{path.name} patches TRL itself; use trl_adapter.patched_trl"
        if path.stem not in ("child", "trl_compare"):  # trl_compare also starts gloo/torchrun process groups
            assert not starting.search(text), f"{path.name} starts a child itself; use comparison.child"
