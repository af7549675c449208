"""The wrapper finder on its own: which attribute of a model class holds the inner language model.

Each test writes a small tree shaped like SGLang's model modules (a multimodal wrapper, a base
class whose constructor parameter picks the language model, a causal LM around a bare backbone)
and asserts the attribute(s) and class(es) the finder reports, and what it could not follow.
"""

from __future__ import annotations

from pathlib import Path

from helpers import write_srt_tree

from eaglepatch.analyze.class_index import ClassIndex
from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.wrappers import WrapperFinder
from eaglepatch.engines import locate_tree
from eaglepatch.records import Protocol, ProtocolMember

NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})

DEEPSEEK_V2 = """\
from torch import nn


class DeepseekV2Model(nn.Module):
    pass


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.model = DeepseekV2Model(config)
        self.lm_head = nn.Linear(8, 8)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
"""
VISION = """\
from torch import nn


class MoonVitPretrainedModel(nn.Module):
    pass
"""
KIMI_LIKE = """\
from torch import nn

from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
from sglang.srt.models.moon_vit import MoonVitPretrainedModel


class KimiLikeProjector(nn.Module):
    pass


class KimiLikeForConditionalGeneration(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.config = config
        self.vision_tower = MoonVitPretrainedModel(config.vision_config)
        self.mm_projector = KimiLikeProjector(config)
        self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)


EntryClass = [KimiLikeForConditionalGeneration]
"""


write_tree = write_srt_tree


def finder_for(root: Path) -> WrapperFinder:
    tree = locate_tree(root)
    return WrapperFinder(ClassIndex(RunContext.fresh(tree)))


def held(root: Path, rel: str, name: str, protocol: Protocol = NO_PROTOCOL) -> dict[str, list[str]]:
    finder = finder_for(root)
    inners = finder.inner_models(finder.cache.read(finder.tree.srt / rel), name, protocol)
    return {inner.attribute: [c.name for c in inner.classes] for inner in inners}


KIMI_TREE = {"models/deepseek_v2.py": DEEPSEEK_V2, "models/moon_vit.py": VISION, "models/kimi_like.py": KIMI_LIKE}


def test_a_multimodal_wrapper_holds_its_language_model_not_its_tower_or_projector(tmp_path):
    root = write_tree(tmp_path, KIMI_TREE)
    assert held(root, "models/kimi_like.py", "KimiLikeForConditionalGeneration") == {"language_model": ["DeepseekV3ForCausalLM"]}
    finder = finder_for(root)
    wrapper = finder.wrapper(finder.cache.read(finder.tree.srt / "models/kimi_like.py"), "KimiLikeForConditionalGeneration", NO_PROTOCOL)
    [inner] = wrapper.inners
    assert (inner.file, inner.line, inner.conditional) == ("models/kimi_like.py", 17, False)
    assert wrapper.cls.external_bases == ("nn.Module",) and wrapper.forwards_dynamically is None
    # the inner class inherits the hook from DeepseekV2ForCausalLM: the finder sees it through the index
    assert inner.classes[0].members["set_eagle3_layers_to_capture"].owner == "DeepseekV2ForCausalLM"


def test_the_inner_offering_a_protocol_member_wins_over_other_models(tmp_path):
    files = dict(KIMI_TREE)
    files["models/kimi_like.py"] = KIMI_LIKE.replace(
        "        self.language_model =", "        self.draft_helper = DeepseekV2Model(config)\n        self.language_model ="
    ).replace("import DeepseekV3ForCausalLM", "import DeepseekV2Model, DeepseekV3ForCausalLM")
    root = write_tree(tmp_path, files)
    both = held(root, "models/kimi_like.py", "KimiLikeForConditionalGeneration")
    assert both == {"draft_helper": ["DeepseekV2Model"], "language_model": ["DeepseekV3ForCausalLM"]}
    protocol = Protocol(members={"set_eagle3_layers_to_capture": ProtocolMember("set_eagle3_layers_to_capture")}, consumers=[], general_interface={})
    assert held(root, "models/kimi_like.py", "KimiLikeForConditionalGeneration", protocol) == {"language_model": ["DeepseekV3ForCausalLM"]}


def test_a_constructor_parameter_picks_the_inner_class(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/deepseek_v2.py": DEEPSEEK_V2,
            "models/vl_base.py": """\
            from torch import nn

            from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM


            class VLBaseForConditionalGeneration(nn.Module):
                def __init__(self, config, language_model_cls=DeepseekV2ForCausalLM):
                    super().__init__()
                    self.language_model = language_model_cls(config)


            class VLV3ForConditionalGeneration(VLBaseForConditionalGeneration):
                def __init__(self, config):
                    super().__init__(config, language_model_cls=DeepseekV3ForCausalLM)


            class VLAnyForConditionalGeneration(nn.Module):
                def __init__(self, config, lm_cls):
                    super().__init__()
                    self.language_model = lm_cls(config)
            """,
        },
    )
    assert held(root, "models/vl_base.py", "VLBaseForConditionalGeneration") == {"language_model": ["DeepseekV2ForCausalLM"]}
    assert held(root, "models/vl_base.py", "VLV3ForConditionalGeneration") == {"language_model": ["DeepseekV3ForCausalLM"]}
    finder = finder_for(root)
    [inner] = finder.inner_models(finder.cache.read(finder.tree.srt / "models/vl_base.py"), "VLAnyForConditionalGeneration", NO_PROTOCOL)
    assert inner.attribute == "language_model" and inner.classes == ()
    [unresolved] = inner.unresolved
    assert unresolved.at == "models/vl_base.py:20"
    assert unresolved.why == "lm_cls: a parameter with no default, given at run time"


def test_a_causal_lm_around_a_bare_backbone_holds_the_backbone_and_keeps_its_own_head(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "layers/__init__.py": "",
            "layers/vocab_parallel_embedding.py": """\
            from torch import nn


            class ParallelLMHead(nn.Module):
                pass
            """,
            "models/llama_like.py": """\
            from torch import nn

            from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead


            class LlamaLikeModel(nn.Module):
                pass


            class LlamaLikeForCausalLM(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.model = LlamaLikeModel(config)
                    if config.tie_word_embeddings:
                        self.lm_head = self.model.embed_tokens
                    else:
                        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
            """,
        },
    )
    assert held(root, "models/llama_like.py", "LlamaLikeForCausalLM") == {"model": ["LlamaLikeModel"]}
    finder = finder_for(root)
    wrapper = finder.wrapper(finder.cache.read(finder.tree.srt / "models/llama_like.py"), "LlamaLikeForCausalLM", NO_PROTOCOL)
    assert "lm_head" in wrapper.cls.members
    assert "lm_head" not in wrapper.inners[0].classes[0].members


def test_a_wrapper_inherited_through_an_aliased_import_holds_what_its_base_builds(tmp_path):
    files = dict(KIMI_TREE)
    files["models/kimi_like_v2.py"] = """\
    from sglang.srt.models.kimi_like import KimiLikeForConditionalGeneration as KimiBase


    class KimiLikeV2ForConditionalGeneration(KimiBase):
        pass


    EntryClass = KimiLikeV2ForConditionalGeneration
    """
    root = write_tree(tmp_path, files)
    finder = finder_for(root)
    [inner] = finder.inner_models(finder.cache.read(finder.tree.srt / "models/kimi_like_v2.py"), "KimiLikeV2ForConditionalGeneration", NO_PROTOCOL)
    assert (inner.attribute, [c.name for c in inner.classes]) == ("language_model", ["DeepseekV3ForCausalLM"])
    assert (inner.file, inner.line) == ("models/kimi_like.py", 17)  # where the base's __init__ assigns it


def test_branches_and_a_module_level_builder_are_followed(tmp_path):
    root = write_tree(
        tmp_path,
        {
            "models/deepseek_v2.py": DEEPSEEK_V2,
            "models/branchy.py": """\
            from torch import nn

            from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM


            def build_language_model(config):
                return DeepseekV3ForCausalLM(config)


            class BranchyForConditionalGeneration(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    if config.use_v3:
                        self.language_model = DeepseekV3ForCausalLM(config)
                    else:
                        self.language_model = DeepseekV2ForCausalLM(config)


            class BuiltForConditionalGeneration(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.language_model = build_language_model(config)
            """,
        },
    )
    finder = finder_for(root)
    source = finder.cache.read(finder.tree.srt / "models/branchy.py")
    [inner] = finder.inner_models(source, "BranchyForConditionalGeneration", NO_PROTOCOL)
    assert [c.name for c in inner.classes] == ["DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"] and inner.conditional
    assert held(root, "models/branchy.py", "BuiltForConditionalGeneration") == {"language_model": ["DeepseekV3ForCausalLM"]}
