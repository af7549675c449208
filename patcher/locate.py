"""Stage 1: find the `sglang/srt` folder below whatever PATH the user gave."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import EaglepatchError

HINT = (
    "point PATH at an SGLang checkout root (with python/sglang/srt), a site-packages "
    "folder, site-packages/sglang, or the srt folder itself"
)


@dataclass(frozen=True)
class SourceTree:
    """Where the SGLang sources are and what shape the folder around them has."""

    srt: Path  # .../sglang/srt
    given: Path  # the PATH the user named
    layout: str  # "checkout" | "site-packages" | "package" | "srt" | "venv"

    @property
    def models(self) -> Path:
        return self.srt / "models"

    def rel(self, path: Path) -> str:
        """Paths in reports are relative to the srt folder, with forward slashes."""
        try:
            return path.relative_to(self.srt).as_posix()
        except ValueError:
            return path.as_posix()


def _is_srt(folder: Path) -> bool:
    return folder.name == "srt" and (folder / "models").is_dir()


def locate_tree(path: Path | str | None) -> SourceTree:
    given = Path(path) if path is not None else Path.cwd()
    if not given.exists():
        raise EaglepatchError(f"does not exist; {HINT}", path=str(given))
    if not given.is_dir():
        raise EaglepatchError(f"is not a folder; {HINT}", path=str(given))
    given = given.resolve()
    candidates = [
        (given, "srt"),
        (given / "srt", "package"),
        (given / "sglang" / "srt", "site-packages"),
        (given / "python" / "sglang" / "srt", "checkout"),
    ]
    candidates += [(p, "venv") for p in sorted(given.glob("lib/python3*/site-packages/sglang/srt"))]
    for folder, layout in candidates:
        if _is_srt(folder):
            return SourceTree(srt=folder, given=given, layout=layout)
    raise EaglepatchError(f"no sglang/srt folder with models/ found below it; {HINT}", path=str(given))
