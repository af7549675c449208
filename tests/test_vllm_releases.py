"""Tests of the vLLM release cache (tests/vllm_releases.py), offline: pip is faked and the wheel
is a small zip built in a temporary folder."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
import vllm_releases as vr
from packaging.version import Version

INTERFACES = "vllm/model_executor/models/interfaces.py"


def _completed(args, returncode=0, stdout="", stderr=""):
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


def _tree_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _fail_pip(*args, **kwargs):
    raise AssertionError(f"pip must not run: {args!r}")


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv(vr.CACHE_ENV, str(cache))
    monkeypatch.delenv(vr.OFFLINE_ENV, raising=False)
    return cache


def _fake_pip(calls: list, version: str = "0.18.0"):
    """A `pip download` that writes a small vLLM-shaped wheel into its `-d` folder."""

    def run(args, **kwargs):
        calls.append(list(args))
        dest = Path(args[args.index("-d") + 1])
        with zipfile.ZipFile(dest / f"vllm-{version}-cp38-abi3-manylinux_2_31_x86_64.whl", "w") as zf:
            zf.writestr("vllm/__init__.py", "")
            zf.writestr(INTERFACES, "class SupportsEagle3: ...\n")
            zf.writestr("vllm/models/kimi/nvidia/model.py", "class K: ...\n")
            zf.writestr("vllm/_C.abi3.so", b"\x7fELF not python")
            zf.writestr("vllm/../escape.py", "nope\n")
            zf.writestr(f"vllm-{version}.dist-info/RECORD", "")
        return _completed(args)

    return run


def test_one_download_then_only_the_python_sources_are_kept(private_cache, monkeypatch):
    calls: list = []
    monkeypatch.setattr(vr.subprocess, "run", _fake_pip(calls))
    site = vr.site_packages("0.18.0")

    assert site == private_cache.resolve() / "trees" / "0.18.0" / "site-packages"
    assert _tree_files(site) == {"vllm/__init__.py", INTERFACES, "vllm/models/kimi/nvidia/model.py"}
    marker = (site.parent / ".complete").read_text()
    assert marker.startswith("vllm-0.18.0-") and "3 files" in marker
    # one pip run, with the options that keep it to one binary wheel and no dependencies
    assert len(calls) == 1
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"]
    for arg in ("--no-deps", "--only-binary=:all:", "vllm==0.18.0"):
        assert arg in cmd
    # the wheel is gone, and no temporary folder is left anywhere in the cache
    assert not list(private_cache.rglob("*.whl"))
    assert not [p for p in private_cache.rglob(".*") if p.name not in (".complete",)]

    # warm: the same tree, pip never asked again, even offline
    monkeypatch.setattr(vr.subprocess, "run", _fail_pip)
    monkeypatch.setenv(vr.OFFLINE_ENV, "1")
    assert vr.site_packages("0.18.0") == site


def test_offline_refuses_a_release_that_is_not_cached(private_cache, monkeypatch):
    monkeypatch.setenv(vr.OFFLINE_ENV, "1")
    monkeypatch.setattr(vr.subprocess, "run", _fail_pip)
    with pytest.raises(vr.ReleaseError, match=r"EAGLEPATCH_OFFLINE=1 and vllm==0\.10\.1 is not in the cache"):
        vr.site_packages("0.10.1")
    with pytest.raises(vr.ReleaseError):
        vr.index_versions()
    assert not (private_cache / "trees" / "0.10.1").exists()


def test_fallback_target_when_pip_finds_no_wheel_for_this_interpreter(private_cache, monkeypatch):
    calls: list = []
    fetch = _fake_pip(calls, "0.9.2")

    def run(args, **kwargs):
        if "--platform" not in args:
            calls.append(list(args))
            return _completed(args, 1, "", "ERROR: No matching distribution found for vllm==0.9.2")
        return fetch(args, **kwargs)

    monkeypatch.setattr(vr.subprocess, "run", run)
    site = vr.site_packages("0.9.2")
    assert (site / INTERFACES).is_file()
    assert len(calls) == 2 and "--platform" in calls[1] and "--python-version" in calls[1]


def test_pip_failure_and_a_wheel_without_vllm_leave_nothing(private_cache, monkeypatch):
    monkeypatch.setattr(
        vr.subprocess, "run",
        lambda args, **kw: _completed(args, 1, "", "ERROR: No matching distribution found for vllm==9.9.9"),
    )
    with pytest.raises(vr.ReleaseError, match=r"vllm==9\.9\.9"):
        vr.site_packages("9.9.9")
    with pytest.raises(ValueError):
        vr.site_packages("not a version")

    def empty_wheel(args, **kwargs):
        dest = Path(args[args.index("-d") + 1])
        with zipfile.ZipFile(dest / "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "w") as zf:
            zf.writestr("vllm_other/__init__.py", "")
        return _completed(args)

    monkeypatch.setattr(vr.subprocess, "run", empty_wheel)
    with pytest.raises(vr.ReleaseError, match="no vllm/__init__.py"):
        vr.site_packages("0.11.0")
    assert list((private_cache / "trees").iterdir()) == []
    assert not list(private_cache.rglob("*.whl"))


def test_a_half_tree_is_replaced(private_cache, monkeypatch):
    stale = private_cache / "trees" / "0.18.0" / "site-packages" / "vllm"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("# half\n")
    calls: list = []
    monkeypatch.setattr(vr.subprocess, "run", _fake_pip(calls))
    site = vr.site_packages("0.18.0")
    assert (site / "vllm" / "__init__.py").read_text() == ""
    assert len(calls) == 1


def test_copies_are_writable_and_detached(private_cache, monkeypatch, tmp_path):
    monkeypatch.setattr(vr.subprocess, "run", _fake_pip([]))
    shared = vr.site_packages("0.18.0") / INTERFACES
    site = vr.make_site_packages_copy("0.18.0", tmp_path / "venv")
    (site / INTERFACES).write_text("# patched\n")
    checkout = vr.make_checkout("0.18.0", tmp_path / "clone")
    assert (checkout / INTERFACES).read_text() == shared.read_text() != "# patched\n"


def test_the_pinned_list_spans_the_interface_changes_oldest_first():
    versions = vr.pinned_releases()
    assert versions == sorted(versions, key=Version)
    assert 3 <= len(versions) <= 5
    assert Version(versions[0]) < Version("0.10.1")  # duck-typed, before SupportsEagle3
    assert "0.10.1" in versions and "0.18.0" in versions
    assert vr.latest_release() == versions[-1]
