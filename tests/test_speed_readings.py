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

from eaglepatch.class_index import _functions
from eaglepatch.locate import locate_tree
from eaglepatch.resolve import Resolver
from eaglepatch.source import SourceCache


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
    return Resolver(tree, SourceCache(tree.srt)), tree.models / "wrap.py"


def test_init_assignments_are_read_once_per_class_and_handed_out_as_new_lists(tmp_path):
    resolver, path = _resolver(tmp_path)
    source = resolver.cache.read(path)
    first = resolver.init_assignments(source, "Wrap")
    assert [(a.attribute, a.value) for a in first] == [("model", "self.build(config)"), ("config", "config")]
    first.clear()
    again = resolver.init_assignments(source, "Wrap")
    assert [a.attribute for a in again] == ["model", "config"]
    assert again[0] is resolver.init_assignments(source, "Wrap")[0]


def test_the_models_a_class_holds_are_read_again_once_members_are_adopted(tmp_path):
    from eaglepatch.records import Protocol, Signature

    resolver, path = _resolver(tmp_path)
    source = resolver.cache.read(path)
    protocol = Protocol({}, [], {})
    inners = resolver.inner_models(source, "Wrap", protocol)
    assert [(i.attribute, [c.name for c in i.classes]) for i in inners] == [("model", ["LlamaModel"])]
    assert resolver.inner_models(source, "Wrap", protocol)[0] is inners[0]  # kept for the run
    assert resolver.inner_models(source, "Wrap", Protocol({}, [], {}))[0] is not inners[0]  # another protocol: read again
    kept = resolver.inner_models(source, "Wrap", protocol)[0]
    assert not resolver.adopt({("models/wrap.py", "Base"): {}})  # nothing adopted: still kept
    assert resolver.inner_models(source, "Wrap", protocol)[0] is kept
    member = Signature("get_embed_and_head", "method", "Base", "models/wrap.py", 5)
    assert resolver.adopt({("models/wrap.py", "Base"): {"get_embed_and_head": member}})
    again = resolver.inner_models(source, "Wrap", protocol)
    assert again[0] is not kept
    assert [(i.attribute, [c.name for c in i.classes]) for i in again] == [("model", ["LlamaModel"])]
