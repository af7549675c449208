"""What a command asks for and what the analysis answers, as records: the floor below the engines
(each engine builds an Analysis, the output stage reads them)."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .read.style import DEFAULT_STYLE, FormatStyle

if TYPE_CHECKING:
    from .analyze.context import RunContext
    from .read.locate import SourceTree
    from .read.source_cache import SourceCache
    from .records import ModelPlan, Protocol

DEFAULT_MODEL = "kimi_k25"


class EngineTraits(typing.Protocol):  # typing.Protocol: records.Protocol is the EAGLE-3 protocol
    """What the output stage reads of the engine an analysis came from (engine.Engine is the whole
    interface): so a report asks the engine, and never compares its name."""

    @property
    def name(self) -> str:
        """What --engine takes."""
        ...

    @property
    def display_name(self) -> str:
        """How people write it ("SGLang"), in titles and messages."""
        ...

    @property
    def report_name(self) -> str | None:
        """The JSON report's "engine" value; None leaves the key out (SGLang's reports came first)."""
        ...

    @property
    def tree_key(self) -> str:
        """The JSON report's key for the folder read: SGLang's `srt`, vLLM's package `root`."""
        ...

    @property
    def lists_clean_classes(self) -> bool:
        """`check --all` lists the classes that need nothing too (a registry of wrappers, a short list),
        not only those with something to say."""
        ...


@dataclass(frozen=True)
class Analysis:
    engine: EngineTraits
    tree: SourceTree
    cache: SourceCache
    protocol: Protocol
    plans: tuple[ModelPlan, ...]
    warnings: tuple[str, ...] = ()
    all_models: bool = False
    style: FormatStyle = DEFAULT_STYLE  # the tree's black and isort settings: what apply writes is laid out for them

    @property
    def context(self) -> RunContext:
        """The run's context, as its stages read through it (for a tool asking the run one more question)."""
        from .analyze.context import RunContext

        return RunContext(self.tree, self.cache, self.style, self.protocol)

    @property
    def missing_count(self) -> int:
        """Required members absent from the classes looked at, writable or not."""
        return sum(len(p.required_gaps) for p in self.plans)

    @property
    def fix_count(self) -> int:
        """Members `apply` would write."""
        return sum(len(p.fixes) for p in self.plans)


def model_stem(selector: str) -> str:
    """The module path a `--model` selector names, under models/: `kimi_k25:KimiK25...` -> `kimi_k25`,
    `dots3_note.nvidia.py` -> `dots3_note/nvidia`."""
    return selector.partition(":")[0].removesuffix(".py").replace(".", "/")


@dataclass(frozen=True)
class Selection:
    """What the user asked for, flags and [tool.eaglepatch] merged (flags win)."""

    path: Path | str | None = None
    models: tuple[str, ...] = ()
    all_models: bool = False
    consumers: tuple[str, ...] = ()  # paths or globs, relative to srt or absolute
    ignore: tuple[str, ...] = ()
    installed: bool = False
    python: str | None = None
    engine: str | None = None  # an engine's name (--engine); None: what the tree's shape says
    exclude: tuple[str, ...] = ()  # paths or globs never read, relative to srt or absolute
    ignore_from: Mapping[str, str] = field(default_factory=dict)  # member -> "--ignore" or the pyproject.toml naming it
    algorithms: tuple[str, ...] = ()  # --algorithm, as given; () : every algorithm the tree defines that calls target hooks
