"""What a module binds, read off its statements (`scopes.read_statements`), against libcst's ScopeProvider.

The proof stage asks which names a module and its class bodies bind, and with what statement. It
reads that off the statements of the module with its function bodies left out; the ScopeProvider
is the reference (and the fallback for what the reading does not cover).  Tables first, then
every source file of the newest release.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from eaglepatch.read.scopes import ModuleScope, read_statements, read_with_libcst, reduced


def _shape(read) -> dict:
    """Comparable form of a reading: for the module and each class it keeps, name -> sorted (kind of
    binding node, its code, imported, where it is placed, the value assigned); the classes with their
    statement; the star imports with their context."""

    def code(node) -> str:
        return cst.Module(body=[]).code_for_node(node).strip()[:80] if node is not None else ""

    def table(names) -> dict:
        return {
            name: sorted((type(a.node).__name__, code(a.node), a.imported, read.where.get(id(a.node)), code(read.values.get(id(a.node)))) for a in assigned)
            for name, assigned in names.items()
        }

    return {
        "module": table(read.module_names),
        "classes": {name: (index, table(read.class_names.get(id(node), {}))) for name, (node, index) in read.classes.items()},
        "stars": [(code(node), context) for node, context in read.stars],
    }


def _both(code: str):
    module = reduced(cst.parse_module(textwrap.dedent(code)), None)
    return read_statements(module, code), read_with_libcst(module)


BOUND = [
    ("import os.path\nimport a.b.c as d\nfrom x import y as z, w\nfrom . import q\nfrom m import *\n", {"os.path", "os", "d", "z", "w", "q"}),
    ("a, (b, *c) = 1, (2, 3)\n[d, e] = f = g.h = i[0] = 5\nj: int\nk: int = 1\nl += 1\n", {"a", "b", "c", "d", "e", "f", "j", "k", "l"}),
    ("for a, b in x:\n    c = 1\nelse:\n    d = 2\nwhile x:\n    e = 1\nelse:\n    f = 1\n", {"a", "b", "c", "d", "e", "f"}),
    ("try:\n    import a\nexcept E as b:\n    c = 1\nexcept F:\n    pass\nelse:\n    d = 1\nfinally:\n    e = 1\n", {"a", "b", "c", "d", "e"}),
    ("with x as a, y as (b, c), z:\n    d = [e for e in range(3)]\n", {"a", "b", "c", "d"}),
    ("if TYPE_CHECKING:\n    from t import T\nelif x:\n    U = 1\nelse:\n    V = 2\n", {"T", "U", "V"}),
    ("def f(a=1, *b, **c):\n    inner = 1\nasync def g(): ...\nclass K(Base, metaclass=M):\n    x = 1\n    def m(self): y = 2\n", {"f", "g", "K"}),
    ("del a\nassert b\nprint(c)\nlam = lambda d: d\n", {"lam"}),
]


@pytest.mark.parametrize("code, names", BOUND)
def test_module_names_are_the_scope_providers(code, names):
    collected, provider = _both(code)
    assert collected is not None
    assert set(collected.module_names) == names
    assert _shape(collected) == _shape(provider)


CLASS_BODIES = [
    "class A:\n    import os.path\n    x, y = 1, 2\n    def m(self): pass\n    class Inner:\n        z = 1\n    if c:\n        w = 1\n",
    "if c:\n    class A:\n        x = 1\nelse:\n    class A:\n        y = 1\n",
    "class A: x = 1; y = 2\n",
    "try:\n    from a import *\nexcept ImportError:\n    pass\nif not TYPE_CHECKING:\n    from b import *\nelse:\n    from c import C\nclass A:\n    if TYPE_CHECKING:\n        T = int\n    with x as w:\n        u: int = 2\n",
    "try:\n    class A:\n        for i in r: pass\nexcept E: pass\n",
]


@pytest.mark.parametrize("code", CLASS_BODIES)
def test_class_bodies_are_the_scope_providers(code):
    collected, provider = _both(code)
    assert collected is not None and collected.classes
    assert _shape(collected) == _shape(provider)


@pytest.mark.parametrize(
    "code",
    ["global a\na = 1\n", "match x:\n    case [a, *b]:\n        c = 1\n", "class A:\n    global g\n    g = 1\n", "if (a := f()):\n    pass\n"],
)
def test_what_the_reading_does_not_cover_is_left_to_the_scope_provider(code):
    collected, _provider = _both(code)
    assert collected is None


def test_a_walrus_anywhere_in_the_text_takes_the_scope_provider():
    """`:=` binds in the enclosing scope from inside any expression: the ScopeProvider reads those
    files; the answer is the same either way."""
    code = "x = [y := 1, 2]\nclass A:\n    z = (w := 3)\n"
    scope = ModuleScope(cst.parse_module(code), "sglang.srt.models.walrus", text=code)
    assert {"x", "y", "A"} <= scope.module_names()
    assert {"z", "w"} <= scope.class_names("A")


def reading_against_scope_provider(path: Path) -> str | None:
    """"same" or "differs": the statement reading of `path`, reduced as the proof stage reduces it
    (function bodies out, every class body kept), against the ScopeProvider's; "provider" when the
    reading leaves the file to the ScopeProvider; None when libcst cannot parse it.
    (tools/scopes_against_libcst.py runs this over whole releases.)"""
    text = path.read_text(encoding="utf-8")
    try:
        module = reduced(cst.parse_module(text), None)
    except cst.ParserSyntaxError:
        return None
    read = read_statements(module, text)
    if read is None:
        return "provider"
    return "same" if _shape(read) == _shape(read_with_libcst(module)) else "differs"


def test_model_files_of_the_newest_release_bind_what_the_scope_provider_says(sglang_latest: Path):
    """Every third file of the release's models/ (where the proof stage reads wrappers and inner
    models; the ScopeProvider costs a tenth of a second a file, so the suite takes a sample: the same
    comparison over every source file of 0.5.9 and 0.5.23, 2,862 files, found no difference),
    reduced as that stage reduces it (function bodies out, every class body kept): the same
    bindings, node for node, in every scope."""
    compared = fell_back = 0
    for path in sorted((sglang_latest / "sglang" / "srt" / "models").rglob("*.py"))[::3]:
        outcome = reading_against_scope_provider(path)
        if outcome == "provider":
            fell_back += 1
        elif outcome is not None:
            assert outcome == "same", path
            compared += 1
    assert compared > 70
    assert fell_back < compared / 10


# --------------------------------------------------------------------------- the patched text, its other bodies cut


def _answers(scope: ModuleScope) -> dict:
    """Everything a ModuleScope answers, comparable: every binding of the module and of each class."""

    def row(binding) -> tuple:
        value = cst.Module(body=[]).code_for_node(binding.value) if binding.value is not None else None
        return (binding.name, binding.qualified, binding.context, binding.statement, value, binding.spec, binding.own)

    return {
        "module": {name: [row(b) for b in scope.module_bindings(name)] for name in sorted(scope.module_names())},
        "classes": {
            cls: (scope.class_statement(cls), {name: [row(b) for b in scope.class_bindings(cls, name)] for name in sorted(scope.class_names(cls))})
            for cls in sorted(scope.classes)
        },
        "stars": scope.star_imports,
        "future": scope.future_annotations,
        "global": sorted(scope.rebound_by_functions),
    }


CUT_BODIES = [
    ("def f(a,\n      b):\n    '''doc'''\n    return a\n\n\nx = 1\n", frozenset(), "def f(a,\n      b):\n    ...\n\n\nx = 1\n"),
    (
        "class A:\n    def m(self): return 1\n    async def n(self):\n        # why\n        def inner():\n            pass\n        return inner\n",
        frozenset(),
        "class A:\n    def m(self): return 1\n    async def n(self):\n        # why\n        ...\n",
    ),
    ("@dec\ndef f():\n    global G\n    G = 1\nif x:\n    def g():\n        pass\n", frozenset(), "@dec\ndef f():\n    ...\nif x:\n    def g():\n        ...\n"),
    ("def f():\r\n    return 1\r\n", frozenset(), "def f():\r\n    ...\r\n"),
    (
        "try:\n    def f():\n        return 1\nexcept E:\n    def g():\n        return 2\nmatch x:\n    case 1:\n        def h():\n            return 3\n",
        frozenset(),
        "try:\n    def f():\n        ...\nexcept E:\n    def g():\n        ...\nmatch x:\n    case 1:\n        def h():\n            ...\n",
    ),
    (  # the generated methods stay whole, wherever in their class's body; a def of that name elsewhere does not
        "class A:\n    def hook(self):\n        return 1\n    if c:\n        def hook(self):\n            return 2\n    class B:\n        def hook(self):\n            return 3\ndef hook():\n    return 4\n",
        frozenset({("A", "hook")}),
        "class A:\n    def hook(self):\n        return 1\n    if c:\n        def hook(self):\n            return 2\n    class B:\n        def hook(self):\n            ...\ndef hook():\n    ...\n",
    ),
]


@pytest.mark.parametrize("code, keep, expected", CUT_BODIES)
def test_function_bodies_but_the_kept_methods_are_cut_to_an_ellipsis(code, keep, expected):
    from eaglepatch.read.slices import parse_cut

    found = parse_cut(code, keep)
    assert found is not None
    module, cut = found
    assert module.code == cut.text == expected


@pytest.mark.parametrize("code", ["def f(:\n", "x = 1\x0c\ndef f():\n    pass\n"])
def test_what_cannot_be_cut_safely_is_left_to_a_whole_parse(code):
    from eaglepatch.read.slices import parse_cut

    assert parse_cut(code, frozenset()) is None


def test_a_file_with_its_bodies_cut_answers_as_the_whole_file_on_a_release(sglang_latest: Path):
    """The proof stage's scope of a patched file, read with every body but the generated methods' cut,
    and the bodies of the classes it does not patch, answers every question the whole file's answers, the
    same way, and keeps the generated methods as written: every sixth file of models/, each top-level class
    in turn kept with its first method (`global` inside bodies is read from the text; a `:=` inside a cut
    body leaves the reading to the statements, where the whole file's goes to the ScopeProvider)."""
    from eaglepatch.read.scopes import dotted_module
    from eaglepatch.read.slices import parse_cut

    srt = sglang_latest / "sglang" / "srt"
    compared = 0
    for path in sorted((srt / "models").rglob("*.py"))[::6]:
        text = path.read_text(encoding="utf-8")
        whole = cst.parse_module(text)
        dotted = dotted_module(path.relative_to(srt).as_posix())
        for cls in (c for c in whole.body if isinstance(c, cst.ClassDef)):
            methods = [s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)]
            keep = frozenset({(cls.name.value, methods[0])}) if methods else frozenset()
            classes = frozenset({cls.name.value})
            found = parse_cut(text, keep, classes)  # the other classes' bodies cut whole, as verify.prove_edit cuts them
            assert found is not None, path
            cut, cut_text = found[0], found[1].text
            answers = _answers(ModuleScope(cut, dotted, False, classes, keep, text, cut_text))
            assert answers == _answers(ModuleScope(whole, dotted, False, classes, keep, text)), (path, cls.name.value)
            if methods:  # the same statement of the same class, in the cut module: the method as written
                cut_class = cut.body[whole.body.index(cls)]
                assert isinstance(cut_class, cst.ClassDef) and cut_class.name.value == cls.name.value
                kept = next(s for s in cut_class.body.body if isinstance(s, cst.FunctionDef))
                assert kept.deep_equals(next(s for s in cls.body.body if isinstance(s, cst.FunctionDef))), (path, cls.name.value)
        compared += 1
    assert compared > 35


@pytest.mark.parametrize(
    "code, by_statements",
    [
        ("import a\n\ndef f(x):\n    if (y := x):\n        return y\n\nclass C:\n    z = 1\n", True),
        ("import a\n\nif (y := a.b):\n    pass\n", False),
        ("class C:\n    z = [w := 1]\n    def m(self):\n        return (v := 2)\n", False),
    ],
)
def test_a_walrus_in_a_cut_body_binds_nothing_the_module_scope_reads(code, by_statements, monkeypatch):
    """ModuleScope reads a module off its statements unless the text it reads holds a `:=`: with the
    text it was parsed from cut (`cut_text`), only a `:=` outside the cut bodies sends it to libcst's
    ScopeProvider, and both readings answer alike."""
    from eaglepatch.read import scopes
    from eaglepatch.read.slices import parse_cut

    found = parse_cut(code, frozenset())
    assert found is not None
    module, cut_text = found[0], found[1].text
    fallbacks = []
    original = scopes.read_with_libcst

    def counting(module):
        fallbacks.append(module)
        return original(module)

    monkeypatch.setattr(scopes, "read_with_libcst", counting)
    cut = _answers(ModuleScope(module, "m", False, None, frozenset(), code, cut_text))
    assert (not fallbacks) == by_statements
    whole = _answers(ModuleScope(cst.parse_module(code), "m", False, None, frozenset(), code))
    assert cut == whole
