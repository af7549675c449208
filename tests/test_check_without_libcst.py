"""`check` reads with CPython's parser only: the two places that laid code out with libcst to judge it
(a learned body's line length, the names a module binds) have `ast` answers that agree with it."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from eaglepatch.read.bindings import module_bound_names
from eaglepatch.read.scopes import scope_of
from eaglepatch.read.source_cache import SourceCache
from eaglepatch.run import analyze
from eaglepatch.selection import Selection

MODULES = [
    "import os\nimport torch.utils.checkpoint\nimport numpy as np\n",
    "from a import b, c as d\nfrom e import *\n",
    "def f():\n    global g\n    g = 1\nclass K:\n    x = 1\n",
    "if TYPE_CHECKING:\n    from t import T\nelse:\n    T = None\ntry:\n    import u\nexcept ImportError as exc:\n    u = None\n",
    "for i, (j, *k) in []:\n    pass\nwith open(x) as (fh, gh):\n    pass\nwhile (n := 3):\n    break\n",
    "[y for y in range(3)]\nlam = lambda z: z\n@dec(w := 1)\ndef h():\n    pass\n",
    "match p:\n    case [q, *rest]:\n        pass\n    case {'k': v, **kw}:\n        pass\n    case Point(x=px) as pt:\n        pass\n",
]


@pytest.mark.parametrize("text", MODULES)
def test_module_bound_names_are_libcsts(tmp_path: Path, text: str) -> None:
    srt = tmp_path / "srt"
    (srt / "models").mkdir(parents=True)
    path = srt / "models" / "m.py"
    path.write_text(text)
    cache = SourceCache(srt)
    source = cache.read(path)
    assert module_bound_names(ast.parse(text)) == scope_of(cache, source, frozenset()).module_names()


@pytest.mark.integration
def test_a_learned_body_said_to_fit_does_fit(sglang_059: Path, monkeypatch) -> None:
    """`_surely_fits` is an upper bound: wherever it says a learned body of 0.5.9 fits, libcst's layout
    finds no line too long; and it says so for every body there, so `check` never lays one out."""
    import eaglepatch.analyze.synthesize as synthesize

    tree = sglang_059
    asked: list[tuple[object, object]] = []
    real = synthesize.HookLibrary._surely_fits

    def recorded(self, synthesis):
        asked.append((self, synthesis))
        return real(self, synthesis)

    monkeypatch.setattr(synthesize.HookLibrary, "_surely_fits", recorded)
    analyze(Selection(path=tree, all_models=True))
    assert asked, "0.5.9 learns bodies whose names change"
    monkeypatch.setattr(synthesize.HookLibrary, "_surely_fits", lambda self, synthesis: False)
    for library, synthesis in asked:
        assert real(library, synthesis)
        assert library._overlong(synthesis) == ""  # libcst's layout, asked directly
        run = library.resolver.run  # the tree's style is the run's: a narrower one, for this question
        library.resolver.run = replace(run, style=replace(run.style, line_length=20))  # every def outgrows it
        assert not real(library, synthesis) and library._overlong(synthesis)
        library.resolver.run = run


