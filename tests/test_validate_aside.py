"""The whole-file compile `check --all` asks of every listed module runs in a forked child beside the
reading (read/source_cache.SourceCache.validate_aside): its answers must be the ones this process would have
found, broken files included.  Run in a fresh interpreter: pytest-xdist's workers run threads, where
eaglepatch does not fork."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, sys, threading
from pathlib import Path

import pytest
from eaglepatch.read.source_cache import SourceCache

folder = Path(sys.argv[1])
paths = sorted(folder.glob("*.py"))
aside = SourceCache(folder)
forked = []
real_fork = os.fork
def fork():
    pid = real_fork()
    if pid:
        forked.append(pid)
    return pid
os.fork = fork
join = aside.validate_aside(paths)
join()
filled_before_asking = all(path in aside._validity for path in paths)
inline = SourceCache(folder)
out = {
    "forked": len(forked),
    "filled": filled_before_asking,
    "aside": {p.name: None if aside.unreadable(p) is None else str(aside.unreadable(p)) for p in paths},
    "inline": {p.name: None if inline.unreadable(p) is None else str(inline.unreadable(p)) for p in paths},
}
print(json.dumps(out))
"""


def test_the_forked_compile_answers_as_this_process_would(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for i in range(20):
        (folder / f"m{i:02}.py").write_text(f"class M{i}:\n    def f(self):\n        return {i}\n", encoding="utf-8")
    (folder / "m03.py").write_text("def broken(:\n    pass\n", encoding="utf-8")
    (folder / "m07.py").write_bytes(b"x = '\xe9'\n")  # not UTF-8
    (folder / "m11.py").write_text("def f():\n    pass\nreturn 1\n", encoding="utf-8")  # the compiler's refusal
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["forked"] == 1 and data["filled"], data
    assert data["aside"] == data["inline"]
    broken = {name: why for name, why in data["aside"].items() if why}
    assert sorted(broken) == ["m03.py", "m07.py", "m11.py"]
    assert broken["m03.py"].startswith("m03.py:1: is not valid Python")
    assert "UTF-8" in broken["m07.py"] and "'return' outside function" in broken["m11.py"]


def test_a_few_files_are_compiled_here_not_in_a_child(tmp_path):
    from eaglepatch.read.source_cache import ASIDE_MINIMUM, SourceCache

    folder = tmp_path / "models"
    folder.mkdir()
    paths = []
    for i in range(ASIDE_MINIMUM - 1):
        path = folder / f"m{i}.py"
        path.write_text("x = 1\n", encoding="utf-8")
        paths.append(path)
    cache = SourceCache(folder)
    cache.validate_aside(paths)()
    assert cache._validity == {}  # nothing answered ahead: each is compiled when asked
    assert all(cache.unreadable(p) is None for p in paths)


# --------------------------------------------------------------------------- bytecode this Python wrote


def _module(tmp_path: Path, text: str = "x = 1\n") -> Path:
    path = tmp_path / "m.py"
    path.write_text(text, encoding="utf-8")
    return path


def _pyc(path: Path, mode: str = "TIMESTAMP") -> Path:
    import py_compile

    return Path(py_compile.compile(str(path), doraise=True, invalidation_mode=py_compile.PycInvalidationMode[mode]))


@pytest.mark.parametrize("mode", ["TIMESTAMP", "CHECKED_HASH", "UNCHECKED_HASH"])
def test_bytecode_of_these_bytes_proves_them_compiled(tmp_path, mode):
    from eaglepatch.read.source_cache import compiled_by_this_python

    path = _module(tmp_path)
    assert not compiled_by_this_python(path, path.read_bytes())  # no bytecode yet
    _pyc(path, mode)
    assert compiled_by_this_python(path, path.read_bytes())


@pytest.mark.parametrize("mode", ["TIMESTAMP", "CHECKED_HASH", "UNCHECKED_HASH"])
def test_bytecode_of_other_bytes_proves_nothing(tmp_path, mode):
    import os

    from eaglepatch.read.source_cache import compiled_by_this_python

    path = _module(tmp_path)
    _pyc(path, mode)
    stat = path.stat()
    path.write_text("x = (\n", encoding="utf-8")  # the same size, broken, edited after
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))
    assert not compiled_by_this_python(path, path.read_bytes())


def test_bytecode_of_another_python_proves_nothing(tmp_path):
    from eaglepatch.read.source_cache import compiled_by_this_python

    path = _module(tmp_path)
    pyc = _pyc(path)
    data = bytearray(pyc.read_bytes())
    data[0:2] = (int.from_bytes(data[0:2], "little") ^ 1).to_bytes(2, "little")  # another magic number
    pyc.write_bytes(bytes(data))
    assert not compiled_by_this_python(path, path.read_bytes())


def test_a_file_broken_after_its_bytecode_was_written_is_still_refused(tmp_path):
    from eaglepatch.read.source_cache import SourceCache

    path = _module(tmp_path, "class M:\n    pass\n")
    _pyc(path)
    assert SourceCache(tmp_path).unreadable(path) is None
    path.write_text("class M(:\n    pass\n", encoding="utf-8")
    error = SourceCache(tmp_path).unreadable(path)
    assert error is not None and "not valid Python" in str(error)
