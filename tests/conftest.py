"""Shared fixtures: real SGLang releases (see tests/sglang_releases.py)."""

from __future__ import annotations

import os
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

# Fixtures that hand out real releases; a test using one is an integration test.
RELEASE_FIXTURES = {"sglang_059", "sglang_0510", "sglang_latest", "checkout_of", "release_reports"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if RELEASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


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
