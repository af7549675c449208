"""eaglepatch in its surroundings: `--installed`, `[tool.eaglepatch]`, `revert`, `explain`,
`--format sarif`, and the manners of the command line (version, help, colour, completion).

Most tests copy ``fixtures/`` into tmp_path and run the CLI in-process through
``typer.testing.CliRunner``.  The `--installed` tests build one real virtual environment per
session with the sglang 0.5.9 wheel installed by pip (no dependencies, so `import sglang`
fails there) and run ``python -m eaglepatch`` in a subprocess, the way a user would.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import sglang_releases
from helpers import flat, git, isolate_git, snapshot
from typer.testing import CliRunner

from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
CHECKOUT = FIXTURES / "checkout"

SRT = "python/sglang/srt"
MODELS = f"{SRT}/models"
KIMI = f"{MODELS}/kimi_k25.py"
KIMI_CLASS = "KimiK25ForConditionalGeneration"
HOOKS = {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}
MARKER = "# eaglepatch: forwards to self.language_model"

# module -> wrapper class; every one misses exactly HOOKS in the fixtures
WRAPPERS = {
    "kimi_k25": KIMI_CLASS,
    "exotic_wrapper": "ExoticWrapperForConditionalGeneration",
    "tabs_wrapper": "TabsWrapperForConditionalGeneration",
    "crlf_wrapper": "CrlfWrapperForConditionalGeneration",
    "bom_wrapper": "BomWrapperForConditionalGeneration",
    "gemma_like": "GemmaLikeForConditionalGeneration",
}

RUNNER = CliRunner()
ANSI = "\x1b["
# environment variables that would make rich colour a pipe, or change what it detects
COLOUR_ENV = ("FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    """git sees no user or system config and has a fixed identity; rich gets a wide console."""
    isolate_git(monkeypatch, columns=250)


def eaglepatch(*args):
    """The CLI in-process; an unexpected exception is re-raised, not read as an exit code."""
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def check_json(*args) -> dict:
    result = eaglepatch("check", "--format", "json", *args)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def missing_of(data: dict) -> dict[str, set[str]]:
    """class -> names of the members it misses, from `check --format json`."""
    return {m["class"]: {x["name"] for x in m["missing"]} for m in data["models"]}


def error_line(result, *needles: str) -> str:
    """Exit 2 and exactly one line on stderr that names every needle."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in result.output
    return lines[0]


def class_methods(data: bytes, cls: str) -> set[str]:
    for node in ast.parse(data).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    raise AssertionError(f"class {cls} not found")


def class_line(path: Path, cls: str) -> int:
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return node.lineno
    raise AssertionError(f"class {cls} not found in {path}")


def method_line(path: Path, cls: str, name: str) -> int:
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item.lineno
    raise AssertionError(f"{cls}.{name} not found in {path}")


def pyflakes(path: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "pyflakes", str(path)], capture_output=True, text=True)
    return done.stdout + done.stderr


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess: no colour forcing, patcher importable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in COLOUR_ENV and not k.startswith("_TYPER")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_cli(*args, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300):
    """`python -m eaglepatch ARGS` from eaglepatch's own interpreter, output piped."""
    return subprocess.run(
        [sys.executable, "-m", "eaglepatch", *map(str, args)],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def plain(tmp_path) -> Path:
    """A copy of the checkout layout, in no git repository."""
    root = tmp_path / "plain"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git checkout of the fixture tree, one commit."""
    root = tmp_path / "repo"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture tree")
    return root


# =========================================================================== 1. --installed


@pytest.fixture(scope="session")
def sglang_venv(tmp_path_factory) -> Path:
    """A real virtual environment holding the sglang 0.5.9 wheel (installed without its dependencies)."""
    wheel = sglang_releases.download_wheel("0.5.9")
    venv = tmp_path_factory.mktemp("venv-sglang-0.5.9")
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def venv_site_packages(venv: Path) -> Path:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip()).resolve()


def path_with(folder: Path) -> str:
    return os.pathsep.join([str(folder), os.environ.get("PATH", os.defpath)])


@pytest.mark.integration
def test_installed_targets_the_python_on_path_without_importing_sglang(sglang_venv, tmp_path):
    python = sglang_venv / "bin" / "python"
    site = venv_site_packages(sglang_venv)
    assert (site / "sglang" / "srt" / "models" / "kimi_k25.py").is_file()

    # The wheel went in without torch & co., so importing sglang there fails ...
    for module in ("sglang", "sglang.srt.models.kimi_k25"):
        imported = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True, cwd=tmp_path)
        assert imported.returncode != 0, f"import {module} unexpectedly worked in {sglang_venv}"
        assert "ModuleNotFoundError" in imported.stderr

    # ... and yet `check --installed` finds it: it locates the package, it does not import it.
    result = run_cli(
        "check", "--installed", "--format", "json", env=clean_env(PATH=path_with(python.parent)), cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(result.stdout)
    srt = Path(data["srt"])
    assert srt == site / "sglang" / "srt"
    assert srt.is_relative_to(sglang_venv.resolve())
    assert missing_of(data) == {KIMI_CLASS: HOOKS}
    assert data["models"][0]["file"] == "models/kimi_k25.py"


@pytest.mark.integration
def test_installed_with_python_flag_needs_no_path(sglang_venv, tmp_path):
    python = sglang_venv / "bin" / "python"
    env = clean_env()
    assert str(python.parent) not in env.get("PATH", "").split(os.pathsep)
    result = run_cli("check", "--installed", "--python", python, "--format", "json", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert Path(data["srt"]) == venv_site_packages(sglang_venv) / "sglang" / "srt"
    assert missing_of(data) == {KIMI_CLASS: HOOKS}


@pytest.mark.integration
def test_diff_installed_prints_a_patch_that_applies(sglang_venv, tmp_path):
    env = clean_env(PATH=path_with(sglang_venv / "bin"))
    result = run_cli("diff", "--installed", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    first = result.stdout.splitlines()[0]
    match = re.fullmatch(r"diff --git a/(\S+) b/\1", first)
    assert match and match.group(1).endswith("models/kimi_k25.py"), first
    for hook in HOOKS:
        assert f"+    def {hook}(" in result.stdout
    # the path in the header is relative to a folder of the installed package: the patch applies there
    site = venv_site_packages(sglang_venv)
    base = site if match.group(1).startswith("sglang/") else site / "sglang"
    assert (base / match.group(1)).is_file(), (base, match.group(1))
    dry = subprocess.run(["patch", "-p1", "--dry-run"], input=result.stdout, cwd=base, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr


@pytest.mark.integration
def test_apply_and_revert_installed_round_trip(sglang_venv, tmp_path):
    """apply --installed patches the venv's kimi_k25.py; revert --installed restores it byte for byte."""
    python = sglang_venv / "bin" / "python"
    kimi = venv_site_packages(sglang_venv) / "sglang" / "srt" / "models" / "kimi_k25.py"
    before = kimi.read_bytes()
    try:
        applied = run_cli("apply", "--installed", "--python", python, cwd=tmp_path)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert HOOKS <= class_methods(kimi.read_bytes(), KIMI_CLASS)
        assert run_cli("check", "--installed", "--python", python, cwd=tmp_path).returncode == 0
        reverted = run_cli("revert", "--installed", "--python", python, "--model", "kimi_k25", cwd=tmp_path)
        assert reverted.returncode == 0, reverted.stdout + reverted.stderr
        assert kimi.read_bytes() == before
    finally:
        kimi.write_bytes(before)  # the venv is shared by the session


def test_installed_python_without_sglang_is_an_error(tmp_path):
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is not None)"],
        cwd=tmp_path,
    )
    if probe.returncode != 0:
        pytest.skip(f"{sys.executable} has sglang installed")
    result = run_cli("check", "--installed", "--python", sys.executable, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert sys.executable in lines[0] and "no sglang" in lines[0], lines[0]
    assert result.stdout == ""


def test_installed_python_that_cannot_run_is_an_error(tmp_path):
    missing = tmp_path / "nowhere" / "python"
    result = eaglepatch("check", "--installed", "--python", missing)
    error_line(result, str(missing))


@pytest.mark.parametrize("command", ["check", "diff", "apply", "revert"])
@pytest.mark.parametrize(
    "flags", [["--installed"], ["--installed", "--python", sys.executable], ["--python", sys.executable]]
)
def test_path_and_installed_do_not_go_together(plain, command, flags):
    before = snapshot(plain)
    result = eaglepatch(command, *flags, plain)
    error_line(result, str(plain), "--installed")
    assert snapshot(plain) == before


# =========================================================================== 2. [tool.eaglepatch]


def write_config(root: Path, where: str, body: str) -> Path:
    folder = root if where == "root" else root / "python"
    path = folder / "pyproject.toml"
    path.write_text(f'[project]\nname = "sglang"\n\n[tool.eaglepatch]\n{body}', encoding="utf-8")
    return path


@pytest.mark.parametrize("where", ["root", "python"])
def test_config_models_is_the_default_selection(plain, where):
    assert missing_of(check_json(plain)) == {KIMI_CLASS: HOOKS}  # without the file: kimi_k25
    write_config(plain, where, 'models = ["gemma_like"]\n')
    result = eaglepatch("check", plain)
    assert result.exit_code == 1
    assert "GemmaLikeForConditionalGeneration" in result.stdout and KIMI_CLASS not in result.stdout
    assert missing_of(check_json(plain)) == {"GemmaLikeForConditionalGeneration": HOOKS}
    # the command line wins
    assert missing_of(check_json(plain, "--model", "kimi_k25")) == {KIMI_CLASS: HOOKS}
    # diff and apply follow the file too
    diff = eaglepatch("diff", plain)
    assert diff.exit_code == 1 and "models/gemma_like.py" in diff.stdout and "kimi_k25" not in diff.stdout


def test_config_all_switches_to_the_whole_tree(plain):
    write_config(plain, "root", "all = true\n")
    result = eaglepatch("check", plain)
    assert result.exit_code == 1
    assert re.search(r"EAGLE-3 readiness of \d+ model classes", result.stdout), result.stdout[:500]
    data = check_json(plain)
    missing = missing_of(data)
    assert data["summary"]["models"] > len(WRAPPERS)
    for module, cls in WRAPPERS.items():
        assert missing[cls] == HOOKS, module
    # --model on the command line wins over all = true
    narrowed = check_json(plain, "--model", "kimi_k25")
    assert missing_of(narrowed) == {KIMI_CLASS: HOOKS}
    assert "readiness" not in eaglepatch("check", plain, "--model", "kimi_k25").stdout


def test_config_ignore_removes_a_member_everywhere(plain):
    assert "set_embed_and_head" in {p["name"] for p in check_json(plain)["protocol"]}
    write_config(plain, "python", 'ignore = ["set_embed_and_head"]\n')
    data = check_json(plain)
    assert "set_embed_and_head" not in {p["name"] for p in data["protocol"]}
    assert missing_of(data) == {KIMI_CLASS: HOOKS - {"set_embed_and_head"}}

    applied = eaglepatch("apply", plain)
    assert applied.exit_code == 0, applied.output
    methods = class_methods((plain / KIMI).read_bytes(), KIMI_CLASS)
    assert HOOKS - {"set_embed_and_head"} <= methods
    assert "set_embed_and_head" not in methods
    assert eaglepatch("check", plain).exit_code == 0
    # without the file, the member is missing again
    (plain / "python" / "pyproject.toml").unlink()
    assert missing_of(check_json(plain)) == {KIMI_CLASS: {"set_embed_and_head"}}


CONSUMER = '''"""Weight sync for a custom drafter (no EAGLE in the name, no EAGLE guard)."""


class DraftSync:
    def __init__(self, target_model, draft_model):
        self.target_model = target_model
        self.draft_model = draft_model

    def sync(self):
        self.target_model.sync_draft_weights(self.draft_model)
        return self.target_model.capture_aux_hidden_states
'''


def test_config_consumers_glob_makes_plain_files_count(plain):
    spec = plain / SRT / "speculative"
    (spec / "extra_sync.py").write_text(CONSUMER, encoding="utf-8")
    # the same calls in a file the glob does not match stay out
    (spec / "other_sync.py").write_text(CONSUMER.replace("sync_draft_weights", "other_hook"), encoding="utf-8")
    before = check_json(plain)
    names = {p["name"] for p in before["protocol"]}
    assert not names & {"sync_draft_weights", "capture_aux_hidden_states", "other_hook"}
    assert "speculative/extra_sync.py" not in before["consumers"]

    write_config(plain, "root", 'consumers = ["speculative/extra_*.py"]\n')
    data = check_json(plain)
    protocol = {p["name"]: p for p in data["protocol"]}
    assert protocol["sync_draft_weights"]["called_at"] == ["speculative/extra_sync.py:10"]
    assert protocol["capture_aux_hidden_states"]["called_at"] == ["speculative/extra_sync.py:11"]
    assert "other_hook" not in protocol
    assert "speculative/extra_sync.py" in data["consumers"]
    assert "speculative/other_sync.py" not in data["consumers"]
    # the inner DeepseekV3ForCausalLM has capture_aux_hidden_states, so kimi now misses it too; nothing
    # defines sync_draft_weights, so it is missing with no fix
    assert missing_of(data) == {KIMI_CLASS: HOOKS | {"capture_aux_hidden_states", "sync_draft_weights"}}
    (sync,) = [m for m in data["models"][0]["missing"] if m["name"] == "sync_draft_weights"]
    assert sync["required"] is True and sync["fix"] is None and "lacks it" in sync["blocker"]


@pytest.mark.parametrize(
    "body, needle",
    [
        ('model = ["kimi_k25"]\n', "unknown key"),
        ('models = ["kimi_k25"\n', "TOML"),
        ('consumers = ["speculative/nothing_*.py"]\n', "speculative/nothing_*.py"),
        ('all = "yes"\n', "all"),
        ("ignore = [1]\n", "ignore"),
    ],
    ids=["bad-key", "bad-toml", "consumer-glob-matches-nothing", "all-not-bool", "ignore-not-strings"],
)
@pytest.mark.parametrize("where", ["root", "python"])
def test_config_errors_name_the_file(plain, body, needle, where):
    path = write_config(plain, where, body).resolve()
    before = snapshot(plain)
    for command in ("check", "diff", "apply"):
        result = eaglepatch(command, plain)
        error_line(result, str(path), needle)
    assert snapshot(plain) == before


# =========================================================================== 3. revert


def test_revert_restores_every_file_byte_for_byte(repo):
    original = snapshot(repo)
    for module in WRAPPERS:
        result = eaglepatch("apply", repo, "--model", module)
        assert result.exit_code == 0, result.output
    changed = {rel for rel, data in snapshot(repo).items() if original[rel] != data}
    assert changed == {f"{MODELS}/{m}.py" for m in WRAPPERS}

    result = eaglepatch("revert", repo)
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    for module, cls in WRAPPERS.items():
        assert f"removed from {cls} (models/{module}.py)" in out
    assert "kept" not in out
    assert snapshot(repo) == original
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    for module in WRAPPERS:
        assert eaglepatch("check", repo, "--model", module).exit_code == 1

    again = eaglepatch("revert", repo)
    assert again.exit_code == 0
    assert "nothing to revert" in again.output.lower()


def test_revert_model_touches_only_that_module(repo):
    for module in ("kimi_k25", "exotic_wrapper"):
        assert eaglepatch("apply", repo, "--model", module).exit_code == 0
    patched_exotic = (repo / MODELS / "exotic_wrapper.py").read_bytes()
    result = eaglepatch("revert", repo, "--model", "kimi_k25")
    assert result.exit_code == 0, result.output
    assert git(repo, "status", "--porcelain") == f" M {MODELS}/exotic_wrapper.py\n"
    assert (repo / MODELS / "exotic_wrapper.py").read_bytes() == patched_exotic


def test_revert_keeps_a_generated_method_edited_by_hand(repo):
    module, cls = "exotic_wrapper", WRAPPERS["exotic_wrapper"]
    path = repo / MODELS / f"{module}.py"
    assert eaglepatch("apply", repo, "--model", module).exit_code == 0
    text = path.read_text(encoding="utf-8")
    old = "return inner.get_embed_and_head(scale=scale, **options)"
    assert text.count(old) == 1, text
    path.write_text(text.replace(old, "return inner.get_embed_and_head(scale=2 * scale, **options)"), encoding="utf-8")

    result = eaglepatch("revert", repo)
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert re.search(r"\bkept\b.*get_embed_and_head", out), out
    assert f"removed from {cls} (models/{module}.py): set_eagle3_layers_to_capture, set_embed_and_head" in out

    data = path.read_bytes()
    compile(data, str(path), "exec")
    assert class_methods(data, cls) & HOOKS == {"get_embed_and_head"}
    assert b"scale=2 * scale" in data
    # the imports the kept method still needs (Any, EmbedAndHead) stay; the others' go
    report = pyflakes(path)
    assert "undefined name" not in report and "imported but unused" not in report, report

    again = eaglepatch("revert", repo)
    assert again.exit_code == 0 and "nothing to revert" in again.output.lower()
    assert path.read_bytes() == data


def test_revert_never_removes_a_hand_written_method_without_marker(repo):
    # A hand-written get_embed_and_head, identical to what eaglepatch writes but without its marker.
    explained = eaglepatch("explain", "get_embed_and_head", repo, "--format", "json")
    assert explained.exit_code == 0, explained.output
    code = json.loads(explained.stdout)["models"][0]["would_write"]
    assert MARKER in code
    handwritten = "".join(line for line in code.splitlines(keepends=True) if MARKER not in line)
    kimi = repo / KIMI
    anchor = "        return self.language_model.load_weights(language_weights)\n"
    text = kimi.read_text(encoding="utf-8")
    assert text.count(anchor) == 1
    kimi.write_text(text.replace(anchor, anchor + "\n" + handwritten), encoding="utf-8")
    git(repo, "commit", "-qam", "forward get_embed_and_head by hand")
    committed = kimi.read_bytes()
    assert missing_of(check_json(repo)) == {KIMI_CLASS: HOOKS - {"get_embed_and_head"}}

    applied = eaglepatch("apply", repo)
    assert applied.exit_code == 0, applied.output
    assert kimi.read_bytes().count(MARKER.encode()) == 2

    result = eaglepatch("revert", repo)
    assert result.exit_code == 0, result.output
    assert "kept" not in result.output
    assert kimi.read_bytes() == committed
    assert git(repo, "status", "--porcelain") == ""
    # and with nothing marked left, the hand-written method is still not a candidate
    assert "nothing to revert" in eaglepatch("revert", repo, "--all").output.lower()
    assert kimi.read_bytes() == committed


def test_revert_with_nothing_to_revert(repo):
    before = snapshot(repo)
    result = eaglepatch("revert", repo)
    assert result.exit_code == 0, result.output
    assert "nothing to revert" in result.output.lower()
    assert snapshot(repo) == before
    scoped = eaglepatch("revert", repo, "--model", "kimi_k25")
    assert scoped.exit_code == 0 and "nothing to revert" in scoped.output.lower()


def test_revert_unknown_model_is_an_error(repo):
    error_line(eaglepatch("revert", repo, "--model", "no_such_model"), "no_such_model")


def test_revert_commit_commits_just_the_reverted_files(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    assert eaglepatch("apply", repo, "--commit").exit_code == 0
    (repo / "notes.txt").write_text("unrelated work in progress\n")

    result = eaglepatch("revert", repo, "--commit")
    assert result.exit_code == 0, result.output
    assert "committed" in result.output
    log = git(repo, "log", "--format=%s").splitlines()
    assert len(log) == 3
    assert log[0] == f"Remove eaglepatch's hooks from {KIMI_CLASS}"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [KIMI]
    assert git(repo, "diff", first, "HEAD") == ""  # back to the tree before apply
    assert git(repo, "status", "--porcelain") == "?? notes.txt\n"


def test_revert_leaves_imports_that_were_there_before_apply(repo):
    kimi = repo / KIMI
    text = kimi.read_text(encoding="utf-8")
    # `Optional` stays imported but unused (a re-export, or dead code): apply needs no new import.
    old = "pad_value: Optional[int] = getattr"
    assert text.count(old) == 1
    kimi.write_text(text.replace(old, "pad_value = getattr"), encoding="utf-8")
    git(repo, "commit", "-qam", "Optional is imported but unused")
    committed = kimi.read_bytes()

    assert eaglepatch("apply", repo).exit_code == 0
    assert b"from typing import List, Optional\n" in kimi.read_bytes()  # apply added no import
    assert eaglepatch("revert", repo).exit_code == 0
    assert kimi.read_bytes() == committed, git(repo, "diff")


@pytest.mark.integration
def test_apply_then_revert_is_identity_on_real_janus_pro(tmp_path):
    site = sglang_releases.make_site_packages_copy("0.5.9", tmp_path / "venv")
    path = site / "sglang" / "srt" / "models" / "deepseek_janus_pro.py"
    before = path.read_bytes()
    applied = eaglepatch("apply", site, "--model", "deepseek_janus_pro")
    assert applied.exit_code == 0, applied.output
    assert path.read_bytes() != before
    reverted = eaglepatch("revert", site, "--model", "deepseek_janus_pro")
    assert reverted.exit_code == 0, reverted.output
    assert path.read_bytes() == before


# =========================================================================== 4. explain


def test_explain_shows_call_sites_guards_definition_and_code():
    protocol = {p["name"]: p for p in check_json(CHECKOUT)["protocol"]}
    member = protocol["get_embed_and_head"]
    assert member["called_at"]

    result = eaglepatch("explain", "get_embed_and_head", CHECKOUT)
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    for site in member["called_at"]:
        assert site in out, site
    for use in member["uses"]:
        assert flat(use["guard"]) in out, use["guard"]
    deepseek = CHECKOUT / SRT / "models" / "deepseek_v2.py"
    line = method_line(deepseek, "DeepseekV2ForCausalLM", "get_embed_and_head")
    assert f"models/deepseek_v2.py:{line}" in out
    assert KIMI_CLASS in out
    assert "def get_embed_and_head(self)" in out
    assert "return inner.get_embed_and_head()" in out


def test_explain_json_matches_check_and_apply(plain):
    protocol = {p["name"]: p for p in check_json(plain)["protocol"]}
    result = eaglepatch("explain", "set_eagle3_layers_to_capture", plain, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["name"] == "set_eagle3_layers_to_capture"
    assert data["called_at"] == protocol["set_eagle3_layers_to_capture"]["called_at"]
    assert data["uses"] == protocol["set_eagle3_layers_to_capture"]["uses"]
    assert all(u["guard"] for u in data["uses"])
    (model,) = data["models"]
    assert model["class"] == KIMI_CLASS and model["status"] == "missing"
    deepseek = plain / SRT / "models" / "deepseek_v2.py"
    line = method_line(deepseek, "DeepseekV2ForCausalLM", "set_eagle3_layers_to_capture")
    assert model["defined_at"] == f"models/deepseek_v2.py:{line}"
    assert "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None)" in model["would_write"]
    # what explain says apply would write is what apply writes
    assert eaglepatch("apply", plain).exit_code == 0
    assert model["would_write"] in (plain / KIMI).read_text(encoding="utf-8")
    # once it is there, explain reports it forwarded and has nothing to write
    after = json.loads(eaglepatch("explain", "set_eagle3_layers_to_capture", plain, "--format", "json").stdout)
    assert after["models"][0]["status"] == "present" and "would_write" not in after["models"][0]


def test_explain_forward_is_not_a_protocol_member():
    result = eaglepatch("explain", "forward", CHECKOUT)
    line = error_line(result, "forward", "not an EAGLE-3 protocol member")
    assert "get_embed_and_head" in line  # it lists the members there are


def test_explain_forward_names_the_general_interface_when_set_aside(plain):
    # EAGLE-3 code calls forward on the target too; the runner calls it on every model.
    utils = plain / SRT / "speculative" / "eagle_utils.py"
    utils.write_text(
        utils.read_text(encoding="utf-8")
        + "\n\ndef run_target(target_model, batch):\n    return target_model.forward(batch)\n",
        encoding="utf-8",
    )
    data = check_json(plain)
    assert "forward" not in {p["name"] for p in data["protocol"]}
    aside = data["general_interface"]
    assert set(aside) == {"forward"}
    rel, _, line = aside["forward"].partition(":")
    assert rel.startswith("model_executor/")
    assert ".model.forward(" in (plain / SRT / rel).read_text(encoding="utf-8").splitlines()[int(line) - 1]
    result = eaglepatch("explain", "forward", plain)
    error_line(result, "forward", "not an EAGLE-3 protocol member", "model runner", aside["forward"])


def test_explain_unknown_member_is_an_error():
    error_line(eaglepatch("explain", "nosuch", CHECKOUT), "nosuch", "not an EAGLE-3 protocol member")


@pytest.mark.parametrize("fmt", ["github", "sarif"])
def test_explain_rejects_formats_it_does_not_have(fmt):
    result = eaglepatch("explain", "get_embed_and_head", CHECKOUT, "--format", fmt)
    assert result.exit_code == 2, result.output


# =========================================================================== 5. --format sarif


def sarif(*args) -> tuple[int, dict]:
    result = eaglepatch("check", "--format", "sarif", *args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_sarif_one_result_per_missing_member(plain):
    modules = ("kimi_k25", "gemma_like", "crlf_wrapper")
    args = [plain] + [a for m in modules for a in ("--model", m)]
    code, doc = sarif(*args)
    assert code == 1
    assert doc["version"] == "2.1.0"
    assert "sarif" in doc["$schema"]
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "eaglepatch"
    rule_ids = {rule["id"] for rule in driver["rules"]}

    expected = {(WRAPPERS[m], h) for m in modules for h in HOOKS}
    seen = set()
    for result in run["results"]:
        assert result["ruleId"] in rule_ids
        # required hooks are errors; set_embed_and_head, the draft-side companion, is a note
        assert result["level"] == ("note" if "set_embed_and_head" in result["message"]["text"] else "error")
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        uri = physical["artifactLocation"]["uri"]
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme == "file":
            path = Path(urllib.parse.unquote(parsed.path))
        else:
            assert not parsed.scheme and " " not in uri, uri  # a relative URI reference
            path = plain / urllib.parse.unquote(uri)  # from the tree's root: `plain` is in no git work tree
        module = path.stem
        assert path.resolve() == (plain / MODELS / f"{module}.py").resolve(), uri
        cls = WRAPPERS[module]
        assert physical["region"]["startLine"] == class_line(path, cls)
        members = [h for h in HOOKS if h in result["message"]["text"]]
        assert len(members) == 1 and cls in result["message"]["text"], result["message"]["text"]
        seen.add((cls, members[0]))
    assert len(run["results"]) == len(expected)
    assert seen == expected


def test_sarif_clean_tree_has_no_results(plain):
    code, doc = sarif(plain, "--model", "llava_like")
    assert code == 0
    assert doc["version"] == "2.1.0" and doc["runs"][0]["results"] == []
    assert eaglepatch("apply", plain).exit_code == 0
    code, doc = sarif(plain)
    assert code == 0 and doc["runs"][0]["results"] == []


def test_sarif_uri_is_a_valid_uri_reference(tmp_path):
    root = tmp_path / "my sglang"
    shutil.copytree(CHECKOUT, root, symlinks=True)
    _, doc = sarif(root)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]]
    assert uris
    for uri in uris:
        assert re.fullmatch(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+", uri), uri


# =========================================================================== 6. command-line manners


def test_version_is_the_package_version():
    source = (REPO_ROOT / "patcher" / "__init__.py").read_text(encoding="utf-8")
    version = re.search(r'^__version__ = "([^"]+)"', source, re.MULTILINE).group(1)
    result = eaglepatch("--version")
    assert result.exit_code == 0
    assert result.stdout == f"eaglepatch {version}\n"
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "eaglepatch.__version__" }' in pyproject
    from importlib.metadata import version as installed_version

    assert installed_version("eaglepatch") == version  # one source: the metadata is read from the package
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout == f"eaglepatch {version}\n"


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(None, id="app"),
        "check",
        "diff",
        "apply",
        "revert",
        "explain",
    ],
)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_has_examples(command, flag):
    result = eaglepatch(*([command] if command else []), flag)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout
    assert "Examples" in result.stdout


def test_help_examples_are_not_split_across_lines():
    from eaglepatch import cli

    broken = []
    for command, epilog in {
        "check": cli.EPILOG_CHECK,
        "diff": cli.EPILOG_DIFF,
        "apply": cli.EPILOG_APPLY,
        "revert": cli.EPILOG_REVERT,
        "explain": cli.EPILOG_EXPLAIN,
    }.items():
        shown = {line.strip() for line in eaglepatch(command, "--help").stdout.splitlines()}
        examples = [line.strip() for line in epilog.splitlines() if line.strip().startswith("eaglepatch ")]
        assert examples, command
        broken += [example for example in examples if example not in shown]
    assert broken == []


@pytest.mark.parametrize("no_color", [True, False], ids=["NO_COLOR", "piped"])
@pytest.mark.parametrize("command", [["check"], ["check", "--all"], ["diff"], ["explain", "get_embed_and_head"]])
def test_piped_output_has_no_ansi(command, no_color, tmp_path):
    env = clean_env(**({"NO_COLOR": "1"} if no_color else {}))
    result = run_cli(*command, CHECKOUT, env=env, cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert result.stdout.strip()
    assert ANSI not in result.stdout
    assert ANSI not in result.stderr


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(data: str) -> set[str]:
    """SGR parameters that set a foreground or background colour (bold, dim and reset are not colours)."""
    found = set()
    for params in _SGR.findall(data):
        for p in params.split(";"):
            if p.isdigit() and (30 <= int(p) <= 38 or 40 <= int(p) <= 48 or 90 <= int(p) <= 107):
                found.add(p)
    return found


def run_in_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "eaglepatch", *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.skipif(os.name != "posix", reason="needs a pseudo-terminal")
@pytest.mark.parametrize("command", [["check"], ["diff"]])
def test_no_color_on_a_terminal(command):
    env = clean_env(TERM="xterm-256color", COLUMNS="200")
    code, coloured = run_in_terminal([*command, str(CHECKOUT)], env)
    assert code == 1
    assert colour_codes(coloured), "a terminal without NO_COLOR should get colours (the probe works)"
    code, plain_out = run_in_terminal([*command, str(CHECKOUT)], dict(env, NO_COLOR="1"))
    assert code == 1
    assert "kimi_k25" in plain_out
    assert colour_codes(plain_out) == set()


COMPLETE_MAIN = "import sys; sys.argv[0] = 'eaglepatch'; from eaglepatch.cli import cli_main; cli_main()"


@pytest.mark.parametrize(
    "shell, needle",
    [
        ("bash", "complete -o default -F _eaglepatch_completion eaglepatch"),
        ("zsh", "#compdef eaglepatch"),
        ("fish", "complete --command eaglepatch"),
    ],
)
def test_show_completion(shell, needle):
    env = clean_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    done = subprocess.run(
        [sys.executable, "-c", COMPLETE_MAIN, "--show-completion", shell], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert needle in done.stdout
    assert "_EAGLEPATCH_COMPLETE" in done.stdout


@pytest.mark.parametrize(
    "words, cword, expected",
    [
        ("eaglepatch ch", 1, {"check"}),
        ("eaglepatch re", 1, {"revert"}),
        ("eaglepatch check --format ", 3, {"table", "json", "github", "sarif"}),
    ],
)
def test_bash_completion_completes(words, cword, expected):
    env = clean_env(_EAGLEPATCH_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
    done = subprocess.run([sys.executable, "-c", COMPLETE_MAIN], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected


CRASH_MAIN = (
    "import sys, eaglepatch.run as p\n"
    "def boom(*a, **k):\n"
    "    raise RuntimeError('boom in the pipeline')\n"
    "p.analyze = boom\n"
    "sys.argv[0] = 'eaglepatch'\n"
    "from eaglepatch.cli import cli_main\n"
    "cli_main()\n"
)


def test_unexpected_error_is_exit_2_with_one_line(tmp_path):
    args = [sys.executable, "-c", CRASH_MAIN, "check", str(CHECKOUT)]
    done = subprocess.run(args, capture_output=True, text=True, env=clean_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "eaglepatch: internal error: RuntimeError: boom in the pipeline (set EAGLEPATCH_DEBUG=1 for the traceback)"
    ]
    assert done.stdout == ""
    debug = subprocess.run(args, capture_output=True, text=True, env=clean_env(EAGLEPATCH_DEBUG="1"), cwd=tmp_path)
    assert debug.returncode not in (0, 2)
    assert "Traceback" in debug.stderr and "boom in the pipeline" in debug.stderr
