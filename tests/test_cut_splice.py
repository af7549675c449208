"""The codemod reads a wrapper file with its def bodies cut (`source.cut_bodies`) and its changes are
spliced back into the file's text (`source.splice_cut`): tables for both, then the bytes written on a
real release compared with the codemod run on whole files.
"""

from __future__ import annotations

import libcst as cst
import pytest

from eaglepatch.read.slices import CutText, cut_bodies, splice_cut

# (code, keep, classes, the cut text without marks, (start, end) of the file's lines each cut line stands for)
CUTS = [
    (
        "import os\n\ndef f(a):\n    x = 1\n    return x\n",
        frozenset(),
        None,
        "import os\n\ndef f(a):\n    ...\n",
        [(0, 1), (1, 2), (2, 3), (3, 5)],
    ),
    (  # a class not asked about is cut whole, even when its first member is decorated
        "class A:\n    @staticmethod\n    def s():\n        return 1\n\n\nclass B:\n    def m(self):\n        return 2\n",
        frozenset(),
        frozenset({"B"}),
        "class A:\n    ...\n\n\nclass B:\n    def m(self):\n        ...\n",
        [(0, 1), (1, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9)],
    ),
    (  # a body that starts with a decorated def is cut from the decorator
        "def f():\n    @wraps(g)\n    def inner():\n        pass\n    return inner\n",
        frozenset(),
        None,
        "def f():\n    ...\n",
        [(0, 1), (1, 5)],
    ),
    (  # a kept method stays whole; a body on the def's own line stays as it is
        "class A:\n    def keep(self):\n        return 1\n    def one(self): return 2\n",
        frozenset({("A", "keep")}),
        None,
        "class A:\n    def keep(self):\n        return 1\n    def one(self): return 2\n",
        [(0, 1), (1, 2), (2, 3), (3, 4)],
    ),
    (  # comments between the header and the body, and after it, are kept where they are
        "def f():\n    # why\n    return 1\n    # after\nx = 2\n",
        frozenset(),
        None,
        "def f():\n    # why\n    ...\n    # after\nx = 2\n",
        [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)],
    ),
]


@pytest.mark.parametrize("code, keep, classes, expected, spans", CUTS)
def test_cut_bodies_leaves_an_ellipsis_standing_for_the_lines_it_cut(code, keep, classes, expected, spans):
    cut = cut_bodies(code, keep, classes=classes)
    assert cut is not None
    assert cut.text == expected
    assert list(cut.spans) == spans
    cst.parse_module(cut.text)  # what is left is still Python
    lines = code.splitlines(keepends=True)
    kept = cut.text.splitlines(keepends=True)
    for index, (start, end) in enumerate(spans):
        if index not in cut.cut:  # a line that is not a placeholder is the file's own line
            assert (start + 1, kept[index]) == (end, lines[start])


def test_marks_name_each_placeholder_once():
    cut = cut_bodies("def f():\n    return 1\ndef g():\n    return 2\n", mark=True)
    assert cut is not None
    assert cut.text == "def f():\n    ...  # eaglepatch-cut-0\ndef g():\n    ...  # eaglepatch-cut-1\n"
    assert cut.cut == frozenset({1, 3})


@pytest.mark.parametrize(
    "code",
    [
        "x = 1  # eaglepatch-cut-0\ndef f():\n    return 1\n",  # the mark is already in the file
        "def f():\n    return 1",  # no final newline: a splice could not end the file as libcst prints it
        "x = 1\x0c\ndef f():\n    pass\n",  # str.splitlines and the parser count lines differently
        "def f(:\n",
    ],
)
def test_a_text_a_marked_cut_cannot_stand_for_is_refused(code):
    assert cut_bodies(code, mark=True) is None


BEFORE = "import os\n\n\nclass A:\n    def m(self):\n        a = 1\n        return a\n"


def _cut(text: str = BEFORE) -> CutText:
    cut = cut_bodies(text, mark=True)
    assert cut is not None
    return cut


def test_a_method_added_after_a_cut_body_lands_after_the_whole_body():
    cut = _cut()
    updated = "import os\nimport sys\n\n\nclass A:\n    def m(self):\n        ...  # eaglepatch-cut-0\n\n    def n(self):\n        return sys\n"
    assert splice_cut(BEFORE, cut, cut.text, updated) == (
        "import os\nimport sys\n\n\nclass A:\n    def m(self):\n        a = 1\n        return a\n\n    def n(self):\n        return sys\n"
    )


def test_a_change_to_a_placeholder_is_refused():
    cut = _cut()
    changed = cut.text.replace("...  # eaglepatch-cut-0", "pass")
    assert splice_cut(BEFORE, cut, cut.text, changed) is None


def test_a_placeholder_moved_elsewhere_is_refused():
    cut = _cut()
    moved = "import os\n\n\nclass A:\n    def m(self):\n        pass\n\n    def n(self):\n        ...  # eaglepatch-cut-0\n"
    assert splice_cut(BEFORE, cut, cut.text, moved) is None


def test_a_codemod_run_on_cut_wrapper_files_writes_what_it_writes_on_whole_files(sglang_latest, monkeypatch):
    """Every other file `diff --all` patches in the newest release (a whole run costs seconds a file): the
    same bytes whether the codemod reads the file cut or whole (the cut is what every run uses; whole
    is the fallback)."""
    from eaglepatch.read.slices import Bodiless
    from eaglepatch.read.source_cache import SourceCache
    from eaglepatch.rewrite import edits
    from eaglepatch.run import analyze

    runs: list[bool] = []  # per codemod run: was the file cut
    original = edits.apply_codemod

    def counting(source, delegations, module=None, style=edits.DEFAULT_STYLE, cut=None):
        runs.append(cut is not None)
        return original(source, delegations, module, style, cut)

    monkeypatch.setattr(edits, "apply_codemod", counting)
    def every_other_file(plans):
        # a file the plumbing writes is cut-parsed on the plumbed text whatever parse_bodiless does: left out
        plumbed = {p.file for plan in plans for m in plan.writes if m.writes_plumbing for p in m.writes_plumbing.pieces}
        files = sorted({plan.wrapper.path for plan in plans if plan.writes and plan.wrapper.path not in plumbed})[::2]
        return [plan for plan in plans if plan.wrapper.path in files]

    analysis = analyze(sglang_latest, all_models=True)
    cut_edits, cut_errors = edits.build_edits(analysis.cache, analysis.tree, every_other_file(analysis.plans), analysis.style)
    assert len(cut_edits) > 20 and runs.count(True) >= len(cut_edits) - 2, runs

    runs.clear()
    monkeypatch.setattr(SourceCache, "parse_bodiless", lambda self, source, classes=None: Bodiless(self.parse_whole(source).module, None))
    whole = analyze(sglang_latest, all_models=True)
    whole_edits, whole_errors = edits.build_edits(whole.cache, whole.tree, every_other_file(whole.plans), whole.style)
    assert not any(runs), "the whole run must not cut"
    assert [str(e) for e in cut_errors] == [str(e) for e in whole_errors]
    assert [(e.rel, e.updated) for e in cut_edits] == [(e.rel, e.updated) for e in whole_edits]
