"""Rewrite stage: prove each patch on the text that would be written, before anything is written.

The planner (patcher/analyze/forms.py) chooses how a copied signature is spelled; this stage does not
trust it.  It parses the patched module and, with LibCST scope analysis of that text, proves for
every generated member:

* its signature is the inner method's, parameter for parameter (or the `*args, **kwargs` form),
  and every default and annotation in it is the same expression, where each name means what
  the inner file meant: the same canonical qualified name (module + name, through the inner
  file's imports, re-exports and star imports), bound when the wrapper's class body runs (an
  unconditional module-level binding before the class, nothing in the class body before the
  member shadowing it), or the inner's literal value in place of a name bound to that literal;
  an annotation may be left out, never changed;
* its decorators and body use only its own locals and builtins the module does not rebind;
* a member EAGLE-3 code assigns is a property with a setter, and methods are not properties.

A patch that fails is an error for its file (one line: the name, the file, the line), and that
file is not written; `diff` and `apply` both stop there.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import BuiltinAssignment, Scope

from ..analyze.class_index import signature_node
from ..analyze.synthesize import learned_synthesis
from ..codemods.names import LEARNED, MARKER, cst_dotted_name
from ..codemods.respell import is_literal_subscript, parse_string
from ..errors import EaglepatchError
from ..read.meanings import CLASS_ATTRIBUTE, TYPE_ONLY, UNKNOWN, immutable_literal, inner_meaning, same_literal, wrapper_binding
from ..read.scopes import Exports, ModuleScope, dotted_module, scope_of
from ..read.slices import Parsed, parse_cut
from ..read.source_cache import MemoKey, SourceCache
from ..read.text import SourceFile, decode_source
from ..records import MemberPlan, PlumbingPiece

if TYPE_CHECKING:
    from pathlib import Path

    from ..read.locate import SourceTree

Culprit = tuple["str | None", int, str]  # (class or None, statement index, name) in the patched module

_SKIP_FIELDS = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after", "header", "footer", "equal", "dot")
_NOT_FREE = ("attr", "keyword")  # Name fields that are not looked up: `x.attr`, `f(keyword=...)`
# the names a reference's def binds itself, by (file, line, name): one reference teaches many classes
_DEFINITION_LOCALS: MemoKey[dict[tuple[Path, int, str], frozenset[str]]] = MemoKey("def -> the names it binds itself")


class Unproven(Exception):
    """One name (or construct) the patched text does not prove."""

    def __init__(self, name: str, why: str, culprit: Culprit | None = None):
        super().__init__(why)
        self.name = name
        self.why = why
        self.culprit = culprit  # (class or None, statement index, name) in the patched module


def prove_edit(
    cache: SourceCache,
    tree: SourceTree,
    source: SourceFile,
    updated: bytes,
    added: dict[str, list[str]],
    entries: Mapping[str, Sequence[MemberPlan]],
) -> None:
    """Raise EaglepatchError for the first generated name of `updated` (the patched `source`) not proven;
    `added` is what the codemod wrote (class -> members), `entries` the plans it wrote them for."""
    text = decode_source(source.path, source.rel, updated).text  # as Python will read it: BOM, coding line
    keep = frozenset((cls, name) for cls, names in added.items() for name in names)
    # the scope reads the module with the bodies of all defs but the generated ones left out, and of the
    # classes it does not patch: libcst parses it that way (a fraction of a whole parse), or whole when
    # CPython and libcst might not agree on lines
    parsed = parse_cut(text, keep, frozenset(added))
    module, cut_text = (parsed[0], parsed[1].text) if parsed is not None else (cst.parse_module(text), None)
    scope = ModuleScope(module, dotted_module(source.rel), source.rel.endswith("__init__.py"), frozenset(added), keep, text, cut_text)
    proof = _Proof(cache, tree, source, scope, text)
    for cls, names in added.items():
        plans = {entry.member.name: entry for entry in entries.get(cls, [])}
        for name in names:
            try:
                proof.member(cls, plans[name])
            except Unproven as problem:
                raise proof.error(cls, plans[name], problem) from None


class _Proof:
    def __init__(self, cache: SourceCache, tree: SourceTree, source: SourceFile, scope: ModuleScope, text: str):
        self.cache = cache
        self.tree = tree
        self.source = source
        self.scope = scope
        self.text = text  # the patched text
        self.exports = Exports.of(cache, tree)
        self._body_scopes: Mapping[cst.CSTNode, Scope | None] | None = None

    # -- a member ----------------------------------------------------------------------------------
    def member(self, cls: str, entry: MemberPlan) -> None:
        name = entry.member.name
        classdef = self.scope.classes[cls][0]
        written = [
            (i, s)
            for i, s in enumerate(classdef.body.body)
            if isinstance(s, cst.FunctionDef) and s.name.value == name and _marked(s)
        ]
        if not written:
            raise Unproven(name, "the generated member is not in the class body")
        if entry.fix is not None and entry.fix.kind == "synthesize":
            if len(written) != 1 or written[0][1].decorators:
                raise Unproven(name, "a learned hook is not one plain method")
            self.learned(cls, *written[0], entry)
            return
        if len(written) == 1 and not written[0][1].decorators:  # a method: its signature must be the inner's
            if entry.defined is None or entry.defined.kind != "method":
                raise Unproven(name, "an attribute of the inner model is written as a method")
            if entry.member.assigned_at:
                raise Unproven(name, f"EAGLE-3 code assigns it ({entry.member.assigned_at[0]}): a method cannot take that")
            index, func = written[0]
            self.signature(cls, index, func, entry)
        else:  # a forwarding property (for a method too: it hands out the inner's bound method)
            self.property(cls, written, entry)
        for _index, func in written:
            self.body(func)

    def property(self, cls: str, written: list[tuple[int, cst.FunctionDef]], entry: MemberPlan) -> None:
        name = entry.member.name
        getters = [(i, f) for i, f in written if _decorators(f) == ["property"]]
        setters = [(i, f) for i, f in written if _decorators(f) == [f"{name}.setter"]]
        if len(getters) != 1 or len(getters) + len(setters) != len(written):
            raise Unproven(name, "the generated member is not one property (and its setter)")
        index, _ = getters[0]
        found = wrapper_binding(self.scope, self.exports, "property", cls, None, index, lazy=False)
        if found.qualified != "builtins.property":
            raise Unproven("property", found.problem or f"it is {found.qualified}, not the builtin", found.culprit)
        if entry.member.assigned_at and not setters:
            raise Unproven(name, f"EAGLE-3 code assigns it ({entry.member.assigned_at[0]}) and the property has no setter")
        for setter_index, _ in setters:
            before = [b for b in self.scope.class_bindings(cls, name) if b.statement < setter_index]
            if not before or before[-1].statement != index:
                raise Unproven(name, "the setter does not decorate the generated property")

    # -- a signature ---------------------------------------------------------------------------------
    def signature(self, cls: str, index: int, func: cst.FunctionDef, entry: MemberPlan) -> None:
        defined = entry.defined
        assert defined is not None, "member() proves a method only against an inner method"
        inner_node = signature_node(self.cache, defined)
        inner_source = self.cache.read(self.tree.srt / defined.file)
        inner_scope = scope_of(self.cache, inner_source, frozenset({defined.owner}))
        owner = defined.owner
        side = _Sides(self, inner_scope, owner, inner_scope.member_statement(owner, defined.name), cls, index)
        if _is_forwarding_everything(func):
            return
        assert inner_node is not None, "a method is written only once signature_node has parsed the inner def (edits)"
        self._same_signature(side, func, inner_node, entry.member.name)

    def _same_signature(self, side: _Sides, func: cst.FunctionDef, inner_node: cst.FunctionDef, name: str) -> None:
        generated = _parameters(func.params, has_receiver=True)
        inner = _parameters(inner_node.params, has_receiver=_binding_of(inner_node) != "static")
        if [(kind, p.name.value) for kind, p in generated] != [(kind, p.name.value) for kind, p in inner]:
            raise Unproven(name, "its parameters are not the inner method's")
        for (_, mine), (_, theirs) in zip(generated, inner):
            if (mine.default is None) != (theirs.default is None):
                raise Unproven(mine.name.value, "a default was added or left out")
            if mine.default is not None:
                assert theirs.default is not None  # both or neither, checked above
                side.same(mine.default, theirs.default, annotation=False)
            if mine.annotation is not None:
                if theirs.annotation is None:
                    raise Unproven(mine.name.value, "an annotation the inner method does not have")
                side.same(mine.annotation.annotation, theirs.annotation.annotation, annotation=True)
        if func.returns is not None:
            if inner_node.returns is None:
                raise Unproven("return", "a return annotation the inner method does not have")
            side.same(func.returns.annotation, inner_node.returns.annotation, annotation=True)

    # -- a learned hook --------------------------------------------------------------------------------
    def learned(self, cls: str, index: int, func: cst.FunctionDef, entry: MemberPlan) -> None:
        """The written def is the reference's, statement for statement, with only the plan's `self.`
        renames; each module-level name it reads is, at call time, what the reference's file meant."""
        from ..codemods.retarget import Retarget, pp_respelled

        synthesis = learned_synthesis(entry)
        reference = synthesis.reference
        theirs = signature_node(self.cache, reference.signature)
        assert theirs is not None, "a reference is learned only from a def signature_node parsed (synthesize._learn)"
        ref_source = self.cache.read(self.tree.srt / reference.signature.file)
        ref_scope = scope_of(self.cache, ref_source, frozenset({reference.owner.name}))
        owner = reference.owner.name
        before = ref_scope.member_statement(owner, reference.signature.name)
        self._same_signature(_Sides(self, ref_scope, owner, before, cls, index), func, theirs, entry.member.name)
        receiver = _parameters(theirs.params, has_receiver=False)[0][1].name.value
        expected = cst.Module(body=[pp_respelled(theirs, receiver, synthesis.pp_call)]).visit(Retarget(receiver, synthesis.renames())).body[0]
        assert isinstance(expected, cst.FunctionDef), "retargeting a def keeps it a def"
        key = (ref_source.path, reference.signature.line, reference.signature.name)
        known = self.cache.memo(_DEFINITION_LOCALS, dict)
        if key not in known:
            known[key] = _locals_of(theirs)
        side = _BodySides(self, ref_scope, owner, None, cls, index, known[key])
        side.same(func.body, expected.body, annotation=False)

    # -- a body -----------------------------------------------------------------------------------------
    def body(self, func: cst.FunctionDef) -> None:
        """Names a generated body reads are its own locals, or builtins nothing in the module rebinds.
        The generated defs are analysed on their own: what one does not bind itself is the module's or
        a builtin, and the module scope says which (a method body does not see its class's names)."""
        statements = func.body.body if isinstance(func.body, cst.IndentedBlock) else []
        function_scope = self._generated_scopes().get(statements[0]) if statements else None
        if function_scope is None:
            raise Unproven(func.name.value, "the generated body could not be analysed")
        bound_here = self.scope.module_names()
        for access in function_scope.accesses:
            referents = access.referents
            if referents and all(referent.scope is function_scope for referent in referents):
                continue  # its own local
            name = _access_name(access.node)
            if name.split(".")[0] in bound_here:
                raise Unproven(name, "the module rebinds a builtin the generated body uses")
            if not referents:
                raise Unproven(name, "the generated body reads a name nothing binds")
            if not all(isinstance(referent, BuiltinAssignment) for referent in referents):
                raise Unproven(name, "the module rebinds a builtin the generated body uses")

    def _generated_scopes(self) -> Mapping[cst.CSTNode, Scope | None]:
        """Scope analysis of every generated def of the file at once, as methods of one class: one
        ScopeProvider run a file, not one a def (each run costs tens of milliseconds however small)."""
        if self._body_scopes is None:
            from libcst.metadata import MetadataWrapper, ScopeProvider

            generated = {
                id(statement): statement
                for cls, _ in self.scope.classes.values()
                for statement in cls.body.body
                if isinstance(statement, cst.FunctionDef) and _marked(statement)
            }
            holder = cst.ClassDef(name=cst.Name("__eaglepatch_generated__"), body=cst.IndentedBlock(body=list(generated.values())))
            module = cst.Module(body=[holder] if generated else [])
            self._body_scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
        return self._body_scopes

    # -- errors ------------------------------------------------------------------------------------------
    def error(self, cls: str, entry: MemberPlan, problem: Unproven) -> EaglepatchError:
        line = self._original_line(cls, problem.culprit)
        if entry.fix is not None and entry.fix.kind == "synthesize":
            inner = f" (learned from {learned_synthesis(entry).reference.signature.at})"
        else:
            inner = f" (copied from {entry.defined.at})" if entry.defined is not None else ""
        return EaglepatchError(
            f"cannot prove {problem.name} in {cls}.{entry.member.name}{inner}: {problem.why}; "
            "this file is left as it is",
            path=self.source.rel,
            line=line,
        )

    def _original_line(self, cls: str, culprit: Culprit | None) -> int | None:
        """The culprit binding's line in the file as it is on disk (nothing was written); else the class's."""
        module = cst.parse_module(self.text)  # whole: statements aligned with CPython's, for their lines
        patched = Parsed(self.source, module, 0, self.text)
        node = None
        if culprit is not None and culprit[1] >= 0:
            owner, index, _ = culprit
            body = module.body if owner is None else _class_body(module, owner)
            node = body[index] if body is not None and 0 <= index < len(body) else None
        if node is None:
            node = next((s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == cls), None)
        span = patched.statement_span(node) if node is not None else None
        if span is None:
            return None
        return _old_line(self.source.text, self.text, span[0])


class _Sides:
    """One generated signature against the inner one: where each side looks its names up."""

    def __init__(self, proof: _Proof, inner_scope: ModuleScope, owner: str, inner_before: int | None, cls: str, index: int):
        self.proof = proof
        self.inner_scope = inner_scope
        self.owner = owner
        self.inner_before = inner_before
        self.cls = cls
        self.index = index

    def same(self, mine: cst.CSTNode, theirs: cst.CSTNode, annotation: bool, in_string: bool = False, literal: bool = False) -> None:
        """`mine` (in the wrapper) means what `theirs` (in the inner file) means, or Unproven."""
        if isinstance(theirs, cst.Name):
            self._name(mine, theirs, annotation, in_string)
            return
        if isinstance(theirs, cst.Attribute) and isinstance(mine, cst.Attribute) and mine.attr.value == theirs.attr.value:
            self.same(mine.value, theirs.value, annotation, in_string, literal)
            return
        if annotation and not literal and isinstance(theirs, cst.SimpleString) and isinstance(mine, cst.SimpleString):
            parsed_mine, parsed_theirs = parse_string(mine), parse_string(theirs)
            if parsed_mine is None or parsed_theirs is None:
                if mine.evaluated_value == theirs.evaluated_value:
                    return
                raise Unproven(mine.value, "a string annotation was changed")
            self.same(parsed_mine, parsed_theirs, annotation, True, False)
            return
        if type(mine) is not type(theirs):
            raise Unproven(_flat_code(mine), f"it is not the inner's {_flat_code(theirs)}")
        if isinstance(theirs, cst.Subscript) and annotation and is_literal_subscript(theirs):
            literal = True
        self._children(mine, theirs, annotation, in_string, literal)

    def _children(self, mine: cst.CSTNode, theirs: cst.CSTNode, annotation: bool, in_string: bool, literal: bool) -> None:
        for item in dataclasses.fields(theirs):
            if item.name.startswith(_SKIP_FIELDS):
                continue
            a, b = getattr(mine, item.name), getattr(theirs, item.name)
            if item.name in _NOT_FREE:
                if (a is None) != (b is None) or (a is not None and a.value != b.value):
                    raise Unproven(_flat_code(mine), f"it is not the inner's {_flat_code(theirs)}")
                continue
            pairs = list(zip(a, b)) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else [(a, b)]
            if isinstance(a, (list, tuple)) and len(a) != len(b):
                raise Unproven(_flat_code(mine), f"it is not the inner's {_flat_code(theirs)}")
            for x, y in pairs:
                if isinstance(x, cst.CSTNode) and isinstance(y, cst.CSTNode):
                    self.same(x, y, annotation, in_string, literal)
                elif isinstance(x, cst.CSTNode) or isinstance(y, cst.CSTNode):
                    raise Unproven(_flat_code(mine), f"it is not the inner's {_flat_code(theirs)}")
                elif x != y and not isinstance(x, cst.MaybeSentinel):
                    raise Unproven(_flat_code(mine), f"it is not the inner's {_flat_code(theirs)}")

    def _name(self, mine: cst.CSTNode, theirs: cst.Name, annotation: bool, in_string: bool) -> None:
        proof = self.proof
        inner_lazy = in_string or (annotation and self.inner_scope.future_annotations)
        wrapper_lazy = in_string or (annotation and proof.scope.future_annotations)
        meaning = inner_meaning(self.inner_scope, proof.exports, theirs.value, self.owner, self.inner_before, inner_lazy)
        if meaning.kind == UNKNOWN:
            raise Unproven(theirs.value, meaning.why)
        chain = cst_dotted_name(mine)
        if chain:
            root, _, rest = chain.partition(".")
            found = wrapper_binding(proof.scope, proof.exports, root, self.cls, None, self.index, wrapper_lazy)
            if found.qualified is None:
                raise Unproven(root, found.problem, found.culprit)
            if found.type_only and meaning.kind != TYPE_ONLY:
                raise Unproven(root, found.problem, found.culprit)
            got = proof.exports.canonical(f"{found.qualified}.{rest}" if rest else found.qualified)
            if got != meaning.qualified:
                raise Unproven(chain, f"it is {got} in the wrapper, and {meaning.qualified} in the inner file")
            return
        literal = meaning.literal
        if not annotation and isinstance(mine, cst.BaseExpression) and immutable_literal(mine) and literal is not None and same_literal(mine, literal):
            return
        kind = "class attribute" if meaning.kind == CLASS_ATTRIBUTE else meaning.kind
        raise Unproven(theirs.value, f"{_flat_code(mine)} is not the inner's {theirs.value} ({kind} {meaning.qualified})")


class _BodySides(_Sides):
    """A learned body against its reference: locals must be the same names; a module-level name is
    looked up when the method runs (the module's globals, never a class body or a type checker's)."""

    def __init__(self, proof: _Proof, inner_scope: ModuleScope, owner: str, inner_before: int | None, cls: str, index: int, local: frozenset[str]):
        super().__init__(proof, inner_scope, owner, inner_before, cls, index)
        self.local = local

    def same(self, mine: cst.CSTNode, theirs: cst.CSTNode, annotation: bool, in_string: bool = False, literal: bool = False) -> None:
        if isinstance(theirs, cst.Name) and theirs.value in self.local:
            if not isinstance(mine, cst.Name) or mine.value != theirs.value:
                raise Unproven(_flat_code(mine), f"it is not the reference's {theirs.value}")
            return
        if isinstance(theirs, cst.Name):
            meaning = inner_meaning(self.inner_scope, self.proof.exports, theirs.value, None, None, True)
            if meaning.kind == TYPE_ONLY:
                raise Unproven(theirs.value, f"{theirs.value} is bound only for type checkers in {self.inner_scope.dotted}")
            self._name(mine, theirs, False, True)  # in_string: resolved in the module's globals at call time
            chain = cst_dotted_name(mine)
            found = wrapper_binding(self.proof.scope, self.proof.exports, chain.partition(".")[0], self.cls, None, self.index, True)
            if found.type_only:
                raise Unproven(chain, found.problem or "it is bound only for type checkers", found.culprit)
            return
        if isinstance(theirs, (cst.BaseSuite, cst.BaseStatement, cst.BaseSmallStatement)) or not isinstance(theirs, cst.BaseExpression):
            if type(mine) is not type(theirs):
                raise Unproven(_flat_code(mine), f"it is not the reference's {_flat_code(theirs)}")
            self._children(mine, theirs, annotation, in_string, literal)
            return
        super().same(mine, theirs, annotation, in_string, literal)


def _locals_of(func: cst.FunctionDef) -> frozenset[str]:
    """Names the function binds itself: parameters, assignments, loop and comprehension targets."""
    from libcst.metadata import MetadataWrapper, ScopeProvider

    module = cst.Module(body=[func])
    scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    names: set[str] = set()
    for scope in {s for s in scopes.values() if s is not None}:
        if scope is scope.globals:
            continue
        names |= {assignment.name for assignment in scope.assignments}
    return frozenset(names)


# --------------------------------------------------------------------------- small helpers


def _marked(func: cst.FunctionDef) -> bool:
    return any(line.comment is not None and line.comment.value.startswith((MARKER, LEARNED)) for line in func.leading_lines)


def _decorators(func: cst.FunctionDef) -> list[str]:
    return [cst_dotted_name(d.decorator) for d in func.decorators]


def _binding_of(func: cst.FunctionDef) -> str:
    names = {
        cst_dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator).rsplit(".", 1)[-1]
        for d in func.decorators
    }
    return "static" if "staticmethod" in names else "class" if "classmethod" in names else "instance"


def _parameters(params: cst.Parameters, has_receiver: bool) -> list[tuple[str, cst.Param]]:
    """(kind, parameter) in order, without the receiver."""
    out = [("posonly", p) for p in params.posonly_params] + [("regular", p) for p in params.params]
    if has_receiver and out:
        out = out[1:]
    if isinstance(params.star_arg, cst.Param):
        out.append(("vararg", params.star_arg))
    out += [("kwonly", p) for p in params.kwonly_params]
    if isinstance(params.star_kwarg, cst.Param):
        out.append(("varkw", params.star_kwarg))
    return out


def _is_forwarding_everything(func: cst.FunctionDef) -> bool:
    """`def m(self, *args, **kwargs)`, nothing annotated, no default: nothing to prove in it."""
    kinds = [(kind, p) for kind, p in _parameters(func.params, has_receiver=False)]
    if [k for k, _ in kinds] != ["regular", "vararg", "varkw"] or func.returns is not None:
        return False
    return all(p.default is None and p.annotation is None for _, p in kinds)


def _class_body(module: cst.Module, cls: str) -> Sequence[cst.BaseStatement] | Sequence[cst.BaseSmallStatement] | None:
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value == cls:
            return statement.body.body
    return None


def _old_line(old: str, new: str, line: int) -> int:
    """Line `line` of the patched text, as a line of the text before the patch."""
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for tag, a0, _a1, b0, b1 in matcher.get_opcodes():
        if b0 < line <= b1:
            return a0 + (line - b0) if tag == "equal" else a0 + 1
    return line


def _flat_code(node: cst.CSTNode) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())


def _access_name(node: cst.Name | cst.Attribute | cst.BaseString) -> str:
    """The name a scope access reads: a Name's (or a string's) own text, else the node's code (a dotted name)."""
    return node.value if isinstance(node, (cst.Name, cst.SimpleString)) else _flat_code(node)


def prove_plumbing(rel: str, text: str, written: str, pieces: Sequence[PlumbingPiece], line_length: int) -> None:
    """The plumbing as the codemod wrote it (`written`, from `text`) is what `check` proved in `ast`:
    every class it went into parses to the same syntax tree as the class with the plan's pieces put
    into it (plumbing/planner.patched_sources, the tree the analysis judged), a second run changes
    nothing and revert gives `text` back.  Anything else is an error for the file: nothing is written."""
    from ..codemods.add_plumbing import PlumbingNotWritten
    from ..codemods.remove_plumbing import rerun_and_revert
    from ..plumbing.gate import SourceClasses
    from ..plumbing.planner import patched_sources

    def fail(why: str) -> EaglepatchError:
        return EaglepatchError(f"the plumbing as written {why}; report it, and fix one class at a time with --model", path=rel)

    try:
        proven = patched_sources(SourceClasses({rel: text}), pieces)
        seen = SourceClasses({rel: written})
    except (ValueError, SyntaxError) as exc:
        raise fail(f"cannot be read back ({exc})") from None
    for key, cls in proven.items():
        found = seen.mro(key)
        if not found or ast.dump(found[0].node) != ast.dump(cls.node):
            raise fail(f"is not the code check proved in {cls.name}")
    try:
        again, back, kept = rerun_and_revert(written, pieces, line_length)
    except PlumbingNotWritten:  # its markers gone, a second run finds the pieces' places taken
        raise fail("would change again on a second run") from None
    if again != written:
        raise fail("would change again on a second run")
    if back != text or kept:
        raise fail("would not be taken back whole by revert")
