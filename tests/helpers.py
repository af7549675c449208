"""Helpers shared by the test modules (tests/ is on sys.path through conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest


def isolate_git(monkeypatch, columns: int = 200) -> None:
    """git (subprocess and GitPython alike) sees no user or system config and has a fixed identity;
    rich gets a console wide enough not to wrap names."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "eaglepatch tests")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "tests@example.invalid")
    monkeypatch.setenv("COLUMNS", str(columns))


def git(cwd: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, f"git {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def flat(text: str) -> str:
    """Whitespace folded, so assertions do not depend on where rich wrapped a line."""
    return " ".join(text.split())


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (outside .git and __pycache__), by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git" or "__pycache__" in rel.parts or not path.is_file():
            continue
        out[rel.as_posix()] = path.read_bytes()
    return out


def describe(proc) -> str:
    """A finished `eaglepatch` run, for assertion messages."""
    return (
        f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
        f"--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
        f"--- stderr (tail) ---\n{proc.stderr[-3000:]}"
    )


def json_report(proc) -> dict:
    """The report of a `--format json` run; its exit code is 1 exactly when something is missing."""
    assert proc.returncode in (0, 1), describe(proc)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        pytest.fail(f"stdout is not one JSON document ({exc})\n{describe(proc)}")
    missing = any(m["missing"] for m in data["models"])
    assert proc.returncode == (1 if missing else 0), "exit 1 exactly when something is missing\n" + describe(proc)
    return data


def write_srt_tree(root: Path, files: dict[str, str]) -> Path:
    """A site-packages-shaped folder holding sglang/srt with `files` (paths relative to srt, text dedented)."""
    import textwrap

    srt = root / "sglang" / "srt"
    for package in (root / "sglang", srt, srt / "models"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    for rel, text in files.items():
        path = srt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def invoke(*args):
    """The CLI in this process (typer's runner), every argument a string; an exception other than the
    exit the CLI raises propagates, so a crash is a traceback, not an exit code."""
    from typer.testing import CliRunner

    from eaglepatch.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


# What a toy causal LM's forward needs for its capture hook to work (patcher/plumbing/gate.py): the
# layer choice the hook sets read in the decoder-layer loop, the aux states handed to the logits
# processor. Appended to a class whose hook sets `self.layers_to_capture` (its __init__ sets the default).
CAPTURING_FORWARD = '''
    def forward(self, input_ids, positions, forward_batch):
        hidden_states, aux_hidden_states = input_ids, []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(positions, hidden_states, forward_batch)
        return self.logits_processor(input_ids, hidden_states, None, forward_batch, aux_hidden_states)
'''


def committed_copy(source: Path, root: Path) -> Path:
    """`source` copied to `root` as a git repository with one commit (caches left out): a tree apply may write."""
    import shutil

    shutil.copytree(source, root, ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture tree")
    return root


def checkpoint_copy(tmp_path: Path, source: Path, name: str, **changes: object) -> Path:
    """A copy of a checkpoint folder with `changes` made to its config.json (None deletes a key)."""
    import json
    import shutil

    folder = tmp_path / name
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def parser_verdicts(script: Path, site: Path, entries: list[tuple[list[str], bool]], folder: Path, cwd: Path, timeout: float) -> list[dict]:
    """A release's own parser's verdict on each (argv, serve) entry: `script` (tests/release_parser.py,
    tests/vllm_release_parser.py) run once in a fresh interpreter on `site`, from `cwd`; the lines go
    through a file in `folder`."""
    import json
    import subprocess
    import sys

    spec = folder / "lines.json"
    spec.write_text(json.dumps([{"argv": argv, "serve": serve} for argv, serve in entries]))
    done = subprocess.run([sys.executable, "-I", "-B", str(script), str(site), str(spec)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(verdicts) == len(entries)
    return verdicts
