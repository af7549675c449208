"""Read stage: the tree PATH names, as a record.  Which engine's tree it is, and where its sources sit
below PATH, each engine says (patcher/engines/: `Engine.locate`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Layout = Literal["checkout", "site-packages", "package", "srt", "venv"]


@dataclass(frozen=True)
class SourceTree:
    """Where the engine's sources are and what shape the folder around them has."""

    srt: Path  # .../sglang/srt (for vLLM: the .../vllm package folder)
    given: Path  # the PATH the user named
    layout: Layout
    models_dir: str = "models"  # where the model files are, relative to srt

    @property
    def models(self) -> Path:
        return self.srt / self.models_dir

    def rel(self, path: Path) -> str:
        """Paths in reports are relative to the srt folder, with forward slashes."""
        try:
            return path.relative_to(self.srt).as_posix()
        except ValueError:
            return path.as_posix()
