"""Tests of the release helper itself (tests/sglang_releases.py).

Most of these work offline on a private cache with pip faked out; the ones that
need the real 0.5.9 wheel (fetched once into the shared cache) are marked
``integration``.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import git
import pytest
import sglang_releases as sr

KIMI = Path("sglang", "srt", "models", "kimi_k25.py")


def _wheel_py_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {
            n for n in zf.namelist()
            if n.startswith("sglang/") and n.endswith(".py") and not n.endswith("/")
        }


def _tree_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _fail_pip(*args, **kwargs):
    raise AssertionError(f"pip must not run when the cache is warm: {args!r}")


@pytest.fixture(scope="module")
def wheel_059() -> Path:
    """The real 0.5.9 wheel in the shared cache (downloaded if absent)."""
    return sr.download_wheel("0.5.9")


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of this test's own."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(sr.CACHE_ENV, str(cache))
    return cache


def _fake_completed(args, returncode=0, stdout="", stderr=""):
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


def test_extraction_keeps_sources_only_but_every_folder(tmp_path):
    """0.5.20's models import `sglang.kernels.jit`, which raises unless its `include/` and `csrc/`
    exist: the folders stay (empty), their headers do not; nothing lands outside the tree."""
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/kernels/jit/__init__.py", "")
        zf.writestr("sglang/kernels/jit/include/sgl/vec.cuh", "// header")
        zf.writestr("sglang/kernels/jit/csrc/", "")
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang")
        zf.writestr("sglang/../escape.py", "x = 1")
    site = tmp_path / "site"
    assert sr.extract_sources(wheel, site, "sglang") == 1
    assert _tree_files(site) == {"sglang/kernels/jit/__init__.py"}
    assert (site / "sglang/kernels/jit/include/sgl").is_dir() and (site / "sglang/kernels/jit/csrc").is_dir()
    assert not (tmp_path / "escape.py").exists() and not (site / "sglang-9.9.9.dist-info").exists()


# --------------------------------------------------------------------------- real 0.5.9


@pytest.mark.integration
def test_site_packages_holds_exactly_the_wheels_python_sources(wheel_059):
    site = sr.site_packages("0.5.9")
    assert site == sr.cache_dir() / "trees" / "0.5.9" / "site-packages"
    assert (site / KIMI).is_file()
    assert (site / "sglang" / "__init__.py").is_file()
    assert (site / "sglang" / "srt" / "models" / "deepseek_v2.py").is_file()
    # every sglang/**/*.py of the wheel, __init__.py included, and nothing else
    assert _tree_files(site) == _wheel_py_files(wheel_059)
    assert (site.parent / ".complete").is_file()


@pytest.mark.integration
def test_warm_cache_never_runs_pip(wheel_059, monkeypatch):
    first = sr.site_packages("0.5.9")
    marker = first.parent / ".complete"
    before = (marker.stat().st_mtime_ns, (first / KIMI).stat().st_mtime_ns)
    monkeypatch.setattr(sr.subprocess, "run", _fail_pip)
    assert sr.download_wheel("0.5.9") == wheel_059
    assert sr.site_packages("0.5.9") == first
    assert (marker.stat().st_mtime_ns, (first / KIMI).stat().st_mtime_ns) == before


@pytest.mark.integration
def test_make_checkout_commits_the_release(wheel_059, tmp_path):
    root = sr.make_checkout("0.5.9", tmp_path / "clone")
    assert root == tmp_path / "clone"
    assert (root / "python" / "sglang" / "srt" / "models" / "kimi_k25.py").is_file()
    repo = git.Repo(root)
    try:
        assert repo.active_branch.name == "main"
        head = repo.head.commit
        assert head.message.strip() == "sglang 0.5.9"
        assert not head.parents
        committed = {b.path for b in head.tree.traverse() if b.type == "blob"}
        assert "python/sglang/srt/models/kimi_k25.py" in committed
        assert committed == {"python/" + f for f in _wheel_py_files(wheel_059)}
        assert not repo.is_dirty(untracked_files=True)
    finally:
        repo.close()


@pytest.mark.integration
def test_site_packages_copy_is_writable_and_detached(wheel_059, tmp_path):
    site = sr.make_site_packages_copy("0.5.9", tmp_path / "venv")
    assert site == tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    copy = site / KIMI
    shared = sr.site_packages("0.5.9") / KIMI
    assert copy.read_bytes() == shared.read_bytes()
    copy.write_text("# patched\n")
    assert shared.read_text() != "# patched\n"


@pytest.mark.integration
def test_half_tree_is_rebuilt_and_interrupted_build_leaves_nothing(
    wheel_059, private_cache, monkeypatch
):
    (private_cache / "wheels").mkdir(parents=True)
    shutil.copy2(wheel_059, private_cache / "wheels" / wheel_059.name)
    monkeypatch.setattr(sr.subprocess, "run", _fail_pip)
    trees = private_cache / "trees"

    # An extraction that dies half-way publishes nothing and leaves no temp dir.
    real_extract = sr._extract_sources

    def dying_extract(wheel, site):
        (site / "sglang").mkdir(parents=True)
        (site / "sglang" / "__init__.py").write_text("")
        raise KeyboardInterrupt

    monkeypatch.setattr(sr, "_extract_sources", dying_extract)
    with pytest.raises(KeyboardInterrupt):
        sr.site_packages("0.5.9")
    assert list(trees.iterdir()) == []

    # A tree without the completion marker (not ours) is thrown away and rebuilt.
    monkeypatch.setattr(sr, "_extract_sources", real_extract)
    stale = trees / "0.5.9" / "site-packages" / "sglang"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("# half\n")
    site = sr.site_packages("0.5.9")
    assert (site / KIMI).is_file()
    assert (site / "sglang" / "__init__.py").read_text() != "# half\n"
    assert (site.parent / ".complete").is_file()
    assert sorted(p.name for p in trees.iterdir()) == ["0.5.9"]


# --------------------------------------------------------------------------- pip faked


def test_download_runs_pip_once_then_uses_the_cache(private_cache, monkeypatch):
    calls = []

    def fake_run(args, **kwargs):
        calls.append(list(args))
        dest = Path(args[args.index("-d") + 1])
        with zipfile.ZipFile(dest / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", "w") as zf:
            zf.writestr("sglang/__init__.py", "")
            zf.writestr("sglang/srt/__init__.py", "")
            zf.writestr("sglang/srt/models/kimi_k25.py", "class K: pass\n")
            zf.writestr("sglang/srt/layers/kernel.cu", "// not python\n")
            zf.writestr("sglang-0.5.23.dist-info/RECORD", "")
        return _fake_completed(args)

    monkeypatch.setattr(sr.subprocess, "run", fake_run)
    wheel = sr.download_wheel("0.5.23")
    assert wheel.parent == private_cache.resolve() / "wheels"
    assert wheel.name.startswith("sglang-0.5.23-")
    assert len(calls) == 1
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"]
    for arg in ("--no-deps", "--only-binary=:all:", "sglang==0.5.23"):
        assert arg in cmd
    # no temporary download folders left behind
    assert [p.name for p in wheel.parent.iterdir()] == [wheel.name]

    site = sr.site_packages("0.5.23")
    assert _tree_files(site) == {
        "sglang/__init__.py", "sglang/srt/__init__.py", "sglang/srt/models/kimi_k25.py",
    }
    assert len(calls) == 1
    # 0.5.2 is another release: its prefix must not match the 0.5.23 wheel
    monkeypatch.setattr(sr.subprocess, "run", lambda args, **kw: _fake_completed(args, 1, "", "ERROR: nope"))
    with pytest.raises(sr.ReleaseError):
        sr.download_wheel("0.5.2")


def test_pip_failure_is_a_clear_error(private_cache, monkeypatch):
    monkeypatch.setattr(
        sr.subprocess, "run",
        lambda args, **kw: _fake_completed(
            args, 1, "", "ERROR: No matching distribution found for sglang==9.9.9"),
    )
    with pytest.raises(sr.ReleaseError, match=r"sglang==9\.9\.9"):
        sr.download_wheel("9.9.9")
    with pytest.raises(ValueError):
        sr.download_wheel("not a version")


INDEX_OUTPUT = (
    "sglang (0.5.11)\n"
    "Available versions: 0.5.11, 0.5.10.post1, 0.5.10, 0.5.9, 0.5.8.post1, 0.5.8\n"
)


def _pinned(tmp_path, monkeypatch, text: str) -> Path:
    path = tmp_path / "releases.txt"
    path.write_text(text)
    monkeypatch.setattr(sr, "RELEASES_FILE", path)
    return path


PINNED = "# header: updated on purpose\n0.5.8\n0.5.8.post1\n0.5.9\n\n0.5.10\n0.5.10.post1  # trailing\n0.5.11\n"


def test_latest_release_and_range_read_the_pinned_file_never_pip(tmp_path, monkeypatch):
    _pinned(tmp_path, monkeypatch, PINNED)
    monkeypatch.setattr(sr.subprocess, "run", _fail_pip)
    assert sr.latest_release() == "0.5.11"
    assert sr.releases_between() == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]
    assert sr.releases_between("0.5.8", "0.5.10") == ["0.5.8", "0.5.8.post1", "0.5.9", "0.5.10"]
    assert sr.releases_between("0.5.10.post1", "0.5.10.post1") == ["0.5.10.post1"]


@pytest.mark.parametrize("text", ["", "# only a comment\n", "0.5.10\n0.5.9\n", "0.5.9\n0.5.9\n", "0.5.9\nnope\n"])
def test_a_bad_pinned_file_is_an_error(tmp_path, monkeypatch, text):
    _pinned(tmp_path, monkeypatch, text)
    with pytest.raises(sr.ReleaseError):
        sr.releases_between()


def test_the_repository_pins_0_5_9_to_0_5_23_oldest_first():
    versions = sr.read_releases()
    assert versions[0] == "0.5.9"
    assert "0.5.10.post1" in versions and "0.5.23" in versions
    assert sr.RELEASES_FILE.read_text().startswith("#")
    assert "make update-releases" in sr.RELEASES_FILE.read_text()


def test_update_releases_rewrites_the_file_from_the_index(tmp_path, monkeypatch):
    path = tmp_path / "releases.txt"
    path.write_text("# keep me\n# and me\n0.5.9\n0.5.10\n")
    calls = []

    def fake_run(args, **kwargs):
        calls.append(list(args))
        return _fake_completed(args, 0, INDEX_OUTPUT)

    monkeypatch.setattr(sr.subprocess, "run", fake_run)
    before, after = sr.update_releases(path)
    assert calls == [[calls[0][0], "-m", "pip", "index", "versions", "sglang"]]
    assert before == ["0.5.9", "0.5.10"]
    assert after == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]
    assert path.read_text() == "# keep me\n# and me\n0.5.9\n0.5.10\n0.5.10.post1\n0.5.11\n"
    _, lower = sr.update_releases(path, low="0.5.8.post1")
    assert lower[:2] == ["0.5.8.post1", "0.5.9"]


def test_update_releases_leaves_the_file_alone_when_pip_fails(tmp_path, monkeypatch):
    path = tmp_path / "releases.txt"
    path.write_text("# h\n0.5.9\n")
    monkeypatch.setattr(sr.subprocess, "run", lambda args, **kw: _fake_completed(args, 1, "", "offline"))
    with pytest.raises(sr.ReleaseError, match="offline"):
        sr.update_releases(path)
    assert path.read_text() == "# h\n0.5.9\n"


def test_parse_index_versions_sorts_newest_first():
    assert sr.parse_index_versions("WARNING: x\nAvailable versions: 0.5.9, 0.5.10, 0.5.10.post1\n") == [
        "0.5.10.post1", "0.5.10", "0.5.9",
    ]
    assert sr.parse_index_versions("nothing here") == []


# --------------------------------------------------------------------------- real index


@pytest.mark.integration
def test_real_index_still_lists_every_pinned_release():
    published = set(sr.index_versions())
    missing = [v for v in sr.read_releases() if v not in published]
    assert not missing, f"pinned but not on the index: {missing}"
