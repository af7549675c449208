"""Plumbing plans (patcher/plumbing/planner.py) and their codemod over cached SGLang releases.

    python tools/plumbing_write_survey.py [--out FILE] [--json FILE] [--only 0.5.23 0.5.21 ...]

Each release is analysed the way `eaglepatch check --all` does (patcher.pipeline.analyze).  The targets
planned for: every class served as the target model that either has `set_eagle3_layers_to_capture`
(its own or inherited) with plumbing the analysis finds broken, or lacks the hook and holds a bare
backbone beside its own `lm_head` (the shape the synthesis writes hooks for).  For each: a plan, or
its blockers.  A plan is then written with codemods/add_plumbing.py into the files' texts (in memory;
nothing on disk changes), and the result checked: it compiles, a second run changes nothing, revert
gives the file back byte for byte, the analysis of the patched classes (with the reference's hook
added where the class has none) finds no gap, and black leaves a patched file it left alone before as
it is.  Release trees come from $EAGLEPATCH_SGLANG_CACHE (trees/<version>/site-packages); nothing is
downloaded.  Default releases: the newest cached one and each one before an upstream plumbing fix.
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
from eaglepatch.analyze.synthesize import HookLibrary
from eaglepatch.codemods.add_plumbing import PlumbingNotWritten, apply_plumbing
from eaglepatch.codemods.remove_plumbing import revert_plumbing
from eaglepatch.plumbing.gate import HOOK, TreeClasses, analyze_plumbing
from eaglepatch.plumbing.planner import PlumbingPlan, PlumbingPlanner, check_written, reference_hook, tree_references
from eaglepatch.read.style import load_style
from eaglepatch.run import analyze
from eaglepatch.selection import Selection

# the release before each upstream fix that wrote plumbing by hand (bench/history.json: a hook written
# with a body where the class had none): Qwen3-VL 0.5.11, Gemma3/4 0.5.12, MiniMax-M3 0.5.18, Qwen3.5 0.5.22
BEFORE_FIXES = ("0.5.10.post1", "0.5.11", "0.5.17", "0.5.21")
NEWEST = "0.5.23"


@dataclass
class Row:
    cls: str
    why: str  # "broken" (has the hook) | "bare" (lacks it)
    plan: PlumbingPlan
    written: str = ""  # "" | "ok" | what went wrong writing or checking it
    black: bool | None = None  # black leaves the patched files alone (None: a file black changed before)


@dataclass
class Release:
    version: str
    rows: list[Row] = field(default_factory=list)


def site_packages(version: str) -> Path:
    cache = os.environ.get("EAGLEPATCH_SGLANG_CACHE")
    if not cache:
        sys.exit("set EAGLEPATCH_SGLANG_CACHE to the cached release trees (trees/<version>/site-packages)")
    return Path(cache) / "trees" / version / "site-packages"


def _bare_backbone(plan) -> str | None:
    """The attribute of a bare backbone held beside the class's own lm_head (None when there is none)."""
    cls = plan.wrapper.cls
    if "lm_head" not in cls.members:
        return None
    if any(i.classes and any("lm_head" in c.members for c in i.classes) for i in plan.wrapper.inners):
        return None  # it holds a whole causal LM: a wrapper, whose hooks are delegations
    bare = [i for i in plan.wrapper.inners if i.classes and all("lm_head" not in c.members for c in i.classes)]
    names = [i.attribute for i in bare]
    return next((n for n in ("model", "language_model", "llm") if n in names), names[0] if names else None)


def survey(version: str) -> Release:
    analysis = analyze(Selection(path=site_packages(version), all_models=True))
    resolver = Resolver(analysis.context)  # a fresh one: apply's adoptions stay out of it
    classes = TreeClasses(resolver)
    style = load_style(analysis.tree.models, analysis.tree.given)
    library = HookLibrary(resolver)
    planner = PlumbingPlanner(classes, tree_references(library))
    release = Release(version)
    for plan in analysis.plans:
        if plan.role != "target":
            continue
        cls = plan.wrapper.cls
        key = f"{cls.file}:{cls.name}"
        if HOOK in cls.members and HOOK not in cls.pending:
            report = analyze_plumbing(classes, key)
            if not report.broken:
                continue
            release.rows.append(Row(key, "broken", planner.plan(key)))
        elif HOOK not in cls.members:
            attribute = _bare_backbone(plan)
            if attribute is not None:
                release.rows.append(Row(key, "bare", planner.plan(key, attribute)))
    for row in release.rows:
        if row.plan.ok:
            row.written, row.black = write(analysis.tree.srt, classes, planner, row.plan, style.line_length)
    return release


def write(srt: Path, classes: TreeClasses, planner: PlumbingPlanner, plan: PlumbingPlan, width: int) -> tuple[str, bool | None]:
    """Write the plan into its files' texts and check what came out."""
    import black

    patched: dict[str, str] = {}
    stable: bool | None = True
    for file in plan.files:
        text = (srt / file).read_text(encoding="utf-8")
        try:
            out = apply_plumbing(text, plan.pieces_in(file), width)
        except PlumbingNotWritten as exc:
            return f"not written: {exc}", None
        if apply_plumbing(out, plan.pieces_in(file), width) != out:
            return "a second run changes it", None
        back, _, kept = revert_plumbing(out)
        if back != text or kept:
            return "revert does not give the file back", None
        mode = black.Mode(line_length=width)
        if black.format_str(text, mode=mode) != text:
            stable = None if stable else stable
        elif black.format_str(out, mode=mode) != out:
            stable = False
        patched[file] = out
    hook = reference_hook(planner, plan) if plan.needs_hook else None
    left = check_written(classes, plan, patched, *hook) if hook is not None else check_written(classes, plan, patched)
    if left:
        return "gaps left: " + "; ".join(f"{b.piece}: {b.why}" for b in left), stable
    return "ok", stable


def markdown(releases: list[Release]) -> str:
    out = [
        "| release | planned for | plumbing already there (hook only) | plan | written & checked | black-stable | blocked | of which have the hook |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in releases:
        complete = [row for row in r.rows if row.plan.complete]
        ok = [row for row in r.rows if row.plan.ok]
        good = [row for row in ok if row.written == "ok"]
        stable = [row for row in good if row.black]
        blocked = [row for row in r.rows if row.plan.blockers]
        out.append(
            f"| {r.version} | {len(r.rows)} | {len(complete)} | {len(ok)} | {len(good)} | {len(stable)} | {len(blocked)} "
            f"| {sum(row.why == 'broken' for row in blocked)} |"
        )
    out.append("")
    for r in releases:
        out += [f"### {r.version}", ""]
        pieces = Counter(b.piece for row in r.rows for b in row.plan.blockers)
        out.append("blockers by piece: " + ", ".join(f"{p} {n}" for p, n in pieces.most_common()))
        out.append("")
        for row in sorted(r.rows, key=lambda x: (not x.plan.complete, not x.plan.ok, x.cls)):
            if row.plan.complete:
                out.append(f"- {row.cls} ({row.why}): plumbing complete: the hook alone is missing")
            elif row.plan.ok:
                kinds = Counter(p.kind for p in row.plan.pieces)
                note = "" if row.written == "ok" else f" — **{row.written}**"
                black_note = "" if row.black is not False else " (black would change it)"
                out.append(f"- {row.cls} ({row.why}): plan from {row.plan.reference}: {', '.join(f'{k} {n}' for k, n in kinds.items())}{note}{black_note}")
            else:
                out.append(f"- {row.cls} ({row.why}): blocked: " + "; ".join(f"{b.piece}: {b.why}" for b in row.plan.blockers))
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the markdown report here (else stdout)")
    parser.add_argument("--json", type=Path, help="write every row as JSON here")
    parser.add_argument("--only", nargs="*", help="releases to survey (default: the newest and each before a plumbing fix)")
    args = parser.parse_args()
    releases = [survey(v) for v in (args.only or [NEWEST, *BEFORE_FIXES])]
    text = markdown(releases)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.json:
        rows = [
            {
                "release": r.version,
                "class": row.cls,
                "why": row.why,
                "reference": row.plan.reference,
                "pieces": [p.kind for p in row.plan.pieces],
                "blockers": [{"piece": b.piece, "why": b.why, "at": b.at} for b in row.plan.blockers],
                "written": row.written,
                "black": row.black,
            }
            for r in releases
            for row in r.rows
        ]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
