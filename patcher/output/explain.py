"""What `explain MEMBER` shows, laid out: per model, the inner definition or the learned reference, and
the code apply would write, from the analysis and the engine's Explanation (engine.py: the edits as diff
and apply build and prove them).  It builds nothing; patcher/output/report.py prints the result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import Synthesis
from .report import member_json, protocol_json

if TYPE_CHECKING:
    from ..engine import Explanation, WouldWrite
    from ..selection import Analysis


def explain_json(analysis: Analysis, explanation: Explanation) -> dict:
    name = explanation.member
    member = analysis.protocol.members[name]
    data = protocol_json(member)
    if analysis.style.sources:  # the tree configures its formatters: what would_write is laid out for
        data["style"] = analysis.style.describe()
    data["models"] = []
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
                    "status": "present" if status == "forwarded" else "plumbing" if entry.gap == "plumbing" else "missing",
                    "required": entry.required,
                    "fix": member_json(entry, with_definition=False)["fix"],
                    "blocker": entry.blocker,
                    "gap": entry.gap,
                }
                if entry.defined is not None:
                    item["defined_at"] = entry.defined.at
                    item["defined_by"] = entry.defined.owner
                    item["inner_attribute"] = entry.inner_attribute
                if entry.fix is not None and entry.fix.kind == "synthesize":
                    synthesis = entry.synthesis
                    assert isinstance(synthesis, Synthesis), "a synthesize fix is planned only with its Synthesis (plan.py)"
                    reference = synthesis.reference
                    item["learned_from"] = reference.signature.at
                    item["learned_from_class"] = reference.owner.name
                    item["backbone"] = synthesis.backbone
                    item["reference_code"] = explanation.references[reference.signature.at]
                if entry.fix is not None:
                    item.update(would_write_json(explanation.would_write[(plan.wrapper.path, plan.wrapper.cls.name)]))
                data["models"].append(item)
    return data


def would_write_json(written: WouldWrite) -> dict[str, Any]:
    """"would_write": the member's text as apply writes it, with "proven": true and the imports the file
    gains; when the proof stopped the file, "proven": false, "proof": the one-line reason, and the member
    as planned when it could be rendered."""
    if written.proven:
        return {"would_write": written.text, "proven": True, "proof": None, "imports": list(written.imports)}
    out: dict[str, Any] = {"proven": False, "proof": written.proof}
    if written.text is not None:
        out["would_write"] = written.text
    return out
