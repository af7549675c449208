"""Preconditions and messages: each failure is one line `eaglepatch: error: <file>: <what>; <fix>`,
exit 2, and -- proved with a `state()` snapshot -- nothing is touched when it could be known first.

Also the discovery faults that made check and apply disagree (a class under a module-level `if`,
a module symlinked under models/), revert's import removal beside a star import, and printing a
file name that is not UTF-8.
"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import git, isolate_git
from test_reliability import (
    HOOKS,
    INNER,
    INNER_PY,
    SRT,
    WRAPPER,
    WRAPPER_CLASS,
    WRAPPER_PY,
    changes,
    eaglepatch,
    leftovers,
    method_names,
    minimal_tree,
    state,
    subprocess_env,
)

LABEL = f"{SRT}/{WRAPPER}"
ONE_LINE = re.compile(r"^eaglepatch: error: (?P<file>[^:]+(?::\d+)?): (?P<what>[^;]+); (?P<fix>.+)$")


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    isolate_git(monkeypatch, columns=200)


def one_error(result, names: str) -> str:
    """The single stderr line of an exit-2 run, in the `<file>: <what>; <fix>` shape, naming `names`."""
    assert result.exit_code == 2, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got:\n{result.stderr}"
    match = ONE_LINE.match(lines[0])
    assert match, f"not `eaglepatch: error: <file>: <what>; <fix>`: {lines[0]!r}"
    assert names in match.group("file"), f"{names!r} is not the file named in {lines[0]!r}"
    return lines[0]


def repo(root: Path) -> Path:
    minimal_tree(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tree")
    return root


def untouched(tmp_path: Path, run, names: str, *needles: str) -> str:
    """Run, expect one error line naming `names` and holding `needles`, and nothing changed on disk."""
    before = state(tmp_path)
    line = one_error(run(), names)
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    after = state(tmp_path)
    assert after == before, f"changed: {changes(before, after)}"
    assert not leftovers(tmp_path)
    return line


# --------------------------------------------------------------------------- the file lock


def run_cli(cwd: Path, *args, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """`python -m eaglepatch` in a subprocess: a hang becomes a failed test, not a stuck suite."""
    return subprocess.run(
        [sys.executable, "-m", "eaglepatch", *map(str, args)],
        cwd=cwd, env=subprocess_env(COLUMNS="200", **env), capture_output=True, timeout=timeout,
    )


class Completed:
    """A subprocess result shaped like CliRunner's, for `one_error`."""

    def __init__(self, done: subprocess.CompletedProcess):
        self.exit_code = done.returncode
        self.stdout = done.stdout.decode(errors="replace")
        self.stderr = done.stderr.decode(errors="replace")


def test_lock_held_by_another_process_times_out_naming_the_file(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    with open(tree / SRT / WRAPPER, "rb") as holder:  # held for the whole run, as a stuck process would
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        started = time.monotonic()
        try:
            line = untouched(
                tmp_path,
                lambda: Completed(run_cli(tmp_path, "apply", tree, "--model", "wrapper", timeout=60, EAGLEPATCH_LOCK_TIMEOUT="0.3")),
                WRAPPER,
                "locked",
                "0.3 s",
            )
        except subprocess.TimeoutExpired:
            pytest.fail("apply still waited for the lock after 60 s")
        waited = time.monotonic() - started
    assert waited < 30, f"waited {waited:.1f} s for a 0.3 s timeout"
    assert "EAGLEPATCH_LOCK_TIMEOUT" in line
    assert eaglepatch("apply", tree, "--model", "wrapper").exit_code == 0, "once released, the file is written"


# --------------------------------------------------------------------------- --commit, checked before writing


def test_commit_outside_a_git_work_tree_writes_nothing(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    probe = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=tree, capture_output=True)
    assert probe.returncode != 0, "tmp_path is inside a git work tree"
    untouched(tmp_path, lambda: eaglepatch("apply", tree, "--model", "wrapper", "--commit"), str(tree), "git work tree", "--commit")


def test_commit_into_an_ignored_path_says_which_rule_and_writes_nothing(tmp_path):
    root = repo(tmp_path / "repo")
    git(root, "rm", "-q", "--cached", LABEL)
    (root / ".gitignore").write_text("# generated\nsglang/srt/models/wrap*.py\n", encoding="utf-8")
    git(root, "add", ".gitignore")
    git(root, "commit", "-q", "-m", "ignore the wrapper")
    head = git(root, "rev-parse", "HEAD")
    line = untouched(tmp_path, lambda: eaglepatch("apply", root, "--model", "wrapper", "--commit"), WRAPPER, "ignored")
    assert ".gitignore:2:sglang/srt/models/wrap*.py" in line, line
    assert git(root, "rev-parse", "HEAD") == head


def test_commit_during_a_merge_writes_nothing(tmp_path):
    root = repo(tmp_path / "repo")
    (root / "notes.txt").write_text("base\n", encoding="utf-8")
    git(root, "add", "notes.txt")
    git(root, "commit", "-q", "-m", "notes")
    git(root, "checkout", "-q", "-b", "other")
    (root / "notes.txt").write_text("theirs\n", encoding="utf-8")
    git(root, "commit", "-q", "-am", "theirs")
    git(root, "checkout", "-q", "main")
    (root / "notes.txt").write_text("ours\n", encoding="utf-8")
    git(root, "commit", "-q", "-am", "ours")
    assert subprocess.run(["git", "merge", "-q", "other"], cwd=root, capture_output=True).returncode != 0
    untouched(tmp_path, lambda: eaglepatch("apply", root, "--model", "wrapper", "--commit"), str(root), "merge", "--commit")


def test_commit_without_a_git_identity_writes_nothing(tmp_path, monkeypatch):
    root = repo(tmp_path / "repo")
    git(root, "config", "user.useConfigOnly", "true")  # no guessing from the host name
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{role}_NAME", raising=False)
        monkeypatch.delenv(f"GIT_{role}_EMAIL", raising=False)
    monkeypatch.delenv("EMAIL", raising=False)
    untouched(tmp_path, lambda: eaglepatch("apply", root, "--model", "wrapper", "--commit"), str(root), "user.name", "git config")


def test_commit_without_git_installed_writes_nothing(tmp_path):
    """GitPython finds the repository without git, but nothing could commit: said before writing."""
    root = repo(tmp_path / "repo")
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "python").symlink_to(sys.executable)
    env = {"PATH": str(empty), "GIT_PYTHON_GIT_EXECUTABLE": "git"}
    untouched(
        tmp_path,
        lambda: Completed(run_cli(tmp_path, "apply", root, "--model", "wrapper", "--commit", **env)),
        str(root),
        "git cannot be run",
        "--commit",
    )


def test_commit_refused_by_a_hook_keeps_gits_reason(tmp_path):
    """A hook cannot be asked first: the files are put back, the index is as it was, and the line says
    what the hook said (before, the files stayed written and uncommitted)."""
    root = repo(tmp_path / "repo")
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'policy: no Friday commits' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    before = (root / SRT / WRAPPER).read_bytes()
    head = git(root, "rev-parse", "HEAD")
    result = eaglepatch("apply", root, "--model", "wrapper", "--commit")
    line = one_error(result, str(root))
    assert "policy: no Friday commits" in line and "no file was written" in line, line
    assert (root / SRT / WRAPPER).read_bytes() == before
    assert git(root, "status", "--porcelain") == "" and git(root, "rev-parse", "HEAD") == head


def test_commit_with_one_file_refused_writes_none(tmp_path):
    """With --commit every file is checked first: one that cannot be written stops them all."""
    root = repo(tmp_path / "repo")
    models = root / SRT / "models"
    outside = tmp_path / "elsewhere" / "second.py"
    outside.parent.mkdir()
    outside.write_text(WRAPPER_PY.replace(WRAPPER_CLASS, "SecondForConditionalGeneration"), encoding="utf-8")
    (models / "second.py").symlink_to(outside)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a linked wrapper")
    untouched(tmp_path, lambda: eaglepatch("apply", root, "--all", "--commit"), "models/second.py", "outside")

    # without --commit too: writes are all or nothing
    untouched(tmp_path, lambda: eaglepatch("apply", root, "--all"), "models/second.py", "no file was written")


# --------------------------------------------------------------------------- encodings


def test_unknown_source_encoding_is_one_line(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    (tree / SRT / WRAPPER).write_bytes(b"# -*- coding: klingon -*-\n" + WRAPPER_PY.encode())
    for command in ("check", "diff", "apply"):
        untouched(tmp_path, lambda command=command: eaglepatch(command, tree, "--model", "wrapper"), f"{WRAPPER}:1", "klingon", "coding line")


def test_code_the_file_encoding_cannot_hold_is_refused(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    (tree / SRT / INNER).write_text(
        INNER_PY.replace("def set_eagle3_layers_to_capture(self, layer_ids=None):", 'def set_eagle3_layers_to_capture(self, layer_ids=None, tag="\u2014"):'),
        encoding="utf-8",
    )
    (tree / SRT / WRAPPER).write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + WRAPPER_PY).encode("latin-1"))
    for command in ("diff", "apply"):
        untouched(tmp_path, lambda command=command: eaglepatch(command, tree, "--model", "wrapper"), WRAPPER, "latin-1", "UTF-8")


# --------------------------------------------------------------------------- check and apply agree on what is a wrapper


IF_WRAPPER = '''\
"""A wrapper defined under a module-level switch."""

import os

from sglang.srt.models.inner import InnerForCausalLM

if os.environ.get("NO_SUCH_SWITCH") is None:

    class WrapperForConditionalGeneration:
        def __init__(self, config):
            self.config = config
            self.language_model = InnerForCausalLM(config)

        def forward(self, input_ids):
            return self.language_model.forward(input_ids)

    EntryClass = [WrapperForConditionalGeneration]
else:
    EntryClass = []
'''


@pytest.mark.parametrize("selector", ["--model=wrapper", "--all"])
def test_class_under_a_module_level_if_is_checked_and_patched(tmp_path, selector):
    root = repo(tmp_path / "repo")
    path = root / SRT / WRAPPER
    path.write_text(IF_WRAPPER, encoding="utf-8")
    original = path.read_bytes()
    check = eaglepatch("check", root, selector, "--format", "json")
    assert check.exit_code == 1, check.output
    (model,) = json.loads(check.stdout)["models"]
    assert model["class"] == WRAPPER_CLASS and {m["name"] for m in model["missing"]} == set(HOOKS)

    applied = eaglepatch("apply", root, selector)
    assert applied.exit_code == 0 and "Nothing to do" not in applied.output, applied.output
    assert set(HOOKS) <= set(method_names_under_if(path.read_bytes()))
    assert eaglepatch("check", root, selector).exit_code == 0
    assert eaglepatch("revert", root, selector).exit_code == 0
    assert path.read_bytes() == original


def method_names_under_if(data: bytes) -> list[str]:
    import ast

    for node in ast.walk(ast.parse(data)):
        if isinstance(node, ast.ClassDef) and node.name == WRAPPER_CLASS:
            return [n.name for n in node.body if isinstance(n, ast.FunctionDef)]
    raise AssertionError("class not found")


def test_symlinked_module_is_counted_once(tmp_path):
    root = repo(tmp_path / "repo")
    models = root / SRT / "models"
    (models / "alias.py").symlink_to("wrapper.py")
    (models / "sub").mkdir()
    (models / "sub" / "again.py").symlink_to("../wrapper.py")
    check = eaglepatch("check", root, "--all", "--format", "json")
    assert check.exit_code == 1, check.output
    found = [(m["class"], m["file"]) for m in json.loads(check.stdout)["models"]]
    assert found == [(WRAPPER_CLASS, WRAPPER)], found

    original = (models / "wrapper.py").read_bytes()
    applied = eaglepatch("apply", root, "--all")
    assert applied.exit_code == 0, applied.output
    assert applied.stdout.count("diff --git") == 1
    assert eaglepatch("check", root, "--all").exit_code == 0
    reverted = eaglepatch("revert", root, "--all")
    assert reverted.exit_code == 0, reverted.output
    assert (models / "wrapper.py").read_bytes() == original
    assert (models / "alias.py").is_symlink()


# --------------------------------------------------------------------------- revert and star imports


INNER_TYPED = INNER_PY.replace('"""The language model the wrapper holds."""\n', '"""The language model the wrapper holds."""\n\nfrom typing import List, Optional\n').replace(
    "def set_eagle3_layers_to_capture(self, layer_ids=None):", "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):"
)


def test_revert_keeps_imports_still_used_beside_a_star_import(tmp_path):
    root = repo(tmp_path / "repo")
    (root / SRT / INNER).write_text(INNER_TYPED, encoding="utf-8")
    path = root / SRT / WRAPPER
    path.write_text(WRAPPER_PY.replace("InnerForCausalLM\n", "InnerForCausalLM\nfrom os.path import *\n", 1), encoding="utf-8")
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    assert b"from typing import List, Optional" in path.read_bytes()
    # code written after apply comes to use one of the names eaglepatch imported, another only in a string
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('\n\ndef first(ids: Optional[list]) -> "List[int]":\n    return list(ids or [])\n\n\ndef local():\n    Optional = None\n    return Optional\n')
    result = eaglepatch("revert", root, "--model", "wrapper")
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert b"from typing import List, Optional\n" in data, data.decode()
    assert not set(HOOKS) & set(method_names(data))
    compile(data, WRAPPER, "exec")


def test_revert_still_removes_imports_nothing_uses_beside_a_star_import(tmp_path):
    root = repo(tmp_path / "repo")
    (root / SRT / INNER).write_text(INNER_TYPED, encoding="utf-8")
    path = root / SRT / WRAPPER
    path.write_text(WRAPPER_PY.replace("InnerForCausalLM\n", "InnerForCausalLM\nfrom os.path import *\n", 1), encoding="utf-8")
    original = path.read_bytes()
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n\ndef local():\n    Optional = 1  # a local of the same name is no use of the import\n    return Optional\n")
    expected = original + b"\n\ndef local():\n    Optional = 1  # a local of the same name is no use of the import\n    return Optional\n"
    assert eaglepatch("revert", root, "--model", "wrapper").exit_code == 0
    assert path.read_bytes() == expected


def test_revert_removes_an_import_an_in_tree_star_import_provides(tmp_path):
    """As in sglang's deepseek_janus_pro: the file reads `List` through a star import of a module in
    the tree, apply imports it, revert takes it out again: the original bytes come back."""
    root = repo(tmp_path / "repo")
    (root / SRT / INNER).write_text(INNER_TYPED, encoding="utf-8")
    (root / SRT / "models" / "shared.py").write_text("from typing import List, Optional\n", encoding="utf-8")
    path = root / SRT / WRAPPER
    path.write_text(
        WRAPPER_PY.replace("InnerForCausalLM\n", "InnerForCausalLM\nfrom sglang.srt.models.shared import *\n", 1)
        + "\n\ndef ids(x: Optional[int]) -> List[int]:\n    return [x]\n",
        encoding="utf-8",
    )
    original = path.read_bytes()
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    patched = path.read_bytes()
    assert b"def set_eagle3_layers_to_capture(" in patched
    # whichever spelling apply chose for typing's names (the star import binds them too), the annotation's
    # names are bound by an import from typing
    module = ast.parse(patched)
    from_typing = {a.asname or a.name: a.name for n in module.body if isinstance(n, ast.ImportFrom) and n.module == "typing" for a in n.names}
    method = next(n for c in module.body if isinstance(c, ast.ClassDef) for n in c.body if getattr(n, "name", "") == "set_eagle3_layers_to_capture")
    used = {n.id for n in ast.walk(method.args.args[1].annotation) if isinstance(n, ast.Name)}
    assert {from_typing.get(u) for u in used - {"int"}} == {"Optional", "List"}, (used, from_typing)
    assert eaglepatch("revert", root, "--model", "wrapper").exit_code == 0
    assert path.read_bytes() == original


# --------------------------------------------------------------------------- file names that are not UTF-8


def test_file_name_that_is_not_utf8_under_a_strict_utf8_stdout(tmp_path):
    root = repo(tmp_path / "repo")
    models = os.fsencode(root / SRT / "models")
    os.rename(models + b"/wrapper.py", models + b"/caf\xe9.py")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "rename")
    strict_utf8 = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}

    def run(*args):
        return run_cli(tmp_path, *args, **strict_utf8)

    env = subprocess_env(**strict_utf8)
    strict = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdout.errors)"], env=env, capture_output=True, text=True)
    assert strict.stdout.strip() == "strict"

    diff = run("diff", root, "--all")
    assert diff.returncode == 1, diff.stderr.decode(errors="replace")
    assert diff.stdout.startswith(b'diff --git "a/sglang/srt/models/caf\\351.py" "b/sglang/srt/models/caf\\351.py"\n'), diff.stdout[:200]
    check = subprocess.run(["git", "apply", "--check", "-"], cwd=root, input=diff.stdout, capture_output=True)
    assert check.returncode == 0, check.stderr.decode(errors="replace")

    for command, code in (("check", 1), ("apply", 0), ("revert", 0)):
        done = run(command, root, "--all")
        assert done.returncode == code, (command, done.stderr.decode(errors="replace"))
        assert b"internal error" not in done.stderr
        assert b"caf\xe9.py" in done.stdout, (command, done.stdout[-500:])
    assert git(root, "status", "--porcelain") == ""
