"""`[tool.eaglepatch]` in the target tree's pyproject.toml: defaults a fork's CI can rely on.

    [tool.eaglepatch]
    models = ["kimi_k25"]            # what `check` looks at without --model (or all = true)
    consumers = ["speculative/my_worker.py", "speculative/extra_*.py"]   # globs, relative to srt
    ignore = ["set_embed"]           # protocol members never reported or written
    exclude = ["models/broken.py"]   # files never read (globs, relative to srt): the gate does not ask them to parse
    algorithms = ["EAGLE3"]          # the speculative algorithms checked (default: every one that calls target hooks)

Command-line flags win over the file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EaglepatchError
from .read.locate import SourceTree
from .selection import Selection

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]  # a 3.10 dependency; mypy may run on 3.11 without it

KNOWN_KEYS = {"models", "all", "consumers", "ignore", "exclude", "algorithms"}


@dataclass(frozen=True)
class Settings:
    models: list[str] = field(default_factory=list)
    all_models: bool = False
    consumers: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    algorithms: list[str] = field(default_factory=list)
    source: Path | None = None  # the pyproject.toml it came from


def find_pyproject(srt: Path, stop: Path | None = None) -> Path | None:
    """The nearest pyproject.toml with a [tool.eaglepatch] table, from srt upwards: `python/` and the
    repository root of a checkout both count.  The search ends at the git work tree root (the folder
    holding `.git`), else at the folder the user named or, above it, at site-packages."""
    folder = srt
    while True:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and b"[tool.eaglepatch]" in candidate.read_bytes():
            return candidate
        if (folder / ".git").exists() or folder.parent == folder or folder.name == "site-packages":
            return None
        if stop is not None and folder == stop and not _inside_work_tree(folder):
            return None
        folder = folder.parent


def _inside_work_tree(folder: Path) -> bool:
    return any((parent / ".git").exists() for parent in (folder, *folder.parents))


def load_settings(srt: Path, stop: Path | None = None) -> Settings:
    path = find_pyproject(srt, stop)
    if path is None:
        return Settings()
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("eaglepatch", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise EaglepatchError(f"[tool.eaglepatch] cannot be read ({exc}); fix the TOML", path=str(path)) from None
    unknown = set(table) - KNOWN_KEYS
    if unknown:
        raise EaglepatchError(
            f"[tool.eaglepatch] has unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN_KEYS))}",
            path=str(path),
        )

    def strings(key: str) -> list[str]:
        value = table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise EaglepatchError(f"[tool.eaglepatch] {key} must be a list of strings", path=str(path))
        return value

    all_models = table.get("all", False)
    if not isinstance(all_models, bool):
        raise EaglepatchError("[tool.eaglepatch] all must be true or false", path=str(path))
    return Settings(strings("models"), all_models, strings("consumers"), strings("ignore"), strings("exclude"), strings("algorithms"), path)


def merge_settings(tree: SourceTree, selection: Selection) -> tuple[Selection, list[Path]]:
    """The flags merged with the tree's [tool.eaglepatch] (flags win), each --exclude and --consumer
    pattern checked to name a file: (the merged selection, the consumer files, resolved)."""
    settings = load_settings(tree.srt, tree.given)
    if selection.all_models and selection.models:
        raise EaglepatchError("--all and --model do not go together; pass one of them", path=str(tree.given))
    merged = Selection(
        path=tree.given,
        models=tuple(selection.models or (() if selection.all_models else settings.models)),
        all_models=selection.all_models or (settings.all_models and not selection.models),
        consumers=tuple(selection.consumers or settings.consumers),
        ignore=tuple(sorted(set(selection.ignore) | set(settings.ignore))),
        engine=selection.engine,
        exclude=tuple(dict.fromkeys([*selection.exclude, *settings.exclude])),
        algorithms=tuple(selection.algorithms or settings.algorithms),
        ignore_from={
            **{name: str(settings.source) for name in settings.ignore},
            **{name: "--ignore" for name in selection.ignore},
        },
    )
    for pattern in merged.exclude:
        if not matching_files(tree, pattern):
            where = str(settings.source) if pattern in settings.exclude and pattern not in selection.exclude else "--exclude"
            raise EaglepatchError(f"exclude {pattern!r} names no file (relative paths are read from {tree.srt})", path=where)
    consumers: list[Path] = []
    for pattern in merged.consumers:
        matches = matching_files(tree, pattern)
        if not matches:
            where = str(settings.source) if pattern in settings.consumers and not selection.consumers else "--consumer"
            raise EaglepatchError(f"consumer {pattern!r} names no file (relative paths are read from {tree.srt})", path=where)
        consumers += [m.resolve() for m in matches if m.resolve() not in consumers]
    return merged, consumers


def matching_files(tree: SourceTree, pattern: str) -> list[Path]:
    """The files a --consumer or --exclude pattern names: a glob relative to srt, or an absolute path."""
    base = Path(pattern)
    matches = sorted(tree.srt.glob(pattern)) if not base.is_absolute() else ([base] if base.is_file() else [])
    return [m for m in matches if m.is_file()]


def excluded_files(tree: SourceTree, patterns: Iterable[str]) -> frozenset[Path]:
    """The resolved paths the user left out: no stage reads them, and the gate does not ask them to parse."""
    return frozenset(m.resolve() for pattern in patterns for m in matching_files(tree, pattern))
