"""Output stage of `preflight`: its findings as a table for people or JSON for scripts."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from ..records import PreflightReport

SCHEMA = 1
_STYLE = {"fail": "red", "warn": "yellow", "info": "dim"}
_ORDER = {"fail": 0, "warn": 1, "info": 2}


def preflight_json(report: PreflightReport) -> dict:
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("fail", "warn", "info")}
    return {
        "schema": SCHEMA,
        "srt": report.srt,
        "algorithm": report.algorithm,
        "target": report.target_class,
        "draft": report.draft_class,
        "findings": [asdict(f) for f in report.findings],
        "summary": counts,
    }


def write_preflight_json(report: PreflightReport, out: TextIO) -> None:
    json.dump(preflight_json(report), out, indent=2)
    out.write("\n")


def print_preflight(report: PreflightReport, console: Console) -> None:
    algorithm = report.algorithm or "no speculative algorithm"
    console.print(f"[bold]preflight of the launch ({escape(algorithm)})[/bold] on {escape(report.srt)}")
    console.print(f"  target: {escape(report.target_class or 'not served by this tree')}; draft: {escape(report.draft_class or '-')}")
    for finding in sorted(report.findings, key=lambda f: _ORDER[f.severity]):
        style = _STYLE[finding.severity]
        console.print(f"[{style}]{finding.severity:<4}[/{style}] [bold]{finding.check}[/bold] ({finding.when}): {escape(finding.message)}")
        details = [f"at {finding.where}" if finding.where else "", f"fix: {finding.fix}" if finding.fix else ""]
        if any(details):
            console.print(f"     [dim]{escape('; '.join(d for d in details if d))}[/dim]")
    counts = preflight_json(report)["summary"]
    console.print(f"{counts['fail']} fail, {counts['warn']} warn, {counts['info']} info")
