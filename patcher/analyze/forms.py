"""Analyze stage: spell a copied signature so that each name in it means, in the wrapper, what it meant in the inner file.

For every free name of a default or annotation, in order of preference:

1. the wrapper's own binding, when it provably is the same object (same canonical qualified name);
2. an import from where the inner file gets it (under the same name, or under an alias when the
   wrapper or the wrapper's class body binds that name to something else);
3. for a class attribute of the inner class, `Owner.NAME` (the owner class imported as in 2);
4. for a default, the literal itself, when the name is bound to an immutable literal.

When none works, an annotation is left out (nothing needs it at run time), and a default makes
the whole delegation take `*args, **kwargs`, with a one-line comment saying why.  The proof stage
(patcher/rewrite/verify.py) checks the result on the written text; this module only chooses.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import libcst as cst

from ..codemods.respell import Respell, free_names
from ..read.meanings import (
    BUILTIN,
    CLASS_ATTRIBUTE,
    CONSTANT,
    GLOBAL,
    TYPE_ONLY,
    Meaning,
    inner_meaning,
    wrapper_binding,
)
from ..read.scopes import BUILTINS, Exports, ModuleScope, scope_of
from ..read.source_cache import SourceCache
from ..read.text import SourceFile
from ..records import MemberPlan, Signature
from .class_index import signature_node

if TYPE_CHECKING:
    from ..read.locate import SourceTree

Import = tuple[str, str | None, str | None]  # (module, object or None, asname or None)
Spec = tuple[str, str | None]  # where a name is imported from: (module, object or None), as Binding.spec
ParamSlot = cst.Param | cst.ParamStar | cst.MaybeSentinel  # what a Parameters field holds

FALLBACK_PARAMS = cst.ensure_type(cst.parse_statement("def f(self, *args, **kwargs): ..."), cst.FunctionDef).params
_TIGHT_EQUAL = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


@dataclass
class SignatureForm:
    """The signature a delegation is written with, and what it needs."""

    params: cst.Parameters
    returns: cst.Annotation | None
    imports: tuple[Import, ...] = ()
    fallback: str = ""  # why the signature is not copied: then it is `(self, *args, **kwargs)`
    dropped: tuple[str, ...] = ()  # annotations left out, as "name: why"


@dataclass
class PendingSpelling:
    """What spelling one expression needs, committed only if every name in it can be spelled."""

    imports: dict[str, Import] = field(default_factory=dict)  # local name -> import
    meanings: dict[str, str] = field(default_factory=dict)  # local name -> canonical qualified


class WrapperSpelling:
    """How one wrapper file spells copied names: the imports this run adds and the aliases it chose,
    shared by every delegation written into the file, so no name is imported two ways."""

    def __init__(self, cache: SourceCache, tree: SourceTree, wrapper: SourceFile, members: dict[str, set[str]] | None = None):
        self.cache = cache
        self.tree = tree
        self.scope: ModuleScope = scope_of(cache, wrapper, frozenset(members) if members else None)
        self.exports = Exports.of(cache, tree)
        self.members = members or {}  # class -> names the run adds to it (they shadow as class attributes do)
        self.imports: dict[str, Import] = {}  # local name -> import this run adds
        self.meanings: dict[str, str] = {}  # local name -> what this run imports it as
        taken = self.scope.module_names() | BUILTINS
        for cls in self.scope.classes:
            taken |= self.scope.class_names(cls)
        for names in self.members.values():
            taken |= names
        self.taken = taken

    # -- one name ------------------------------------------------------------------------------
    def class_names(self, cls: str) -> set[str]:
        return self.scope.class_names(cls) | self.members.get(cls, set())

    def local_for(self, local: str, target: str, spec: Spec | None, cls: str, lazy: bool, pending: PendingSpelling) -> str | None:
        """A name that is bound to `target` where the class body of `cls` (or, `lazy`, the module)
        evaluates it, importing `spec` if needed; None when the wrapper cannot have one."""
        planned = pending.meanings.get(local, self.meanings.get(local))
        if planned is not None:
            if planned == target and (lazy or local not in self.class_names(cls)):
                return self._reuse(local, pending)
        else:
            resolution = wrapper_binding(self.scope, self.exports, local, cls, self.class_names(cls), None, lazy)
            if resolution.qualified == target and not resolution.type_only and not resolution.via_star:
                return local  # (a name only a star import binds gets an import of its own: it reads plainly)
        if spec is None or spec[0] == self.scope.dotted:
            return None  # nothing to import it from but the wrapper itself
        for name, meaning in {**self.meanings, **pending.meanings}.items():
            if meaning == target and (lazy or name not in self.class_names(cls)) and name not in self.scope.module_names():
                return self._reuse(name, pending)  # imported under an alias already
        if planned is None and self._may_bind(local, target, cls, lazy, spec):
            return self._plan(local, spec, target, pending, asname=None if _binds_as(spec) == local else local)
        alias = self._fresh(f"{(spec[0].rsplit('.', 1)[-1])}_{local}", pending)
        return self._plan(alias, spec, target, pending, asname=alias)

    def _may_bind(self, local: str, target: str, cls: str, lazy: bool, spec: Spec) -> bool:
        """Importing `local` at the top of the module binds it to `target` for the class body, and
        rebinds nothing the module means otherwise."""
        if not lazy and local in self.class_names(cls):
            return False
        if local in self.scope.rebound_by_functions or local in BUILTINS:
            return False
        if any(module == spec[0] for module, _ in self.scope.star_imports):
            return False  # AddImportsVisitor reads a star import as importing everything
        bound = {self.exports.canonical(b.qualified) for b in self.scope.module_bindings(local)}
        return bound <= {target} and self._stars_agree(local, target)

    def _stars_agree(self, local: str, target: str) -> bool:
        """No star import of the wrapper binds `local` to something else (it would rebind the import)."""
        for module, _ in self.scope.star_imports:
            provided = self.exports.star_provides(module, local)
            if provided is not None and self.exports.canonical(provided) != target:
                return False
        return True

    def _fresh(self, wanted: str, pending: PendingSpelling) -> str:
        alias = wanted
        while alias in self.taken or alias in self.imports or alias in pending.imports:
            alias = f"_{alias}"
        return alias

    @staticmethod
    def _plan(local: str, spec: Spec, target: str, pending: PendingSpelling, asname: str | None) -> str:
        module, obj = spec
        pending.imports[local] = (module, obj, asname)
        pending.meanings[local] = target
        return local

    def _reuse(self, local: str, pending: PendingSpelling) -> str:
        """A name this run already imports: the delegation using it lists the import too (its marker)."""
        if local in self.imports:
            pending.imports.setdefault(local, self.imports[local])
        return local

    def commit(self, pending: PendingSpelling) -> None:
        self.imports.update(pending.imports)
        self.meanings.update(pending.meanings)

    def snapshot(self) -> tuple[dict, dict]:
        return dict(self.imports), dict(self.meanings)

    def restore(self, snapshot: tuple[dict, dict]) -> None:
        """Forget what a signature that falls back to `*args, **kwargs` planned to import."""
        self.imports, self.meanings = dict(snapshot[0]), dict(snapshot[1])

    # -- one meaning ---------------------------------------------------------------------------
    def spell(self, name: str, meaning: Meaning, cls: str, lazy: bool, default: bool, pending: PendingSpelling) -> cst.BaseExpression | None:
        """The wrapper's spelling of what `name` meant to the inner method, or None when none is proven."""
        if meaning.kind == CONSTANT:
            return cst.Name(name)
        if meaning.kind == TYPE_ONLY:
            if not default and lazy:  # never evaluated: kept when the wrapper type-checks it the same way
                resolution = wrapper_binding(self.scope, self.exports, name, cls, None, None, True)
                if resolution.qualified == meaning.qualified:
                    return cst.Name(name)
            return None
        if meaning.kind in (GLOBAL, BUILTIN):
            local = self.local_for(name, meaning.qualified, meaning.spec, cls, lazy, pending)
            if local is not None:
                return cst.Name(local)
        if meaning.kind == CLASS_ATTRIBUTE and meaning.owner is not None:
            module, owner = meaning.owner
            target = self.exports.canonical(f"{module}.{owner}")
            local = self.local_for(owner, target, (module, owner), cls, lazy, pending)
            if local is not None:
                return cst.Attribute(value=cst.Name(local), attr=cst.Name(name))
        if default and meaning.literal is not None:
            return copy.deepcopy(meaning.literal)
        return None


def _binds_as(spec: Spec) -> str:
    module, obj = spec
    return obj if obj else module.split(".")[0]


# --------------------------------------------------------------------------- a whole signature


@dataclass
class _InnerSide:
    scope: ModuleScope
    owner: str
    before: int | None


def _inner_def(spelling: WrapperSpelling, entry: MemberPlan) -> tuple[Signature, cst.FunctionDef]:
    """The inner method a signature is copied from, and its def."""
    signature = entry.defined
    assert signature is not None, "a signature is copied only for a member an inner class defines"
    node = signature_node(spelling.cache, signature)
    # callers copy a signature once signature_node has parsed it (edits.delegation_for), or from a learned reference
    assert node is not None, "a copied signature's def was parsed before it is spelled"
    return signature, node


def copied_signature(spelling: WrapperSpelling, entry: MemberPlan, cls: str) -> SignatureForm:
    """The inner method's signature as written, with nothing imported: what eaglepatch once wrote."""
    _, node = _inner_def(spelling, entry)
    return SignatureForm(node.params, node.returns)


def respelled_signature(spelling: WrapperSpelling, entry: MemberPlan, cls: str) -> SignatureForm:
    """The inner method's signature with every name spelled the wrapper's way (see the module docstring)."""
    signature, node = _inner_def(spelling, entry)
    inner_source = spelling.cache.read(spelling.tree.srt / signature.file)
    inner_scope = scope_of(spelling.cache, inner_source, frozenset({signature.owner}))
    inner = _InnerSide(inner_scope, signature.owner, inner_scope.member_statement(signature.owner, signature.name))
    dropped: list[str] = []
    used: dict[str, Import] = {}
    before = spelling.snapshot()

    def respell(expression: cst.BaseExpression | None, default: bool) -> tuple[cst.BaseExpression | None, str]:
        if expression is None:
            return None, ""
        pending = PendingSpelling()
        spelled, why = _respell_expression(spelling, inner, expression, cls, default, pending)
        if spelled is not None:
            spelling.commit(pending)
            used.update(pending.imports)
        return spelled, why

    def fix(param: ParamSlot) -> tuple[ParamSlot | None, str]:
        """(the parameter spelled the wrapper's way, "") or (None, why its default cannot be)."""
        if not isinstance(param, cst.Param):
            return param, ""
        changes: dict[str, object] = {}
        if param.default is not None:
            default, why = respell(param.default, True)
            if default is None:
                return None, f"the default of {param.name.value} ({_flat_code(param.default)}) cannot be spelled here: {why}"
            changes["default"] = default
        if param.annotation is not None:
            annotation, why = respell(param.annotation.annotation, False)
            if annotation is None:
                dropped.append(f"{param.name.value}: {why}")
                changes["annotation"] = None
                if param.default is not None:  # `name=default`, as black writes it unannotated
                    changes["equal"] = _TIGHT_EQUAL
            else:
                changes["annotation"] = param.annotation.with_changes(annotation=annotation)
        return param.with_changes(**changes), ""

    params = node.params
    changes: dict[str, object] = {}
    for group in ("posonly_params", "params", "kwonly_params", "star_arg", "star_kwarg"):
        value = getattr(params, group)
        fixed = []
        for param in value if isinstance(value, (list, tuple)) else [value]:
            new, why = fix(param)
            if why:
                spelling.restore(before)
                return _fallback(why)
            fixed.append(new)
        changes[group] = fixed if isinstance(value, (list, tuple)) else fixed[0]
    returns = node.returns
    if returns is not None:
        annotation, why = respell(returns.annotation, False)
        if annotation is None:
            dropped.append(f"return: {why}")
            returns = None
        else:
            returns = returns.with_changes(annotation=annotation)
    new_params = params.with_changes(**changes)
    used_names = {n.name for expr in _expressions(new_params, returns) for n in free_names(expr, True)[0]}
    imports = tuple(spec for local, spec in sorted(used.items()) if local in used_names)
    return SignatureForm(new_params, returns, imports, dropped=tuple(dropped))


def _fallback(why: str) -> SignatureForm:
    return SignatureForm(FALLBACK_PARAMS, None, fallback=why)


def _respell_expression(
    spelling: WrapperSpelling, inner: _InnerSide, expression: cst.BaseExpression, cls: str, default: bool, pending: PendingSpelling
) -> tuple[cst.BaseExpression | None, str]:
    """(the expression in the wrapper's spelling, "") or (None, why not)."""
    annotation = not default
    names, readable = free_names(expression, annotation)
    if not readable:
        return None, "it binds names of its own or holds a string that is not an expression"
    inner_future = annotation and inner.scope.future_annotations
    wrapper_future = annotation and spelling.scope.future_annotations
    eager: dict[str, cst.BaseExpression] = {}
    lazy: dict[str, cst.BaseExpression] = {}
    for free in names:
        table = lazy if free.in_string else eager
        if free.name in table:
            continue
        meaning = inner_meaning(
            inner.scope, spelling.exports, free.name, inner.owner, inner.before, lazy=free.in_string or inner_future
        )
        spelled = spelling.spell(free.name, meaning, cls, free.in_string or wrapper_future, default, pending)
        if spelled is None:
            return None, meaning.why or f"{free.name} ({meaning.qualified or meaning.kind}) has no proven spelling in the wrapper"
        table[free.name] = spelled
    return cast(cst.BaseExpression, expression.visit(Respell(eager, lazy, annotation))), ""  # Respell replaces names, removes nothing


def _expressions(params: cst.Parameters, returns: cst.Annotation | None) -> Iterator[cst.BaseExpression]:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    for param in every:
        if param.default is not None:
            yield param.default
        if param.annotation is not None:
            yield param.annotation.annotation
    if returns is not None:
        yield returns.annotation


def _flat_code(node: cst.CSTNode) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())
