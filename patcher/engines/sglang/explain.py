"""What `explain MEMBER` shows on an SGLang tree beyond the analysis: per wrapper file, the code apply
would write, built and proven by the codemod and verify stages exactly as `diff` and `apply` run them
(so it is the same text), or, when the proof stops a file, the member as planned and the reason; and
the code of each reference a body is learned from.  patcher/output/explain.py lays it out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...engine import Explanation, WouldWrite
from ...read.statements import walk

if TYPE_CHECKING:
    from ...errors import EaglepatchError
    from ...records import FileEdit, MemberPlan, ModelPlan
    from ...selection import Analysis


def explanation(analysis: Analysis, name: str) -> Explanation:
    import libcst as cst

    from ...analyze.class_index import signature_node
    from ...analyze.synthesize import learned_synthesis

    would_write: dict[tuple[str, str], WouldWrite] = {}
    references: dict[str, str] = {}
    proven: dict[str, tuple[FileEdit | None, EaglepatchError | None]] = {}  # wrapper file -> (its edit, what stopped it)
    for plan in analysis.plans:
        for entry in (*plan.missing, *plan.forwarded):
            if entry.member.name != name or entry.fix is None:
                continue
            if entry.fix.kind == "synthesize":
                reference = learned_synthesis(entry).reference
                node = signature_node(analysis.cache, reference.signature)
                assert node is not None, "a reference is learned only from a def signature_node parsed (synthesize._learn)"
                references[reference.signature.at] = cst.Module(body=[]).code_for_node(node.with_changes(leading_lines=[]))
            if plan.wrapper.path not in proven:
                proven[plan.wrapper.path] = _proven_edit(analysis, plan.wrapper.path)
            would_write[(plan.wrapper.path, plan.wrapper.cls.name)] = _would_write(analysis, plan, entry, *proven[plan.wrapper.path])
    return Explanation(name, would_write, references)


def _proven_edit(analysis: Analysis, rel: str) -> tuple[FileEdit | None, EaglepatchError | None]:
    """(the edit of wrapper file `rel`, None) as diff and apply build it, every class of the file that has
    something to write included and the patch proven (patcher/rewrite/verify.py); (None, error) when it fails."""
    from ...rewrite.edits import build_edits

    plans = [plan for plan in analysis.plans if plan.wrapper.path == rel]
    edits, errors = build_edits(analysis.cache, analysis.tree, plans, analysis.style)
    if errors:
        return None, errors[0]
    return next((edit for edit in edits if edit.changed), None), None


def _would_write(analysis: Analysis, plan: ModelPlan, entry: MemberPlan, edit: FileEdit | None, error: EaglepatchError | None) -> WouldWrite:
    """The member's text as apply writes it (proven, with the imports the file gains); when the proof (or
    anything else) stops the file, the member as planned and the one-line reason, for apply writes nothing there."""
    cls, name = plan.wrapper.cls.name, entry.member.name
    if edit is not None and name in edit.added.get(cls, ()):
        return WouldWrite(proven=True, text=written_text(edit, cls, name), imports=tuple(edit.imports))
    if error is None:
        return WouldWrite(proven=False, proof=f"{plan.wrapper.path}: apply writes nothing for {name} in {cls}")
    planned = None
    try:
        from ...codemods.add_delegations import render_delegation
        from ...rewrite.edits import delegation_for

        source = analysis.cache.read(analysis.tree.srt / plan.wrapper.path)
        width = analysis.style.line_length
        delegation = delegation_for(analysis.cache, analysis.tree, source, entry, cls=cls, line_length=width)
        planned = render_delegation(delegation, width=width)
    except Exception:
        pass
    return WouldWrite(proven=False, proof=str(error), text=planned)


def written_text(edit: FileEdit, cls: str, name: str) -> str:
    """The lines of top-level class `cls` in the patched file that eaglepatch wrote for member `name`: its
    marker comment(s), decorators and every `def name` (a property and its setter), blank lines between kept."""
    import ast
    import re

    from ...read.text import decode_source

    text = decode_source(edit.path, edit.rel, edit.updated).text
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)  # the newlines Python counts, kept
    tree = ast.parse(text)
    node = next(n for n in walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    defs = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    start = min(min([d.lineno for d in n.decorator_list] + [n.lineno]) for n in defs) - 1
    while start > 0 and lines[start - 1].strip().startswith("# eaglepatch"):
        start -= 1
    end = max(n.end_lineno or n.lineno for n in defs)  # ast.parse sets end_lineno
    return "".join(lines[start:end])
