"""The plumbing analysis (patcher/plumbing/gate.py) over every cached SGLang release.

    python tools/plumbing_survey.py [--out FILE] [--json FILE] [--only 0.5.9 0.5.23 ...]

Each release is analysed the way `eaglepatch check --all` does (patcher/run.py: analyze); every class
of a plan that has `set_eagle3_layers_to_capture` (its own or inherited; not one this run's apply
would write) gets `analyze_plumbing`, through the same resolver.  Per release: how many classes were
analysed, how many have complete plumbing, which are broken (with each gap), which could not be
judged (a backbone outside the tree).  Release trees come from $EAGLEPATCH_SGLANG_CACHE
(trees/<version>/site-packages), versions from tests/releases.txt; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from eaglepatch.analyze.resolve import Resolver
from eaglepatch.plumbing.gate import HOOK, PlumbingReport, TreeClasses, analyze_plumbing
from eaglepatch.run import analyze
from eaglepatch.selection import Selection

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ROOT / "tests" / "releases.txt"


@dataclass
class Row:
    report: PlumbingReport
    status: str  # the plan's verdict today
    role: str


@dataclass
class Release:
    version: str
    rows: list[Row] = field(default_factory=list)

    @property
    def complete(self) -> list[Row]:
        return [r for r in self.rows if r.report.complete]

    @property
    def broken(self) -> list[Row]:
        return [r for r in self.rows if r.report.broken]

    @property
    def unjudged(self) -> list[Row]:
        return [r for r in self.rows if not r.report.broken and not r.report.complete]


def versions() -> list[str]:
    return [line.strip() for line in RELEASES.read_text().splitlines() if line.strip() and not line.startswith("#")]


def site_packages(version: str) -> Path:
    cache = os.environ.get("EAGLEPATCH_SGLANG_CACHE")
    if not cache:
        sys.exit("set EAGLEPATCH_SGLANG_CACHE to the cached release trees (trees/<version>/site-packages)")
    return Path(cache) / "trees" / version / "site-packages"


def survey(version: str) -> Release:
    analysis = analyze(Selection(path=site_packages(version), all_models=True))
    resolver = Resolver(analysis.context)  # a fresh one: apply's adoptions stay out of it
    classes = TreeClasses(resolver)
    release = Release(version)
    for plan in analysis.plans:
        cls = plan.wrapper.cls
        if HOOK not in cls.members or HOOK in cls.pending:
            continue
        report = analyze_plumbing(classes, f"{cls.file}:{cls.name}")
        release.rows.append(Row(report, plan.status, plan.role))
    return release


def markdown(releases: list[Release]) -> str:
    out = [
        "# Plumbing survey: what `set_eagle3_layers_to_capture` reaches, per release",
        "",
        "Written by `tools/plumbing_survey.py`: patcher/plumbing/gate.py over every class of `check --all`",
        "that has the hook, its own or inherited (not one `apply` would write). *complete*: every piece found;",
        "*broken*: at least one gap; *not judged*: something could not be followed (a backbone outside the",
        "tree). Targets are the classes EAGLE-3 serves as the target model (drafts and non-generation models",
        "inherit the hook but never have it called); *compliant & broken*: targets `check` calls compliant",
        "today whose plumbing has a gap.",
        "",
        "| release | analysed | complete | broken | not judged | targets | targets complete | targets broken | compliant & broken |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for release in releases:
        targets = [r for r in release.rows if r.role == "target"]
        broken = [r for r in targets if r.report.broken]
        lying = [r for r in broken if r.status == "compliant"]
        complete = [r for r in targets if r.report.complete]
        out.append(
            f"| {release.version} | {len(release.rows)} | {len(release.complete)} | {len(release.broken)} | {len(release.unjudged)} "
            f"| {len(targets)} | {len(complete)} | {len(broken)} | {len(lying)} |"
        )
    out.append("")
    for release in releases:
        out += [f"## {release.version}", ""]
        mechanisms = Counter(r.report.mechanism for r in release.rows)
        out.append("mechanisms: " + ", ".join(f"{m} {n}" for m, n in sorted(mechanisms.items())))
        out.append("")
        for row in (r for r in release.broken if r.role == "target"):
            report = row.report
            out.append(f"- **{report.cls}** ({row.status}, {report.mechanism})")
            out += [f"  - {gap.piece}: {gap.why} ({gap.at})" for gap in report.gaps]
        for row in release.unjudged:
            out.append(f"- not judged: {row.report.cls} ({row.status}, {row.role}): {'; '.join(row.report.unresolved)}")
        for row in (r for r in release.broken if r.role != "target" and any(g.piece == "flag-default" for g in r.report.gaps)):
            out.append(f"- **{row.report.cls}** ({row.status}, {row.role}): its forward raises whatever the role")
            out += [f"  - {gap.piece}: {gap.why} ({gap.at})" for gap in row.report.gaps if gap.piece == "flag-default"]
        others = [r for r in release.broken if r.role != "target"]
        if others:
            pieces = Counter(g.piece for r in others for g in r.report.gaps)
            out.append(
                f"- broken, not targets ({len(others)}): "
                + ", ".join(f"{r.report.cls.rpartition(':')[2]} ({r.role})" for r in others)
                + "; gaps: "
                + ", ".join(f"{p} {n}" for p, n in sorted(pieces.items()))
            )
        out.append("")
    return "\n".join(out)


def as_json(releases: list[Release]) -> list[dict]:
    return [
        {
            "version": release.version,
            "classes": [
                {
                    "class": row.report.cls,
                    "status": row.status,
                    "role": row.role,
                    "mechanism": row.report.mechanism,
                    "gaps": [{"piece": g.piece, "why": g.why, "at": g.at} for g in row.report.gaps],
                    "inert": list(row.report.inert),
                    "unresolved": list(row.report.unresolved),
                }
                for row in release.rows
            ],
        }
        for release in releases
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="markdown report (default: stdout)")
    parser.add_argument("--json", type=Path, help="the same, as JSON")
    parser.add_argument("--only", nargs="*", help="these releases only")
    args = parser.parse_args()
    chosen = [v for v in versions() if not args.only or v in args.only]
    releases = []
    for version in chosen:
        print(f"{version} ...", file=sys.stderr, flush=True)
        releases.append(survey(version))
    text = markdown(releases)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.json:
        args.json.write_text(json.dumps(as_json(releases), indent=1) + "\n")


if __name__ == "__main__":
    main()
