"""What the release caches of tests/sglang_releases.py and tests/vllm_releases.py share: a per-release
lock across processes, pip run as the interpreter's own, the `<package>/**/*.py` of a wheel, and a
release laid out as a committed git checkout.  Each module keeps its own paths, timeouts and layout."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from packaging.version import InvalidVersion, Version

try:
    import fcntl
except ImportError:  # not POSIX: no lock; the renames alone keep a cache whole
    fcntl = None  # type: ignore[assignment]


COMPLETE_MARKER = ".complete"  # written into a tree's folder before it is published


class ReleaseError(RuntimeError):
    """A release could not be fetched, listed or unpacked."""


def is_complete(root: Path, package: str) -> bool:
    """``root`` is a published tree: its marker and its ``site-packages/<package>``."""
    return (root / COMPLETE_MARKER).is_file() and (root / "site-packages" / package).is_dir()


def cached_tree(root: Path, package: str, lock: contextlib.AbstractContextManager, publish: Callable[[], Path]) -> Path:
    """``root/site-packages``, published by ``publish`` the first time it is asked for.  The tree is looked at
    again once ``lock`` is held, so of the processes that want it at once one builds it and the others
    read what it published."""
    if is_complete(root, package):
        return root / "site-packages"
    with lock:
        if is_complete(root, package):
            return root / "site-packages"  # another process published it while this one waited
        return publish()


@contextlib.contextmanager
def release_lock(locks: Path, package: str, version: str, timeout: float) -> Iterator[None]:
    """Exclusive, per version, across processes: held while ``version`` is fetched or unpacked.

    The lock lives on an open file (``flock``), so the kernel drops it when its holder exits,
    however it exits: a killed worker never leaves a stale lock behind.  Not re-entrant: a
    cache takes it once and calls its unlocked download.
    """
    if fcntl is None:
        yield
        return
    locks.mkdir(parents=True, exist_ok=True)
    lock = locks / f"{version}.lock"
    with open(lock, "a+b") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ReleaseError(
                        f"waited {timeout}s for {lock}: another process is still fetching {package}=={version}"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def check_version(version: str) -> str:
    version = str(version).strip()
    try:
        Version(version)
    except InvalidVersion:
        raise ValueError(f"not a release version: {version!r}") from None
    return version


def run_pip(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m pip ARGS`` with this interpreter: its pip configuration (index, proxy) applies."""
    cmd = [sys.executable, "-m", "pip", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseError(f"could not run {' '.join(cmd)}: {exc}") from exc


def pip_failure(what: str, proc: subprocess.CompletedProcess) -> ReleaseError:
    tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-15:])
    return ReleaseError(f"{what} failed (pip exit {proc.returncode}):\n  {' '.join(map(str, proc.args))}\n{tail}")


def extract_sources(wheel: Path, site: Path, package: str) -> int:
    """Extract ``<package>/**/*.py`` from ``wheel`` into ``site``; return the count.  Every folder of the
    package is made, those holding no source too: SGLang probes some at import time (0.5.20 on, the
    models import ``sglang.kernels.jit``, which raises unless its ``include/`` and ``csrc/`` exist)."""
    count = 0
    top = package + "/"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            parts = name.split("/")
            if not name.startswith(top) or any(part in (".", "..") for part in parts):
                continue  # never write outside the tree
            dest = site.joinpath(*filter(None, parts))
            if info.is_dir() or not name.endswith(".py"):
                (dest if info.is_dir() else dest.parent).mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            count += 1
    return count


def copy_tree(src: Path, dest_pkg: Path) -> Path:
    dest_pkg.parent.mkdir(parents=True, exist_ok=True)
    # copyfile: the copy gets fresh, writable permissions whatever the cache has.
    # __pycache__: a cache written into by an older run must not leak bytecode into checkouts.
    shutil.copytree(
        src, dest_pkg, copy_function=shutil.copyfile, dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return dest_pkg


def commit_checkout(dest: Path, message: str) -> Path:
    """``dest`` made a git repository on branch ``main`` with everything in it committed."""
    import git  # GitPython

    repo = git.Repo.init(dest, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "eaglepatch tests")
        cw.set_value("user", "email", "eaglepatch-tests@example.invalid")
        cw.set_value("commit", "gpgsign", "false")
    repo.git.add("--all")
    repo.git.commit("--no-verify", "-q", "-m", message)
    repo.close()
    return dest


def publish_tree(root: Path, wheel: Path, extract: Callable[[Path, Path], int], expected: Path) -> Path:
    """The sources of ``wheel`` published at ``root`` (``root/site-packages/...`` and its marker): extracted into
    a temporary folder beside it, checked to hold ``expected`` (relative to site-packages, starting with the
    package), marked complete, then renamed into place in one step, so an interrupted run leaves no half
    tree under the final name."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        count = extract(wheel, tmp / "site-packages")
        if count == 0 or not (tmp / "site-packages" / expected).exists():
            raise ReleaseError(f"{wheel.name} has no {expected.as_posix()}")
        (tmp / COMPLETE_MARKER).write_text(f"{wheel.name}\n{count} files\n")
        tmp.chmod(0o755)  # mkdtemp makes it private; the tree is shared data
        try:
            os.rename(tmp, root)
        except OSError:
            # Published meanwhile by a process that took no lock (an older copy of the cache module,
            # or a platform without flock); theirs is as good.
            if not is_complete(root, expected.parts[0]):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root / "site-packages"
