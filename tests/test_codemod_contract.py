"""codemods/contract.py: `run_command` must give what LibCST's own `CodemodCommand.transform_module`
gives (the command, then the import transforms it scheduled), only without the copies and the
whole-file walks.  Every case runs both and compares the code; the first cases also spell out the
expected text, so a change in LibCST itself shows as a table failure, not only as a difference."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand

from eaglepatch.codemods import contract
from eaglepatch.codemods.contract import TopLevelImports, leading_statements, run_command

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class ScheduleImports(VisitorBasedCodemodCommand):
    """Adds `pass` to no class; schedules imports, as AddDelegations does for a copied signature."""

    def __init__(self, context: CodemodContext, imports: list[tuple[str, str | None]], remove: list[tuple[str, str | None]] = ()):
        super().__init__(context)
        self.imports, self.remove = imports, list(remove)

    def visit_Module(self, node: cst.Module) -> None:
        for module, obj in self.imports:
            self.add_needed_import(module, obj)
        for module, obj in self.remove:
            self.remove_unused_import(module, obj)


def both(text: str, imports, remove=(), package: str | None = None) -> tuple[str, str]:
    """(LibCST's transform_module, run_command) on `text`."""
    stock = ScheduleImports(CodemodContext(full_package_name=package), imports, remove).transform_module(cst.parse_module(text))
    ours = run_command(ScheduleImports(CodemodContext(full_package_name=package), imports, remove), cst.parse_module(text))
    return stock.code, ours.code


TABLE = [
    (  # merged into the leading `from typing import ...`
        "from typing import Optional\n\nimport torch\n\n\nclass A:\n    x: Optional[int] = None\n",
        [("typing", "Any")],
        "from typing import Any, Optional\n\nimport torch\n\n\nclass A:\n    x: Optional[int] = None\n",
    ),
    (  # a new line at the end of the leading block, after a docstring
        '"""Doc."""\nimport os\n\nX = 1\n',
        [("typing", "Iterable")],
        '"""Doc."""\nimport os\nfrom typing import Iterable\n\nX = 1\n',
    ),
    (  # the same module imported inside a class and a function: only the top block counts
        "import os\n\n\nclass A:\n    from typing import Any\n\n    def f(self):\n        from typing import List\n",
        [("typing", "Any")],
        "import os\nfrom typing import Any\n\n\nclass A:\n    from typing import Any\n\n    def f(self):\n        from typing import List\n",
    ),
    (  # already imported at the top: nothing changes
        "from typing import Any\n\n\ndef f(x: Any) -> None:\n    pass\n",
        [("typing", "Any")],
        "from typing import Any\n\n\ndef f(x: Any) -> None:\n    pass\n",
    ),
]


@pytest.mark.parametrize(("before", "imports", "expected"), TABLE)
def test_scheduled_imports_table(before, imports, expected):
    stock, ours = both(before, imports)
    assert ours == expected
    assert stock == expected


CASES = [
    ("", [("typing", "Any")]),
    ("x = 1\n", [("typing", "Any"), ("os", None)]),
    ("from __future__ import annotations\n\nclass A:\n    pass\n", [("typing", "Any")]),
    ("import os\nif os.name:\n    from typing import Any\nelse:\n    Any = object\n", [("typing", "Any")]),
    ("try:\n    import torch\nexcept ImportError:\n    torch = None\nfrom typing import List\n", [("typing", "Any")]),
    ("from .layers import Linear\nfrom ..utils import helper\n", [("sglang.srt.layers", "Norm")]),
    ("from typing import (\n    List,\n    Optional,\n)\nimport torch\n", [("typing", "Any"), ("torch", None)]),
    ("'''doc'''\n\n# comment\nfrom typing import *\n", [("typing", "Any")]),
    ("import os\nprint(os)\nfrom typing import Any\n", [("typing", "Any")]),
]


@pytest.mark.parametrize(("before", "imports"), CASES)
def test_run_command_gives_what_transform_module_gives(before, imports):
    stock, ours = both(before, imports, package="sglang.srt.models.m")
    assert ours == stock


def test_removal_scheduled_through_the_context_still_runs():
    text = "import os\nfrom typing import Any, List\n\nx: List[int] = []\n"
    stock, ours = both(text, [], remove=[("typing", "Any"), ("os", None)])
    assert ours == stock == "from typing import List\n\nx: List[int] = []\n"


def test_every_bundled_fixture_file_gives_the_same_code():
    files = sorted(FIXTURES.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        text = path.read_text(encoding="utf-8")
        stock, ours = both(text, [("typing", "Any"), ("typing", "Sequence"), ("collections", "OrderedDict")], package="sglang.srt.models.m")
        assert ours == stock, path


def test_leading_statements_stop_at_the_first_statement_that_is_not_an_import():
    module = cst.parse_module('"""doc"""\nimport os\nfrom a import b\nX = 1\nimport sys\n')
    assert [s.body[0].__class__.__name__ for s in leading_statements(module)] == ["Expr", "Import", "ImportFrom"]
    assert leading_statements(cst.parse_module("")) == []


def test_the_pruned_walk_does_not_enter_classes_or_functions():
    entered: list[str] = []

    class Spy(TopLevelImports):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            entered.append(node.name.value)

        def visit_Name(self, node: cst.Name) -> None:
            entered.append(node.value)

    context = CodemodContext()
    TopLevelImports.add_needed_import(context, "typing", "Any")
    Spy(context).transform_module_impl(cst.parse_module("import os\n\n\nclass A:\n    def f(self):\n        inner = 1\n"))
    assert not {"f", "self", "inner"} & set(entered), entered


# --------------------------------------------------------------------------- VisitorCommand

class RenameX(contract.VisitorCommand):
    """VisitorCommand: libcst's public classes, no matcher layer."""

    def __init__(self, context: CodemodContext, to: str):
        super().__init__(context)
        self.to = to

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.to) if updated.value == "x" else updated


class StockRenameX(VisitorBasedCodemodCommand):
    """The same codemod as libcst writes it."""

    def __init__(self, context: CodemodContext, to: str):
        super().__init__(context)
        self.to = to

    leave_Name = RenameX.leave_Name


class RenameXByMatcher(VisitorBasedCodemodCommand):
    """A matcher decorator: libcst's own class, for comparison."""

    def __init__(self, context: CodemodContext, to: str):
        super().__init__(context)
        self.to = to

    @m.leave(m.Name("x"))
    def rename(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.to)


@pytest.mark.parametrize("command", [RenameX, StockRenameX, RenameXByMatcher])
def test_visitor_command_transforms_as_libcsts_own(command):
    source = "x = 1\ny = x + 2\n"
    codes = [command(CodemodContext(), to).transform_module(cst.parse_module(source)).code for to in ("a", "b", "c")]
    assert codes == ["a = 1\ny = a + 2\n", "b = 1\ny = b + 2\n", "c = 1\ny = c + 2\n"]


def test_visitor_command_schedules_imports_as_libcsts_own():
    """add_needed_import / remove_unused_import (CodemodCommand's) reach run_command's passes."""

    class Schedule(contract.VisitorCommand):
        def visit_Module(self, node: cst.Module) -> None:
            self.add_needed_import("typing", "Any")
            self.remove_unused_import("os")

    text = "import os\n\n\nclass A:\n    pass\n"
    stock = ScheduleImports(CodemodContext(), [("typing", "Any")], [("os", None)]).transform_module(cst.parse_module(text))
    assert run_command(Schedule(CodemodContext()), cst.parse_module(text)).code == stock.code


MATCHER_DECORATORS = {"visit", "leave", "call_if_inside", "call_if_not_inside"}


def test_no_visitor_command_of_codemods_carries_a_matcher_decorator():
    """VisitorCommand skips libcst's matcher layer: on one of its subclasses a `@m.leave(...)` would
    silently do nothing.  Any decorator of a method there that names a matcher decorator fails."""
    import ast

    codemods = Path(contract.__file__).resolve().parent
    found = []
    for path in sorted(codemods.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for decorator in item.decorator_list:
                        target = decorator.func if isinstance(decorator, ast.Call) else decorator
                        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                        if name in MATCHER_DECORATORS:
                            found.append(f"{path.name}:{item.lineno} {node.name}.{item.name}")
    assert not found, found
