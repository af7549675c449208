"""Bad input and faults: one clear error line and exit 2, nothing touched; atomic, race-safe writes.

Every test builds a small SGLang-shaped tree of its own (``minimal_tree``): one inner model,
one wrapper holding it, one EAGLE consumer calling two hooks on the target model.  Before and
after each failing run the whole temporary folder is snapshotted (bytes, mode, owner, symlink
targets), so "nothing touched" means exactly that.

Permission tests cannot run as root (permission bits do not stop root), so they run the CLI
as the unprivileged ``nobody`` user in a subprocess, on a tree under a world-traversable
folder in /tmp.  Fault tests SIGKILL a real writer process and race real ``apply`` processes.
"""

from __future__ import annotations

import ast
import fnmatch
import grp
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import CAPTURING_FORWARD, git, isolate_git
from typer.testing import CliRunner

from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNNER = CliRunner()

SRT = "sglang/srt"
WRAPPER = "models/wrapper.py"  # as eaglepatch names files: relative to srt
INNER = "models/inner.py"
WORKER = "speculative/eagle_worker.py"
WRAPPER_CLASS = "WrapperForConditionalGeneration"
HOOKS = ("get_embed_and_head", "set_eagle3_layers_to_capture")
TEMP_GLOB = ".wrapper.py.*.eaglepatch-tmp"
MIB = 1024 * 1024

INNER_PY = '''\
"""The language model the wrapper holds."""


class InnerForCausalLM:
    def __init__(self, config):
        self.config = config
        self.layers_to_capture = []

    def get_embed_and_head(self):
        return ("embed", "head")

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.layers_to_capture = list(layer_ids or [])
''' + CAPTURING_FORWARD

WRAPPER_PY = '''\
"""A multimodal wrapper that forwards none of the EAGLE-3 hooks."""

from sglang.srt.models.inner import InnerForCausalLM


class WrapperForConditionalGeneration:
    def __init__(self, config):
        self.config = config
        self.language_model = InnerForCausalLM(config)

    def forward(self, input_ids):
        return self.language_model.forward(input_ids)


EntryClass = [WrapperForConditionalGeneration]
'''

WORKER_PY = '''\
"""EAGLE worker: wires the draft model to the target model."""


class EAGLEWorker:
    def __init__(self, target_worker):
        self.target_worker = target_worker

    def init_eagle3(self):
        embed, head = self.target_worker.model_runner.model.get_embed_and_head()
        self.target_worker.model_runner.model.set_eagle3_layers_to_capture([1, 2])
        return embed, head
'''

# A second consumer of the same hooks: the protocol survives when eagle_worker.py is skipped.
UTILS_PY = '''\
"""EAGLE helpers."""


def share_eagle_embed_and_head(target_model, draft_model):
    target_model.set_eagle3_layers_to_capture(None)
    draft_model.set_embed_and_head(*target_model.get_embed_and_head())
'''


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    """git (subprocess and GitPython alike) sees no user or system config, and a fixed identity."""
    isolate_git(monkeypatch, columns=200)


def minimal_tree(root: Path, *, utils: bool = False) -> Path:
    """``root/sglang/srt/...``: inner model, wrapper, EAGLE consumer (and optionally a second one)."""
    srt = root / SRT
    for folder in ("", "models", "speculative"):
        (srt / folder).mkdir(parents=True, exist_ok=True)
        (srt / folder / "__init__.py").write_bytes(b"")
    (root / "sglang" / "__init__.py").write_bytes(b"")
    (srt / INNER).write_text(INNER_PY, encoding="utf-8")
    (srt / WRAPPER).write_text(WRAPPER_PY, encoding="utf-8")
    (srt / WORKER).write_text(WORKER_PY, encoding="utf-8")
    if utils:
        (srt / "speculative" / "eagle_utils.py").write_text(UTILS_PY, encoding="utf-8")
    return root


def state(root: Path) -> dict[str, tuple]:
    """Everything under root, symlinks not followed: kind, mode, owner, and bytes or link target.

    `.git` is left out (git refreshes its index on `status`); git tests check git state themselves.
    """
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                content = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                content = ("file", path.read_bytes())
            else:
                content = ("dir",)
            out[rel] = (*content, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    return out


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two `state` snapshots, for readable assertion messages."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def eaglepatch(*args) -> object:
    """The CLI in-process; an unexpected exception is re-raised, not read as an exit code."""
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def error_line(result) -> str:
    """The one stderr line of an exit-2 run."""
    assert result.exit_code == 2, f"exit {result.exit_code}, expected 2\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one error line on stderr, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("eaglepatch: error: "), lines[0]
    return lines[0]


def assert_bad_input(tmp_path: Path, args: list, *needles: str, commands=("check", "diff", "apply")) -> None:
    """Each command exits 2 with one line containing every needle, and leaves tmp_path as it was."""
    before = state(tmp_path)
    for command in commands:
        line = error_line(eaglepatch(command, *args))
        for needle in needles:
            assert needle in line, f"{command}: {needle!r} not in {line!r}"
        after = state(tmp_path)
        assert after == before, f"{command} changed {changes(before, after)}"


def patched_bytes(root: Path) -> bytes:
    """What `apply` writes into the wrapper, computed without writing."""
    from eaglepatch.rewrite.edits import build_edits
    from eaglepatch.run import analyze

    analysis = analyze(root, ["wrapper"])
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    assert not errors
    (edit,) = [e for e in edits if e.changed]
    return edit.updated


def method_names(data: bytes, cls: str = WRAPPER_CLASS) -> list[str]:
    """Methods a class body defines, duplicates kept."""
    for node in ast.parse(data).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    raise AssertionError(f"class {cls} not found")


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def leftovers(root: Path) -> list[Path]:
    return sorted(root.rglob("*.eaglepatch-tmp"))


# --------------------------------------------------------------------------- PATH and --model


def test_path_missing(tmp_path):
    minimal_tree(tmp_path / "tree")
    missing = tmp_path / "no-such-folder"
    assert_bad_input(tmp_path, [missing, "--model", "wrapper"], f"{missing}:", "does not exist")


def test_path_is_not_a_folder(tmp_path):
    minimal_tree(tmp_path / "tree")
    target = tmp_path / "tree" / SRT / WRAPPER
    assert_bad_input(tmp_path, [target, "--model", "wrapper"], f"{target}:", "not a folder")


@pytest.mark.parametrize("shape", ["empty", "sglang-without-srt", "srt-without-models"])
def test_path_without_sglang_srt(tmp_path, shape):
    minimal_tree(tmp_path / "tree")
    folder = tmp_path / "given"
    folder.mkdir()
    if shape == "sglang-without-srt":
        (folder / "sglang").mkdir()
        (folder / "sglang" / "__init__.py").write_bytes(b"")
    elif shape == "srt-without-models":
        (folder / "sglang" / "srt").mkdir(parents=True)
        (folder / "sglang" / "srt" / "__init__.py").write_bytes(b"")
    assert_bad_input(tmp_path, [folder, "--model", "wrapper"], f"{folder}:", "sglang/srt")


def test_model_names_no_module(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    assert_bad_input(tmp_path, [tree, "--model", "no_such_model"], "models/no_such_model.py:", "no such model module")


def test_model_names_no_class(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    assert_bad_input(tmp_path, [tree, "--model", "wrapper:NoSuchClass"], f"{WRAPPER}:", "NoSuchClass", WRAPPER_CLASS)


# --------------------------------------------------------------------------- wrapper and inner model


def test_wrapper_without_inner_model_is_a_finding_not_an_error(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    path = tree / SRT / WRAPPER
    path.write_text(WRAPPER_PY.replace("InnerForCausalLM(config)", "None"), encoding="utf-8")
    before = state(tmp_path)
    result = CliRunner().invoke(app, ["check", str(tree), "--model", "wrapper", "--format", "json"])
    assert result.exit_code == 1, result.output
    (model,) = json.loads(result.stdout)["models"]
    assert (model["class"], model["status"], model["inner"]) == (WRAPPER_CLASS, "needs_code", [])
    assert {m["name"] for m in model["missing"]} == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert state(tmp_path) == before


def test_empty_wrapper_file(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    (tree / SRT / WRAPPER).write_bytes(b"")
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WRAPPER}:", "defines no class")


def test_binary_wrapper_file(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    (tree / SRT / WRAPPER).write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WRAPPER}:", "binary")


def test_wrapper_not_utf8(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    text = WRAPPER_PY.replace("    def forward", "    # caf\xe9 au lait\n    def forward")
    line = text.splitlines().index("    # caf\xe9 au lait") + 1
    (tree / SRT / WRAPPER).write_bytes(text.encode("latin-1"))
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WRAPPER}:{line}:", "UTF-8")


def test_huge_wrapper_file(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    filler = (b"# " + b"x" * 97 + b"\n") * (25 * MIB // 100)
    (tree / SRT / WRAPPER).write_bytes(WRAPPER_PY.encode() + filler)
    assert (tree / SRT / WRAPPER).stat().st_size >= 25 * MIB
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WRAPPER}:", "25 MiB")


def test_syntax_error_in_wrapper(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    text = WRAPPER_PY.replace("    def forward(self, input_ids):", "    def forward(self, input_ids:")
    line = text.splitlines().index("    def forward(self, input_ids:") + 1
    (tree / SRT / WRAPPER).write_text(text, encoding="utf-8")
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WRAPPER}:{line}:", "not valid Python")


def test_syntax_error_in_inner_file(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    text = INNER_PY.replace("        return (\"embed\", \"head\")", "        return (\"embed\", \"head\"")
    line = text.splitlines().index('        return ("embed", "head"') + 1
    (tree / SRT / INNER).write_text(text, encoding="utf-8")
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{INNER}:", "not valid Python")
    # CPython places an unclosed bracket at its opening line
    assert f"{INNER}:{line}:" in error_line(eaglepatch("check", tree, "--model", "wrapper"))


def _break_inner(tree: Path, fault: str) -> str:
    """Make the inner class unreadable or unresolvable; returns the file the error must name."""
    srt = tree / SRT
    if fault == "module-missing":
        text = WRAPPER_PY.replace("sglang.srt.models.inner import", "sglang.srt.models.gone import")
        (srt / WRAPPER).write_text(text, encoding="utf-8")
        return WRAPPER
    if fault == "module-missing-relative":
        text = WRAPPER_PY.replace("from sglang.srt.models.inner import", "from .gone import")
        (srt / WRAPPER).write_text(text, encoding="utf-8")
        return WRAPPER
    if fault == "class-missing":
        (srt / INNER).write_text(INNER_PY.replace("class InnerForCausalLM:", "class OtherForCausalLM:"), encoding="utf-8")
        return WRAPPER
    if fault == "not-utf8":
        (srt / INNER).write_bytes(b"# caf\xe9\n" + INNER_PY.encode())
        return INNER
    if fault == "binary":
        (srt / INNER).write_bytes(b"\x00\x01\x02" * 100)
        return INNER
    if fault == "huge":
        (srt / INNER).write_bytes(INNER_PY.encode() + (b"#" * 99 + b"\n") * (25 * MIB // 100))
        return INNER
    raise AssertionError(fault)


@pytest.mark.parametrize(
    "fault",
    [
        f
        for f in ("module-missing", "module-missing-relative", "class-missing", "not-utf8", "binary", "huge")
    ],
)
def test_inner_class_cannot_be_resolved(tmp_path, fault):
    tree = minimal_tree(tmp_path / "tree")
    named = _break_inner(tree, fault)
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{named}:")


# --------------------------------------------------------------------------- consumers


def _break_consumer(tree: Path, fault: str) -> None:
    path = tree / SRT / WORKER
    if fault == "syntax":  # in the very function that uses the model, so no slice of it parses
        path.write_text(WORKER_PY.replace("get_embed_and_head()", "get_embed_and_head("), encoding="utf-8")
    elif fault == "not-utf8":
        path.write_bytes(WORKER_PY.encode().replace(b"wires", b"c\xe2bles"))
    elif fault == "binary":
        path.write_bytes(WORKER_PY.encode() + b"\x00\x00\x00")
    elif fault == "huge":
        path.write_bytes(WORKER_PY.encode() + (b"#" * 99 + b"\n") * (25 * MIB // 100))
    else:
        raise AssertionError(fault)


CONSUMER_FAULTS = ["syntax", "not-utf8", "binary", "huge"]


@pytest.mark.parametrize("fault", CONSUMER_FAULTS)
def test_only_consumer_unreadable_exits_2_naming_it(tmp_path, fault):
    tree = minimal_tree(tmp_path / "tree")
    _break_consumer(tree, fault)
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WORKER}")


@pytest.mark.parametrize("fault", CONSUMER_FAULTS)
def test_only_consumer_unreadable_says_how_to_leave_it_out(tmp_path, fault):
    tree = minimal_tree(tmp_path / "tree")
    _break_consumer(tree, fault)
    assert_bad_input(tmp_path, [tree, "--model", "wrapper"], f"{WORKER}", f"--exclude {WORKER}")


@pytest.mark.parametrize("fault", CONSUMER_FAULTS)
@pytest.mark.parametrize("command", ["check", "diff", "apply"])
def test_an_unreadable_consumer_stops_every_command(tmp_path, fault, command):
    """A second consumer still holds every hook, yet the gate does not pass around the first: the protocol
    read without it may be smaller than the tree's (it once dropped 83 required gaps of 0.5.23)."""
    tree = minimal_tree(tmp_path / "tree", utils=True)
    _break_consumer(tree, fault)
    before = state(tmp_path)
    line = error_line(eaglepatch(command, tree, "--model", "wrapper"))
    assert line.startswith(f"eaglepatch: error: {WORKER}:") and f"--exclude {WORKER}" in line, line
    assert state(tmp_path) == before


@pytest.mark.parametrize("fault", CONSUMER_FAULTS)
@pytest.mark.parametrize("command,code", [("check", 1), ("diff", 1), ("apply", 0)])
def test_an_excluded_consumer_is_not_read_and_is_named(tmp_path, fault, command, code):
    tree = minimal_tree(tmp_path / "tree", utils=True)
    _break_consumer(tree, fault)
    consumer = (tree / SRT / WORKER).read_bytes()
    result = eaglepatch(command, tree, "--model", "wrapper", "--exclude", WORKER)
    assert result.exit_code == code, result.output
    assert (tree / SRT / WORKER).read_bytes() == consumer
    if command == "apply":
        assert set(HOOKS) <= set(method_names((tree / SRT / WRAPPER).read_bytes()))
    warnings = [line for line in result.output.splitlines() if "left out by --exclude" in line]
    assert warnings and WORKER in warnings[0], result.output


def test_exclude_in_pyproject_leaves_a_consumer_out(tmp_path):
    tree = minimal_tree(tmp_path / "tree", utils=True)
    _break_consumer(tree, "syntax")
    (tree / "pyproject.toml").write_text(f'[tool.eaglepatch]\nexclude = ["{WORKER}"]\n', encoding="utf-8")
    (tree / ".git").mkdir()  # the settings search stops at the work tree root
    assert eaglepatch("check", tree, "--model", "wrapper").exit_code == 1


def test_an_exclude_that_names_no_file_is_an_error(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    line = error_line(eaglepatch("check", tree, "--model", "wrapper", "--exclude", "speculative/gone.py"))
    assert "--exclude" in line and "speculative/gone.py" in line and "names no file" in line, line


def test_syntax_error_elsewhere_in_a_consumer_stops_the_gate(tmp_path):
    """Even a function that uses no model: the module does not import, and the slices read around the
    error are no reading of the file."""
    tree = minimal_tree(tmp_path / "tree")
    with open(tree / SRT / WORKER, "a", encoding="utf-8") as fh:
        fh.write("\n    def broken(self:\n        pass\n")
    line_no = (tree / SRT / WORKER).read_text(encoding="utf-8").splitlines().index("    def broken(self:") + 1
    for command in ("check", "diff", "apply"):
        assert f"{WORKER}:{line_no}: is not valid Python" in error_line(eaglepatch(command, tree, "--model", "wrapper"))
    assert WRAPPER_CLASS not in str(method_names((tree / SRT / WRAPPER).read_bytes()))  # nothing written


def test_the_parser_s_warnings_about_the_code_read_are_not_printed(tmp_path):
    """A consumer holding `"\\d"` (an invalid escape: a SyntaxWarning on Python 3.12+, printed by
    default; a DeprecationWarning before): CPython's parser warns, as `<unknown>:3`, about a file that is
    not eaglepatch's.  Forced on here, so that this interpreter would print it."""
    tree = minimal_tree(tmp_path / "tree")
    with open(tree / SRT / WORKER, "a", encoding="utf-8") as fh:
        fh.write('\n\ndef layers_of(target_model):\n    pattern = "\\d+"\n    return target_model.get_embed_and_head(), pattern\n')
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-W", "always::SyntaxWarning", "-m", "eaglepatch",
         "check", str(tree), "--model", "wrapper"],
        capture_output=True, text=True, env=subprocess_env(EAGLEPATCH_NO_CACHE="1"), timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "get_embed_and_head" in done.stdout
    assert "escape" not in done.stderr and "Warning" not in done.stderr, done.stderr
    probe = 'import ast, warnings\nwarnings.simplefilter("always")\nast.parse(open(__import__("sys").argv[1]).read())\n'
    bare = subprocess.run([sys.executable, "-c", probe, str(tree / SRT / WORKER)], capture_output=True, text=True, timeout=60)
    assert "invalid escape sequence" in bare.stderr  # the parser does warn about this file


# --------------------------------------------------------------------------- symlinks


@pytest.mark.parametrize("link", ["absolute", "relative"])
def test_wrapper_symlink_outside_the_tree_is_refused(tmp_path, link):
    tree = minimal_tree(tmp_path / "tree")
    outside = tmp_path / "elsewhere" / "wrapper.py"
    outside.parent.mkdir()
    wrapper = tree / SRT / WRAPPER
    shutil.move(wrapper, outside)
    wrapper.symlink_to(outside if link == "absolute" else os.path.relpath(outside, wrapper.parent))
    before = state(tmp_path)
    line = error_line(eaglepatch("apply", tree, "--model", "wrapper"))
    assert f"{WRAPPER}:" in line and "symlink" in line and "outside" in line, line
    assert state(tmp_path) == before, changes(before, state(tmp_path))
    assert not leftovers(tmp_path)


def test_wrapper_symlink_inside_the_tree_is_written_through(tmp_path):
    """The control for the test above: a link that stays in the tree is followed and stays a link."""
    tree = minimal_tree(tmp_path / "tree")
    wrapper = tree / SRT / WRAPPER
    real = tree / SRT / "models" / "real_wrapper.py"
    shutil.move(wrapper, real)
    wrapper.symlink_to("real_wrapper.py")
    result = eaglepatch("apply", tree, "--model", "wrapper")
    assert result.exit_code == 0, result.output
    assert wrapper.is_symlink() and os.readlink(wrapper) == "real_wrapper.py"
    assert set(HOOKS) <= set(method_names(real.read_bytes()))


# --------------------------------------------------------------------------- permissions, as nobody


@pytest.fixture
def world_dir():
    """A folder every user can traverse (tmp_path's parents may be 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="eaglepatch-rel-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _nobody_ids() -> tuple[int, int]:
    uid = pwd.getpwnam("nobody").pw_uid
    for group in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(group).gr_gid
        except KeyError:
            continue
    return uid, pwd.getpwnam("nobody").pw_gid


_UNPRIVILEGED: dict[str, object] = {}


def unprivileged_prefix(cwd: Path) -> list[str]:
    """How to run this interpreter without root's powers: [] when not root, else setpriv/runuser to nobody."""
    if os.geteuid() != 0:
        return []
    if "prefix" in _UNPRIVILEGED:
        return _UNPRIVILEGED["prefix"]
    uid, gid = _nobody_ids()
    tried = []
    for prefix in (
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"],
        ["runuser", "-u", "nobody", "--"],
    ):
        if shutil.which(prefix[0]) is None:
            tried.append(f"{prefix[0]}: not installed")
            continue
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", "import os, eaglepatch.cli, eaglepatch.rewrite.write, typer, libcst, rich; print(os.geteuid())"],
            cwd=cwd, env=subprocess_env(HOME=str(cwd)), capture_output=True, text=True, timeout=60,
        )
        if probe.returncode == 0 and probe.stdout.strip() == str(uid):
            _UNPRIVILEGED["prefix"] = prefix
            return prefix
        tried.append(f"{prefix[0]}: exit {probe.returncode}: {(probe.stderr.strip().splitlines() or [''])[-1]}")
    pytest.skip(
        "cannot run this Python with the repository on PYTHONPATH as user nobody (are the venv and "
        f"{REPO_ROOT} readable by others?): " + "; ".join(tried)
    )


def run_unprivileged(cwd: Path, *args) -> subprocess.CompletedProcess:
    prefix = unprivileged_prefix(cwd)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "eaglepatch", *map(str, args)],
        cwd=cwd, env=subprocess_env(HOME=str(cwd), COLUMNS="200"), capture_output=True, text=True, timeout=120,
    )


def _give_to_nobody(root: Path) -> None:
    """Readable by all; owned by nobody, so only the bits a test clears stop the write."""
    uid, gid = _nobody_ids()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            if os.geteuid() == 0:
                os.chown(name, uid, gid, follow_symlinks=False)
            mode = os.lstat(name).st_mode
            os.chmod(name, stat.S_IMODE(mode) | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH | (0o111 if stat.S_ISDIR(mode) else 0))


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eaglepatch: error: "), done.stderr
    return lines[0]


def test_read_only_wrapper_is_refused(world_dir):
    tree = minimal_tree(world_dir / "tree")
    _give_to_nobody(tree)
    (tree / SRT / WRAPPER).chmod(0o444)
    before = state(world_dir)
    line = _one_line(run_unprivileged(world_dir, "apply", tree, "--model", "wrapper"))
    assert f"{WRAPPER}:" in line and "read-only" in line, line
    assert state(world_dir) == before, changes(before, state(world_dir))
    assert not leftovers(world_dir)


def test_folder_without_write_permission_for_the_temporary_file(world_dir):
    tree = minimal_tree(world_dir / "tree")
    _give_to_nobody(tree)
    (tree / SRT / "models").chmod(0o555)  # the wrapper itself stays writable
    before = state(world_dir)
    line = _one_line(run_unprivileged(world_dir, "apply", tree, "--model", "wrapper"))
    assert f"{WRAPPER}:" in line and "temporary file" in line, line
    assert state(world_dir) == before, changes(before, state(world_dir))
    assert not leftovers(world_dir)


# --------------------------------------------------------------------------- a file changed between planning and writing


def test_file_edited_between_planning_and_writing(tmp_path):
    from eaglepatch.errors import EaglepatchError
    from eaglepatch.rewrite.edits import build_edits
    from eaglepatch.rewrite.write import write_edit
    from eaglepatch.run import analyze

    tree = minimal_tree(tmp_path / "tree")
    path = tree / SRT / WRAPPER
    path.chmod(0o640)
    analysis = analyze(tree, ["wrapper"])
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    assert not errors
    (edit,) = [e for e in edits if e.changed]

    # someone else's edit, with a mode change of their own
    theirs = edit.original.replace(b"    def forward", b"    # their comment\n    def forward")
    path.write_bytes(theirs)
    path.chmod(0o600)
    before = state(tmp_path)
    with pytest.raises(EaglepatchError) as caught:
        write_edit(edit, analysis.tree.srt)
    message = str(caught.value)
    assert message.startswith(f"{WRAPPER}: ") and "changed on disk" in message and "left untouched" in message, message
    assert "\n" not in message
    assert state(tmp_path) == before, changes(before, state(tmp_path))

    # planning again against the new content works, and keeps their edit and mode
    result = eaglepatch("apply", tree, "--model", "wrapper")
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert b"# their comment" in data and set(HOOKS) <= set(method_names(data))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert eaglepatch("check", tree, "--model", "wrapper").exit_code == 0


# --------------------------------------------------------------------------- git in odd states


def _repo(tmp_path: Path) -> Path:
    root = minimal_tree(tmp_path / "repo")
    (root / "notes.txt").write_text("base\n", encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tree")
    return root


LABEL = f"{SRT}/{WRAPPER}"


def _diff_and_apply(root: Path) -> None:
    """diff shows one patch for the wrapper with paths relative to PATH; apply writes it."""
    result = eaglepatch("diff", root, "--model", "wrapper")
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith(f"diff --git a/{LABEL} b/{LABEL}\n--- a/{LABEL}\n+++ b/{LABEL}\n"), result.stdout[:300]
    result = eaglepatch("apply", root, "--model", "wrapper")
    assert result.exit_code == 0, result.output
    assert set(HOOKS) <= set(method_names((root / SRT / WRAPPER).read_bytes()))
    assert eaglepatch("check", root, "--model", "wrapper").exit_code == 0


def test_git_detached_head(tmp_path):
    root = _repo(tmp_path)
    (root / "notes.txt").write_text("second\n", encoding="utf-8")
    git(root, "commit", "-q", "-am", "second")
    git(root, "checkout", "-q", "--detach", "HEAD~1")
    head = git(root, "rev-parse", "HEAD").strip()
    _diff_and_apply(root)
    assert git(root, "symbolic-ref", "-q", "HEAD", check=False) == "", "HEAD is no longer detached"
    assert git(root, "rev-parse", "HEAD").strip() == head
    assert git(root, "status", "--porcelain").splitlines() == [f" M {LABEL}"]


def test_git_mid_merge_with_a_conflict_elsewhere(tmp_path):
    root = _repo(tmp_path)
    git(root, "checkout", "-q", "-b", "other")
    (root / "notes.txt").write_text("theirs\n", encoding="utf-8")
    git(root, "commit", "-q", "-am", "theirs")
    git(root, "checkout", "-q", "main")
    (root / "notes.txt").write_text("ours\n", encoding="utf-8")
    git(root, "commit", "-q", "-am", "ours")
    merge = subprocess.run(["git", "merge", "other"], cwd=root, capture_output=True, text=True)
    assert merge.returncode != 0 and "CONFLICT" in merge.stdout, merge.stdout + merge.stderr
    conflicted = (root / "notes.txt").read_bytes()
    assert b"<<<<<<<" in conflicted
    merge_head = (root / ".git" / "MERGE_HEAD").read_text()

    _diff_and_apply(root)
    assert (root / ".git" / "MERGE_HEAD").read_text() == merge_head, "the merge was ended"
    assert (root / "notes.txt").read_bytes() == conflicted
    assert sorted(git(root, "status", "--porcelain").splitlines()) == sorted([f" M {LABEL}", "UU notes.txt"])


@pytest.mark.parametrize("staged", [False, True], ids=["nothing-staged", "all-staged"])
def test_git_repository_without_commits(tmp_path, staged):
    root = minimal_tree(tmp_path / "repo")
    git(root, "init", "-q", "-b", "main")
    if staged:
        git(root, "add", "-A")
    _diff_and_apply(root)
    assert git(root, "rev-parse", "--verify", "-q", "HEAD", check=False) == ""


def test_no_git_installed(tmp_path):
    """PATH without git: GitPython cannot run git, eaglepatch works on the plain files."""
    root = _repo(tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "python").symlink_to(sys.executable)
    env = subprocess_env(PATH=str(empty), COLUMNS="200")
    env.pop("GIT_PYTHON_GIT_EXECUTABLE", None)
    env.pop("GIT_PYTHON_REFRESH", None)
    probe = subprocess.run(
        [sys.executable, "-c", "import shutil, sys; sys.exit(shutil.which('git') is not None)"], env=env
    )
    assert probe.returncode == 0, "git is still on PATH"

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "eaglepatch", *map(str, args)], cwd=tmp_path, env=env, capture_output=True, timeout=120
        )

    diff = run("diff", root, "--model", "wrapper")
    assert diff.returncode == 1, diff.stderr.decode()
    assert diff.stdout.decode().startswith(f"diff --git a/{LABEL} b/{LABEL}\n"), diff.stdout[:300]
    applied = run("apply", root, "--model", "wrapper")
    assert applied.returncode == 0, applied.stdout.decode() + applied.stderr.decode()
    assert set(HOOKS) <= set(method_names((root / SRT / WRAPPER).read_bytes()))
    assert not leftovers(root)
    # what diff showed is what apply wrote
    check = subprocess.run(["git", "apply", "--check", "-R", "-"], cwd=root, input=diff.stdout, capture_output=True)
    assert check.returncode == 0, check.stderr.decode()


# --------------------------------------------------------------------------- faults: a writer killed at any point


KILL_SERVER = r'''
import os, sys
from pathlib import Path
from eaglepatch.records import FileEdit
from eaglepatch.rewrite.write import write_edit

target, srt = Path(sys.argv[1]), Path(sys.argv[2])
original, patched = Path(sys.argv[3]).read_bytes(), Path(sys.argv[4]).read_bytes()
forward = FileEdit(target, "models/wrapper.py", original, patched)
backward = FileEdit(target, "models/wrapper.py", patched, original)
print("ready", flush=True)
for _ in sys.stdin:
    pid = os.fork()
    if pid == 0:  # the writer: patch, unpatch, patch, ... until killed
        code = 0
        try:
            while True:
                write_edit(forward if target.read_bytes() == original else backward, srt)
        except BaseException as exc:
            sys.stderr.write(f"writer stopped: {exc!r}\n")
            code = 3
        finally:
            os._exit(code or 3)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(status, flush=True)
'''

KILL_DELAYS = [i * 0.0025 for i in range(20)]  # 0 to 47.5 ms after the writer starts


def test_writer_killed_at_any_point_leaves_original_or_patched(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    path = tree / SRT / WRAPPER
    path.chmod(0o640)
    original = path.read_bytes()
    patched = patched_bytes(tree)
    (tmp_path / "a").write_bytes(original)
    (tmp_path / "b").write_bytes(patched)

    server = subprocess.Popen(
        [sys.executable, "-c", KILL_SERVER, str(path), str(tree / SRT), str(tmp_path / "a"), str(tmp_path / "b")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=tmp_path,
    )
    seen = {"original": 0, "patched": 0}
    temp_seen = 0
    try:
        assert server.stdout.readline().strip() == "ready", server.stderr.read()
        for delay in KILL_DELAYS:
            server.stdin.write("go\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
            status = int(server.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"the writer stopped by itself (status {status}) before the kill at {delay * 1000:.1f} ms"
            )
            data = path.read_bytes()
            assert data in (original, patched), f"killed at {delay * 1000:.1f} ms: the wrapper is neither version"
            seen["original" if data == original else "patched"] += 1
            assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o640
            stray = [p.name for p in path.parent.iterdir() if p.name not in ("__init__.py", "inner.py", "wrapper.py")]
            assert all(fnmatch.fnmatchcase(p, TEMP_GLOB) for p in stray), stray
            temp_seen = max(temp_seen, len(stray))
    finally:
        server.kill()
        server.communicate()
    print(f"kills: {seen}, most temporary files left at once: {temp_seen}")

    # Leftovers are not Python files and are not picked up: the analysis sees only the wrapper.
    state_is_patched = path.read_bytes() == patched
    assert eaglepatch("check", tree, "--model", "wrapper").exit_code == (0 if state_is_patched else 1)
    everything = eaglepatch("check", tree, "--all")
    assert everything.exit_code == (0 if state_is_patched else 1) and "eaglepatch-tmp" not in everything.output

    # The next write removes them.
    path.write_bytes(original)
    assert eaglepatch("apply", tree, "--model", "wrapper").exit_code == 0
    assert path.read_bytes() == patched
    assert not leftovers(tree)


def test_leftover_temp_file_is_ignored_then_removed_by_the_next_write(tmp_path):
    tree = minimal_tree(tmp_path / "tree")
    models = tree / SRT / "models"
    patched = patched_bytes(tree)
    # what a writer killed mid-write leaves: half the new bytes, under the temporary name
    stale = models / ".wrapper.py.k1ll3d.eaglepatch-tmp"
    stale.write_bytes(patched[: len(patched) // 2])
    assert stale.suffix != ".py"

    for args in (["check", tree, "--model", "wrapper"], ["check", tree, "--all"], ["diff", tree, "--model", "wrapper"]):
        result = eaglepatch(*args)
        assert result.exit_code == 1, (args, result.output)
        assert "eaglepatch-tmp" not in result.output and "k1ll3d" not in result.output
    assert stale.exists(), "check and diff write nothing, not even a cleanup"

    result = eaglepatch("apply", tree, "--model", "wrapper")
    assert result.exit_code == 0, result.output
    assert (models / "wrapper.py").read_bytes() == patched
    assert not stale.exists() and not leftovers(tree)


# --------------------------------------------------------------------------- faults: two applies at once


RACER = r'''
import os, runpy, sys, time
from pathlib import Path
armed, go = Path(sys.argv[1]), Path(sys.argv[2])
# the heavy imports first, so both racers reach the start line ready to plan and write
import eaglepatch.cli, eaglepatch.engines.sglang.pipeline, eaglepatch.rewrite.edits, eaglepatch.rewrite.write, eaglepatch.rewrite.preview, eaglepatch.output.report, eaglepatch.rewrite.gitrepo
import rich.console
armed.touch()
while not go.exists():
    time.sleep(0.0002)
sys.argv = ["python -m eaglepatch", *sys.argv[3:]]
runpy.run_module("eaglepatch", run_name="__main__", alter_sys=True)
'''


def test_two_applies_at_once_write_each_method_once(tmp_path):
    reference = minimal_tree(tmp_path / "reference")
    patched = patched_bytes(reference)
    outcomes = []
    for round_ in range(3):
        tree = minimal_tree(tmp_path / f"tree{round_}")
        sync = tmp_path / f"sync{round_}"
        sync.mkdir()
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(sync / f"armed{i}"), str(sync / "go"), "apply", str(tree), "--model", "wrapper"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(COLUMNS="200"), cwd=tmp_path,
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 60
        while not all((sync / f"armed{i}").exists() for i in range(2)):
            assert time.monotonic() < deadline and all(r.poll() is None for r in racers), "a racer died before the start"
            time.sleep(0.005)
        (sync / "go").touch()
        results = [r.communicate(timeout=120) + (r.returncode,) for r in racers]
        codes = sorted(code for _, _, code in results)
        outcomes.append(codes)
        assert codes in ([0, 0], [0, 2]), results
        for _out, err, code in results:
            if code == 2:
                lines = err.strip().splitlines()
                assert len(lines) == 1 and "changed on disk" in lines[0] and f"{WRAPPER}:" in lines[0], err
            else:
                assert "eaglepatch: error" not in err, err

        data = (tree / SRT / WRAPPER).read_bytes()
        compile(data, WRAPPER, "exec")
        names = method_names(data)
        for hook in HOOKS:
            assert names.count(hook) == 1, (hook, names)
        assert data == patched, "a lost or doubled write"
        assert not leftovers(tree)
        assert eaglepatch("check", tree, "--model", "wrapper").exit_code == 0
    print(f"exit codes per round: {outcomes}")
