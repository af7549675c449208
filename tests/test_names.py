"""One name, one meaning: no two different module-level functions of the package share a name
(issue 25: two `dotted_name`, two `one_line`), and module docstrings label their stage by the folder
they are in (read, analyze, rewrite, output), not by a number.  A function copied into a second
module unchanged (the same code, as `ast` reads it) is the same function."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted([*(REPO_ROOT / "patcher").rglob("*.py"), *(REPO_ROOT / "codemods").glob("*.py")])


def _body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return ast.dump(ast.Module(body=[*body], type_ignores=[])) + ast.dump(function.args)


def test_no_two_different_functions_share_a_name():
    bodies: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in MODULES:
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if any(isinstance(d, ast.Name) and d.id == "overload" for d in node.decorator_list):
                continue
            bodies[node.name][_body(node)].append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    shared = {name: sorted(where for places in variants.values() for where in places) for name, variants in bodies.items() if len(variants) > 1}
    assert not shared, shared


def test_stage_labels_name_the_folder():
    numbered = []
    for path in [*MODULES, *sorted((REPO_ROOT / "tests").glob("test_*.py"))]:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if re.search(r"\bstages? \d", doc, re.IGNORECASE):
            numbered.append(str(path.relative_to(REPO_ROOT)))
    assert not numbered, numbered
