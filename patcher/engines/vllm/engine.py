"""The vLLM engine: where the `vllm` package sits below PATH, and each command on it through the vLLM
profile (tree.py, protocol.py, plan.py, edits.py, revert.py).  The profile is imported by the methods
that run it, so `check` answered from the cache loads none of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...read.locate import Layout, SourceTree
from . import VLLM_MARKER, VLLM_MODELS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ...engine import Command, Explanation, Resolved, Reverted
    from ...errors import EaglepatchError
    from ...records import FileEdit, PreflightReport, Progress
    from ...selection import Analysis, Selection

HINT = (
    "point PATH at a vLLM checkout root, a site-packages folder holding vllm/, or site-packages/vllm "
    "(with vllm/model_executor/models/interfaces.py)"
)
# what a command the profile does not serve yet points at instead
INSTEAD: dict[str, str] = {"explain": "eaglepatch check shows each wrapper's reasons"}


class VllmEngine:
    name = "vllm"
    display_name = "vLLM"
    report_name: str | None = "vllm"
    tree_key: str = "root"
    lists_clean_classes = True  # `check --all` reads the registered wrappers: a short list, each said
    hint = HINT
    not_found = f"no vllm/{VLLM_MARKER} found below it; {HINT}"
    commands: frozenset[Command] = frozenset({"check", "diff", "apply", "revert", "preflight"})

    def locate(self, given: Path) -> SourceTree | None:
        """A checkout root or a site-packages folder (both hold vllm/), or the vllm folder itself."""
        shapes: tuple[tuple[Path, Layout], ...] = ((given / "vllm", "site-packages"), (given, "package"))
        for folder, layout in shapes:
            if (folder / VLLM_MARKER).is_file():
                checkout = layout == "site-packages" and ((given / "pyproject.toml").is_file() or (given / "setup.py").is_file())
                return SourceTree(srt=folder, given=given, layout="checkout" if checkout else layout, models_dir=VLLM_MODELS)
        return None

    def refusal(self, command: Command) -> str | None:
        if command in self.commands:
            return None
        instead = INSTEAD.get(command)
        return f"{command} does not read vLLM trees yet" + (f"; {instead}" if instead else "")

    def analyze(self, request: Resolved, progress: Progress | None = None) -> Analysis:
        from .plan import analyze_vllm

        selection = request.selection
        from ...errors import EaglepatchError
        from ...records import EAGLE3

        others = [a for a in selection.algorithms if a.upper() != EAGLE3]
        if others:
            raise EaglepatchError(f"--algorithm {others[0]}: the vLLM profile reads EAGLE-3's interface (SupportsEagle3) only; pass --algorithm EAGLE3 or none")
        return analyze_vllm(self, request, progress)

    def edits(self, analysis: Analysis) -> tuple[list[FileEdit], list[EaglepatchError]]:
        from .edits import build_vllm_edits

        return build_vllm_edits(analysis.tree, analysis.plans, analysis.cache)

    def revert(self, tree: SourceTree, selection: Selection) -> Reverted:
        """The marked files of the modules --model names, or all of them ([tool.eaglepatch] is not read)."""
        from ...engine import Reverted
        from .revert import revert_vllm_edits

        edits, errors, kept = revert_vllm_edits(tree, None if selection.all_models else list(selection.models) or None)
        return Reverted(tuple(edits), tuple(errors), tuple(kept))

    def explain(self, analysis: Analysis, member: str) -> Explanation:
        raise NotImplementedError(self.refusal("explain"))  # cli asks refusal() first

    def preflight(self, request: Resolved, words: Sequence[str], shell: Mapping[str, str]) -> PreflightReport:
        from .preflight import run_vllm_preflight

        return run_vllm_preflight(request, words, shell)


VLLM = VllmEngine()
