"""read/expressions.py and the readings built on it (bindings, the wrapper finder): what `check` follows
is read by CPython's parser, and libcst is the oracle for what the report quotes.

A quoted expression must be the code libcst's generator gave for the same node (the report's words did
not change when the reading moved to `ast`); statements come in the order libcst's walk gave them (the
order classes and dead ends are reported in).  Tables here, and every `__init__` assignment, every
`return` and every def of a real release (integration tier).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from eaglepatch.read.bindings import assigned_value, statements
from eaglepatch.read.expressions import (
    code_of,
    constant_as_name,
    dotted_name,
    on_self,
    one_line,
    parse_value,
    remember,
    root_name,
    source_code,
)

REPO = Path(__file__).resolve().parent.parent
_CODE = cst.Module(body=[]).code_for_node


def _paired(node: ast.AST, twin: cst.CSTNode):
    """(ast node, its libcst twin) for the node and the parts the analysis follows and quotes."""
    yield node, twin
    if isinstance(node, ast.IfExp) and isinstance(twin, cst.IfExp):
        for a, c in ((node.body, twin.body), (node.test, twin.test), (node.orelse, twin.orelse)):
            yield from _paired(a, c)
    elif isinstance(node, ast.Call) and isinstance(twin, cst.Call):
        yield from _paired(node.func, twin.func)
        positional = [a for a in twin.args if a.keyword is None and not a.star]
        if len(positional) == len([a for a in node.args if not isinstance(a, ast.Starred)]) == len(node.args):
            for a, c in zip(node.args, positional):
                yield from _paired(a, c.value)
        named = {a.keyword.value: a.value for a in twin.args if a.keyword is not None}
        for keyword in node.keywords:
            if keyword.arg in named:
                yield from _paired(keyword.value, named[keyword.arg])
    elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(twin, (cst.Attribute, cst.Subscript)):
        yield from _paired(node.value, twin.value)
    elif isinstance(node, ast.BinOp) and isinstance(twin, cst.BinaryOperation):
        yield from _paired(node.left, twin.left)
        yield from _paired(node.right, twin.right)
    elif isinstance(node, (ast.Tuple, ast.List)) and isinstance(twin, (cst.Tuple, cst.List)) and len(node.elts) == len(twin.elements):
        for a, c in zip(node.elts, twin.elements):
            if not isinstance(a, ast.Starred):
                yield from _paired(a, c.value)


def _libcst_value(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text if "\n" not in text else f"({text})")


# --------------------------------------------------------------------------- parse_value
VALUES = [
    "a", "LlamaModel", "nn.Linear", "torch.nn.Module", "_x1.y_.__z__", "print", "self.model",
    "None", "True", "x.None", "match", "a.match", "type", "_", "lambda", "a.if", "a..b", "a.", ".a", "a b", "a .b",
    "Foo(config)", "A if c else B", "\u00e9", "a.\u00e9", "1a", "a1", "", "Foo(\n    config,\n)",
]


@pytest.mark.parametrize("text", VALUES)
def test_a_value_is_what_cpython_parses(text):
    """The dotted names built without the parser are the parser's nodes; a value over several lines is
    read in parentheses, as in the statement it comes from."""
    try:
        expected = ast.parse(text if "\n" not in text else f"({text})", mode="eval").body
    except SyntaxError:
        expected = None
    got = parse_value(text)
    assert (got is None) == (expected is None)
    if got is not None:
        assert ast.dump(got) == ast.dump(expected)


# --------------------------------------------------------------------------- quoting code as libcst did
QUOTED = [
    "Foo",
    "a.b.c",
    "a . b",
    "(Foo)",
    "((Foo))",
    "( Foo )",
    "(a).b",
    "Foo(config)",
    "Foo((config), x=(y))",
    "Foo(\n    config.text_config,\n    quant_config=quant_config,\n)",
    "A(c) if use_a else B(c)",
    "(A if use_a else B)(config)",
    "REGISTRY[arch](config)",
    "REGISTRY.get(arch, (Default))",
    "f()(x)",
    "f(x)[0]",
    "'s'.join(x)",
    "(a, b)",
    "a, b",
    "[a, (b)]",
    "x + (y)",
    "not (x)",
    "lambda: (x)",
    "Foo[int](x)",
    "getattr(self, 'model')",
    "(\n    A\n    if c\n    else B\n)",
    "\u00e9l\u00e8ve.mod\u00e8le(x)",
    "sum(1 for t in types if t == 0)",
    "sum((1 for t in types), 0)",
    "(x for x in y)",
    "(\n    value  # a comment inside\n)",
    "f(\n    # a comment before\n    (x),\n)",
]


@pytest.mark.parametrize("text", QUOTED)
def test_the_code_quoted_is_libcst_s(text):
    """source_code is libcst's code for the same node, parentheses that group it included; code_of is
    that on one line."""
    node = parse_value(text)
    assert node is not None
    pairs = list(_paired(node, _libcst_value(text)))
    for a, c in pairs:
        assert source_code(a) == _CODE(c), (text, ast.dump(a))
        assert code_of(a) == one_line(_CODE(c).split("\n"))


@pytest.mark.parametrize("text", ["True", "(False)", "f(None)"])
def test_a_keyword_constant_read_as_a_name_keeps_its_place_and_code(text):
    node = parse_value(text)
    constant = next(n for n in ast.walk(node) if isinstance(n, ast.Constant))
    name = constant_as_name(constant)
    assert isinstance(name, ast.Name) and name.id == repr(constant.value)
    assert (name.lineno, name.col_offset, name.end_col_offset) == (constant.lineno, constant.col_offset, constant.end_col_offset)
    assert source_code(name) == source_code(constant)


def test_a_node_built_without_text_is_spelled_by_unparse():
    call = ast.Call(func=parse_value("Foo.bar"), args=[], keywords=[])
    assert source_code(call) == "Foo.bar()" == _CODE(cst.Call(func=cst.parse_expression("Foo.bar")))


@pytest.mark.parametrize(
    "text, dotted, root, through_self",
    [
        ("a.b.c", "a.b.c", "a", False),
        ("None", "None", None, False),
        ("True", "True", None, False),
        ("1", "", None, False),
        ("f().b", "", None, False),
        ("self.model.layers", "self.model.layers", "self", True),
        ("self", "self", "self", False),
    ],
)
def test_dotted_names_roots_and_self(text, dotted, root, through_self):
    """libcst reads `None`/`True` as names; so does dotted_name, as codemods.names.cst_dotted_name does on
    libcst's nodes.  A chain that does not start at a name is no dotted name (that helper gives `.b` for
    `f().b`, a suffix no import or class is named by)."""
    from eaglepatch.codemods.names import cst_dotted_name as libcst_dotted_name

    node = parse_value(text)
    assert dotted_name(node) == dotted
    if not text.startswith("f()"):
        assert dotted == libcst_dotted_name(cst.parse_expression(text))
    found = root_name(node)
    assert (found.id if found is not None else None) == root
    assert on_self(node) is through_self


# --------------------------------------------------------------------------- statements in libcst's order
def _libcst_small_statements(function: cst.FunctionDef):
    """The walk the wrapper finder made on libcst's tree (the reference for `statements`)."""
    pending: list[cst.CSTNode] = [function.body]
    while pending:
        block = pending.pop()
        if isinstance(block, cst.SimpleStatementLine):
            yield from block.body
        elif isinstance(block, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            pending.extend(reversed(block.body))
        elif isinstance(block, cst.BaseSmallStatement):
            yield block
        else:
            for part in ("body", "orelse", "handlers", "finalbody", "cases"):
                child = getattr(block, part, None)
                if isinstance(child, (list, tuple)):
                    pending.extend(reversed(child))
                elif child is not None:
                    pending.append(child)


_SMALL = {ast.Assign: cst.Assign, ast.AnnAssign: cst.AnnAssign, ast.Return: cst.Return, ast.Expr: cst.Expr, ast.Raise: cst.Raise,
          ast.Pass: cst.Pass, ast.AugAssign: cst.AugAssign}


def _value_code(statement, code) -> str:
    value = getattr(statement, "value", None)
    return code(value) if value is not None else ""


def _small_order(code: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(kind, code) of the simple statements of the first def, as `statements` gives them and as libcst's walk did."""
    function = ast.parse(code).body[0]
    assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
    remember(function, code)
    twin = cst.parse_module(code).body[0]
    assert isinstance(twin, cst.FunctionDef)
    ours = [(type(s).__name__, _value_code(s, source_code)) for s in statements(function) if type(s) in _SMALL]
    theirs = [(next(a.__name__ for a, c in _SMALL.items() if isinstance(s, c)), _value_code(s, _CODE))
              for s in _libcst_small_statements(twin) if isinstance(s, tuple(_SMALL.values()))]
    return ours, theirs


FUNCTIONS = [
    "def f(self):\n    a = 1\n    return a\n",
    "def f(self):\n    if c:\n        m = A()\n    else:\n        m = B()\n    return m\n",
    "def f(self):\n    if c:\n        m = A()\n    elif d:\n        m = B()\n    else:\n        return C()\n    return m\n",
    "def f(self):\n    try:\n        m = A()\n    except E:\n        m = B()\n    except F:\n        raise\n    else:\n        m = C()\n    finally:\n        pass\n    return m\n",
    "def f(self):\n    for x in y:\n        m = A(x)\n    else:\n        m = B()\n    while t:\n        n = C()\n    return m\n",
    "def f(self):\n    with ctx() as c:\n        m: Model = A(c)\n    def inner():\n        return Hidden()\n    class K:\n        z = 1\n    return m\n",
    "def f(self):\n    match kind:\n        case 'a':\n            m = A()\n        case _:\n            m = B()\n    return m\n",
    "def f(self):\n    a = 1; b = 2; return a\n",
    "async def f(self):\n    async with c:\n        m = A()\n    return m\n",
]


@pytest.mark.parametrize("code", FUNCTIONS)
def test_statements_come_in_libcst_s_order(code):
    ours, theirs = _small_order(code)
    assert ours == theirs


# --------------------------------------------------------------------------- check does not load libcst
_PROBE = (
    "import importlib.abc, sys, traceback\n"
    "class FirstImport(importlib.abc.MetaPathFinder):\n"
    "    by = None\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name == 'libcst' and FirstImport.by is None:\n"
    "            ours = [f for f in traceback.extract_stack() if '/patcher/' in f.filename]\n"
    "            FirstImport.by = f'{ours[-1].filename.rsplit(\"/patcher/\", 1)[1]}:{ours[-1].name}' if ours else '?'\n"
    "        return None\n"
    "sys.meta_path.insert(0, FirstImport())\n"
    "from eaglepatch.cli import cli_main\n"
    "try:\n"
    "    code = cli_main(sys.argv[1:])\n"
    "except SystemExit as exit:\n"
    "    code = exit.code\n"
    "print(code, 'libcst._nodes' in sys.modules, FirstImport.by)\n"
)


def _libcst_imported_by(*args: str, home: Path) -> tuple[int, bool, str]:
    """The exit code, whether libcst was loaded, and the function of ours that first imported it."""
    env = {"EAGLEPATCH_NO_CACHE": "1", "PATH": "/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    code, loaded, by = done.stdout.split("\n")[-2].split()
    return int(code), loaded == "True", by


def test_a_one_model_check_does_not_import_libcst(tmp_path):
    """libcst's import is a third of a one-model `check`; it is imported where code is parsed with it
    (a body laid out anew, diff, apply), and a check of a wrapper that forwards needs none."""
    fixture = str(REPO / "fixtures" / "checkout")
    assert _libcst_imported_by("check", "--model", "kimi_k25", fixture, home=tmp_path) == (1, False, "None")  # findings
    assert _libcst_imported_by("diff", "--model", "kimi_k25", fixture, home=tmp_path)[1]  # the patch is written with it


def test_check_all_of_a_release_imports_no_libcst(sglang_059: Path, tmp_path):
    """Every class of 0.5.9 resolved, planned, its hooks learned and its plumbing plans proven without
    libcst: the plans are proven in `ast`, the codemod runs where files are written (0.5.9 has classes
    that need plumbing, so a proof that still wrote with libcst would load it)."""
    code, loaded, by = _libcst_imported_by("check", "--all", str(sglang_059), home=tmp_path)
    assert (code, loaded, by) == (1, False, "None")


# --------------------------------------------------------------------------- a real release
def test_every_value_and_return_of_a_release_is_quoted_as_libcst_did(sglang_059: Path):
    """Every `self.X = value` and local assignment of every `__init__` and every `return` of every def
    under models/ in 0.5.9: the code quoted for the value and for the parts the wrapper finder follows is
    libcst's; and every def's simple statements come in libcst's order."""
    from eaglepatch.analyze.class_index import function_read
    from eaglepatch.read.source_cache import SourceCache
    from eaglepatch.read.text import block_text

    models = sglang_059 / "sglang" / "srt" / "models"
    cache = SourceCache(sglang_059 / "sglang" / "srt")
    values = functions = 0
    for path in sorted(models.rglob("*.py")):
        source = cache.read(path)
        try:
            tree = ast.parse(source.text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            header = node.lineno - 1
            text = block_text(source.lines[slice(*cache.block_span(source, header))])
            try:
                twin = cst.parse_module(text).body[-1]
            except cst.ParserSyntaxError:
                continue
            if not isinstance(twin, cst.FunctionDef):
                continue
            function = function_read(cache, source, header)
            assert function is not None, f"{path.name}:{node.lineno}"
            ours = [s for s in statements(function) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.Return))]
            theirs = [s for s in _libcst_small_statements(twin) if isinstance(s, (cst.Assign, cst.AnnAssign, cst.Return))]
            assert [type(s).__name__ for s in ours] == [type(s).__name__ for s in theirs], f"{path.name}:{node.lineno}"
            for a, c in zip(ours, theirs):
                if a.value is not None and c.value is not None:
                    for x, y in _paired(a.value, c.value):
                        assert code_of(x) == one_line(_CODE(y).split("\n")), f"{path.name}:{node.lineno}"
                        values += 1
            functions += 1
            if node.name != "__init__":
                continue
            lines = source.lines
            for index in range(node.lineno, node.end_lineno or node.lineno):
                stripped = lines[index].lstrip()
                target = stripped.split("=", 1)[0].split(":", 1)[0].strip() if "=" in stripped else ""
                if not target or not target.replace(".", "").replace("_", "").isalnum():
                    continue
                value = assigned_value(lines, index, target)
                parsed = parse_value(value) if value else None
                if parsed is None:
                    continue
                for x, y in _paired(parsed, _libcst_value(value)):
                    assert code_of(x) == one_line(_CODE(y).split("\n")), f"{path.name}:{index + 1}: {value!r}"
                    values += 1
    assert functions > 2500 and values > 10000, (functions, values)
