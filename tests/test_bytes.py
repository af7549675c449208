"""Bytes: every newline style, BOM, form feed, U+2028, PEP 263 encoding and missing final newline.

For each byte situation a wrapper is written in it, in a real git repository, and:
  * `apply` changes nothing but the inserted lines (every original line is still there, in order);
  * `git apply` of what `diff` printed gives exactly the bytes `apply` wrote;
  * `revert` gives back the original bytes, byte for byte.
A hypothesis property then mixes newline style, BOM, final newline, where a form feed or
U+2028 stands, a latin-1 coding line and whether imports are added, through the library
calls the CLI makes (no CLI start-up per example).
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import CAPTURING_FORWARD, git, isolate_git
from hypothesis import assume, given
from hypothesis import strategies as st
from test_reliability import HOOKS, INNER, SRT, WORKER, WORKER_PY, WRAPPER, WRAPPER_PY, method_names, minimal_tree
from typer.testing import CliRunner

from eaglepatch.cli import app

RUNNER = CliRunner()
BOM = b"\xef\xbb\xbf"
LABEL = f"{SRT}/{WRAPPER}"
LINE_END = re.compile(rb"\r\n|\r|\n")

# An inner signature whose annotations need imports the wrapper lacks: revert must take them out again.
INNER_WITH_IMPORTS = '''\
"""The language model the wrapper holds."""

from typing import List, Optional


class InnerForCausalLM:
    def __init__(self, config):
        self.config = config
        self.layers_to_capture = []

    def get_embed_and_head(self):
        return ("embed", "head")

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        self.layers_to_capture = list(layer_ids or [])
''' + CAPTURING_FORWARD


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    isolate_git(monkeypatch, columns=200)


def eaglepatch(*args):
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


# --------------------------------------------------------------------------- byte situations


@dataclass(frozen=True)
class Situation:
    """How a wrapper file is laid out on disk."""

    newline: str = "\n"
    bom: bool = False
    final_newline: bool = True
    encoding: str = "utf-8"
    cookie: str = ""  # a PEP 263 line put first
    decorate: str = ""  # a name in DECORATIONS

    def render(self, text: str) -> bytes:
        text = DECORATIONS[self.decorate](text) if self.decorate else text
        if self.cookie:
            text = self.cookie + "\n" + text
        if not self.final_newline:
            text = text.rstrip("\n")
        data = text.replace("\n", self.newline).encode(self.encoding)
        return (BOM if self.bom else b"") + data


def _before(anchor: str, insert: str):
    def edit(text: str) -> str:
        assert anchor in text, anchor
        return text.replace(anchor, insert + anchor, 1)

    return edit


DECORATIONS = {
    # a page break on a line of its own, at module level and inside the class body
    "formfeed-lines": lambda t: _before("    def forward", "\f\n")(_before("EntryClass", "\f\n")(t)),
    # a form feed in the indentation of a statement (Python resets the column count after it)
    "formfeed-indent": _before("class WrapperFor", "\f"),
    # in the lines around the insertion, so they are context lines of the patch
    "formfeed-comment": _before("        return self.language_model", "        # page\fbreak\n"),
    "u2028-comment": _before("        return self.language_model", "        # line\u2028separator\n"),
    "u2028-docstring": lambda t: t.replace("forwards none", "forwards\u2028none", 1),
    "latin1-comment": _before("    def forward", "    # caf\xe9 cr\xe8me\n"),
    # one CRLF and one lone CR in an LF file: each line keeps its own ending
    "mixed-endings": lambda t: t.replace('hooks."""\n', 'hooks."""\r\n', 1).replace("InnerForCausalLM\n", "InnerForCausalLM\r", 1),
}

SITUATIONS = {
    "lf": Situation(),
    "crlf": Situation(newline="\r\n"),
    "cr": Situation(newline="\r"),
    "bom": Situation(bom=True),
    "bom-crlf": Situation(newline="\r\n", bom=True),
    "bom-cr": Situation(newline="\r", bom=True),
    "no-final-newline": Situation(final_newline=False),
    "crlf-no-final-newline": Situation(newline="\r\n", final_newline=False),
    "cr-no-final-newline": Situation(newline="\r", final_newline=False),
    "formfeed-lines": Situation(decorate="formfeed-lines"),
    "formfeed-lines-crlf": Situation(newline="\r\n", decorate="formfeed-lines"),
    "formfeed-indent": Situation(decorate="formfeed-indent"),
    "formfeed-comment": Situation(decorate="formfeed-comment"),
    "u2028-comment": Situation(decorate="u2028-comment"),
    "u2028-docstring-cr": Situation(newline="\r", decorate="u2028-docstring"),
    "latin-1": Situation(encoding="latin-1", cookie="# -*- coding: latin-1 -*-", decorate="latin1-comment"),
    "latin-1-crlf": Situation(
        newline="\r\n", encoding="latin-1", cookie="# -*- coding: latin-1 -*-", decorate="latin1-comment"
    ),
    "iso-8859-15-vim": Situation(
        encoding="iso-8859-15", cookie="# vim: set fileencoding=iso-8859-15 :", decorate="latin1-comment"
    ),
    "utf-8-cookie-bom": Situation(bom=True, cookie="# coding: utf-8", decorate="u2028-comment"),
    "mixed-endings": Situation(decorate="mixed-endings"),
    "mixed-endings-no-final-newline": Situation(final_newline=False, decorate="mixed-endings"),
}


def make_repo(root: Path, wrapper: bytes, inner: str | None = None) -> Path:
    minimal_tree(root)
    (root / SRT / WRAPPER).write_bytes(wrapper)
    if inner is not None:
        (root / SRT / INNER).write_text(inner, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tree")
    return root


def only_insertions(old: bytes, new: bytes) -> list[str]:
    """Original lines (split at \\r\\n, \\r or \\n, kept whole) that `new` dropped or changed."""
    a, b = _lines_with_ends(old), _lines_with_ends(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [repr(a[i1:i2]) for tag, i1, i2, _, _ in matcher.get_opcodes() if tag not in ("equal", "insert")]


def _lines_with_ends(data: bytes) -> list[bytes]:
    out, start = [], 0
    for match in LINE_END.finditer(data):
        out.append(data[start : match.end()])
        start = match.end()
    if start < len(data):
        out.append(data[start:])
    return out


def round_trip(root: Path, tmp_path: Path, *, imports: bool = False) -> None:
    """diff | git apply == apply; apply only inserts; revert restores the original bytes."""
    path = root / SRT / WRAPPER
    original = path.read_bytes()

    diff = eaglepatch("diff", root, "--model", "wrapper")
    assert diff.exit_code == 1, diff.output
    patch = tmp_path / "fix.patch"
    patch.write_bytes(diff.stdout_bytes)

    applied = eaglepatch("apply", root, "--model", "wrapper")
    assert applied.exit_code == 0, applied.output
    written = path.read_bytes()
    assert set(HOOKS) <= set(method_names(written)), written
    if not imports:
        assert only_insertions(original, written) == []
    assert eaglepatch("check", root, "--model", "wrapper").exit_code == 0

    git(root, "checkout", "--", LABEL)
    assert path.read_bytes() == original
    done = subprocess.run(["git", "apply", str(patch)], cwd=root, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace") + "\n" + diff.stdout_bytes.decode(errors="replace")
    assert path.read_bytes() == written, "git apply of `diff` differs from what `apply` wrote"

    reverted = eaglepatch("revert", root, "--model", "wrapper")
    assert reverted.exit_code == 0, reverted.output
    assert path.read_bytes() == original


@pytest.mark.parametrize("name", list(SITUATIONS))
def test_round_trip(tmp_path, name):
    wrapper = SITUATIONS[name].render(WRAPPER_PY)
    root = make_repo(tmp_path / "repo", wrapper)
    round_trip(root, tmp_path)


@pytest.mark.parametrize("name", ["lf", "crlf", "cr", "bom-cr", "cr-no-final-newline", "latin-1", "formfeed-lines"])
def test_round_trip_with_added_imports(tmp_path, name):
    wrapper = SITUATIONS[name].render(WRAPPER_PY)
    root = make_repo(tmp_path / "repo", wrapper, inner=INNER_WITH_IMPORTS)
    round_trip(root, tmp_path, imports=True)
    # the import lines are the only other change, and they are new lines
    path = root / SRT / WRAPPER
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    assert only_insertions(wrapper, path.read_bytes()) == []


def test_cr_file_keeps_its_last_newline(tmp_path):
    wrapper = SITUATIONS["cr"].render(WRAPPER_PY)
    root = make_repo(tmp_path / "repo", wrapper)
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    written = (root / SRT / WRAPPER).read_bytes()
    assert written.endswith(b"]\r") and b"\n" not in written


@pytest.mark.parametrize("name", ["latin-1", "iso-8859-15-vim"])
def test_encoded_wrapper_is_written_back_in_its_own_encoding(tmp_path, name):
    situation = SITUATIONS[name]
    root = make_repo(tmp_path / "repo", situation.render(WRAPPER_PY))
    assert eaglepatch("apply", root, "--model", "wrapper").exit_code == 0
    written = (root / SRT / WRAPPER).read_bytes()
    assert "# caf\xe9 cr\xe8me".encode(situation.encoding) in written
    assert b"\xc3" not in written, "written as UTF-8"


def test_latin1_consumer_is_read_not_skipped(tmp_path):
    root = minimal_tree(tmp_path / "tree")
    consumer = "# -*- coding: latin-1 -*-\n# r\xe9sum\xe9 of the EAGLE worker\n" + WORKER_PY
    (root / SRT / WORKER).write_bytes(consumer.encode("latin-1"))
    result = eaglepatch("check", root, "--model", "wrapper", "--format", "json")
    assert result.exit_code == 1, result.output
    assert "skipped" not in result.output
    assert set(HOOKS) <= {m["name"] for m in json.loads(result.stdout)["models"][0]["missing"]}


def test_cookie_that_disagrees_with_the_bom_is_an_error(tmp_path):
    root = minimal_tree(tmp_path / "tree")
    (root / SRT / WRAPPER).write_bytes(BOM + b"# coding: latin-1\n" + WRAPPER_PY.encode())
    result = eaglepatch("check", root, "--model", "wrapper")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"eaglepatch: error: {WRAPPER}:") and "latin-1" in line, line


# --------------------------------------------------------------------------- property


def _library_round_trip(root: Path) -> None:
    """The same three promises, through the calls the CLI makes (fast enough for many examples)."""
    from eaglepatch.read.source_cache import SourceCache
    from eaglepatch.rewrite.edits import build_edits, revert_edits
    from eaglepatch.rewrite.preview import render_patch
    from eaglepatch.rewrite.write import write_edit
    from eaglepatch.run import analyze

    path = root / SRT / WRAPPER
    original = path.read_bytes()
    analysis = analyze(root, ["wrapper"])
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    assert not errors, errors
    (edit,) = [e for e in edits if e.changed]
    patch = render_patch([edit], root)
    assert isinstance(patch, bytes)
    write_edit(edit, analysis.tree.srt)
    written = path.read_bytes()
    assert only_insertions(original, written) == []
    assert set(HOOKS) <= set(method_names(written))

    path.write_bytes(original)
    done = subprocess.run(["git", "apply", "-"], cwd=root, input=patch, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert path.read_bytes() == written

    cache = SourceCache(analysis.tree.srt)
    (undo,), errors, kept = revert_edits(cache, analysis.tree, ["wrapper"])
    assert not errors and not kept
    assert undo.updated == original


ODD_CHARACTERS = st.sampled_from(["\f", "\u2028"])
PLACES = st.sampled_from(["own-line-module", "own-line-class", "comment", "docstring", "indent"])


def _decorate(text: str, char: str, place: str) -> str:
    if place == "own-line-module":
        return _before("EntryClass", char + "\n")(text) if char == "\f" else _before("EntryClass", f"#{char}\n")(text)
    if place == "own-line-class":
        return _before("    def forward", char + "\n" if char == "\f" else f"    #{char}\n")(text)
    if place == "comment":
        return _before("        return self.language_model", f"        # a{char}b\n")(text)
    if place == "docstring":
        return text.replace("forwards none", f"forwards{char}none", 1)
    return _before("class WrapperFor", char)(text) if char == "\f" else _before("class WrapperFor", f"#{char}\n")(text)


@given(
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    final_newline=st.booleans(),
    char=ODD_CHARACTERS,
    place=PLACES,
    latin1=st.booleans(),
    imports=st.booleans(),
)
def test_property_any_bytes_round_trip(tmp_path_factory, newline, bom, final_newline, char, place, latin1, imports):
    assume(not latin1 or (not bom and char == "\f"))  # latin-1 holds no U+2028, and a BOM says UTF-8
    text = _decorate(WRAPPER_PY, char, place)
    if latin1:
        text = DECORATIONS["latin1-comment"](text)
    situation = Situation(
        newline=newline,
        bom=bom,
        final_newline=final_newline,
        encoding="latin-1" if latin1 else "utf-8",
        cookie="# -*- coding: latin-1 -*-" if latin1 else "",
    )
    root = tmp_path_factory.mktemp("prop")
    minimal_tree(root)
    (root / SRT / WRAPPER).write_bytes(situation.render(text))
    if imports:
        (root / SRT / INNER).write_text(INNER_WITH_IMPORTS, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    try:
        _library_round_trip(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
