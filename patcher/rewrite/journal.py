"""What a multi-file write was about to do, kept until it is done: a run killed mid-way (SIGKILL, a
power cut) leaves it behind, and the next run on the same tree names the files that run left half
done instead of saying nothing about them.

The journal lives outside the tree, in eaglepatch's state folder ($EAGLEPATCH_STATE_DIR, else
$XDG_STATE_HOME/eaglepatch, else ~/.local/state/eaglepatch), one file per tree, written atomically
before the first rename and removed after the last one (and the commit).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..records import FileEdit

SCHEMA = 1
TEMP_SUFFIX = ".eaglepatch-tmp"  # a staged file: `.<name>.<writer's pid>.<random><suffix>` beside its target


def state_dir() -> Path:
    override = os.environ.get("EAGLEPATCH_STATE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME")
    if not base or not os.path.isabs(base):  # the XDG spec: a relative value is invalid, ignore it
        base = str(Path.home() / ".local" / "state")
    return Path(base) / "eaglepatch"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def journal_path(tree_root: Path) -> Path:
    key = hashlib.sha256(str(tree_root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return state_dir() / "journals" / f"{key}.json"


@dataclass(frozen=True)
class Journal:
    path: Path | None  # None: the state folder could not be written (the write goes on; nothing to detect)

    @classmethod
    def begin(cls, tree_root: Path, command: str, files: list[tuple[Path, FileEdit]], commit: bool) -> Journal:
        record = {
            "schema": SCHEMA,
            "command": command,
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "tree": str(tree_root.resolve()),
            "commit": commit,
            "files": [
                {"path": str(target), "rel": edit.rel, "before": _digest(edit.original), "after": _digest(edit.updated)}
                for target, edit in files
            ],
        }
        path = journal_path(tree_root)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".journal.", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(record, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
        except OSError:
            return cls(None)
        return cls(path)

    def end(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


@dataclass(frozen=True)
class Leftover:
    """A journal whose writer is gone: what each of its files holds now."""

    path: Path
    command: str
    started: str
    commit: bool
    pid: int
    targets: tuple[Path, ...]  # the files it was writing
    written: tuple[str, ...]  # files holding what that run wrote
    untouched: tuple[str, ...]  # files as they were before it
    changed: tuple[str, ...]  # files holding neither (edited since, or removed)

    def describe(self) -> str:
        total = len(self.written) + len(self.untouched) + len(self.changed)
        parts = [f"{len(self.written)} of its {total} file(s) hold what it wrote"]
        if self.written:
            parts[0] += f" ({_listed(self.written)})"
        if self.untouched:
            parts.append(f"{len(self.untouched)} are as they were")
        if self.changed:
            parts.append(f"{len(self.changed)} changed since ({_listed(self.changed)})")
        committed = "; nothing was committed" if self.commit else ""
        return (
            f"an earlier `eaglepatch {self.command}` on this tree (started {self.started}) was stopped before it "
            f"finished: {', '.join(parts)}{committed}; run it again to finish (or `eaglepatch revert` to take out "
            "what it wrote)"
        )


def _listed(rels: tuple[str, ...], limit: int = 3) -> str:
    shown = ", ".join(rels[:limit])
    return shown + (f" and {len(rels) - limit} more" if len(rels) > limit else "")


def running(pid: int) -> bool:
    """A process `pid` exists (someone else's counts: it refuses the signal, but it is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftover(tree_root: Path) -> Leftover | None:
    """The journal an earlier run on this tree left, when its writer is no longer running."""
    path = journal_path(tree_root)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        pid = int(record["pid"])  # this process is not writing yet: a journal with its pid is an earlier one's
        if record.get("schema") != SCHEMA or (pid != os.getpid() and running(pid)):
            return None
        files = list(record["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    written: list[str] = []
    untouched: list[str] = []
    changed: list[str] = []
    for entry in files:
        try:
            now = _digest(Path(entry["path"]).read_bytes())
        except OSError:
            now = None
        bucket = written if now == entry["after"] else untouched if now == entry["before"] else changed
        bucket.append(str(entry["rel"]))
    return Leftover(path, str(record.get("command", "apply")), str(record.get("started", "?")), bool(record.get("commit")),
                    int(record["pid"]), tuple(Path(entry["path"]) for entry in files), tuple(written), tuple(untouched),
                    tuple(changed))


def forget(found: Leftover) -> None:
    """Said once: the run that reported it clears it, and the files that run had staged but not renamed."""
    for target in found.targets:
        for temp in target.parent.glob(f".{target.name}.{found.pid}.*{TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                temp.unlink()
    with contextlib.suppress(OSError):
        found.path.unlink()
