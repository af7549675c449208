"""The suite's own hermeticity: the offline guard of tests/conftest.py (EAGLEPATCH_OFFLINE=1, set by
`make test-fast`), and the shared release cache under concurrent workers (tests/sglang_releases.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import sglang_releases as sr

TESTS = Path(__file__).resolve().parent

# Run in a fresh interpreter: conftest installs the guard at import when the variable is set.
PROBE = r"""
import socket, sys
sys.path.insert(0, sys.argv[1])
import conftest
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(1)
local = socket.socket(); local.connect(listener.getsockname()); local.close()
for address in [("192.0.2.1", 9), ("pypi.org", 443), ("2001:db8::1", 9)]:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    s = socket.socket(family)
    try:
        s.connect(address)
    except conftest.OfflineError:
        print("refused", address[0])
    except OSError as exc:
        print("reached the network", address[0], exc)
    finally:
        s.close()
import os; print("PIP_NO_INDEX", os.environ.get("PIP_NO_INDEX"))
"""


def _probe(offline: str) -> list[str]:
    env = {**os.environ, "EAGLEPATCH_OFFLINE": offline}
    env.pop("PIP_NO_INDEX", None)
    done = subprocess.run([sys.executable, "-c", PROBE, str(TESTS)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_offline_guard_refuses_other_hosts_and_allows_loopback():
    assert _probe("1") == ["refused 192.0.2.1", "refused pypi.org", "refused 2001:db8::1", "PIP_NO_INDEX 1"]


def test_offline_guard_is_off_unless_asked():
    lines = _probe("0")
    assert not any(line.startswith("refused") for line in lines)
    assert lines[-1] == "PIP_NO_INDEX None"


def test_this_session_is_guarded_when_offline():
    guarded = hasattr(socket.socket.connect, "__wrapped__")
    assert guarded == (os.environ.get("EAGLEPATCH_OFFLINE", "") not in ("", "0", "false", "no"))


# --------------------------------------------------------------------------- concurrent cache


def test_two_workers_wanting_one_release_fetch_it_once(tmp_path, monkeypatch):
    """Two threads (flock conflicts between open files, so threads stand for xdist workers) ask for the
    same release of an empty cache at once: pip runs once, both get the one complete tree."""
    monkeypatch.setenv(sr.CACHE_ENV, str(tmp_path / "cache"))
    calls = []

    def slow_pip(args, **kwargs):
        calls.append(list(args))
        time.sleep(0.5)  # long enough that the second worker arrives while the first holds the lock
        dest = Path(args[args.index("-d") + 1])
        with zipfile.ZipFile(dest / "sglang-0.5.23-py3-none-any.whl", "w") as zf:
            zf.writestr("sglang/__init__.py", "")
            zf.writestr("sglang/srt/__init__.py", "")
            zf.writestr("sglang/srt/models/kimi_k25.py", "class K: pass\n")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(sr.subprocess, "run", slow_pip)
    results, errors = [], []
    start = threading.Barrier(2)

    def worker():
        try:
            start.wait()
            results.append(sr.site_packages("0.5.23"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(calls) == 1
    assert len(results) == 2 and results[0] == results[1]
    assert (results[0] / "sglang" / "srt" / "models" / "kimi_k25.py").is_file()
    assert (results[0].parent / ".complete").is_file()
    trees = sr.cache_dir() / "trees"
    assert sorted(p.name for p in trees.iterdir()) == ["0.5.23"]  # no temporary folder left
    wheels = sr.cache_dir() / "wheels"
    assert [p.name for p in wheels.iterdir()] == ["sglang-0.5.23-py3-none-any.whl"]


def test_a_held_lock_makes_the_other_worker_wait_then_read_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(sr.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(sr.subprocess, "run", lambda *a, **k: pytest.fail("pip ran: the cache was filled"))
    published = threading.Event()

    def holder():
        with sr._release_lock("0.5.9"):
            time.sleep(0.4)
            wheel = sr._wheels_dir() / "sglang-0.5.9-py3-none-any.whl"
            with zipfile.ZipFile(wheel, "w") as zf:
                zf.writestr("sglang/__init__.py", "")
            published.set()

    t = threading.Thread(target=holder)
    t.start()
    time.sleep(0.1)
    wheel = sr.download_wheel("0.5.9")  # blocks on the lock, then finds the holder's wheel
    t.join(10)
    assert published.is_set() and wheel.name == "sglang-0.5.9-py3-none-any.whl"


# --------------------------------------------------------------------------- xdist groups (tests/conftest.py)
@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/test_release_range.py::test_apply_all[0.5.9]", "test_release_range-0.5.9"),
        ("tests/test_release_range.py::test_kimi_check[0.5.10.post1]", "test_release_range-0.5.10.post1"),
        ("tests/test_precommit.py::test_check_hook_fails_on_a_broken_wrapper_and_passes_once_fixed", "pre-commit"),
        ("tests/test_release_range.py::test_all_finds_every_entryclass_wrapper", None),
        ("tests/test_check.py::test_something[0.5.9]", None),
    ],
)
def test_tests_sharing_a_release_run_share_a_group(nodeid, group):
    """One group per release of test_release_range.py (its apply --all and check --all are made once, on one
    worker) and one for the pre-commit tests (one hook environment); every other test on its own."""
    from conftest import group_of

    assert group_of(nodeid) == group


# --------------------------------------------------------------------------- the tiers

# A test module run by a pytest of its own, with this suite's conftest as a plugin: one test names a
# release as a parameter it hands to getfixturevalue (the conftest marks it integration), one asks for a
# release by a name it makes up at run time (nothing can mark it before it runs).
TIER_PROBE = '''
import pytest

@pytest.mark.parametrize("release", ["sglang_059"])
def test_named_as_a_parameter(release, request):
    request.getfixturevalue(release)

def test_asked_for_at_run_time(request):
    request.getfixturevalue("sglang_" + "059")

def test_without_a_release():
    assert True
'''


def test_a_fast_tier_test_that_sets_up_a_release_fails_even_when_the_release_is_cached(tmp_path):
    """CI's fast tier runs on a clean clone, with no release: a test there that reaches a release must
    fail on a machine whose release cache is warm too, where it would otherwise pass unnoticed."""
    (tmp_path / "test_probe.py").write_text(TIER_PROBE)
    env = {**os.environ, "EAGLEPATCH_OFFLINE": "1", "PYTHONPATH": str(TESTS),
           sr.CACHE_ENV: os.environ.get(sr.CACHE_ENV, str(sr.cache_dir()))}  # warm, if this machine has it
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-m", "not integration", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 1 passed, 1 deselected" in out, out
    assert "test_asked_for_at_run_time sets up the release fixture 'sglang_059' but is not marked integration" in out
    assert "test_named_as_a_parameter" not in out  # deselected: marked integration at collection
