"""Analyze stage: resolve the model classes asked about: the wrapper, the model(s) it holds, what each defines.

Which classes are looked at is decided here: `EntryClass` under models/ for `--all`, a module
(or module:Class) for `--model`.  Each is resolved by two parts shared across the run: the class
index (class_index.py: classes, bases, members, through imports and inheritance) and the wrapper
finder (wrappers.py: which attribute holds the inner language model, and its class).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EaglepatchError, UnreadableFiles
from ..read.text import SourceFile
from ..records import ClassInfo, InnerModel, Progress, Wrapper
from ..selection import model_stem
from .class_index import ClassIndex, ClassText
from .wrappers import Assignment, WrapperFinder

if TYPE_CHECKING:
    from .context import RunContext

_ENTRY = re.compile(r"^[ \t]*EntryClass\s*=\s*(.+)$", re.MULTILINE)  # indented under a module-level `if` too
# why_not_found() clauses that mean the tree itself is broken (the import would fail at run time),
# as opposed to an inner model chosen at run time or built outside the tree
_BROKEN_IMPORT = (
    "is not in this tree",
    "has no class",
    "neither defined nor imported",
    ": class ",  # "<file>: class X could not be read"
    "is not UTF-8",  # the inner file itself cannot be read (SourceCache.read's errors)
    "is a binary file",
    "MiB",
    "is not valid Python",
    "cannot be read (",
)


def _balanced(text: str, start: int) -> str:
    """The expression starting at `start`, up to the end of its line once brackets are closed:
    `EntryClass = [\n    A,\n    B,\n]` spans lines."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "\n" and depth <= 0:
            return text[start:index]
    return text[start:]


def entry_assignments(text: str) -> list[re.Match]:
    """`_ENTRY.finditer(text)`, found from the literal `EntryClass` (str.find skips to it): a `^`-anchored
    pattern is tried at every character of the file, which cost more than the rest of this stage's
    reading of a file."""
    found: list[re.Match] = []
    end = 0  # where the last match ended: finditer goes on from there
    at = text.find("EntryClass")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        if start >= end:
            match = _ENTRY.match(text, start)  # `^` holds at a line start
            if match is not None:
                found.append(match)
                end = match.end()
        at = text.find("EntryClass", max(at + 1, end))
    return found


class Resolver:
    """The class index and the wrapper finder of one run, and which classes the run looks at."""

    def __init__(self, run: RunContext):
        self.run = run
        self.tree = run.tree
        self.cache = run.cache
        self.index = ClassIndex(run)
        self.finder = WrapperFinder(self.index)
        self.warnings: list[str] = []
        self._model_files: list[Path] | None = None

    def model_files(self) -> list[Path]:
        """one_path_per_file of every `.py` below models/, listed once per run (--all and every hook
        learned read the same list)."""
        if self._model_files is None:
            self._model_files = one_path_per_file(self.tree.models.rglob("*.py"))
        return list(self._model_files)

    # -- the class index and the wrapper finder, as the later stages ask for them ----------
    def require_valid(self, source: SourceFile) -> None:
        self.index.require_valid(source)

    def class_text(self, source: SourceFile, name: str) -> ClassText | None:
        return self.index.class_text(source, name)

    def find_class(self, source: SourceFile, expr: ast.expr) -> tuple[SourceFile, str] | None:
        return self.index.find_class(source, expr)

    def class_info(self, source: SourceFile, name: str) -> ClassInfo | None:
        return self.index.class_info(source, name)

    def wrapper(self, source: SourceFile, name: str) -> Wrapper:
        return self.finder.wrapper(source, name, self.run.protocol_read)

    def inner_models(self, source: SourceFile, name: str) -> list[InnerModel]:
        return self.finder.inner_models(source, name, self.run.protocol_read)

    def init_assignments(self, source: SourceFile, name: str) -> list[Assignment]:
        return self.finder.init_assignments(source, name)

    # -- which classes a run looks at ------------------------------------------------------
    def wrapper_candidates(self, source: SourceFile, entry_only: bool = False) -> list[str]:
        """EntryClass names when the file has them, else every module-level class (one under a
        module-level `if` included: apply writes into it, so check must see it too)."""
        outline = self.cache.outline(source)
        top = outline.module_level("class")
        named: list[str] = []
        for match in entry_assignments(outline.joined):  # the lines Python sees: \r and form feeds are gone
            value = _balanced(outline.joined, match.start(1))
            named += [n for n in re.findall(r"\w+", value) if n in top and n not in named]
        if named or entry_only:
            return named
        return top

    def all_wrappers(self, progress: Progress | None = None) -> list[Wrapper]:
        """Every class an `EntryClass` names under models/: each gets a verdict, none is left out,
        and none twice (a module symlinked under another name is one file)."""
        files = []
        unread: list[tuple[Path, EaglepatchError]] = []
        for path in self.model_files():
            if self.cache.is_excluded(path):
                continue
            try:
                with open(path, "rb") as handle:
                    if b"EntryClass" in handle.read():
                        files.append(path)
            except OSError as exc:
                unread.append((path, EaglepatchError(f"cannot be read ({exc.strerror}); check its permissions", path=self.cache.rel(path))))
        found: list[Wrapper] = []
        failed: dict[Path, Exception] = {}
        join = self.cache.validate_aside(files)  # each file compiled whole, beside this reading of it
        for path in files:
            if progress is not None:
                progress(self.tree.rel(path), len(files))
            try:
                source = self.cache.read(path)
                found += [self.wrapper(source, name) for name in self.wrapper_candidates(source, entry_only=True)]
            except Exception as exc:  # a file that does not compile may trip the reading: said below, if so
                failed[path] = exc
        join()
        for path in files:
            error = self.cache.unreadable(path)  # its classes read off a file Python refuses would be a guess
            if error is not None:
                unread.append((path, error))
            elif path in failed:
                raise failed[path]
        if unread:
            raise UnreadableFiles([error for _, error in unread], [self.cache.rel(path) for path, _ in unread])
        return found


def one_path_per_file(paths: Iterable[Path]) -> list[Path]:
    """Sorted paths, one per real file: the file's own name rather than a symlink to it."""
    chosen: dict[Path, Path] = {}
    for path in sorted(paths):
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            continue
        if real not in chosen or not path.is_symlink() and chosen[real].is_symlink():
            chosen[real] = path
    return sorted(chosen.values())


def select_wrappers(resolver: Resolver, selector: str) -> list[Wrapper]:
    """`--model kimi_k25` or `--model kimi_k25:KimiK25ForConditionalGeneration`."""
    tree, cache = resolver.tree, resolver.cache
    module, class_name = model_stem(selector), selector.partition(":")[2]
    path = tree.models / f"{module}.py"
    rel = f"models/{module}.py"
    if not module or not path.is_file():
        raise EaglepatchError(
            f"no such model module; pass --model with a file name under {tree.rel(tree.models)}/ "
            "(e.g. kimi_k25 or kimi_k25:KimiK25ForConditionalGeneration)",
            path=rel,
        )
    if cache.is_excluded(path):
        raise EaglepatchError("is left out by --exclude (or [tool.eaglepatch] exclude); drop it there to check it", path=rel)
    source = cache.read(path)
    resolver.require_valid(source)
    if class_name:
        if cache.outline(source).find(class_name, "class") is None:
            classes = resolver.wrapper_candidates(source)
            raise EaglepatchError(f"has no class {class_name}; classes here: {', '.join(classes) or 'none'}", path=rel)
        names = [class_name]
    else:
        names = resolver.wrapper_candidates(source)
    if not names:
        raise EaglepatchError("defines no class; pass --model with a model module", path=rel)
    holding = [resolver.wrapper(source, name) for name in names]
    for wrapper in holding:
        for inner in wrapper.inners:
            broken = [u for u in inner.unresolved if any(sign in u.why for sign in _BROKEN_IMPORT)]
            if not inner.classes and broken:  # an import of a module the tree lacks: the tree is broken
                raise EaglepatchError(
                    f"self.{inner.attribute} = {broken[0].why}; fix the import, or pass --model module:Class",
                    path=inner.file or rel,
                    line=inner.line,
                )
            for cls in inner.classes:
                resolver.require_valid(cache.read(tree.srt / cls.file))
    return holding
