"""Expressions read by CPython's parser that remember the text they were read from.

The analysis stages follow what a name or a call stands for (the wrapper finder, the bindings of a
scope) and quote the code they could not follow in the report.  CPython's `ast` reads those
expressions exactly and costs a fraction of libcst, whose import alone is a third of a one-model
`check`; libcst is kept for what is written.  A report quotes code as written, so every node read
here carries its text (`_source`), and `source_code` cuts a node's code out of it, parentheses
included as libcst's code generator would give them: a node owns the grouping parentheses around it.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from collections.abc import Sequence

from .statements import walk

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NOT_PLAIN_NAMES = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
# a node's text: set on every node of a tree read here (ast nodes take attributes)
_SOURCE = "_source"
_COMMENT = re.compile(r"""\"\"\"|'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|\#.*""")


def remember(tree: ast.AST, text: str) -> ast.AST:
    """Tag every node of `tree` with the text it was parsed from (once: a tree already tagged is kept)."""
    if getattr(tree, _SOURCE, None) is None:
        for node in walk(tree):
            node._source = text  # type: ignore[attr-defined]
    return tree


@functools.lru_cache(maxsize=4096)
def parse_value(text: str) -> ast.expr | None:
    """An expression parsed on its own (one parse serves every class that builds `ParallelLMHead(`...;
    nothing here changes a node).  A dotted name spelled without spaces (most callees: `LlamaModel`,
    `nn.Linear`) is built without the parser.  A value over several lines is read in parentheses, as
    the statement holding it does."""
    if _DOTTED.fullmatch(text):
        parts = text.split(".")
        if not _NOT_PLAIN_NAMES.intersection(parts):
            return dotted_node(parts)
    wrapped = text if "\n" not in text else f"({text})"
    try:
        tree = ast.parse(wrapped, mode="eval")
    except (SyntaxError, ValueError):
        return None
    remember(tree, wrapped)
    return tree.body


def parse_statement(text: str) -> ast.stmt | None:
    """The first statement of `text`, tagged with it; None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    if not tree.body:
        return None
    remember(tree, text)
    return tree.body[0]


def dotted_node(parts: list[str]) -> ast.expr:
    """`a.b.c` as CPython's parser reads it (positions left out: its code is its names)."""
    node: ast.expr = ast.Name(id=parts[0], ctx=ast.Load())
    for part in parts[1:]:
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def dotted_parts(node: ast.AST | None, named_constants: bool = False) -> list[str] | None:
    """[`a`, `b`, `c`] for `a.b.c`; None when the chain does not start at a name (with `named_constants`,
    `None`, `True` and `False` start one too, as they do to libcst)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif named_constants and isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, bool)):
        parts.append(repr(node.value))
    else:
        return None
    return parts[::-1]


def dotted_name(node: ast.AST | None) -> str:
    """`a.b.c` for a Name/Attribute chain; "" for anything else.  `None`, `True` and `False` count as
    names, as they do to libcst (codemods.names.cst_dotted_name)."""
    return ".".join(dotted_parts(node, named_constants=True) or [])


def constant_as_name(constant: ast.Constant) -> ast.Name:
    """`True`, `False`, `None` as the name libcst reads them as, at the same place of the same text."""
    name = ast.copy_location(ast.Name(id=repr(constant.value), ctx=ast.Load()), constant)
    text = getattr(constant, _SOURCE, None)
    if text is not None:
        name._source = text  # type: ignore[attr-defined]
    return name


def root_name(expr: ast.AST) -> ast.Name | None:
    """`a` of `a.b.c`: the name an attribute chain starts from (None for `f().b`)."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr if isinstance(expr, ast.Name) else None


def on_self(node: ast.AST) -> bool:
    """`self.x`, `self.x.y`: an expression reached through `self`."""
    while isinstance(node, ast.Attribute):
        node = node.value
        if isinstance(node, ast.Name) and node.id == "self":
            return True
    return False


def source_code(node: ast.AST) -> str:
    """The node's code as written, with the grouping parentheses around it (libcst's code for it); a
    node built here, with no text, is spelled by `ast.unparse`."""
    text = getattr(node, _SOURCE, None)
    line, column = getattr(node, "lineno", None), getattr(node, "col_offset", None)
    end_line, end_column = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if text is None or line is None or column is None or end_line is None or end_column is None:
        return ast.unparse(node)
    start, end = _offset(text, line, column), _offset(text, end_line, end_column)
    if isinstance(node, ast.GeneratorExp) and text[start] == "(" and not _groups(text, start):
        # `f(x for x in y)`: CPython places the generator on the call's parentheses, libcst inside them
        start, end = _skip_space(text, start + 1), _skip_space_back(text, end - 1)
    while True:
        before, after = _skip_space_back(text, start), _skip_space(text, end)
        if before == 0 or text[before - 1] != "(" or after >= len(text) or text[after] != ")":
            break
        if not _groups(text, before - 1):
            break
        start, end = before - 1, after + 1
    return text[start:end]


def code_of_line(line: str) -> str:
    """The line without its comment (a `#` inside a string is not one)."""
    if "#" not in line:  # most lines: no comment to find
        return line
    for match in _COMMENT.finditer(line):
        if match.group().startswith("#"):
            return line[: match.start()]
    return line


def one_line(lines: Sequence[str]) -> str:
    """A multi-line statement as one line of code, for reports: `self.model = (\\n Foo(\\n x,\\n)\\n)`
    reads `self.model = (Foo(x))`."""
    text = " ".join(code_of_line(line).strip().rstrip("\\").strip() for line in lines)
    text = re.sub(r"([(\[{])\s+", r"\1", text)
    text = re.sub(r",?\s+([)\]}])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def capture_flag_read(node: ast.AST) -> str | None:
    """The per-layer flag `getattr(layer, "_is_layer_to_capture", False)` reads (a name holding "capture"):
    how a backbone that marks its chosen layers itself tells them apart (Qwen3.5's, MiniMax-M3's)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) > 1:
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and "capture" in name.value:
            return name.value
    return None


def code_of(node: ast.AST) -> str:
    """A node's code on one line, as the report quotes it: `self.model = (\\n Foo(\\n x,\\n)\\n)`
    reads `self.model = (Foo(x))`."""
    return one_line(source_code(node).split("\n"))


def _offset(text: str, line: int, column: int) -> int:
    """The index in `text` of a position CPython gives: a 1-based line and a UTF-8 byte column."""
    at = 0
    for _ in range(line - 1):
        at = text.index("\n", at) + 1
    end = text.find("\n", at)
    row = text[at : len(text) if end < 0 else end]
    return at + len(row.encode("utf-8")[:column].decode("utf-8", errors="ignore"))


def _skip_space_back(text: str, index: int) -> int:
    """Back over whitespace, line continuations and comments (a comment ends the line before a newline)."""
    while index > 0:
        if text[index - 1] in " \t\\":
            index -= 1
        elif text[index - 1] == "\n":
            line_start = text.rfind("\n", 0, index - 1) + 1
            index = line_start + len(code_of_line(text[line_start : index - 1]))
        else:
            break
    return index


def _skip_space(text: str, index: int) -> int:
    """On over whitespace, line continuations and comments."""
    while index < len(text):
        if text[index] in " \t\n\\":
            index += 1
        elif text[index] == "#":
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
        else:
            break
    return index


def _groups(text: str, paren: int) -> bool:
    """The `(` at `paren` groups (rather than opening a call's arguments, a def's parameters or a class's
    bases): what comes before it cannot be called."""
    before = _skip_space_back(text, paren)
    if before == 0:
        return True
    last = text[before - 1]
    if last in ")]\"'":
        return False
    if last.isalnum() or last == "_" or ord(last) > 127:
        start = before
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_" or ord(text[start - 1]) > 127):
            start -= 1
        word = text[start:before]
        return keyword.iskeyword(word) and word not in ("None", "True", "False")
    return True
