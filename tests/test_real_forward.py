"""tests/real_forward.py, the harness that runs real releases' classes on stubs, checked on small trees
of our own: what it builds, and that a broken forward shows in what it reports."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from real_forward import tolerant_init

HERE = Path(__file__).resolve().parent


def _module(tmp_path: Path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INIT_CASES = [
    # (the __init__ body, the attributes it leaves set)
    ("self.a = 1\nself.b = 1 / 0\nself.c = 3", {"base": True, "a": 1, "c": 3}),
    ("if missing_name:\n    self.a = 1\nelse:\n    self.a = 2\nself.flag = False", {"base": True, "flag": False}),
    ("if True:\n    self.a = broken()\n    self.b = 2\nself.flag = False", {"base": True, "b": 2, "flag": False}),
    ("self.x = [i for i in range(3)]\nreturn\nself.never = 1", {"base": True, "x": [0, 1, 2]}),
]


@pytest.mark.parametrize(("body", "expected"), INIT_CASES)
def test_tolerant_init_skips_the_statements_that_raise(tmp_path, body, expected):
    source = "class Base:\n    def __init__(self):\n        self.base = True\n\n\n"
    source += "def broken():\n    raise RuntimeError('no process group')\n\n\n"
    source += "class Model(Base):\n    def __init__(self, config, prefix=''):\n        super().__init__()\n"
    source += textwrap.indent(body, " " * 8) + "\n"
    Model = _module(tmp_path, "tolerant_case", source).Model
    Model.__init__ = tolerant_init(Model)
    assert vars(Model(object())) == expected


def test_tolerant_init_keeps_defaults_and_leaves_inherited_inits_alone(tmp_path):
    module = _module(tmp_path, "tolerant_defaults", """
        class Base:
            def __init__(self, config, flag=False, *, prefix="p"):
                self.flag, self.prefix = flag, prefix

        class Child(Base):
            pass
    """)
    made = tolerant_init(module.Base)
    assert (made.__defaults__, made.__kwdefaults__) == ((False,), {"prefix": "p"})
    assert tolerant_init(module.Child) is None


TREE = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/distributed/__init__.py": """
        def get_pp_group():
            raise AssertionError("pipeline model parallel group is not initialized")
    """,
    "sglang/srt/models/__init__.py": "",
    "sglang/srt/models/tiny.py": """
        from typing import List, Optional

        import torch
        from torch import nn

        from sglang.srt.distributed import get_pp_group


        class TinyModel(nn.Module):
            def __init__(self, config, prefix: str = ""):
                super().__init__()
                self.layers = make_layers(config)  # an undefined helper: the harness skips it
                self.layers_to_capture = []


        class TinyForCausalLM(nn.Module):
            def __init__(self, config, quant_config=None, prefix: str = ""):
                super().__init__()
                self.pp_group = get_pp_group()
                self.config = config
                self.model = TinyModel(config)
                self.vision = config.vision_config.depth / 0
                self.capture_aux_hidden_states = False

            def forward(self, input_ids, positions, forward_batch):
                hidden_states = self.model(input_ids, positions, forward_batch)
                aux_hidden_states = None
                if self.capture_aux_hidden_states:
                    hidden_states, aux_hidden_states = hidden_states
                if self.pp_group.is_last_rank:
                    return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)
                return hidden_states

            def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
                if not self.pp_group.is_last_rank:
                    return
                self.capture_aux_hidden_states = True
                self.model.layers_to_capture = [val + 1 for val in layer_ids]


        class NoArgForCausalLM(TinyForCausalLM):
            def forward(self, input_ids, positions, forward_batch):
                hidden_states = self.model(input_ids, positions, forward_batch)
                if self.capture_aux_hidden_states:
                    hidden_states, _ = hidden_states
                return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)


        class NoDefaultForCausalLM(TinyForCausalLM):
            def __init__(self, config, quant_config=None, prefix: str = ""):
                nn.Module.__init__(self)
                self.pp_group = get_pp_group()
                self.model = TinyModel(config)


        class LoopModel(nn.Module):
            def __init__(self, config, prefix: str = ""):
                super().__init__()
                self.pp_group = get_pp_group()
                self.layers = make_layers(config)
                self.layers_to_capture = []

            def forward(self, input_ids, positions, forward_batch, input_embeds=None):
                hidden_states, residual = self.embed_tokens(input_ids), None
                aux_hidden_states = []
                for i in range(self.start_layer, self.end_layer):
                    if i in self.layers_to_capture:
                        aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)
                    hidden_states, residual = self.layers[i](positions, hidden_states, forward_batch, residual)
                hidden_states, _ = self.norm(hidden_states, residual)
                if len(aux_hidden_states) == 0:
                    return hidden_states
                return hidden_states, aux_hidden_states


        class TransformerForCausalLM(TinyForCausalLM):
            def __init__(self, config, quant_config=None, prefix: str = ""):
                nn.Module.__init__(self)
                self.pp_group = get_pp_group()
                self.transformer = LoopModel(config)
                self.capture_aux_hidden_states = False

            def forward(self, input_ids, positions, forward_batch):
                hidden_states = self.transformer(input_ids, positions, forward_batch)
                aux_hidden_states = None
                if self.capture_aux_hidden_states:
                    hidden_states, aux_hidden_states = hidden_states
                return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)

            def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
                self.capture_aux_hidden_states = True
                self.transformer.layers_to_capture = [val + 1 for val in layer_ids]


        class AttentionLayer(nn.Module):
            pass


        class MambaLayer(nn.Module):
            pass


        Layers = AttentionLayer | MambaLayer


        class CheckedModel(LoopModel):
            def forward(self, input_ids, positions, forward_batch, input_embeds=None):
                hidden_states, residual = self.embed_tokens(input_ids), None
                aux_hidden_states = []
                for i in range(self.start_layer, self.end_layer):
                    layer = self.layers[i]
                    if not isinstance(layer, Layers):
                        raise ValueError(f"Unknown layer type: {type(layer)}")
                    if i in self.layers_to_capture:
                        aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)
                    hidden_states, residual = layer.forward(hidden_states=hidden_states, residual=residual, forward_batch=forward_batch)
                hidden_states, _ = self.norm_f(hidden_states, residual)
                if len(aux_hidden_states) == 0:
                    return hidden_states
                return hidden_states, aux_hidden_states


        class CheckedForCausalLM(TransformerForCausalLM):
            def __init__(self, config, quant_config=None, prefix: str = ""):
                nn.Module.__init__(self)
                self.pp_group = get_pp_group()
                self.transformer = CheckedModel(config)
                self.capture_aux_hidden_states = False


        class HooklessForCausalLM(nn.Module):
            def forward(self, input_ids, positions, forward_batch):
                return self.logits_processor(input_ids, self.model(input_ids, positions, forward_batch), self.lm_head, forward_batch)
    """,
}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    site = tmp_path_factory.mktemp("tiny-site")
    for rel, text in TREE.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    classes = ["TinyForCausalLM", "NoArgForCausalLM", "NoDefaultForCausalLM", "HooklessForCausalLM"]
    spec = site.parent / "tiny-spec.json"
    entries = [{"module": "sglang.srt.models.tiny", "class": c} for c in classes]
    entries += [{"module": "sglang.srt.models.tiny", "class": c, "backbone": "real"} for c in ("TransformerForCausalLM", "CheckedForCausalLM")]
    spec.write_text(json.dumps(entries), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-I", str(HERE / "real_forward.py"), str(site), str(spec)],
        capture_output=True, text=True, env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return {key.rpartition(":")[2]: value for key, value in json.loads(done.stdout).items() if ":" in key} | {
        "signature": json.loads(done.stdout)["signature"]}


def test_a_complete_class_hands_the_hooked_layers_on_with_the_trees_shift(report):
    tiny = report["TinyForCausalLM"]
    assert tiny["hooks"] == ["set_eagle3_layers_to_capture"] and report["signature"] == "mirrored"
    (off,) = tiny["off"]["logits"]
    assert (off["hidden_states"], off["aux_hidden_states"], off["lm_head"]) == ("hidden", None, "<lm_head>")
    on = tiny["on"]["set_eagle3_layers_to_capture"]
    assert on["backbone"] == {"layers_to_capture": [1, 3, 5]} and on["logits"][0]["aux_hidden_states"] == ["aux1", "aux3", "aux5"]
    # the rank that is not the last: the hook returns early, the forward hands on the backbone's proxy
    assert tiny["not_last"] == {"returned": "<pp_proxy>", "logits": [], "backbone_calls": 1, "backbone": {"layers_to_capture": []}}


def test_a_forward_that_drops_the_aux_states_shows_it(report):
    on = report["NoArgForCausalLM"]["on"]["set_eagle3_layers_to_capture"]
    assert on["backbone"]["layers_to_capture"] == [1, 3, 5] and on["logits"][0]["aux_hidden_states"] is None


def test_an_init_chain_without_the_flag_default_fails_every_forward(report):
    off = report["NoDefaultForCausalLM"]["off"]
    assert off["error"].startswith("AttributeError") and "capture_aux_hidden_states" in off["error"]


def test_a_stub_base_is_not_a_hook(report):
    hookless = report["HooklessForCausalLM"]
    assert hookless["hooks"] == [] and hookless["on"] == {}
    assert hookless["off"]["logits"][0]["hidden_states"] == "hidden"


def test_a_real_backbone_hands_on_the_streams_entering_the_captured_layers(report):
    """The backbone the hook writes on (`self.transformer`), built by its own __init__ and run with
    recording layers: ids [0, 2, 4] shifted by the hook's `val + 1` capture what enters layers 1, 3, 5."""
    lm = report["TransformerForCausalLM"]
    assert (lm["backbone"], lm["backbone_attribute"]) == ("real", "transformer")
    (off,) = lm["off"]["logits"]
    assert (off["hidden_states"], off["aux_hidden_states"]) == ("norm((h5 + r5))", None)
    on = lm["on"]["set_eagle3_layers_to_capture"]
    assert on["logits"][0]["aux_hidden_states"] == ["(h0 + r0)", "(h2 + r2)", "(h4 + r4)"]
    assert on["logits"][0]["hidden_states"] == off["hidden_states"] and on["backbone_calls"] == 1


def test_a_backbone_that_checks_its_layer_types_and_calls_forward_runs_on_recording_layers(report):
    """NemotronH's loop: `if not isinstance(layer, Layers): raise`, `Layers` a union of its layer
    classes, then `layer.forward(hidden_states=..., residual=...)`: the recording layers pass the check
    and record the call, so the streams are the same as through `layer(...)`."""
    checked, plain = report["CheckedForCausalLM"], report["TransformerForCausalLM"]
    assert "error" not in checked["off"], checked["off"]
    (off,) = checked["off"]["logits"]
    assert off["hidden_states"] == "norm((h5 + r5))"  # `self.norm_f` replaced by the recording norm
    on = checked["on"]["set_eagle3_layers_to_capture"]["logits"][0]
    assert on["aux_hidden_states"] == plain["on"]["set_eagle3_layers_to_capture"]["logits"][0]["aux_hidden_states"]
