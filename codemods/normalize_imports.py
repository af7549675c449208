"""Give names that AddImportsVisitor merged into a multi-line import the layout of their neighbours.

AddImportsVisitor puts a new name into an existing `from m import (\\n    a,\\n    b,\\n)` as
`X, a,` on one line; black would move it to a line of its own.  Copying a neighbour's comma
layout keeps the file stable under black.  Only the names this run added are touched.

The target tree's settings (patcher/read/style.py) come in as plain values: the width at which an import
wraps (the narrower of black's and isort's), isort's `force_sort_within_sections` (where a new
standard-library `from` line goes) and `order_by_type` (the order of names within one import).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import TypeAlias

import libcst as cst

from .names import LINE_LENGTH, cst_dotted_name

Statement: TypeAlias = "cst.SimpleStatementLine | cst.BaseCompoundStatement"  # a line of Module.body


class NormalizeAddedImports(cst.CSTTransformer):
    def __init__(
        self,
        added: dict[str, set[str]],
        before: cst.Module | None = None,
        line_length: int = LINE_LENGTH,
        force_sort_within_sections: bool = False,
        order_by_type: bool = True,
    ):
        super().__init__()
        self.added = added  # module -> names this run imports from it
        self.present = imported_from(before) if before is not None else {}  # what the file imported already
        self.line_length = line_length  # an import longer than this wraps, one name per line
        self.force_sort = force_sort_within_sections
        self.order_by_type = order_by_type

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False  # imports that AddImportsVisitor touches are at module level

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        """A `from <stdlib module> import ...` line this run added goes into the file's standard-library
        block, in isort's order, rather than after the last import (where isort would move it from); a
        `from <package> import ...` line, into the block of imports from the same top-level package, when
        the file has one (one paragraph, in isort's order: one isort section)."""
        body = list(updated_node.body)
        unplaced = {id(s) for s in body if _new_from_import(s, self.added, self.present) is not None}
        for statement in [s for s in body if id(s) in unplaced]:
            module = _new_from_import(statement, self.added, self.present)
            assert module is not None, "listed above"
            unplaced.discard(id(statement))
            index = next(i for i, s in enumerate(body) if s is statement)
            rest = body[:index] + body[index + 1 :]
            if not _is_stdlib(module):
                # the other new lines, still where AddImportsVisitor put them, are not the paragraph's order
                place = _package_place(rest, statement, module, self.force_sort, self.order_by_type, unplaced)
                if place is None or place[0] == index:
                    continue
                spot, opens = place
                moved = statement.with_changes(leading_lines=[])
                if opens and _blank_before(rest[spot]):  # the paragraph's new first line: it takes the blank lines
                    moved = moved.with_changes(leading_lines=rest[spot].leading_lines)
                    rest[spot] = rest[spot].with_changes(leading_lines=[])
                rest.insert(spot, moved)
                body = rest
                continue
            at = _stdlib_place(rest, statement, self.force_sort, self.order_by_type)
            if at is None:  # no standard-library block yet: it opens one before the file's first other import
                at = next((i for i, s in enumerate(rest) if opens_imports(s)), None)
                if at is None or at == index or _new_from_import(rest[at], self.added, self.present) is not None:
                    continue
                moved = statement.with_changes(leading_lines=rest[at].leading_lines)
                rest[at] = rest[at].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
                rest.insert(at, moved)
                body = rest
                continue
            if at == index:
                continue
            moved = statement.with_changes(leading_lines=[])
            if at < len(rest) and rest[at].leading_lines and at > 0 and _stdlib_import(rest[at - 1]) is None:
                moved = moved.with_changes(leading_lines=rest[at].leading_lines)  # the block's first line keeps its blank lines
                rest[at] = rest[at].with_changes(leading_lines=[])
            rest.insert(at, moved)
            body = rest
        return updated_node.with_changes(body=body)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        module = cst_dotted_name(updated_node.module)
        wanted = self.added.get(module)
        if not wanted or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        new = wanted - self.present.get(module, set())
        laid_out = self._laid_out(updated_node, wanted)
        return _sorted_in(laid_out, new, self.order_by_type) if new else laid_out

    def _laid_out(self, updated_node: cst.ImportFrom, wanted: set[str]) -> cst.ImportFrom:
        if updated_node.lpar is None:
            return _explode_if_long(updated_node, self.line_length)
        names = _aliases(updated_node)
        layout = next(
            (
                alias.comma
                for alias in names
                if alias.name.value not in wanted
                and isinstance(alias.comma, cst.Comma)
                and isinstance(alias.comma.whitespace_after, cst.ParenthesizedWhitespace)
            ),
            None,
        )
        if layout is None:
            return updated_node  # a one-line import: AddImportsVisitor's layout is already black's
        fixed = []
        for index, alias in enumerate(names):
            if cst_dotted_name(alias.name) in wanted and not (
                isinstance(alias.comma, cst.Comma) and isinstance(alias.comma.whitespace_after, cst.ParenthesizedWhitespace)
            ):
                if index == len(names) - 1:
                    alias = alias.with_changes(comma=layout.with_changes(whitespace_after=_closing(updated_node)))
                else:
                    alias = alias.with_changes(comma=layout)
            fixed.append(alias)
        return updated_node.with_changes(names=fixed)


def isort_key(name: str, order_by_type: bool = True) -> tuple[int, str]:
    """isort's order of names in a `from` import (order_by_type: CONSTANTS, Classes, the rest; not case sensitive)."""
    if not order_by_type:
        group = 0
    elif name.isupper() and len(name) > 1:
        group = 0  # CONSTANT
    elif name[:1].isupper():
        group = 1  # Class
    else:
        group = 2  # function or module
    return group, name.lower()


def _sorted_in(node: cst.ImportFrom, wanted: set[str], order_by_type: bool = True) -> cst.ImportFrom:
    """The added names moved to their isort place; each position keeps its comma."""
    names = _aliases(node)
    if not isinstance(node.names, (list, tuple)) or len(names) < 2:
        return node
    added = [a for a in names if cst_dotted_name(a.name) in wanted]
    kept = [a for a in names if cst_dotted_name(a.name) not in wanted]
    keys = [isort_key(_alias_name(a), order_by_type) for a in kept]
    if keys != sorted(keys):
        return node  # the file keeps its own order: isort would rewrite it anyway
    ordered = list(kept)
    for alias in sorted(added, key=lambda a: isort_key(_alias_name(a), order_by_type)):
        key = isort_key(_alias_name(alias), order_by_type)
        at = next((i for i, other in enumerate(ordered) if isort_key(_alias_name(other), order_by_type) > key), len(ordered))
        ordered.insert(at, alias)
    if ordered == names:
        return node
    commas = [a.comma for a in names]
    return node.with_changes(names=[a.with_changes(comma=c) for a, c in zip(ordered, commas)])


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in getattr(sys, "stdlib_module_names", ()) and module.split(".")[0] != "__future__"


def _new_from_import(statement: Statement, added: dict[str, set[str]], present: dict[str, set[str]]) -> str | None:
    """The module of a top-level `from m import ...` line whose every name this run added."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.ImportFrom) or small.module is None or small.relative or isinstance(small.names, cst.ImportStar):
        return None
    module = cst_dotted_name(small.module)
    names = {cst_dotted_name(a.name) for a in small.names}
    if module in present or not names <= added.get(module, set()):
        return None
    return module


def _stdlib_import(statement: Statement, force_sort: bool = False, order_by_type: bool = True) -> tuple[int, str] | None:
    """isort's sort key of a top-level standard-library import line: (0 for `import m`, 1 for `from m
    import`; m); with force_sort_within_sections, (0, the line unwrapped without `from `/`import `),
    case-sensitive under order_by_type as isort's section_key is."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    key: tuple[int, str] | None = None
    if isinstance(small, cst.Import):
        modules = [cst_dotted_name(a.name) for a in small.names]
        if modules and all(_is_stdlib(m) for m in modules):
            key = (0, modules[0].lower()) if not force_sort else (0, ", ".join(_alias_text(a) for a in small.names))
    elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
        module = cst_dotted_name(small.module)
        if _is_stdlib(module) and not isinstance(small.names, cst.ImportStar):
            names = ", ".join(_alias_text(a) for a in small.names)
            key = (1, module.lower()) if not force_sort else (0, f"{module} import {names}")
        elif _is_stdlib(module):
            key = (1, module.lower()) if not force_sort else (0, f"{module} import *")
    if key is not None and force_sort and not order_by_type:
        key = (key[0], key[1].lower())
    return key


def _import_key(statement: Statement, force_sort: bool = False, order_by_type: bool = True) -> tuple | None:
    """isort's sort key, within one section, of a top-level absolute import line (None for anything else):
    `import m` lines before `from m import` lines, each by module name, case-insensitive, digits by value
    (isort's natural order); with force_sort_within_sections, both kinds together, as `_stdlib_import`."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Import):
        text = ", ".join(_alias_text(a) for a in small.names)
        kind, module = 0, cst_dotted_name(small.names[0].name)
    elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
        module = cst_dotted_name(small.module)
        names = "*" if isinstance(small.names, cst.ImportStar) else ", ".join(_alias_text(a) for a in small.names)
        kind, text = 1, f"{module} import {names}"
    else:
        return None
    if not force_sort:
        return (kind, *_natural(module.lower()))
    return (0, *_natural(text if order_by_type else text.lower()))


def _natural(text: str) -> tuple:
    """isort's natural order: runs of digits compare as numbers (`v2` before `v10`)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))  # str, int, str, ...: aligned


def _top_package(statement: Statement) -> str | None:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Import):
        tops = {cst_dotted_name(a.name).split(".")[0] for a in small.names}
        return tops.pop() if len(tops) == 1 else None
    if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
        return cst_dotted_name(small.module).split(".")[0]
    return None


def _blank_before(statement: Statement) -> bool:
    return any(line.comment is None for line in statement.leading_lines)


def _package_place(
    body: list[Statement], statement: Statement, module: str, force_sort: bool = False, order_by_type: bool = True, unplaced: set[int] | frozenset[int] = frozenset()
) -> tuple[int, bool] | None:
    """(where isort puts the new `from module import ...` line `statement`: among the file's imports from the
    same top-level package and the lines of their paragraph (isort separates sections by a blank line), in
    isort's order; whether it is then the paragraph's first line), or None when the file has no such
    import, has them in two paragraphs, or out of order.  Placed after the paragraph's last line, it
    leaves the blank lines after the paragraph where they are."""
    top = module.split(".")[0]
    same = [i for i, s in enumerate(body) if _top_package(s) == top]
    if not same:
        return None
    first, last = same[0], same[-1]
    while first > 0 and not _blank_before(body[first]) and _import_key(body[first - 1]) is not None:
        first -= 1
    while last + 1 < len(body) and not _blank_before(body[last + 1]) and _import_key(body[last + 1]) is not None:
        last += 1
    if any(_blank_before(body[i]) or _import_key(body[i]) is None for i in range(first + 1, last + 1)):
        return None
    placed = [i for i in range(first, last + 1) if id(body[i]) not in unplaced]  # `unplaced`: other lines this run adds
    if not placed:
        return None
    keys = [_import_key(body[i], force_sort, order_by_type) for i in placed]
    mine = _import_key(statement, force_sort, order_by_type)
    if mine is None or keys != sorted(keys):  # type: ignore[type-var]  # every key is a tuple here
        return None
    at = next((i for i, key in zip(placed, keys) if key > mine), placed[-1] + 1)  # type: ignore[operator]
    return at, at == first


def _alias_text(alias: cst.ImportAlias) -> str:
    asname = alias.asname
    return f"{cst_dotted_name(alias.name)} as {cst_dotted_name(asname.name)}" if asname is not None else cst_dotted_name(alias.name)


def _stdlib_place(body: list[Statement], statement: Statement, force_sort: bool = False, order_by_type: bool = True) -> int | None:
    """Where isort (profile black) puts the `from module import ...` line `statement` among the top-level
    standard-library imports: after every `import m` and every `from` line of a smaller module (with
    force_sort_within_sections: after every line that sorts before it); None without such a block."""
    block = [(i, key) for i, s in enumerate(body) if (key := _stdlib_import(s, force_sort, order_by_type)) is not None]
    if not block:
        return None
    first, last = block[0][0], block[-1][0]
    if any(_stdlib_import(s) is None and isinstance(s, cst.SimpleStatementLine) and _is_import(s) for s in body[first:last]):
        return None  # standard-library imports mixed with others: not isort's layout, leave it
    mine = _stdlib_import(statement, force_sort, order_by_type)
    assert mine is not None, "only a standard-library `from` line is placed"
    for i, key in block:
        if key > mine:
            return i
    return last + 1


def opens_imports(statement: Statement) -> bool:
    """A top-level import line other than `from __future__ import ...`."""
    if not isinstance(statement, cst.SimpleStatementLine) or not _is_import(statement):
        return False
    small = statement.body[0]
    return not (isinstance(small, cst.ImportFrom) and small.module is not None and cst_dotted_name(small.module) == "__future__")


def _is_import(statement: cst.SimpleStatementLine) -> bool:
    return all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)


def imported_from(module: cst.Module) -> dict[str, set[str]]:
    """module -> names a file's top-level `from module import ...` statements bind."""
    found: dict[str, set[str]] = {}
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar) and small.module is not None:
                    found.setdefault(cst_dotted_name(small.module), set()).update(cst_dotted_name(a.name) for a in small.names)
    return found


def _aliases(node: cst.ImportFrom) -> list[cst.ImportAlias]:
    """The names a `from` import lists; leave_ImportFrom passes star imports through untouched."""
    assert not isinstance(node.names, cst.ImportStar), "a star import is never laid out"
    return list(node.names)


def _alias_name(alias: cst.ImportAlias) -> str:
    return cst_dotted_name(alias.name)


def _explode_if_long(node: cst.ImportFrom, width: int = LINE_LENGTH) -> cst.ImportFrom:
    """A merged one-line import past `width` columns, laid out one name per line as black (and isort's
    black profile) does."""
    if len(cst.Module(body=[]).code_for_node(node)) <= width:
        return node

    def wrap(last_line: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=cst.SimpleWhitespace(last_line)
        )

    names = _aliases(node)
    laid_out = [
        alias.with_changes(comma=cst.Comma(whitespace_after=wrap("    " if i < len(names) - 1 else "")))
        for i, alias in enumerate(names)
    ]
    return node.with_changes(
        names=laid_out, lpar=cst.LeftParen(whitespace_after=wrap("    ")), rpar=cst.RightParen()
    )


def _closing(node: cst.ImportFrom) -> cst.BaseParenthesizableWhitespace:
    last = _aliases(node)[-1]
    if isinstance(last.comma, cst.Comma):
        return last.comma.whitespace_after
    return cst.SimpleWhitespace("")


def blank_prefix(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The blank lines above a statement's first comment line."""
    out = []
    for line in lines:
        if line.comment is not None:
            break
        out.append(line)
    return out


def _defines(statement: Statement) -> bool:
    return isinstance(statement, (cst.ClassDef, cst.FunctionDef))


def space_opened_block(before: cst.Module, after: cst.Module) -> cst.Module:
    """In a file with no import (bar `from __future__`), the imports this run added open the file's
    import block right above its first statement: they take that statement's blank lines, and the
    statement gets black's two blank lines (one above code that is not a def or class)."""
    if any(opens_imports(s) for s in before.body):
        return after
    body = list(after.body)
    first = next((i for i, s in enumerate(body) if opens_imports(s)), None)
    if first is None:
        return after
    last = first
    while last + 1 < len(body) and opens_imports(body[last + 1]):
        last += 1
    if last + 1 >= len(body):
        return after
    statement = body[last + 1]
    # the same statement in the file as it was: the imports went in right above it
    old = next((s for s in before.body if not _is_docstring(s) and not (isinstance(s, cst.SimpleStatementLine) and _is_import(s))), None)
    if old is None:
        return after
    blanks = blank_prefix(old.leading_lines)
    rest = list(old.leading_lines)[len(blanks) :]
    spacing = [cst.EmptyLine(indent=False)] * (2 if _defines(statement) else 1)
    body[first] = body[first].with_changes(leading_lines=blanks)
    body[last + 1] = statement.with_changes(leading_lines=[*spacing, *rest])
    return after.with_changes(body=body)


def _is_docstring(statement: Statement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
