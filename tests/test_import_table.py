"""patcher/read/imports.py on its own: which module (and file) each local name of a file comes from.

Each test writes a tiny ``sglang/srt`` tree to ``tmp_path`` and reads one file's ImportTable the
way the resolver does (``ImportTable.of``).  Expected origins follow Python's own import
rules (PEP 328 for relative levels), written by hand.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from eaglepatch.engines import locate_tree
from eaglepatch.read.imports import ImportTable, Origin, module_path
from eaglepatch.read.source_cache import SourceCache


def _expression(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


M = "sglang.srt.models"


def write(root: Path, files: dict[str, str]) -> Path:
    srt = root / "sglang" / "srt"
    for package in (root / "sglang", srt, srt / "models", srt / "layers", srt / "models" / "sub"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    for rel, text in files.items():
        path = srt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return srt


def table(tmp_path: Path, files: dict[str, str], rel: str) -> tuple[ImportTable, Path]:
    srt = write(tmp_path, files)
    tree = locate_tree(tmp_path)
    cache = SourceCache(tree.srt)
    return ImportTable.of(cache, cache.read(srt / rel), tree), srt


LIBS = {
    "models/llama.py": "class LlamaModel:\n    pass\n",
    "models/fast.py": "class Impl:\n    pass\n",
    "models/slow.py": "class Impl:\n    pass\n",
    "layers/linear.py": "class Linear:\n    pass\n",
}


def test_absolute_relative_and_aliased_from_imports(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/sub/vl.py": """
        from sglang.srt.models.llama import LlamaModel
        from ..llama import LlamaModel as Relative
        from ...layers.linear import Linear
        from .. import llama
        from sglang.srt import models
        from torch import nn
        from torch.nn import functional as F
    """}, "models/sub/vl.py")
    llama = srt / "models" / "llama.py"
    assert t.names == {
        "LlamaModel": Origin(f"{M}.llama", "LlamaModel", llama),
        "Relative": Origin(f"{M}.llama", "LlamaModel", llama),  # level 2 from models/sub: sglang.srt.models
        "Linear": Origin("sglang.srt.layers.linear", "Linear", srt / "layers" / "linear.py"),  # level 3: sglang.srt
        "llama": Origin(f"{M}.llama", None, llama),  # a submodule, not a name in models/__init__.py
        "models": Origin(M, None, srt / "models" / "__init__.py"),
        "nn": Origin("torch", "nn", None),  # out of the tree: no file
        "F": Origin("torch.nn", "functional", None),
    }


def test_plain_imports_bind_the_top_package_too(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": """
        import torch.nn
        import sglang.srt.models.llama
        import sglang.srt.models.fast as fast_impl
    """}, "models/vl.py")
    assert t.names["torch"] == Origin("torch", None, None)
    assert t.names["torch.nn"] == Origin("torch.nn", None, None)
    assert t.names["sglang"] == Origin("sglang", None, None)
    assert t.names["fast_impl"] == Origin(f"{M}.fast", None, srt / "models" / "fast.py")
    assert "sglang.srt.models.fast" not in t.names  # `as` binds only the alias
    # module.Name and package.module.Name through lookup_expr
    assert t.lookup_expr(_expression("fast_impl.Impl")) == Origin(f"{M}.fast", "Impl", srt / "models" / "fast.py")
    llama = _expression("sglang.srt.models.llama.LlamaModel")
    assert t.lookup_expr(llama) == Origin(f"{M}.llama", "LlamaModel", srt / "models" / "llama.py")
    assert t.lookup_expr(_expression("fast_impl.Impl.attr")) is None  # fast_impl.Impl is not a module
    assert t.lookup_expr(_expression("nothing.X")) is None


def test_package_side_effect_binding_never_replaces_another(tmp_path):
    """`import torch.nn` after `from x import torch` leaves `torch` alone in the table (the rule the
    code states); an explicit `import torch` binds it."""
    t, srt = table(tmp_path, {"models/vl.py": "from sglang.srt.layers import torch\nimport torch.nn\n"}, "models/vl.py")
    assert t.names["torch"] == Origin("sglang.srt.layers", "torch", srt / "layers" / "__init__.py")


def test_a_later_import_rebinds_as_python_does(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": """
        from sglang.srt.models.fast import Impl
        from sglang.srt.models.slow import Impl
    """}, "models/vl.py")
    assert t.lookup("Impl") == Origin(f"{M}.slow", "Impl", srt / "models" / "slow.py")


@pytest.mark.parametrize("exception", ["ImportError", "(ImportError, ModuleNotFoundError)", "Exception as exc"])
def test_try_binding_wins_over_its_except_fallback(tmp_path, exception):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": f"""
        try:
            from sglang.srt.models.fast import Impl
        except {exception}:
            from sglang.srt.models.slow import Impl
    """}, "models/vl.py")
    assert t.lookup("Impl") == Origin(f"{M}.fast", "Impl", srt / "models" / "fast.py")


def test_a_fallback_alone_still_binds(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": """
        try:
            import flash_attn
        except ImportError:
            from sglang.srt.models.slow import Impl
    """}, "models/vl.py")
    assert t.lookup("Impl") == Origin(f"{M}.slow", "Impl", srt / "models" / "slow.py")
    assert t.lookup("flash_attn") == Origin("flash_attn", None, None)


def test_imports_under_type_checking_and_in_functions_count(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from sglang.srt.models.llama import LlamaModel


        def build():
            from sglang.srt.layers.linear import (
                Linear,
            )
            return Linear
    """}, "models/vl.py")
    assert t.lookup("LlamaModel").path == srt / "models" / "llama.py"
    assert t.lookup("Linear").path == srt / "layers" / "linear.py"


def test_an_import_in_a_docstring_binds_nothing(tmp_path):
    t, srt = table(tmp_path, {**LIBS, "models/vl.py": '''
        from sglang.srt.models.fast import Impl


        def example():
            """Use it like this:

            from sglang.srt.models.slow import Impl
            """
    '''}, "models/vl.py")
    assert t.lookup("Impl") == Origin(f"{M}.fast", "Impl", srt / "models" / "fast.py")


STAR_BASE = """
from sglang.srt.models.llama import LlamaModel

class Base:
    pass

class _Private:
    pass

Alias = Base
Annotated: type = Base
Compared == Base
"""


@pytest.mark.parametrize(
    "name, found",
    [
        ("Base", True),  # defined there
        ("LlamaModel", True),  # imported there: a re-export
        ("Alias", True),  # assigned there
        ("Annotated", True),  # assigned with an annotation
        ("Compared", False),  # `==` binds nothing
        ("_Private", False),  # `*` never brings a private name
        ("Missing", False),
    ],
)
def test_star_import_lookup(tmp_path, name, found):
    t, srt = table(tmp_path, {**LIBS, "models/base.py": STAR_BASE, "models/vl.py": "from sglang.srt.models.base import *\n"}, "models/vl.py")
    assert t.stars == [Origin(f"{M}.base", None, srt / "models" / "base.py")]
    assert "Base" not in t.names  # looked up when asked for, not listed
    expected = Origin(f"{M}.base", name, srt / "models" / "base.py") if found else None
    assert t.lookup(name) == expected


def test_star_chain_and_cycle(tmp_path):
    t, srt = table(tmp_path, {
        **LIBS,
        "models/a.py": "from sglang.srt.models.b import *\n",
        "models/b.py": "from .c import *\nfrom sglang.srt.models.a import *\n",
        "models/c.py": "from sglang.srt.models.llama import LlamaModel\n",
    }, "models/a.py")
    # a gets it through b's star import of c: named after the module a star-imports
    assert t.lookup("LlamaModel") == Origin(f"{M}.b", "LlamaModel", srt / "models" / "b.py")
    assert t.lookup("Nowhere") is None  # a <-> b star cycle ends


def test_out_of_tree_star_import_is_not_followed(tmp_path):
    t, _ = table(tmp_path, {"models/vl.py": "from torch.nn import *\n"}, "models/vl.py")
    assert t.stars == []
    assert t.lookup("Linear") is None


def test_module_path(tmp_path):
    srt = write(tmp_path, LIBS)
    tree = locate_tree(tmp_path)
    assert module_path(tree, f"{M}.llama") == srt / "models" / "llama.py"
    assert module_path(tree, M) == srt / "models" / "__init__.py"
    assert module_path(tree, "sglang.srt") == srt / "__init__.py"
    assert module_path(tree, f"{M}.nope") is None
    assert module_path(tree, "torch.nn") is None
    assert module_path(tree, "sglang.srtx.models") is None  # a prefix of the name is not the package
