"""The class index on its own: a class found by name through imports, its bases and members.

Each test writes the smallest tree (shaped like SGLang's model modules) that shows one way a
class is named, and asserts what the index finds for it.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import libcst as cst
import pytest
from helpers import write_srt_tree

from eaglepatch.analyze.class_index import ClassIndex, signature_node
from eaglepatch.analyze.context import RunContext
from eaglepatch.engines import locate_tree

DEEPSEEK_V2 = """\
from torch import nn


class DeepseekV2Model(nn.Module):
    def forward(self, input_ids):
        return input_ids


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = DeepseekV2Model(config)
        self.lm_head = nn.Linear(8, 8)

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    @property
    def start_layer(self):
        return 0
"""


write_tree = write_srt_tree


def index_for(root: Path) -> ClassIndex:
    tree = locate_tree(root)
    return ClassIndex(RunContext.fresh(tree))


def info_of(index: ClassIndex, rel: str, name: str):
    return index.class_info(index.cache.read(index.tree.srt / rel), name)


def test_a_base_imported_under_another_name_is_followed_and_its_members_inherited(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/deepseek_v2.py": DEEPSEEK_V2,
            "models/deepseek_v3.py": """\
            from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM as V2Base


            class DeepseekV3ForCausalLM(V2Base):
                def set_eagle3_layers_to_capture(self, layer_ids=None):
                    pass
            """,
        },
    )
    info = info_of(index_for(root), "models/deepseek_v3.py", "DeepseekV3ForCausalLM")
    assert info.bases == ("DeepseekV2ForCausalLM",)
    assert info.base_keys == ("models/deepseek_v2.py:DeepseekV2ForCausalLM",)  # the file that defines it
    assert info.external_bases == ("nn.Module",)
    assert info.members["set_eagle3_layers_to_capture"].owner == "DeepseekV3ForCausalLM"
    inherited = info.members["get_embed_and_head"]
    assert (inherited.owner, inherited.file, inherited.kind) == ("DeepseekV2ForCausalLM", "models/deepseek_v2.py", "method")
    assert info.members["start_layer"].kind == "property"
    assert info.members["lm_head"].kind == "attribute"  # `self.lm_head = ...` in the base's __init__


@pytest.mark.parametrize(
    ("header", "owner", "bases"),
    [
        # a diamond: C overrides A's hook, B inherits it; Python calls C's for D(B, C) (C3), not A's
        ("class D(B, C):", "C", ("B", "C", "A")),
        ("class D(C, B):", "C", ("C", "B", "A")),
        ("class D(B):", "A", ("B", "A")),
    ],
)
def test_an_inherited_member_is_the_one_pythons_method_resolution_order_finds(tmp_path, header, owner, bases):
    root = write_tree(
        tmp_path,
        {
            "models/diamond.py": f"""\
            class A:
                def get_embed_and_head(self):
                    return None


            class B(A):
                pass


            class C(A):
                def get_embed_and_head(self):
                    return self.model.embed_tokens.weight, self.lm_head.weight


            {header}
                pass
            """,
        },
    )
    info = info_of(index_for(root), "models/diamond.py", "D")
    assert info.members["get_embed_and_head"].owner == owner and info.bases == bases


def test_a_module_alias_and_a_module_level_alias_name_the_class(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/deepseek_v2.py": DEEPSEEK_V2,
            "models/mimo.py": """\
            from sglang.srt.models import deepseek_v2 as dsv2

            Backbone = dsv2.DeepseekV2ForCausalLM


            class MiMoForCausalLM(Backbone):
                pass


            class MiMoMTP(dsv2.DeepseekV2Model):
                pass
            """,
        },
    )
    index = index_for(root)
    source = index.cache.read(index.tree.srt / "models" / "mimo.py")
    found = index.find_class(source, ast.Name("Backbone"))
    assert found is not None and (found[0].rel, found[1]) == ("models/deepseek_v2.py", "DeepseekV2ForCausalLM")
    assert info_of(index, "models/mimo.py", "MiMoForCausalLM").bases == ("DeepseekV2ForCausalLM",)
    assert info_of(index, "models/mimo.py", "MiMoMTP").bases == ("DeepseekV2Model",)


def test_members_in_a_block_of_the_class_body_count_and_a_nested_class_s_do_not(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/gated.py": """\
            from torch import nn

            _is_cuda = True


            class GatedForCausalLM(nn.Module):
                packed_modules_mapping = {}

                if _is_cuda:
                    def get_embed_and_head(self):
                        return None

                    capture_default = True

                class Config:
                    def nested_only(self):
                        pass

                def __init__(self, config):
                    super().__init__()
                    self.model = None
                    if config.tie:
                        self.lm_head = None
            """,
        },
    )
    text_index = index_for(root)
    info = info_of(text_index, "models/gated.py", "GatedForCausalLM")
    assert info.members["get_embed_and_head"].kind == "method"
    assert {"packed_modules_mapping", "capture_default", "model", "lm_head"} <= set(info.members)
    assert all(info.members[n].kind == "attribute" for n in ("packed_modules_mapping", "capture_default", "model", "lm_head"))
    assert "nested_only" not in info.members


def test_why_not_found_says_which_link_is_missing(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/deepseek_v2.py": DEEPSEEK_V2,
            "models/broken.py": """\
            from transformers import AutoModel
            from sglang.srt.models.gone import GoneForCausalLM
            from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
            """,
        },
    )
    index = index_for(root)
    source = index.cache.read(index.tree.srt / "models" / "broken.py")
    for name in ("AutoModel", "GoneForCausalLM", "DeepseekV3ForCausalLM", "NeverSeen"):
        assert index.find_class(source, ast.Name(name)) is None
    assert index.why_not_found(source, ast.Name("AutoModel")) == "imported from transformers, outside the SGLang tree"
    assert index.why_not_found(source, ast.Name("GoneForCausalLM")) == (
        "module sglang.srt.models.gone is not in this tree (fix the import in models/broken.py)"
    )
    assert index.why_not_found(source, ast.Name("DeepseekV3ForCausalLM")) == "models/deepseek_v2.py has no class DeepseekV3ForCausalLM"
    assert index.why_not_found(source, ast.Name("NeverSeen")) == "neither defined nor imported in models/broken.py"


def test_a_definition_is_parsed_once_into_the_cache_and_the_record_stays_as_it_was(tmp_path):
    root = write_tree(tmp_path, {"models/deepseek_v2.py": DEEPSEEK_V2})
    index = index_for(root)
    signature = info_of(index, "models/deepseek_v2.py", "DeepseekV2ForCausalLM").members["get_embed_and_head"]
    before = dataclasses.astuple(signature)
    node = signature_node(index.cache, signature)
    assert isinstance(node, cst.FunctionDef) and node.name.value == "get_embed_and_head"
    assert signature_node(index.cache, signature) is node  # read from the cache, not parsed again
    assert index.cache.definitions[(signature.path, signature.line, "get_embed_and_head")] is node
    assert dataclasses.astuple(signature) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        signature.line = 1  # type: ignore[misc]
    attribute = info_of(index, "models/deepseek_v2.py", "DeepseekV2ForCausalLM").members["lm_head"]
    assert signature_node(index.cache, attribute) is None  # an attribute has no def to copy
