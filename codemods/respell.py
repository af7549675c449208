"""Respell the free names of a copied default or annotation: the one job of this codemod.

A default or annotation copied from the inner method names things (`Optional`, `DEFAULT_SCALE`,
`torch.Tensor`) that the wrapper may bind differently or not at all.  `free_names` lists the names
an expression reads from its surroundings (the root of `torch.Tensor`, not `Tensor`; not keyword
names; names inside a string annotation, flagged as such); `Respell` replaces each by the
wrapper's spelling of the same object: another name (an alias import), `Owner.NAME`, or a literal.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

_EMPTY = cst.Module(body=[])
# names bound inside the expression itself: their uses are not free, and are not worth telling apart
_BINDS_NAMES = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.NamedExpr)


@dataclass(frozen=True)
class FreeName:
    name: str
    in_string: bool  # inside a string annotation: evaluated later, in the module's globals


def is_literal_subscript(node: cst.Subscript) -> bool:
    """`Literal["a", "b"]`: its strings are values, not forward references."""
    value = node.value
    return (isinstance(value, cst.Name) and value.value == "Literal") or (
        isinstance(value, cst.Attribute) and value.attr.value == "Literal"
    )


def parse_string(node: cst.SimpleString) -> cst.BaseExpression | None:
    value = node.evaluated_value
    if not isinstance(value, str):
        return None
    try:
        return cst.parse_expression(value.strip())
    except cst.ParserSyntaxError:
        return None


class _FreeNames(cst.CSTVisitor):
    def __init__(self, annotation: bool, in_string: bool = False):
        super().__init__()
        self.annotation = annotation
        self.in_string = in_string
        self.found: list[FreeName] = []
        self.unreadable = False  # names bound inside, or a string annotation that does not parse
        self._literal = 0

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(FreeName(node.value, self.in_string))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.annotation and is_literal_subscript(node):
            self._literal += 1

    def leave_Subscript(self, original_node: cst.Subscript) -> None:
        if self.annotation and is_literal_subscript(original_node):
            self._literal -= 1

    def visit_SimpleString(self, node: cst.SimpleString) -> bool:
        if self.annotation and not self._literal:
            parsed = parse_string(node)
            if parsed is None:
                self.unreadable = True
                return False
            inner = _FreeNames(True, in_string=True)
            parsed.visit(inner)
            self.found += inner.found
            self.unreadable |= inner.unreadable
        return False

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        if self.annotation and not self._literal:
            self.unreadable = True
        return False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _BINDS_NAMES):
            self.unreadable = True
            return False
        return super().on_visit(node)


def free_names(node: cst.CSTNode | None, annotation: bool = False) -> tuple[list[FreeName], bool]:
    """The names `node` reads from its surroundings, in order, and whether all of them could be read."""
    if node is None:
        return [], True
    collector = _FreeNames(annotation)
    node.visit(collector)
    return collector.found, not collector.unreadable


class Respell(cst.CSTTransformer):
    """Replace free names: `eager` outside string annotations, `lazy` inside them."""

    def __init__(self, eager: dict[str, cst.BaseExpression], lazy: dict[str, cst.BaseExpression], annotation: bool, in_string: bool = False):
        super().__init__()
        self.eager = eager
        self.lazy = lazy
        self.annotation = annotation
        self.in_string = in_string
        self._bound: set[int] = set()  # attribute names and keywords: not free
        self._literal = 0

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._bound.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._bound.add(id(node.keyword))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.annotation and is_literal_subscript(node):
            self._literal += 1

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.Subscript:
        if self.annotation and is_literal_subscript(original_node):
            self._literal -= 1
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if id(original_node) in self._bound:
            return updated_node
        spelled = (self.lazy if self.in_string else self.eager).get(original_node.value)
        return spelled if spelled is not None else updated_node

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if not self.annotation or self._literal:
            return updated_node
        parsed = parse_string(original_node)
        if parsed is None:
            return updated_node
        respelled = parsed.visit(Respell(self.lazy, self.lazy, True, in_string=True))
        assert isinstance(respelled, cst.BaseExpression), "Respell replaces names, it never removes an expression"
        if respelled.deep_equals(parsed):
            return updated_node
        return updated_node.with_changes(value=_quoted(original_node, _EMPTY.code_for_node(respelled)))


def _quoted(original: cst.SimpleString, content: str) -> str:
    """`content` in the original's prefix and quotes, or as repr() when those cannot hold it."""
    prefix, quote = original.prefix, original.quote
    if quote in content or "\\" in content or (len(quote) == 1 and "\n" in content) or "r" in prefix.lower():
        return repr(content)
    return f"{prefix}{quote}{content}{quote}"
