"""Remove the delegating members eaglepatch wrote: the one job of this codemod.

A member goes only when it carries eaglepatch's marker comment AND still reads exactly as
eaglepatch renders it for its own signature, so a method someone edited by hand after the
patch (or wrote themselves) stays.  Imports that only the removed members used are removed
with libcst's RemoveImportsVisitor, which leaves any import still in use alone.
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand
from libcst.codemod.visitors import RemoveImportsVisitor

from codemods.add_delegations import MARKER, Delegation, _dedent, render_delegation

def _marker_attribute(func: cst.FunctionDef) -> str | None:
    for line in func.leading_lines:
        if line.comment is not None and line.comment.value.startswith(MARKER):
            return line.comment.value[len(MARKER) :].strip()
    return None


def _is_pristine(func: cst.FunctionDef, attribute: str, module: cst.Module, unit: str) -> bool:
    """True when the method is byte for byte what eaglepatch would write for its own signature."""
    style = "property" if any(
        isinstance(d.decorator, cst.Name) and d.decorator.value == "property" for d in func.decorators
    ) else "method"
    delegation = Delegation(
        name=func.name.value,
        inner_attribute=attribute,
        style=style,
        params=func.params,
        returns=func.returns,
        is_async=func.asynchronous is not None,
    )
    newline = module.default_newline
    expected = _dedent(render_delegation(delegation, unit, newline), unit)
    printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
    actual = printer.code_for_node(func.with_changes(leading_lines=[]))
    return actual == expected.split(newline, 1)[1]  # the marker line is in leading_lines


class RemoveDelegations(VisitorBasedCodemodCommand):
    DESCRIPTION = "Remove delegating members that eaglepatch added."

    def __init__(self, context: CodemodContext):
        super().__init__(context)
        self.removed: dict[str, list[str]] = {}
        self.kept: dict[str, list[str]] = {}  # marked but edited by hand
        self._module: cst.Module | None = None
        self._names_in_removed: set[str] = set()

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        unit = updated_node.body.indent if updated_node.body.indent is not None else self._module.default_indent
        keep = []
        for stmt in updated_node.body.body:
            attribute = _marker_attribute(stmt) if isinstance(stmt, cst.FunctionDef) else None
            if attribute is None:
                keep.append(stmt)
                continue
            # the blank line eaglepatch put before the marker is part of what it added
            leading = list(stmt.leading_lines)
            if _is_pristine(stmt, attribute, self._module, unit) and leading and leading[0].comment is None:
                self.removed.setdefault(updated_node.name.value, []).append(stmt.name.value)
                self._names_in_removed |= _signature_names(stmt)
            else:
                keep.append(stmt)
                self.kept.setdefault(updated_node.name.value, []).append(stmt.name.value)
        if len(keep) == len(updated_node.body.body):
            return updated_node
        if not keep:
            keep = [cst.SimpleStatementLine(body=[cst.Pass()])]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=keep))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self._names_in_removed:
            for stmt in updated_node.body:
                if not isinstance(stmt, cst.SimpleStatementLine):
                    continue
                for small in stmt.body:
                    if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        module = _dotted(small.module)
                        for alias in small.names:
                            local = alias.asname.name.value if alias.asname else _dotted(alias.name)
                            if local in self._names_in_removed:
                                RemoveImportsVisitor.remove_unused_import(
                                    self.context, "." * len(small.relative) + module, _dotted(alias.name),
                                    alias.asname.name.value if alias.asname else None,
                                )
                    elif isinstance(small, cst.Import):
                        for alias in small.names:
                            local = alias.asname.name.value if alias.asname else _dotted(alias.name).split(".")[0]
                            if local in self._names_in_removed:
                                RemoveImportsVisitor.remove_unused_import(
                                    self.context, _dotted(alias.name), None,
                                    alias.asname.name.value if alias.asname else None,
                                )
        return updated_node


def _signature_names(func: cst.FunctionDef) -> set[str]:
    found: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

    for param in [*func.params.posonly_params, *func.params.params, *func.params.kwonly_params]:
        if param.annotation is not None:
            param.annotation.visit(Collect())
        if param.default is not None:
            param.default.visit(Collect())
    for star in (func.params.star_arg, func.params.star_kwarg):
        if isinstance(star, cst.Param) and star.annotation is not None:
            star.annotation.visit(Collect())
    if func.returns is not None:
        func.returns.visit(Collect())
    return found


def _dotted(node) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""
