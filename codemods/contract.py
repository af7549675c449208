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
from libcst.codemod import Codemod, CodemodCommand, CodemodContext, ContextAwareTransformer
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def leading_statements(module: cst.Module) -> list[cst.BaseStatement]:
    """The first statement and the import lines that follow it without a break: all that
    AddImportsVisitor's gatherer reads (it skips a docstring, then stops at the first statement that
    is not an import)."""
    head: list[cst.BaseStatement] = []
    for index, statement in enumerate(module.body):
        if index and not _is_import_line(statement):
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
        return isinstance(node, cst.Module) or _is_import_line(node)


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


# The instance state libcst's matcher machinery keeps per class without a matcher decorator, by class:
# the attribute names an instance has once made (see init_command).
_UNDECORATED: dict[type, frozenset[str]] = {}


def init_command(command: ContextAwareTransformer, context: CodemodContext) -> None:
    """`ContextAwareTransformer.__init__(command, context)`, for a codemod none of whose methods carries a
    matcher decorator (`@m.visit`, `@m.leave`, `@m.call_if_inside`, ...), without looking for them on every
    instance.

    MatcherDecoratableTransformer looks for those decorators on each instance it makes (and again on its
    first visit): three walks over `dir(self)`, reading every attribute (the hundreds of visit_/leave_
    methods of a transformer), 14 ms a codemod, a tenth of `apply --all` on a release that has 85 files
    to patch. The first instance of a class is made libcst's way; when it found no decorator, the
    instances after it get the same empty state directly (Codemod's part made as libcst makes it), and
    are made libcst's way again should their attributes not be the first one's."""
    cls = type(command)
    names = _UNDECORATED.get(cls)
    if names is not None:
        Codemod.__init__(command, context)
        command._extra_visit_funcs = {}
        command._extra_leave_funcs = {}
        command._matchers = {}
        if frozenset(vars(command)) == names:
            return
    ContextAwareTransformer.__init__(command, context)
    if cls not in _UNDECORATED and not (command._extra_visit_funcs or command._extra_leave_funcs or command._matchers):
        _UNDECORATED[cls] = frozenset(vars(command))
