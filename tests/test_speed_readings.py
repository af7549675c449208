"""Cheaper readings of what `check --all` derives, each against the reading it replaces.

`class_index._functions` walks statement bodies only; a libcst visitor over the whole tree finds the
same defs in the same order (tables here, and every file of a release).  The wrapper finder keeps
what it derives per class (the `__init__` assignments, the models held) once per run, and reads
again what depends on members once members are adopted.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from helpers import write_srt_tree

from eaglepatch.analyze.class_index import _functions
from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.resolve import Resolver
from eaglepatch.engines import locate_tree
from eaglepatch.read.source_cache import SourceCache
from eaglepatch.records import Protocol


def _visited(module: cst.Module) -> list[cst.FunctionDef]:
    found: list[cst.FunctionDef] = []

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            found.append(node)

    module.visit(Collect())
    return found


# (code, the names of its defs in the order a visitor meets them)
FUNCTION_CASES = [
    ("def f():\n    pass\n", ["f"]),
    ("@d\ndef f(x=lambda: 1):\n    def g():\n        def h(): pass\n    return g\n", ["f", "g", "h"]),
    ("class A:\n    def m(self): ...\n    class B:\n        def n(self): ...\n    def o(self): ...\n", ["m", "n", "o"]),
    ("if a:\n    def f(): ...\nelif b:\n    def g(): ...\nelse:\n    def h(): ...\ndef i(): ...\n", ["f", "g", "h", "i"]),
    (
        "try:\n    def f(): ...\nexcept E:\n    def g(): ...\nexcept F:\n    def h(): ...\nelse:\n    def i(): ...\nfinally:\n    def j(): ...\n",
        ["f", "g", "h", "i", "j"],
    ),
    ("for x in y:\n    def f(): ...\nelse:\n    def g(): ...\nwhile c:\n    def h(): ...\nelse:\n    def i(): ...\n", ["f", "g", "h", "i"]),
    ("with a as b, c:\n    async def f(): ...\n", ["f"]),
    ("match x:\n    case 1:\n        def f(): ...\n    case _:\n        def g(): ...\n", ["f", "g"]),
    ("try:\n    pass\nexcept* E:\n    def f(): ...\n", ["f"]),
    ("x = 1; y = lambda: 2\nif a: b = 1\nclass A: pass\n", []),
    ("def f(): return 1\nclass A:\n    if c: x = 1\n    def g(self): return (lambda: 0)\n", ["f", "g"]),
]


@pytest.mark.parametrize("code, names", FUNCTION_CASES)
def test_functions_are_the_defs_a_visitor_meets_in_its_order(code, names):
    module = cst.parse_module(code)
    got = _functions(module)
    assert [f.name.value for f in got] == names
    assert [id(f) for f in got] == [id(f) for f in _visited(module)]


def test_functions_of_every_file_of_a_release_are_the_visitor_s(sglang_059: Path):
    """Every file of the oldest release's models/ (where the defs whose signatures are copied are), parsed
    whole: the same def nodes, in the same order."""
    compared = 0
    for path in sorted((sglang_059 / "sglang" / "srt" / "models").rglob("*.py")):
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue
        assert [id(f) for f in _functions(module)] == [id(f) for f in _visited(module)], path
        compared += 1
    assert compared > 100


# --------------------------------------------------------------------------- once per class and run
WRAPPER = {
    "models/llama.py": "from torch import nn\n\nclass LlamaModel(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n        self.embed_tokens = nn.Embedding(1, 1)\n\n",
    "models/wrap.py": (
        "from torch import nn\nfrom sglang.srt.models.llama import LlamaModel\n\n"
        "class Base(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n        self.config = config\n\n"
        "class Wrap(Base):\n    def __init__(self, config):\n        super().__init__(config)\n        self.model = self.build(config)\n\n"
        "    def build(self, config):\n        return LlamaModel(config)\n\nEntryClass = Wrap\n"
    ),
}


def _resolver(tmp_path: Path) -> tuple[Resolver, Path]:
    tree = locate_tree(write_srt_tree(tmp_path, WRAPPER) / "sglang" / "srt")
    return Resolver(RunContext.fresh(tree, Protocol({}, (), {}))), tree.models / "wrap.py"


def test_init_assignments_are_read_once_per_class_and_handed_out_as_new_lists(tmp_path):
    resolver, path = _resolver(tmp_path)
    source = resolver.cache.read(path)
    first = resolver.init_assignments(source, "Wrap")
    assert [(a.attribute, a.value) for a in first] == [("model", "self.build(config)"), ("config", "config")]
    first.clear()
    again = resolver.init_assignments(source, "Wrap")
    assert [a.attribute for a in again] == ["model", "config"]
    assert again[0] is resolver.init_assignments(source, "Wrap")[0]


def test_the_models_a_class_holds_are_read_once_per_protocol(tmp_path):
    resolver, path = _resolver(tmp_path)
    source = resolver.cache.read(path)
    inners = resolver.inner_models(source, "Wrap")
    assert [(i.attribute, [c.name for c in i.classes]) for i in inners] == [("model", ["LlamaModel"])]
    assert resolver.inner_models(source, "Wrap")[0] is inners[0]  # kept for the run
    assert resolver.finder.inner_models(source, "Wrap", resolver.run.protocol_read)[0] is inners[0]  # the run's protocol
    assert resolver.finder.inner_models(source, "Wrap", Protocol({}, (), {}))[0] is not inners[0]  # another protocol: read again


# --------------------------------------------------------------------------- class bodies read by one search
def _per_line_attributes(lines, text) -> list[tuple[int, str]]:
    """The reading `_class_attributes` replaces: `_CLASS_ATTR` matched line by line at the body's indent."""
    from eaglepatch.analyze.class_index import _CLASS_ATTR
    from eaglepatch.read.text import indent_width

    out = []
    for index, line in enumerate(lines[text.header + 1 : text.end], text.header + 1):
        match = _CLASS_ATTR.match(line) if indent_width(line) == text.body_indent else None
        if match:
            out.append((index, match.group(1)))
    return out


def _per_line_compound(lines, text) -> bool:
    import re

    from eaglepatch.read.text import indent_width

    compound = re.compile(r"^[ \t]*(?:if|elif|else|try|except|finally|with|async[ \t]+with|for|async[ \t]+for|while|match)\b")
    return any(indent_width(line) == text.body_indent and compound.match(line) for line in lines[text.header + 1 : text.end])


def _compound_by_search(lines, text) -> bool:
    """What block_attributes' one search says: its pattern for the body's indent over the class's body text."""
    from eaglepatch.analyze.class_index import _COMPOUND_WORDS, _at_indent

    assert text.body_text() == "\n" + "\n".join(lines[text.header + 1 : text.end])
    return bool(_at_indent(_COMPOUND_WORDS, text.body_indent).search(text.body_text()))


def _read(tmp_path: Path, code: str):
    """(a SourceCache of tmp_path, the file m.py holding `code`, read through it)."""
    path = tmp_path / "m.py"
    path.write_text(code)
    cache = SourceCache(tmp_path)
    return cache, cache.read(path)


CLASS_BODIES = [
    "class A:\n    x = 1\n    y: int = 2\n    z == 3\n    def f(self):\n        w = 1\n    v = 4\n",
    "class A:\n\tx = 1\n\tif c:\n\t\ty = 2\n\t  z = 3\n",
    "class A:\n    s = '''\n    not = 1\n    '''\n    iffy = 1\n    async  with_ = 2\n",
    "if c:\n    class A(B):\n        x = 1\n        with m:\n            y = 2\n        def g(self):\n            pass\n        k = (\n        j = 1)\n",
    "class A:\n    def f(self):\n        return '''\n    q = 1\n'''\n    r = 2\n    match = 3\n",
    "class A:\n    pass\n",
]


@pytest.mark.parametrize("code", CLASS_BODIES)
def test_class_body_lines_found_by_one_search_are_those_found_line_by_line(tmp_path, code):
    from eaglepatch.analyze.class_index import ClassIndex, _class_attributes

    cache, source = _read(tmp_path, code)
    index = ClassIndex(RunContext(None, cache))  # type: ignore[arg-type]
    text = index.class_text(source, "A")
    assert text is not None
    assert _class_attributes(text) == _per_line_attributes(source.lines, text)
    assert _compound_by_search(source.lines, text) == _per_line_compound(source.lines, text)


def test_class_body_lines_of_every_class_of_a_release(sglang_059: Path):
    """Every class at module level of the oldest release: the attribute lines one search finds are those the
    line-by-line match finds, and a class the search says has no compound block has none line by line."""
    from eaglepatch.analyze.class_index import _class_attributes

    srt = sglang_059 / "sglang" / "srt"
    cache = SourceCache(srt)
    resolver = Resolver(RunContext(locate_tree(srt), cache))
    classes = blocks = 0
    for path in sorted(srt.rglob("*.py")):
        source = cache.read(path)
        for name in cache.outline(source).module_level("class"):
            text = resolver.class_text(source, name)
            if text is None:
                continue
            assert _class_attributes(text) == _per_line_attributes(source.lines, text), f"{path}:{name}"
            found = _compound_by_search(source.lines, text)
            assert found == _per_line_compound(source.lines, text), f"{path}:{name}"
            classes += 1
            blocks += found
    assert classes > 1000 and blocks > 10


def test_self_assignments_are_read_once_and_handed_out_as_new_lists(tmp_path):
    resolver, path = _resolver(tmp_path)
    source = resolver.cache.read(path)
    init = resolver.index.init_range(resolver.class_text(source, "Wrap"))
    first = resolver.index.self_assignments(source, *init)
    assert [(found.attribute, found.value) for found in first] == [("model", "self.build(config)")]
    first.clear()
    assert len(resolver.index.self_assignments(source, *init)) == 1


# --------------------------------------------------------------------------- EntryClass lines found from the literal
ENTRY_TEXTS = [
    "EntryClass = A\n",
    "  EntryClass=[A,\n B]\nEntryClass = C",
    "x = EntryClass\nEntryClass = EntryClass2\n",
    "EntryClass\n=\nEntryClass\nEntryClass = D",
    "EntryClass =\n\nEntryClass = E",
    "EntryClassX = 1\n# EntryClass = G\n",
    "if c:\n\tEntryClass = F\n",
    "",
]


def _matches(found) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(1)) for m in found]


@pytest.mark.parametrize("text", ENTRY_TEXTS)
def test_entry_assignments_are_the_anchored_pattern_s_matches(text):
    from eaglepatch.analyze.resolve import _ENTRY, entry_assignments

    assert _matches(entry_assignments(text)) == _matches(_ENTRY.finditer(text))


def test_entry_assignments_of_every_file_of_a_release(sglang_059: Path):
    from eaglepatch.analyze.resolve import _ENTRY, entry_assignments

    srt = sglang_059 / "sglang" / "srt"
    cache = SourceCache(srt)
    with_entry = 0
    for path in sorted(srt.rglob("*.py")):
        joined = cache.outline(cache.read(path)).joined
        expected = _matches(_ENTRY.finditer(joined))
        assert _matches(entry_assignments(joined)) == expected, path
        with_entry += bool(expected)
    assert with_entry > 100


# --------------------------------------------------------------------------- block ends searched from the newline
BLOCKS = [
    "def f():\n    x = 1\n\n    # tail\n\ny = 2\n",
    "class A:\n    def m(self,\na=1):\n        return (1,\n2)\n    def n(self): pass\nz = 3\n",
    "def f():\n    s = '''\nnot_code = 1\n'''\n    t = 1 + \\\n2\n    return s\nq = 1",
    "if c:\n    def f():\n        pass\n    x = 1\n",
    "def f(): pass\ndef g():\n\tpass\n",
    "def f():\n    pass",
    "def f():\n    x = [\n1,\n]\n    y = (\n  2)\nw = 1\n",
]


@pytest.mark.parametrize("code", BLOCKS)
def test_fast_block_ends_are_the_exact_scanner_s(tmp_path, code):
    from eaglepatch.read.outline import _block_end, _block_end_fast

    cache, source = _read(tmp_path, code)
    outline = cache.outline(source)
    assert outline.headers
    for index, _indent, _kind, _name in outline.headers:
        assert _block_end_fast(outline, index) == _block_end(source.lines, index), (code, index)


# --------------------------------------------------------------------------- references: no def read for a class holding no bare model
def test_references_are_those_learned_reading_every_def(sglang_latest: Path, monkeypatch):
    """`_learn` skips the def of a class that holds no bare backbone (`_reference` finds none): the
    references of every hook of the newest release are those learned reading every def."""
    from eaglepatch.analyze.protocol import extract_protocol
    from eaglepatch.analyze.synthesize import HookLibrary

    read_bodies = HookLibrary._read_reference_body
    bodies_read = []

    def counted(self, source, signature):
        bodies_read.append(signature)
        return read_bodies(self, source, signature)

    monkeypatch.setattr(HookLibrary, "_read_reference_body", counted)

    def learned(skip: bool) -> tuple[dict, int]:
        if not skip:
            monkeypatch.setattr(HookLibrary, "_holds_a_bare_model", lambda self, source, info: True)
        bodies_read.clear()
        tree = locate_tree(sglang_latest)
        cache = SourceCache(tree.srt)
        reading = RunContext(tree, cache)
        library = HookLibrary(Resolver(reading.with_protocol(extract_protocol(reading, [], []))))
        out = {}
        for member in ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"):
            references = library.references(member)
            out[member] = [(r.label, r.shared_by, r.unportable, r.backbone.attribute, r.config_path, r.ties) for r in references]
        return out, len(bodies_read)

    fast, parsed_fast = learned(True)
    slow, parsed_slow = learned(False)
    assert fast == slow
    assert all(len(v) > 5 for v in fast.values())
    assert parsed_fast < parsed_slow


# --------------------------------------------------------------------------- `def name(` in a class, from the literal
DEF_TEXTS = [
    ("class A:\n    def get_embed_and_head(self):\n", True),
    ("def get_embed_and_head(self):\n", False),
    ("x = 1  # def get_embed_and_head(\n", False),
    ("class A:\n\tdef get_embed_and_head(self): pass\n", True),
    ("class A:\n    async def get_embed_and_head(self): pass\n", False),
    ("class A:\n    def get_embed_and_head_x(self): pass\n", False),
    ("class A:\r\n    def get_embed_and_head(self): pass\r\n", True),
    ("class A:\r    def get_embed_and_head(self): pass\r", False),  # `^` does not hold after a lone \r
    ("s = '''\n  def get_embed_and_head(\n'''\n", True),  # text, not code: the caller reads the outline after
    ("", False),
]


@pytest.mark.parametrize("text, expected", DEF_TEXTS)
def test_indented_def_is_the_anchored_pattern_s_answer(text, expected):
    import re

    from eaglepatch.analyze.synthesize import indented_def

    pattern = re.compile(r"^[ \t]+def get_embed_and_head\(", re.MULTILINE)
    assert bool(pattern.search(text)) == expected
    assert indented_def(text, "get_embed_and_head") == expected


def test_indented_def_of_every_model_file_of_a_release(sglang_059: Path):
    import re

    from eaglepatch.analyze.synthesize import indented_def

    members = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture", "forward", "load_weights")
    found = 0
    for path in sorted((sglang_059 / "sglang" / "srt" / "models").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for member in members:
            expected = bool(re.search(rf"^[ \t]+def {re.escape(member)}\(", text, re.MULTILINE))
            assert indented_def(text, member) == expected, (path, member)
            found += expected
    assert found > 200


# --------------------------------------------------------------------------- each model file read once for every hook learned
@pytest.mark.parametrize(
    "data, member, expected",
    [
        (b"class A:\n    def get_embed_and_head(self):\n", "get_embed_and_head", True),
        (b"undef get_embed_and_head(", "get_embed_and_head", True),  # a substring, as `in` finds it
        (b"def get_embed_and_head_x(self):", "get_embed_and_head", False),
        (b"def  get_embed_and_head(self):", "get_embed_and_head", False),
        (b"def adef get_embed_and_head(", "get_embed_and_head", True),
        ("def h\u00e9ad(self):".encode(), "h\u00e9ad", True),
        ("def h\u00e9ad(self):".encode("latin-1"), "h\u00e9ad", False),
    ],
)
def test_the_names_found_in_a_file_s_bytes_are_what_in_finds(data, member, expected):
    from eaglepatch.analyze.synthesize import _DEF_NAME

    assert (f"def {member}(".encode() in data) == expected
    assert (member.encode() in set(_DEF_NAME.findall(data))) == expected


def test_the_names_found_in_every_model_file_of_a_release_are_what_in_finds(sglang_059: Path):
    from eaglepatch.analyze.synthesize import _DEF_NAME

    checked = 0
    for path in sorted((sglang_059 / "sglang" / "srt" / "models").rglob("*.py")):
        data = path.read_bytes()
        names = set(_DEF_NAME.findall(data))
        for word in set(re_words(data)):
            assert (word in names) == (b"def " + word + b"(" in data), (path, word)
            checked += 1
    assert checked > 10000


def re_words(data: bytes) -> list[bytes]:
    import re

    return re.findall(rb"[\w\x80-\xff]+", data)


def test_assigned_value_with_the_statement_s_end_given_is_the_same():
    from eaglepatch.read.bindings import assigned_value, statement_end

    lines = ["        self.model = Foo(", "            config,  # the config", "        )", "        self.x = 1"]
    for index, target in ((0, "self.model"), (3, "self.x"), (0, "self.x")):
        assert assigned_value(lines, index, target, statement_end(lines, index)) == assigned_value(lines, index, target)
    assert assigned_value(lines, 0, "self.model") == "Foo(\n            config,\n        )"


# --------------------------------------------------------------------------- a forward's stores read off its statements
def _facts_by_walk(node) -> tuple[frozenset, bool]:
    """forward_facts as it read the stores before: ast.walk over every node of the function."""
    import ast

    positional = [*node.args.posonlyargs, *node.args.args]
    if not positional:
        return frozenset(), False
    receiver = positional[0].arg
    stored: set[int] = set()
    unpacks = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign):
            stored.update(id(t) for t in sub.targets)
            unpacks = unpacks or any(isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == 2 for t in sub.targets)
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            stored.add(id(sub.target))
        elif isinstance(sub, ast.Delete) and len(sub.targets) == 1:
            stored.add(id(sub.targets[0]))
    reads = set()
    pending = list(node.body)
    while pending:
        sub = pending.pop()
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(sub, ast.Attribute):
            parts, base = [], sub
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == receiver:
                if id(sub) not in stored:
                    reads.add(tuple(reversed(parts)))
                continue
        pending.extend(ast.iter_child_nodes(sub))
    return frozenset(reads), unpacks


FORWARDS = [
    "def forward(self, x):\n    self.a.b = x\n    return self.c(x)\n",
    "def forward(self, x):\n    h, aux = self.model(x)\n    del self.cache\n    self.n += 1\n    self.m: int = 2\n    return h\n",
    "def forward(self, x):\n    if x:\n        try:\n            a, b = x\n        except E:\n            self.e = 1\n        else:\n            y = self.y\n        finally:\n            self.z.w = 2\n",
    "def forward(self, x):\n    def inner(s):\n        p, q = s\n        self.k = 1\n    for i in x:\n        self.i = i\n    else:\n        self.j\n    while self.w:\n        with self.ctx as c:\n            c, d = 1, 2\n",
    "def forward(self, x):\n    match x:\n        case 1:\n            self.one = x\n        case _:\n            a, b = self.two\n    class K:\n        u, v = 1, 2\n    return lambda: self.lam\n",
    "def forward(x):\n    x.a = 1\n",
]


@pytest.mark.parametrize("code", FORWARDS)
def test_forward_facts_read_off_statements_are_those_of_a_walk(code):
    import ast

    from eaglepatch.analyze.synthesize import forward_facts

    node = ast.parse(code).body[0]
    facts = forward_facts(node)
    assert (facts.reads, facts.unpacks) == _facts_by_walk(node)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # a release's invalid escape sequence, parsed
def test_forward_facts_of_every_function_of_a_release(sglang_059: Path):
    import ast

    from eaglepatch.analyze.synthesize import forward_facts

    compared = 0
    for path in sorted((sglang_059 / "sglang" / "srt").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                facts = forward_facts(node)
                assert (facts.reads, facts.unpacks) == _facts_by_walk(node), f"{path}:{node.lineno}"
                compared += 1
    assert compared > 10000


# --------------------------------------------------------------------------- one-line imports taken whole
IMPORT_TEXTS = [
    "import os\nfrom a.b import c as d  # note\n    from . import x\n",
    "from a import (\n    b,\n    c,\n)\nimport d\n",
    "from a import b, \\\n    c\nimport e  # (not a bracket that counts)\n",
    "if x:\n\tfrom m import n\n",
    "from a import b  # [x\nimport c\n",
]


@pytest.mark.parametrize("text", IMPORT_TEXTS)
def test_one_line_imports_are_what_the_bracket_loop_gives(text):
    from eaglepatch.read.slices import import_texts
    from eaglepatch.read.text import bracket_delta, dedent_lines, indent_width

    lines = text.split("\n")
    expected = []
    index = 0
    while index < len(lines):  # the loop every import went through before, on every line that starts one
        line = lines[index]
        if not line.lstrip().startswith(("import ", "from ")):
            index += 1
            continue
        depth, j = 0, index
        while j < len(lines):
            depth += bracket_delta(lines[j])
            if depth <= 0 and not lines[j].rstrip().endswith("\\"):
                break
            j += 1
        expected.append(dedent_lines(lines[index : j + 1], indent_width(line)))
        index = j + 1
    assert import_texts(lines) == expected


# --------------------------------------------------------------------------- statements in ast.walk's order, expressions unvisited
WALKED = [
    "if a:\n    if b:\n        x = 1\n    y = 2\nelse:\n    z = 3\nw = 4\n",
    "try:\n    a = 1\nexcept E:\n    b = 2\nelse:\n    c = 3\nfinally:\n    d = 4\n",
    "def f():\n    def g():\n        return 1\n    class C:\n        x = 1\n    return g\nmatch v:\n    case 1:\n        q = 1\n",
    "for i in x:\n    with m as n:\n        while k:\n            pass\nelse:\n    r = 1\nasync def h():\n    async for j in y:\n        pass\n",
]


def _kept_of_walk(tree) -> list[int]:
    import ast

    kept = (ast.stmt, ast.excepthandler, ast.match_case)  # statements, and the clauses between them
    return [id(n) for n in ast.walk(tree) if n is tree or isinstance(n, kept)]


@pytest.mark.parametrize("code", WALKED)
def test_statement_walk_is_ast_walk_with_the_statements_kept(code):
    import ast

    from eaglepatch.read.statements import statement_walk

    tree = ast.parse(code)
    assert [id(n) for n in statement_walk(tree)] == _kept_of_walk(tree)
    for statement in tree.body:
        assert [id(n) for n in statement_walk(statement)] == _kept_of_walk(statement)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # a release's invalid escape sequence, parsed
def test_statement_walk_of_every_file_of_a_release(sglang_059: Path):
    import ast

    from eaglepatch.read.statements import statement_walk

    compared = 0
    for path in sorted((sglang_059 / "sglang" / "srt").rglob("*.py")):
        tree = ast.parse(path.read_bytes())
        assert [id(n) for n in statement_walk(tree)] == _kept_of_walk(tree), path
        compared += 1
    assert compared > 500


# --------------------------------------------------------------------------- model uses found from the literal `model`
# the pattern as first written: its look-behinds first, so the engine tried every position
_MODEL_USE_FIRST = r"(?:(?<![\w])model|_model)[ \t]*(?:\.[ \t]*\w|[,)\]=])|\.model[ \t]*$"
MODEL_USE_TEXTS = [
    "x = self.model.forward(a)\n",
    "target_model.set_embed(e)\n",
    "f(model, b)\nf(b, model)\n[model]\nmodel = other\nmodel == other\n",
    "remodel.x = 1\nmodel2.x = 1\nMyModel.x\ndraft_model .set(1)\n",
    "runner = self.model\nrunner = self.model  # trailing comment\nrunner = self.model   \n",
    "__model.x\n_model,\némodel.x\n1model.x\n",
    "model\nmodel.\nmodel .x\nmodel\t.\ty\n",
    "",
]


def _model_use_lines(pattern, text: str) -> list[int]:
    return sorted({text.count("\n", 0, m.start()) for m in pattern.finditer(text)})


@pytest.mark.parametrize("text", MODEL_USE_TEXTS)
def test_model_uses_are_found_on_the_lines_the_first_pattern_found(text):
    import re

    from eaglepatch.analyze.protocol import _MODEL_USE

    assert _model_use_lines(_MODEL_USE, text) == _model_use_lines(re.compile(_MODEL_USE_FIRST, re.MULTILINE), text)


def test_model_uses_of_every_file_of_a_release(sglang_059: Path):
    import re

    from eaglepatch.analyze.protocol import _MODEL_USE

    first = re.compile(_MODEL_USE_FIRST, re.MULTILINE)
    with_uses = 0
    for path in sorted((sglang_059 / "sglang" / "srt").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        expected = _model_use_lines(first, text)
        assert _model_use_lines(_MODEL_USE, text) == expected, path
        with_uses += bool(expected)
    assert with_uses > 200


# --------------------------------------------------------------------------- headers searched from each newline
_HEADER_FIRST_WRITTEN = r"^([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)"  # MULTILINE: tried at every position
HEADER_TEXTS = [
    "def f():\n    pass\n",
    "class A:\n    def m(self): ...\n    async  def n(self): ...\n\tclass B: pass\n",
    "x = 1\nundef g(): pass\n# def h(): pass\nclasses = 1\n  def   i (): ...\n",
    "\ndef first_after_blank(): ...\nasync\tdef a(): ...\nasyncdef b(): ...\n",
    "",
    "class",
]


def _headers_first_written(text: str) -> list[tuple[int, int, str, str]]:
    import re

    from eaglepatch.read.outline import Outline

    outline = Outline(text.split("\n"), text)
    return [
        (outline.line_index(m.start()), len(m.group(1)), "class" if m.group(2) == "class" else "def", m.group(3))
        for m in re.finditer(_HEADER_FIRST_WRITTEN, text, re.MULTILINE)
    ]


@pytest.mark.parametrize("text", HEADER_TEXTS)
def test_outline_headers_are_the_multiline_pattern_s(text):
    from eaglepatch.read.outline import Outline

    assert Outline(text.split("\n"), text).headers == _headers_first_written(text)


def test_outline_headers_of_every_file_of_a_release(sglang_059: Path):
    srt = sglang_059 / "sglang" / "srt"
    cache = SourceCache(srt)
    headers = 0
    for path in sorted(srt.rglob("*.py")):
        outline = cache.outline(cache.read(path))
        expected = _headers_first_written(outline.joined)
        assert outline.headers == expected, path
        headers += len(expected)
    assert headers > 5000


# --------------------------------------------------------------------------- EAGLE found in the lowered text
EAGLE_TEXTS = [
    "if spec.is_eagle():\n    EAGLE3 = 1\n# Eagle\n",
    "eAgLe eaglE EAGLEEAGLE\n",
    "\u0130 before: eagle moves by one if lowered\u0130EAGLE\n",
    "no such word: eagl e agle\n",
    "",
]


@pytest.mark.parametrize("text", EAGLE_TEXTS)
def test_eagle_offsets_are_the_ignorecase_pattern_s(text):
    from eaglepatch.analyze.protocol import _EAGLE, _eagle_offsets

    assert list(_eagle_offsets(text)) == [m.start() for m in _EAGLE.finditer(text)]


def test_eagle_offsets_of_every_file_of_a_release(sglang_059: Path):
    from eaglepatch.analyze.protocol import _EAGLE, _eagle_offsets

    mentions = 0
    for path in sorted((sglang_059 / "sglang" / "srt").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        expected = [m.start() for m in _EAGLE.finditer(text)]
        assert list(_eagle_offsets(text)) == expected, path
        mentions += bool(expected)
    assert mentions > 30


# --------------------------------------------------------------------------- words and top-level assignments by find
WORD_CASES = [
    ("def __init__(self, config, quant_config=None):", "config"),
    ("def __init__(self, config_x):", "config"),
    ("def __init__(self, my_config):", "config"),
    ("config", "config"),
    ("(config)", "config"),
    ("éconfig, configé, config1", "config"),
    ("a.config.b", "config"),
    ("", "config"),
    ("prefix: str = 'config'", "config"),
]


@pytest.mark.parametrize("text, word", WORD_CASES)
def test_has_word_is_the_word_boundary_search(text, word):
    import re

    from eaglepatch.read.outline import has_word

    assert has_word(text, word) == bool(re.search(rf"\b{re.escape(word)}\b", text))


TOP_ASSIGNMENTS = [
    ("EntryClass = A\n", "EntryClass"),
    ("x = 1\nModel: type = A\n", "Model"),
    ("    Model = A\n", "Model"),
    ("MyModel = A\nModel == A\n", "Model"),
    ("Model_ = 1\nModel=2", "Model"),
    ("y = Model = 1\n", "Model"),
    ("Model\n= 1\n", "Model"),
    ("a = 1\r\nModel = 2\r\n", "Model"),
    ("", "Model"),
]


@pytest.mark.parametrize("text, name", TOP_ASSIGNMENTS)
def test_assigned_at_top_is_the_anchored_search(text, name):
    import re

    from eaglepatch.read.imports import _assigned_at_top

    expected = re.search(rf"^{re.escape(name)}[ \t]*(?::[^=\n]*)?=(?!=)", text, re.MULTILINE)
    assert _assigned_at_top(text, name) == bool(expected)


# --------------------------------------------------------------------------- a line's code without its comment
CODE_OF_LINES = [
    "x = 1",
    "x = 1  # one",
    "s = '# not a comment'  # but this is",
    's = "a#b"',
    "# only a comment",
    "y = '''#'''  # c",
    "",
]


@pytest.mark.parametrize("line", CODE_OF_LINES)
def test_code_of_a_line_is_the_comment_pattern_s(line):
    from eaglepatch.read.expressions import _COMMENT, code_of_line

    expected = next((line[: m.start()] for m in _COMMENT.finditer(line) if m.group().startswith("#")), line)
    assert code_of_line(line) == expected


# --------------------------------------------------------------------------- a shared body's key, from the slice's text
@pytest.mark.integration
@pytest.mark.parametrize("release", ["sglang_059", "sglang_latest"])
def test_body_keys_read_off_the_text_are_the_generated_code_s(release, request):
    """Every hook body learned on a release: the key read off the parsed slice is the one libcst's code
    generator gives; and some bodies are shared, so the key decides something."""
    from eaglepatch.analyze.protocol import extract_protocol
    from eaglepatch.analyze.synthesize import HookLibrary, _body_key, _generated_body_key

    tree = locate_tree(request.getfixturevalue(release))
    cache = SourceCache(tree.srt)
    reading = RunContext(tree, cache)
    library = HookLibrary(Resolver(reading.with_protocol(extract_protocol(reading, [], []))))
    references = [r for m in ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture") for r in library.references(m)]
    assert len(references) > 15
    for reference in references:
        assert _body_key(cache, reference) == _generated_body_key(cache, reference), reference.label
    assert any(r.shared_by > 1 for r in references)


# --------------------------------------------------------------------------- a hook body read by CPython's parser
BODIES = [
    "def f(self):\n    return self.model.embed_tokens.weight, self.lm_head.weight\n",
    "def f(self, e, h):\n    del self.model.embed_tokens.weight\n    self.lm_head.weight = h\n    torch.cuda.empty_cache()\n",
    "def f(self, ids=None):\n    self.model.capture = True\n    self.model.layers_to_capture = [v + 1 for v in ids or [2, len(self.model.layers) // 2]]\n",
    "def f(self):\n    return g(k=self.a, *self.b, **self.c)\n",  # a keyword before *args: source order
    "def f(self):\n    return {self.a: self.b, **self.c, 'k': self.d}\n",
    "def f(self):\n    return self.a if self.b else self.c\n",
    "def f(self):\n    self.a, self.b = 1, 2\n    self.c = self.d = 3\n    self.e += 1\n    self.f: int = 1\n    del self.g, self.h\n    del self.i\n",
    "def f(self):\n    helper(self)\n",
    "def f(this):\n    return x.this + this.y\n",
    "def f(self):\n    g(self=1)\n    return self.a\n",
    "def f(self):\n    def inner():\n        return self.a\n    return self.b\n",
    "def f(self):\n    try:\n        return self.a\n    except E as self:\n        pass\n",
    "def f(self):\n    return super().f() + self.layers[0].weight.t() + self.f()(self.g)\n",
    "def f(self):\n    return f'{self.a!r:>{self.w}}'\n",
    "@staticmethod\ndef f(x):\n    return x.a\n",
    "def f():\n    return 1\n",
    "def f(*args):\n    return args\n",
    "async def f(self):\n    async with self.lock as l:\n        await self.a(l)\n",
    "def f(self):\n    return [self.a for self.b in self.c if self.d]\n",
    "def f(self):\n    return lambda: self.a\n",  # unusual: left to libcst
    "def f(self):\n    import torch\n    return torch.cat(self.a)\n",
]


def _both_readings(text: str):
    import ast

    from eaglepatch.analyze.body_reader import read_body
    from eaglepatch.analyze.synthesize import module_names_in, read_body_ast

    free = module_names_in(text.split("\n"))
    assert free is not None
    node = cst.parse_module(text).body[0]
    function = ast.parse(text).body[0]
    assert isinstance(node, cst.FunctionDef) and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
    return read_body_ast(function, set(free)), read_body(node, set(free))


@pytest.mark.parametrize("text", BODIES)
def test_a_body_read_by_cpython_is_the_body_libcst_reads(text):
    fast, slow = _both_readings(text)
    if "lambda" in text or "import" in text:
        assert fast is None
    else:
        assert fast == slow


READ_DEFS = {"__init__", "forward", "get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture", "set_embed", "get_input_embeddings"}


def test_every_method_body_of_a_release_reads_the_same(sglang_059: Path):
    """The hooks, `__init__`s and `forward`s of every class of models/ in 0.5.9: those hold every shape."""
    import ast

    read = unusual = 0
    for path in sorted((sglang_059 / "sglang" / "srt" / "models").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.split("\n")
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for function in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in READ_DEFS):
                start = min([function.lineno, *(d.lineno for d in function.decorator_list)]) - 1
                block = "\n".join(line[function.col_offset :] for line in lines[start : function.end_lineno]) + "\n"
                try:
                    fast, slow = _both_readings(block)
                except (AssertionError, cst.ParserSyntaxError, SyntaxError):
                    continue  # a def that does not stand alone once dedented
                if fast is None:
                    unusual += 1
                    continue
                assert fast == slow, f"{path.name}:{function.lineno}"
                read += 1
    assert read > 500 and unusual < read // 10


# --------------------------------------------------------------------------- the `--all` summary written plain
SUMMARY_LINES = [
    "[bold]EAGLE-3 readiness of 3 model classes[/bold]",
    "[red]needs_code[/red] target [bold]AVeryLongClassNameForConditionalGeneration[/bold] (models/a_long_module_name.py:1234)",
    "                  no fix for get_embed_and_head, set_eagle3_layers_to_capture: holds a bare backbone (model: LlamaModel) "
    "beside its own lm_head: the hook needs a body written on the class",
    "                  forward to self.language_model: get_embed_and_head, set_embed_and_head (companion)",
    "x" * 60,
    "x" * 61,
    "wide \u4e2d\u6587\u5b57 characters " * 6,
    "averyveryveryveryveryveryveryveryveryveryveryverylongwordwithoutanyspaceatallthatmustbefoldedsomewhere",
    "",
]


@pytest.mark.parametrize("width", [60, 80, 120, 250])
def test_the_plain_summary_is_what_rich_prints_without_colour(width):
    import io

    from rich.console import Console
    from rich.text import Text

    from eaglepatch.output.report import _print_plain

    def console(buffer):
        return Console(file=buffer, width=width, highlight=False, soft_wrap=False, color_system=None)

    printed, written = io.StringIO(), io.StringIO()
    texts = [Text.from_markup(line) for line in SUMMARY_LINES]
    console(printed).print(Text("\n").join(texts), overflow="fold")
    _print_plain(console(written), texts)
    assert written.getvalue() == printed.getvalue()
    assert max(len(line) for line in printed.getvalue().splitlines()) <= width


@pytest.mark.parametrize(
    "code, flag",
    [
        ("def forward(self, x):\n    for layer in self.layers:\n        x = layer(x, captured=aux if getattr(layer, '_is_layer_to_capture', False) else None)\n", "_is_layer_to_capture"),
        ("def forward(self, x):\n    for i in range(3):\n        if i in self.layers_to_capture:\n            aux.append(x)\n", ""),
        ("def forward(self, x):\n    return getattr(self, 'norm')(x)\n", ""),  # a getattr of no capture flag
        ("def forward(self, x):\n    def inner(layer):\n        return getattr(layer, '_capture')\n    return x\n", ""),  # not read: a nested def
    ],
)
def test_forward_facts_name_the_per_layer_flag_a_forward_selects_by(code, flag):
    """Qwen3.5's backbones mark their chosen layers themselves (`getattr(layer, "_is_layer_to_capture", False)`):
    the hook library says so instead of "collects no aux hidden states"."""
    import ast

    from eaglepatch.analyze.synthesize import forward_facts

    assert forward_facts(ast.parse(code).body[0]).layer_flag == flag
