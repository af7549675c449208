"""Real vLLM releases for the tests: the ``.py`` files of a wheel fetched with pip, cached on disk.

The design is that of tests/sglang_releases.py, with one difference: a vLLM wheel
is hundreds of MB (compiled kernels) while the tests read only its Python
sources, so the wheel is extracted and then deleted; only the tree is kept.
Everything lives under one cache folder: ``$EAGLEPATCH_VLLM_CACHE`` if set, else
``<repo>/.cache/vllm`` (``.cache/`` is gitignored)::

    <cache>/trees/<version>/site-packages/vllm/  the wheel's ``vllm/**/*.py``
    <cache>/trees/<version>/.complete            written before the tree is published
    <cache>/locks/<version>.lock                 held while a release is fetched and unpacked
    <cache>/downloads/.<version>-*/              pip's temporary folder (gone once unpacked)

Which releases the tests use is pinned in ``tests/vllm_releases.txt`` (oldest
first): a handful chosen to span the changes of the EAGLE-3 interface, not every
release (see the file's header).

Locking, pip and publishing are tests/release_cache.py's, shared with the SGLang cache: one
process downloads a release while the others wait, a tree is published with one rename, and under
``EAGLEPATCH_OFFLINE=1`` a release that is not cached is an error raised before pip runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
from sglang_releases import parse_index_versions, read_releases

try:
    import fcntl
except ImportError:  # not POSIX: no lock; the rename alone keeps the cache whole
    fcntl = None

__all__ = [
    "ReleaseError",
    "cache_dir",
    "index_versions",
    "latest_release",
    "make_checkout",
    "make_site_packages_copy",
    "pinned_releases",
    "site_packages",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
RELEASES_FILE = Path(__file__).resolve().parent / "vllm_releases.txt"
CACHE_ENV = "EAGLEPATCH_VLLM_CACHE"
OFFLINE_ENV = "EAGLEPATCH_OFFLINE"
PACKAGE = "vllm"
_COMPLETE_MARKER = COMPLETE_MARKER
_PIP_TIMEOUT_SECONDS = 1800  # several hundred MB
_LOCK_TIMEOUT_SECONDS = 2 * _PIP_TIMEOUT_SECONDS + 300  # a holder runs pip at most twice, then unpacks

# Used only when pip finds no wheel for the running interpreter. vLLM ships x86_64
# Linux wheels only (``cp38-abi3`` since 0.4, one CPython tag per wheel before), and
# the tests read nothing but their .py files, so any interpreter may fetch one.
_FALLBACK_WHEEL_TARGET = [
    "--python-version", "3.12",
    "--implementation", "cp",
    "--platform", "manylinux_2_35_x86_64",
    "--platform", "manylinux_2_31_x86_64",
    "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux1_x86_64",
]


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


# --------------------------------------------------------------------------- paths


def cache_dir() -> Path:
    """The cache folder (created if absent)."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env).expanduser() if env else REPO_ROOT / ".cache" / PACKAGE
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def _subdir(name: str) -> Path:
    path = cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _release_lock(version: str):
    return release_lock(_subdir("locks"), PACKAGE, version, _LOCK_TIMEOUT_SECONDS)


_check_version = check_version


# --------------------------------------------------------------------------- pip


def _run_pip(args: list[str]) -> subprocess.CompletedProcess:
    return run_pip(args, _PIP_TIMEOUT_SECONDS)


_pip_failure = pip_failure


def _download_wheel(version: str, dest: Path) -> Path:
    """Download the wheel of ``vllm==version`` into the empty folder ``dest``; return it."""
    if _offline():
        raise ReleaseError(
            f"{OFFLINE_ENV}=1 and {PACKAGE}=={version} is not in the cache {cache_dir()}: "
            "fetch it once online (or mark the test `integration`)"
        )
    base = ["download", "--no-deps", "--only-binary=:all:", f"{PACKAGE}=={version}", "-d", str(dest)]
    proc = _run_pip(base)
    if proc.returncode != 0:
        retry = _run_pip([*base, *_FALLBACK_WHEEL_TARGET])
        if retry.returncode != 0:
            raise _pip_failure(f"downloading {PACKAGE}=={version}", proc)
    prefix = f"{PACKAGE}-{version}-"
    got = sorted(p for p in dest.glob("*.whl") if p.name.startswith(prefix))
    if not got:
        names = sorted(p.name for p in dest.iterdir())
        raise ReleaseError(f"pip download of {PACKAGE}=={version} produced no {prefix}*.whl (got {names})")
    return got[0]


# --------------------------------------------------------------------------- trees


def _tree_root(version: str) -> Path:
    return _subdir("trees") / version


def _is_complete(root: Path) -> bool:
    return is_complete(root, PACKAGE)


def _extract_sources(wheel: Path, site: Path) -> int:
    """Extract the package's ``**/*.py`` from ``wheel`` into ``site``; return the count."""
    return extract_sources(wheel, site, PACKAGE)


def site_packages(version: str) -> Path:
    """``<cache>/trees/<version>/site-packages``, holding the release's ``vllm/`` (.py files only).

    Built once per version: pip downloads the wheel into a temporary folder of the
    cache, its sources are extracted into a temporary folder beside the final one,
    the completion marker is written, the folder is published with one
    ``os.rename``, and the wheel is deleted. An interrupted run leaves no half tree
    under the final name and no wheel. Read-only data.
    """
    version = _check_version(version)
    root = _tree_root(version)
    return cached_tree(root, PACKAGE, _release_lock(version), lambda: _publish_tree(version, root))


def _publish_tree(version: str, root: Path) -> Path:
    """``site_packages`` once the release's lock is held and the tree is known to be missing."""
    if root.exists() and not _is_complete(root):
        # Not made by this module (it only ever publishes complete trees).
        shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=_subdir("downloads")) as download:
        wheel = _download_wheel(version, Path(download))
        site = publish_tree(root, wheel, _extract_sources, Path(PACKAGE, "__init__.py"))
    return site  # leaving the `with` deleted the wheel


# --------------------------------------------------------------------------- copies


def _copy_package(version: str, dest_pkg: Path) -> Path:
    return copy_tree(site_packages(version) / PACKAGE, dest_pkg)


def make_checkout(version: str, dest: Path) -> Path:
    """A git repository shaped like a clone of the vLLM sources, at ``dest``.

    ``dest/vllm/...`` holds the release's sources (vLLM's package sits at the
    root of its repository), committed on branch ``main`` as "vllm <version>".
    Returns ``dest``.
    """
    version = _check_version(version)
    dest = Path(dest)
    _copy_package(version, dest / PACKAGE)
    return commit_checkout(dest, f"{PACKAGE} {version}")


def make_site_packages_copy(version: str, dest: Path) -> Path:
    """A writable copy at ``dest/lib/python3.12/site-packages/vllm/...``; returns ``site-packages``."""
    version = _check_version(version)
    site = Path(dest) / "lib" / "python3.12" / "site-packages"
    _copy_package(version, site / PACKAGE)
    return site


# --------------------------------------------------------------------------- releases


def pinned_releases(path: Path | None = None) -> list[str]:
    """The pinned releases (``tests/vllm_releases.txt`` by default), oldest first."""
    return read_releases(Path(path) if path is not None else RELEASES_FILE)


def latest_release() -> str:
    """The newest pinned release (last line of ``tests/vllm_releases.txt``)."""
    return pinned_releases()[-1]


def index_versions() -> list[str]:
    """Every published version (newest first), as ``pip index versions`` lists it."""
    if _offline():
        raise ReleaseError(f"{OFFLINE_ENV}=1: the package index is not asked")
    proc = _run_pip(["index", "versions", PACKAGE])
    if proc.returncode != 0:
        raise _pip_failure(f"listing {PACKAGE} versions", proc)
    versions = parse_index_versions(proc.stdout)
    if not versions:
        raise ReleaseError(
            f"`pip index versions {PACKAGE}` printed no 'Available versions:' line:\n" + proc.stdout[-2000:]
        )
    return versions


if __name__ == "__main__":  # python tests/vllm_releases.py [VERSION ...]: warm the cache
    for _version in sys.argv[1:] or pinned_releases():
        _site = site_packages(_version)
        print(_version, _site, (_site.parent / _COMPLETE_MARKER).read_text().split("\n")[1])
