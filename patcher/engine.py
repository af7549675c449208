"""The Engine protocol: what every engine eaglepatch reads (SGLang, vLLM) answers, so the commands ask
the engine instead of comparing its name.  The implementations and the registry that picks one are in
patcher/engines/; cli.py picks the engine once (from --engine or the tree's shape) and talks to it
through this interface only.

A new command is one more name in `Command`: each engine's `refusal` says whether it serves it.  A
second axis beside the engine (the speculative algorithm) rides on the records the engine returns
(Resolved, Analysis), not on a string compared at each use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from .selection import EngineTraits

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .errors import EaglepatchError
    from .read.locate import SourceTree
    from .read.source_cache import SourceCache
    from .records import FileEdit, PreflightReport, Progress
    from .selection import Analysis, Selection

Command = Literal["check", "diff", "apply", "revert", "explain", "preflight"]


@dataclass(frozen=True)
class Resolved:
    """A Selection made concrete, for one engine: the engine picked, its tree, the flags merged with the
    tree's [tool.eaglepatch] (flags win), the consumer patterns as files, and the files left out."""

    engine: Engine
    tree: SourceTree
    selection: Selection
    consumers: tuple[Path, ...] = ()
    excluded: frozenset[Path] = frozenset()
    reading: SourceCache | None = field(default=None, compare=False, repr=False)  # see `cache`

    @property
    def cache(self) -> SourceCache:
        """The run's reading of the tree, each file read and parsed once for every stage and every part
        of a command (preflight's rules and its target's analysis), made when first asked for: a `check`
        answered from the result cache never builds one."""
        if self.reading is None:
            from .read.source_cache import SourceCache

            object.__setattr__(self, "reading", SourceCache(self.tree.srt, self.excluded))  # a memo, set once
        assert self.reading is not None
        return self.reading

    def asking(self, selection: Selection) -> Resolved:
        """This run (its engine, tree and reading) asked about `selection` instead, merged with the tree's
        [tool.eaglepatch] as every selection is (`resolved`)."""
        return resolved(self.engine, self.tree, selection, self.cache)


def resolved(engine: Engine, tree: SourceTree, selection: Selection, reading: SourceCache | None = None) -> Resolved:
    """`selection` made concrete on `tree`: its flags merged with the tree's [tool.eaglepatch] (flags win),
    the consumer patterns found, the files left out listed."""
    from .config import excluded_files, merge_settings

    merged, consumers = merge_settings(tree, selection)
    return Resolved(engine, tree, merged, tuple(consumers), excluded_files(tree, merged.exclude), reading)


@dataclass(frozen=True)
class Reverted:
    """What `revert` would do: the edits taking eaglepatch's own code out, the files that could not be
    read, and (file:class, members) it keeps because they were edited since eaglepatch wrote them."""

    edits: tuple[FileEdit, ...]
    errors: tuple[EaglepatchError, ...]
    kept: tuple[tuple[str, list[str]], ...]
    elsewhere: tuple[str, ...] = ()  # model files --model did not name that hold plumbing eaglepatch wrote


@dataclass(frozen=True)
class WouldWrite:
    """One member of one class as `explain` shows what apply writes: the member's lines as written into
    the proven file (`proven`, with the imports the file gains), or, when the proof (or anything else)
    stopped the file, `proof` says why and `text` is the member as planned (None when it cannot be shown)."""

    proven: bool
    proof: str | None = None
    text: str | None = None
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Explanation:
    """What `explain MEMBER` shows beyond the analysis, built by the engine (the edits exactly as diff and
    apply build and prove them), so patcher/output/explain.py only lays it out."""

    member: str
    would_write: Mapping[tuple[str, str], WouldWrite] = field(default_factory=dict)  # (wrapper file, class) ->
    references: Mapping[str, str] = field(default_factory=dict)  # a learned body's reference (Signature.at) -> its code


class Engine(EngineTraits, Protocol):
    """One engine: how its tree is found, what each command does on it."""

    @property
    def hint(self) -> str:
        """Where PATH should point, for a message about a PATH that is not this engine's tree."""
        ...

    @property
    def not_found(self) -> str:
        """Why PATH is not this engine's tree, when --engine named it."""
        ...

    @property
    def commands(self) -> frozenset[Command]:
        """The commands this engine serves (a command added to `Command` is served by none until one says so)."""
        ...

    def locate(self, given: Path) -> SourceTree | None:
        """The tree below the existing folder `given` when it has this engine's shape, else None."""
        ...

    def refusal(self, command: Command) -> str | None:
        """None when this engine serves `command` (it is in `commands`); else the reason it does not (and
        what to run instead), the line the command stops with (exit 2) before anything is read."""
        ...

    def analyze(self, request: Resolved, progress: Progress | None = None) -> Analysis:
        """The protocol read from the tree, the classes asked for, a plan per class."""
        ...

    def edits(self, analysis: Analysis) -> tuple[list[FileEdit], list[EaglepatchError]]:
        """The per-file edits `apply` writes (and `diff` shows), each proven; a file that cannot be
        edited is an error and does not stop the others."""
        ...

    def revert(self, tree: SourceTree, selection: Selection) -> Reverted:
        """The edits that take out what eaglepatch wrote into the classes `selection` names (all with
        --all or none named), and only that."""
        ...

    def explain(self, analysis: Analysis, member: str) -> Explanation:
        """What `explain` shows of `member` that the analysis does not hold (what apply writes, the
        learned references' code).  Asked only when `refusal("explain")` is None."""
        ...

    def preflight(self, request: Resolved, words: Sequence[str], shell: Mapping[str, str]) -> PreflightReport:
        """The failures the launch `words` would meet on the tree of `request`, run from a shell that
        exports `shell`, read through `request.cache`.  Asked only when `refusal("preflight")` is None."""
        ...
