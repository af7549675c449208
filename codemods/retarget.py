"""Retarget a hook body learned from another class: the one job of this codemod.

A body such as `return self.model.embed_tokens.weight, self.lm_head.weight` is taken from a class
of the tree that has it and written into a class on the same shape.  Two things change on the
way, nothing else: each `self.<prefix>` the plan maps (the backbone attribute, the path to the
backbone's config) is spelled the class's way, and each module-level name the body reads is
spelled as the class's file binds the same object (`spelled`: name -> expression).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import BuiltinAssignment, MetadataWrapper, ScopeProvider

from .names import cst_dotted_name


class Retarget(cst.CSTTransformer):
    def __init__(
        self,
        receiver: str,
        renames: dict[tuple[str, ...], tuple[str, ...]],
        spelled: dict[cst.Name, cst.BaseExpression] | None = None,
    ):
        super().__init__()
        self.receiver = receiver
        self.renames = {(receiver, *old): (receiver, *new) for old, new in renames.items() if old != new}
        self.spelled = spelled or {}  # the Name nodes (by identity) that read a module-level name

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        chain = tuple(cst_dotted_name(original_node).split("."))
        new = self.renames.get(chain)
        if new is None:
            return updated_node
        expression: cst.BaseExpression = cst.Name(new[0])
        for part in new[1:]:
            expression = cst.Attribute(value=expression, attr=cst.Name(part))
        return expression.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar) if isinstance(expression, cst.Attribute) else expression

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        spelled = self.spelled.get(original_node)
        return spelled if spelled is not None else updated_node


PP_GROUP = "pp_group"


class PipelineGroupCall(cst.CSTTransformer):
    """`self.pp_group` read as the expression its reference builds it with (`get_pp_group()`): how a
    class that keeps no pipeline group asks for its rank."""

    def __init__(self, receiver: str, built: str):
        super().__init__()
        self.receiver = receiver
        self.built = cst.parse_expression(built)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if cst_dotted_name(original_node) != f"{self.receiver}.{PP_GROUP}":
            return updated_node
        return self.built.deep_clone().with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)


def pp_respelled(func: cst.FunctionDef, receiver: str, built: str) -> cst.FunctionDef:
    """The def with `self.pp_group` read as `built` (else, when "", the def itself)."""
    if not built:
        return func
    out = func.visit(PipelineGroupCall(receiver, built))
    assert isinstance(out, cst.FunctionDef), "respelling an attribute keeps a def a def"
    return out


def body_reads(func: cst.FunctionDef, signature: bool = False) -> tuple[cst.Module, dict[str, list[cst.Name]]]:
    """The function wrapped in a module, and the Name nodes that read a module-level name or builtin, by
    name, in order of first use: in its body only, or with `signature` in its annotations and defaults
    too.  Retarget must run on that very module."""
    module = cst.Module(body=[func])
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    in_signature: set[int] = set()

    class Signature(cst.CSTVisitor):
        def visit_Parameters(self, node: cst.Parameters) -> bool:
            node.visit(_Collect(in_signature))
            return False

        def visit_Annotation(self, node: cst.Annotation) -> bool:
            node.visit(_Collect(in_signature))
            return False

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
            return False

        def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
            return False

    if not signature:
        module.visit(Signature())
    reads: dict[str, list[cst.Name]] = {}
    for scope in {s for s in scopes.values() if s is not None}:
        for access in scope.accesses:
            node = access.node
            if not isinstance(node, cst.Name) or id(node) in in_signature:
                continue
            if not access.referents or all(r.scope is scope.globals or isinstance(r, BuiltinAssignment) for r in access.referents):
                reads.setdefault(node.value, [])
                if all(n is not node for n in reads[node.value]):
                    reads[node.value].append(node)
    return module, reads


class _Collect(cst.CSTVisitor):
    def __init__(self, into: set[int]):
        super().__init__()
        self.into = into

    def visit_Name(self, node: cst.Name) -> None:
        self.into.add(id(node))


class ExplodeLongLiterals(cst.CSTTransformer):
    """A statement that outgrew the line once renamed, laid out as black lays it out: an assigned
    list, tuple or set literal one element per line with a trailing comma (black always explodes a
    literal that does not fit).  Other long lines are left alone: `overlong_lines` reports them."""

    def __init__(self, unit: str, limit: int, depth: int = 1):
        super().__init__()
        self.unit = unit
        self.limit = limit
        self.depth = depth  # the def sits in a class body

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.depth += 1

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        self.depth -= 1
        return updated_node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        indent = len((self.unit * self.depth).expandtabs(4))
        code = cst.Module(body=[]).code_for_node(updated_node.with_changes(leading_lines=[])).rstrip("\r\n")
        if "\n" in code or indent + len(code) <= self.limit or len(updated_node.body) != 1:
            return updated_node
        small = updated_node.body[0]
        if not isinstance(small, cst.Assign) or not isinstance(small.value, (cst.List, cst.Set, cst.Tuple)) or not small.value.elements:
            return updated_node
        literal = small.value
        if isinstance(literal, cst.Tuple) and not literal.lpar:
            return updated_node
        inner = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(self.unit))
        closing = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))
        elements = [
            element.with_changes(comma=cst.Comma(whitespace_after=inner if i < len(literal.elements) - 1 else closing))
            for i, element in enumerate(literal.elements)
        ]
        opened: cst.Tuple | cst.List | cst.Set
        if isinstance(literal, cst.Tuple):
            opened = literal.with_changes(elements=elements, lpar=[cst.LeftParen(whitespace_after=inner)])
        elif isinstance(literal, cst.List):
            opened = literal.with_changes(elements=elements, lbracket=cst.LeftSquareBracket(whitespace_after=inner))
        else:
            opened = literal.with_changes(elements=elements, lbrace=cst.LeftCurlyBrace(whitespace_after=inner))
        return updated_node.with_changes(body=[small.with_changes(value=opened)])


def overlong_lines(func: cst.FunctionDef, unit: str, limit: int) -> list[str]:
    """Lines of the def, at class-body indentation, longer than `limit` (what black would re-wrap)."""
    holder = cst.ClassDef(name=cst.Name("C"), body=cst.IndentedBlock(body=[func.with_changes(leading_lines=[])]))
    code = cst.Module(body=[holder], default_indent=unit).code
    return [line for line in code.splitlines()[1:] if len(line.expandtabs(4)) > limit]
