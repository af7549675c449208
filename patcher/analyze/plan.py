"""Analyze stage: compare what EAGLE-3 expects of a class's role with what the class and its inner model(s) have.

A member is *required* for a class when EAGLE-3 code uses it, unguarded, on a model of the
class's role (the target's hooks on a target, the draft's on a draft).  A target wrapper
also gets its inner model's draft-side hooks written beside the target's (SGLang's own
EAGLE-3-ready wrappers carry `get_embed_and_head`, `set_embed_and_head` and
`set_eagle3_layers_to_capture` together): those *companions* never fail the gate and are
not listed when they cannot be written.  A delegation is a fix only when the inner member
accepts every way EAGLE-3 code calls it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Optional

from ..read.bindings import parameters
from ..records import (
    CallShape,
    Fix,
    InnerModel,
    MemberPlan,
    ModelPlan,
    ModelRole,
    PlumbingGap,
    Protocol,
    ProtocolMember,
    Signature,
    Status,
    SynthesisFit,
    Use,
    Wrapper,
)
from .overlay import Written

# what a backbone has (its decoder layers, its token embeddings), and the names of what is not one
_DECODER_LAYERS = ("layers", "embed_tokens")
_AUXILIARY = re.compile(
    r"Vision|ViT|Visual|Image|Audio|Speech|Projector|Tower|Encoder|Patch|Logits|Head|Embedder|Aligner|Resampler|Sampler|Pooler",
    re.IGNORECASE,
)

# A use whose receiver does not say which model it is counts against the target.
_ROLE_OF_USE = {"target": "target", "unknown": "target", "draft": "draft"}

# (inner definition, call shape) -> why the call cannot bind to it, or None; parsing is the caller's
ShapeCheck = Callable[[Signature, CallShape], Optional[str]]
# (gap, class) -> a body learned from the tree (patcher/analyze/synthesize.py), or why there is none
# (entry, class, the class's members decided before it in this plan): a learned body, or why none
Synthesizer = Callable[[MemberPlan, Wrapper, Sequence[MemberPlan]], "SynthesisFit"]
# (a plumbing gap of an inherited hook, class) -> a hook learned into the class itself, or why none
Override = Callable[[MemberPlan, Wrapper], "SynthesisFit"]


def uses_for_role(uses: Iterable[Use], role: str) -> list[Use]:
    return [u for u in uses if _ROLE_OF_USE.get(u.role) == role]


def plan_wrapper(
    protocol: Protocol,
    wrapper: Wrapper,
    role: ModelRole = "target",
    role_reason: str = "",
    shape_misfit: ShapeCheck | None = None,
    synthesize: Synthesizer | None = None,
    written: Written | None = None,
    learns_companion: Callable[[str], bool] | None = None,
) -> ModelPlan:
    """`learns_companion(member)`: a class that is its own causal LM gets that draft-side member
    learned beside the target hooks it gets learned (the tree's EAGLE-3-ready causal LMs carry it)."""
    if role == "other":
        reason = role_reason or "not a generation model: EAGLE-3 never loads it"
        return ModelPlan(wrapper=wrapper, status="compliant", role=role, role_reason=role_reason, reason=reason)
    missing: list[MemberPlan] = []
    forwarded: list[MemberPlan] = []
    own = wrapper.cls.members
    needed_one = _needed_of_groups(protocol, wrapper, role, written or {})
    for name, member in protocol.members.items():
        mine = tuple(uses_for_role(member.uses, role))
        required = any(u.required for u in mine) or name in needed_one
        companion = not mine and role == "target" and member.required
        found = _locate(member, wrapper, written or {}, required, mine)
        if name in wrapper.cls.pending and (required or companion):
            missing.append(replace(found, fix=Fix("inherit", wrapper.cls.pending[name])))  # apply writes it into that base
            continue
        if name in own or (wrapper.forwards_dynamically and found.providers):
            if mine or companion:
                forwarded.append(found)
            continue
        if not (required or companion):
            continue  # optional for this role (probed with hasattr), or another role's concern
        learn = required or (companion and learns_companion is not None and _holds_bare_backbone(wrapper) and learns_companion(name))
        entry = _decide_fix(found, wrapper, shape_misfit, synthesize, learn, tuple(missing))
        if entry.fix is not None or required:
            missing.append(entry)
    learned = [m for m in missing if m.required and m.fix is not None and m.fix.kind == "synthesize"]
    if not learned or any(m.required and m.fix is None for m in missing):
        # a learned companion goes in beside learned target hooks, never alone
        missing = [m for m in missing if m.required or m.fix is None or m.fix.kind != "synthesize"]
    status, reason = _verdict(wrapper, role, missing)
    return ModelPlan(wrapper, status, role, role_reason, tuple(missing), tuple(forwarded), reason)


def _needed_of_groups(protocol: Protocol, wrapper: Wrapper, role: ModelRole, written: Written) -> set[str]:
    """For each group of which a model needs one member and this class has none (its own, pending, or
    forwarded dynamically): the member it is held to, the first an inner model defines, else the first."""
    out: set[str] = set()
    for group in protocol.one_of:
        members = [protocol.members[name] for name in group if name in protocol.members]
        if not members or not any(uses_for_role(m.uses, role) for m in members):
            continue
        have = [m for m in members if m.name in wrapper.cls.members or m.name in wrapper.cls.pending]
        if have or wrapper.forwards_dynamically:
            continue
        located = [m for m in members if _locate(m, wrapper, written, False, ()).defined is not None]
        out.add((located or members)[0].name)
    return out


def _locate(member: ProtocolMember, wrapper: Wrapper, written: Written, required: bool, uses: tuple[Use, ...]) -> MemberPlan:
    """Where the inner models define the member: as they are, or once this run's apply has written it."""
    providers: list[str] = []
    lacking: list[str] = []
    defined = None
    attribute = None
    for inner in wrapper.inners:
        for cls in inner.classes:
            signature = cls.members.get(member.name) or written.get((cls.file, cls.name), {}).get(member.name)
            if signature is not None:
                providers.append(cls.name)
                if defined is None:
                    defined, attribute = signature, inner.attribute
            else:
                lacking.append(cls.name)
    return MemberPlan(member, defined, attribute, tuple(providers), tuple(lacking), required, uses=uses)


def _decide_fix(
    entry: MemberPlan,
    wrapper: Wrapper,
    shape_misfit: ShapeCheck | None,
    synthesize: Synthesizer | None,
    learn: bool = True,
    decided: Sequence[MemberPlan] = (),
) -> MemberPlan:
    """The entry with its fix, or with the blocker saying why there is none; `learn`: a body may be
    learned for it (what its role requires, and the companions the tree's causal LMs carry).
    `decided`: the class's members decided before it (a hook learned on the plumbing another's fix
    writes is judged with that fix)."""
    if _holds_bare_backbone(wrapper) and any(i.classes for i in wrapper.inners):
        # the class is the causal LM: a hook reads its own lm_head and turns its own capture on, so it
        # needs a body, learned from a class of the tree that has one on the same shape, never a forward
        # (a backbone has no hook to give)
        fit = synthesize(entry, wrapper, decided) if synthesize is not None and learn else None
        if fit is not None and fit.synthesis is not None:
            fix = Fix("synthesize", fit.synthesis.reference.label)
            return replace(entry, fix=fix, synthesis=fit.synthesis, writes_plumbing=fit.writes_plumbing, rides_on=fit.rides_on)
        found = backbones(wrapper)
        why = fit.why if fit is not None else "the hook needs a body written on the class"
        if entry.defined is not None:
            whose = "the backbone's" if any(b.attribute == entry.inner_attribute for b in found) else f"self.{entry.inner_attribute}'s"
            why = f"forwarding to {whose} {entry.member.name} ({entry.defined.at}) would skip the class's own part; {why}"
        if found:
            return replace(entry, blocker=f"holds a bare backbone ({_held_text(found)}) beside its own lm_head: {why}")
        held = _held_text([i for i in wrapper.inners if i.classes])
        return replace(entry, blocker=f"has its own lm_head and holds no backbone ({held}: none has decoder layers): {why}")
    if entry.defined is not None and entry.inner_attribute is not None:
        misfit = _first_misfit(entry, shape_misfit)
        if misfit is None:
            return replace(entry, fix=Fix("delegate", entry.inner_attribute))
        return replace(entry, blocker=misfit)
    pending = [u for inner in wrapper.inners for u in inner.unresolved]
    holding = [f"{i.attribute}: {'/'.join(c.name for c in i.classes)}" for i in wrapper.inners if i.classes]
    if holding:
        return replace(entry, blocker=f"the inner model ({'; '.join(holding)}) lacks it: needs hand-written code")
    if pending:
        return replace(entry, blocker=f"the inner model could not be resolved: {pending[0]}")
    return replace(entry, blocker="the class neither defines it nor holds a model that does: needs hand-written code")


def backbones(wrapper: Wrapper) -> list[InnerModel]:
    """The models held without an lm_head of their own that are the class's backbone: those whose
    class has decoder layers (`layers`, or the token embeddings) and whose attribute and class are not
    named for a tower, projector, embedder, head or logits processor; else those not so named; else
    those with decoder layers; else none (the class holds only heads and helpers beside its layers)."""
    bare = [i for i in wrapper.inners if i.classes and all("lm_head" not in c.members for c in i.classes)]

    def layered(inner: InnerModel) -> bool:
        return any(name in c.members for c in inner.classes for name in _DECODER_LAYERS)

    def plain(inner: InnerModel) -> bool:
        return not _AUXILIARY.search(inner.attribute) and not any(_AUXILIARY.search(c.name) for c in inner.classes)

    for keep in (lambda inner: layered(inner) and plain(inner), plain, layered):
        found = [inner for inner in bare if keep(inner)]
        if found:
            return found
    return []


def _held_text(inners: list[InnerModel]) -> str:
    return "; ".join(f"{i.attribute}: {'/'.join(c.name for c in i.classes)}" for i in inners)


def _holds_bare_backbone(wrapper: Wrapper) -> bool:
    """The class is the causal LM itself: its own lm_head, and inner models without one."""
    if "lm_head" not in wrapper.cls.members:
        return False
    return all("lm_head" not in cls.members for inner in wrapper.inners for cls in inner.classes)


def _first_misfit(entry: MemberPlan, shape_misfit: ShapeCheck | None) -> str | None:
    if shape_misfit is None or entry.defined is None or entry.defined.kind != "method":
        return None
    for use in entry.uses or entry.member.uses:
        if use.shape is None:
            continue
        why = shape_misfit(entry.defined, use.shape)
        if why is not None:
            return (
                f"{entry.defined.owner}.{entry.member.name} ({entry.defined.at}) cannot take the call at "
                f"{use.at} {use.shape.describe()}: {why}"
            )
    return None


def _verdict(wrapper: Wrapper, role: ModelRole, missing: list[MemberPlan]) -> tuple[Status, str]:
    """The verdict on a class, and its one-line reason."""
    blocked = [m for m in missing if m.required and m.fix is None]
    if blocked:
        unresolved = not any(i.classes for i in wrapper.inners) and any(i.unresolved for i in wrapper.inners)
        lacking = [m for m in blocked if m.gap == "member"]
        if not lacking:
            return "needs_code", f"{blocked[0].member.name} cannot work: {blocked[0].blocker}"
        names = ", ".join(m.member.name for m in lacking)
        return ("unresolved" if unresolved else "needs_code"), f"lacks {names}: {lacking[0].blocker}"
    fixes = [m for m in missing if m.fix is not None]
    if fixes:
        written = [m.fix for m in fixes if m.fix is not None and m.fix.written_here]
        inherited = len(fixes) - len(written)
        learned = sum(1 for fix in written if fix.kind == "synthesize")
        what = f"{len(written)} member(s) can be written" if learned else f"{len(written)} member(s) can be forwarded to the inner model"
        if learned:
            what += f" ({learned} learned from {', '.join(sorted({fix.to for fix in written if fix.kind == 'synthesize'}))})"
        return "fixable", what + (f", {inherited} come with a fix apply writes into a base class" if inherited else "")
    if wrapper.forwards_dynamically:
        return "dynamic", f"forwards every attribute through {wrapper.forwards_dynamically}"
    return "compliant", f"has every EAGLE-3 member a {role} model needs"


def with_broken_plumbing(
    plan: ModelPlan, member: ProtocolMember, gaps: Iterable[PlumbingGap], read: Iterable[str] = (), override: Override | None = None
) -> ModelPlan:
    """The plan of a class whose capture hook exists but cannot work: a required gap of kind plumbing
    naming every broken piece, and the verdict that follows (never compliant).  `override`: asked for a
    hook learned into the class itself, with its plumbing, that apply writes over the inherited one
    (the gap's fix, when there is one)."""
    gaps = tuple(gaps)
    defined = plan.wrapper.cls.members.get(member.name)
    uses = tuple(uses_for_role(member.uses, plan.role))
    blocker = "its forward never uses what the hook sets: " + "; ".join(g.describe() for g in gaps)
    entry = MemberPlan(member, defined, None, required=True, blocker=blocker, uses=uses, gap="plumbing", plumbing=gaps)
    fit = override(entry, plan.wrapper) if override is not None else None
    if fit is not None and fit.synthesis is not None:
        fix = Fix("synthesize", fit.synthesis.reference.label)
        entry = replace(entry, fix=fix, blocker=None, synthesis=fit.synthesis, writes_plumbing=fit.writes_plumbing)
    missing = [*plan.missing, entry]
    status, reason = _verdict(plan.wrapper, plan.role, missing)
    return replace(plan, status=status, missing=tuple(missing), reason=reason, read=tuple(dict.fromkeys([*plan.read, *read])))


def without_fix(plan: ModelPlan, member: str, blocker: str) -> ModelPlan:
    """The plan with `member`'s fix taken back (it would not work once written), `blocker` saying why,
    and the verdict that follows."""
    missing = [replace(m, fix=None, blocker=blocker) if m.member.name == member and m.fix is not None else m for m in plan.missing]
    status, reason = _verdict(plan.wrapper, plan.role, missing)
    return replace(plan, status=status, missing=tuple(missing), reason=reason)


def call_misfit(params: ast.arguments, shape: CallShape, is_method: bool = True) -> str | None:
    """Why a call of `shape` cannot bind to a def's parameters (CPython's `ast.arguments`), or None
    when it can (as Python binds)."""
    if shape.star:
        return None
    every = [*params.posonlyargs, *params.args]
    has_default = {p.arg for p, default in parameters(params) if default is not None}
    positional = every[1:] if is_method and every else every
    posonly = len(params.posonlyargs) - (1 if is_method and params.posonlyargs else 0)
    if shape.positional > len(positional) and params.vararg is None:
        return f"it takes {len(positional)} positional argument(s)"
    bound = {p.arg for p in positional[: shape.positional]}
    by_keyword = {p.arg for p in positional[max(posonly, 0) :]} | {p.arg for p in params.kwonlyargs}
    for keyword in shape.keywords:
        if keyword in bound:
            return f"{keyword} given twice"
        if keyword not in by_keyword and params.kwarg is None:
            return f"it has no parameter {keyword}"
    given = bound | set(shape.keywords)
    for param in positional[shape.positional :] + list(params.kwonlyargs):
        if param.arg not in has_default and param.arg not in given:
            return f"its parameter {param.arg} has no default"
    return None
