"""The SGLang engine's stages wired together: protocol -> resolve -> plan."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...read.style import FormatStyle
from ...records import EAGLE3, SynthesisFit
from ...selection import DEFAULT_MODEL, Analysis

if TYPE_CHECKING:  # the stages import libcst: loaded by analyze(), so `check` answered from the cache never pays for it
    from ...analyze.context import RunContext
    from ...analyze.overlay import Written
    from ...analyze.synthesize import HookLibrary
    from ...engine import Resolved
    from ...plumbing.judge import Plumber
    from ...records import CallShape, MemberPlan, ModelPlan, PlumbingPlan, Progress, Protocol, Signature, Synthesis, Wrapper

MAX_ADOPTION_ROUNDS = 3


def analyze_sglang(request: Resolved, progress: Progress | None = None) -> Analysis:
    """The protocol is extracted once and shared by every wrapper looked at."""
    from ...analyze.algorithms import run_protocol
    from ...analyze.class_index import definition_ast
    from ...analyze.context import RunContext
    from ...analyze.overlay import WrittenOverlay
    from ...analyze.plan import call_misfit, plan_wrapper
    from ...analyze.protocol import extract_protocol
    from ...analyze.resolve import Resolver, select_wrappers
    from ...analyze.roles import learn_roles
    from ...plumbing.gate import HOOK, is_capture_hook
    from ...plumbing.judge import Plumber, judge_inherited, judge_plumbing, judge_riding
    from ...read.style import load_style

    tree, selection, excluded = request.tree, request.selection, request.excluded
    models, all_models, ignore, ignore_from = selection.models, selection.all_models, selection.ignore, selection.ignore_from
    extra_consumers = list(request.consumers)
    cache = request.cache
    style = load_style(tree.models, tree.given)
    reading = RunContext(tree, cache, style)
    protocol = run_protocol(reading, extract_protocol(reading, extra_consumers, ignore, ignore_from), selection.algorithms, extra_consumers)
    run = reading.with_protocol(protocol)
    resolver = Resolver(run)
    if all_models:
        wrappers = resolver.all_wrappers(progress)
    else:
        wrappers = [w for selector in models or [DEFAULT_MODEL] for w in select_wrappers(resolver, selector)]
    roles = learn_roles(run)

    def shape_misfit(signature: Signature, shape: CallShape) -> str | None:
        node = definition_ast(cache, signature)
        if node is None:
            return None
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        return call_misfit(node.args, shape, is_method=not static)

    libraries: list[HookLibrary] = []  # the hook library, built when a first class needs a body learned (most runs need none)
    plumbers: list[Plumber] = []

    def library() -> HookLibrary:
        if not libraries:
            from ...analyze.synthesize import HookLibrary

            libraries.append(HookLibrary(resolver))
        return libraries[0]

    def synthesize(entry: MemberPlan, wrapper: Wrapper, decided: Sequence[MemberPlan]) -> SynthesisFit:
        fit = library().fit(entry, wrapper, shape_misfit)
        key = f"{wrapper.cls.file}:{wrapper.cls.name}"
        # the plumbing this class's EAGLE-3 hook is learned with (decided first: EAGLE-3's members lead the protocol)
        carried = next((m.writes_plumbing for m in decided if m.member.name == HOOK and m.fix is not None), None)
        name = entry.member.name
        if is_capture_hook(name) and name != HOOK and (fit.plumbing or fit.synthesis is not None):
            # another algorithm's capture hook: written only where the forward uses what the learned body
            # sets, as the tree has it or with the plumbing written for EAGLE-3's hook.  The gate judges
            # each reference that fits, in this class, best first (the library's own reading of the
            # plumbing knows EAGLE-3's list capture alone: a backbone that marks its layers itself is not it)
            if not plumbers:
                plumbers.append(Plumber(resolver, library()))
            plumber = plumbers[0]
            judged = plumber.learned_judged(entry, wrapper, shape_misfit, carried)
            if judged.synthesis is not None:
                return replace(judged, rides_on=carried)
            copied = None if carried is not None else with_sibling_hook(plumber, entry, wrapper, key)
            if copied is not None:
                return copied
            if fit.plumbing and carried is not None:
                fit = library().fit(entry, wrapper, shape_misfit, plumbed=True)  # on the plumbing written for EAGLE-3's hook
            if fit.synthesis is not None:  # the best that fits, and why it would not work here
                broken = "; ".join(plumber.judge_learned(key, name, fit.synthesis, carried))
                why = f"the {name} learned from {fit.synthesis.reference.label} would not work here: {broken}"
                return SynthesisFit(why=why + f" (eaglepatch writes plumbing for {HOOK} alone)")
            return fit
        if fit.synthesis is None and not fit.plumbing:
            return fit  # no body to learn, whatever the plumbing
        if not plumbers:
            plumbers.append(Plumber(resolver, library()))
        return plumbers[0].fit(entry, wrapper, fit, shape_misfit)

    def with_sibling_hook(plumber: Plumber, entry: MemberPlan, wrapper: Wrapper, key: str) -> SynthesisFit | None:
        """The hook learned to hand its layers to the backbone's own hook of that name, which the backbone
        gets copied from its sibling (EAGLE-3's, marking the layers its forward captures): the mirror of
        the copy EAGLE-3's hook gets (plumbing/planner.sibling_hook), judged by the gate with it written."""
        from ...analyze.plan import backbones

        name = entry.member.name
        for held in backbones(wrapper):
            plan = plumber.planner.sibling_plan(key, held.attribute, name)
            if plan is None:
                continue

            def works_with(synthesis: Synthesis, plan: PlumbingPlan = plan) -> str:
                return "; ".join(plumber.judge_learned(key, name, synthesis, plan))

            fit = library().fit(entry, wrapper, shape_misfit, plumbed=True, judge=works_with, backbone_gains=plan.hooks_written)
            if fit.synthesis is not None:
                return replace(fit, writes_plumbing=plan)
        return None

    companions: dict[str, bool] = {}

    def learns_companion(member: str) -> bool:
        if member not in companions:
            companions[member] = carried_beside_hooks(library(), protocol, member)
        return companions[member]

    reaches = [_classes_reached(w) for w in wrappers]
    planned: dict[int, tuple[Written, ModelPlan]] = {}  # by wrapper: the writes it saw, and its plan

    def plan_all(written: Written) -> list[ModelPlan]:
        """A wrapper's plan reads only the writes into classes it reaches: one whose slice of this
        round's writes is last round's keeps its plan (most are planned once)."""
        seen = WrittenOverlay(written)
        plans = []
        for index, w in enumerate(wrappers):
            sliced = {key: members for key, members in written.items() if key[1] in reaches[index]}
            last = planned.get(index)
            if last is None or last[0] != sliced:
                plan = plan_wrapper(protocol, seen.wrapper(w), *roles.role_of(w.cls), shape_misfit, synthesize, written, learns_companion)
                last = planned[index] = (sliced, plan)
            plans.append(last[1])
        return plans

    # what apply writes into a class serves, in the same run, its subclasses (they inherit it) and the
    # wrappers that hold it (they can forward to it): plan again through this round's writes until they
    # no longer change (analyze/overlay.py)
    written: Written = {}
    plans = plan_all(written)
    for _ in range(MAX_ADOPTION_ROUNDS):
        now = {(p.wrapper.cls.file, p.wrapper.cls.name): _written(p) for p in plans if p.writes}
        if now == written:
            break
        written = now
        plans = plan_all(written)

    def override(entry: MemberPlan, wrapper: Wrapper) -> SynthesisFit:
        if not plumbers:
            plumbers.append(Plumber(resolver, library()))
        return plumbers[0].override(entry, wrapper, shape_misfit)

    if plumbers:
        plans = judge_inherited(plumbers[0], plans, override)
    plans = judge_riding(plans)
    plans = judge_plumbing(resolver, plans, plumbers[0].classes if plumbers else None, override)
    _require_read(run, plans)
    warnings = list(protocol.warnings) + resolver.warnings + [_not_followed(style, note) for note in style.not_followed]
    warnings += [f"{cache.rel(path)}: left out by --exclude: not read, and not checked" for path in sorted(excluded)]
    return Analysis(request.engine, tree, cache, protocol, tuple(plans), tuple(warnings), all_models, style)


def _classes_reached(wrapper: Wrapper) -> frozenset[str]:
    """The class names whose writes a wrapper's plan can see: its class, its inner models' classes,
    and their bases (the overlay finds a base by name where it has no file)."""
    classes = (wrapper.cls, *(c for inner in wrapper.inners for c in inner.classes))
    return frozenset(name for c in classes for name in (c.name, *c.bases))


def carried_beside_hooks(library: HookLibrary, protocol: Protocol, member: str) -> bool:
    """Most of the tree's causal LMs that implement every target hook on a bare backbone implement the
    draft-side `member` too (SGLang's EAGLE-3-ready ones carry `set_embed_and_head`): a class that gets
    the target hooks learned gets it learned beside them."""
    targets = [m for m in protocol.members.values() if m.required and m.role in ("target", "unknown") and EAGLE3 in m.needed_by]
    if not targets:
        return False
    ready = set.intersection(*({r.label for r in library.references(m.name)} for m in targets))
    if not ready:
        return False
    carried = ready & {r.label for r in library.references(member)}
    return 2 * len(carried) > len(ready)


def depended_on(plans: Iterable[ModelPlan]) -> list[str]:
    """The files (relative to srt) the verdicts were read from: each class's module and those of its
    bases, inner models and members, and each learned body's reference."""
    files: dict[str, None] = {}
    for plan in plans:
        wrapper = plan.wrapper
        files.update(dict.fromkeys([wrapper.path, wrapper.cls.file, *plan.read]))
        files.update(dict.fromkeys(s.file for s in wrapper.cls.members.values()))
        for inner in wrapper.inners:
            files.update(dict.fromkeys([inner.file, *(c.file for c in inner.classes)]))
        for entry in (*plan.missing, *plan.forwarded):
            if entry.defined is not None:
                files[entry.defined.file] = None
            if entry.synthesis is not None:
                reference = entry.synthesis.reference
                files.update(dict.fromkeys([reference.signature.file, reference.owner.file]))
    return [f for f in files if f]


def _require_read(run: RunContext, plans: Iterable[ModelPlan]) -> None:
    """Every file a verdict depends on parses, or the run stops naming each one that does not (exit 2):
    a gate that passed over an unreadable file would pass on a guess."""
    from ...errors import UnreadableFiles

    cache = run.cache
    unread = []
    for rel in depended_on(plans):
        path = Path(rel) if Path(rel).is_absolute() else run.tree.srt / rel
        if not path.is_file() or cache.is_excluded(path):
            continue
        error = cache.unreadable(path)
        if error is not None:
            unread.append((rel, error))
    if unread:
        raise UnreadableFiles([error for _, error in unread], [rel for rel, _ in unread])


def _not_followed(style: FormatStyle, note: str) -> str:
    return f"{note} ({', '.join(style.sources)}): apply does not lay out imports that way; run the tree's formatters after it"


def _written(plan: ModelPlan) -> dict[str, Signature]:
    """What apply writes into a class, with the signature it is written with (a learned body's is its
    reference's; a delegation's the inner's)."""
    out: dict[str, Signature] = {}
    for entry in plan.writes:
        assert entry.fix is not None, "writes are the entries with a fix"
        if entry.fix.kind == "synthesize":
            assert entry.synthesis is not None, "a learned fix carries its synthesis"
            out[entry.member.name] = entry.synthesis.reference.signature
        elif entry.defined is not None:
            out[entry.member.name] = entry.defined
    return out
