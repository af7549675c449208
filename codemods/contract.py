"""LibCST's codemod contract, kept, at the cost of the code it changes.

`CodemodCommand.transform_module` runs a command, then the import transforms the command scheduled
through its context (`AddImportsVisitor.add_needed_import`, `RemoveImportsVisitor.remove_unused_import`).
Each pass deep-copies the module into a `MetadataWrapper` and visits every node of it: on a
2,000-line model file the scheduled `AddImportsVisitor` alone took seconds, although it only ever
changes the import block at the top.  `run_command` keeps the contract (the same command, the same
scheduled transforms, in the same order, sharing one context) without the copy, and runs
`AddImportsVisitor` as `TopLevelImports`: the same transform, visiting module-level import lines only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import libcst as cst
from libcst.codemod import Codemod, CodemodCommand, CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper


def _has_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def leading_statements(module: cst.Module) -> list[cst.BaseStatement]:
    """The first statement and the import lines that follow it without a break: all that
    AddImportsVisitor's gatherer reads (it skips a docstring, then stops at the first statement that
    is not an import)."""
    head: list[cst.BaseStatement] = []
    for index, statement in enumerate(module.body):
        if index and not _has_import(statement):
            break
        head.append(statement)
    return head


class TopLevelImports(AddImportsVisitor):
    """AddImportsVisitor that visits the module and its top-level import lines, nothing else.

    AddImportsVisitor changes two things: the `from m import ...` lines of the leading import block
    (names merged in, `leave_ImportFrom`, which checks the line is one of those) and the module body
    (new lines inserted, `leave_Module`).  Neither is inside a class, a function or a compound
    statement, so pruning the walk there leaves its result as it was."""

    def visit_Module(self, node: cst.Module) -> None:
        # the gatherer reads node.body up to the first statement that is not an import: hand it only those
        super().visit_Module(node.with_changes(body=leading_statements(node)))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if not super().on_visit(node):
            return False
        return isinstance(node, cst.Module) or _has_import(node)


def run_command(command: CodemodCommand, module: cst.Module) -> cst.Module:
    """`command.transform_module(module)`, without deep copies: the command (with any metadata it
    declares, resolved on `module` itself), then the import transforms it scheduled in its context."""
    context = command.context
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    command.context = replace(context, wrapper=wrapper)
    try:
        with command.resolve(wrapper):
            updated = command.transform_module_impl(wrapper.module)
    finally:
        command.context = context
    scheduled: list[tuple[str, Callable[[cst.Module], cst.Module]]] = [
        # no metadata: no wrapper, no copy
        (AddImportsVisitor.CONTEXT_KEY, lambda tree: TopLevelImports(context).transform_module_impl(tree)),
        # needs scope metadata: the stock pass
        (RemoveImportsVisitor.CONTEXT_KEY, lambda tree: RemoveImportsVisitor(context).transform_module(tree)),
    ]
    for key, transform in scheduled:
        if context.scratch.get(key):
            updated = transform(updated)
    return updated


class VisitorCommand(CodemodCommand, cst.CSTTransformer):
    """`VisitorBasedCodemodCommand` for a codemod none of whose methods carries a matcher decorator
    (`@m.visit`, `@m.leave`, `@m.call_if_inside`, ...): the same command (a `CodemodCommand` whose
    `transform_module_impl` visits the tree with itself), built from libcst's public classes alone.

    VisitorBasedCodemodCommand is a MatcherDecoratableTransformer, which looks for those decorators
    on each instance it makes (and again on its first visit): three walks over `dir(self)`, reading
    every attribute (the hundreds of visit_/leave_ methods of a transformer), 14 ms a codemod, a
    tenth of `apply --all` on a release that has 85 files to patch.  Without a decorator its visits
    are CSTTransformer's, so this class skips the matcher layer altogether; a matcher decorator on a
    subclass would do nothing (tests/test_codemod_contract.py checks that codemods/ has none)."""

    def __init__(self, context: CodemodContext) -> None:
        Codemod.__init__(self, context)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)
