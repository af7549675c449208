"""Read stage: find the `sglang/srt` folder below whatever PATH the user gave."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from ..errors import EaglepatchError

Engine = Literal["sglang", "vllm"]
Layout = Literal["checkout", "site-packages", "package", "srt", "venv"]
ENGINES: tuple[Engine, ...] = get_args(Engine)
VLLM_MODELS = "model_executor/models"
VLLM_MARKER = "model_executor/models/interfaces.py"  # below the vllm package folder

HINT = (
    "point PATH at an SGLang checkout root (with python/sglang/srt), a site-packages "
    "folder, site-packages/sglang, or the srt folder itself"
)


@dataclass(frozen=True)
class SourceTree:
    """Where the SGLang sources are and what shape the folder around them has."""

    srt: Path  # .../sglang/srt (for vLLM: the .../vllm package folder)
    given: Path  # the PATH the user named
    layout: Layout
    engine: Engine = "sglang"  # vLLM: patcher/engines/vllm/tree.py

    @property
    def models(self) -> Path:
        return self.srt / VLLM_MODELS if self.engine == "vllm" else self.srt / "models"

    def rel(self, path: Path) -> str:
        """Paths in reports are relative to the srt folder, with forward slashes."""
        try:
            return path.relative_to(self.srt).as_posix()
        except ValueError:
            return path.as_posix()


def _is_srt(folder: Path) -> bool:
    return folder.name == "srt" and (folder / "models").is_dir()


VLLM_HINT = (
    "point PATH at a vLLM checkout root, a site-packages folder holding vllm/, or site-packages/vllm "
    "(with vllm/model_executor/models/interfaces.py)"
)


def _vllm_package(given: Path) -> tuple[Path, Layout] | None:
    """The vllm package folder below PATH, when PATH is a vLLM tree: a checkout root or a site-packages
    folder (both hold vllm/), or the vllm folder itself."""
    shapes: tuple[tuple[Path, Layout], ...] = ((given / "vllm", "site-packages"), (given, "package"))
    for folder, layout in shapes:
        if (folder / VLLM_MARKER).is_file():
            checkout = layout == "site-packages" and ((given / "pyproject.toml").is_file() or (given / "setup.py").is_file())
            return folder, "checkout" if checkout else layout
    return None


def locate_tree(path: Path | str | None, engine: str | None = None) -> SourceTree:
    """The tree PATH names; `engine` (sglang or vllm) overrides what the folder's shape says."""
    given = Path(path) if path is not None else Path.cwd()
    if engine is not None and engine not in ENGINES:
        raise EaglepatchError(f"unknown engine {engine!r}; pass one of {', '.join(ENGINES)}", path=str(given))
    hint = VLLM_HINT if engine == "vllm" else HINT
    if not given.exists():
        raise EaglepatchError(f"does not exist; {hint}", path=str(given))
    if not given.is_dir():
        raise EaglepatchError(f"is not a folder; {hint}", path=str(given))
    given = given.resolve()
    if engine == "vllm":
        found = _vllm_package(given)
        if found is None:
            raise EaglepatchError(f"no vllm/{VLLM_MARKER} found below it; {VLLM_HINT}", path=str(given))
        return SourceTree(srt=found[0], given=given, layout=found[1], engine="vllm")
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
    # SGLang first, so a site-packages holding both engines reads as it always did (--engine vllm picks vLLM)
    found = _vllm_package(given) if engine is None else None
    if found is not None:
        return SourceTree(srt=found[0], given=given, layout=found[1], engine="vllm")
    raise EaglepatchError(f"no sglang/srt folder with models/ found below it; {HINT}", path=str(given))
