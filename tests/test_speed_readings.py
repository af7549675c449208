"""Cheaper readings of what `check --all` derives, each against the reading it replaces.

`class_index._functions` walks statement bodies only; a libcst visitor over the whole tree finds the
same defs in the same order (tables here, and every file of a release's models/).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from eaglepatch.class_index import _functions


def _visited(module: cst.Module) -> list[cst.FunctionDef]:
    found: list[cst.FunctionDef] = []

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            found.append(node)

    module.visit(Collect())
    return found


# (code, the names of its defs in the order a visitor meets them)
FUNCTION_CASES = [
    ("def f():\n    pass\n", ["f"]),
    ("@d\ndef f(x=lambda: 1):\n    def g():\n        def h(): pass\n    return g\n", ["f", "g", "h"]),
    ("class A:\n    def m(self): ...\n    class B:\n        def n(self): ...\n    def o(self): ...\n", ["m", "n", "o"]),
    ("if a:\n    def f(): ...\nelif b:\n    def g(): ...\nelse:\n    def h(): ...\ndef i(): ...\n", ["f", "g", "h", "i"]),
    (
        "try:\n    def f(): ...\nexcept E:\n    def g(): ...\nexcept F:\n    def h(): ...\nelse:\n    def i(): ...\nfinally:\n    def j(): ...\n",
        ["f", "g", "h", "i", "j"],
    ),
    ("for x in y:\n    def f(): ...\nelse:\n    def g(): ...\nwhile c:\n    def h(): ...\nelse:\n    def i(): ...\n", ["f", "g", "h", "i"]),
    ("with a as b, c:\n    async def f(): ...\n", ["f"]),
    ("match x:\n    case 1:\n        def f(): ...\n    case _:\n        def g(): ...\n", ["f", "g"]),
    ("try:\n    pass\nexcept* E:\n    def f(): ...\n", ["f"]),
    ("x = 1; y = lambda: 2\nif a: b = 1\nclass A: pass\n", []),
    ("def f(): return 1\nclass A:\n    if c: x = 1\n    def g(self): return (lambda: 0)\n", ["f", "g"]),
]


@pytest.mark.parametrize("code, names", FUNCTION_CASES)
def test_functions_are_the_defs_a_visitor_meets_in_its_order(code, names):
    module = cst.parse_module(code)
    got = _functions(module)
    assert [f.name.value for f in got] == names
    assert [id(f) for f in got] == [id(f) for f in _visited(module)]


def test_functions_of_every_file_of_a_release_are_the_visitor_s(sglang_059: Path):
    """Every file of the oldest release's models/ (where the defs whose signatures are copied are), parsed
    whole: the same def nodes, in the same order."""
    compared = 0
    for path in sorted((sglang_059 / "sglang" / "srt" / "models").rglob("*.py")):
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue
        assert [id(f) for f in _functions(module)] == [id(f) for f in _visited(module)], path
        compared += 1
    assert compared > 100
