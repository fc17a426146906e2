"""The shape of evaluate.py (README "How the code is organised"): eight chapters in the
order the module docstring's table gives, nothing at module level that uses a later
chapter, and functions short enough to read."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

SOURCE_PATH = Path(__file__).resolve().parent.parent / "evaluate.py"
SOURCE = SOURCE_PATH.read_text(encoding="utf-8")
TREE = ast.parse(SOURCE)
LINES = SOURCE.splitlines()

#: A chapter banner: a line of '=' then "# N. Title" then a line of '='.
_BANNER = "# " + "=" * 86


def chapter_banners() -> list[tuple[int, int, str]]:
    """(line number, chapter number, title) of each chapter banner, in file order."""
    out = []
    for i, line in enumerate(LINES[:-2]):
        if line == _BANNER and LINES[i + 2] == _BANNER:
            m = re.fullmatch(r"# (\d+)\. (.+)", LINES[i + 1])
            assert m, f"line {i + 2}: a chapter banner's title is 'N. Title', found {LINES[i + 1]!r}"
            out.append((i + 2, int(m.group(1)), m.group(2)))
    return out


def docstring_chapters() -> list[tuple[int, str]]:
    """(number, title) of the chapters the module docstring's table lists, in its order."""
    doc = ast.get_docstring(TREE) or ""
    return [(int(m.group(1)), m.group(2).strip())
            for m in re.finditer(r"^ {4}(\d+)\. (.+?)(?:\s{2,}|$)", doc, re.MULTILINE)]


def test_eight_chapters_in_the_docstrings_order():
    banners = chapter_banners()
    assert [n for _, n, _ in banners] == list(range(1, 9))
    listed = docstring_chapters()
    assert [n for n, _ in listed] == list(range(1, 9))
    for (_, n, title), (m, short) in zip(banners, listed):
        # The table's title is the banner's title or its beginning (the table is narrow).
        assert title.startswith(short.rstrip(".")), (n, title, short)


def _import_time_loads(node: ast.AST) -> list[ast.Name]:
    """The names a top-level statement reads when the module is imported: everything but
    function bodies, lambda bodies and annotations (``from __future__ import annotations``
    keeps those unevaluated)."""
    found: list[ast.Name] = []

    def visit(n: ast.AST, local: set[str]) -> None:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in n.decorator_list:
                visit(d, local)
            for d in n.args.defaults + [d for d in n.args.kw_defaults if d is not None]:
                visit(d, local)
            local.add(n.name)
            return
        if isinstance(n, ast.ClassDef):
            for d in n.decorator_list + n.bases + [k.value for k in n.keywords]:
                visit(d, local)
            inner = set(local)
            for stmt in n.body:
                visit(stmt, inner)
            local.add(n.name)
            return
        if isinstance(n, ast.Lambda):
            for d in n.args.defaults:
                visit(d, local)
            return
        if isinstance(n, ast.AnnAssign):
            if n.value is not None:
                visit(n.value, local)
            if isinstance(n.target, ast.Name):
                local.add(n.target.id)
            return
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                if n.id not in local:
                    found.append(n)
            else:
                local.add(n.id)
            return
        for child in ast.iter_child_nodes(n):
            visit(child, local)

    visit(node, set())
    return found


def _defined(node: ast.stmt) -> set[str]:
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def import_time_violations() -> list[str]:
    """Each module-level use of a name that the module defines only further down."""
    first_definition: dict[str, int] = {}
    for node in TREE.body:
        for name in _defined(node):
            first_definition.setdefault(name, node.lineno)
    out = []
    for node in TREE.body:
        for name in _import_time_loads(node):
            line = first_definition.get(name.id)
            if line is not None and line > node.lineno and not hasattr(builtins, name.id):
                out.append(f"line {name.lineno}: {name.id} (defined at line {line})")
    return out


def test_nothing_at_module_level_uses_a_later_definition():
    """The ordering rule, narrowed to what Python needs at import time: base classes,
    decorators, default values and module constants come before their first use; a
    function body may name anything (a later chapter included)."""
    assert import_time_violations() == []


def test_the_rule_finds_a_forward_use():
    """The check itself: a module-level use before the definition is found, a use inside a
    function body is not."""
    global TREE
    saved = TREE
    try:
        TREE = ast.parse("A = B + 1\ndef f(x=C):\n    return D\nB = 1\nC = 2\nD = 3\n")
        assert import_time_violations() == ["line 1: B (defined at line 4)",
                                            "line 2: C (defined at line 5)"]
    finally:
        TREE = saved


def test_functions_are_short():
    """Every function, from its def line to its last line, docstring included, is under
    80 lines."""
    long = [f"{n.name} (line {n.lineno}): {n.end_lineno - n.lineno + 1} lines"
            for n in ast.walk(TREE) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 >= 80]
    assert long == []


@pytest.mark.parametrize("chapter", range(1, 9))
def test_the_docstring_names_each_chapters_main_names(chapter):
    """The table of chapters names, for each chapter, names that its chapter defines."""
    doc = ast.get_docstring(TREE) or ""
    banners = chapter_banners()
    start = banners[chapter - 1][0]
    end = banners[chapter][0] if chapter < 8 else len(LINES) + 1
    defined = {n.name for n in TREE.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
               and start < n.lineno < end}
    defined |= {t.id for n in TREE.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and start < n.lineno < end
                for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)
                if isinstance(t, ast.Name)}
    block = re.search(rf"^ {{4}}{chapter}\. .*?(?=^ {{4}}{chapter + 1}\. |\n\n)", doc, re.MULTILINE | re.DOTALL)
    assert block, f"chapter {chapter} is not in the module docstring's table"
    named = set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", block.group(0)))
    assert named & defined, f"the table names none of chapter {chapter}'s definitions"
    missing = {n for n in named if n in {d.name for d in TREE.body if isinstance(d, (ast.FunctionDef, ast.ClassDef))}
               and n not in defined}
    assert not missing, f"chapter {chapter}'s line names definitions of other chapters: {sorted(missing)}"
