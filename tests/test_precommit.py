"""The pre-commit hooks in .pre-commit-hooks.yaml, run by the real pre-commit tool.

pre-commit builds the hook's own environment from this repository (pip, from PyPI), so this
is an integration test; the environment is cached in a per-session PRE_COMMIT_HOME.

The hooks run as `pre-commit try-repo` runs them (a configuration naming this repository at HEAD, or,
with uncommitted changes, at a commit of them in a clone), but through `pre-commit run` with that
configuration: `try-repo` keeps its environments in a store of its own that it deletes on exit, so
each call built the hook's environment again (about ten seconds a call).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "checkout"
KIMI = "python/sglang/srt/models/kimi_k25.py"

# One worker runs them all (pytest-xdist `--dist loadgroup`, the group "pre-commit": tests/conftest.py's
# MODULE_GROUPS): the hook environment pre-commit builds (pip, from the package index) is cached in the
# session's PRE_COMMIT_HOME, so it is built once, not once a worker.
pytestmark = pytest.mark.integration


def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def _hooks_repo(tmp: Path) -> tuple[str, str]:
    """(repository, rev) the hooks are installed from, as `pre-commit try-repo REPO` picks them: this
    repository at HEAD; with uncommitted changes to tracked files, a clone of it with those changes (staged
    or not) committed on top of HEAD."""
    head = _git(REPO, "rev-parse", "HEAD").strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode == 0:
        return str(REPO), head
    shadow = tmp / "shadow-repo"
    _git(tmp, "clone", "-q", str(REPO), str(shadow))
    _git(shadow, "checkout", "-q", head, "-b", "_pc_tmp")
    # git run in REPO, writing the shadow's index and objects
    env = dict(os.environ, GIT_INDEX_FILE=str(shadow / ".git" / "index"), GIT_OBJECT_DIRECTORY=str(shadow / ".git" / "objects"))
    staged = _git(REPO, "diff", "--staged", "--name-only", "-z").split("\0")
    if any(staged):
        subprocess.run(["git", "add", "--", *filter(None, staged)], cwd=REPO, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "-u"], cwd=REPO, env=env, check=True, capture_output=True)
    _git(shadow, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", "uncommitted changes")
    return str(shadow), _git(shadow, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="session")
def hooks_config(tmp_path_factory) -> Path:
    """The configuration `pre-commit try-repo REPO HOOK` writes for itself, naming both hooks."""
    tmp = tmp_path_factory.mktemp("pre-commit-config")
    repo, rev = _hooks_repo(tmp)
    config = tmp / ".pre-commit-config.yaml"
    config.write_text(f"repos:\n-   repo: {repo}\n    rev: {rev}\n    hooks:\n    -   id: eaglepatch-check\n    -   id: eaglepatch-apply\n")
    return config


@pytest.fixture
def fork(tmp_path) -> Path:
    """A fork of SGLang in a fresh git repository, with the fixture tree committed."""
    root = tmp_path / "fork"
    shutil.copytree(FIXTURE, root, symlinks=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "fork")
    return root


def run_hook(fork: Path, home: Path, config: Path, hook: str, *files: str) -> subprocess.CompletedProcess:
    """What `pre-commit try-repo REPO HOOK --files FILES` runs, in `fork`; the environment kept in `home`."""
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), NO_COLOR="1")
    selection = ["--files", *files] if files else ["--all-files"]
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--config", str(config), hook, *selection],
        cwd=fork, env=env, capture_output=True, text=True, timeout=1200,
    )


def test_check_hook_fails_on_a_broken_wrapper_and_passes_once_fixed(fork, pre_commit_home, hooks_config):
    before = (fork / KIMI).read_bytes()
    result = run_hook(fork, pre_commit_home, hooks_config, "eaglepatch-check", KIMI)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Failed" in output and "eaglepatch check" in output
    for name in ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"):
        assert name in output
    assert (fork / KIMI).read_bytes() == before  # check never writes

    fixed = subprocess.run([sys.executable, "-m", "eaglepatch", "apply", str(fork)], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    result = run_hook(fork, pre_commit_home, hooks_config, "eaglepatch-check", KIMI)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


def test_check_hook_skips_commits_that_touch_no_sglang_code(fork, pre_commit_home, hooks_config):
    (fork / "README.md").write_text("notes\n")
    _git(fork, "add", "README.md")
    result = run_hook(fork, pre_commit_home, hooks_config, "eaglepatch-check", "README.md")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no files to check" in result.stdout.lower() or "Skipped" in result.stdout


def test_apply_hook_writes_the_delegations(fork, pre_commit_home, hooks_config):
    result = run_hook(fork, pre_commit_home, hooks_config, "eaglepatch-apply", KIMI)
    # pre-commit fails a hook that modified files, so the user can review and stage them
    assert result.returncode == 1, result.stdout + result.stderr
    text = (fork / KIMI).read_text()
    assert text.count("def get_embed_and_head(") == 1
    check = subprocess.run([sys.executable, "-m", "eaglepatch", "check", str(fork)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
