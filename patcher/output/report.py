"""Output stage: say what was found, for people (rich), scripts (JSON) and CI (GitHub annotations)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..records import EAGLE3, MemberPlan, ModelPlan, ProtocolMember, Synthesis
from .baseline import gap_keys

if TYPE_CHECKING:
    from rich.console import Console

    from ..selection import Analysis
    from .baseline import Gate, Key


SCHEMA = 2  # of the JSON report: 2 added roles, fix/blocker per gap and the five statuses


def member_json(plan: MemberPlan, with_definition: bool = True) -> dict:
    member = plan.member
    roles = sorted({u.role for u in plan.uses}) or member.roles
    data = {
        "name": member.name,
        "kind": member.kind,
        "required": plan.required,
        "role": roles[0] if len(roles) == 1 else member.role,
        "called_at": plan.called_at,
        "fix": plan.fix.as_json() if plan.fix is not None else None,
        "blocker": plan.blocker,
        "gap": plan.gap,
        "algorithms": list(member.needed_by),
    }
    if plan.plumbing:
        data["plumbing"] = [{"piece": g.piece, "why": g.why, "at": g.at} for g in plan.plumbing]
    fix = data["fix"]
    if plan.writes_plumbing is not None and isinstance(fix, dict):
        fix["plumbing"] = [
            {"piece": p.kind, "file": p.file, "class": p.cls, "method": p.method, "line": p.line or p.method_line} | ({"writes": p.defines} if p.defines else {})
            for p in plan.writes_plumbing.pieces
        ]
        if plan.writes_plumbing.caveats:
            fix["caveats"] = [{"piece": c.piece, "why": c.why, "at": c.at} for c in plan.writes_plumbing.caveats]
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
        "algorithms": list(member.needed_by),
        "uses": [
            {
                "at": u.at,
                "kind": u.kind,
                "role": u.role,
                "required": u.required,
                "guard": u.guard,
                "shape": None if u.shape is None else {
                    "positional": u.shape.positional,
                    "keywords": list(u.shape.keywords),
                    "star": u.shape.star,
                },
            }
            for u in member.uses
        ],
    }


def model_json(plan: ModelPlan) -> dict:
    wrapper = plan.wrapper
    return {
        "file": wrapper.path,
        "class": wrapper.cls.name,
        "line": wrapper.cls.line,
        "role": plan.role,
        "role_reason": plan.role_reason,
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
        "unresolved": [
            {"attribute": inner.attribute, "construct": u.construct, "at": u.at, "why": u.why}
            for inner in wrapper.inners
            for u in inner.unresolved
        ],
        "forwards_dynamically": wrapper.forwards_dynamically,
        "missing": [member_json(m) for m in plan.missing],
        "forwarded": [member_json(m) for m in plan.forwarded],
    }


def analysis_json(analysis: Analysis, gate: Gate | None = None) -> dict:
    data: dict[str, object] = {
        "schema": SCHEMA,
        analysis.engine.tree_key: str(analysis.tree.srt),
        "layout": analysis.tree.layout,
        **({"engine": analysis.engine.report_name} if analysis.engine.report_name is not None else {}),
        "protocol": [protocol_json(m) for m in analysis.protocol.members.values()],
        "consumers": analysis.protocol.consumers,
        "general_interface": analysis.protocol.general_interface,
        "models": [model_json(p) for p in analysis.plans],
        "warnings": analysis.warnings,
        "summary": {
            "models": len(analysis.plans),
            "missing": analysis.missing_count,
            "fixes": analysis.fix_count,
            "by_status": _count_status(analysis.plans),
            "by_role": _count_roles(analysis.plans),
        },
    }
    if gate is not None and gate.source is not None:
        data["baseline"] = {
            "file": gate.source,
            "new": [_key_json(k) for k in gate.new_gaps(analysis.plans)],
            "stale": [_key_json(k) for k in gate.stale],
        }
    return data


def _key_json(key: Key) -> dict:
    return {"file": key[0], "class": key[1], "member": key[2]}


def _count_status(plans: Sequence[ModelPlan]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for plan in plans:
        counts[plan.status] = counts.get(plan.status, 0) + 1
    return counts


def _count_roles(plans: Sequence[ModelPlan]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for plan in plans:
        by_status = counts.setdefault(plan.role, {})
        by_status[plan.status] = by_status.get(plan.status, 0) + 1
    return counts


def write_json(analysis: Analysis, out: TextIO, gate: Gate | None = None) -> None:
    json.dump(analysis_json(analysis, gate), out, indent=2)
    out.write("\n")


# -- GitHub workflow annotations ---------------------------------------------------------------


def _escape(value: str, property_value: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def display_path(analysis: Analysis, rel: str, base: Path) -> str:
    """A path as GitHub reads it: relative to `base` (the repository root, else the tree's root) when
    the file is below it, where the working directory does not matter; else absolute."""
    absolute = analysis.tree.srt / rel
    try:
        return Path(os.path.relpath(absolute.resolve(), base.resolve())).as_posix() if _below(absolute, base) else str(absolute)
    except (ValueError, OSError):
        return str(absolute)


def _below(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except (ValueError, OSError):
        return False


def _learned(entry: MemberPlan) -> Synthesis:
    """The learned body of a `synthesize` fix (imported here, not above: a cache hit never reaches it)."""
    from ..analyze.synthesize import learned_synthesis

    return learned_synthesis(entry)


def _with_plumbing(entry: MemberPlan) -> str:
    """", with its plumbing: ..." when apply writes the aux-state plumbing with the hook."""
    plan = entry.writes_plumbing
    if plan is None:
        return ""
    where = ", ".join(dict.fromkeys(_piece_said(p.kind, p.cls, p.method, p.defines) for p in plan.pieces))
    left = "".join(f"; left as it is: {c.why} ({c.at})" for c in plan.caveats)
    return f", with its plumbing ({where}){left}"


def _piece_said(kind: str, cls: str, method: str, writes: str = "") -> str:
    """A plumbing piece in a line of text: where it goes, or the hook a `hook` piece copies."""
    return f"{cls}.{writes} copied from its {method}" if writes else f"{kind} in {cls}.{method}"


def readiness_of(analysis: Analysis) -> str:
    """What the summary's title says is checked: EAGLE-3, EAGLE-3 and the others, or only the others."""
    others = list(dict.fromkeys(a for m in analysis.protocol.members.values() for a in m.other_algorithms))
    eagle3 = not analysis.protocol.members or any(EAGLE3 in m.needed_by for m in analysis.protocol.members.values())
    if not others:
        return "EAGLE-3"
    return ", ".join((["EAGLE-3"] if eagle3 else []) + others)


def algorithm_tag(member: ProtocolMember) -> str:
    """` (DFLASH)` beside a member EAGLE-3 does not need; nothing beside EAGLE-3's own (the output of a
    tree with no other algorithm stays as it was)."""
    return f" ({', '.join(member.other_algorithms)})" if member.other_algorithms else ""


def gap_message(plan: ModelPlan, entry: MemberPlan) -> str:
    """One sentence for annotations and SARIF: what is missing, where EAGLE-3 uses it, the fix or the blocker."""
    member = entry.member
    cls = plan.wrapper.cls.name
    algorithms = " and ".join(member.other_algorithms) or "EAGLE-3"
    used = f"{algorithms} uses it at {', '.join(entry.called_at[:3])}"
    if entry.gap == "plumbing":
        where = f" ({entry.defined.at})" if entry.defined is not None else ""
        return f"{cls} ({plan.role}) has {member.name}{where} but {algorithms} cannot work: {entry.blocker}; {used}"
    if entry.fix is not None and entry.fix.kind == "inherit":
        return f"{cls} lacks {member.name}; {used}. Fix: eaglepatch apply writes it into its base {entry.fix.to}"
    if entry.fix is not None and entry.fix.kind == "base":
        return f"{cls} does not declare {entry.fix.to}; {used}. Fix: eaglepatch apply adds it to the class's bases"
    if entry.fix is not None and entry.fix.kind == "synthesize":
        synthesis = _learned(entry)
        return (
            f"{cls} lacks {member.name}; {used}. Fix: eaglepatch apply writes it after "
            f"{entry.fix.to} ({synthesis.reference.signature.at}), on self.{synthesis.backbone}{_with_plumbing(entry)}"
        )
    if entry.fix is not None and entry.defined is not None:
        return (
            f"{cls} does not forward {member.name}() to {entry.fix.to} ({entry.defined.owner} defines it at "
            f"{entry.defined.at}); {used}. Fix: eaglepatch apply"
        )
    return f"{cls} ({plan.role}) lacks {member.name}; {used}. {entry.blocker}"


def write_github(analysis: Analysis, out: TextIO, gate: Gate | None = None, base: Path | None = None, quiet: bool = False) -> None:
    """Workflow commands; `base` is the folder paths are relative to (default: the working directory)."""
    base = base if base is not None else Path.cwd()
    for plan in analysis.plans:
        wrapper = plan.wrapper
        file = _escape(display_path(analysis, wrapper.path, base), True)
        for entry in plan.missing:
            if entry.required and gate is not None and not gate.is_new(plan, entry.label):
                continue  # accepted in the baseline
            level = "error" if entry.required else "notice"
            what = "broken plumbing for" if entry.gap == "plumbing" else "missing"
            title = _escape(f"eaglepatch: {what} {entry.member.name}{algorithm_tag(entry.member)}", True)
            message = _escape(gap_message(plan, entry))
            out.write(f"::{level} file={file},line={wrapper.cls.line},title={title}::{message}\n")
    if quiet:
        return  # the annotations only: no warnings about the code read, no stale entries, no totals
    for warning in analysis.warnings:
        out.write(f"::warning title=eaglepatch::{_escape(warning)}\n")
    if gate is not None:
        for key in gate.stale:
            out.write(f"::warning title=eaglepatch::{_escape(_stale_text(key))}\n")
    out.write(f"::notice title=eaglepatch::{_escape(totals_line(analysis, gate))}\n")


def _stale_text(key: Key) -> str:
    return f"baseline entry {key[1]}.{key[2]} ({key[0]}) matches no gap any more: remove it"


def totals_line(analysis: Analysis, gate: Gate | None = None) -> str:
    """One line: required gaps, fixes, and classes by role and status."""
    parts = []
    for role, by_status in sorted(_count_roles(analysis.plans).items(), key=lambda kv: _ROLE_ORDER.get(kv[0], 9)):
        counts = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items(), key=lambda kv: _STATUS_ORDER.get(kv[0], 9)))
        parts.append(f"{role}: {counts}")
    head = f"{analysis.missing_count} required member(s) missing, {analysis.fix_count} apply can write"
    if gate is not None and gate.source is not None:
        new = len(gate.new_gaps(analysis.plans))
        head += f" ({new} new, {len(gap_keys(analysis.plans)) - new} accepted by the baseline)"
    return f"{head} · {len(analysis.plans)} class(es) · " + " · ".join(parts)


# -- people ----------------------------------------------------------------------------------------


def _sites(at: list[str], limit: int = 2) -> str:
    shown = ", ".join(at[:limit])
    return shown + (f" (+{len(at) - limit} more)" if len(at) > limit else "")


STATUS_STYLE = {
    "compliant": "green",
    "dynamic": "green",
    "fixable": "yellow",
    "needs_code": "red",
    "unresolved": "magenta",
}
_STATUS_ORDER = {"fixable": 0, "needs_code": 1, "unresolved": 2, "dynamic": 3, "compliant": 4}
_ROLE_ORDER = {"target": 0, "draft": 1, "other": 2}


def print_protocol(analysis: Analysis, console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"EAGLE-3 protocol read from {analysis.engine.display_name}'s own code", title_justify="left")
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
            "/".join(member.roles),
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


def _inner_text(plan: ModelPlan) -> str:
    held = [f"{i.attribute}: {' | '.join(f'{c.name} ({c.file})' for c in i.classes)}" for i in plan.wrapper.inners if i.classes]
    pending = [f"{i.attribute}: unresolved" for i in plan.wrapper.inners if not i.classes and i.unresolved]
    return "; ".join(held + pending) or "none"


def print_model(plan: ModelPlan, console: Console, gate: Gate | None = None) -> None:
    wrapper = plan.wrapper
    style = STATUS_STYLE.get(plan.status, "white")
    console.print(
        f"\n[bold]{wrapper.cls.name}[/bold] ({wrapper.path}:{wrapper.cls.line})  {plan.role}  "
        f"[{style}]{plan.status}[/{style}]"
    )
    console.print(f"  [dim]role: {plan.role_reason}; inner {_inner_text(plan)}[/dim]")
    for inner in wrapper.inners:
        for pending in inner.unresolved:
            console.print(f"  [magenta]? unresolved[/magenta]  {pending}")
    for entry in plan.missing:
        member = entry.member
        if entry.required and gate is not None and gate.source is not None:
            accepted = not gate.is_new(plan, entry.label)
            label = "[dim]✗ baselined [/dim]" if accepted else "[red]✗ new       [/red]"
        elif entry.gap == "plumbing":
            label = "[red]✗ plumbing  [/red]"
        elif entry.required:
            label = "[red]✗ missing   [/red]"
        else:
            label = "[yellow]+ companion [/yellow]"
        if entry.fix is not None and entry.fix.kind == "inherit":
            what = f"fix: inherited from {entry.fix.to}, which apply fixes"
        elif entry.fix is not None and entry.fix.kind == "base":
            what = f"fix: add {entry.fix.to} to the class's bases, with its import"
        elif entry.fix is not None and entry.fix.kind == "synthesize":
            synthesis = _learned(entry)
            what = f"fix: write it after {entry.fix.to} ({synthesis.reference.signature.at}), on self.{synthesis.backbone}{_with_plumbing(entry)}"
        elif entry.fix is not None and entry.defined is not None:
            what = f"fix: forward to self.{entry.fix.to} ({entry.defined.owner} defines it at {entry.defined.at})"
        elif entry.gap == "plumbing":
            what = "no fix: its forward never uses what the hook sets"
        else:
            what = f"no fix: {entry.blocker}"
        console.print(f"  {label} [bold]{member.name}[/bold]{algorithm_tag(member)}: {what}")
        for piece in entry.plumbing:
            console.print(f"  {'':13}[red]{piece.piece}[/red]: {piece.why} ({piece.at})")
        if entry.providers and entry.lacking:
            console.print(
                f"  [dim]{'':13}provided by {', '.join(entry.providers)}; not by {', '.join(entry.lacking)} "
                "(the delegation raises AttributeError there)[/dim]"
            )
        console.print(f"  [dim]{'':13}used at {_sites(entry.called_at)}[/dim]")
    for entry in plan.forwarded:
        console.print(f"  [green]✓ present   [/green] [bold]{entry.member.name}[/bold]{algorithm_tag(entry.member)}")


def _print_closing(analysis: Analysis, console: Console, gate: Gate | None, again: str = "") -> None:
    """Warnings, stale baseline entries, the totals and the hint; `again` is the selection's flags
    (shell-quoted), so the commands the hint names look at what this check looked at."""
    from rich.markup import escape

    for warning in analysis.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if gate is not None:
        for key in gate.stale:
            console.print(f"[yellow]stale:[/yellow] {_stale_text(key)}")
    console.print(f"\n{totals_line(analysis, gate)}")
    if analysis.fix_count:
        tail = escape(f" {again}") if again else ""  # quoted for the shell; between backticks, no stop after a path
        console.print(
            f"Review the fixes with [bold]`eaglepatch diff{tail}`[/bold], write them with [bold]`eaglepatch apply{tail}`[/bold]"
        )


def print_table(
    analysis: Analysis, console: Console, show_protocol: bool = True, gate: Gate | None = None, again: str = "", quiet: bool = False
) -> None:
    """One class after the other; `quiet`: the classes only (no protocol table, totals or hint)."""
    if show_protocol and not quiet:
        print_protocol(analysis, console)
    for plan in analysis.plans:
        print_model(plan, console, gate)
    if not quiet:
        _print_closing(analysis, console, gate, again)


def print_summary(analysis: Analysis, console: Console, gate: Gate | None = None, again: str = "", quiet: bool = False) -> None:
    """`--all`: one line per class that is not clean, its gaps in full beneath it (wrapped, never cut);
    under a baseline, which of a class's required gaps are new and which accepted.  `quiet`: the
    classes only (no heading, totals or hint)."""
    from rich.text import Text

    plans = sorted(
        analysis.plans,
        key=lambda p: (_STATUS_ORDER.get(p.status, 9), _ROLE_ORDER.get(p.role, 9), p.wrapper.path, p.wrapper.cls.name),
    )
    lines = [] if quiet else [f"[bold]{readiness_of(analysis)} readiness of {len(analysis.plans)} model classes[/bold]"]
    baselined = gate is not None and gate.source is not None
    for plan in plans:
        if plan.status in ("compliant", "dynamic") and not plan.missing and not analysis.engine.lists_clean_classes:
            continue
        style = STATUS_STYLE.get(plan.status, "white")
        lines.append(
            f"[{style}]{plan.status:<10}[/{style}] {plan.role:<6} [bold]{plan.wrapper.cls.name}[/bold] "
            f"({plan.wrapper.path}:{plan.wrapper.cls.line})"
        )
        writes = [(m, m.fix) for m in plan.writes if m.fix is not None]  # every write has its fix
        forwards = [(m, fix) for m, fix in writes if fix.kind == "delegate"]
        fixes = [m.member.name + ("" if m.required else " (companion)") for m, _ in forwards]
        if fixes:
            targets = sorted({fix.to for _, fix in forwards})
            lines.append(f"{'':18}forward to self.{'/'.join(targets)}: {', '.join(fixes)}")
        for origin in sorted({fix.to for _, fix in writes if fix.kind == "synthesize"}):
            learned = [m for m, fix in writes if fix.kind == "synthesize" and fix.to == origin]
            members = ", ".join(m.member.name for m in learned)
            lines.append(f"{'':18}write {members} after {origin}" + "".join(_with_plumbing(m) for m in learned))
        for _, fix in writes:
            if fix.kind == "base":
                lines.append(f"{'':18}add {fix.to} to its bases")
        if plan.status in ("compliant", "dynamic") and not plan.missing and plan.reason:
            lines.append(f"{'':18}{plan.reason}")
        for base in sorted({m.fix.to for m in plan.fixes if m.fix is not None and m.fix.kind == "inherit"}):
            members = ", ".join(m.member.name for m in plan.fixes if m.fix is not None and m.fix.to == base)
            lines.append(f"{'':18}inherits {members} from {base}, which apply fixes")
        blocked = [m for m in plan.missing if m.fix is None and m.gap == "member"]
        if blocked:
            names = ", ".join(m.member.name for m in blocked)
            lines.append(f"{'':18}no fix for {names}: {blocked[0].blocker}")
        for entry in plan.missing:
            if entry.gap == "plumbing":
                lines.append(f"{'':18}broken plumbing for {entry.member.name}: " + "; ".join(g.describe() for g in entry.plumbing))
        if baselined:
            assert gate is not None
            gaps = [m.label for m in plan.required_gaps]
            new = [name for name in gaps if gate.is_new(plan, name)]
            if new:
                lines.append(f"{'':18}[red]new, not in the baseline: {', '.join(new)}[/red]")
            if len(new) < len(gaps):
                lines.append(f"{'':18}[dim]accepted by the baseline: {', '.join(n for n in gaps if n not in new)}[/dim]")
    # one print: each line's markup parsed alone, as a print of its own would, without a print's
    # per-call overhead (terminal size, render pipeline) for each of hundreds of lines
    texts = [Text.from_markup(line) for line in lines]
    if not texts:
        pass  # --quiet, and every class clean
    elif console.color_system is not None or console.soft_wrap or console.record or console.is_jupyter:
        console.print(Text("\n").join(texts), overflow="fold")
    else:
        _print_plain(console, texts)
    if not quiet:
        _print_closing(analysis, console, gate, again)


def _print_plain(console: Console, texts: list) -> None:
    """Without colour (a pipe, a CI log, NO_COLOR) what rich prints of a text is its plain characters
    as its wrap lays them out, one line after the other: written here in one go, without the render
    pipeline and per-segment work of a print (a CI log of `--all` on a large tree is hundreds of lines).
    A line that fits the console's width is its own layout."""
    from rich.cells import cell_len

    width = console.width
    out: list[str] = []
    for text in texts:
        if cell_len(text.plain) <= width and "\t" not in text.plain:
            out.append(text.plain + "\n")
        else:  # what Text.__rich_console__ asks of wrap for a print with overflow="fold"
            lines = text.wrap(console, width, justify="default", overflow="fold", tab_size=console.tab_size or 8)
            out += [line.plain + "\n" for line in lines]
    console.file.write("".join(out))


# -- SARIF (code scanning) -------------------------------------------------------------------------


def _uri(path: str) -> str:
    """A URI reference for SARIF: file URI for absolute paths, percent-encoded relative ones."""
    from urllib.parse import quote

    return Path(path).as_uri() if Path(path).is_absolute() else quote(path)


def write_sarif(analysis: Analysis, out: TextIO, gate: Gate | None = None, base: Path | None = None) -> None:
    """A SARIF log; `base` is the folder URIs are relative to (default: the working directory)."""
    base = base if base is not None else Path.cwd()
    results = []
    for plan in analysis.plans:
        for entry in plan.missing:
            if entry.required and gate is not None and not gate.is_new(plan, entry.label):
                continue
            rule = "broken-plumbing" if entry.gap == "plumbing" else "missing-delegation" if entry.fix is not None else "missing-member"
            results.append(
                {
                    "ruleId": f"eaglepatch/{rule}",
                    "level": "error" if entry.required else "note",
                    "message": {"text": gap_message(plan, entry)},
                    "properties": {"algorithms": list(entry.member.needed_by)},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": _uri(display_path(analysis, plan.wrapper.path, base))},
                                "region": {"startLine": plan.wrapper.cls.line},
                            }
                        }
                    ],
                }
            )
    document = _sarif_log(results)
    json.dump(document, out, indent=2)
    out.write("\n")


def _sarif_log(results: list, invocation: dict | None = None) -> dict:
    from .. import __version__

    run: dict[str, object] = {
        "tool": {
            "driver": {
                "name": "eaglepatch",
                "version": __version__,
                "rules": [
                    {
                        "id": "eaglepatch/missing-delegation",
                        "shortDescription": {"text": "A wrapper model does not forward an EAGLE-3 member"},
                    },
                    {
                        "id": "eaglepatch/missing-member",
                        "shortDescription": {"text": "A model class lacks an EAGLE-3 member and no delegation can provide it"},
                    },
                    {
                        "id": "eaglepatch/broken-plumbing",
                        "shortDescription": {"text": "A model class has a capture hook whose forward never uses what it sets"},
                    },
                ],
            }
        },
        "results": results,
    }
    if invocation is not None:
        run["invocations"] = [invocation]
    return {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "runs": [run]}


# -- errors, in the format asked for ---------------------------------------------------------------


def error_json(message: str, exit_code: int = 2) -> dict:
    """What `--format json` prints instead of a report when the run fails (the line on stderr says the same)."""
    return {"schema": SCHEMA, "error": message, "exit_code": exit_code}


def write_error(output_format: str, message: str, out: TextIO, exit_code: int = 2) -> None:
    """The error as a JSON object (json; a message of several lines, one a file, kept whole) or a
    SARIF log whose one invocation failed with a toolExecutionNotification per line (sarif): a
    script or a code-scanning upload reads a document either way."""
    if output_format == "sarif":
        invocation = {
            "executionSuccessful": False,
            "exitCode": exit_code,
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": line}} for line in message.splitlines() or [message]
            ],
        }
        document = _sarif_log([], invocation)
    else:
        document = error_json(message, exit_code)
    json.dump(document, out, indent=2)
    out.write("\n")


# -- explain ---------------------------------------------------------------------------------------


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
    if "style" in data:
        console.print(f"written for {data['style']}")
    for model in data["models"]:
        where = f" defined by {model['defined_by']} at {model['defined_at']}" if "defined_at" in model else ""
        status = "its forward cannot use the hook" if model["status"] == "plumbing" else model["status"]
        console.print(f"\n{model['class']} ({model['file']}, {model['role']}): {status}{where}")
        if model["blocker"]:
            console.print(f"no fix: {model['blocker']}")
        fix = model.get("fix") or {}
        if fix.get("plumbing"):
            pieces = ", ".join(dict.fromkeys(_piece_said(p["piece"], p["class"], p["method"], p.get("writes", "")) for p in fix["plumbing"]))
            console.print(f"written with its plumbing: {pieces}")
        for caveat in fix.get("caveats", ()):
            console.print(f"left as it is: {caveat['why']} ({caveat['at']})")
        if "learned_from" in model:
            console.print(
                f"learned from {model['learned_from_class']} ({model['learned_from']}), "
                f"its backbone read as self.{model['backbone']}:"
            )
            console.print(Syntax(model["reference_code"], "python", theme="ansi_dark", background_color="default"))
        if model.get("proven"):
            console.print("eaglepatch apply would write (proven: each name in it means what it meant to the inner method):")
        elif "proof" in model:
            console.print(f"[red]not proven[/red], so apply writes nothing to {model['file']}: {model['proof']}")
            if "would_write" in model:
                console.print("the member as planned:")
        if "would_write" in model:
            console.print(Syntax(model["would_write"], "python", theme="ansi_dark", background_color="default"))
        if model.get("imports"):
            console.print(f"and the file gains: {'; '.join(model['imports'])}")


def print_still_missing(remaining: list[tuple[ModelPlan, MemberPlan]], console: Console, wrote: bool) -> None:
    """After apply: each required member it could not write, with its blocker, as `check` words it."""
    count = len(remaining)
    head = f"{count} required member(s) still missing" if wrote else f"Nothing eaglepatch can write; {count} required member(s) missing"
    console.print(f"\n[red]{head}[/red] (apply cannot write them; `eaglepatch explain MEMBER` says why):")
    for plan, entry in remaining:
        console.print(f"  [red]✗[/red] {plan.wrapper.path}:{plan.wrapper.cls.line}: {gap_message(plan, entry)}")
