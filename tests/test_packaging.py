"""One installed package, `eaglepatch` (issue "Craft"): the wheel holds nothing else, folders named like
the repository's (`patcher/`, `codemods/`) in the working directory change nothing, and `main(argv)`
returns the exit status scripts rely on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "fixtures" / "checkout"


def test_the_wheel_installs_exactly_one_top_level_package(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, source / name)
    for folder in ("patcher", "codemods"):
        shutil.copytree(REPO_ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("eaglepatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"eaglepatch"}
    assert "eaglepatch/cli.py" in names and "eaglepatch/codemods/add_delegations.py" in names
    assert "eaglepatch/__main__.py" in names
    # every module of the repository, the stage folders (patcher/read/, ...) included: a subpackage
    # left out of pyproject's list would import in a checkout and fail once installed
    sources = {f"eaglepatch/{p.relative_to(REPO_ROOT / 'patcher').as_posix()}" for p in (REPO_ROOT / "patcher").rglob("*.py")}
    sources |= {f"eaglepatch/codemods/{p.name}" for p in (REPO_ROOT / "codemods").glob("*.py")}
    assert any("/" in s.removeprefix("eaglepatch/").removeprefix("codemods/") for s in sources), sources
    assert sorted(sources - set(names)) == []
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    from eaglepatch import __version__

    assert f"Version: {__version__}\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    # the licence as an SPDX expression (PEP 639; setuptools refuses the old table form from 2027-02-18)
    # and its text shipped in the wheel
    assert "License-Expression: Apache-2.0\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "eaglepatch = eaglepatch.launch:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_folders_named_like_the_repositorys_do_not_shadow_the_package(tmp_path):
    """A repository that runs codemods often has a `codemods/` folder on PYTHONPATH."""
    for name in ("codemods", "patcher"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "EAGLEPATCH_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "eaglepatch", "check", "--format", "json", str(FIXTURE)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    assert done.returncode == 1, done.stderr  # the fixture has findings: a real run, not an import error
    assert '"schema"' in done.stdout and not done.stderr


@pytest.mark.parametrize(
    "argv, status",
    [(["--version"], 0), (["check", "--no-cache", str(FIXTURE)], 1), (["check", str(FIXTURE / "no-such-folder")], 2)],
)
def test_main_returns_the_exit_status(argv, status, capsys):
    from eaglepatch.launch import main

    assert main(argv) == status
    out, err = capsys.readouterr()
    assert (status == 2) == err.startswith("eaglepatch: error:")


RUN_PROBE = """\
import atexit, sys
atexit.register(lambda: sys.stderr.write("TORN DOWN\\n"))
from eaglepatch.launch import run
sys.argv = ["eaglepatch", *sys.argv[1:]]
run()
"""


def test_the_console_script_ends_at_once_with_everything_written(capsys):
    """`run` skips the interpreter's teardown (no atexit handler runs) after flushing what `main` wrote:
    a piped `diff` is whole and the status is `main`'s."""
    from eaglepatch.launch import main

    argv = ["diff", str(FIXTURE)]
    status = main(argv)
    expected = capsys.readouterr().out
    done = subprocess.run(
        [sys.executable, "-c", RUN_PROBE, *argv], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "EAGLEPATCH_NO_CACHE": "1"},
    )
    assert status == 1 and expected.startswith("diff --git")
    assert (done.returncode, done.stdout) == (status, expected)
    assert "TORN DOWN" not in done.stderr
