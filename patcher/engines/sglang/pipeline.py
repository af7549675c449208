"""The SGLang engine's stages wired together: protocol -> resolve -> plan."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...read.locate import SourceTree
from ...read.style import FormatStyle
from ...selection import DEFAULT_MODEL, Analysis

if TYPE_CHECKING:  # the stages import libcst: loaded by analyze(), so `check` answered from the cache never pays for it
    from ...analyze.overlay import Written
    from ...analyze.resolve import Progress, Resolver
    from ...analyze.synthesize import HookLibrary
    from ...engine import Resolved
    from ...read.source_cache import SourceCache
    from ...records import CallShape, MemberPlan, ModelPlan, Protocol, Signature, SynthesisFit, Wrapper

MAX_ADOPTION_ROUNDS = 3


def analyze_sglang(request: Resolved, progress: Progress | None = None) -> Analysis:
    """The protocol is extracted once and shared by every wrapper looked at."""
    from ...analyze.class_index import definition_ast
    from ...analyze.overlay import WrittenOverlay
    from ...analyze.plan import call_misfit, plan_wrapper
    from ...analyze.protocol import extract_protocol
    from ...analyze.resolve import Resolver, select_wrappers
    from ...analyze.roles import learn_roles
    from ...read.source_cache import SourceCache
    from ...read.style import load_style

    tree, selection, excluded = request.tree, request.selection, request.excluded
    models, all_models, ignore, ignore_from = selection.models, selection.all_models, selection.ignore, selection.ignore_from
    extra_consumers = list(request.consumers)
    cache = SourceCache(tree.srt, excluded)
    protocol = extract_protocol(tree, cache, extra_consumers, ignore, ignore_from)
    resolver = Resolver(tree, cache)
    if all_models:
        wrappers = resolver.all_wrappers(protocol, progress)
    else:
        wrappers = [w for selector in models or [DEFAULT_MODEL] for w in select_wrappers(tree, cache, resolver, selector, protocol)]
    roles = learn_roles(tree)

    def shape_misfit(signature: Signature, shape: CallShape) -> str | None:
        node = definition_ast(cache, signature)
        if node is None:
            return None
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        return call_misfit(node.args, shape, is_method=not static)

    style = load_style(tree.models, tree.given)
    libraries: list[HookLibrary] = []  # the hook library, built when a first class needs a body learned (most runs need none)

    def synthesize(entry: MemberPlan, wrapper: Wrapper) -> SynthesisFit:
        if not libraries:
            from ...analyze.synthesize import HookLibrary

            libraries.append(HookLibrary(resolver, protocol, style.line_length))
        return libraries[0].fit(entry, wrapper, shape_misfit)

    def plan_all(written: Written) -> list[ModelPlan]:
        seen = WrittenOverlay(written)
        return [plan_wrapper(protocol, seen.wrapper(w), *roles.role_of(w.cls), shape_misfit, synthesize, written) for w in wrappers]

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
    plans = _judge_plumbing(resolver, protocol, plans)
    _require_read(tree, cache, plans)
    warnings = list(protocol.warnings) + resolver.warnings + [_not_followed(style, note) for note in style.not_followed]
    warnings += [f"{cache.rel(path)}: left out by --exclude: not read, and not checked" for path in sorted(excluded)]
    return Analysis(request.engine, tree, cache, protocol, tuple(plans), tuple(warnings), all_models, style)


def _judge_plumbing(resolver: Resolver, protocol: Protocol, plans: list[ModelPlan]) -> list[ModelPlan]:
    """A target whose capture hook exists (its own or inherited) but whose forward never uses what the
    hook sets is not EAGLE-3-capable: its plan gains a plumbing gap naming every broken piece.  Only
    the hook as the tree has it is judged, not one this run's apply writes."""
    from ...analyze.plan import with_broken_plumbing
    from ...analyze.plumbing import HOOK, TreeClasses, analyze_plumbing

    member = protocol.members.get(HOOK)
    if member is None:
        return plans
    classes = TreeClasses(resolver, protocol)
    out = []
    for plan in plans:
        cls = plan.wrapper.cls
        hook = cls.members.get(HOOK)
        if plan.role != "target" or hook is None or hook.kind != "method" or HOOK in cls.pending or cls.dynamic:
            # a hook bound as a class attribute (`hook = _impl`) has no body to follow: not judged
            out.append(plan)
            continue
        report = analyze_plumbing(classes, f"{cls.file}:{cls.name}")
        if report.broken:
            plan = with_broken_plumbing(plan, member, report.gaps, report.read)
        else:
            plan = replace(plan, read=tuple(dict.fromkeys([*plan.read, *report.read])))
        out.append(plan)
    return out


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


def _require_read(tree: SourceTree, cache: SourceCache, plans: Iterable[ModelPlan]) -> None:
    """Every file a verdict depends on parses, or the run stops naming each one that does not (exit 2):
    a gate that passed over an unreadable file would pass on a guess."""
    from ...errors import UnreadableFiles

    unread = []
    for rel in depended_on(plans):
        path = Path(rel) if Path(rel).is_absolute() else tree.srt / rel
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
