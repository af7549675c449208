"""Writes are all or nothing across files, and apply says what it left: issue 24's reproductions on the
bundled fixture tree (eight files apply --all writes, one class it cannot fix), in real git repositories.

A subprocess runs the CLI with `os.replace` (or the staging step) wrapped to send itself a signal at a
chosen file, so an interrupt lands exactly where the test wants it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import committed_copy, flat, git, isolate_git, snapshot

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "fixtures" / "checkout"
MODELS = "python/sglang/srt/models"

# The CLI in a subprocess; when the target path of the Nth rename of a model file is reached, the
# process sends itself a signal (after that rename: "replace", or before the Nth file is staged: "stage").
RUNNER = r"""
import os, signal, sys
where, nth, signame = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from eaglepatch.rewrite import write
count = [0]
def hit():
    count[0] += 1
    if count[0] == nth:
        os.kill(os.getpid(), getattr(signal, signame))
if where == "replace":
    real = os.replace
    def replace(src, dst, *a, **k):
        real(src, dst, *a, **k)
        if str(dst).endswith(".py") and "eaglepatch-tmp" not in str(dst):
            hit()
    os.replace = replace
else:
    real_stage = write._stage
    def stage(edit, target):
        hit()
        return real_stage(edit, target)
    write._stage = stage
from eaglepatch.cli import cli_main
cli_main(sys.argv[4:])
"""


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch)
    return committed_copy(FIXTURE, tmp_path / "repo")


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eaglepatch", *map(str, args)], capture_output=True, text=True, timeout=300)


def interrupted(where: str, nth: int, signame: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUNNER, where, str(nth), signame, *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def applied(tmp_path, monkeypatch) -> dict[str, bytes]:
    """What a clean `apply --all` makes of the fixture tree."""
    isolate_git(monkeypatch)
    root = tmp_path / "reference"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    assert cli("apply", "--all", root).returncode == 1  # written; the needs_code class is left
    return snapshot(root)


def changed_files(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel))


def temporaries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.eaglepatch-tmp"))


# -- a refusal writes nothing ------------------------------------------------------------------------


def test_apply_all_commit_with_a_module_that_does_not_parse_commits_nothing(repo):
    """The issue's first reproduction: it wrote and committed the other files, then exited 2."""
    with open(repo / MODELS / "gemma_like.py", "a", encoding="utf-8") as fh:
        fh.write("\ndef broken(:\n    pass\n")
    head, before = git(repo, "rev-parse", "HEAD"), snapshot(repo)
    result = cli("apply", "--all", "--commit", repo)
    assert result.returncode == 2, result.stderr
    assert "models/gemma_like.py:" in result.stderr and "--exclude models/gemma_like.py" in result.stderr
    assert git(repo, "rev-parse", "HEAD") == head and snapshot(repo) == before
    assert "committed" not in result.stdout


def test_a_failed_rename_puts_back_every_file_already_renamed(repo, monkeypatch):
    import os

    from eaglepatch.errors import EaglepatchError
    from eaglepatch.rewrite import journal, write
    from eaglepatch.rewrite.edits import build_edits
    from eaglepatch.run import analyze
    from eaglepatch.selection import Selection

    analysis = analyze(Selection(repo, all_models=True))
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans, analysis.style)
    edits = [e for e in edits if e.changed]
    assert not errors and len(edits) >= 4
    before = snapshot(repo)
    real, calls = os.replace, []

    def third_fails(src, dst):
        if str(dst).endswith(".py"):
            calls.append(dst)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(write.os, "replace", third_fails)
    with pytest.raises(EaglepatchError, match="No space left on device"):
        write.write_all(edits, analysis.tree.srt)
    monkeypatch.setattr(write.os, "replace", real)
    assert len(calls) > 3  # two renamed, the third refused, then the two put back
    assert snapshot(repo) == before
    assert temporaries(repo) == []
    assert journal.leftover(analysis.tree.srt) is None  # put back whole: nothing for the next run to name


def test_a_refused_commit_puts_back_every_file_and_the_index(repo):
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'policy: review first' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    head, before = git(repo, "rev-parse", "HEAD"), snapshot(repo)
    result = cli("apply", "--all", "--commit", repo)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "policy: review first" in line and "no file was written" in line, line
    assert snapshot(repo) == before
    assert git(repo, "status", "--porcelain") == "" and git(repo, "diff", "--cached") == ""
    assert git(repo, "rev-parse", "HEAD") == head


def test_a_refused_commit_leaves_what_was_staged_before_staged(repo):
    """The index of a file the user had staged changes in is given back as it was, not emptied."""
    kimi = repo / MODELS / "kimi_k25.py"
    kimi.write_text(kimi.read_text(encoding="utf-8") + "\n# staged by hand\n", encoding="utf-8")
    git(repo, "add", str(kimi))
    staged = git(repo, "diff", "--cached")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    assert cli("apply", "--commit", repo).returncode == 2
    assert git(repo, "diff", "--cached") == staged
    assert kimi.read_text(encoding="utf-8").endswith("# staged by hand\n")


# -- signals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signame,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_the_renames_waits_until_every_file_is_written(repo, applied, signame, code):
    result = interrupted("replace", 2, signame, "apply", "--all", repo)
    assert result.returncode == code, result.stderr
    written = changed_files(snapshot(FIXTURE), applied)
    assert len(written) > 2  # every wrapper file of the fixture, and the learned hooks' modules
    assert f"interrupted ({signame}) while writing: wrote all {len(written)} file(s) first" in flat(result.stderr)
    assert snapshot(repo) == applied
    assert temporaries(repo) == []


def test_a_sigint_during_the_renames_with_commit_commits_all_of_them(repo, applied):
    head = git(repo, "rev-parse", "HEAD")
    written = changed_files(snapshot(FIXTURE), applied)
    result = interrupted("replace", 1, "SIGINT", "apply", "--all", "--commit", repo)
    assert result.returncode == 130, result.stderr
    assert f"wrote all {len(written)} file(s) and committed them" in flat(result.stderr)
    assert git(repo, "rev-parse", "HEAD~1") == head and git(repo, "status", "--porcelain") == ""
    assert snapshot(repo) == applied


def test_a_sigint_while_files_are_staged_writes_nothing(repo):
    before = snapshot(repo)
    result = interrupted("stage", 3, "SIGINT", "apply", "--all", "--commit", repo)
    assert result.returncode == 130, result.stderr
    assert "before any file was written: nothing written" in result.stderr
    assert snapshot(repo) == before and temporaries(repo) == []
    assert git(repo, "log", "--format=%s") == "fixture tree\n"


def test_a_run_killed_mid_way_is_named_by_the_next_run(repo, applied):
    """SIGKILL cannot be deferred: the journal is what the next run reads."""
    result = interrupted("replace", 2, "SIGKILL", "apply", "--all", repo)
    assert result.returncode == -signal.SIGKILL
    now = {rel: data for rel, data in snapshot(repo).items() if not rel.endswith(".eaglepatch-tmp")}
    assert len(changed_files(snapshot(FIXTURE), now)) == 2  # a subset, as the issue saw
    total = len(changed_files(snapshot(FIXTURE), applied))
    assert len(temporaries(repo)) == total - 2  # staged, never renamed
    checked = cli("check", "--all", repo)
    assert checked.returncode == 1 and "was stopped before it finished" in checked.stderr  # check names it too
    again = cli("apply", "--all", repo)
    warning = flat(again.stderr)
    assert "an earlier `eaglepatch apply` on this tree" in warning and "was stopped before it finished" in warning
    assert f"2 of its {total} file(s) hold what it wrote" in warning and f"{total - 2} are as they were" in warning
    assert again.returncode == 1  # it finished the work: the needs_code class is what is left
    assert snapshot(repo) == applied and temporaries(repo) == []
    third = cli("check", "--all", repo)
    assert "stopped before it finished" not in third.stderr  # said once


# -- apply tells the truth ----------------------------------------------------------------------------


def test_apply_on_a_class_it_cannot_fix_exits_1_naming_each_gap(repo):
    """The issue's `--model chatglm`: it said "Nothing to do" and exited 0."""
    before = snapshot(repo)
    result = cli("apply", "--model", "qwen_backbone", repo)
    assert result.returncode == 1, result.stderr
    text = flat(result.stdout)
    assert "Nothing to do" not in text
    assert "Nothing eaglepatch can write; 2 required member(s) missing" in text
    for member in ("get_embed_and_head", "set_eagle3_layers_to_capture"):
        assert f"QwenBackboneWrapper (target) lacks {member}" in text
    assert "the inner model (model: Qwen2Model) lacks it" in text
    assert snapshot(repo) == before


def test_apply_all_lists_what_it_left_and_check_agrees(repo):
    import json

    result = cli("apply", "--all", repo)
    assert result.returncode == 1
    data = json.loads(cli("check", "--all", "--format", "json", repo).stdout)
    left = [(m["class"], g["name"]) for m in data["models"] for g in m["missing"] if g["required"]]
    assert left and data["summary"]["fixes"] == 0
    assert f"{len(left)} required member(s) still missing" in flat(result.stdout)
    for cls, member in left:
        assert f"{cls} (target) lacks {member}" in flat(result.stdout)


def test_apply_with_nothing_missing_says_nothing_to_do(repo):
    assert cli("apply", repo).returncode == 0
    again = cli("apply", repo)
    assert again.returncode == 0 and "Nothing to do: no EAGLE-3 member a class requires is missing." in again.stdout


# -- the commit message --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command,changes,subject",
    [
        ("apply", {"models/a.py": {"AForCausalLM": ["get_embed_and_head"]}}, "Add EAGLE-3 hooks to AForCausalLM"),
        ("apply", {"models/a.py": {"A": ["x"]}, "models/b.py": {"B": ["x"], "C": ["y"]}}, "Add EAGLE-3 hooks to 3 model classes"),
        ("apply", {"models/a.py": {"A" * 70: ["x"]}}, "Add EAGLE-3 hooks to 1 model class"),
        ("revert", {"models/a.py": {"Kimi": ["x"]}}, "Remove eaglepatch's hooks from Kimi"),
        ("revert", {f"models/m{i}.py": {f"C{i}": ["x"]} for i in range(85)}, "Remove eaglepatch's hooks from 85 model classes"),
    ],
)
def test_the_commit_subject_fits_72_columns_and_the_body_lists_every_change(command, changes, subject):
    from eaglepatch.rewrite.gitrepo import commit_message

    message = commit_message(command, changes)
    lines = message.splitlines()
    assert lines[0] == subject and len(lines[0]) <= 72 and lines[1] == ""
    body = "\n".join(lines[2:])
    for rel, by_class in changes.items():
        for cls, members in by_class.items():
            assert f"- {cls} ({rel}): {', '.join(members)}" in body
