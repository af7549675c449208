"""Write edits all or nothing across files, and never over a file that changed since it was read.

`check_writable` looks for every reason a write would be refused, so the CLI can check all
files before it touches any.  `write_all` then stages every file (a temporary file beside the
target with the new bytes, the target's mode, and an fsync), takes an exclusive lock on every
target (waited for at most EAGLEPATCH_LOCK_TIMEOUT seconds), checks each still holds the bytes
the plan was made from, records a journal, and only then renames the staged files over the
targets; a failed rename or a refused commit puts back what was renamed.  SIGINT and SIGTERM
wait until the renames (and the commit) are done.  A writer killed with SIGKILL mid-way leaves
its journal, which the next run reads to name the files it left half done (`rewrite.journal`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from ..errors import EaglepatchError
from ..records import FileEdit
from .journal import TEMP_SUFFIX, Journal, running

LOCK_TIMEOUT_VARIABLE = "EAGLEPATCH_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 10.0  # seconds: an apply racing another finishes in well under one


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def writable_target(edit: FileEdit, tree_root: Path) -> Path:
    """The real file to replace; a symlink is followed only when it stays inside the tree."""
    target = edit.path
    if target.is_symlink():
        real = target.resolve()
        if not _inside(real, tree_root.resolve()):
            raise EaglepatchError(
                f"is a symlink to {real}, outside the SGLang tree; refusing to write through it "
                "(replace the link with a copy of the file, or run eaglepatch on the real tree)",
                path=edit.rel,
            )
        return real
    return target


def _remove_leftovers(target: Path) -> None:
    """Temporary files a killed writer left beside `target`; those of a writer still running (another
    apply staging its files before it takes the locks, or this one) are its own."""
    for stale in target.parent.glob(f".{target.name}.*{TEMP_SUFFIX}"):
        pid = stale.name[len(target.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and (int(pid) == os.getpid() or running(int(pid))):
            continue
        try:
            stale.unlink()
        except OSError:
            pass


def _read_only(edit: FileEdit) -> EaglepatchError:
    return EaglepatchError("is read-only; make it writable (chmod u+w) and run again", path=edit.rel)


def _no_temporary_file(edit: FileEdit, folder: Path, reason: str | None) -> EaglepatchError:
    return EaglepatchError(
        f"cannot create a temporary file in {folder} ({reason}); eaglepatch writes through a "
        "temporary file beside the target, so the folder must be writable",
        path=edit.rel,
    )


def check_writable(edit: FileEdit, tree_root: Path) -> Path:
    """The real file to replace, once every reason `write_all` would refuse it has been ruled out.

    Nothing is written here; `write_all` checks again under the lock, since time passes between.
    """
    target = writable_target(edit, tree_root)
    try:
        current = target.read_bytes()
    except OSError as exc:
        raise EaglepatchError(f"cannot be read ({exc.strerror}); check its permissions", path=edit.rel) from None
    if current != edit.original:
        raise _conflict(edit)
    if not os.access(target, os.W_OK):
        raise _read_only(edit)
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise _no_temporary_file(edit, target.parent, "no write permission")
    return target


def lock_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get(LOCK_TIMEOUT_VARIABLE, DEFAULT_LOCK_TIMEOUT)))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT


def _lock(handle: IO[bytes], edit: FileEdit) -> None:
    """An exclusive lock on the target, waited for with a deadline: a process that holds the
    file forever must not hang apply."""
    timeout = lock_timeout()
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:  # a file system without locks, say
            raise EaglepatchError(
                f"cannot be locked ({exc.strerror}); eaglepatch writes only under a lock, so patch a copy on a local disk",
                path=edit.rel,
            ) from None
        if time.monotonic() >= deadline:
            raise EaglepatchError(
                f"is locked by another process, still after {timeout:g} s; let it finish (fuser names it) "
                f"and run again, or wait longer with {LOCK_TIMEOUT_VARIABLE}=SECONDS",
                path=edit.rel,
            )
        time.sleep(0.02)


def _conflict(edit: FileEdit) -> EaglepatchError:
    return EaglepatchError(
        "changed on disk since eaglepatch read it; left untouched (run the command again to plan against "
        "the new content)",
        path=edit.rel,
    )


def write_edit(edit: FileEdit, tree_root: Path) -> None:
    """One file, the way `write_all` writes many."""
    write_all([edit], tree_root)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- all or nothing across files ------------------------------------------------------------------


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived while files were being staged: nothing was written."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@dataclass(frozen=True)
class Written:
    """What `write_all` did: every edit written (it writes all or none), the commit if one was asked for,
    and the signal that arrived while the renames ran (deferred until they were done), if any."""

    edits: tuple[FileEdit, ...]
    commit: str | None = None
    interrupted: int | None = None


@dataclass(frozen=True)
class _Staged:
    edit: FileEdit
    target: Path
    temp: Path


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM are noted, not acted on, until the block ends: the list holds the ones that came.
    Only the main thread can set handlers; elsewhere (a test's worker thread) nothing is deferred."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {}

    def note(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, note)
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stage(edit: FileEdit, target: Path) -> _Staged:
    info = os.stat(target)
    _remove_leftovers(target)
    try:
        fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=target.parent)
    except OSError as exc:
        raise _no_temporary_file(edit, target.parent, exc.strerror) from None
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(edit.updated)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, stat.S_IMODE(info.st_mode))
        try:
            os.chown(temp, info.st_uid, info.st_gid)
        except OSError:
            pass
    except BaseException:
        _unlink(temp)
        raise
    return _Staged(edit, target, temp)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _put_back(staged: list[_Staged]) -> list[str]:
    """The original bytes of each renamed file, written back the same atomic way; the files that could not be."""
    failed = []
    for item in reversed(staged):
        try:
            back = _stage(FileEdit(item.target, item.edit.rel, item.edit.updated, item.edit.original), item.target)
            os.replace(back.temp, item.target)
        except (OSError, EaglepatchError):
            failed.append(item.edit.rel)
    return failed


def _write_error(edit: FileEdit, exc: OSError) -> EaglepatchError:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return EaglepatchError(f"cannot be written ({exc.strerror}); check its permissions", path=edit.rel)
    return EaglepatchError(f"cannot be written ({exc.strerror}); free the disk or fix the folder, then run again", path=edit.rel)


def write_all(
    edits: list[FileEdit],
    tree_root: Path,
    commit: Callable[[], str] | None = None,
    progress: Callable[[FileEdit], None] | None = None,
    journal_command: str = "apply",
) -> Written:
    """Every edit written, or none: raises EaglepatchError (or Interrupted) with every file as it was.

    `commit` runs once every file is renamed; when it raises, the files are put back.  A signal that
    arrives during the renames or the commit is deferred until both are done and returned in
    `Written.interrupted`; one that arrives while files are staged stops the run before any rename.
    """
    with deferred_signals() as caught:
        staged: list[_Staged] = []
        try:
            for edit in edits:
                if caught:
                    raise Interrupted(caught[0])
                target = check_writable(edit, tree_root)
                try:
                    staged.append(_stage(edit, target))
                except OSError as exc:
                    raise _write_error(edit, exc) from None
            if caught:
                raise Interrupted(caught[0])
            with contextlib.ExitStack() as locks:
                for item in sorted(staged, key=lambda s: str(s.target)):  # one order: two runs never deadlock
                    handle = locks.enter_context(open(item.target, "rb"))
                    _lock(handle, item.edit)
                    locks.callback(fcntl.flock, handle.fileno(), fcntl.LOCK_UN)
                for item in staged:
                    if item.target.read_bytes() != item.edit.original:  # one last look, under the locks
                        raise _conflict(item.edit)
                journal = Journal.begin(tree_root, journal_command, [(i.target, i.edit) for i in staged], commit is not None)
                renamed: list[_Staged] = []
                sha = None
                try:
                    for item in staged:
                        try:
                            os.replace(item.temp, item.target)
                        except OSError as exc:
                            raise _write_error(item.edit, exc) from None
                        renamed.append(item)
                        if progress is not None:
                            progress(item.edit)
                    for folder in dict.fromkeys(item.target.parent for item in staged):
                        _fsync_folder(folder)
                    if commit is not None:
                        sha = commit()
                except BaseException:
                    failed = _put_back(renamed)
                    if not failed:
                        journal.end()
                    raise
                journal.end()
        finally:
            for item in staged:
                if item.temp.exists():
                    _unlink(item.temp)
    return Written(tuple(edits), sha, caught[0] if caught else None)
