"""Remove the delegating members eaglepatch wrote: the one job of this codemod.

A member goes only when it carries eaglepatch's marker comment AND still reads exactly as
eaglepatch renders it for its own signature, so a method someone edited by hand after the
patch (or wrote themselves) stays.  The marker names the imports eaglepatch added for it
(`; imported Sequence, LayerSpec`); exactly those names are taken out of the import
statements again, unless code outside the removed members has come to use them.  Whether
they are used is decided by scope analysis (libcst's GatherUnusedImportsVisitor: references,
`__all__`, string annotations).  A name still read goes only when something else binds it
too: the caller passes the names the file's star imports are known to provide (a star import
it cannot read provides nothing, so the import stays).
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import GatherUnusedImportsVisitor
from libcst.metadata import MetadataWrapper

from .add_delegations import Delegation, dedent_text, learned_digest, parse_marker, render_delegation
from .contract import VisitorCommand
from .names import LINE_LENGTH, cst_dotted_name
from .normalize_imports import Statement, blank_prefix, opens_imports


def _marker(func: cst.FunctionDef) -> tuple[str, list[str]] | None:
    for line in func.leading_lines:
        if line.comment is not None:
            found = parse_marker(line.comment.value)
            if found is not None:
                return found
    return None


_PURPOSE = re.compile(r"Forward to ``self\.\w+`` \((.+) speculative decoding\)\.")


def _purpose(func: cst.FunctionDef) -> str:
    """The algorithms the docstring names (render_delegation writes them there): the rest must match."""
    body = func.body.body
    first = body[0] if body and isinstance(func.body, cst.IndentedBlock) else None
    if isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr):
        value = first.body[0].value
        if isinstance(value, cst.SimpleString):
            found = _PURPOSE.fullmatch(value.evaluated_value if isinstance(value.evaluated_value, str) else "")
            if found:
                return found.group(1)
    return Delegation.purpose


def _is_pristine(func: cst.FunctionDef, attribute: str, module: cst.Module, unit: str, widths: tuple[int, ...] = (LINE_LENGTH,)) -> bool:
    """True when the method is byte for byte what eaglepatch would write for its own signature at one of
    the line lengths `widths` (a learned body: what it was when written, as its marker's digest says)."""
    if attribute.startswith("learned:"):
        return learned_digest(func, unit, module.default_newline) == attribute.partition(":")[2]
    decorators = [cst_dotted_name(d.decorator) for d in func.decorators]
    style = {"property": "property", f"{func.name.value}.setter": "setter"}.get(",".join(decorators), "method")
    delegation = Delegation(
        name=func.name.value,
        inner_attribute=attribute,
        style=style,
        params=func.params,
        returns=func.returns,
        is_async=func.asynchronous is not None,
        purpose=_purpose(func),
    )
    newline = module.default_newline
    printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
    actual = printer.code_for_node(func.with_changes(leading_lines=[]))
    for width in widths:
        expected = dedent_text(render_delegation(delegation, unit, newline, width), unit)
        if actual == expected.split(newline, 1)[1]:  # the marker line is in leading_lines
            return True
    return False


class RemoveDelegations(VisitorCommand):
    DESCRIPTION = "Remove delegating members that eaglepatch added."

    def __init__(self, context: CodemodContext, bound_elsewhere: frozenset[str] = frozenset(), widths: tuple[int, ...] = (LINE_LENGTH,)):
        super().__init__(context)
        self.bound_elsewhere = bound_elsewhere  # names the file's star imports provide anyway
        self.widths = widths  # the line lengths apply may have written at: the tree's, black's default
        self.removed: dict[str, list[str]] = {}
        self.kept: dict[str, list[str]] = {}  # marked but edited by hand
        self._module: cst.Module | None = None
        self._imported: set[str] = set()  # names eaglepatch imported for the members removed

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False  # only module-level classes hold what apply wrote

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        module = self._module
        assert module is not None, "visit_Module runs before any class is left"
        unit = updated_node.body.indent if updated_node.body.indent is not None else module.default_indent
        keep: list[cst.BaseStatement] = []
        for position, stmt in enumerate(updated_node.body.body):
            if not isinstance(stmt, cst.FunctionDef) or (marker := _marker(stmt)) is None:
                keep.append(stmt)
                continue
            attribute, imported = marker
            # the blank line eaglepatch put before the marker is part of what it added, but for the first
            # member of a body it wrote whole (a one-line `class B(A): pass` made a block): none there
            leading = list(stmt.leading_lines)
            spaced = bool(leading) and (leading[0].comment is None or position == 0)
            if _is_pristine(stmt, attribute, module, unit, self.widths) and spaced:
                self.removed.setdefault(updated_node.name.value, []).append(stmt.name.value)
                self._imported |= set(imported)
            else:
                keep.append(stmt)
                self.kept.setdefault(updated_node.name.value, []).append(stmt.name.value)
        if len(keep) == len(updated_node.body.body):
            return updated_node
        if not keep:
            keep = [cst.SimpleStatementLine(body=[cst.Pass()])]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=keep))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self._imported:
            return updated_node
        mentioned = _mentioned(updated_node, self._imported) - self.bound_elsewhere
        removable = (self._imported - mentioned) | (_unused_imports(updated_node) & mentioned if mentioned else set())
        body: list[Statement] = []
        dropped: list[tuple[cst.SimpleStatementLine, Statement | None]] = []  # (statement, the one kept above it)
        follows: dict[int, tuple[cst.SimpleStatementLine, Statement | None]] = {}  # index in body -> first dropped right above
        pending = None
        for stmt in updated_node.body:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                small = stmt.body[0]
                trimmed = _without(small, removable)
                if trimmed is None:
                    if pending is None:
                        pending = (stmt, body[-1] if body else None)
                        dropped.append(pending)
                    continue
                if trimmed is not small:
                    stmt = stmt.with_changes(body=[trimmed])
            if pending is not None:
                follows[len(body)] = pending
                pending = None
            body.append(stmt)
        if follows:
            imports_left = any(opens_imports(s) for s in body)
            for index, (gone, above) in follows.items():
                body[index] = _spaced_after_drop(body[index], gone, above, imports_left)
        return updated_node.with_changes(body=body)


def _spaced_after_drop(stmt: Statement, gone: cst.SimpleStatementLine, above: Statement | None, imports_left: bool) -> Statement:
    """`stmt`, next below the import line `gone` that revert took out, with the blank lines apply left:
    an import line that opened an import block took the block's blank lines above it (the block's
    first line kept one blank line); one that opened the file's only block gave the statement below
    black's blank lines (see codemods/normalize_imports.py)."""
    if opens_imports(stmt) and (above is None or not opens_imports(above)):
        return stmt.with_changes(leading_lines=gone.leading_lines)
    if not stmt.leading_lines:
        return stmt.with_changes(leading_lines=gone.leading_lines)
    if not imports_left:
        blanks = blank_prefix(stmt.leading_lines)
        return stmt.with_changes(leading_lines=[*gone.leading_lines, *list(stmt.leading_lines)[len(blanks) :]])
    return stmt


def _local(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return cst_dotted_name(alias.name).split(".")[0]


def _without(small: cst.BaseSmallStatement, names: set[str]) -> cst.BaseSmallStatement | None:
    """The import statement without `names`; None when nothing is left; itself when untouched."""
    if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small.names, cst.ImportStar):
        return small
    aliases = list(small.names)
    left = [a for a in aliases if _local(a) not in names]
    if len(left) == len(aliases):
        return small
    if not left:
        return None
    last_comma = aliases[-1].comma
    left[-1] = left[-1].with_changes(comma=last_comma)
    return small.with_changes(names=left)


def _mentioned(module: cst.Module, names: set[str]) -> set[str]:
    """Names written anywhere outside the module's import lines (code, strings, comments): only
    these need scope analysis, which costs seconds on a 3,000-line file."""
    rest = module.with_changes(body=[s for s in module.body if not _is_import_line(s)]).code
    return {name for name in names if re.search(rf"(?<![\w.]){re.escape(name)}\b", rest)}


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _unused_imports(module: cst.Module) -> set[str]:
    """Local names bound by the module's imports that no code reads, by scope analysis."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    wrapper.resolve_many(GatherUnusedImportsVisitor.get_inherited_dependencies())
    finder = GatherUnusedImportsVisitor(CodemodContext(wrapper=wrapper, filename=None))
    module.visit(finder)
    return {_local(alias) for alias, _ in finder.unused_imports}
