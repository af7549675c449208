"""Statement walkers over CPython's `ast`, shared by the stages that follow a def's control flow."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator


def sub_blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The statement blocks directly under a compound statement (an `if`'s two branches, a loop's
    body and `else`, a `try`'s body, handlers, `else` and `finally`, a `match`'s cases); none under
    a simple one."""
    if isinstance(statement, (ast.For, ast.AsyncFor, ast.While, ast.If)):
        return [statement.body, statement.orelse]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [statement.body]
    if isinstance(statement, ast.Try):
        return [statement.body, *(h.body for h in statement.handlers), statement.orelse, statement.finalbody]
    if isinstance(statement, ast.Match):
        return [case.body for case in statement.cases]
    return []


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, in its order (breadth first, fields in order), a third cheaper: the children are read
    off `_fields` here instead of through two generators a node (the readers walk every def they read)."""
    todo = deque([node])
    take, put, node_type = todo.popleft, todo.append, ast.AST
    while todo:
        current = take()
        for field in current._fields:
            value = getattr(current, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        put(item)
            elif isinstance(value, node_type):
                put(value)
        yield current


def walk_code(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, not into nested functions, classes or lambdas (depth first, last child first)."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                todo.append(child)


def walk_body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """`walk_code` of each statement of the function's body: its own code, not the def's decorators or defaults."""
    for statement in function.body:
        yield from walk_code(statement)


def nested_statements(block: list[ast.stmt]) -> Iterator[tuple[ast.stmt, list[ast.stmt]]]:
    """Every statement under `block` with the block that holds it, not into nested defs or classes."""
    for statement in block:
        yield statement, block
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for part in sub_blocks(statement):
                yield from nested_statements(part)


_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def statement_walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk(node)` with only the statements (and the except and case clauses between them) kept,
    in the same order, without visiting an expression: a statement's ancestors are all statements or
    clauses, so each keeps its depth, and children are taken in `ast.walk`'s order (fields, then lists)."""
    todo = deque([node])
    while todo:
        node = todo.popleft()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, _HOLDS_STATEMENTS))
