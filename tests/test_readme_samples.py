"""Docs that cannot drift: the README's sample outputs are what eaglepatch prints on the bundled
fixture tree (`tools/readme_samples.py`), and `--help` names values by what they are."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("readme_samples", REPO_ROOT / "tools" / "readme_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_samples_are_what_eaglepatch_prints(capsys):
    """If this fails, run `make readme` (python tools/readme_samples.py --write) and commit README.md."""
    code = load_generator().main(["--check"])
    assert code == 0, capsys.readouterr().out


def test_generator_rewrites_only_the_sample_blocks(tmp_path, capsys, monkeypatch):
    """--check names a stale block and exits 1; --write replaces block bodies and nothing else
    (the commands themselves are stubbed: the test above runs them)."""
    generator = load_generator()
    monkeypatch.setattr(generator, "render", lambda name, demo, env: f"```text\n{name} output\n```\n")
    configs = []
    monkeypatch.setattr(generator, "verify_config", lambda body, demo, env: configs.append(body))
    blocks = "".join(f"<!-- sample: {name} -->\nold {name}\n<!-- /sample -->\nprose {name}\n" for name in generator.SAMPLES)
    config = "<!-- sample: config -->\n```toml\n[tool.eaglepatch]\n```\n<!-- /sample -->\n"
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n{blocks}{config}end\n", encoding="utf-8")
    assert generator.main(["--check", "--readme", str(readme)]) == 1
    assert "+check output" in capsys.readouterr().out
    assert generator.main(["--write", "--readme", str(readme)]) == 0
    wanted = "".join(
        f"<!-- sample: {name} -->\n```text\n{name} output\n```\n<!-- /sample -->\nprose {name}\n" for name in generator.SAMPLES
    )
    assert readme.read_text(encoding="utf-8") == f"# title\n{wanted}{config}end\n"
    assert generator.main(["--check", "--readme", str(readme)]) == 0
    assert configs == ["```toml\n[tool.eaglepatch]\n```\n"] * 3


def test_every_readme_sample_block_is_known():
    generator = load_generator()
    names = re.findall(r"<!-- sample: ([\w-]+) -->", (REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert sorted(names) == sorted([*generator.SAMPLES, *generator.CHECKED])


@pytest.mark.parametrize("command", ["check", "diff", "apply", "revert", "explain"])
def test_help_names_values_not_python_types(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    options = result.stdout.split("Options:", 1)[1]
    assert not re.search(r"<(list\[|str>|path>|int>)", options), options
    assert "--python PYTHON " in options
    assert "--model MODULE[:CLASS] " in options
    if command in ("check", "diff", "apply"):
        assert "--consumer GLOB " in options
        assert "--ignore MEMBER " in options
    arguments = result.stdout.split("Arguments:", 1)[1].split("Options:", 1)[0]
    assert re.search(r"^\s*PATH\b", arguments, re.M), arguments
    if command == "explain":
        assert re.search(r"^\s*MEMBER\b", arguments, re.M), arguments
