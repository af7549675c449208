"""Stage 6a: say what was found, for people (rich), scripts (JSON) and CI (GitHub annotations)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from patcher.records import MemberPlan, ModelPlan, ProtocolMember

if TYPE_CHECKING:
    from rich.console import Console

    from patcher.pipeline import Analysis


def member_json(plan: MemberPlan, with_definition: bool = True) -> dict:
    member = plan.member
    data = {
        "name": member.name,
        "kind": member.kind,
        "required": member.required,
        "role": member.role,
        "called_at": member.called_at,
    }
    if with_definition and plan.defined is not None:
        data["defined_at"] = plan.defined.at
        data["defined_as"] = plan.defined.kind
        data["inner_attribute"] = plan.inner_attribute
    if plan.lacking and plan.providers:
        data["provided_by"] = plan.providers
        data["lacking_in"] = plan.lacking
    return data


def protocol_json(member: ProtocolMember) -> dict:
    return {
        "name": member.name,
        "kind": member.kind,
        "role": member.role,
        "roles": member.roles,
        "required": member.required,
        "called_at": member.called_at,
        "uses": [
            {"at": u.at, "kind": u.kind, "role": u.role, "required": u.required, "guard": u.guard}
            for u in member.uses
        ],
    }


def model_json(plan: ModelPlan) -> dict:
    wrapper = plan.wrapper
    return {
        "file": wrapper.path,
        "class": wrapper.cls.name,
        "line": wrapper.cls.line,
        "status": plan.status,
        "reason": plan.reason,
        "inner": [
            {
                "attribute": inner.attribute,
                "class": cls.name,
                "file": cls.file,
                "line": cls.line,
                "assigned_at": f"{inner.file or wrapper.path}:{inner.line}",
                "conditional": inner.conditional,
            }
            for inner in wrapper.inners
            for cls in inner.classes
        ],
        "forwards_dynamically": wrapper.forwards_dynamically,
        "missing": [member_json(m) for m in plan.missing],
        "forwarded": [member_json(m) for m in plan.forwarded],
        "not_delegable": [member_json(m, with_definition=False) for m in plan.not_delegable],
    }


def analysis_json(analysis: Analysis) -> dict:
    return {
        "srt": str(analysis.tree.srt),
        "layout": analysis.tree.layout,
        "protocol": [protocol_json(m) for m in analysis.protocol.members.values()],
        "consumers": analysis.protocol.consumers,
        "general_interface": analysis.protocol.general_interface,
        "models": [model_json(p) for p in analysis.plans],
        "warnings": analysis.warnings,
        "summary": {
            "models": len(analysis.plans),
            "missing": analysis.missing_count,
            "by_status": _count_status(analysis.plans),
        },
    }


def _count_status(plans: list[ModelPlan]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for plan in plans:
        counts[plan.status] = counts.get(plan.status, 0) + 1
    return counts


def write_json(analysis: Analysis, out) -> None:
    json.dump(analysis_json(analysis), out, indent=2)
    out.write("\n")


# -- GitHub workflow annotations ---------------------------------------------------------------


def _escape(value: str, property_value: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def display_path(analysis: Analysis, rel: str) -> str:
    """A path the CI job can open: relative to the working directory when the file is below it."""
    absolute = analysis.tree.srt / rel
    try:
        return Path(os.path.relpath(absolute, Path.cwd())).as_posix() if _below(absolute, Path.cwd()) else str(absolute)
    except ValueError:
        return str(absolute)


def _below(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def write_github(analysis: Analysis, out) -> None:
    for plan in analysis.plans:
        wrapper = plan.wrapper
        file = _escape(display_path(analysis, wrapper.path), True)
        for entry in plan.missing:
            member = entry.member
            level = "error" if member.required else "warning"
            message = (
                f"{wrapper.cls.name} does not forward {member.name}() to {entry.inner_attribute} "
                f"({entry.defined.owner} defines it at {entry.defined.at}); EAGLE-3 uses it at "
                f"{', '.join(member.called_at[:3])}. Fix: eaglepatch apply"
            )
            title = _escape(f"eaglepatch: missing {member.name}", True)
            out.write(f"::{level} file={file},line={wrapper.cls.line},title={title}::{_escape(message)}\n")
        if plan.status == "not_delegable":
            out.write(f"::warning file={file},line={wrapper.cls.line},title=eaglepatch::{_escape(plan.reason)}\n")
    for warning in analysis.warnings:
        out.write(f"::warning title=eaglepatch::{_escape(warning)}\n")
    total = analysis.missing_count
    out.write(f"::notice title=eaglepatch::{total} missing member(s) in {len(analysis.plans)} model class(es)\n")


# -- people ----------------------------------------------------------------------------------------


def _sites(at: list[str], limit: int = 2) -> str:
    shown = ", ".join(at[:limit])
    return shown + (f" (+{len(at) - limit} more)" if len(at) > limit else "")


STATUS_STYLE = {
    "compliant": "green",
    "dynamic": "green",
    "delegable": "yellow",
    "not_delegable": "red",
    "unresolved": "magenta",
}


def print_protocol(analysis: Analysis, console: Console) -> None:
    from rich.table import Table

    table = Table(title="EAGLE-3 protocol read from SGLang's own code", title_justify="left")
    widest = max((len(m) for m in analysis.protocol.members), default=6)
    table.add_column("member", style="bold", no_wrap=True, min_width=widest)
    table.add_column("kind")
    table.add_column("role")
    table.add_column("need")
    table.add_column("called at")
    for member in analysis.protocol.members.values():
        table.add_row(
            member.name,
            member.kind,
            member.role,
            "required" if member.required else "optional",
            _sites(member.called_at, 1),
        )
    console.print(table)
    aside = analysis.protocol.general_interface
    if aside:
        console.print(
            f"[dim]Set aside as the general model interface (used by the runner outside EAGLE-3): "
            f"{', '.join(aside)}[/dim]"
        )


def print_model(plan: ModelPlan, console: Console) -> None:
    wrapper = plan.wrapper
    inner = "; ".join(
        f"{i.attribute}: {' | '.join(f'{c.name} ({c.file})' for c in i.classes)}" for i in wrapper.inners
    ) or "none found"
    style = STATUS_STYLE.get(plan.status, "white")
    console.print(
        f"\n[bold]{wrapper.cls.name}[/bold] ({wrapper.path}:{wrapper.cls.line})  inner {inner}  "
        f"[{style}]{plan.status}[/{style}]"
    )
    if plan.reason:
        console.print(f"  {plan.reason}")
    rows = [("missing", "[red]✗ missing[/red]      ", plan.missing), ("forwarded", "[green]✓ present[/green]      ", plan.forwarded)]
    rows.append(("not_delegable", "[dim]– not delegable[/dim]", plan.not_delegable))
    for _, label, entries in rows:
        for entry in entries:
            member = entry.member
            need = "required" if member.required else "optional"
            where = f"defined at {entry.defined.at}" if entry.defined else "the inner model lacks it"
            console.print(f"  {label} [bold]{member.name}[/bold] ({member.role}, {need}): {where}")
            if entry.providers and entry.lacking:
                console.print(
                    f"  [dim]{'':17}provided by {', '.join(entry.providers)}; not by {', '.join(entry.lacking)} "
                    "(the delegation raises AttributeError there)[/dim]"
                )
            console.print(f"  [dim]{'':17}used at {_sites(member.called_at)}[/dim]")


def print_table(analysis: Analysis, console: Console, show_protocol: bool = True) -> None:
    if show_protocol:
        print_protocol(analysis, console)
    for plan in analysis.plans:
        print_model(plan, console)
    for warning in analysis.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    total = analysis.missing_count
    if total:
        console.print(
            f"\n[bold red]{total} missing[/bold red] EAGLE-3 member(s). "
            "Review with [bold]eaglepatch diff[/bold], write with [bold]eaglepatch apply[/bold]."
        )
    else:
        console.print("\n[bold green]Nothing missing[/bold green]: every delegable EAGLE-3 member is present.")


def print_summary(analysis: Analysis, console: Console) -> None:
    """`--all`: one row per class first, the details of every class that is not clean after."""
    from rich.table import Table

    table = Table(title=f"EAGLE-3 readiness of {len(analysis.plans)} model classes", title_justify="left")
    table.add_column("class", style="bold", no_wrap=True)
    table.add_column("file", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail")
    order = {"delegable": 0, "not_delegable": 1, "unresolved": 2, "dynamic": 3, "compliant": 4}
    plans = sorted(analysis.plans, key=lambda p: (order.get(p.status, 9), p.wrapper.path, p.wrapper.cls.name))
    for plan in plans:
        style = STATUS_STYLE.get(plan.status, "white")
        detail = plan.reason
        if plan.status == "delegable":
            detail = "missing " + ", ".join(m.member.name for m in plan.missing)
        table.add_row(plan.wrapper.cls.name, plan.wrapper.path, f"[{style}]{plan.status}[/{style}]", detail)
    console.print(table)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(_count_status(analysis.plans).items()))
    console.print(f"{counts}")
    for plan in plans:
        if plan.status in ("delegable", "not_delegable", "unresolved"):
            print_model(plan, console)
    for warning in analysis.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if analysis.missing_count:
        console.print(
            f"\n[bold red]{analysis.missing_count} missing[/bold red] member(s) can be delegated: "
            "[bold]eaglepatch diff --all[/bold] to review, [bold]eaglepatch apply --all[/bold] to write."
        )


# -- SARIF (code scanning) -------------------------------------------------------------------------


def _uri(path: str) -> str:
    """A URI reference for SARIF: file URI for absolute paths, percent-encoded relative ones."""
    from urllib.parse import quote

    return Path(path).as_uri() if Path(path).is_absolute() else quote(path)


def write_sarif(analysis: Analysis, out) -> None:
    results = []
    for plan in analysis.plans:
        for entry in plan.missing:
            member = entry.member
            results.append(
                {
                    "ruleId": "eaglepatch/missing-delegation",
                    "level": "error" if member.required else "warning",
                    "message": {
                        "text": f"{plan.wrapper.cls.name} does not forward {member.name} to {entry.inner_attribute} "
                        f"({entry.defined.at}); EAGLE-3 uses it at {', '.join(member.called_at[:3])}"
                    },
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": _uri(display_path(analysis, plan.wrapper.path))},
                                "region": {"startLine": plan.wrapper.cls.line},
                            }
                        }
                    ],
                }
            )
    from patcher import __version__

    document = {
        "version": "2.1.0",
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "eaglepatch",
                        "version": __version__,
                        "rules": [
                            {
                                "id": "eaglepatch/missing-delegation",
                                "shortDescription": {"text": "A wrapper model does not forward an EAGLE-3 member"},
                            }
                        ],
                    }
                },
                "results": results,
            }
        ],
    }
    json.dump(document, out, indent=2)
    out.write("\n")


# -- explain ---------------------------------------------------------------------------------------


def explain_json(analysis: Analysis, name: str) -> dict:
    from codemods.add_delegations import render_delegation
    from patcher.edits import delegation_for

    member = analysis.protocol.members[name]
    data = protocol_json(member)
    data["models"] = []
    for plan in analysis.plans:
        entries = {"missing": plan.missing, "forwarded": plan.forwarded, "not_delegable": plan.not_delegable}
        for status, items in entries.items():
            for entry in items:
                if entry.member.name != name:
                    continue
                item = {"class": plan.wrapper.cls.name, "file": plan.wrapper.path, "status": status}
                if entry.defined is not None:
                    item["defined_at"] = entry.defined.at
                    item["defined_by"] = entry.defined.owner
                    item["inner_attribute"] = entry.inner_attribute
                if status == "missing":
                    source = analysis.cache.read(analysis.tree.srt / plan.wrapper.path)
                    delegation = delegation_for(analysis.cache, analysis.tree, source, entry)
                    item["would_write"] = render_delegation(delegation)
                data["models"].append(item)
    return data


def print_explain(data: dict, console: Console) -> None:
    from rich.syntax import Syntax
    from rich.table import Table

    need = "required" if data["required"] else "optional"
    console.print(f"[bold]{data['name']}[/bold]: {data['kind']}, {need}, role {data['role']}")
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("call site", no_wrap=True)
    table.add_column("role")
    table.add_column("need")
    table.add_column("why it is EAGLE-3 code")
    for use in data["uses"]:
        table.add_row(use["at"], use["role"], "required" if use["required"] else "optional", use["guard"])
    console.print(table)
    for model in data["models"]:
        where = f" defined by {model['defined_by']} at {model['defined_at']}" if "defined_at" in model else ""
        console.print(f"\n{model['class']} ({model['file']}): {model['status']}{where}")
        if "would_write" in model:
            console.print("eaglepatch apply would write:")
            console.print(Syntax(model["would_write"], "python", theme="ansi_dark", background_color="default"))
