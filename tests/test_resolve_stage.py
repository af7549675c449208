"""The analyze stage's resolve on its own: which inner model a class holds, on tiny trees written to tmp_path.

Each row of a table is one construct SGLang uses to build the inner model, the smallest tree
that shows it, and what it must resolve to.  Every row failed before the construct was
followed (the class's inner model was missing, wrong, or silently dropped).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import write_srt_tree

from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.resolve import Resolver
from eaglepatch.engines import locate_tree
from eaglepatch.read.source_cache import SourceCache
from eaglepatch.records import Protocol

NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})

# Small model modules the rows import from.
TEXT = """\
from torch import nn


class TextModel(nn.Module):
    pass


class MoeTextModel(nn.Module):
    pass
"""
LLAMA_LIKE = """\
from torch import nn


class LlamaLikeModel(nn.Module):
    pass


class LlamaLikeForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        self.config = config
        self.model = self._init_model(config, quant_config, prefix)

    def _init_model(self, config, quant_config=None, prefix=""):
        return LlamaLikeModel(config)
"""


write_tree = write_srt_tree


def resolver_for(root: Path) -> tuple[Resolver, SourceCache, Path]:
    tree = locate_tree(root)
    cache = SourceCache(tree.srt)
    return Resolver(RunContext(tree, cache, protocol=NO_PROTOCOL)), cache, tree.srt


def inner_models(root: Path, wrapper: str):
    rel, _, name = wrapper.partition(":")
    resolver, cache, srt = resolver_for(root)
    return resolver.inner_models(cache.read(srt / rel), name)


def resolved(inners) -> dict[str, list[str]]:
    return {inner.attribute: [c.name for c in inner.classes] for inner in inners}


def line_of(root: Path, rel: str, needle: str) -> str:
    """`rel:N` for the only line of srt/rel containing `needle`."""
    lines = (root / "sglang" / "srt" / rel).read_text().splitlines()
    hits = [n for n, line in enumerate(lines, start=1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return f"{rel}:{hits[0]}"


TABLE_OF_CLASSES = """\
                from torch import nn


                class FirstModel(nn.Module):
                    pass


                class SecondModel(nn.Module):
                    pass


                class ThirdModel(nn.Module):
                    pass


                _SUPPORTED = {
                    (1, 0): FirstModel,
                    (2, 0): SecondModel,
                }


                class VersionedModel(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        instance_class = _SUPPORTED.get(config.version)
                        inner = instance_class(config=config)
                        self.inner = inner
                """


# --------------------------------------------------------------------------- resolved constructs

RESOLVED = {
    "constructor parameter default": (
        {
            "models/text.py": TEXT,
            "models/vl.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class VLForConditionalGeneration(nn.Module):
                    def __init__(self, config, quant_config=None, prefix="", language_model_cls=TextModel):
                        super().__init__()
                        self.model = language_model_cls(config=config)
                """,
        },
        "models/vl.py:VLForConditionalGeneration",
        {"model": ["TextModel"]},
    ),
    "subclass passes the class to super().__init__ by keyword": (
        {
            "models/text.py": TEXT,
            "models/vl.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class VLForConditionalGeneration(nn.Module):
                    def __init__(
                        self,
                        config,
                        quant_config=None,
                        prefix="",
                        language_model_cls=TextModel,
                    ):
                        super().__init__()
                        if not getattr(config, "encoder_only", False):
                            self.model = language_model_cls(config=config)
                """,
            "models/vl_moe.py": """\
                from sglang.srt.models.text import MoeTextModel
                from sglang.srt.models.vl import VLForConditionalGeneration


                class VLMoeForConditionalGeneration(VLForConditionalGeneration):
                    def __init__(self, config, quant_config=None, prefix=""):
                        super().__init__(config, quant_config, prefix=prefix, language_model_cls=MoeTextModel)
                """,
        },
        "models/vl_moe.py:VLMoeForConditionalGeneration",
        {"model": ["MoeTextModel"]},
    ),
    "subclass passes its own parameter's default positionally": (
        {
            "models/text.py": TEXT,
            "models/vl.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class VLForConditionalGeneration(nn.Module):
                    def __init__(self, config, quant_config=None, prefix="", language_model_cls=TextModel):
                        super().__init__()
                        self.model = language_model_cls(config=config)
                """,
            "models/vl_moe.py": """\
                from sglang.srt.models.text import MoeTextModel
                from sglang.srt.models.vl import VLForConditionalGeneration


                class VLMoeForConditionalGeneration(VLForConditionalGeneration):
                    def __init__(self, config, quant_config=None, prefix="", language_model_cls=MoeTextModel):
                        super().__init__(config, quant_config, prefix, language_model_cls)
                """,
        },
        "models/vl_moe.py:VLMoeForConditionalGeneration",
        {"model": ["MoeTextModel"]},
    ),
    "subclass without __init__ keeps the base's default": (
        {
            "models/text.py": TEXT,
            "models/vl.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class VLForConditionalGeneration(nn.Module):
                    def __init__(self, config, language_model_cls=TextModel):
                        super().__init__()
                        self.model = language_model_cls(config=config)


                class EdgeForConditionalGeneration(VLForConditionalGeneration):
                    weights_mapper = None
                """,
        },
        "models/vl.py:EdgeForConditionalGeneration",
        {"model": ["TextModel"]},
    ),
    "a method on self builds it": (
        {"models/llama_like.py": LLAMA_LIKE},
        "models/llama_like.py:LlamaLikeForCausalLM",
        {"model": ["LlamaLikeModel"]},
    ),
    "a subclass overrides the building method": (
        {
            "models/llama_like.py": LLAMA_LIKE,
            "models/tele.py": """\
                from torch import nn
                from sglang.srt.models.llama_like import LlamaLikeForCausalLM, LlamaLikeModel


                class TeleModel(LlamaLikeModel):
                    pass


                class TeleForCausalLM(LlamaLikeForCausalLM):
                    def _init_model(self, config, quant_config=None, prefix=""):
                        return TeleModel(config, quant_config=quant_config, prefix=prefix)
                """,
        },
        "models/tele.py:TeleForCausalLM",
        {"model": ["TeleModel"]},
    ),
    "a factory method with several returns gives every candidate": (
        {
            "models/text.py": TEXT,
            "models/hybrid.py": """\
                from torch import nn
                from sglang.srt.models.text import MoeTextModel, TextModel


                class HybridForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = self.build_backbone(config)

                    def build_backbone(self, config):
                        if config.num_experts:
                            return MoeTextModel(config)
                        backbone = TextModel(config)
                        return backbone
                """,
        },
        "models/hybrid.py:HybridForCausalLM",
        {"model": ["MoeTextModel", "TextModel"]},
    ),
    "a class attribute names the class": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models import text


                class WrapForCausalLM(nn.Module):
                    body_cls = text.TextModel

                    def __init__(self, config):
                        super().__init__()
                        self.model = self.body_cls(config=config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"model": ["TextModel"]},
    ),
    "a subclass overrides the class attribute": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.text import MoeTextModel, TextModel


                class WrapForCausalLM(nn.Module):
                    body_cls = TextModel

                    def __init__(self, config):
                        super().__init__()
                        self.model = self.body_cls(config=config)


                class WrapMoeForCausalLM(WrapForCausalLM):
                    body_cls = MoeTextModel
                """,
        },
        "models/wrap.py:WrapMoeForCausalLM",
        {"model": ["MoeTextModel"]},
    ),
    "the callee on the line after `= (`": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.language_model = (
                            TextModel(
                                config,
                            )
                        )
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"language_model": ["TextModel"]},
    ),
    "the callee after a backslash continuation": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.text import TextModel


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.language_model = \\
                            TextModel(config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"language_model": ["TextModel"]},
    ),
    "either side of a conditional expression": (
        {
            "models/text.py": TEXT,
            "models/wrap.py": """\
                from torch import nn
                from sglang.srt.models.text import MoeTextModel, TextModel


                class WrapForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = TextModel(config) if config.dense else MoeTextModel(config)
                """,
        },
        "models/wrap.py:WrapForCausalLM",
        {"model": ["TextModel", "MoeTextModel"]},
    ),
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
    # MiniCPM-V's shape: the class for the config's version, looked up in a module-level table of classes
    "a class looked up in a module-level table of classes, through a local": (
        {"models/versioned.py": TABLE_OF_CLASSES},
        "models/versioned.py:VersionedModel",
        {"inner": ["FirstModel", "SecondModel"]},
    ),
    "a class looked up in a table of classes by subscript": (
        {"models/versioned.py": TABLE_OF_CLASSES.replace("_SUPPORTED.get(config.version)", "_SUPPORTED[config.version]")},
        "models/versioned.py:VersionedModel",
        {"inner": ["FirstModel", "SecondModel"]},
    ),
    "a lookup with a class as its default": (
        {"models/versioned.py": TABLE_OF_CLASSES.replace("_SUPPORTED.get(config.version)", "_SUPPORTED.get(config.version, ThirdModel)")},
        "models/versioned.py:VersionedModel",
        {"inner": ["FirstModel", "SecondModel", "ThirdModel"]},
    ),
}


@pytest.mark.parametrize("files, wrapper, expected", RESOLVED.values(), ids=list(RESOLVED))
def test_inner_model_is_resolved(tmp_path, files, wrapper, expected):
    inners = inner_models(write_tree(tmp_path, files), wrapper)
    assert resolved(inners) == expected
    assert all(not inner.unresolved for inner in inners)


def test_parameter_default_inner_is_reported_where_assigned(tmp_path):
    root = write_tree(tmp_path, {"models/text.py": TEXT, **RESOLVED["subclass passes the class to super().__init__ by keyword"][0]})
    [inner] = inner_models(root, "models/vl_moe.py:VLMoeForConditionalGeneration")
    assert (inner.file, inner.line, inner.conditional) == ("models/vl.py", int(line_of(root, "models/vl.py", "self.model =").split(":")[1]), True)
    assert inner.classes[0].file == "models/text.py"


# --------------------------------------------------------------------------- unresolved constructs

UNRESOLVED = {
    "an out-of-tree factory": (
        {
            "models/auto.py": """\
                from torch import nn
                from transformers import AutoModel


                class AutoForCausalLM(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.model = AutoModel.from_config(
                            config,
                            trust_remote_code=True,
                        )
                """,
        },
        "models/auto.py:AutoForCausalLM",
        "model",
        "self.model = AutoModel.from_config(config, trust_remote_code=True)",
        "models/auto.py:self.model =",
        "outside the SGLang tree",
    ),
    "a class picked from a registry at run time": (
        {
            "models/picked.py": """\
                from torch import nn

                _ARCHITECTURES = {}


                class PickedForConditionalGeneration(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        language_model_cls = _ARCHITECTURES[config.text_config.architectures[0]]
                        self.language_model = language_model_cls(config.text_config)
                """,
        },
        "models/picked.py:PickedForConditionalGeneration",
        "language_model",
        "self.language_model = language_model_cls(config.text_config)",
        "models/picked.py:self.language_model =",
        "chosen at run time",
    ),
    "a table of classes the module adds to": (
        {"models/versioned.py": TABLE_OF_CLASSES.replace("\n\n\n                class VersionedModel", "\n                _SUPPORTED[(3, 0)] = ThirdModel\n\n\n                class VersionedModel")},
        "models/versioned.py:VersionedModel",
        "inner",
        "self.inner = inner",
        "models/versioned.py:self.inner =",
        "chosen at run time",
    ),
    "a table whose values are not all classes": (
        {"models/versioned.py": TABLE_OF_CLASSES.replace("(2, 0): SecondModel,", "(2, 0): make_second_model(),")},
        "models/versioned.py:VersionedModel",
        "inner",
        "self.inner = inner",
        "models/versioned.py:self.inner =",
        "chosen at run time",
    ),
    "an instance built from a registry lookup, assigned through a local": (  # a registry filled elsewhere
        {"models/versioned.py": TABLE_OF_CLASSES.replace("(1, 0): FirstModel,\n                    (2, 0): SecondModel,\n", "")},
        "models/versioned.py:VersionedModel",
        "inner",
        "self.inner = inner",
        "models/versioned.py:self.inner =",
        "instance_class = _SUPPORTED.get(config.version)",
    ),
}


@pytest.mark.parametrize("files, wrapper, attribute, construct, at, why", UNRESOLVED.values(), ids=list(UNRESOLVED))
def test_unresolved_construct_is_kept(tmp_path, files, wrapper, attribute, construct, at, why):
    root = write_tree(tmp_path, files)
    [inner] = inner_models(root, wrapper)
    assert inner.attribute == attribute and inner.classes == ()
    [record] = inner.unresolved
    rel, _, needle = at.partition(":")
    assert (record.construct, record.at) == (construct, line_of(root, rel, needle))
    assert why in record.why


def test_towers_stay_out_of_unresolved_inners(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/mm.py": """\
                from torch import nn
                from transformers import AutoModel

                _ARCHITECTURES = {}


                class MMForConditionalGeneration(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.vision_tower = AutoModel.from_config(config.vision_config)
                        self.multi_modal_projector = _ARCHITECTURES["projector"](config)
                        self.language_model = _ARCHITECTURES[config.arch](config.text_config)
                """,
        },
    )
    assert [i.attribute for i in inner_models(root, "models/mm.py:MMForConditionalGeneration")] == ["language_model"]


# --------------------------------------------------------------------------- __getattr__

GETATTR_BODIES = {
    "forwards a listed few names": """\
        if name in ("get_embed_and_head", "set_embed_and_head"):
            return getattr(self.language_model, name)
        raise AttributeError(name)
    """,
    "raises for every name not listed": """\
        if name not in _FORWARDED:
            raise AttributeError(name)
        return getattr(self.language_model, name)
    """,
    "forwards names with a prefix": """\
        if name.startswith("get_"):
            return getattr(self.language_model, name)
        return super().__getattr__(name)
    """,
    "forwards nothing": """\
        raise AttributeError(f"{type(self).__name__} has no {name}")
    """,
}
STILL_DYNAMIC = {
    "forwards every name": "return getattr(self.inner, name)\n",
    "keeps one name out (a recursion guard)": """\
        if name == "language_model":
            raise AttributeError(name)
        return getattr(self.language_model, name)
    """,
    "tries its own attributes first": """\
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.language_model, name)
    """,
    "forwards whatever the inner model has": """\
        if hasattr(self.language_model, name):
            return getattr(self.language_model, name)
        raise AttributeError(name)
    """,
}


def _getattr_class(body: str) -> str:
    return (
        "from torch import nn\n\n_FORWARDED = ()\n\n\nclass HolderForCausalLM(nn.Module):\n"
        "    def __getattr__(self, name):\n" + textwrap.indent(textwrap.dedent(body), " " * 8)
    )


def class_info_of(root: Path, rel: str, name: str):
    resolver, cache, srt = resolver_for(root)
    return resolver.class_info(cache.read(srt / rel), name)


@pytest.mark.parametrize("body", GETATTR_BODIES.values(), ids=list(GETATTR_BODIES))
def test_getattr_that_forwards_some_names_is_not_dynamic(tmp_path, body):
    root = write_tree(tmp_path, {"models/holder.py": _getattr_class(body)})
    assert class_info_of(root, "models/holder.py", "HolderForCausalLM").dynamic is False


@pytest.mark.parametrize("body", STILL_DYNAMIC.values(), ids=list(STILL_DYNAMIC))
def test_getattr_that_forwards_any_name_stays_dynamic(tmp_path, body):
    root = write_tree(tmp_path, {"models/holder.py": _getattr_class(body)})
    assert class_info_of(root, "models/holder.py", "HolderForCausalLM").dynamic is True


# --------------------------------------------------------------------------- real releases


@pytest.mark.integration
@pytest.mark.parametrize("release", ["sglang_059", "sglang_latest"])
def test_real_release_inner_models(request, release):
    root = request.getfixturevalue(release)
    expected = {
        ("models/qwen3_vl.py", "Qwen3VLForConditionalGeneration"): ("model", "Qwen3LLMModel", "models/qwen3_vl.py"),
        ("models/qwen3_vl_moe.py", "Qwen3VLMoeForConditionalGeneration"): ("model", "Qwen3MoeLLMModel", "models/qwen3_vl_moe.py"),
        ("models/nemotron_h.py", "NemotronHForCausalLM"): ("model", "NemotronHModel", "models/nemotron_h.py"),
    }
    for (rel, name), (attribute, cls, where) in expected.items():
        inners = inner_models(root, f"{rel}:{name}")
        assert [(i.attribute, [(c.name, c.file) for c in i.classes]) for i in inners] == [(attribute, [(cls, where)])], name


# --------------------------------------------------------------------------- class headers, two readers
# `dotted_bases` reads a header's plain dotted bases off its text (or CPython's parser); anything it is not
# sure of is read whole by the index (`_parse_bases`).  (header, the bases' code, or None for "read whole")
HEADER_CASES = [
    ("class A(nn.Module):", ["nn.Module"]),
    ("class A(B, torch.nn.Module):", ["B", "torch.nn.Module"]),
    ("class A:", []),
    ("class A():", []),
    ("class A(B): pass", ["B"]),
    ("class A(\nB,\nC,\n):", ["B", "C"]),
    ("class A(Generic[T]):", None),
    ("class A(B, metaclass=Meta):", None),
    ("class A(nn . Module):", None),
    ("class A(*bases):", None),
    ("class A(make_base()):", None),
    ("class A(B,):", ["B"]),
    ("class A(B,,C):", None),
    ("class A(None):", None),
    ("class A(a.if):", None),
    ("class None(B):", None),
    ("class A(match, case.type):", ["match", "case.type"]),
    ("class A(B) :", ["B"]),
    ("class A(B)\n:", None),
    ("class A(B): # comment", ["B"]),
    ("class A(\u00e9.B):", ["\u00e9.B"]),
]


@pytest.mark.parametrize("header, bases", HEADER_CASES)
def test_dotted_bases_table(header, bases):
    from eaglepatch.analyze.class_index import dotted_bases
    from eaglepatch.read.expressions import source_code

    got = dotted_bases(header)
    assert (None if got is None else [source_code(base) for base in got]) == bases


@pytest.mark.parametrize("header", [h for h, _ in HEADER_CASES] + ["class A(B", "class A(B):\n    x = 1", "class\tA\t(\tB\t)\t:"])
def test_bases_read_off_the_text_are_those_the_parser_reads(header):
    from eaglepatch.analyze.class_index import _bases_read_by_ast, _plain_bases

    plain = _plain_bases(header)
    assert plain is None or plain == _bases_read_by_ast(header)


def test_bases_read_off_the_text_of_every_class_of_a_release(sglang_059):
    from eaglepatch.analyze.class_index import _bases_read_by_ast, _plain_bases

    answered = 0
    for path in sorted((sglang_059 / "sglang" / "srt").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").split("\n")
        for index, line in enumerate(lines):
            if line.lstrip().startswith("class "):
                header = "\n".join(part.strip() for part in lines[index : index + 4])
                header = header[: header.index(":") + 1] if ":" in header else header
                plain = _plain_bases(header)
                if plain is not None:
                    assert plain == _bases_read_by_ast(header), f"{path.name}:{index + 1}"
                    answered += 1
    assert answered > 500


def test_bases_agree_with_libcst_on_every_class_of_a_release(sglang_059):
    """Every one-line class header of a real release, read as the index reads it (plain dotted names off
    the text, any other header by CPython's parser): libcst's bases, each base's code (a class's label
    for a base outside the tree) libcst's code for it."""
    import libcst as cst

    from eaglepatch.analyze.class_index import dotted_bases
    from eaglepatch.read.expressions import source_code

    srt = sglang_059 / "sglang" / "srt"
    cache = SourceCache(srt)
    resolver = Resolver(RunContext(locate_tree(srt), cache))
    code = cst.Module(body=[]).code_for_node
    answered = whole = 0
    for path in sorted(srt.rglob("*.py")):
        source = cache.read(path)
        for index, _indent, kind, name in cache.outline(source).headers:
            if kind != "class":
                continue
            text = resolver.class_text(source, name)
            header = source.lines[index].strip()
            if text is None or text.header != index or not header.endswith(":"):
                continue  # headers over several lines: the tables cover those
            slow = cst.parse_statement(header + "\n    pass\n")
            assert isinstance(slow, cst.ClassDef)
            read = resolver.index.bases_of(text)
            assert [source_code(base) for base in read] == [code(a.value) for a in slow.bases], f"{path.name}:{index + 1}"
            answered += 1
            whole += dotted_bases(header) is None
    assert answered > 500 and whole >= 4, (answered, whole)  # Generic[T], make_base(): read whole
