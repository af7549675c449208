"""Rewrite stage: turn plans into per-file edits: spell each delegation (forms), run the codemod, prove the result (verify)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, overload

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from ..analyze.class_index import signature_node
from ..analyze.forms import Import, PendingSpelling, WrapperSpelling, respelled_signature
from ..analyze.resolve import one_path_per_file
from ..analyze.synthesize import learned_synthesis
from ..codemods.add_delegations import LINE_LENGTH, AddDelegations, Delegation
from ..codemods.contract import run_command
from ..codemods.normalize_imports import NormalizeAddedImports, space_opened_block
from ..codemods.retarget import ExplodeLongLiterals, Retarget, body_reads, pp_respelled
from ..errors import EaglepatchError
from ..read.meanings import TYPE_ONLY, UNKNOWN, inner_meaning
from ..read.scopes import scope_of
from ..read.slices import Bodiless, CutText, parse_cut, parse_module, rewrite_cut
from ..read.source_cache import SourceCache
from ..read.star_imports import star_imported_names
from ..read.style import DEFAULT_STYLE, FormatStyle
from ..read.text import SourceFile
from ..records import FileEdit, MemberPlan, ModelPlan, PlumbingPiece
from ..selection import model_stem
from .verify import prove_edit, prove_plumbing

if TYPE_CHECKING:
    from ..read.locate import SourceTree


def delegation_for(
    cache: SourceCache, tree: SourceTree, wrapper: SourceFile, entry: MemberPlan, spelling: WrapperSpelling | None = None, cls: str = "", line_length: int = LINE_LENGTH
) -> Delegation:
    """What to write for one member: a forwarding property with a setter when EAGLE-3 code assigns the
    member (a method too: the getter hands out the inner's bound method); else a method with the inner
    signature spelled the wrapper's way (or taking `*args, **kwargs`), or a read-only property."""
    if entry.fix is not None and entry.fix.kind == "synthesize":
        return learned_for(cache, tree, wrapper, entry, spelling or WrapperSpelling(cache, tree, wrapper), cls, line_length)
    signature, attribute = entry.defined, entry.inner_attribute
    # a delegate fix is planned only for a member an inner model defines (plan._locate sets both together)
    assert signature is not None and attribute is not None, "a delegation needs the inner definition and attribute"
    if entry.member.assigned_at:  # EAGLE-3 code sets it: reads and writes both reach the inner model
        return Delegation(name=entry.member.name, inner_attribute=attribute, style="settable", purpose=purpose_of(entry))
    node = signature_node(cache, signature) if signature.kind == "method" else None
    if isinstance(node, cst.FunctionDef):
        decorators = {_decorator_name(d) for d in node.decorators}
        binding = "static" if "staticmethod" in decorators else "class" if "classmethod" in decorators else "instance"
        spelling = spelling or WrapperSpelling(cache, tree, wrapper)
        form = respelled_signature(spelling, entry, cls)
        if form.fallback:
            binding = "instance"  # `(self, *args, **kwargs)` forwards to the inner however it binds
        return Delegation(
            name=entry.member.name,
            inner_attribute=attribute,
            style="method",
            params=form.params,
            returns=form.returns,
            is_async=node.asynchronous is not None,
            binding=binding,
            imports=form.imports,
            note=f"signature not copied: {form.fallback}" if form.fallback else "",
            purpose=purpose_of(entry),
        )
    return Delegation(name=entry.member.name, inner_attribute=attribute, style="property", purpose=purpose_of(entry))


def purpose_of(entry: MemberPlan) -> str:
    """What a delegation's docstring says it is for: EAGLE-3, or the other algorithms needing it."""
    return " and ".join(entry.member.other_algorithms) or "EAGLE-3"


def learned_for(
    cache: SourceCache, tree: SourceTree, wrapper: SourceFile, entry: MemberPlan, spelling: WrapperSpelling, cls: str, line_length: int = LINE_LENGTH
) -> Delegation:
    """The hook body the plan learned from another class (patcher/analyze/synthesize.py), retargeted to `cls`:
    its backbone attribute and config path, and every module-level name spelled the wrapper's way."""
    synthesis = learned_synthesis(entry)
    reference = synthesis.reference
    node = signature_node(cache, reference.signature)
    assert node is not None, "a reference is learned only from a def signature_node parsed (synthesize._learn)"
    form = respelled_signature(spelling, replace(entry, defined=reference.signature), cls)
    if form.fallback:
        raise EaglepatchError(
            f"cannot write {cls}.{entry.member.name} learned from {reference.label}: {form.fallback}", path=wrapper.rel
        )
    reference_source = cache.read(tree.srt / reference.signature.file)
    reference_scope = scope_of(cache, reference_source, frozenset({reference.owner.name}))
    func = node.with_changes(params=form.params, returns=form.returns, leading_lines=[], decorators=[])
    receiver = (list(func.params.posonly_params) + list(func.params.params))[0].name.value
    func = pp_respelled(func, receiver, synthesis.pp_call)  # `get_pp_group` is then a module-level read, spelled below
    module, reads = body_reads(func)
    pending = PendingSpelling()
    spelled: dict = {}
    for name, nodes in reads.items():
        meaning = inner_meaning(reference_scope, spelling.exports, name, None, None, lazy=True)
        expression = None if meaning.kind in (TYPE_ONLY, UNKNOWN) else spelling.spell(name, meaning, cls, True, False, pending)
        if expression is None:
            why = meaning.why or f"{name} ({meaning.qualified or meaning.kind}) has no proven spelling here"
            raise EaglepatchError(
                f"cannot write {cls}.{entry.member.name} learned from {reference.label}: {why}", path=wrapper.rel
            )
        for read in nodes:
            spelled[read] = expression
    spelling.commit(pending)
    retargeted = module.visit(Retarget(receiver, synthesis.renames(), spelled))
    unit = spelling.scope.module.default_indent
    learned = retargeted.visit(ExplodeLongLiterals(unit, line_length)).body[0]
    assert isinstance(learned, cst.FunctionDef), "retargeting a def keeps it a def"
    imports = dict.fromkeys([*form.imports, *pending.imports.values()])
    return Delegation(
        name=entry.member.name,
        inner_attribute=synthesis.backbone,
        style="learned",
        imports=tuple(imports),
        learned=learned,
        origin=reference.label,
    )


def _decorator_name(decorator: cst.Decorator) -> str:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        expr = expr.func
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return expr.value if isinstance(expr, cst.Name) else ""


def build_edits(cache: SourceCache, tree: SourceTree, plans: Sequence[ModelPlan], style: FormatStyle = DEFAULT_STYLE) -> tuple[list[FileEdit], list[EaglepatchError]]:
    """One edit per wrapper file that has something missing, proven before it is returned (patcher/rewrite/verify.py);
    a file that fails, or whose patch fails the proof, is an error and does not stop the others.  Written
    in the tree's own formatter `style` (patcher/read/style.py)."""
    by_file: dict[str, dict[str, Sequence[MemberPlan]]] = {}
    plumbing = plumbing_by_file(plans)
    for plan in plans:
        if plan.writes:
            by_file.setdefault(plan.wrapper.path, {})[plan.wrapper.cls.name] = plan.writes
    for rel in plumbing:
        by_file.setdefault(rel, {})
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    for rel, classes in by_file.items():
        try:
            original = cache.read(tree.srt / rel)
            source, plumbed = with_plumbing(original, plumbing.get(rel, ()), style.line_length)
            if not classes:  # only plumbing goes into this file (a backbone's, or a base's forward)
                edits.append(FileEdit(source.path, source.rel, original.data, source.data, plumbed))
                continue
            adding = {cls: {entry.member.name for entry in entries} for cls, entries in classes.items()}
            spelling = WrapperSpelling(cache, tree, source, adding)
            delegations = {
                cls: [delegation_for(cache, tree, source, entry, spelling, cls, style.line_length) for entry in entries]
                for cls, entries in classes.items()
            }
            edit = None
            if source is original:
                bodiless = cache.parse_bodiless(source, frozenset(classes))
            else:  # the cache's parses are of the file as read, not of its plumbed text
                parsed = parse_cut(source.text, classes=frozenset(classes), mark=True)
                bodiless = Bodiless(*parsed) if parsed is not None else Bodiless(parse_module(source), None)
            edit = apply_codemod(source, delegations, bodiless.module, style, bodiless.cut) if bodiless.cut else None
            if edit is None:  # the cut module could not be spliced back: the codemod on the whole file
                edit = apply_codemod(source, delegations, cache.parse_whole(source).module if source is original else None, style)
            if edit.changed:
                prove_edit(cache, tree, source, edit.updated, edit.added, classes)
            if source is not original:  # the hooks went into the plumbed text: the edit is of the file as read
                added = {cls: [*plumbed.get(cls, ()), *members] for cls, members in edit.added.items()}
                edit = replace(edit, original=original.data, added=added | {c: m for c, m in plumbed.items() if c not in added})
            edits.append(edit)
        except EaglepatchError as exc:
            errors.append(exc)
    return edits, errors


def plumbing_by_file(plans: Sequence[ModelPlan]) -> dict[str, tuple[PlumbingPiece, ...]]:
    """The plumbing pieces every learned hook's plan writes, per file, each once: two classes whose hook
    works through one base forward plan the same pieces into it."""
    pieces: dict[str, dict[PlumbingPiece, None]] = {}
    for plan in plans:
        for entry in plan.writes:
            if entry.writes_plumbing is not None:
                for piece in entry.writes_plumbing.pieces:
                    pieces.setdefault(piece.file, {})[piece] = None
    return {file: tuple(found) for file, found in pieces.items()}


def with_plumbing(source: SourceFile, pieces: Sequence[PlumbingPiece], line_length: int) -> tuple[SourceFile, dict[str, list[str]]]:
    """`source` with the pieces written in (codemods/add_plumbing.py) and proven to be what `check`
    judged (verify.prove_plumbing), and class -> what went into it; `source` itself when there are none."""
    if not pieces:
        return source, {}
    from ..codemods.add_plumbing import PlumbingNotWritten, apply_plumbing
    from ..read.text import decode_source

    places: dict[tuple[str, str, str, int], PlumbingPiece] = {}
    for piece in pieces:
        place = (piece.target, piece.kind, piece.where, piece.line)
        if places.setdefault(place, piece) != piece:
            raise EaglepatchError(f"two plans write different {piece.kind} plumbing into {piece.target}; fix one class at a time with --model", path=source.rel)
    try:
        text = apply_plumbing(source.text, pieces, line_length)
    except PlumbingNotWritten as exc:
        raise EaglepatchError(f"the plumbing cannot be written as planned ({exc}); run apply again", path=source.rel) from None
    prove_plumbing(source.rel, source.text, text, pieces, line_length)
    plumbed: dict[str, list[str]] = {}
    for piece in pieces:
        label = f"{piece.defines}, copied from {piece.method} (plumbing)" if piece.defines else f"{piece.kind} in {piece.method} (plumbing)"
        if label not in plumbed.setdefault(piece.cls, []):
            plumbed[piece.cls].append(label)
    return decode_source(source.path, source.rel, source.encode(text)), plumbed


@overload
def apply_codemod(
    source: SourceFile, delegations: dict[str, list[Delegation]], module: cst.Module | None = None, style: FormatStyle = ..., cut: None = None
) -> FileEdit: ...
@overload
def apply_codemod(
    source: SourceFile, delegations: dict[str, list[Delegation]], module: cst.Module | None, style: FormatStyle, cut: CutText
) -> FileEdit | None: ...
def apply_codemod(
    source: SourceFile,
    delegations: dict[str, list[Delegation]],
    module: cst.Module | None = None,
    style: FormatStyle = DEFAULT_STYLE,
    cut: CutText | None = None,
) -> FileEdit | None:
    """The codemod run on `source` (already parsed: `module`, shared with the scope analysis). With `cut`,
    `module` is the file with its def bodies cut (source.cut_bodies): the codemod adds methods and imports
    around them, and its changes are spliced back into the file's text; None when a change reaches into
    a cut body."""
    if module is None:
        module = parse_module(source)
    context = CodemodContext(filename=str(source.path))
    command = AddDelegations(context, delegations, style.line_length)
    updated = run_command(command, module)  # the command, then the imports it scheduled (codemods/contract.py)
    if context.scratch.get(AddImportsVisitor.CONTEXT_KEY):
        updated = space_opened_block(module, updated)
    added: dict[str, set[str]] = {}
    for todo in delegations.values():
        for delegation in todo:
            for module_name, obj, _asname in delegation.imports:
                if obj:
                    added.setdefault(module_name, set()).add(obj)
    if added:
        updated = updated.visit(NormalizeAddedImports(added, module, style.import_line_length, style.force_sort_within_sections, style.order_by_type))
    data = source.rewrite(module, updated) if cut is None else rewrite_cut(source, module, updated, cut)
    if data is None:
        return None
    imports = sorted({_describe(i) for ds in delegations.values() for d in ds for i in d.imports})
    return FileEdit(source.path, source.rel, source.data, data, dict(command.added), imports)


def _describe(spec: Import) -> str:
    module, obj, asname = spec
    text = f"from {module} import {obj}" if obj else f"import {module}"
    return f"{text} as {asname}" if asname else text


def _has_marker(data: bytes, *markers: str) -> bool:
    return any(marker.encode() in data for marker in markers)


def plumbing_elsewhere(tree: SourceTree, models: Sequence[str]) -> list[str]:
    """The model files outside `models` (--model's modules) holding plumbing eaglepatch wrote: a class's
    plumbing goes into the file of the backbone (or base) it runs, which a `revert --model` of the
    class's own module does not take out."""
    from ..codemods.names import PLUMBING

    named = {tree.models / f"{model_stem(selector)}.py" for selector in models}
    found = [p for p in one_path_per_file(tree.models.rglob("*.py")) if p not in named and p.is_file() and _has_marker(p.read_bytes(), PLUMBING)]
    return sorted(tree.rel(p) for p in found)


def revert_edits(
    cache: SourceCache, tree: SourceTree, models: Sequence[str] | None, style: FormatStyle = DEFAULT_STYLE
) -> tuple[list[FileEdit], list[EaglepatchError], list[tuple[str, list[str]]]]:
    """Edits that remove eaglepatch's unchanged delegations: from the named model modules, or all of models/
    (a delegation counts as unchanged at the tree's line length, or at black's default)."""
    from ..codemods.add_delegations import LEARNED, MARKER
    from ..codemods.names import PLUMBING
    from ..codemods.remove_delegations import RemoveDelegations
    from ..codemods.remove_plumbing import revert_plumbing
    from ..read.text import decode_source

    if models:
        paths: list[Path] = []
        for selector in models:
            stem = model_stem(selector)
            path = tree.models / f"{stem}.py"
            if not path.is_file():
                raise EaglepatchError("no such model module; pass --model with a file name under models/", path=f"models/{stem}.py")
            paths.append(path)
    else:
        paths = [p for p in one_path_per_file(tree.models.rglob("*.py")) if p.is_file() and _has_marker(p.read_bytes(), MARKER, LEARNED, PLUMBING)]
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    kept: list[tuple[str, list[str]]] = []
    for path in paths:
        try:
            original = source = cache.read(path)
            if MARKER not in source.text and LEARNED not in source.text and PLUMBING not in source.text:
                continue
            unplumbed: dict[str, list[str]] = {}
            if PLUMBING in source.text:  # the plumbing first: a learned hook's line numbers do not move it
                text, removed, left = revert_plumbing(source.text)
                unplumbed = {cls: [f"{what} (plumbing)" for what in names] for cls, names in removed.items()}
                for cls, names in left.items():
                    kept.append((f"{source.rel}:{cls}", [f"{what} (plumbing, edited by hand)" for what in names]))
                source = decode_source(source.path, source.rel, source.encode(text))
            module = parse_module(source)
            widths = tuple(dict.fromkeys((style.line_length, LINE_LENGTH)))
            command = RemoveDelegations(CodemodContext(filename=str(path)), star_imported_names(cache, tree, source, module), widths)
            updated = run_command(command, module)
            for cls, names in command.kept.items():
                kept.append((f"{source.rel}:{cls}", names))
            data = source.rewrite(module, updated)
            if data != original.data:
                removed = {cls: [*unplumbed.get(cls, ()), *names] for cls, names in command.removed.items()}
                removed |= {cls: names for cls, names in unplumbed.items() if cls not in removed}
                edits.append(FileEdit(source.path, source.rel, original.data, data, removed=removed))
        except EaglepatchError as exc:
            errors.append(exc)
    return edits, errors, kept
