"""The SGLang engine: where `sglang/srt` sits below PATH, and each command on it through the stages
(pipeline.py wires read -> analyze; rewrite/ builds the edits).  The stages are imported by the
methods that run them, so `check` answered from the cache loads none of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...read.locate import Layout, SourceTree

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ...engine import Command, Explanation, Resolved, Reverted
    from ...errors import EaglepatchError
    from ...records import FileEdit, PreflightReport, Progress
    from ...selection import Analysis, Selection

HINT = (
    "point PATH at an SGLang checkout root (with python/sglang/srt), a site-packages "
    "folder, site-packages/sglang, or the srt folder itself"
)


def _is_srt(folder: Path) -> bool:
    return folder.name == "srt" and (folder / "models").is_dir()


class SglangEngine:
    name = "sglang"
    display_name = "SGLang"
    report_name: str | None = None
    tree_key: str = "srt"
    lists_clean_classes = False  # `check --all` reads hundreds of classes: the clean ones go unsaid
    hint = HINT
    not_found = f"no sglang/srt folder with models/ found below it; {HINT}"
    commands: frozenset[Command] = frozenset({"check", "diff", "apply", "revert", "explain", "preflight"})

    def locate(self, given: Path) -> SourceTree | None:
        candidates: list[tuple[Path, Layout]] = [
            (given, "srt"),
            (given / "srt", "package"),
            (given / "sglang" / "srt", "site-packages"),
            (given / "python" / "sglang" / "srt", "checkout"),
        ]
        candidates += [(p, "venv") for p in sorted(given.glob("lib/python3*/site-packages/sglang/srt"))]
        for folder, layout in candidates:
            if _is_srt(folder):
                return SourceTree(srt=folder, given=given, layout=layout)
        return None

    def refusal(self, command: Command) -> str | None:
        return None if command in self.commands else f"{command} does not read SGLang trees yet"

    def analyze(self, request: Resolved, progress: Progress | None = None) -> Analysis:
        from . import pipeline

        return pipeline.analyze_sglang(request, progress)

    def edits(self, analysis: Analysis) -> tuple[list[FileEdit], list[EaglepatchError]]:
        from ...rewrite.edits import build_edits

        return build_edits(analysis.cache, analysis.tree, analysis.plans, analysis.style)

    def revert(self, tree: SourceTree, selection: Selection) -> Reverted:
        """Every model file carrying eaglepatch's marker, or the modules --model (or [tool.eaglepatch]
        models) names; the tree's line length decides whether a delegation still reads as written."""
        from ...config import merge_settings
        from ...engine import Reverted
        from ...read.source_cache import SourceCache
        from ...read.style import load_style
        from ...rewrite.edits import plumbing_elsewhere, revert_edits

        merged, _ = merge_settings(tree, selection)
        cache = SourceCache(tree.srt)
        style = load_style(tree.models, tree.given)
        models = None if merged.all_models else merged.models
        edits, errors, kept = revert_edits(cache, tree, models, style)
        elsewhere = plumbing_elsewhere(tree, models) if models else []
        return Reverted(tuple(edits), tuple(errors), tuple(kept), tuple(elsewhere))

    def explain(self, analysis: Analysis, member: str) -> Explanation:
        from .explain import explanation

        return explanation(analysis, member)

    def preflight(self, request: Resolved, words: Sequence[str], shell: Mapping[str, str]) -> PreflightReport:
        from .preflight import run_preflight

        return run_preflight(request, words, shell)


SGLANG = SglangEngine()
