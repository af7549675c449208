"""Writing the plumbing (patcher/plumbing/planner.py, codemods/add_plumbing.py, codemods/remove_plumbing.py),
proven on stubs.

The fixtures are small model files in SGLang's shapes (their own code): references whose plumbing is
complete (a llama-like pair capturing `hidden_states + residual`, a qwen-like one capturing it guarded
by `residual is not None`, one whose layers return one stream) and targets without it.  For each target:

* the plan, as a (source, expected) table written by hand from the module's rules: which pieces, where,
  in which words; and the blockers of the shapes it must refuse, each named;
* the codemod: the text it writes (by hand, for one target), black and isort leave it as it is, a second
  run changes nothing, revert gives the file back byte for byte;
* the proof: the original and the patched modules run on stubs (tests/plumbing_harness.py).  With capture
  off, the patched forward returns what the original returns and hands the logits processor the same
  arguments; with the hook the reference teaches called with layer ids, the aux states handed to the
  logits processor are the streams that entered the layers the hook's convention names (`val + 1`, read
  from the reference's hook), as the stub layers recorded them; a pipeline rank that is not the last
  returns what it returned before.
"""

from __future__ import annotations

import ast
from pathlib import Path

import black
import isort
import pytest
from helpers import write_srt_tree
from plumbing_harness import INPUTS, Config, PPGroup, PPProxyTensors, Sym, Token, build, load, set_rank

from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.resolve import Resolver
from eaglepatch.codemods.add_plumbing import PlumbingNotWritten, apply_plumbing, lay_out, parse_plumbing_marker
from eaglepatch.codemods.remove_plumbing import revert_plumbing
from eaglepatch.engines import locate_tree
from eaglepatch.plumbing.gate import HOOK, SourceClasses, TreeClasses, analyze_plumbing
from eaglepatch.plumbing.planner import PlumbingPlan, PlumbingPlanner, check_written, plan_plumbing, reference_hook, statement_fingerprint, tree_planner
from eaglepatch.records import Protocol

IMPORTS = """\
from torch import nn

from sglang.srt.distributed import get_pp_group
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.logits_processor import LogitsProcessor
from sglang.srt.model_executor.forward_batch_info import PPProxyTensors
"""

# --------------------------------------------------------------------------- references (plumbing complete)

LLAMA = IMPORTS + '''

class LikeDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, residual):
        return hidden_states, residual


class LikeModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pp_group = get_pp_group()
        self.layers = nn.ModuleList(
            [LikeDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        if self.pp_group.is_first_rank:
            hidden_states = self.embed_tokens(input_ids)
            residual = None
        else:
            hidden_states = pp_proxy_tensors["hidden_states"]
            residual = pp_proxy_tensors["residual"]

        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
            layer = self.layers[i]
            hidden_states, residual = layer(
                positions, hidden_states, forward_batch, residual
            )

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {"hidden_states": hidden_states, "residual": residual}
            )
        hidden_states, _ = self.norm(hidden_states, residual)

        if len(aux_hidden_states) == 0:
            return hidden_states

        return hidden_states, aux_hidden_states


class LikeForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = LikeModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states

        if self.pp_group.is_last_rank:
            return self.logits_processor(
                input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states
            )
        return hidden_states

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if not self.pp_group.is_last_rank:
            return
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]
'''

LLAMA_CAPTURE = """\
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
"""
GUARDED_CAPTURE = """\
            if i in self.layers_to_capture:
                aux_hidden_states.append(
                    hidden_states + residual if residual is not None else hidden_states
                )
"""
# the same pair with the capture guarded for a residual that is still None (qwen-like)
QWEN = LLAMA.replace(LLAMA_CAPTURE, GUARDED_CAPTURE).replace("Like", "QLike")

# a pair whose layers return one stream (no residual handed back), handing the aux states by keyword
SOLO = IMPORTS + '''

class SoloDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch):
        return hidden_states


class SoloModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            [SoloDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(positions, hidden_states, forward_batch)
        hidden_states = self.norm(hidden_states)
        if not aux_hidden_states:
            return hidden_states
        return hidden_states, aux_hidden_states


class SoloForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = SoloModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(
            input_ids,
            hidden_states,
            self.lm_head,
            forward_batch,
            aux_hidden_states=aux_hidden_states,
        )

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]
'''

# --------------------------------------------------------------------------- targets (no plumbing)

# a llama-like pair without any of it: layer picked by index, a pipeline proxy, an exploded logits call
PLAIN = IMPORTS + '''

class PlainDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, residual):
        return hidden_states, residual


class PlainModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pp_group = get_pp_group()
        self.layers = nn.ModuleList(
            [PlainDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        if self.pp_group.is_first_rank:
            hidden_states = self.embed_tokens(input_ids)
            residual = None
        else:
            hidden_states = pp_proxy_tensors["hidden_states"]
            residual = pp_proxy_tensors["residual"]

        # the decoder layers of this pipeline stage
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states, residual = layer(
                positions,
                hidden_states,
                forward_batch,
                residual,
            )

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {"hidden_states": hidden_states, "residual": residual}
            )
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class PlainForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = PlainModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        if self.pp_group.is_last_rank:
            return self.logits_processor(
                input_ids,
                hidden_states,
                self.lm_head,
                forward_batch,
            )
        return hidden_states
'''

# layers enumerated over this stage's slice (the index adds the offset back), called by keyword
SLICED = PLAIN.replace(
    """        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states, residual = layer(
                positions,
                hidden_states,
                forward_batch,
                residual,
            )
""",
    """        for i, layer in enumerate(self.layers[self.start_layer : self.end_layer]):
            hidden_states, residual = layer(
                positions=positions,
                hidden_states=hidden_states,
                forward_batch=forward_batch,
                residual=residual,
            )
""",
).replace("Plain", "Sliced")

# one stream a layer, two returns after the loop, a one-line logits call
MONO = IMPORTS + '''

class MonoDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch):
        return hidden_states


class MonoModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            [MonoDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        for i in range(len(self.layers)):
            hidden_states = self.layers[i](positions, hidden_states, forward_batch)
        if hidden_states.shape[0] == 0:
            return hidden_states
        hidden_states = self.norm(hidden_states)
        return hidden_states


class MonoForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = MonoModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)

    def forward(self, input_ids, positions, forward_batch):
        hidden = self.model(input_ids, positions, forward_batch)
        return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)
'''

# the same, its loop binding each layer without an index (Ernie 4.5's, PhiMoE's `for layer in self.layers:`):
# the plan gives the loop one (`for i, layer in enumerate(self.layers):`, an `index` piece)
UNINDEXED = MONO.replace(
    "        for i in range(len(self.layers)):\n            hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n",
    "        for layer in self.layers:\n            hidden_states = layer(positions, hidden_states, forward_batch)\n",
).replace("Mono", "Unindexed")

# DeepSeek-V2's shape: an ordinary loop up to where two-batch overlap takes over, the rest of the layers
# handed to the overlap path (a routine given a slice of them); the plan captures in the ordinary loop
# and names the path it leaves as it is
OVERLAPPED = IMPORTS + '''

def model_forward_maybe_tbo(layers, positions, hidden_states, residual, forward_batch):
    for layer in layers:
        hidden_states, residual = layer(
            positions, hidden_states, forward_batch, residual
        )
    return hidden_states, residual


class TboDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, residual):
        return hidden_states, residual


class TboModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            [TboDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.first_k_dense_replace = 2
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        normal_end_layer = self.end_layer
        if forward_batch.can_run_tbo:
            normal_end_layer = self.first_k_dense_replace
        for i in range(self.start_layer, normal_end_layer):
            layer = self.layers[i]
            hidden_states, residual = layer(
                positions, hidden_states, forward_batch, residual
            )
        if normal_end_layer != self.end_layer:
            hidden_states, residual = model_forward_maybe_tbo(
                layers=self.layers[normal_end_layer : self.end_layer],
                positions=positions,
                hidden_states=hidden_states,
                residual=residual,
                forward_batch=forward_batch,
            )
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class TboForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = TboModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        return self.logits_processor(
            input_ids, hidden_states, self.lm_head, forward_batch
        )
'''

# a class whose backbone captures (the reference's own) and whose forward does nothing with it
OVER_LIKE = LLAMA + '''

class OverForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = LikeModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        if not self.pp_group.is_last_rank:
            return hidden_states
        return self.logits_processor(
            input_ids, hidden_states, self.lm_head, forward_batch
        )
'''

# a class with its own hook, a default and an unpack, that never hands the aux states on (Glm4v 0.5.11's gap)
HALF_DONE = (
    OVER_LIKE.replace(
        """        self.logits_processor = LogitsProcessor(config)

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        if not self.pp_group.is_last_rank:""",
        """        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        if not self.pp_group.is_last_rank:""",
    )
    + """
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if not self.pp_group.is_last_rank:
            return
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
"""
)

REFERENCE_FILES = {"models/llama_like.py": LLAMA, "models/qwen_like.py": QWEN, "models/solo_like.py": SOLO}
REFERENCES = ["models/llama_like.py:LikeForCausalLM", "models/qwen_like.py:QLikeForCausalLM", "models/solo_like.py:SoloForCausalLM"]

# name -> (file, its source, the class planned for, the reference expected, whether its layers return a pair)
TARGETS: dict[str, tuple[str, str, str, str, bool]] = {
    "plain": ("models/plain.py", PLAIN, "PlainForCausalLM", "models/qwen_like.py:QLikeForCausalLM", True),
    "sliced": ("models/sliced.py", SLICED, "SlicedForCausalLM", "models/qwen_like.py:QLikeForCausalLM", True),
    "mono": ("models/mono.py", MONO, "MonoForCausalLM", "models/solo_like.py:SoloForCausalLM", False),
    "unindexed": ("models/unindexed.py", UNINDEXED, "UnindexedForCausalLM", "models/solo_like.py:SoloForCausalLM", False),
    "overlapped": ("models/overlapped.py", OVERLAPPED, "TboForCausalLM", "models/qwen_like.py:QLikeForCausalLM", True),
    "class only": ("models/llama_like.py", OVER_LIKE, "OverForCausalLM", "models/llama_like.py:LikeForCausalLM", True),
    "own hook": ("models/llama_like.py", HALF_DONE, "OverForCausalLM", "models/llama_like.py:LikeForCausalLM", True),
}


def files_with(file: str, source: str) -> dict[str, str]:
    return {**REFERENCE_FILES, file: source}


def plan_for(file: str, source: str, name: str, references: list[str] = REFERENCES) -> PlumbingPlan:
    return plan_plumbing(SourceClasses(files_with(file, source)), f"{file}:{name}", references)


def patched(name: str) -> tuple[PlumbingPlan, str]:
    file, source, cls, _, _ = TARGETS[name]
    plan = plan_for(file, source, cls)
    assert plan.ok, plan.why
    return plan, apply_plumbing(source, plan.pieces_in(file))


def test_the_fixtures_are_black_and_isort_clean_and_complete_where_they_should_be() -> None:
    for text in [LLAMA, QWEN, SOLO, PLAIN, SLICED, MONO, OVER_LIKE, HALF_DONE]:
        assert black.format_str(text, mode=black.Mode()) == text
        assert isort.code(text, profile="black", known_first_party=["sglang"]) == text
    classes = SourceClasses(REFERENCE_FILES)
    for key in REFERENCES:
        assert analyze_plumbing(classes, key).complete, key
    assert analyze_plumbing(SourceClasses({"models/llama_like.py": HALF_DONE}), "models/llama_like.py:OverForCausalLM").broken


# --------------------------------------------------------------------------- the plan, as a table

# (kind, "Class.method", where, anchor, code): written from the module's rules, in the target's names
PLAIN_PIECES = [
    ("flag-default", "PlainForCausalLM.__init__", "end", "", "self.capture_aux_hidden_states = False"),
    (
        "unpack",
        "PlainForCausalLM.forward",
        "after",
        "hidden_states = self.model(input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors)",
        "aux_hidden_states = None\nif self.capture_aux_hidden_states:\n    hidden_states, aux_hidden_states = hidden_states",
    ),
    (
        "logits-aux",
        "PlainForCausalLM.forward",
        "argument",
        "return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)",
        "aux_hidden_states",
    ),
    ("selector-default", "PlainModel.__init__", "end", "", "self.layers_to_capture = []"),
    ("aux-init", "PlainModel.forward", "before", "for i in range(self.start_layer, self.end_layer):", "aux_hidden_states = []"),
    (
        "capture",
        "PlainModel.forward",
        "before",
        "hidden_states, residual = layer(positions, hidden_states, forward_batch, residual)",
        "if i in self.layers_to_capture:\n    aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)",
    ),
    (
        "tail",
        "PlainModel.forward",
        "replace",
        "return hidden_states",
        "if len(aux_hidden_states) == 0:\n    return hidden_states\nreturn hidden_states, aux_hidden_states",
    ),
]

PLAN_CASES = {
    "plain: every piece, the None-safe capture of the qwen-like reference": ("plain", PLAIN_PIECES),
    "plain, llama-like reference only: its capture, as it spells it": (
        "plain",
        [p if p[0] != "capture" else (*p[:4], "if i in self.layers_to_capture:\n    aux_hidden_states.append(hidden_states + residual)") for p in PLAIN_PIECES],
    ),
    "sliced: the slice's offset added back to the index": (
        "sliced",
        [
            *[(k, c.replace("Plain", "Sliced"), w, a, code) for k, c, w, a, code in PLAIN_PIECES[:4]],
            ("aux-init", "SlicedModel.forward", "before", "for i, layer in enumerate(self.layers[self.start_layer:self.end_layer]):", "aux_hidden_states = []"),
            (
                "capture",
                "SlicedModel.forward",
                "before",
                "hidden_states, residual = layer(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch, residual=residual)",
                "if self.start_layer + i in self.layers_to_capture:\n"
                "    aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)",
            ),
            (PLAIN_PIECES[6][0], "SlicedModel.forward", *PLAIN_PIECES[6][2:]),
        ],
    ),
    "mono: one stream, the solo reference's forms, each return after the loop": (
        "mono",
        [
            ("flag-default", "MonoForCausalLM.__init__", "end", "", "self.capture_aux_hidden_states = False"),
            (
                "unpack",
                "MonoForCausalLM.forward",
                "after",
                "hidden = self.model(input_ids, positions, forward_batch)",
                "aux_hidden_states = None\nif self.capture_aux_hidden_states:\n    hidden, aux_hidden_states = hidden",
            ),
            (
                "logits-aux",
                "MonoForCausalLM.forward",
                "argument",
                "return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)",
                "aux_hidden_states=aux_hidden_states",
            ),
            ("selector-default", "MonoModel.__init__", "end", "", "self.layers_to_capture = []"),
            ("aux-init", "MonoModel.forward", "before", "for i in range(len(self.layers)):", "aux_hidden_states = []"),
            (
                "capture",
                "MonoModel.forward",
                "before",
                "hidden_states = self.layers[i](positions, hidden_states, forward_batch)",
                "if i in self.layers_to_capture:\n    aux_hidden_states.append(hidden_states)",
            ),
            ("tail", "MonoModel.forward", "replace", "return hidden_states", "if not aux_hidden_states:\n    return hidden_states\nreturn hidden_states, aux_hidden_states"),
            ("tail", "MonoModel.forward", "replace", "return hidden_states", "if not aux_hidden_states:\n    return hidden_states\nreturn hidden_states, aux_hidden_states"),
        ],
    ),
    "class only: the backbone captures already": (
        "class only",
        [
            ("flag-default", "OverForCausalLM.__init__", "end", "", "self.capture_aux_hidden_states = False"),
            (
                "unpack",
                "OverForCausalLM.forward",
                "after",
                "hidden_states = self.model(input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors)",
                "aux_hidden_states = None\nif self.capture_aux_hidden_states:\n    hidden_states, aux_hidden_states = hidden_states",
            ),
            (
                "logits-aux",
                "OverForCausalLM.forward",
                "argument",
                "return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)",
                "aux_hidden_states",
            ),
        ],
    ),
    "unindexed: the loop gets an index before anything reads it": (
        "unindexed",
        [
            ("flag-default", "UnindexedForCausalLM.__init__", "end", "", "self.capture_aux_hidden_states = False"),
            (
                "unpack",
                "UnindexedForCausalLM.forward",
                "after",
                "hidden = self.model(input_ids, positions, forward_batch)",
                "aux_hidden_states = None\nif self.capture_aux_hidden_states:\n    hidden, aux_hidden_states = hidden",
            ),
            (
                "logits-aux",
                "UnindexedForCausalLM.forward",
                "argument",
                "return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)",
                "aux_hidden_states=aux_hidden_states",
            ),
            ("selector-default", "UnindexedModel.__init__", "end", "", "self.layers_to_capture = []"),
            ("index", "UnindexedModel.forward", "header", "for layer in self.layers:", "for i, layer in enumerate(self.layers):"),
            ("aux-init", "UnindexedModel.forward", "before", "for layer in self.layers:", "aux_hidden_states = []"),
            (
                "capture",
                "UnindexedModel.forward",
                "before",
                "hidden_states = layer(positions, hidden_states, forward_batch)",
                "if i in self.layers_to_capture:\n    aux_hidden_states.append(hidden_states)",
            ),
        ]
        + [("tail", "UnindexedModel.forward", "replace", "return hidden_states", "if not aux_hidden_states:\n    return hidden_states\nreturn hidden_states, aux_hidden_states")]
        * 2,  # the early return and the last one
    ),
    "own hook: only the argument it never passes": (
        "own hook",
        [("logits-aux", "OverForCausalLM.forward", "argument", "return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)", "aux_hidden_states")],
    ),
}


@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_plan(case: str) -> None:
    target, expected = PLAN_CASES[case]
    file, source, cls, reference, _ = TARGETS[target]
    references = ["models/llama_like.py:LikeForCausalLM"] if "llama-like reference only" in case else REFERENCES
    plan = plan_for(file, source, cls, references)
    assert plan.ok, plan.why
    assert plan.reference == (references[0] if len(references) == 1 else reference)
    assert plan.shift == 1
    assert plan.needs_hook == (target != "own hook")
    got = [(p.kind, f"{p.cls}.{p.method}", p.where, p.anchor, p.code) for p in plan.pieces]
    assert got == expected
    for piece in plan.pieces:  # each anchor is the statement at the line the plan names
        assert (piece.line == 0) == (piece.where == "end")
        if piece.line:
            (statement,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.stmt) and n.lineno == piece.line]
            assert statement_fingerprint(statement) == piece.anchor


def test_a_complete_class_needs_nothing() -> None:
    plan = plan_plumbing(SourceClasses(REFERENCE_FILES), REFERENCES[0], REFERENCES)
    assert plan.complete and not plan.ok and not plan.blockers


def test_pieces_go_into_the_class_that_defines_the_forward() -> None:
    """A subclass that only changes __init__ gets its fix in the base, whose forward it runs (and so do the
    base's other subclasses): upstream's DeepseekV2ForCausalLM serving V3."""
    sub = PLAIN + '''

class PlainMoeForCausalLM(PlainForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.experts = 8
'''
    plan = plan_for("models/plain.py", sub, "PlainMoeForCausalLM")
    assert plan.ok, plan.why
    assert {p.cls for p in plan.pieces} == {"PlainForCausalLM", "PlainModel"}


Edit = tuple[str, str]

# name -> (target, edits, the blocker piece, words its reason holds)
BLOCKED: dict[str, tuple[str, list[Edit], str, str]] = {
    "two-batch overlap": (
        "plain",
        [("        # the decoder layers of this pipeline stage\n", "        if forward_batch.can_run_tbo:\n            hidden_states = model_forward_maybe_tbo(self.layers)\n")],
        "two-batch-overlap",
        "two-batch-overlap path",
    ),
    "a layer returning three values": (
        "plain",
        [("            hidden_states, residual = layer(\n", "            hidden_states, residual, topk = layer(\n")],
        "layer-call",
        "returns 3 values",
    ),
    "a residual kept outside the layer's targets": (
        "mono",
        [("        hidden_states = self.embed_tokens(input_ids)\n", "        hidden_states = self.embed_tokens(input_ids)\n        residual_batch.start(forward_batch)\n")],
        "residual",
        "residual_batch",
    ),
    "a loop over a stage's layers without an index": (  # an `enumerate` of it would count from the stage's first layer
        "plain",
        [("        for i in range(self.start_layer, self.end_layer):\n            layer = self.layers[i]\n", "        for layer in self.layers[self.start_layer : self.end_layer]:\n")],
        "loop",
        "carries no layer index",
    ),
    "a loop without an index, every name it could take in use": (
        "unindexed",
        [("        hidden_states = self.embed_tokens(input_ids)\n", "        hidden_states = self.embed_tokens(input_ids)\n        i = layer_id = layer_idx = None\n")],
        "loop",
        "carries no layer index",
    ),
    "two layer loops": (
        "mono",
        [("        if hidden_states.shape[0] == 0:\n", "        for i in range(len(self.layers)):\n            hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n        if hidden_states.shape[0] == 0:\n")],
        "loop",
        "2 times",
    ),
    "the layer's result unpacked by index": (
        "mono",
        [("            hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n", "            outputs = self.layers[i](positions, hidden_states, forward_batch)\n            hidden_states = outputs[0]\n")],
        "layer-call",
        "does not take outputs back in",
    ),
    "a return of an expression": (
        "mono",
        [("        hidden_states = self.norm(hidden_states)\n        return hidden_states\n", "        return self.norm(hidden_states) + positions\n")],
        "tail",
        "returns self.norm(hidden_states) + positions",
    ),
    "a stack of streams": (  # Gemma 3n's AltUp: the loop's stream holds several, taken apart after it
        "mono",
        [("        hidden_states = self.norm(hidden_states)\n", "        hidden_states = self.norm(hidden_states[0])\n")],
        "stream",
        "indexes hidden_states after its layer loop",
    ),
    "the layer loop run several times": (  # IQuest LoopCoder: every layer once a pass
        "mono",
        [("        for i in range(len(self.layers)):\n            hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n",
          "        for _ in range(2):\n            for i in range(len(self.layers)):\n                hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n")],
        "loop",
        "runs inside the loop at line",
    ),
    "the backbone called twice": (
        "mono",
        [("        hidden = self.model(input_ids, positions, forward_batch)\n", "        hidden = self.model(input_ids, positions, forward_batch)\n        if hidden is None:\n            hidden = self.model(input_ids, positions, forward_batch)\n")],
        "backbone-call",
        "2 times",
    ),
    "a logits call of another arity": (
        "plain",
        [("                self.lm_head,\n                forward_batch,\n", "                self.lm_head,\n")],
        "logits-aux",
        "takes 3 positional arguments",
    ),
    "a backbone capturing by per-layer flag": (
        "mono",
        [("            hidden_states = self.layers[i](positions, hidden_states, forward_batch)\n", "            hidden_states = self.layers[i](\n                positions, hidden_states, forward_batch, getattr(self.layers[i], \"_is_layer_to_capture\", False)\n            )\n")],
        "capture",
        "per-layer flag _is_layer_to_capture",
    ),
}


def edited(text: str, edits: list[Edit]) -> str:
    for old, new in edits:
        assert text.count(old) == 1, f"the edit's text must occur once: {old!r}"
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("case", list(BLOCKED))
def test_blocker(case: str) -> None:
    target, edits, piece, words = BLOCKED[case]
    file, source, cls, _, _ = TARGETS[target]
    plan = plan_for(file, edited(source, edits), cls)
    assert not plan.pieces and plan.blockers, plan
    assert any(b.piece == piece and words in b.why for b in plan.blockers), plan.why
    assert all(b.at.startswith(file) for b in plan.blockers if b.piece == piece)


def test_no_reference_of_that_shape() -> None:
    """One stream a layer, and only a reference capturing hidden and residual that says nothing of a
    missing residual: nothing to learn from."""
    plan = plan_for("models/mono.py", MONO, "MonoForCausalLM", REFERENCES[:1])
    assert [b.piece for b in plan.blockers] == ["reference"]
    assert "captures the hidden states alone" in plan.why and "1 because it captures hidden and residual" in plan.why


def test_one_stream_learns_the_branch_a_reference_takes_without_a_residual() -> None:
    """qwen_like captures `hidden_states + residual if residual is not None else hidden_states`: for a
    backbone whose layers hand on the hidden states alone, what it captures then is the stream."""
    plan = plan_for("models/mono.py", MONO, "MonoForCausalLM", REFERENCES[1:2])
    assert not plan.blockers and plan.reference == "models/qwen_like.py:QLikeForCausalLM"
    (capture,) = [p for p in plan.pieces if p.kind == "capture"]
    assert capture.code == "if i in self.layers_to_capture:\n    aux_hidden_states.append(hidden_states)"
    with_solo = plan_for("models/mono.py", MONO, "MonoForCausalLM", REFERENCES)
    assert with_solo.reference == "models/solo_like.py:SoloForCausalLM"  # a capture of this very stream comes first


def test_a_last_step_on_one_stream_is_kept_in_the_tail() -> None:
    """`return self.norm(hidden_states)` (Persimmon's `self.final_layernorm(...)`): the tail returns it,
    with the aux states when there are some."""
    text = edited(MONO, [("        hidden_states = self.norm(hidden_states)\n        return hidden_states\n", "        return self.norm(hidden_states)\n")])
    plan = plan_for("models/mono.py", text, "MonoForCausalLM")
    assert not plan.blockers
    (tail,) = [p for p in plan.pieces if p.kind == "tail" and "self.norm" in p.code]  # the other return hands on the stream itself
    assert tail.code.splitlines()[-1] == "return self.norm(hidden_states), aux_hidden_states"
    assert "    return self.norm(hidden_states)" in tail.code.splitlines()


def test_a_last_step_that_leaves_out_the_residual_is_not_guessed() -> None:
    """Lfm2 ends on `self.embedding_norm(hidden_states)` though its layers hand back a residual: whether
    that residual is part of the stream is not shown by reading, so nothing is written."""
    file, source, cls, _, _ = TARGETS["plain"]
    text = _lfm2_like(source)
    plan = plan_for(file, text, cls)
    assert "tail" in {b.piece for b in plan.blockers} and "leaving out the residual its layers hand back" in plan.why


def _lfm2_like(source: str) -> str:
    tree = ast.parse(source)
    forward = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name.endswith("Model") for f in c.body
                   if isinstance(f, ast.FunctionDef) and f.name == "forward")
    last = forward.body[-1]
    lines = source.splitlines(keepends=True)
    start = forward.body[-2].lineno if isinstance(last, ast.Return) and isinstance(last.value, ast.Name) else last.lineno
    lines[start - 1:last.end_lineno] = ["        return self.norm(hidden_states)\n"]
    return "".join(lines)


def test_every_blocker_is_named_not_the_first() -> None:
    _, edits_tbo, _, _ = BLOCKED["two-batch overlap"]
    file, source, cls, _, _ = TARGETS["plain"]
    text = edited(source, [*edits_tbo, ("            hidden_states, residual = layer(\n", "            hidden_states, residual, topk = layer(\n")])
    pieces = {b.piece for b in plan_for(file, text, cls).blockers}
    assert {"two-batch-overlap", "layer-call"} <= pieces


def test_a_plan_is_checked_by_the_analysis() -> None:
    """A subclass whose __init__ skips its base's: the default written into the base never runs, and the
    plan says so instead of claiming the class works."""
    sub = PLAIN + '''

class PlainEagle(PlainForCausalLM):
    def __init__(self, config):
        nn.Module.__init__(self)
        self.pp_group = get_pp_group()
        self.model = PlainModel(config)
        self.logits_processor = LogitsProcessor(config)
'''
    plan = plan_for("models/plain.py", sub, "PlainEagle")
    assert not plan.pieces
    assert any(b.piece == "flag-default" and "after the plumbing is written" in b.why for b in plan.blockers), plan.why


# --------------------------------------------------------------------------- the codemod

PLAIN_WRITTEN = IMPORTS + '''

class PlainDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, residual):
        return hidden_states, residual


class PlainModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.pp_group = get_pp_group()
        self.layers = nn.ModuleList(
            [PlainDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # eaglepatch: plumbing learned from models/qwen_like.py:QLikeModel (selector-default, 1 statement, digest {d[selector-default]})
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        if self.pp_group.is_first_rank:
            hidden_states = self.embed_tokens(input_ids)
            residual = None
        else:
            hidden_states = pp_proxy_tensors["hidden_states"]
            residual = pp_proxy_tensors["residual"]

        # the decoder layers of this pipeline stage
        # eaglepatch: plumbing learned from models/qwen_like.py:QLikeModel (aux-init, 1 statement, digest {d[aux-init]})
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            # eaglepatch: plumbing learned from models/qwen_like.py:QLikeModel (capture, 1 statement, digest {d[capture]})
            if i in self.layers_to_capture:
                aux_hidden_states.append(
                    hidden_states + residual if residual is not None else hidden_states
                )
            hidden_states, residual = layer(
                positions,
                hidden_states,
                forward_batch,
                residual,
            )

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {"hidden_states": hidden_states, "residual": residual}
            )
        hidden_states, _ = self.norm(hidden_states, residual)
        # eaglepatch: plumbing learned from models/qwen_like.py:QLikeModel (tail, 2 statements, digest {d[tail]})
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class PlainForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = PlainModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        # eaglepatch: plumbing learned from models/qwen_like.py:QLikeForCausalLM (flag-default, 1 statement, digest {d[flag-default]})
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
        hidden_states = self.model(
            input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors
        )
        # eaglepatch: plumbing learned from models/qwen_like.py:QLikeForCausalLM (unpack, 2 statements, digest {d[unpack]})
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        if self.pp_group.is_last_rank:
            # eaglepatch: plumbing learned from models/qwen_like.py:QLikeForCausalLM (logits-aux, argument, in place, digest {d[logits-aux]})
            return self.logits_processor(
                input_ids,
                hidden_states,
                self.lm_head,
                forward_batch,
                aux_hidden_states,
            )
        return hidden_states
'''


def digests(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        marker = parse_plumbing_marker(line.strip())
        if marker is not None:
            found[marker.kind] = marker.digest
    return found


def test_the_codemod_writes_what_the_plan_says() -> None:
    _, out = patched("plain")
    expected = PLAIN_WRITTEN
    for kind, digest in digests(out).items():
        expected = expected.replace(f"{{d[{kind}]}}", digest)
    assert out == expected


def logits_layout(text: str) -> str:
    (marker,) = [m for m in map(parse_plumbing_marker, (line.strip() for line in text.splitlines())) if m is not None and m.kind == "logits-aux"]
    return marker.layout


def test_a_call_on_one_line_is_laid_out_again() -> None:
    """A call black left on one line, too long with the aux states: laid out as black lays it out (one
    argument a line, the magic comma black adds), the marker saying it was one line, which revert undoes."""
    _, out = patched("mono")
    lines = [
        "        return self.logits_processor(",
        "            input_ids,",
        "            hidden,",
        "            self.lm_head,",
        "            forward_batch,",
        "            aux_hidden_states=aux_hidden_states,",
        "        )",
    ]
    assert "\n".join(lines) + "\n" in out
    assert logits_layout(out) == "one line"
    assert out.count("(tail, 2 statements,") == 2


def test_a_hugged_call_is_laid_out_again() -> None:
    _, out = patched("class only")
    assert "        return self.logits_processor(\n            input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states\n        )\n" in out
    assert logits_layout(out) == "hugged"


def test_a_call_not_laid_out_as_black_would_gets_the_argument_in_place() -> None:
    file, source, cls, _, _ = TARGETS["class only"]
    unformatted = source.replace(
        "        return self.logits_processor(\n            input_ids, hidden_states, self.lm_head, forward_batch\n        )\n",
        "        return self.logits_processor(input_ids,\n            hidden_states, self.lm_head, forward_batch)\n",
    )
    plan = plan_for(file, unformatted, cls)
    out = apply_plumbing(unformatted, plan.pieces_in(file))
    assert "        return self.logits_processor(input_ids,\n            hidden_states, self.lm_head, forward_batch, aux_hidden_states)\n" in out
    assert logits_layout(out) == "in place"
    assert revert_plumbing(out)[0] == unformatted


@pytest.mark.parametrize("target", list(TARGETS))
def test_black_isort_idempotence_and_revert(target: str) -> None:
    plan, out = patched(target)
    source = TARGETS[target][1]
    assert black.format_str(out, mode=black.Mode()) == out
    assert isort.code(out, profile="black", known_first_party=["sglang"]) == out
    compile(out, "patched", "exec")
    assert apply_plumbing(out, plan.pieces) == out  # a second run of the same plan: nothing
    back, removed, kept = revert_plumbing(out)
    assert back == source and not kept
    assert sorted(kind for kinds in removed.values() for kind in kinds) == sorted(p.kind for p in plan.pieces)


def test_a_second_plan_on_the_patched_tree_is_empty() -> None:
    for target in TARGETS:
        file, source, cls, _, _ = TARGETS[target]
        plan, out = patched(target)
        again = plan_for(file, out, cls)
        assert not again.pieces and not again.blockers, (target, again)


def test_revert_keeps_a_group_edited_by_hand() -> None:
    _, out = patched("plain")
    edited_out = out.replace("        self.layers_to_capture = []\n", "        self.layers_to_capture = [1]\n")
    back, removed, kept = revert_plumbing(edited_out)
    assert kept == {"PlainModel.__init__": ["selector-default"]}
    assert "self.layers_to_capture = [1]" in back and "(selector-default," in back
    assert "aux_hidden_states" not in back.split("class PlainForCausalLM")[1]


def test_revert_keeps_a_call_edited_by_hand() -> None:
    _, out = patched("mono")
    edited_out = out.replace("            aux_hidden_states=aux_hidden_states,\n", "            aux_hidden_states=None,\n")
    back, _, kept = revert_plumbing(edited_out)
    assert kept.get("MonoForCausalLM.forward") == ["logits-aux"]
    assert "aux_hidden_states=None" in back


def test_the_index_goes_back_and_a_header_edited_by_hand_stays() -> None:
    _, out = patched("unindexed")
    assert "        for i, layer in enumerate(self.layers):\n" in out
    assert revert_plumbing(out)[0] == UNINDEXED
    edited_out = out.replace("for i, layer in enumerate(self.layers):", "for i, layer in enumerate(self.layers, 0):")
    back, _, kept = revert_plumbing(edited_out)
    assert kept.get("UnindexedModel.forward") == ["index"]
    assert "for i, layer in enumerate(self.layers, 0):" in back and "(index, header," in back


def test_a_moved_anchor_is_refused() -> None:
    plan, _ = patched("plain")
    moved = PLAIN.replace("class PlainDecoderLayer", "# a comment\n\n\nclass PlainDecoderLayer")
    with pytest.raises(PlumbingNotWritten, match="is not"):
        apply_plumbing(moved, plan.pieces)


LAYOUT = [  # (code, the column it lands at, what black writes)
    ("aux.append(h + r)", 16, ["aux.append(h + r)"]),
    (
        "aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)",
        16,
        ["aux_hidden_states.append(", "    hidden_states + residual if residual is not None else hidden_states", ")"],
    ),
    (
        "aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)",
        24,
        ["aux_hidden_states.append(", "    hidden_states + residual", "    if residual is not None", "    else hidden_states", ")"],
    ),
]


@pytest.mark.parametrize(("code", "column", "expected"), LAYOUT)
def test_layout_is_blacks(code: str, column: int, expected: list[str]) -> None:
    assert lay_out(code, column) == expected
    indent = " " * column
    body = "\n".join(indent + line for line in expected)
    wrapped = "def f():\n" + "".join(f"{'    ' * (d + 1)}if x:\n" for d in range(column // 4 - 1)) + body + "\n"
    assert black.format_str(wrapped, mode=black.Mode()) == wrapped


# --------------------------------------------------------------------------- the proof, on stubs


def modules(target: str) -> tuple[object, object, object, PlumbingPlan]:
    """(the original module, the patched one, the reference's module) of a target, run on stubs."""
    plan, out = patched(target)
    file, source, _, reference, _ = TARGETS[target]
    reference_file = reference.partition(":")[0]
    original = load(source, "original")
    patched_module = load(out, "patched")
    ref_module = load(REFERENCE_FILES[reference_file] if reference_file != file else source, "reference")
    return original, patched_module, ref_module, plan


def hooked(module: object, cls: str, ref_module: object, plan: PlumbingPlan) -> type:
    """The patched class, with the hook the synthesis would write: the reference's own body (both call
    their backbone `self.model`)."""
    klass = getattr(module, cls)
    if plan.needs_hook:
        reference = getattr(ref_module, plan.reference.partition(":")[2])
        assert plan.attribute == "model"
        setattr(klass, HOOK, getattr(reference, HOOK))
    return klass


def run(built, pp_proxy_tensors=None) -> object:
    if pp_proxy_tensors is not None:
        return built.model.forward(*INPUTS, pp_proxy_tensors=pp_proxy_tensors)
    return built.model.forward(*INPUTS)


STAGES = {  # pipeline ranks the fixtures with a pipeline proxy are run on: (group, first layer, end)
    "one stage": (PPGroup(), 0, None),
    "last of two": (PPGroup(is_first_rank=False, is_last_rank=True, rank_in_group=1, world_size=2), 3, None),
}


# every target on one stage; those that know pipeline parallelism on the last of two as well
RUNS = [(target, stage) for target in TARGETS for stage in STAGES if stage == "one stage" or "pp_proxy_tensors" in TARGETS[target][1]]


def proxy_in() -> PPProxyTensors:
    return PPProxyTensors({"hidden_states": Sym("h2"), "residual": Sym("r2")})


@pytest.mark.parametrize(("target", "stage"), RUNS)
def test_capture_off_behaves_as_before(target: str, stage: str) -> None:
    original, patched_module, ref_module, plan = modules(target)
    file, _, cls, _, pair = TARGETS[target]
    pp, start, end = STAGES[stage]
    set_rank(pp)
    before = build(getattr(original, cls), pair, start=start, end=end)
    after = build(hooked(patched_module, cls, ref_module, plan), pair, start=start, end=end)
    proxy = proxy_in() if start else None
    assert repr(run(after, proxy)) == repr(run(before, proxy))
    assert after.logits.calls == before.logits.calls
    assert [layer.seen for layer in after.layers] == [layer.seen for layer in before.layers]


@pytest.mark.parametrize(("target", "stage"), RUNS)
def test_capture_on_hands_the_streams_entering_the_chosen_layers(target: str, stage: str) -> None:
    original, patched_module, ref_module, plan = modules(target)
    _, _, cls, _, pair = TARGETS[target]
    pp, start, end = STAGES[stage]
    set_rank(pp)
    before = build(getattr(original, cls), pair, start=start, end=end)
    after = build(hooked(patched_module, cls, ref_module, plan), pair, start=start, end=end)
    layer_ids = [1, 3]
    after.model.set_eagle3_layers_to_capture(layer_ids)
    proxy = proxy_in() if start else None
    run(before, proxy)
    run(after, proxy)
    (call,) = after.logits.calls
    # the convention of the reference's hook: the ids shifted by its `val + 1`, each the stream entering that layer
    assert plan.shift == 1
    chosen = [i + plan.shift for i in layer_ids if start <= i + plan.shift < (end or Config().num_hidden_layers)]
    assert call["aux_hidden_states"] == [after.layers[i].entering() for i in chosen]
    written_by_hand = {  # what the stub layers hand on: layer k returns h{k} (and r{k})
        (True, 0): [Sym("(h1 + r1)"), Sym("(h3 + r3)")],
        (True, 3): [Sym("(h3 + r3)")],
        (False, 0): [Sym("h1"), Sym("h3")],
    }
    assert call["aux_hidden_states"] == written_by_hand[pair, start]
    # the hidden states the logits processor gets are the ones it got with capture off
    assert call["hidden_states"] == before.logits.calls[0]["hidden_states"]


@pytest.mark.parametrize("target", [t for t in TARGETS if "pp_proxy_tensors" in TARGETS[t][1]])
def test_a_rank_that_is_not_the_last_returns_as_before(target: str) -> None:
    original, patched_module, ref_module, plan = modules(target)
    _, _, cls, _, pair = TARGETS[target]
    set_rank(PPGroup(is_first_rank=True, is_last_rank=False, rank_in_group=0, world_size=2))
    before = build(getattr(original, cls), pair, start=0, end=3)
    after = build(hooked(patched_module, cls, ref_module, plan), pair, start=0, end=3)
    after.model.set_eagle3_layers_to_capture([1, 3])  # the hook returns early on such a rank
    handed_on = run(after)
    assert isinstance(handed_on, PPProxyTensors) and handed_on == run(before)
    assert handed_on == PPProxyTensors({"hidden_states": Sym("h2"), "residual": Sym("r2")})
    assert not after.logits.calls and not before.logits.calls
    set_rank(PPGroup())


def test_the_analysis_of_every_patched_target_finds_nothing_missing() -> None:
    """check_written: the files as written, the reference's hook added where the class has none."""
    for target in TARGETS:
        file, source, cls, _, _ = TARGETS[target]
        planner = PlumbingPlanner(SourceClasses(files_with(file, source)), REFERENCES)
        plan = planner.plan(f"{file}:{cls}")
        out = apply_plumbing(source, plan.pieces_in(file))
        hook = reference_hook(planner, plan) if plan.needs_hook else None
        assert check_written(planner.classes, plan, {file: out}, *(hook or ())) == (), target


def test_check_written_sees_a_piece_that_did_not_land() -> None:
    file, source, cls, _, _ = TARGETS["plain"]
    planner = PlumbingPlanner(SourceClasses(files_with(file, source)), REFERENCES)
    plan = planner.plan(f"{file}:{cls}")
    out = apply_plumbing(source, plan.pieces_in(file))
    tail = "        if len(aux_hidden_states) == 0:\n            return hidden_states\n        return hidden_states, aux_hidden_states\n"
    assert out.count(tail) == 1
    hook = reference_hook(planner, plan)
    assert hook is not None
    gaps = check_written(planner.classes, plan, {file: out.replace(tail, "        return hidden_states\n")}, *hook)
    assert [b.piece for b in gaps] == ["pair-return"]
    assert check_written(planner.classes, plan, {file: out.replace(tail, "        return hidden_states,\n(")}, *hook)[0].piece == "verify"


# --------------------------------------------------------------------------- through eaglepatch's resolver

NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})


def test_the_tree_planner_finds_its_references(tmp_path: Path) -> None:
    root = write_srt_tree(tmp_path, {**REFERENCE_FILES, "models/plain.py": PLAIN})
    tree = locate_tree(root)
    resolver = Resolver(RunContext.fresh(tree, NO_PROTOCOL))
    classes = TreeClasses(resolver)
    planner = tree_planner(resolver, classes=classes)
    assert set(planner.reference_keys) == set(REFERENCES)
    plan = planner.plan("models/plain.py:PlainForCausalLM")
    assert plan.ok and plan.reference == "models/qwen_like.py:QLikeForCausalLM"
    assert plan.pieces == plan_for("models/plain.py", PLAIN, "PlainForCausalLM").pieces


def test_a_two_batch_overlap_path_is_left_as_it_is_and_named() -> None:
    """DeepSeek-V2's way: the capture goes into the ordinary loop; the overlap path, which runs the rest
    of the layers through a routine, is named as left without capture (a caveat, not a blocker)."""
    plan = plan_for(*[TARGETS["overlapped"][i] for i in (0, 1, 2)])
    assert plan.ok and [p.kind for p in plan.pieces if p.cls == "TboModel"] == ["selector-default", "aux-init", "capture", "tail"]
    (caveat,) = plan.caveats
    line = OVERLAPPED.splitlines().index("            hidden_states, residual = model_forward_maybe_tbo(") + 1
    assert (caveat.piece, caveat.at) == ("two-batch-overlap", f"models/overlapped.py:{line}")
    assert "(can_run_tbo) runs layers through model_forward_maybe_tbo, which captures nothing" in caveat.why


def test_with_two_batch_overlap_on_the_aux_states_are_the_ordinary_loops_alone() -> None:
    """What the caveat says, on stubs: the chosen layers the overlap path runs hand nothing on."""
    _, patched_module, ref_module, plan = modules("overlapped")
    set_rank(PPGroup())
    built = build(hooked(patched_module, "TboForCausalLM", ref_module, plan), pair=True)
    built.model.set_eagle3_layers_to_capture([0, 3])  # layers 1 and 4; the ordinary loop runs 0 and 1
    overlapped = Token("forward_batch")
    overlapped.can_run_tbo = True  # type: ignore[misc]
    built.model.forward(INPUTS[0], INPUTS[1], overlapped)
    (call,) = built.logits.calls
    assert call["aux_hidden_states"] == [Sym("(h0 + r0)")]
