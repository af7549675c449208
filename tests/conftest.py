"""Shared fixtures: real SGLang releases (see tests/sglang_releases.py); the offline guard."""

from __future__ import annotations

import functools
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
# _RUNS: `check --all` feeds four tests of each release; _APPLIED: one `diff --all` and `apply --all` feed three): under pytest-xdist the tests of one
# release go to one worker together (`--dist loadgroup`), so the run is made once, not once a worker.
PER_RELEASE_GROUPS = {"test_release_range.py"}
# Modules whose tests all go to one worker: the pre-commit hook environment is built once a worker.
MODULE_GROUPS = {"test_precommit.py": "pre-commit"}
# The longest work units of the integration tier that are not a release's group (each close to a minute
# of one worker): handed out first, with the release groups, so that the short tests fill the end.
START_FIRST = ("test_formatters.py", "test_precommit.py")


def group_of(nodeid: str) -> str | None:
    """The xdist group of a test, read off its node id alone (the scheduler has nothing else): one per
    release in PER_RELEASE_GROUPS (the tests there take the release as their only parameter), one per
    module in MODULE_GROUPS."""
    path, _, rest = nodeid.partition("::")
    name = path.rpartition("/")[2]
    if name in MODULE_GROUPS:
        return MODULE_GROUPS[name]
    if name in PER_RELEASE_GROUPS and rest.endswith("]") and "[" in rest:
        return f"{name.removesuffix('.py')}-{rest[rest.index('[') + 1 : -1]}"
    return None


def _under_xdist(config) -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) or getattr(config.option, "numprocesses", None) not in (None, 0)


def pytest_configure(config):
    # registered here as well as in pyproject.toml: a pytest run elsewhere with this conftest as a plugin
    # (tests/test_hermetic.py) knows the mark too
    config.addinivalue_line("markers", "integration: runs against real SGLang releases downloaded from PyPI (cached)")
    # pytest-xdist's loadgroup scheduler hands the work units (a group, or a test of its own) out in the
    # order of the collection, unless it reorders them by their number of tests (`--loadscope-reorder`,
    # its default): that put the release groups (five tests each) first and the long single tests
    # (tests/test_formatters.py, a minute) last, one worker finishing them alone. The order
    # pytest_collection_modifyitems makes is the one wanted.
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False
    # the CLI's own collector settings (`eaglepatch` sets them in cli_main before any command): the tests
    # that run a command in this process (typer's CliRunner) run it as a user's process does, not with
    # the default thresholds, under which a run over a release's syntax trees spends most of its time
    # in the collector (check --all of vLLM 0.34.0: 4.0 s against 1.4 s)
    from eaglepatch.startup import tune_gc

    tune_gc()


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` grouping by `group_of`. pytest-xdist's own groups come from the xdist_group marks:
    its worker appends "@group" to each node id in the collection it reports, but by setting an attribute
    pytest 9 no longer reads the node id from, so every test was handed out on its own (a worker that had
    not run a release's `apply --all` ran it again, and `check --all` once a worker and test). A node id
    that does carry a group keeps it."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Groups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return (group_of(nodeid) or nodeid) if scope == nodeid else scope

    return Groups(config, log)


@functools.cache
def _release_ranks() -> dict[str, int]:
    """0 for the newest release of tests/releases.txt, 1 for the one before, ..."""
    return {version: rank for rank, version in enumerate(reversed(sglang_releases.read_releases()))}


def _release_rank(item) -> int:
    version = getattr(getattr(item, "callspec", None), "params", {}).get("version")
    return _release_ranks().get(version, len(_release_ranks())) if isinstance(version, str) else len(_release_ranks())


def _start_order(item) -> tuple:
    """Longest first: the integration tier (seconds to minutes a test) before the fast tier (milliseconds),
    and in it the long single tests (START_FIRST), then the groups of test_release_range.py newest release
    first (the newer, the more files), then the rest as collected. Within a group the tests keep their order."""
    if item.get_closest_marker("integration") is None:
        return (1, 0, 0)
    if item.path.name in START_FIRST:
        return (0, 0, START_FIRST.index(item.path.name))
    if item.path.name in PER_RELEASE_GROUPS:
        return (0, 1, _release_rank(item))
    return (0, 2, 0)


def releases_asked_for(item) -> set[str]:
    """The release fixtures a test names: as arguments, or as parameter values it hands to
    `request.getfixturevalue` (the suite's way to run one test on several releases)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    named = {value for value in params.values() if isinstance(value, str)}
    return RELEASE_FIXTURES.intersection({*getattr(item, "fixturenames", ()), *named})


@pytest.hookimpl(tryfirst=True)  # the marks are there when pytest-xdist's own hook reads them
def pytest_collection_modifyitems(config, items):
    for item in items:
        if releases_asked_for(item):
            item.add_marker(pytest.mark.integration)
        group = group_of(item.nodeid)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if _under_xdist(config):
        # so the fast tests fill the workers' last minutes instead of one worker finishing a long test
        # alone. Stable, and the same on every worker (xdist checks).
        items.sort(key=_start_order)


_RUNNING: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING.append(item)
    try:
        yield
    finally:
        _RUNNING.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """A release set up for a test outside the integration tier is refused, cached or not: the fast tier
    must pass on a machine that has no release (CI's clean clone), not only on one whose cache is warm."""
    if fixturedef.argname in RELEASE_FIXTURES and _RUNNING and _RUNNING[-1].get_closest_marker("integration") is None:
        pytest.fail(
            f"{_RUNNING[-1].nodeid} sets up the release fixture {fixturedef.argname!r} but is not marked "
            "integration: add @pytest.mark.integration (the tier that may fetch releases)",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch, tmp_path_factory):
    """Tests see fresh answers: the result cache is off (tests/test_cache.py turns it on), and never
    the user's own cache folder."""
    monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "1")
    monkeypatch.setenv("EAGLEPATCH_CACHE_DIR", str(tmp_path_factory.mktemp("eaglepatch-cache")))
    monkeypatch.setenv("EAGLEPATCH_STATE_DIR", str(tmp_path_factory.mktemp("eaglepatch-state")))  # write journals


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
