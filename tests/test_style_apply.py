"""`apply` writes what the tree's own formatters accept, at the tree's own settings (patcher/read/style.py).

A git checkout of the fixture tree gets a formatter configuration (black's line length in pyproject.toml,
isort's in .isort.cfg, or both as the args of the pre-commit hooks), is formatted with real black and
isort run that way, then patched: running them again changes nothing, the lines written use the width
(a signature black wraps at 88 stays on one line at 100; nothing written at 79 goes past 79 but what
black cannot split), and `revert` takes it all out again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import git, isolate_git, snapshot
from typer.testing import CliRunner

from eaglepatch.cli import app

CHECKOUT = Path(__file__).resolve().parents[1] / "fixtures" / "checkout"
MODELS = "python/sglang/srt/models"
ISORT_CFG = "[settings]\nprofile=black\nknown_first_party=sglang\n"
PRE_COMMIT_79 = """\
repos:
  - repo: https://example.invalid/pycqa/isort
    rev: 5.13.2
    hooks:
      - id: isort
        args: [--profile, black, --line-length, "79"]
  - repo: https://example.invalid/psf/black
    rev: 24.10.0
    hooks:
      - id: black
        args: [--line-length=79]
"""
# what the tree holds, the args its hooks run black and isort with, the width written
TREES = {
    "none": ({}, [], ["--profile", "black"], 88),
    "pyproject-100": (
        {"pyproject.toml": "[tool.black]\nline-length = 100\n", ".isort.cfg": ISORT_CFG + "line_length=100\n"},
        [],
        [],
        100,
    ),
    "pre-commit-79": ({".isort.cfg": ISORT_CFG, ".pre-commit-config.yaml": PRE_COMMIT_79}, ["--line-length=79"], ["--line-length", "79"], 79),
}
WIDE_SIGNATURE = "    def get_embed_and_head(self, /, *, scale: float = 1.0, **options: Any) -> EmbedAndHead:"


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    isolate_git(monkeypatch, columns=200)


def _format(root: Path, black_args: list[str], isort_args: list[str]) -> None:
    """isort then black, from the root, as the tree's pre-commit hooks run them (each finds its own config)."""
    files = sorted(str(p.relative_to(root)) for p in (root / MODELS).glob("*.py"))
    for tool in (["isort", "--quiet", *isort_args], ["black", "--quiet", *black_args]):
        done = subprocess.run([sys.executable, "-m", *tool, *files], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def _added_lines(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    import difflib

    out = []
    for rel, data in after.items():
        old = before[rel].decode("utf-8-sig").splitlines()
        new = data.decode("utf-8-sig").splitlines()
        out += [line[1:] for line in difflib.unified_diff(old, new, lineterm="", n=0) if line.startswith("+") and not line.startswith("+++")]
    return out


@pytest.mark.parametrize("name", list(TREES))
def test_apply_writes_what_the_trees_formatters_keep(tmp_path, name):
    files, black_args, isort_args, width = TREES[name]
    root = tmp_path / "repo"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    for rel, text in files.items():
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    _format(root, black_args, isort_args)  # the fixtures are black's at 88: start from what the hooks make
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "formatted by the tree's hooks")
    formatted = snapshot(root)

    result = CliRunner().invoke(app, ["apply", "--all", str(root)])
    assert result.exit_code == 1 and "still missing" in result.output, result.output  # the fixture's needs_code classes
    patched = snapshot(root)
    changed = sorted(rel for rel in patched if patched[rel] != formatted[rel])
    assert len(changed) >= 8, changed

    _format(root, black_args, isort_args)
    again = snapshot(root)
    assert [rel for rel in changed if again[rel] != patched[rel]] == [], "black or isort rewrote what apply wrote"

    added = _added_lines(formatted, patched)
    code = [line for line in added if not line.lstrip().startswith(("#", 'f"', '"'))]  # comments and strings black cannot split
    assert max(len(line.expandtabs(4)) for line in code) <= width
    if width > 88:
        assert WIDE_SIGNATURE in added, "a signature black wraps at 88 is one line at this width"
        assert len(WIDE_SIGNATURE) > 88
    else:
        assert WIDE_SIGNATURE not in added

    explained = CliRunner().invoke(app, ["explain", "get_embed_and_head", "--format", "json", "--model", "exotic_wrapper", str(root)])
    assert explained.exit_code == 0, explained.output
    said = json.loads(explained.stdout).get("style")
    assert (said is None) == (not files), said
    if files:
        assert said.startswith(f"black line length {width}, ") and all(str(root.resolve() / rel) in said for rel in files)

    result = CliRunner().invoke(app, ["revert", "--all", str(root)])
    assert result.exit_code == 0, result.output
    assert "kept" not in result.output, "revert recognises what apply wrote at this width"
    assert snapshot(root) == formatted


def test_isort_settings_apply_does_not_follow_are_named(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    (root / ".isort.cfg").write_text(ISORT_CFG + "force_single_line=true\n")
    git(root, "init", "-q", "-b", "main")
    result = CliRunner().invoke(app, ["check", "--format", "json", str(root)])
    assert result.exit_code == 1, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert [w for w in warnings if w.startswith("isort force_single_line = true") and str(root.resolve() / ".isort.cfg") in w], warnings
