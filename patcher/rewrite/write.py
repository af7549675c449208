"""Stage 7b: write edits atomically, and never over a file that changed since it was read.

`check_writable` looks for every reason a write would be refused, so the CLI can check all
files before it touches any.  Then, per file, a temporary file beside the target gets the
new bytes, the target's mode, and an fsync; under an exclusive lock on the target (waited
for at most EAGLEPATCH_LOCK_TIMEOUT seconds) and after checking its bytes are still the ones
the plan was made from, it is renamed over the target.  A writer killed at any point leaves
the original or the new file, never a mix; leftovers are removed by the next write.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path

from ..errors import EaglepatchError
from .edits import FileEdit

TEMP_SUFFIX = ".eaglepatch-tmp"
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
    for stale in target.parent.glob(f".{target.name}.*{TEMP_SUFFIX}"):
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
    """The real file to replace, once every reason `write_edit` would refuse it has been ruled out.

    Nothing is written here; `write_edit` checks again under the lock, since time passes between.
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


def _lock(handle, edit: FileEdit) -> None:
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
    target = writable_target(edit, tree_root)
    try:
        handle = open(target, "rb")
    except OSError as exc:
        raise EaglepatchError(f"cannot be opened ({exc.strerror}); check that it exists and is readable", path=edit.rel) from None
    with handle:
        _lock(handle, edit)
        try:
            current = target.read_bytes()
            if current != edit.original:
                raise _conflict(edit)
            info = os.stat(target)
            if not os.access(target, os.W_OK):
                raise _read_only(edit)
            _remove_leftovers(target)
            try:
                fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
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
                if target.read_bytes() != edit.original:  # one last look, under the lock
                    raise _conflict(edit)
                os.replace(temp, target)
            except BaseException:
                try:
                    temp.unlink()
                except OSError:
                    pass
                raise
            _fsync_folder(target.parent)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise EaglepatchError(f"cannot be written ({exc.strerror}); check its permissions", path=edit.rel) from None
            raise EaglepatchError(f"cannot be written ({exc.strerror}); free the disk or fix the folder, then run again", path=edit.rel) from None
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


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
