"""One command's run up to the analysis: the engine picked once (--engine, or the shape of the folder
PATH names), the selection merged with the tree's [tool.eaglepatch], then the analysis asked of the
engine.  cli.py calls these and then talks to the engine only (patcher/engine.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .engine import Resolved, resolved
from .engines import find_engine
from .errors import EaglepatchError
from .selection import Selection

if TYPE_CHECKING:
    from .engine import Engine
    from .read.locate import SourceTree
    from .records import Progress
    from .selection import Analysis


def locate(selection: Selection) -> tuple[Engine, SourceTree]:
    """The engine and its tree: PATH, or the sglang `--installed` / `--python` would import."""
    path = selection.path
    if selection.installed or selection.python:
        if path is not None:
            raise EaglepatchError("PATH and --installed/--python do not go together; pass one of them", path=str(path))
        from .read.installed import installed_sglang

        path = installed_sglang(selection.python)
    return find_engine(path, selection.engine)


def resolve(selection: Selection, located: tuple[Engine, SourceTree] | None = None) -> Resolved:
    """The selection made concrete for its engine; `located` is what locate() already returned for it."""
    engine, tree = located if located is not None else locate(selection)
    return resolved(engine, tree, selection)


def analyze(
    request: Resolved | Selection | Path | str | None, models: Sequence[str] | None = None, all_models: bool = False, progress: Progress | None = None
) -> Analysis:
    """The engine's analysis of what `request` names.  A bare PATH (with `models`, `all_models`) reads the
    tree as it is, without its [tool.eaglepatch]; a Selection is resolved first."""
    if isinstance(request, Selection):
        request = resolve(request)
    elif not isinstance(request, Resolved):
        engine, tree = find_engine(request)
        request = Resolved(engine, tree, Selection(request, tuple(models or ()), all_models))
    return request.engine.analyze(request, progress)
