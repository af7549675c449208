"""A result cache for `check`, as ruff and mypy keep theirs: a tree that did not change is not read again.

What is cached is exactly what `check` printed on stdout and its exit code (0 or 1; errors are never
cached), so the report format cannot drift from a fresh run.  `diff`, `apply` and `revert` never use it.

An entry lives in one file named by a hash of its *key*:

* eaglepatch itself: its version, the Python version, and (path, size, mtime_ns) of its own modules,
  so an edited checkout of eaglepatch never reuses an older answer;
* the question: the resolved tree (srt, the PATH given, its layout), the selection after
  [tool.eaglepatch] is merged in (models, --all, consumers, ignore), --format, --baseline, the working
  directory (reports show paths relative to it) and what shapes rich's output (terminal, width, colour);

and holds the *dependencies* it was computed from: (path, size, mtime_ns, inode) of every `.py` file
below srt (every file any answer may read: the protocol is drawn from the whole tree), of any consumer
outside it, of the pyproject.toml the settings came from and of the baseline file.  Adding, removing,
touching or editing any of them is a miss.  A dependency modified in the last two seconds makes the
answer unsafe to keep (it may change again within the file system's timestamp resolution, as git's
"racy clean" files), so such an answer is not stored.

Entries are written to a temporary file and renamed into place, so concurrent runs never see half an
entry; an entry that does not parse, has another schema or another key is ignored (and overwritten).

Where: $EAGLEPATCH_CACHE_DIR, else $XDG_CACHE_HOME/eaglepatch (~/.cache/eaglepatch), on macOS
~/Library/Caches/eaglepatch, on Windows %LOCALAPPDATA%\\eaglepatch\\Cache.  `--no-cache` or
EAGLEPATCH_NO_CACHE=1 bypasses it (neither read nor written).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

SCHEMA = 1
RACY_SECONDS = 2.0  # a dependency newer than this when read may change again unseen (mtime resolution)
_FALSE = {"", "0", "false", "no", "off"}
_OUTPUT_ENV = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def disabled(no_cache: bool = False) -> bool:
    return no_cache or os.environ.get("EAGLEPATCH_NO_CACHE", "").strip().lower() not in _FALSE


def cache_dir() -> Path:
    override = os.environ.get("EAGLEPATCH_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "eaglepatch" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "eaglepatch"
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG spec: a relative value is invalid, ignore it
        base = str(Path.home() / ".cache")
    return Path(base) / "eaglepatch"


def _stat(path: str) -> list | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def own_files() -> list:
    """(name, size, mtime_ns, inode) of eaglepatch's own modules."""
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    from . import codemods  # a subpackage, wherever it is installed (its own folder in a checkout)

    stages = _subpackages(here)  # read/, analyze/, ..., engines/ and engines/sglang/
    for folder in (here, *stages, os.path.dirname(os.path.abspath(codemods.__file__))):
        package = os.path.relpath(folder, os.path.dirname(here))  # patcher, patcher/read, codemods in a checkout
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        except OSError:
            continue
        out += [[f"{package}/{n}", *(_stat(os.path.join(folder, n)) or [])] for n in names]
    return out


def _subpackages(folder: str) -> list[str]:
    """The folders below `folder` that are packages (an __init__.py), however deep, sorted."""
    try:
        found = [e.path for e in os.scandir(folder) if e.is_dir() and os.path.isfile(os.path.join(e.path, "__init__.py"))]
    except OSError:
        return []
    return [p for sub in sorted(found) for p in (sub, *_subpackages(sub))]


def own_fingerprint() -> Fingerprint:
    """eaglepatch's own modules as dependencies (an edit within the timestamp resolution is racy too)."""
    prints = Fingerprint()
    for name, *stat in own_files():
        prints.add(name, stat or None)
    return prints


class Fingerprint:
    """A digest of the dependencies' names and stats, and the newest mtime among them."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=20)
        self.newest_ns = 0
        self.files = 0

    def add(self, label: str, stat: list | None) -> None:
        self._hash.update(f"{label}\0{stat}\n".encode("utf-8", "surrogateescape"))
        if stat is not None:
            self.files += 1
            self.newest_ns = max(self.newest_ns, stat[1])

    def add_tree(self, root: Path) -> None:
        """Every `.py` file below root (symlinked folders followed once), in a stable order."""
        seen: set[tuple[int, int]] = set()
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                info = os.stat(folder)
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                with os.scandir(folder) as listing:
                    entries = sorted(listing, key=lambda e: e.name)
            except OSError as exc:  # an unreadable folder: its state is part of the answer
                self.add(f"{folder}/", [type(exc).__name__])
                continue
            self._hash.update(f"{folder}/\n".encode("utf-8", "surrogateescape"))
            subfolders = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    if entry.name != "__pycache__":
                        subfolders.append(entry.path)
                elif entry.name.endswith(".py"):
                    try:
                        info = entry.stat()
                        stat = [info.st_size, info.st_mtime_ns, info.st_ino]
                    except OSError:
                        stat = None
                    self.add(entry.name, stat)
            stack.extend(reversed(subfolders))

    def digest(self) -> str:
        return self._hash.hexdigest()


def dependencies(srt: Path, extra: list[Path]) -> Fingerprint:
    prints = Fingerprint()
    prints.add_tree(srt)
    for path in extra:
        prints.add(str(path), _stat(str(path)))
    return prints


def output_environment(stream: TextIO) -> dict:
    """What rich looks at to shape the table: a terminal (and its size), and the colour variables."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    size = None
    if tty:
        try:
            size = list(os.get_terminal_size(stream.fileno()))
        except (AttributeError, ValueError, OSError):
            size = None
    return {"tty": tty, "size": size, "env": {name: os.environ.get(name) for name in _OUTPUT_ENV}}


class ResultCache:
    """One `check` question: look its answer up, or store it."""

    def __init__(self, key: dict, deps: Fingerprint, folder: Path | None = None, kind: str = "check"):
        self.key = {"schema": SCHEMA, **key}
        self.key_text = json.dumps(self.key, sort_keys=True, default=str)
        self.deps = deps.digest()
        self.safe = deps.newest_ns < time.time_ns() - int(RACY_SECONDS * 1e9)
        name = hashlib.blake2b(self.key_text.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
        self.folder = folder if folder is not None else cache_dir()
        self.path = self.folder / kind / f"{name}.json"

    def lookup(self) -> tuple[int, str] | None:
        """(exit code, stdout) of the same question on the same files, or None."""
        try:
            entry = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None  # absent, unreadable or corrupt: a miss
        if not isinstance(entry, dict) or entry.get("key") != self.key_text or entry.get("deps") != self.deps:
            return None
        code, out = entry.get("exit"), entry.get("stdout")
        if code not in (0, 1) or not isinstance(out, str):
            return None
        return code, out

    def store(self, code: int, out: str) -> bool:
        """Keep an answer; any failure to write leaves the cache as it was (a cache is never an error)."""
        if code not in (0, 1) or not self.safe:
            return False
        entry = {"key": self.key_text, "deps": self.deps, "exit": code, "stdout": out}
        data = json.dumps(entry, ensure_ascii=True).encode("ascii")
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tag = self.folder / "CACHEDIR.TAG"
            if not tag.exists():
                _write_atomic(tag, b"Signature: 8a477f597d28d172789f06886806bc55\n# eaglepatch's result cache; safe to delete.\n")
            _write_atomic(self.path, data)
        except OSError:
            return False
        return True


def _write_atomic(path: Path, data: bytes) -> None:
    import tempfile

    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


class Tee:
    """sys.stdout that also keeps what is written, for storing; everything else goes to the stream."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        written = self._stream.write(text)  # first: a probe with bytes (click's) fails here, unrecorded
        self.parts.append(text)
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def text(self) -> str:
        return "".join(self.parts)

    def __getattr__(self, name: str) -> Any:  # the stream's own attributes, whatever they are
        return getattr(self._stream, name)
