"""Real SGLang releases for the tests: wheels fetched with pip, cached on disk.

Everything lives under one cache folder: ``$EAGLEPATCH_SGLANG_CACHE`` if set,
else ``<repo>/.cache/sglang`` (``.cache/`` is gitignored)::

    <cache>/wheels/sglang-<version>-*.whl          what ``pip download`` fetched
    <cache>/trees/<version>/site-packages/sglang/  the wheel's ``sglang/**/*.py``
    <cache>/trees/<version>/.complete              written before the tree is published
    <cache>/locks/<version>.lock                   held while a release is fetched or unpacked

Which releases exist is pinned in ``tests/releases.txt`` (oldest first), read by
``releases_between`` and ``latest_release`` without asking the index; only
``update_releases`` (``make update-releases``) asks ``pip index versions`` and
rewrites that file.

The trees are shared, read-only data: a test that lets the tool write files must
work on a copy (``make_checkout`` or ``make_site_packages_copy``).

Several processes may want the same release at once (pytest-xdist workers, the
subprocesses of tests/release_imports.py, two ``make test`` runs): fetching and
unpacking a version happen under an exclusive ``flock`` on its lock file, and the
cache is looked at again once the lock is held, so one process downloads and the
others wait and then read what it published. Wheels and trees are still published
with one rename each, so a reader that takes no lock never sees a partial file.

Every network access goes through ``sys.executable -m pip`` so that the
interpreter's ordinary pip configuration (index, proxy, certificates) applies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from packaging.version import InvalidVersion, Version
from release_cache import (
    COMPLETE_MARKER,
    ReleaseError,
    cached_tree,
    check_version,
    commit_checkout,
    copy_tree,
    extract_sources,
    is_complete,
    pip_failure,
    publish_tree,
    release_lock,
    run_pip,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
RELEASES_FILE = Path(__file__).resolve().parent / "releases.txt"
CACHE_ENV = "EAGLEPATCH_SGLANG_CACHE"
PACKAGE = "sglang"
_COMPLETE_MARKER = COMPLETE_MARKER
_PIP_TIMEOUT_SECONDS = 900
_LOCK_TIMEOUT_SECONDS = 2 * _PIP_TIMEOUT_SECONDS + 300  # a holder runs pip at most twice, then unpacks

# Used only when pip finds no wheel for the running interpreter: recent sglang
# releases ship a CPython 3.11 manylinux wheel only, and its .py files are all
# the tests need, so any interpreter may fetch that one.
_FALLBACK_WHEEL_TARGET = [
    "--python-version", "3.11",
    "--implementation", "cp",
    "--abi", "cp311",
    "--platform", "manylinux_2_34_x86_64",
    "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux2014_x86_64",
    "--platform", "any",
]


# --------------------------------------------------------------------------- paths


def cache_dir() -> Path:
    """The cache folder (created if absent)."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env).expanduser() if env else REPO_ROOT / ".cache" / "sglang"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def _wheels_dir() -> Path:
    path = cache_dir() / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _trees_dir() -> Path:
    path = cache_dir() / "trees"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _release_lock(version: str):
    return release_lock(cache_dir() / "locks", PACKAGE, version, _LOCK_TIMEOUT_SECONDS)


_check_version = check_version


# --------------------------------------------------------------------------- pip


def _run_pip(args: list[str]) -> subprocess.CompletedProcess:
    return run_pip(args, _PIP_TIMEOUT_SECONDS)


_pip_failure = pip_failure


# --------------------------------------------------------------------------- wheels


def _find_wheel(version: str) -> Path | None:
    prefix = f"{PACKAGE}-{version}-"
    found = sorted(
        p for p in _wheels_dir().glob("*.whl")
        if p.name.startswith(prefix) and p.is_file()
    )
    return found[0] if found else None


def download_wheel(version: str) -> Path:
    """The wheel of ``sglang==version``, downloaded with pip unless cached.

    pip downloads into a temporary folder beside the cache and the wheel is then
    moved in with one rename, so the cache never holds a partial file.
    """
    version = _check_version(version)
    cached = _find_wheel(version)
    if cached is not None:
        return cached
    with _release_lock(version):
        return _download_wheel(version)


def _download_wheel(version: str) -> Path:
    """``download_wheel`` once the release's lock is held: the cache is looked at again first."""
    cached = _find_wheel(version)
    if cached is not None:
        return cached  # another process fetched it while this one waited

    wheels = _wheels_dir()
    base = ["download", "--no-deps", "--only-binary=:all:", f"{PACKAGE}=={version}"]
    with tempfile.TemporaryDirectory(prefix=f".download-{version}-", dir=wheels) as tmp:
        proc = _run_pip([*base, "-d", tmp])
        if proc.returncode != 0:
            retry = _run_pip([*base, *_FALLBACK_WHEEL_TARGET, "-d", tmp])
            if retry.returncode != 0:
                raise _pip_failure(f"downloading {PACKAGE}=={version}", proc)
        prefix = f"{PACKAGE}-{version}-"
        got = sorted(p for p in Path(tmp).glob("*.whl") if p.name.startswith(prefix))
        if not got:
            names = sorted(p.name for p in Path(tmp).iterdir())
            raise ReleaseError(
                f"pip download of {PACKAGE}=={version} produced no {prefix}*.whl "
                f"(got {names})"
            )
        target = wheels / got[0].name
        os.replace(got[0], target)
    return _find_wheel(version) or target


# --------------------------------------------------------------------------- trees


def _tree_root(version: str) -> Path:
    return _trees_dir() / version


def _is_complete(root: Path) -> bool:
    return is_complete(root, PACKAGE)


def _extract_sources(wheel: Path, site: Path) -> int:
    """Extract the package's ``**/*.py`` from ``wheel`` into ``site``; return the count."""
    return extract_sources(wheel, site, PACKAGE)


def site_packages(version: str) -> Path:
    """``<cache>/trees/<version>/site-packages``, holding the release's ``sglang/``.

    Built once per version: the sources are extracted into a temporary folder
    beside the final one, the completion marker is written, and the folder is
    published with one ``os.rename``. An interrupted run leaves at most a stray
    temporary folder, never a half tree under the final name. Read-only data.
    """
    version = _check_version(version)
    root = _tree_root(version)
    return cached_tree(root, PACKAGE, _release_lock(version), lambda: _publish_tree(version, root))


def _publish_tree(version: str, root: Path) -> Path:
    """``site_packages`` once the release's lock is held and the tree is known to be missing."""
    wheel = _download_wheel(version)
    if root.exists() and not _is_complete(root):
        # Not made by this module (it only ever publishes complete trees).
        shutil.rmtree(root, ignore_errors=True)

    return publish_tree(root, wheel, _extract_sources, Path(PACKAGE, "srt"))


# --------------------------------------------------------------------------- copies


def _copy_package(version: str, dest_pkg: Path) -> Path:
    return copy_tree(site_packages(version) / PACKAGE, dest_pkg)


def make_checkout(version: str, dest: Path) -> Path:
    """A git repository shaped like a clone of the SGLang sources, at ``dest``.

    ``dest/python/sglang/...`` holds the release's sources, committed on branch
    ``main`` as "sglang <version>". Returns ``dest``.
    """
    version = _check_version(version)
    dest = Path(dest)
    _copy_package(version, dest / "python" / PACKAGE)
    return commit_checkout(dest, f"{PACKAGE} {version}")


def make_site_packages_copy(version: str, dest: Path) -> Path:
    """A writable copy at ``dest/lib/python3.11/site-packages/sglang/...``.

    Returns the ``site-packages`` folder.
    """
    version = _check_version(version)
    site = Path(dest) / "lib" / "python3.11" / "site-packages"
    _copy_package(version, site / PACKAGE)
    return site


# --------------------------------------------------------------------------- releases


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_releases(path: Path | None = None) -> list[str]:
    """The pinned release list (``tests/releases.txt`` by default), oldest first.

    Blank lines and ``#`` comments are skipped; every other line must be a version,
    and the versions must be distinct and in ascending order.
    """
    path = Path(path) if path is not None else RELEASES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReleaseError(f"cannot read the pinned release list {path}: {exc}") from exc
    versions = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            versions.append(_check_version(line))
        except ValueError:
            raise ReleaseError(f"{path}:{number}: not a version: {raw.strip()!r}") from None
    if not versions:
        raise ReleaseError(f"{path} lists no release")
    parsed = [Version(v) for v in versions]
    if any(a >= b for a, b in zip(parsed, parsed[1:])):
        raise ReleaseError(f"{path}: versions must be distinct and oldest first: {versions}")
    return versions


def latest_release() -> str:
    """The newest pinned release (last line of ``tests/releases.txt``)."""
    return read_releases()[-1]


def releases_between(low: str = "0.5.9", high: str | None = None) -> list[str]:
    """Every pinned version ``v`` with ``low <= v <= high`` (oldest first).

    ``high=None`` means no upper bound. ``.postN`` releases are included (so
    ``0.5.10.post1`` is between ``0.5.10`` and ``0.5.11``). Read from
    ``tests/releases.txt``: the package index is never asked here.
    """
    lo = Version(_check_version(low))
    hi = Version(_check_version(high)) if high is not None else None
    return [v for v in read_releases() if Version(v) >= lo and (hi is None or Version(v) <= hi)]


def parse_index_versions(output: str) -> list[str]:
    """The versions listed on the "Available versions:" line of ``pip index versions``."""
    for line in output.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key.strip().lower() == "available versions":
            versions = [v.strip() for v in rest.split(",") if v.strip()]
            return sorted(set(versions), key=Version, reverse=True)
    return []


def index_versions() -> list[str]:
    """Every published version (newest first), as ``pip index versions`` lists it."""
    proc = _run_pip(["index", "versions", PACKAGE])
    if proc.returncode != 0:
        raise _pip_failure(f"listing {PACKAGE} versions", proc)
    versions = parse_index_versions(proc.stdout)
    if not versions:
        raise ReleaseError(
            f"`pip index versions {PACKAGE}` printed no 'Available versions:' line:\n"
            + proc.stdout[-2000:]
        )
    return versions


def update_releases(path: Path | None = None, low: str | None = None) -> tuple[list[str], list[str]]:
    """Rewrite the pinned list from the index: every release ``>= low``, oldest first.

    ``low`` defaults to the file's current oldest release. The header comment is
    kept. Pre-releases and unparsable versions are dropped. Returns (before, after).
    Only ``make update-releases`` calls this.
    """
    path = Path(path) if path is not None else RELEASES_FILE
    before = read_releases(path)
    lo = Version(_check_version(low if low is not None else before[0]))
    after = []
    for v in index_versions():
        try:
            parsed = Version(v)
        except InvalidVersion:
            continue
        if parsed >= lo and not parsed.is_prerelease:
            after.append(v)
    after.sort(key=Version)
    if not after:
        raise ReleaseError(f"the index lists no {PACKAGE} release >= {lo}")
    header = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    _write_atomic(path, "\n".join([*header, *after]) + "\n")
    return before, after
