"""Stage 4 on its own: which inner model a class holds, on tiny trees written to tmp_path.

Each row of a table is one construct SGLang uses to build the inner model, the smallest tree
that shows it, and what it must resolve to.  Every row failed before the construct was
followed (the class's inner model was missing, wrong, or silently dropped).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from patcher.locate import locate_tree
from patcher.records import Protocol
from patcher.resolve import Resolver
from patcher.source import SourceCache

NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})

# Small model modules the rows import from.
TEXT = """\
from torch import nn


class TextModel(nn.Module):
    pass


class MoeTextModel(nn.Module):
    pass
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """A site-packages-shaped folder holding sglang/srt with `files` (paths relative to srt)."""
    srt = root / "sglang" / "srt"
    for package in (root / "sglang", srt, srt / "models"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    for rel, text in files.items():
        path = srt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def resolver_for(root: Path) -> tuple[Resolver, SourceCache, Path]:
    tree = locate_tree(root)
    cache = SourceCache(tree.srt)
    return Resolver(tree, cache), cache, tree.srt


def inner_models(root: Path, wrapper: str):
    rel, _, name = wrapper.partition(":")
    resolver, cache, srt = resolver_for(root)
    return resolver.inner_models(cache.read(srt / rel), name, NO_PROTOCOL)


def resolved(inners) -> dict[str, list[str]]:
    return {inner.attribute: [c.name for c in inner.classes] for inner in inners}


# --------------------------------------------------------------------------- resolved constructs

RESOLVED = {
    "a module-level alias of a class": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models import text

                Backbone = text.TextModel


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = Backbone(config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"model": ["TextModel"]},
    ),
    "the try import, not its except ImportError fallback": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn

                try:
                    from sglang.srt.models.text import MoeTextModel as Backbone
                except ImportError:
                    from sglang.srt.models.text import TextModel as Backbone


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = Backbone(config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"model": ["MoeTextModel"]},
    ),
    "a name brought in by a star import": (
        {
            "models/text.py": TEXT,
            "models/common.py": "from sglang.srt.models.text import TextModel\n",
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.common import *


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = TextModel(config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"model": ["TextModel"]},
    ),
    "a one-line subclass": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = TextModel(config)


                class RenamedForCausalLM(WrapForCausalLM): pass
                """,
        },
        "models/wrap.py:RenamedForCausalLM",
        {"model": ["TextModel"]},
    ),
}


@pytest.mark.parametrize("files, wrapper, expected", RESOLVED.values(), ids=list(RESOLVED))
def test_inner_model_is_resolved(tmp_path, files, wrapper, expected):
    inners = inner_models(write_tree(tmp_path, files), wrapper)
    assert resolved(inners) == expected
    assert all(not inner.unresolved for inner in inners)
