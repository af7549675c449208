"""Helpers shared by the test modules (tests/ is on sys.path through conftest.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


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
