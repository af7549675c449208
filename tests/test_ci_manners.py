"""CI manners (issue 24, part 6): the closing hint repeats the selection, GitHub annotations name
paths from the repository root, the baseline's table tells new gaps from accepted ones, an unknown
--ignore member is an error, the baseline file gets the user's umask, errors come out in the
machine format asked for, and --quiet leaves only errors and the machine output.

The CLI runs in-process (typer's CliRunner) on copies of fixtures/checkout; the GitHub path tests
use real git repositories in tmp_path.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path

import pytest
from helpers import git, invoke, isolate_git

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKOUT = REPO_ROOT / "fixtures" / "checkout"
SITE_PACKAGES = REPO_ROOT / "fixtures" / "site-packages"
SRT = Path("python", "sglang", "srt")
KIMI_CLASS = "KimiK25ForConditionalGeneration"
KIMI_FILE = "models/kimi_k25.py"
LLAVA_CLASS = "LlavaLikeForConditionalGeneration"


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no line of rich's wraps: hints are compared whole


@pytest.fixture
def root(tmp_path: Path) -> Path:
    target = tmp_path / "my tree"  # a space: the hint must quote it
    shutil.copytree(CHECKOUT, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def hint_of(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("Review the fixes with ")]
    return line


def class_line(root: Path, rel: str, cls: str) -> int:
    lines = (root / SRT / rel).read_text(encoding="utf-8").splitlines()
    (line,) = [i for i, text in enumerate(lines, start=1) if text.startswith(f"class {cls}(")]
    return line


def annotation_files(stdout: str) -> set[str]:
    files = set()
    for line in stdout.splitlines():
        if line.startswith(("::error file=", "::notice file=")):
            props = line.split(" ", 1)[1].split("::", 1)[0]
            files.add(dict(p.split("=", 1) for p in props.split(","))["file"])
    return files


# --------------------------------------------------------------------------- the closing hint


def test_hint_after_check_all_repeats_all_and_the_quoted_path(root: Path, monkeypatch, tmp_path: Path):
    result = invoke("check", "--all", root)
    assert result.exit_code == 1, result.stderr
    quoted = shlex.quote(str(root))
    assert quoted != str(root)  # the space made it need quoting
    assert hint_of(result.stdout) == (
        f"Review the fixes with `eaglepatch diff --all {quoted}`, write them with `eaglepatch apply --all {quoted}`"
    )
    # following it does what it says: apply --all writes every fix check --all listed
    before = json.loads(invoke("check", "--all", root, "--format", "json").stdout)["summary"]["fixes"]
    assert before > 3  # more than the default kimi_k25's three
    command = shlex.split(hint_of(result.stdout).split("`")[3])
    assert command[:2] == ["eaglepatch", "apply"]
    monkeypatch.chdir(tmp_path)
    applied = invoke(*command[1:])
    after = json.loads(invoke("check", "--all", root, "--format", "json").stdout)["summary"]
    assert after["fixes"] == 0
    assert applied.exit_code == (1 if after["missing"] else 0)  # the fixture's needs_code classes are left, and named


def test_hint_repeats_models_consumers_ignore_and_exclude(root: Path):
    result = invoke(
        "check", root, "--model", "kimi_k25", "--ignore", "set_embed_and_head", "--consumer", "speculative/*.py",
        "--exclude", "models/tabs_wrapper.py",
    )
    assert result.exit_code == 1, result.stderr
    selection = (
        "--model kimi_k25 --consumer 'speculative/*.py' --ignore set_embed_and_head --exclude models/tabs_wrapper.py "
        + shlex.quote(str(root))
    )
    assert hint_of(result.stdout) == (
        f"Review the fixes with `eaglepatch diff {selection}`, write them with `eaglepatch apply {selection}`"
    )


def test_hint_without_a_selection_is_the_bare_commands(root: Path, monkeypatch):
    monkeypatch.chdir(root)
    result = invoke("check")
    assert result.exit_code == 1, result.stderr
    assert hint_of(result.stdout) == "Review the fixes with `eaglepatch diff`, write them with `eaglepatch apply`"


@pytest.mark.parametrize(
    "flags, again",
    [
        (["--installed"], "--installed"),
        (["--python", "/opt/my env/bin/python"], "--python '/opt/my env/bin/python'"),
        (["--installed", "--python", "/opt/py/bin/python3"], "--installed --python /opt/py/bin/python3"),
    ],
)
def test_hint_repeats_installed_and_python(tmp_path: Path, monkeypatch, flags, again):
    site = tmp_path / "site-packages"
    shutil.copytree(SITE_PACKAGES, site, ignore=shutil.ignore_patterns("__pycache__"))
    asked = []

    def installed_sglang(python=None):
        asked.append(python)
        return site / "sglang"

    monkeypatch.setattr("eaglepatch.read.installed.installed_sglang", installed_sglang)
    result = invoke("check", *flags, "--all")
    assert result.exit_code == 1, result.stderr
    assert asked and asked[0] == (flags[-1] if "--python" in flags else None)
    assert hint_of(result.stdout) == (
        f"Review the fixes with `eaglepatch diff --all {again}`, write them with `eaglepatch apply --all {again}`"
    )


# --------------------------------------------------------------------------- GitHub annotation paths


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A real git repository whose root holds the checkout under vendor/sglang."""
    isolate_git(monkeypatch)
    top = tmp_path / "repo"
    shutil.copytree(CHECKOUT, top / "vendor" / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    git(top, "init", "-q")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "vendored sglang")
    return top


@pytest.mark.parametrize("where", ["subfolder", "outside"])
def test_github_paths_are_relative_to_the_repository_root(repo: Path, tmp_path: Path, monkeypatch, where):
    tree = repo / "vendor" / "sglang"
    cwd = tree / "python" if where == "subfolder" else tmp_path
    monkeypatch.chdir(cwd)
    result = invoke("check", os.path.relpath(tree, cwd), "--format", "github")
    assert result.exit_code == 1, result.stderr
    assert annotation_files(result.stdout) == {f"vendor/sglang/python/sglang/srt/{KIMI_FILE}"}
    line = class_line(tree, KIMI_FILE, KIMI_CLASS)
    assert f"::error file=vendor/sglang/python/sglang/srt/{KIMI_FILE},line={line}," in result.stdout


def test_sarif_uris_are_relative_to_the_repository_root(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("check", repo / "vendor" / "sglang", "--format", "sarif")
    assert result.exit_code == 1, result.stderr
    uris = {
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for res in json.loads(result.stdout)["runs"][0]["results"]
        for loc in res["locations"]
    }
    assert uris == {f"vendor/sglang/python/sglang/srt/{KIMI_FILE}"}


def test_github_paths_outside_git_are_relative_to_the_tree_root(root: Path, tmp_path: Path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = invoke("check", root, "--format", "github")
    assert result.exit_code == 1, result.stderr
    assert annotation_files(result.stdout) == {f"python/sglang/srt/{KIMI_FILE}"}


# --------------------------------------------------------------------------- the baseline's table


def _drop_llava_hook(root: Path) -> None:
    llava = root / SRT / "models" / "llava_like.py"
    text = llava.read_text(encoding="utf-8")
    start = text.index("    def get_embed_and_head(")
    end = text.index("    def ", start + 1)
    llava.write_text(text[:start] + text[end:], encoding="utf-8")


def test_baseline_table_marks_new_gaps_and_counts_them(root: Path, tmp_path: Path):
    baseline = tmp_path / "baseline.json"
    assert invoke("check", root, "--all", "--write-baseline", baseline).exit_code == 0
    accepted = len(json.loads(baseline.read_text(encoding="utf-8"))["entries"])
    assert accepted > 0
    _drop_llava_hook(root)
    result = invoke("check", root, "--all", "--baseline", baseline)
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.splitlines()
    marked = [line.strip() for line in lines if line.strip().startswith("new, not in the baseline:")]
    assert marked == ["new, not in the baseline: get_embed_and_head"]
    at = [i for i, line in enumerate(lines) if line.strip() == marked[0]][0]
    header = [line for line in lines[:at] if not line.startswith(" ")][-1]
    assert LLAVA_CLASS in header  # under the class it belongs to
    accepted_lines = [line.strip() for line in lines if line.strip().startswith("accepted by the baseline:")]
    assert "accepted by the baseline: get_embed_and_head, set_eagle3_layers_to_capture" in accepted_lines
    assert f"1 new, {accepted} accepted by the baseline" in result.stdout
    # one class's table: the new gap is labelled new, the accepted ones baselined
    one = invoke("check", root, "--model", "llava_like", "--baseline", baseline)
    assert one.exit_code == 1, one.stderr
    assert "✗ new        get_embed_and_head" in one.stdout
    assert "1 new, 0 accepted by the baseline" in one.stdout
    kimi = invoke("check", root, "--baseline", baseline)
    assert kimi.exit_code == 0, kimi.stderr
    assert "✗ baselined  get_embed_and_head" in kimi.stdout
    assert "0 new, 2 accepted by the baseline" in kimi.stdout


# --------------------------------------------------------------------------- --ignore


def _protocol_names(root: Path) -> list[str]:
    data = json.loads(invoke("check", root, "--format", "json").stdout)
    return [m["name"] for m in data["protocol"]]


def test_unknown_ignore_member_is_exit_2_naming_the_members(root: Path):
    members = _protocol_names(root)
    result = invoke("check", root, "--ignore", "get_embed_and_head", "--ignore", "set_emebd_and_head")
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line == (
        "eaglepatch: error: --ignore: set_emebd_and_head is not an EAGLE-3 protocol member of this tree; "
        f"its members: {', '.join(members)}"
    )
    assert result.stdout == ""
    for command in ("diff", "apply"):
        other = invoke(command, root, "--ignore", "set_emebd_and_head")
        assert other.exit_code == 2 and other.stderr == line + "\n", other.stderr
    # a known member is still taken
    ignored = json.loads(invoke("check", root, "--format", "json", "--ignore", "get_embed_and_head").stdout)
    assert "get_embed_and_head" not in [m["name"] for m in ignored["protocol"]]


def test_unknown_ignore_member_in_pyproject_names_the_file(root: Path):
    members = _protocol_names(root)
    pyproject = root / "pyproject.toml"
    pyproject.write_text('[tool.eaglepatch]\nignore = ["set_embed", "nosuch_hook"]\n', encoding="utf-8")
    result = invoke("check", root)
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line == (
        f"eaglepatch: error: {pyproject}: [tool.eaglepatch] ignore names nosuch_hook, which is not an EAGLE-3 "
        f"protocol member of this tree; its members: {', '.join(members)}"
    )


# --------------------------------------------------------------------------- the baseline file's mode


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_baseline_file_is_created_with_the_umask(root: Path, tmp_path: Path, umask: int, mode: int):
    baseline = tmp_path / "eagle3-baseline.json"
    old = os.umask(umask)
    try:
        result = invoke("check", root, "--all", "--write-baseline", baseline)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(baseline.stat().st_mode) == mode
    assert json.loads(baseline.read_text(encoding="utf-8"))["schema"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".eagle3-baseline")] == []  # no temporary left


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_rewritten_baseline_keeps_its_mode(root: Path, tmp_path: Path):
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}", encoding="utf-8")
    baseline.chmod(0o640)
    assert invoke("check", root, "--all", "--write-baseline", baseline).exit_code == 0
    assert stat.S_IMODE(baseline.stat().st_mode) == 0o640
    assert json.loads(baseline.read_text(encoding="utf-8"))["entries"]


# --------------------------------------------------------------------------- errors in the format asked for


ERRORS = {
    "no-tree": lambda root, tmp: ([tmp / "nowhere"], str(tmp / "nowhere")),
    "bad-model": lambda root, tmp: ([root, "--model", "nosuch"], "models/nosuch.py"),
    "bad-baseline": lambda root, tmp: ([root, "--baseline", tmp / "nope.json"], "--write-baseline"),
    "bad-ignore": lambda root, tmp: ([root, "--ignore", "nosuch"], "--ignore"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_json_errors_are_a_json_object(root: Path, tmp_path: Path, case):
    args, words = ERRORS[case](root, tmp_path)
    result = invoke("check", *args, "--format", "json")
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("eaglepatch: error: ") and words in line
    data = json.loads(result.stdout)
    assert data == {"schema": 2, "error": line.removeprefix("eaglepatch: error: "), "exit_code": 2}


@pytest.mark.parametrize("case", list(ERRORS))
def test_sarif_errors_are_a_tool_execution_notification(root: Path, tmp_path: Path, case):
    args, words = ERRORS[case](root, tmp_path)
    result = invoke("check", *args, "--format", "sarif")
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert words in line
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "eaglepatch"
    assert run["results"] == []
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert invocation["exitCode"] == 2
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error"
    assert note["message"]["text"] == line.removeprefix("eaglepatch: error: ")


def test_errors_naming_several_files_keep_each_line(root: Path):
    for rel, broken in (("models/gemma_like.py", "\n\ndef broken(:\n    pass\n"), ("models/olmo_like.py", "\n\nclass Broken(\n")):
        with (root / SRT / rel).open("a", encoding="utf-8") as handle:
            handle.write(broken)
    as_json = invoke("check", root, "--all", "--format", "json")
    assert as_json.exit_code == 2
    lines = [line.removeprefix("eaglepatch: error: ") for line in as_json.stderr.splitlines()]
    assert [line.split(":")[0] for line in lines] == ["models/gemma_like.py", "models/olmo_like.py"]
    assert json.loads(as_json.stdout) == {"schema": 2, "error": "\n".join(lines), "exit_code": 2}
    as_sarif = invoke("check", root, "--all", "--format", "sarif")
    assert as_sarif.exit_code == 2
    (invocation,) = json.loads(as_sarif.stdout)["runs"][0]["invocations"]
    assert [n["message"]["text"] for n in invocation["toolExecutionNotifications"]] == lines


def test_explain_json_error_is_a_json_object(root: Path):
    result = invoke("explain", "nosuch_member", root, "--format", "json")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    data = json.loads(result.stdout)
    assert data["error"] == line.removeprefix("eaglepatch: error: ") and "nosuch_member" in data["error"]
    assert data["exit_code"] == 2


def test_internal_error_with_json_is_a_json_object(root: Path, monkeypatch, capsys):
    from eaglepatch import cli

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("eaglepatch.run.analyze", broken)
    monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "1")
    monkeypatch.delenv("EAGLEPATCH_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        cli.cli_main(["check", str(root), "--format", "json"])
    assert done.value.code == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith("eaglepatch: internal error: RuntimeError: boom")
    assert json.loads(out) == {"schema": 2, "error": line.removeprefix("eaglepatch: "), "exit_code": 2}


# --------------------------------------------------------------------------- --quiet


def test_quiet_check_prints_the_findings_only(root: Path):
    loud = invoke("check", root)
    quiet = invoke("check", root, "--quiet")
    assert quiet.exit_code == loud.exit_code == 1
    assert "Review the fixes" in loud.stdout and "required member(s) missing" in loud.stdout
    assert "Review the fixes" not in quiet.stdout
    assert "required member(s) missing" not in quiet.stdout
    assert "EAGLE-3 protocol read from" not in quiet.stdout
    assert "✗ missing    get_embed_and_head" in quiet.stdout
    assert quiet.stderr == ""


def test_quiet_check_github_drops_the_totals_notice(root: Path):
    loud = invoke("check", root, "--format", "github")
    quiet = invoke("check", root, "--format", "github", "-q")
    assert quiet.exit_code == loud.exit_code == 1
    annotations = [line for line in loud.stdout.splitlines() if " file=" in line]
    assert quiet.stdout.splitlines() == annotations


def test_quiet_json_is_the_same_document(root: Path):
    assert invoke("check", root, "--format", "json", "--quiet").stdout == invoke("check", root, "--format", "json").stdout


def test_quiet_write_baseline_says_nothing(root: Path, tmp_path: Path):
    result = invoke("check", root, "--all", "--write-baseline", tmp_path / "b.json", "--quiet")
    assert result.exit_code == 0
    assert (result.stdout, result.stderr) == ("", "")
    assert (tmp_path / "b.json").is_file()


def test_quiet_apply_diff_revert(root: Path):
    assert invoke("diff", root, "--quiet").exit_code == 1
    applied = invoke("apply", root, "--quiet")
    assert applied.exit_code == 0, applied.stderr
    assert "added to" not in applied.stdout
    assert applied.stdout.startswith("diff --git ")  # the patch written is apply's output
    assert applied.stderr == ""
    loud_again = invoke("apply", root)
    assert "Nothing to do" in loud_again.stdout
    again = invoke("apply", root, "--quiet")
    assert again.exit_code == 0 and (again.stdout, again.stderr) == ("", "")
    nothing = invoke("diff", root, "--quiet")
    assert nothing.exit_code == 0 and (nothing.stdout, nothing.stderr) == ("", "")
    assert "nothing to change" in invoke("diff", root).stderr
    reverted = invoke("revert", root, "--quiet")
    assert reverted.exit_code == 0, reverted.stderr
    assert "removed from" not in reverted.stdout and reverted.stdout.startswith("diff --git ")
    none_left = invoke("revert", root, "--quiet")
    assert none_left.exit_code == 0 and (none_left.stdout, none_left.stderr) == ("", "")


def test_quiet_still_prints_errors(root: Path):
    result = invoke("check", root, "--model", "nosuch", "--quiet")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("eaglepatch: error: models/nosuch.py")


# --------------------------------------------------------------------------- --python's help


@pytest.mark.parametrize("command", ["check", "diff", "apply", "revert", "explain"])
def test_python_help_does_not_ask_for_installed(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split("--python", 1)[1].split())
    assert not text.startswith("PYTHON With --installed"), text
    assert text.startswith("PYTHON The interpreter whose sglang to target (implies --installed)"), text
