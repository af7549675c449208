"""What `explain MEMBER` shows, gathered: per model, the inner definition or the learned reference, and the
code apply would write, built and proven by the codemod and verify stages exactly as `diff` and `apply` run
them (so it is the same text), or, when the proof stops a file, the member as planned and the reason.
patcher/output/report.py renders the result; it builds nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .report import protocol_json

if TYPE_CHECKING:
    from ..errors import EaglepatchError
    from ..records import MemberPlan, ModelPlan
    from ..rewrite.edits import FileEdit
    from ..selection import Analysis


def explain_json(analysis: Analysis, name: str) -> dict:
    import libcst as cst

    from ..analyze.class_index import signature_node
    from ..analyze.synthesize import learned_synthesis

    member = analysis.protocol.members[name]
    data = protocol_json(member)
    if analysis.style.sources:  # the tree configures its formatters: what would_write is laid out for
        data["style"] = analysis.style.describe()
    data["models"] = []
    proven: dict[str, tuple] = {}  # wrapper file -> (its edit or None, the error that stopped it or None)
    for plan in analysis.plans:
        entries = {"missing": plan.missing, "forwarded": plan.forwarded}
        for status, items in entries.items():
            for entry in items:
                if entry.member.name != name:
                    continue
                item = {
                    "class": plan.wrapper.cls.name,
                    "file": plan.wrapper.path,
                    "role": plan.role,
                    "status": "present" if status == "forwarded" else "missing",
                    "required": entry.required,
                    "fix": entry.fix.as_json() if entry.fix is not None else None,
                    "blocker": entry.blocker,
                }
                if entry.defined is not None:
                    item["defined_at"] = entry.defined.at
                    item["defined_by"] = entry.defined.owner
                    item["inner_attribute"] = entry.inner_attribute
                if entry.fix is not None and entry.fix.kind == "synthesize":
                    synthesis = learned_synthesis(entry)
                    reference = synthesis.reference
                    item["learned_from"] = reference.signature.at
                    item["learned_from_class"] = reference.owner.name
                    item["backbone"] = synthesis.backbone
                    node = signature_node(analysis.cache, reference.signature)
                    assert node is not None, "a reference is learned only from a def signature_node parsed (synthesize._learn)"
                    item["reference_code"] = cst.Module(body=[]).code_for_node(node.with_changes(leading_lines=[]))
                if entry.fix is not None:
                    if plan.wrapper.path not in proven:
                        proven[plan.wrapper.path] = _proven_edit(analysis, plan.wrapper.path)
                    item.update(_would_write(analysis, plan, entry, *proven[plan.wrapper.path]))
                data["models"].append(item)
    return data


def _proven_edit(analysis: Analysis, rel: str) -> tuple[FileEdit | None, EaglepatchError | None]:
    """(the edit of wrapper file `rel`, None) as diff and apply build it, every class of the file that has
    something to write included and the patch proven (patcher/rewrite/verify.py); (None, error) when it fails."""
    from ..rewrite.edits import build_edits

    plans = [plan for plan in analysis.plans if plan.wrapper.path == rel]
    edits, errors = build_edits(analysis.cache, analysis.tree, plans, analysis.style)
    if errors:
        return None, errors[0]
    return next((edit for edit in edits if edit.changed), None), None


def _would_write(analysis: Analysis, plan: ModelPlan, entry: MemberPlan, edit: FileEdit | None, error: EaglepatchError | None) -> dict:
    """"would_write": the member's text as apply writes it (with "proven": true and the imports the file
    gains); when the proof (or anything else) stops the file, the member as planned, "proven": false and
    "proof": the one-line reason, for apply writes nothing there."""
    cls, name = plan.wrapper.cls.name, entry.member.name
    if edit is not None and name in edit.added.get(cls, ()):
        return {"would_write": written_text(edit, cls, name), "proven": True, "proof": None, "imports": list(edit.imports)}
    if error is None:
        return {"proven": False, "proof": f"{plan.wrapper.path}: apply writes nothing for {name} in {cls}"}
    out = {"proven": False, "proof": str(error)}
    try:
        from ..codemods.add_delegations import render_delegation
        from ..rewrite.edits import delegation_for

        source = analysis.cache.read(analysis.tree.srt / plan.wrapper.path)
        width = analysis.style.line_length
        delegation = delegation_for(analysis.cache, analysis.tree, source, entry, cls=cls, line_length=width)
        out["would_write"] = render_delegation(delegation, width=width)
    except Exception:
        pass
    return out


def written_text(edit: FileEdit, cls: str, name: str) -> str:
    """The lines of top-level class `cls` in the patched file that eaglepatch wrote for member `name`: its
    marker comment(s), decorators and every `def name` (a property and its setter), blank lines between kept."""
    import ast
    import re

    from ..read.text import decode_source

    text = decode_source(edit.path, edit.rel, edit.updated).text
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)  # the newlines Python counts, kept
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    defs = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    start = min(min([d.lineno for d in n.decorator_list] + [n.lineno]) for n in defs) - 1
    while start > 0 and lines[start - 1].strip().startswith("# eaglepatch"):
        start -= 1
    end = max(n.end_lineno or n.lineno for n in defs)  # ast.parse sets end_lineno
    return "".join(lines[start:end])
