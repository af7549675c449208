"""The plumbing proof (engines/sglang/pipeline.py: Plumber.prove) runs the codemod on whole files with
libcst: the costliest step of `check --all`.  The adoption rounds plan every class again; a plan is a
frozen record and the tree does not change within a run, so each is proven once."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import eaglepatch.codemods.add_plumbing as add_plumbing  # prove imports apply_plumbing from it at call time
from eaglepatch.run import analyze
from eaglepatch.selection import Selection

CHECKOUT = Path(__file__).resolve().parent.parent / "fixtures" / "checkout"


def test_each_plumbing_plan_is_written_once_a_run(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    calls: Counter = Counter()
    real = add_plumbing.apply_plumbing

    def counted(text, pieces, *args, **kwargs):
        calls[(text, repr(pieces))] += 1
        return real(text, pieces, *args, **kwargs)

    monkeypatch.setattr(add_plumbing, "apply_plumbing", counted)
    analyze(Selection(path=tree, all_models=True))
    assert calls, "the fixture tree has a class whose plumbing is proven"
    assert max(calls.values()) == 1, [pieces[:80] for (_, pieces), n in calls.items() if n > 1]
