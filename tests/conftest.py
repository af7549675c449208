"""Shared fixtures: real SGLang releases (see tests/sglang_releases.py); the offline guard."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis profiles must exist before its plugin reads --hypothesis-profile, hence here:
# `ci` (the default) keeps `make test` inside CI's time; `long` is for a thorough local run:
#   pytest --hypothesis-profile long tests/test_properties.py
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci", max_examples=25, deadline=None, print_blob=True, suppress_health_check=_HEALTH,
    derandomize=bool(os.environ.get("CI")),
)
settings.register_profile("long", max_examples=500, deadline=None, print_blob=True, suppress_health_check=_HEALTH)
if settings.get_current_profile_name() == "default":
    settings.load_profile("ci")

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # importable whether or not tests/ is a package
    sys.path.insert(0, _TESTS)

import sglang_releases  # noqa: E402

# --------------------------------------------------------------------------- offline guard
# EAGLEPATCH_OFFLINE=1 (`make test-fast` sets it): this process may open no connection to
# another host, and pip in its subprocesses may ask no index (PIP_NO_INDEX). Set here, at
# import, so collection runs guarded too. Loopback and Unix sockets stay allowed (xdist's
# workers talk over pipes anyway). A test that reaches out fails with OfflineError naming the
# address: mark it `integration` (the tier that may fetch releases) or fake the network.
OFFLINE_ENV = "EAGLEPATCH_OFFLINE"


class OfflineError(OSError):
    """A connection to another host under EAGLEPATCH_OFFLINE=1."""


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _is_local(address) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX path (str or bytes)
        return True
    host = str(address[0]).split("%", 1)[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name to resolve: another host as far as the guard knows


def _guarded(original):
    def connect(self, address, *args, **kwargs):
        if self.family != getattr(socket, "AF_UNIX", None) and not _is_local(address):
            raise OfflineError(f"{OFFLINE_ENV}=1: connection to {address!r} refused by tests/conftest.py")
        return original(self, address, *args, **kwargs)

    connect.__wrapped__ = original
    return connect


def _install_offline_guard() -> None:
    for name in ("connect", "connect_ex"):
        current = getattr(socket.socket, name)
        if not hasattr(current, "__wrapped__"):
            setattr(socket.socket, name, _guarded(current))
    os.environ["PIP_NO_INDEX"] = "1"  # pip subprocesses: no index, whatever else the test passes


if _offline():
    _install_offline_guard()

# Fixtures that hand out real releases; a test using one is an integration test.
RELEASE_FIXTURES = {"sglang_059", "sglang_0510", "sglang_latest", "checkout_of"}


# Modules whose tests share one run per release through a module-level memo (test_release_range's
# _RUNS: `check --all` feeds three tests of each release; _APPLIED: one `apply --all` feeds two): under pytest-xdist the tests of one
# release go to one worker together (`--dist loadgroup`), so the run is made once, not once a worker.
PER_RELEASE_GROUPS = {"test_release_range.py"}


def _under_xdist(config) -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) or getattr(config.option, "numprocesses", None) not in (None, 0)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if RELEASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        version = getattr(getattr(item, "callspec", None), "params", {}).get("version")
        if version is not None and item.path.name in PER_RELEASE_GROUPS:
            item.add_marker(pytest.mark.xdist_group(f"{item.path.stem}-{version}"))
    if _under_xdist(config):
        # Longest first: the integration tier (seconds to minutes a test) is handed out before the
        # fast tier (milliseconds), so the fast tests fill the workers' last minutes instead of one
        # worker finishing a long test alone. Stable, and the same on every worker (xdist checks).
        items.sort(key=lambda item: item.get_closest_marker("integration") is None)


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch, tmp_path_factory):
    """Tests see fresh answers: the result cache is off (tests/test_cache.py turns it on), and never
    the user's own cache folder."""
    monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "1")
    monkeypatch.setenv("EAGLEPATCH_CACHE_DIR", str(tmp_path_factory.mktemp("eaglepatch-cache")))


@pytest.fixture(scope="session")
def sglang_059() -> Path:
    """site-packages folder holding sglang 0.5.9 (shared cache: do not write)."""
    return sglang_releases.site_packages("0.5.9")


@pytest.fixture(scope="session")
def sglang_0510() -> Path:
    """site-packages folder holding sglang 0.5.10 (shared cache: do not write)."""
    return sglang_releases.site_packages("0.5.10")


@pytest.fixture(scope="session")
def sglang_latest() -> Path:
    """site-packages folder holding the newest sglang release (shared cache)."""
    return sglang_releases.site_packages(sglang_releases.latest_release())


@pytest.fixture
def checkout_of(tmp_path):
    """Factory: ``checkout_of("0.5.9")`` -> root of a fresh git repo in tmp_path."""
    made = 0

    def make(version: str) -> Path:
        nonlocal made
        made += 1
        return sglang_releases.make_checkout(version, tmp_path / f"sglang-{version}-{made}")

    return make
