"""What apply writes is what the tree's own formatters would write: black and isort (black profile,
SGLang's own pre-commit settings) change nothing in a patched file of the newest release."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eaglepatch.cli import app

MODELS = Path("python", "sglang", "srt", "models")


def _format(files: list[Path]) -> None:
    # black --fast: the same output, without black's check of its own work (it parses source and result
    # again and formats the result a second time to see it is stable), a quarter of its time here
    for tool in (["isort", "--quiet", "--profile", "black"], ["black", "--quiet", "--fast"]):
        done = subprocess.run([sys.executable, "-m", *tool, *map(str, files)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def _snapshot(models: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(models.glob("*.py"))}


@pytest.mark.integration
def test_black_and_isort_leave_apply_all_of_the_newest_release_as_it_is(checkout_of):
    from sglang_releases import latest_release

    root = checkout_of(latest_release())
    models = root / MODELS
    # the files apply will write into, from the gate's report (the files of the classes with a fix apply
    # writes): only they need formatting first (black and isort are idempotent on every other file),
    # which spares formatting all of models/ twice
    report = CliRunner().invoke(app, ["check", "--all", "--format", "json", str(root)])
    assert report.exit_code == 1, report.output
    written_here = ("delegate", "synthesize")
    srt = root / MODELS.parent
    targets = sorted({
        srt / m["file"]
        for m in json.loads(report.stdout)["models"]
        if any(e["fix"] and e["fix"]["kind"] in written_here for e in m["missing"])
    })
    assert len(targets) > 20, "apply --all writes into many model files of the newest release"
    _format(targets)  # the released files are not all formatted: start from what the hooks would make
    formatted = _snapshot(models)
    result = CliRunner().invoke(app, ["apply", "--all", str(root)])
    assert result.exit_code == 1 and "still missing" in result.output, result.output  # the release's needs_code classes
    patched = _snapshot(models)
    changed = sorted(name for name in patched if patched[name] != formatted[name])
    assert set(changed) <= {t.name for t in targets if t.parent == models}, "apply wrote where the report did not say"
    assert len(changed) > 20
    _format([models / name for name in changed])
    again = _snapshot(models)
    moved = [name for name in changed if again[name] != patched[name]]
    assert not moved, f"black or isort rewrote what apply wrote in {moved}"
