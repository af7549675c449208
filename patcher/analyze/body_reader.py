"""libcst's reading of a hook body: what `self.` chains it uses, what module names it reads, and why it
cannot move to another class.

synthesize.read_body_ast reads the same off CPython's tree for nearly every body; a body holding what
that reading leaves alone (a lambda, a nested class, an import, `global`, `match`) is read here, and the
tests hold the two readings equal.  Imported only then: `check` does not load libcst otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..codemods.names import cst_dotted_name
from ..codemods.retarget import body_reads
from ..records import SelfUse


def receiver_of(node: cst.FunctionDef) -> str | None:
    """The name a method calls its instance (`self`), None when it takes no positional parameter."""
    positional = [*node.params.posonly_params, *node.params.params]
    return positional[0].name.value if positional else None


def read_body(node: cst.FunctionDef, free: set[str] | None = None) -> tuple[list[SelfUse], list[str], str]:
    """(the `self.` chains the function uses, the module-level names it reads, why it cannot be
    moved to another class or "").  `free`: those names when already read (`module_names_in`);
    else libcst's scope analysis reads them."""
    receiver = receiver_of(node)
    if receiver is None or node.decorators:
        return [], [], "it is not a plain method" if node.decorators else "it takes no self"
    reader = _SelfReader(receiver)
    node.body.visit(reader)
    if free is None:
        free = set(body_reads(node, signature=True)[1])
    why = reader.unportable
    if not why and "super" in free:
        why = "it calls super()"
    return reader.uses, sorted(free - {receiver}), why


class _SelfReader(cst.CSTVisitor):
    def __init__(self, receiver: str):
        super().__init__()
        self.receiver = receiver
        self.uses: list[SelfUse] = []
        self.unportable = ""
        self._stores: set[int] = set()

    def _mark_stores(self, targets: Iterable[cst.BaseExpression]) -> None:
        for target in targets:
            self._stores.add(id(target))

    def visit_Assign(self, node: cst.Assign) -> None:
        self._mark_stores(t.target for t in node.targets)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._mark_stores([node.target])

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._mark_stores([node.target])

    def visit_Del(self, node: cst.Del) -> None:
        self._mark_stores([node.target])

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.unportable = self.unportable or "it defines a function of its own"
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        chain = cst_dotted_name(node)
        if chain.startswith(self.receiver + "."):
            parts = tuple(chain.split(".")[1:])
            self.uses.append(SelfUse(parts, id(node) in self._stores))
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.receiver:  # `self` handed on whole: what it needs cannot be read here
            self.unportable = self.unportable or f"it passes {self.receiver} on"
