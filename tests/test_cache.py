"""The result cache of `check` (patcher/cache.py): answers reused only for the same question on the
same files, never a stale one; and a start-up that imports nothing heavy before it is needed.

The CLI runs in-process (typer.testing.CliRunner).  A cache hit is proven by making the analysis
impossible (eaglepatch.run.analyze raises) and still getting the answer.  Fixture files get an
mtime an hour old, as files in a real tree have: an answer read from files modified in the last
two seconds is not stored (their mtime may not change on the next edit).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eaglepatch import cache
from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]
SGLANG = REPO_ROOT / "fixtures" / "checkout" / "python" / "sglang"
KIMI = "models/kimi_k25.py"
RUNNER = CliRunner()
HOUR_AGO = time.time() - 3600

FORWARDS = '''
    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()

    def set_embed_and_head(self, embed, head):
        return self.language_model.set_embed_and_head(embed, head)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        return self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = [KimiK25ForConditionalGeneration]'''


def age(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        os.utime(path, (HOUR_AGO, HOUR_AGO))


@pytest.fixture
def srt(tmp_path, monkeypatch) -> Path:
    """A copy of the fixture srt/ with old mtimes, the cache on, in its own folder."""
    target = tmp_path / "sglang"
    shutil.copytree(SGLANG, target, ignore=shutil.ignore_patterns("__pycache__"))
    age(target)
    monkeypatch.delenv("EAGLEPATCH_NO_CACHE", raising=False)
    monkeypatch.setenv("EAGLEPATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return target / "srt"


def run(*args: str):
    return RUNNER.invoke(app, ["check", *args])


def entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "check").glob("*.json"))


@pytest.fixture
def no_analysis(monkeypatch):
    """From here on a run that is not answered from the cache fails loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("analyze() ran: the answer did not come from the cache")

    def arm():
        monkeypatch.setattr("eaglepatch.run.analyze", refuse)

    return arm


@pytest.mark.parametrize("form", ["json", "table", "github", "sarif"])
def test_second_run_is_answered_from_the_cache(srt, tmp_path, no_analysis, form):
    first = run("--format", form, str(srt))
    assert first.exit_code == 1, first.output
    assert len(entries(tmp_path)) == 1
    no_analysis()
    second = run("--format", form, str(srt))
    assert (second.exit_code, second.stdout) == (first.exit_code, first.stdout)


def test_editing_one_file_changes_the_answer(srt, tmp_path):
    before = json.loads(run("--format", "json", str(srt)).stdout)
    assert {m["name"] for m in before["models"][0]["missing"]} >= {"get_embed_and_head"}
    wrapper = srt / KIMI
    wrapper.write_text(wrapper.read_text().replace("\n\nEntryClass = [KimiK25ForConditionalGeneration]", FORWARDS))
    os.utime(wrapper, (HOUR_AGO + 60, HOUR_AGO + 60))  # an edit in the past: still not the same mtime
    after = run("--format", "json", str(srt))
    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout)["models"][0]["missing"] == []


def test_same_size_edit_with_a_new_mtime_is_a_miss(srt, tmp_path):
    """Only the mtime tells this edit apart: the size is the same."""
    worker = srt / "speculative" / "eagle_worker.py"
    first = run("--format", "json", str(srt))
    text = worker.read_text()
    assert "get_embed_and_head" in text
    worker.write_text(text.replace("get_embed_and_head", "get_embed_and_hxad"))
    os.utime(worker, (HOUR_AGO + 60, HOUR_AGO + 60))
    second = run("--format", "json", str(srt))
    names = lambda out: {m["name"] for m in json.loads(out)["protocol"]}  # noqa: E731
    assert "get_embed_and_hxad" not in names(first.stdout)
    assert "get_embed_and_hxad" in names(second.stdout)


def test_a_new_model_file_changes_the_all_answer(srt, tmp_path):
    before = json.loads(run("--all", "--format", "json", str(srt)).stdout)
    text = (srt / KIMI).read_text().replace("KimiK25ForConditionalGeneration", "KimiCopyForConditionalGeneration")
    (srt / "models" / "kimi_copy.py").write_text(text)
    age(srt)
    after = json.loads(run("--all", "--format", "json", str(srt)).stdout)
    classes = lambda report: {m["class"] for m in report["models"]}  # noqa: E731
    assert classes(after) - classes(before) == {"KimiCopyForConditionalGeneration"}


def test_removing_a_file_changes_the_answer(srt, tmp_path):
    run("--all", "--format", "json", str(srt))
    (srt / KIMI).unlink()
    age(srt)
    after = json.loads(run("--all", "--format", "json", str(srt)).stdout)
    assert "KimiK25ForConditionalGeneration" not in {m["class"] for m in after["models"]}


def test_each_question_has_its_own_answer(srt, tmp_path, no_analysis):
    """Selection, format and [tool.eaglepatch] are part of the key."""
    one = run("--format", "json", str(srt))
    every = run("--all", "--format", "json", str(srt))
    ignored = run("--format", "json", "--ignore", "get_embed_and_head", str(srt))
    assert len(entries(tmp_path)) == 3
    assert json.loads(one.stdout)["models"] != json.loads(every.stdout)["models"]
    assert "get_embed_and_head" not in {m["name"] for m in json.loads(ignored.stdout)["models"][0]["missing"]}
    pyproject = srt.parent.parent / "pyproject.toml"
    pyproject.write_text('[tool.eaglepatch]\nignore = ["set_embed_and_head"]\n')
    configured = run("--format", "json", str(srt.parent.parent))
    missing = {m["name"] for m in json.loads(configured.stdout)["models"][0]["missing"]}
    assert "set_embed_and_head" not in missing and "get_embed_and_head" in missing


def test_a_formatter_configuration_that_appears_changes_the_answer(srt, tmp_path):
    """black's width decides which learned bodies fit (patcher/read/style.py): its files are dependencies."""
    first = json.loads(run("--format", "json", str(srt)).stdout)
    assert not [w for w in first["warnings"] if "force_single_line" in w]
    (srt / ".isort.cfg").write_text("[settings]\nprofile=black\nforce_single_line=true\n")
    age(srt)
    second = json.loads(run("--format", "json", str(srt)).stdout)
    assert [w for w in second["warnings"] if "force_single_line" in w]


def test_a_baseline_that_changes_changes_the_answer(srt, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert run("--write-baseline", str(baseline), str(srt)).exit_code == 0
    assert not entries(tmp_path)  # --write-baseline writes a file: never answered from the cache
    os.utime(baseline, (HOUR_AGO, HOUR_AGO))
    assert run("--baseline", str(baseline), str(srt)).exit_code == 0
    baseline.write_text(json.dumps({**json.loads(baseline.read_text()), "entries": []}))
    os.utime(baseline, (HOUR_AGO + 60, HOUR_AGO + 60))
    assert run("--baseline", str(baseline), str(srt)).exit_code == 1


@pytest.mark.parametrize("how", ["flag", "env"])
def test_no_cache_neither_reads_nor_writes(srt, tmp_path, monkeypatch, how):
    args = ["--no-cache"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "1")
    run(*args, str(srt))
    assert not entries(tmp_path)
    monkeypatch.delenv("EAGLEPATCH_NO_CACHE", raising=False)
    run(str(srt))
    [entry] = entries(tmp_path)
    entry.write_text(entry.read_text().replace("KimiK25ForConditionalGeneration", "SomethingElseEntirely"))
    if how == "env":
        monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "1")
    fresh = run(*args, str(srt))
    assert "KimiK25ForConditionalGeneration" in fresh.stdout and "SomethingElseEntirely" not in fresh.stdout


def test_env_value_zero_keeps_the_cache_on(srt, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLEPATCH_NO_CACHE", "0")
    run(str(srt))
    assert len(entries(tmp_path)) == 1


@pytest.mark.parametrize(
    "garbage",
    [b"", b"{not json", b"\xff\xfe", b"[]", b'{"key": 1}', b'"a string"'],
    ids=["empty", "truncated", "binary", "list", "wrong-types", "string"],
)
def test_a_corrupt_entry_is_ignored_and_replaced(srt, tmp_path, garbage):
    first = run("--format", "json", str(srt))
    [entry] = entries(tmp_path)
    entry.write_bytes(garbage)
    second = run("--format", "json", str(srt))
    assert (second.exit_code, second.stdout) == (first.exit_code, first.stdout)
    assert json.loads(entry.read_bytes())["stdout"] == first.stdout


def test_a_foreign_entry_is_ignored(srt, tmp_path):
    """An entry whose key or dependencies are another question's is never used, even under this name."""
    first = run("--format", "json", str(srt))
    [entry] = entries(tmp_path)
    data = json.loads(entry.read_text())
    for change in ({"key": data["key"].replace('"json"', '"table"')}, {"deps": "0" * 40}, {"exit": 7}):
        entry.write_text(json.dumps({**data, **change, "stdout": "forged\n"}))
        again = run("--format", "json", str(srt))
        assert again.stdout == first.stdout


def test_errors_and_fresh_files_are_not_stored(srt, tmp_path):
    assert run("--model", "no_such_model", str(srt)).exit_code == 2
    assert not entries(tmp_path)
    (srt / "models" / "just_written.py").write_text("x = 1\n")  # modified now: racy
    assert run(str(srt)).exit_code == 1
    assert not entries(tmp_path)


def test_an_unwritable_cache_folder_is_no_error(srt, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EAGLEPATCH_CACHE_DIR", str(blocker / "cache"))
    result = run(str(srt))
    assert result.exit_code == 1 and "KimiK25ForConditionalGeneration" in result.stdout


def test_cache_folder_follows_the_platform(monkeypatch, tmp_path):
    monkeypatch.delenv("EAGLEPATCH_CACHE_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "eaglepatch"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the XDG spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "eaglepatch"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache.cache_dir() == tmp_path / "home" / "Library" / "Caches" / "eaglepatch"
    monkeypatch.setenv("EAGLEPATCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_concurrent_writers_never_leave_half_an_entry(tmp_path, srt):
    """Entries are renamed into place: a reader sees a whole entry (of one writer) or none."""
    deps = cache.dependencies(srt, [])
    entry = cache.ResultCache({"q": 1}, deps, folder=tmp_path / "c")
    assert entry.safe
    outputs = [f"answer {n}\n" * 20_000 for n in range(4)]
    seen, errors = [], []

    def write(text):
        for _ in range(15):
            if not entry.store(1, text):
                errors.append("store failed")

    def read():
        for _ in range(200):
            hit = entry.lookup()
            if hit is not None:
                seen.append(hit[1])

    threads = [threading.Thread(target=write, args=(text,)) for text in outputs] + [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(text in outputs for text in seen)
    assert entry.lookup()[1] in outputs
    assert not list((tmp_path / "c" / "check").glob(".*.tmp"))


# -- start-up ---------------------------------------------------------------------------------------

PROBE = """\
import sys
from eaglepatch.launch import main
sys.argv = ["eaglepatch", *sys.argv[1:]]
code = main()  # the exit status, returned: main(argv=None) -> int
heavy = sorted(m for m in ("libcst", "pydantic", "rich", "git") if m in sys.modules)
sys.stderr.write("HEAVY=" + ",".join(heavy) + f" EXIT={code}\\n")
"""


def probe(*args: str, env: dict | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
    )
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["check", "--help"]])
def test_help_and_version_import_nothing_heavy(args):
    assert probe(*args) == "HEAVY= EXIT=0"


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eaglepatch", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
    )


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["check", "--help"], ["explain", "-h"]])
def test_help_from_the_cache_is_typers_own_text(tmp_path, args):
    """--help is rendered by typer once and then read back; a narrower terminal is another question."""
    env = {"EAGLEPATCH_CACHE_DIR": str(tmp_path / "cache"), "EAGLEPATCH_NO_CACHE": "", "COLUMNS": "100"}
    fresh = cli(*args, env={**env, "EAGLEPATCH_NO_CACHE": "1"})
    assert fresh.returncode == 0 and "Usage:" in fresh.stdout
    own_modules_settled = all(time.time() - os.stat(REPO_ROOT / f[0]).st_mtime > 2.5 for f in cache.own_files())
    for _ in range(2):
        again = cli(*args, env=env)
        assert (again.returncode, again.stdout, again.stderr) == (0, fresh.stdout, fresh.stderr)
    if own_modules_settled:  # an eaglepatch module edited seconds ago is racy: nothing is stored then
        assert list((tmp_path / "cache" / "help").glob("*.json"))
    narrow = cli(*args, env={**env, "COLUMNS": "50"})
    assert narrow.stdout == cli(*args, env={**env, "COLUMNS": "50", "EAGLEPATCH_NO_CACHE": "1"}).stdout
    assert narrow.stdout != fresh.stdout


def test_version_without_typer():
    from eaglepatch import __version__

    done = cli("--version", env={})
    assert (done.returncode, done.stdout) == (0, f"eaglepatch {__version__}\n")


def test_a_cache_hit_imports_neither_libcst_nor_pydantic(srt, tmp_path):
    env = {"EAGLEPATCH_CACHE_DIR": str(tmp_path / "cache"), "EAGLEPATCH_NO_CACHE": ""}
    assert probe("check", "--format", "json", str(srt), env=env).endswith("EXIT=1")
    assert probe("check", "--format", "json", str(srt), env=env) == "HEAVY= EXIT=1"


def test_the_fingerprint_covers_every_module_of_eaglepatch():
    """An edit to any of eaglepatch's modules, in a stage folder (patcher/read/, ...) too, is a miss."""
    listed = {name for name, *_ in cache.own_files()}
    on_disk = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "patcher").rglob("*.py")}
    on_disk |= {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "codemods").glob("*.py")}
    assert "patcher/read/source_cache.py" in on_disk
    assert listed == on_disk
