"""The engines eaglepatch reads, one package each (sglang/, vllm/), and the one place that picks one:
by name (--engine) or by the shape of the folder PATH names.  Everything after asks the engine
(patcher/engine.py) and never compares its name."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EaglepatchError
from .sglang.engine import SGLANG
from .vllm.engine import VLLM

if TYPE_CHECKING:
    from ..engine import Engine
    from ..read.locate import SourceTree

# The order a folder's shape is tried in: SGLang first, so a site-packages holding both engines reads
# as it always did (--engine vllm picks vLLM).  The first is also whose hint a PATH that is no tree gets.
ENGINES: tuple[Engine, ...] = (SGLANG, VLLM)
NAMES: tuple[str, ...] = tuple(engine.name for engine in ENGINES)


def engine_named(name: str, given: Path | str = "") -> Engine:
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise EaglepatchError(f"unknown engine {name!r}; pass one of {', '.join(NAMES)}", path=str(given))


def find_engine(path: Path | str | None, name: str | None = None) -> tuple[Engine, SourceTree]:
    """The engine and tree PATH names; `name` (an engine's, as --engine takes it) overrides what the
    folder's shape says."""
    given = Path(path) if path is not None else Path.cwd()
    named = engine_named(name, given) if name is not None else None
    hint = (named or ENGINES[0]).hint
    if not given.exists():
        raise EaglepatchError(f"does not exist; {hint}", path=str(given))
    if not given.is_dir():
        raise EaglepatchError(f"is not a folder; {hint}", path=str(given))
    given = given.resolve()
    for engine in (named,) if named is not None else ENGINES:
        tree = engine.locate(given)
        if tree is not None:
            return engine, tree
    raise EaglepatchError((named or ENGINES[0]).not_found, path=str(given))


def locate_tree(path: Path | str | None, name: str | None = None) -> SourceTree:
    """The tree alone (the stages take a SourceTree; the engine is what a command asks)."""
    return find_engine(path, name)[1]
