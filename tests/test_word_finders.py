"""Stage tables for the text scans that stand in for look-behind regexes, and for ClassView: each
answer must equal what the slower reference (the regex, or libcst over the whole module) gives."""

from __future__ import annotations

import re

import libcst as cst
import pytest

from eaglepatch.analyze.algorithms import _Corpus, _settings
from eaglepatch.read.slices import ClassView
from eaglepatch.read.text import WordFinder

TEXTS = [
    "if is_eagle(x): pass",
    "x.is_eagle() and not self.is_eagle3",
    "is_eagle",
    "_is_eagle is_eagle_ 1is_eagle éis_eagle is_eagleé",
    "EAGLE3 = EAGLE; EAGLE3EAGLE EAGLE.EAGLE3",
    "",
]
WORDS = [("is_eagle",), ("EAGLE", "EAGLE3"), ("is_eagle", "is_eagle3"), ()]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("words", WORDS)
def test_word_finder_finds_what_the_look_behind_regex_finds(text, words):
    finder = WordFinder(words)
    if words:
        pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, sorted(set(words)))) + r")(?!\w)")
        bytes_pattern = re.compile(rb"(?<!\w)(?:" + b"|".join(re.escape(w.encode()) for w in sorted(set(words))) + rb")(?!\w)")
        assert finder.offsets(text) == [m.start() for m in pattern.finditer(text)]
        assert finder.search(text) == (pattern.search(text) is not None)
        data = text.encode()
        assert finder.byte_offsets(data) == [m.start() for m in bytes_pattern.finditer(data)]
    else:
        assert finder.offsets(text) == [] and not finder.search(text)


SETTINGS = [
    b"flag = True\n",
    b"flag: bool = spec.is_eagle()\nother = 1\n",
    b"x = flag = 3\n",  # inside the value of the setting before
    b"f(flag=False, flag_two=x)\n",
    b"flag == 3\nflagged = 2\nself.flag=1\n",
    b"a_flag = 1\n1flag = 2\n",
    b"flag_two = 1; flag = 2\n",
]


@pytest.mark.parametrize("data", SETTINGS)
def test_settings_are_what_the_look_behind_regex_found(data):
    names = ["flag", "flag_two"]
    pattern = re.compile(rb"(?<![\w])(" + b"|".join(re.escape(n.encode()) for n in names) + rb")[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*([^\n,)]*)")
    expected = [(m.start(), m.group(1).decode(), m.group(2)) for m in pattern.finditer(data)]
    assert list(_settings(data, names)) == expected


@pytest.mark.parametrize("identifier", [b"is_eagle", b"EAGLE", b"eagle3", b"x1", b"absent"])
def test_corpus_holds_an_identifier_where_it_is_a_whole_word(tmp_path, identifier):
    files = {
        tmp_path / "a.py": b"if spec.is_eagle(): EAGLE3 = 1\n",
        tmp_path / "b.py": b"x = 1is_eagle + EAGLE\n",
        tmp_path / "c.py": b"y = ax1 + eagle3x\n",
        tmp_path / "d.py": b"x1 = is_eagle_not\n",
    }
    whole = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(identifier) + rb"(?![A-Za-z0-9_])")
    expected = frozenset(path for path, data in files.items() if whole.search(data))
    assert _Corpus(files).with_identifier(identifier) == expected


MODULE = '''\
import torch


def helper(x):
    return x


@register
class Kept:
    def forward(self, x):
        y = helper(x)
        return y

    # a comment in the class


class Other:
    def forward(self, x):
        return x
'''


def _add_line(code: str, keep: set[str]) -> str:
    class AddFirst(cst.CSTTransformer):
        """A statement put first in each method of the classes kept (a codemod that edits only those)."""

        inside = 0

        def leave_ClassDef(self, original_node, updated_node):
            self.inside -= 1
            return updated_node

        def leave_FunctionDef(self, original_node, updated_node):
            if not self.inside or not isinstance(updated_node.body, cst.IndentedBlock):
                return updated_node
            return updated_node.with_changes(body=updated_node.body.with_changes(body=[cst.parse_statement("z = 0\n"), *updated_node.body.body]))

        def visit_ClassDef(self, node):
            self.inside += 1
            return node.name.value in keep

        def visit_FunctionDef(self, node):
            return False

    return cst.parse_module(code).visit(AddFirst()).code


@pytest.mark.parametrize(
    ("code", "keep", "viewed"),
    [
        (MODULE, {"Kept"}, True),
        (MODULE, {"Kept", "Other"}, True),
        (MODULE.replace("\n", "\r\n"), {"Other"}, True),
        (MODULE, {"Absent"}, False),  # nothing to keep: the whole text
        ("if True:\n  x = 1\nclass Kept:\n    def f(self):\n        return 1\n", {"Kept"}, False),  # its first indent differs
        ("class Kept:\n    def f(self):\n        return 1", {"Kept"}, True),  # no final newline
        ("def broken(:\n", {"Kept"}, False),
    ],
)
def test_class_view_edits_as_libcst_over_the_whole_module(code, keep, viewed):
    view = ClassView.of(code, lambda node: node.name in keep)
    assert bool(view.spans) == viewed
    viewed_lines, code_lines = view.text.splitlines(), code.splitlines()
    assert all(line == code_lines[view.original_line(n) - 1] for n, line in enumerate(viewed_lines, 1))  # each line where it stood
    if view.spans:
        assert len(viewed_lines) == sum(last - first + 1 for first, last in view.spans)  # the classes kept, nothing else
    if code.startswith("def broken"):
        return
    assert view.splice(_add_line(view.text, keep)) == _add_line(code, keep)
