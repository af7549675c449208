"""Remove the capture plumbing eaglepatch wrote (codemods/add_plumbing.py): the one job of this codemod.

A group goes only when it carries eaglepatch's plumbing marker AND its code is still what the marker's
digest says; a group edited by hand stays, and is reported.  What a group took the place of comes
back: a tail gives back the `return` it kept inside it, an argument is taken out of its call and the
call laid out as the marker says it was,
and the blank lines and comments that stood above a group go back to the statement below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from ..read.slices import ClassView, statement_lines
from .add_plumbing import (
    HEADER,
    AddPlumbing,
    BlockTransformer,
    group_digest,
    header_digest,
    leading_lines,
    marker_of,
    without_argument,
    without_index,
)
from .contract import VisitorCommand, run_command
from .names import LINE_LENGTH, PLUMBING

if TYPE_CHECKING:
    from ..records import PlumbingPiece


class RemovePlumbing(BlockTransformer, VisitorCommand):
    DESCRIPTION = "Remove the capture plumbing that eaglepatch added."

    def __init__(self, context: CodemodContext, text: str | None = None):
        """`text`: the code the module was parsed from; a def is then read only if a marker line is in it
        (else each def is printed to look for one)."""
        super().__init__(context)
        self._text = text
        self._spans: dict[int, tuple[int, int]] = {}
        self._marked: list[int] = []
        self.removed: dict[str, list[str]] = {}  # "Class.method" -> the kinds taken out
        self.kept: dict[str, list[str]] = {}  # marked, but edited by hand
        self._module: cst.Module | None = None
        self._classes: list[cst.ClassDef] = []

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node
        if self._text is not None:
            self._spans = statement_lines(node, self._text)
            self._marked = [number for number, line in enumerate(self._text.splitlines(), 1) if PLUMBING in line]

    def _holds_marker(self, function: cst.FunctionDef) -> bool:
        module = self._module
        assert module is not None, "visit_Module runs before any def is left"
        span = self._spans.get(id(function))
        if span is None:
            return PLUMBING in module.code_for_node(function)
        return any(span[0] <= line <= span[1] for line in self._marked)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self._classes:
            return False
        self._classes.append(node)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if self._classes and self._classes[-1] is original_node:
            self._classes.pop()
            return self._without_written_defs(updated_node)
        return updated_node

    def _without_written_defs(self, node: cst.ClassDef) -> cst.ClassDef:
        """The class without the defs a `hook` piece wrote (a marker, the digest still the def's), and
        without the blank line the codemod put above each."""
        module = self._module
        block = node.body
        if module is None or not isinstance(block, cst.IndentedBlock):
            return node
        unit = block.indent if block.indent is not None else module.default_indent
        body: list[cst.BaseStatement] = []
        for statement in block.body:
            marker = marker_of(statement)
            if marker is None or marker.kind != "hook" or not isinstance(statement, cst.FunctionDef):
                body.append(statement)
                continue
            label = node.name.value
            above = leading_lines(statement)[:-1]
            if marker.count != 1 or group_digest([statement], unit, module.default_newline) != marker.digest or len(above) != 1 or above[0].comment is not None:
                self.kept.setdefault(label, []).append(statement.name.value)
                body.append(statement)
                continue
            self.removed.setdefault(label, []).append(statement.name.value)
        return node.with_changes(body=block.with_changes(body=body)) if len(body) != len(block.body) else node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        module = self._module
        assert module is not None, "visit_Module runs before any def is left"
        if not self._classes or not self._holds_marker(original_node):
            return updated_node
        label = f"{self._classes[-1].name.value}.{original_node.name.value}"
        block = original_node.body
        unit = block.indent if isinstance(block, cst.IndentedBlock) and block.indent is not None else module.default_indent
        reverter = _Reverter(original_node, unit, module)
        updated = original_node.visit(reverter)
        if reverter.removed:
            self.removed.setdefault(label, []).extend(reverter.removed)
        if reverter.kept:
            self.kept.setdefault(label, []).extend(reverter.kept)
        return updated  # type: ignore[return-value]


class _Reverter(BlockTransformer):
    def __init__(self, root: cst.FunctionDef, unit: str, module: cst.Module):
        super().__init__()
        self.root = root
        self.unit = unit
        self.newline = module.default_newline
        self.config = module.config_for_parsing
        self.removed: list[str] = []
        self.kept: list[str] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body = list(updated_node.body)
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []  # what stood above a group taken out: the next statement's
        index = 0
        while index < len(body):
            statement = body[index]
            marker = marker_of(statement)
            if marker is None:
                out.append(self._carry(statement, carried))
                carried = []
                index += 1
                continue
            above = leading_lines(statement)[:-1]
            if marker.count == 0 and marker.layout == HEADER:  # a loop given an index: its own header back
                loop = statement if isinstance(statement, cst.For) else None
                unindexed = without_index(loop) if loop is not None and header_digest(loop, self.unit, self.newline) == marker.digest else None
                if unindexed is None:
                    self.kept.append(marker.kind)
                    out.append(self._carry(statement, carried))
                else:
                    self.removed.append(marker.kind)
                    out.append(self._carry(unindexed.with_changes(leading_lines=above), carried))
                carried = []
                index += 1
                continue
            if marker.count == 0:  # an argument
                restored = self._argument(statement, marker.digest, marker.layout)
                if restored is None:
                    self.kept.append(marker.kind)
                    out.append(self._carry(statement, carried))
                else:
                    self.removed.append(marker.kind)
                    out.append(self._carry(restored.with_changes(leading_lines=above), carried))
                carried = []
                index += 1
                continue
            group = body[index : index + marker.count]
            if len(group) != marker.count or group_digest(group, self.unit, self.newline) != marker.digest:
                self.kept.append(marker.kind)
                out.append(self._carry(statement, carried))
                carried = []
                index += 1
                continue
            if marker.kind == "tail":
                kept = _tail_return(group)
                if kept is None:
                    self.kept.append(marker.kind)
                    out += [self._carry(group[0], carried), *group[1:]]
                else:
                    self.removed.append(marker.kind)
                    out.append(self._carry(kept.with_changes(leading_lines=above), carried))
                carried = []
            elif above and index + marker.count >= len(body):  # nothing below to give the lines above it back to
                self.kept.append(marker.kind)
                out += [self._carry(group[0], carried), *group[1:]]
                carried = []
            else:
                self.removed.append(marker.kind)
                carried = [*carried, *above]
            index += marker.count
        return updated_node.with_changes(body=out)

    @staticmethod
    def _carry(statement: cst.BaseStatement, carried: list[cst.EmptyLine]) -> cst.BaseStatement:
        return statement.with_changes(leading_lines=[*carried, *leading_lines(statement)]) if carried else statement

    def _argument(self, statement: cst.BaseStatement, digest: str, layout: str) -> cst.SimpleStatementLine | None:
        if not isinstance(statement, cst.SimpleStatementLine) or group_digest([statement], self.unit, self.newline) != digest:
            return None
        try:
            return without_argument(statement.with_changes(leading_lines=()), layout, self.unit, self.newline, self.config)
        except ValueError:
            return None


def _tail_return(group: list[cst.BaseStatement]) -> cst.BaseStatement | None:
    """The `return` a tail took the place of: the one it kept in its `if` (two statements), or, for the
    one-statement form `return (h, aux) if ... else h`, `return h` with its trailing comment."""
    first = group[0]
    if len(group) == 2 and isinstance(first, cst.If) and isinstance(first.body, cst.IndentedBlock) and len(first.body.body) == 1:
        return first.body.body[0]
    if len(group) == 1 and isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1:
        small = first.body[0]
        if isinstance(small, cst.Return) and isinstance(small.value, cst.IfExp) and isinstance(small.value.orelse, cst.Name):
            plain = cst.Return(value=cst.Name(small.value.orelse.value))
            return first.with_changes(body=[plain])
    return None


def revert_plumbing(code: str) -> tuple[str, dict[str, list[str]], dict[str, list[str]]]:
    """(the module without eaglepatch's plumbing, what was taken out, what was kept as edited by hand)."""
    if PLUMBING not in code:
        return code, {}, {}
    view, _ = _marked_view(code)
    command = RemovePlumbing(CodemodContext(), view.text)
    updated = view.splice(run_command(command, cst.parse_module(view.text)).code)
    return updated, command.removed, command.kept


def rerun_and_revert(code: str, pieces: Sequence[PlumbingPiece], line_length: int = LINE_LENGTH) -> tuple[str, str, dict[str, list[str]]]:
    """(`code` with the pieces written a second time, the module without eaglepatch's plumbing, what
    revert keeps as edited by hand) of a module the pieces were written into: what the proof at
    `apply` asks (rewrite/verify.prove_plumbing), read from one parse of the classes both codemods see."""
    view, marked = _marked_view(code, frozenset(piece.cls for piece in pieces))
    module = cst.parse_module(view.text)
    again = view.splice(run_command(AddPlumbing(CodemodContext(), pieces, line_length, view), module).code)
    remover = RemovePlumbing(CodemodContext(), view.text)
    back = view.splice(run_command(remover, module).code) if marked else code
    return again, back, remover.kept


def _marked_view(code: str, classes: frozenset[str] = frozenset()) -> tuple[ClassView, list[int]]:
    """(the view of the classes holding a plumbing marker, and of those named `classes`; the marker
    lines): the whole module when a marker stands outside the top-level classes."""
    marked = [number for number, line in enumerate(code.splitlines(), 1) if PLUMBING in line]
    view = ClassView.of(code, lambda node: node.name in classes or any(node.lineno <= n <= (node.end_lineno or node.lineno) for n in marked))
    if not all(any(first <= n <= last for first, last in view.spans) for n in marked):
        view = ClassView(code, code)
    return view, marked
