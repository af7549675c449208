"""A causal LM whose bare backbone has its own capture hook, and which lacks one: the hook is handed to
the backbone as it is (a delegation) when the analysis finds that enough, with the delegation written:
the backbone marks its chosen layers itself, and the class's forward already unpacks what the backbone
returns and hands the aux states to its logits processor.  SGLang 0.5.18 fixed Qwen3.5's text classes
so for DFlash (`self.model.set_dflash_layers_to_capture(...)`); 0.5.17 is what `check` must predict it on.
Where the class's forward never unpacks, the hook needs the class's own part: no delegation."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import invoke, write_srt_tree

RUNNER = '''\
class ModelRunner:
    def __init__(self, model, spec_algorithm, layer_ids=None):
        self.model = model
        if spec_algorithm.is_eagle3():
            self.model.set_eagle3_layers_to_capture(layer_ids)
'''

WORKER = '''\
class EAGLEWorker:
    def __init__(self, target_worker, draft_model_runner):
        embed, head = target_worker.model_runner.model.get_embed_and_head()
        draft_model_runner.model.set_embed_and_head(embed, head)
'''

# The backbone marks the chosen layers (Qwen3.5's per-layer flags); the causal LM unpacks on what it returns.
MODEL = '''\
from torch import nn


class FlagModel(nn.Module):
    def __init__(self, config):
        self.layers = nn.ModuleList([FlagLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def set_eagle3_layers_to_capture(self, layers_to_capture: list[int]):
        self.layers_to_capture = layers_to_capture
        for layer_id in self.layers_to_capture:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states, residual = input_ids, None
        aux_hidden_states = []
        for layer_idx in range(len(self.layers)):
            layer = self.layers[layer_idx]
            hidden_states, residual = layer(
                positions,
                hidden_states,
                forward_batch,
                residual,
                captured=aux_hidden_states if getattr(layer, "_is_layer_to_capture", False) else None,
            )
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class FlagForCausalLM(nn.Module):
    def __init__(self, config):
        self.config = config
        self.model = FlagModel(config)
        self.lm_head = object()
        self.logits_processor = object()

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if isinstance(hidden_states, tuple):
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def set_embed_and_head(self, embed, head):
        self.model.embed_tokens.weight, self.lm_head.weight = embed, head


EntryClass = FlagForCausalLM
'''

UNPACK = "        if isinstance(hidden_states, tuple):\n            hidden_states, aux_hidden_states = hidden_states\n"
HOOK = "set_eagle3_layers_to_capture"


def tree(tmp_path: Path, text: str = MODEL) -> Path:
    return write_srt_tree(tmp_path, {"model_executor/model_runner.py": RUNNER, "speculative/eagle_worker.py": WORKER, "models/flag.py": text})


def check_json(root: Path) -> tuple[int, dict]:
    result = invoke("check", root, "--model", "flag", "--format", "json", "--no-cache")
    return result.exit_code, json.loads(result.stdout)


def test_the_hook_is_handed_to_the_backbone_that_marks_its_layers(tmp_path: Path) -> None:
    root = tree(tmp_path)
    code, before = check_json(root)
    (model,) = before["models"]
    assert (code, model["status"]) == (1, "fixable")
    (gap,) = model["missing"]
    assert (gap["name"], gap["fix"]) == (HOOK, {"kind": "delegate", "to": "model"})
    module = root / "sglang/srt/models/flag.py"
    applied = invoke("apply", root, "--model", "flag")
    assert applied.exit_code == 0, applied.stdout
    written = module.read_text()
    assert "return inner.set_eagle3_layers_to_capture(layers_to_capture)" in written
    code, after = check_json(root)
    (model,) = after["models"]
    assert (code, model["status"], model["missing"]) == (0, "compliant", [])
    assert invoke("apply", root, "--model", "flag").exit_code == 0 and module.read_text() == written


def test_a_forward_that_never_unpacks_needs_the_class_own_part(tmp_path: Path) -> None:
    assert MODEL.count(UNPACK) == 1
    root = tree(tmp_path, MODEL.replace(UNPACK, ""))
    code, data = check_json(root)
    (model,) = data["models"]
    assert (code, model["status"]) == (1, "needs_code")
    (gap,) = model["missing"]
    assert gap["name"] == HOOK and gap["fix"] is None
    assert "would skip the class's own part" in gap["blocker"]
