"""The run's one judge of fixes that ride on plumbing: a learned EAGLE-3 hook and the plumbing planned
for it (Plumber), a hook a subclass inherits from a base that gets it learned, another algorithm's
hook learned on that plumbing, and every target whose capture hook exists or is delegated to
(judge_plumbing).  Each is judged as the next `check` would judge the class once apply has written,
so what `check` says is what `apply` leaves; every judgement reads the run's TreeClasses, memoised."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..read.statements import walk
from ..records import SynthesisFit

if TYPE_CHECKING:
    from ..analyze.plan import Override
    from ..analyze.plan import ShapeCheck as ShapeMisfit
    from ..analyze.resolve import Resolver
    from ..analyze.synthesize import HookLibrary
    from ..records import MemberPlan, ModelPlan, PlumbingGap, PlumbingPlan, Synthesis, Wrapper
    from .gate import ClassLookup, ClassSource, PlumbingReport, TreeClasses

MAX_PLUMBING_REFERENCES = 4  # references whose plumbing is planned for one class before it is needs_code


class Plumber:
    """A learned hook whose aux states cannot flow yet: the plumbing planned (plumbing/planner.py)
    and proven in `ast` (its pieces put into copies of the classes' syntax trees and the analysis run
    again) before the hook is learned from the plan's reference; or every blocker found, never a guess.
    The libcst write of a plan, its idempotence and revert are proven where files are written
    (rewrite/edits.py: with_plumbing), never in `check`."""

    def __init__(self, resolver: Resolver, library: HookLibrary):
        from .gate import TreeClasses
        from .planner import tree_planner

        self.classes = TreeClasses(resolver)
        self.planner = tree_planner(resolver, library, self.classes)
        self.library = library
        self._patched: dict[PlumbingPlan, dict[str, ClassSource]] = {}  # each plan's classes, patched once a run
        self._learned: dict[tuple[str, str, str, str, str, PlumbingPlan | None], tuple[str, ...]] = {}
        self._through: dict[tuple[str, PlumbingPlan | None, str, str, str], PlumbingReport | str] = {}

    def patched(self, plan: PlumbingPlan | None) -> dict[str, ClassSource]:
        """The classes `plan` writes into, with its pieces in copies of their syntax trees: what the
        analysis sees once apply has written it.  A plan is a frozen record and the tree does not change
        within a run: each is patched once."""
        from .planner import patched_sources

        if plan is None or not plan.pieces:
            return {}
        if plan not in self._patched:
            self._patched[plan] = patched_sources(self.classes, plan.pieces)
        return self._patched[plan]

    def through(self, key: str, plan: PlumbingPlan | None, owner: str, reference: str, attribute: str) -> PlumbingReport | str:
        """plumbing/planner.judge_through with `plan`'s plumbing written: once a run per question (the
        planning rounds ask again)."""
        from .planner import judge_through

        memo = (key, plan, owner, reference, attribute)
        if memo not in self._through:
            self._through[memo] = judge_through(self.classes, key, self.patched(plan), owner, self.planner, reference, attribute)
        return self._through[memo]

    def inherited(self, key: str, base: MemberPlan, owner: str) -> tuple[PlumbingGap, ...]:
        """What is left broken in `key` (a subclass) once apply writes `base` (the learned hook, and its
        plumbing) into its base class `owner`: nothing, when the inherited hook works there too."""
        if base.synthesis is None:
            return ()
        report = self.through(key, base.writes_plumbing, owner, base.synthesis.reference.label, base.synthesis.backbone)
        if isinstance(report, str):
            return ()  # the reference's hook is not one the planner reads: the inherited fix stands as planned
        return report.gaps

    def fit(self, entry: MemberPlan, wrapper: Wrapper, first: SynthesisFit, shape_misfit: ShapeMisfit) -> SynthesisFit:
        """`first` (the hook library's answer) when the hook needs no plumbing or the plumbing is all
        there; else the hook learned with the plumbing written, or why it cannot be.  The planner proves
        each plan in `ast` before it returns it (plumbing/planner.verify_plan): a plan with pieces and no
        blockers is one the analysis finds working once written."""
        from ..analyze.plan import backbones
        from .gate import HOOK

        held = backbones(wrapper)
        if entry.member.name != HOOK or not held:
            return first
        cls = wrapper.cls
        key = f"{cls.file}:{cls.name}"
        if first.synthesis is not None:  # the hook alone, as learned: does the forward that runs use it?
            alone = self.through(key, None, key, first.synthesis.reference.label, first.synthesis.backbone)
            if not isinstance(alone, str) and not alone.gaps:
                return first
        attribute = first.synthesis.backbone if first.synthesis is not None else held[0].attribute
        head = first.why or "the hook alone would not make EAGLE-3 work"
        return self._learned_with_plumbing(entry, wrapper, shape_misfit, attribute, head, first)

    def override(self, entry: MemberPlan, wrapper: Wrapper, shape_misfit: ShapeMisfit) -> SynthesisFit:
        """A capture hook the class inherits whose forward cannot use what it sets: a hook learned into
        the class itself, written with the plumbing it needs (a backbone that marks its own layers gets
        EAGLE-3's hook copied from its sibling: planner.sibling_hook), as upstream's Qwen3.5 fix made the
        hook Qwen3-VL's wrappers share hand the layers to such a backbone's hook; or why there is none."""
        from ..analyze.plan import backbones
        from .gate import HOOK

        held = backbones(wrapper)
        if not held:
            return SynthesisFit(why="no hook to learn on a bare backbone")
        if entry.member.name != HOOK:
            return self.learned_judged(entry, wrapper, shape_misfit)
        head = "the inherited hook cannot work here"
        return self._learned_with_plumbing(entry, wrapper, shape_misfit, held[0].attribute, head, None)

    def learned_judged(self, entry: MemberPlan, wrapper: Wrapper, shape_misfit: ShapeMisfit, plan: PlumbingPlan | None = None) -> SynthesisFit:
        """Another algorithm's capture hook learned into the class itself, on the plumbing as the tree has
        it or with `plan` written (eaglepatch writes plumbing for EAGLE-3's hook): the gate judges each
        reference that fits, best first, as it judges the class once apply has written it."""
        key, name = f"{wrapper.cls.file}:{wrapper.cls.name}", entry.member.name

        def works_here(synthesis: Synthesis) -> str:
            return "; ".join(self.judge_learned(key, name, synthesis, plan))

        return self.library.fit(entry, wrapper, shape_misfit, plumbed=True, judge=works_here)

    def _learned_with_plumbing(
        self, entry: MemberPlan, wrapper: Wrapper, shape_misfit: ShapeMisfit, attribute: str, head: str, first: SynthesisFit | None
    ) -> SynthesisFit:
        """The hook learned from the reference of a plan that writes plumbing, trying the next reference
        while the hook of one does not fit the class.  `first`: what to answer when the plumbing is all
        there (None: the class's own hook is overridden, so a plan must write something)."""
        key = f"{wrapper.cls.file}:{wrapper.cls.name}"
        planner, refused = self.planner, []
        for _ in range(MAX_PLUMBING_REFERENCES):  # a reference whose hook does not fit the class: plan from the next
            plan = planner.plan(key, attribute, override=first is None)
            if plan.blockers:
                return SynthesisFit(why=f"{head}; the plumbing cannot be written: {plan.why}", plumbing=True)
            if plan.complete and plan.needs_hook and plan.reference:
                # nothing to write but the hook, learned from the reference the plan proved it with (one
                # that hands its ids to a backbone whose own hook marks the layers its forward captures)
                fit = self.library.fit(entry, wrapper, shape_misfit, plumbed_by=plan.reference)
                if fit.synthesis is not None:
                    return fit
                refused.append(f"{plan.reference}: {fit.why}")
                planner = planner.without([plan.reference])
                continue
            if not plan.ok or not plan.needs_hook:
                # the plumbing is all there: the hook alone is missing
                return first if first is not None else SynthesisFit(why=f"{head}; no plumbing to write with a hook of its own")
            fit = self.library.fit(entry, wrapper, shape_misfit, plumbed_by=plan.reference, backbone_gains=plan.hooks_written)
            if fit.synthesis is not None:
                return replace(fit, writes_plumbing=plan)
            refused.append(f"{plan.reference}: {fit.why}")
            planner = planner.without([plan.reference])
        return SynthesisFit(why=f"{head}; the plumbing can be written, but the hook cannot be learned with it: {refused[0]}")

    def judge_learned(self, key: str, hook: str, synthesis: Synthesis, plan: PlumbingPlan | None = None) -> list[str]:
        """What is left broken in `key` with `hook` learned as `synthesis` says: nothing when the forward
        uses it, as the tree has it or with `plan` written (the plumbing the class's EAGLE-3 hook is
        learned with).  The reference's own plumbing must pass whole."""
        # what the judgement reads of the synthesis; the planning rounds of a run ask again
        memo = (key, hook, synthesis.reference.label, synthesis.backbone, synthesis.reference.backbone.attribute, plan)
        if memo not in self._learned:
            self._learned[memo] = self._judge_learned(key, hook, synthesis, plan)
        return list(self._learned[memo])

    def _judge_learned(self, key: str, hook: str, synthesis: Synthesis, plan: PlumbingPlan | None) -> tuple[str, ...]:
        from .gate import analyze_plumbing, method_of
        from .planner import PatchedClasses, with_hook

        reference = synthesis.reference.label
        own = analyze_plumbing(self.classes, reference, hook)
        if own.broken:
            return (f"the reference's own forward does not use it ({own.gaps[0].describe()})",)
        found = method_of(self.classes.mro(reference), hook)
        if found is None:
            return (f"{reference} defines no {hook} the analysis can read",)
        patched = self.patched(plan)
        seen = PatchedClasses(self.classes, patched)
        start = with_hook(seen, key, reference, found[1], synthesis.backbone, synthesis.reference.backbone.attribute)
        return tuple(g.describe() for g in analyze_plumbing(PatchedClasses(self.classes, {**patched, **start}), key, hook).gaps)


def judge_inherited(plumber: Plumber, plans: list[ModelPlan], override: Override | None = None) -> list[ModelPlan]:
    """A subclass that inherits the capture hook apply learns for its base works only if its own forward
    uses what the hook sets once the base's plumbing is written: else it gets the plumbing gap the next
    check would find (the verdict is a fixed point: apply writes the base's fix either way), with the
    fix the next check would offer for it (`override`: a hook learned into the class itself)."""
    from ..analyze.plan import with_broken_plumbing
    from .gate import HOOK

    by_class = {f"{p.wrapper.cls.file}:{p.wrapper.cls.name}": p for p in plans}
    out = []
    for plan in plans:
        entry = next((m for m in plan.missing if m.member.name == HOOK and m.fix is not None and m.fix.kind == "inherit"), None)
        owner = entry.fix.to if entry is not None and entry.fix is not None else None
        base = None
        for _ in range(len(by_class)):  # an inherited fix is written into the base, or that base's base
            if owner is None or owner not in by_class:
                break
            base = next((m for m in by_class[owner].missing if m.member.name == HOOK), None)
            if base is None or base.fix is None or base.fix.kind != "inherit":
                break
            owner = base.fix.to
        if entry is None or owner is None or base is None or base.fix is None or base.fix.kind != "synthesize":
            out.append(plan)
            continue
        left = plumber.inherited(f"{plan.wrapper.cls.file}:{plan.wrapper.cls.name}", base, owner)
        if left:
            plan = with_broken_plumbing(plan, entry.member, left, override=override)
        out.append(plan)
    return out


def judge_riding(plans: list[ModelPlan]) -> list[ModelPlan]:
    """Another algorithm's hook learned on the plumbing the class's EAGLE-3 hook comes with is taken back
    when that hook's fix (and so that plumbing) is not in the final plan."""
    from ..analyze.plan import without_fix
    from .gate import HOOK

    out = []
    for plan in plans:
        carrier = next((m for m in plan.missing if m.member.name == HOOK), None)
        for entry in plan.missing:
            learned = entry.fix is not None and entry.fix.kind == "synthesize"  # an inherited one rides on its base's
            written = carrier is not None and carrier.fix is not None and carrier.writes_plumbing == entry.rides_on
            if entry.rides_on is not None and learned and not written:
                plan = without_fix(plan, entry.member.name, f"it needs the plumbing written with {HOOK}, which apply does not write here")
        out.append(plan)
    return out


def judge_plumbing(
    resolver: Resolver,
    plans: list[ModelPlan],
    classes: TreeClasses | None = None,
    override: Override | None = None,
) -> list[ModelPlan]:
    """A target whose capture hook exists (its own or inherited) but whose forward never uses what the
    hook sets cannot run the algorithm: its plan gains a plumbing gap naming every broken piece.  Only
    the hook as the tree has it is judged, not one this run's apply writes.  Another algorithm's capture
    hook is held to its hook alone (it must reach a method the held class defines): the forward pieces
    are read with EAGLE-3's conventions, which DFlash's and DSpark's newer taps (an accumulator handed to
    the layers, per-layer flags, a nested pair) do not follow.  `override` (Plumber.override): for
    EAGLE-3's hook inherited from a base, a hook learned into the class itself with the plumbing it
    needs, which the gap then carries as its fix."""
    from ..analyze.plan import with_broken_plumbing
    from .gate import HOOK, TreeClasses, analyze_plumbing, is_capture_hook, method_of

    hooks = [m for name, m in resolver.run.protocol_read.members.items() if is_capture_hook(name)]
    if not hooks:
        return plans
    classes = classes or TreeClasses(resolver)  # the planner's, when one ran: each class parsed once
    delegating: dict[str, ClassLookup] = {}  # hook -> the classes with every delegation of it this run writes
    out = []
    for plan in plans:
        cls = plan.wrapper.cls
        key = f"{cls.file}:{cls.name}"
        for member in hooks:
            hook = cls.members.get(member.name)
            fixed = any(m.member.name == member.name and m.fix is not None and m.fix.kind in ("delegate", "inherit") for m in plan.missing)
            if plan.role != "target" or cls.dynamic or any(m.member.name == member.name and m.gap == "plumbing" for m in plan.missing):
                continue
            if fixed and (hook is None or member.name in cls.pending):
                # the verdict is a fixed point: the delegation apply writes (here, or into the base this
                # class inherits it from) is judged as the next check will judge it, so a gap it would
                # leave is named before anything is written; a hook learned for a base is judged where
                # it is learned (Plumber, _judge_inherited)
                if member.name not in delegating:
                    delegating[member.name] = with_delegations(classes, plans, member.name)
                if method_of(delegating[member.name].mro(key), member.name) is None:
                    continue
                report = analyze_plumbing(delegating[member.name], key, member.name)
                # an inner that lacks the hook gets it written in this run (else no delegation is
                # planned to it), proven on its own plan: only what the delegation itself reaches counts
                report = replace(report, gaps=tuple(g for g in report.gaps if g.piece != "delegate"))
            elif hook is None or hook.kind != "method" or member.name in cls.pending:
                # a hook bound as a class attribute (`hook = _impl`) has no body to follow: not judged
                continue
            else:
                report = analyze_plumbing(classes, key, member.name)
            gaps = report.gaps if member.name == HOOK else [g for g in report.gaps if g.piece == "hook"]
            # the hook comes from a base (as the tree has it, or as apply writes it there), not one written
            # into the class itself: a hook learned into the class can take its place
            delegated = any(m.member.name == member.name and m.fix is not None and m.fix.kind == "delegate" for m in plan.missing)
            inherited = not delegated and (member.name in cls.pending or (hook is not None and hook.owner != cls.name))
            if gaps:
                plan = with_broken_plumbing(plan, member, gaps, report.read, override if inherited else None)
            else:
                plan = replace(plan, read=tuple(dict.fromkeys([*plan.read, *report.read])))
        out.append(plan)
    return out


def with_delegations(classes: TreeClasses, plans: Sequence[ModelPlan], hook: str) -> ClassLookup:
    """The classes with every delegation of `hook` this run writes in them: `self.<inner>.<hook>(...)`
    (its arguments do not matter to the analysis, which follows the call into the inner's hook)."""
    from .planner import PatchedClasses, with_method

    replaced: dict[str, ClassSource] = {}
    for plan in plans:
        key = f"{plan.wrapper.cls.file}:{plan.wrapper.cls.name}"
        inner = next((m.fix.to for m in plan.writes if m.member.name == hook and m.fix is not None and m.fix.kind == "delegate"), None)
        mro = classes.mro(key) if inner is not None else ()
        if not mro:
            continue
        cls = mro[0]
        written = ast.parse(f"def {hook}(self, *args, **kwargs):\n    return self.{inner}.{hook}(*args, **kwargs)\n").body[0]
        assert isinstance(written, ast.FunctionDef), "the delegation parses to a def"
        end = cls.node.end_lineno or cls.node.lineno
        for node in walk(written):
            if isinstance(node, (ast.stmt, ast.expr)):
                node.lineno = node.end_lineno = end
        replaced[key] = with_method(cls, written)
    return PatchedClasses(classes, replaced)
