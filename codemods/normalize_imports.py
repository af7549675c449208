"""Give names that AddImportsVisitor merged into a multi-line import the layout of their neighbours.

AddImportsVisitor puts a new name into an existing `from m import (\\n    a,\\n    b,\\n)` as
`X, a,` on one line; black would move it to a line of its own.  Copying a neighbour's comma
layout keeps the file stable under black.  Only the names this run added are touched.
"""

from __future__ import annotations

import libcst as cst

from codemods.names import dotted_name


class NormalizeAddedImports(cst.CSTTransformer):
    def __init__(self, added: dict[str, set[str]]):
        super().__init__()
        self.added = added  # module -> names this run imports from it

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False  # imports that AddImportsVisitor touches are at module level

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        module = dotted_name(updated_node.module)
        wanted = self.added.get(module)
        if not wanted or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        if updated_node.lpar is None:
            return _explode_if_long(updated_node)
        names = list(updated_node.names)
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
            if dotted_name(alias.name) in wanted and not (
                isinstance(alias.comma, cst.Comma) and isinstance(alias.comma.whitespace_after, cst.ParenthesizedWhitespace)
            ):
                if index == len(names) - 1:
                    alias = alias.with_changes(comma=layout.with_changes(whitespace_after=_closing(updated_node)))
                else:
                    alias = alias.with_changes(comma=layout)
            fixed.append(alias)
        return updated_node.with_changes(names=fixed)


LINE_LENGTH = 88


def _explode_if_long(node: cst.ImportFrom) -> cst.ImportFrom:
    """A merged one-line import past the line length, laid out one name per line as black does."""
    if len(cst.Module(body=[]).code_for_node(node)) <= LINE_LENGTH:
        return node

    def wrap(last_line: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=cst.SimpleWhitespace(last_line)
        )

    names = list(node.names)
    laid_out = [
        alias.with_changes(comma=cst.Comma(whitespace_after=wrap("    " if i < len(names) - 1 else "")))
        for i, alias in enumerate(names)
    ]
    return node.with_changes(
        names=laid_out, lpar=cst.LeftParen(whitespace_after=wrap("    ")), rpar=cst.RightParen()
    )


def _closing(node: cst.ImportFrom):
    last = list(node.names)[-1]
    if isinstance(last.comma, cst.Comma):
        return last.comma.whitespace_after
    return cst.SimpleWhitespace("")
