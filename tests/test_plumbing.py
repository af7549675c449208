"""The plumbing analysis (patcher/plumbing/gate.py) on its own, as (source, expected) tables.

Every row is one shape SGLang's model classes take around `set_eagle3_layers_to_capture`, written as
the smallest pair of classes that shows it (the shapes mirror upstream's, none of its code), and the
set of gap pieces the analysis must find: exactly those, so a row fails when a gap is missed and when
one is invented.  Most rows are one edit of a working llama-like pair; the edit must apply, so the
row's gaps come from the edit alone, and the working pair itself has none.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import write_srt_tree

from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.mro import c3_order
from eaglepatch.analyze.resolve import Resolver
from eaglepatch.engines import locate_tree
from eaglepatch.plumbing.gate import HOOK, PlumbingReport, SourceClasses, TreeClasses, analyze_plumbing, tree_plumbing
from eaglepatch.records import Protocol

FILE = "models/llama_like.py"

# A working pair: the backbone appends the stream entering each chosen layer and returns the pair when
# it captured; the causal LM unpacks it under its flag and hands the aux states to its logits processor.
LLAMA_LIKE = textwrap.dedent(
    """\
    from torch import nn


    class LikeDecoderLayer(nn.Module):
        def forward(self, positions, hidden_states, forward_batch, residual):
            return hidden_states, residual


    class LikeModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.layers = nn.ModuleList([LikeDecoderLayer() for _ in range(config.num_hidden_layers)])
            self.start_layer, self.end_layer = 0, config.num_hidden_layers
            self.layers_to_capture = []

        def forward(self, input_ids, positions, forward_batch, input_embeds=None):
            hidden_states, residual = self.embed_tokens(input_ids), None
            aux_hidden_states = []
            for i in range(self.start_layer, self.end_layer):
                if i in self.layers_to_capture:
                    aux_hidden_states.append(hidden_states + residual)
                hidden_states, residual = self.layers[i](positions, hidden_states, forward_batch, residual)
            hidden_states, _ = self.norm(hidden_states, residual)
            if len(aux_hidden_states) == 0:
                return hidden_states
            return hidden_states, aux_hidden_states


    class LikeForCausalLM(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model = LikeModel(config)
            self.logits_processor = LogitsProcessor(config)
            self.capture_aux_hidden_states = False

        def forward(self, input_ids, positions, forward_batch, input_embeds=None):
            hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)
            aux_hidden_states = None
            if self.capture_aux_hidden_states:
                hidden_states, aux_hidden_states = hidden_states
            return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            if not self.pp_group.is_last_rank:
                return
            self.capture_aux_hidden_states = True
            if layer_ids is None:
                num_layers = self.config.num_hidden_layers
                self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
            else:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
    """
)

BARE_TAIL = """\
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
"""
UNPACK = """\
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
"""
FLAG_DEFAULT = "        self.capture_aux_hidden_states = False\n"
LOGITS = "forward_batch, aux_hidden_states)"
CAPTURE_IN_LOOP = """\
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
"""

# A subclass whose __init__ calls nn.Module.__init__ directly: the base's __init__ (and its defaults) never runs.
SKIPS_BASE_INIT = """

class LikeEagle(LikeForCausalLM):
    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = config
        self.model = LikeModel(config)
        self.logits_processor = LogitsProcessor(config)
"""
# A backbone whose forward is its base's (LikeModel's), and a causal LM built with it.
INHERITED_BACKBONE = """

class LikeMoeModel(LikeModel):
    def __init__(self, config):
        super().__init__(config)
        self.experts = config.num_experts


class LikeMoeForCausalLM(LikeForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.model = LikeMoeModel(config)
"""
# A backbone subclass whose forward hands its base's result on as it is (through super()).
SUPER_FORWARD = """

class LikeVLModel(LikeModel):
    def forward(self, input_ids, positions, forward_batch, input_embeds=None):
        if input_ids is None:
            input_ids = forward_batch.input_ids
        return super().forward(input_ids, positions, forward_batch, input_embeds)


class LikeVLForCausalLM(LikeForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.model = LikeVLModel(config)
"""
# ... and one that unpacks its base's pair into an attribute of its own, returning the hidden states only
# (Qwen4-Exp-like: the aux states never leave the backbone).
SWALLOWS_PAIR = SUPER_FORWARD.replace(
    "        return super().forward(input_ids, positions, forward_batch, input_embeds)\n",
    """\
        output = super().forward(input_ids, positions, forward_batch, input_embeds)
        if isinstance(output, tuple):
            hidden_states, self.last_streams = output
            return hidden_states
        return output
""",
)
# A wrapper that hands the hook to the causal LM it holds.
DELEGATING = """

class LikeVLWrapper(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = LikeForCausalLM(config)

    def forward(self, input_ids, positions, forward_batch):
        return self.language_model(input_ids, positions, forward_batch)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):
            self.language_model.set_eagle3_layers_to_capture(layer_ids)
"""

# A per-layer-flag backbone: its own hook marks the chosen layers, its forward hands them the aux list.
PER_LAYER = textwrap.dedent(
    """\
    from torch import nn


    class FlagModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.layers = nn.ModuleList([FlagDecoderLayer(i) for i in range(config.num_hidden_layers)])
            self.layers_to_capture = []

        def set_eagle3_layers_to_capture(self, layers_to_capture):
            self.layers_to_capture = layers_to_capture
            for layer_id in self.layers_to_capture:
                setattr(self.layers[layer_id], "_is_layer_to_capture", True)

        def forward(self, input_ids, positions, forward_batch, input_embeds=None):
            hidden_states, residual = self.embed_tokens(input_ids), None
            aux_hidden_states = []
            for layer in self.layers:
                hidden_states, residual = layer(
                    positions,
                    hidden_states,
                    forward_batch,
                    residual,
                    captured=aux_hidden_states if getattr(layer, "_is_layer_to_capture", False) else None,
                )
            hidden_states, _ = self.norm(hidden_states, residual)
            if len(aux_hidden_states) == 0:
                return hidden_states
            return hidden_states, aux_hidden_states


    class FlagForConditionalGeneration(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model = FlagModel(config)
            self.logits_processor = LogitsProcessor(config)
            self.capture_aux_hidden_states = False

        def forward(self, input_ids, positions, forward_batch):
            hidden_states = general_mm_embed_routine(input_ids=input_ids, forward_batch=forward_batch, language_model=self.model)
            aux_hidden_states = None
            if self.capture_aux_hidden_states:
                hidden_states, aux_hidden_states = hidden_states
            return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.capture_aux_hidden_states = True
            self.model.capture_aux_hidden_states = True
            layers_to_capture = [val + 1 for val in layer_ids]
            self.model.set_eagle3_layers_to_capture(layers_to_capture)
    """
)
FLAG_HOOK_CALL = "        self.model.set_eagle3_layers_to_capture(layers_to_capture)\n"
# the hook of the release before the fix: a list the per-layer-flag backbone never reads
LIST_ONLY = "        self.model.layers_to_capture = layers_to_capture\n"
# the fixed hook: the backbone's own hook where it has one
HASATTR_HOOK = """\
        if hasattr(self.model, "set_eagle3_layers_to_capture"):
            self.model.set_eagle3_layers_to_capture(layers_to_capture)
        else:
            self.model.layers_to_capture = layers_to_capture
"""
BACKBONE_HOOK = """\
    def set_eagle3_layers_to_capture(self, layers_to_capture):
        self.layers_to_capture = layers_to_capture
        for layer_id in self.layers_to_capture:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)

"""

# the class's hook (the last def of PER_LAYER), and as a plain hand-off to its bare backbone's own hook
FLAG_DELEGATION_BODY = PER_LAYER.rpartition("    def set_eagle3_layers_to_capture(self, layer_ids=None):\n")[2]
BACKBONE_DELEGATION = "        return self.model.set_eagle3_layers_to_capture(layer_ids)\n"
FLAG_UNPACK_TEST = "        if self.capture_aux_hidden_states:\n"
TUPLE_UNPACK_TEST = "        if isinstance(hidden_states, tuple):\n"
FLAG_UNPACK = "            hidden_states, aux_hidden_states = hidden_states\n"

Edit = tuple[str, str]  # (text that must occur exactly once, what replaces it)

# name -> (base source, edits, the class analysed, the gap pieces expected)
CASES: dict[str, tuple[str, list[Edit], str, set[str]]] = {
    "working llama-like pair": (LLAMA_LIKE, [], "LikeForCausalLM", set()),
    "backbone returns a bare tensor, class unpacks a pair": (
        LLAMA_LIKE, [(BARE_TAIL, "        return hidden_states\n")], "LikeForCausalLM", {"pair-return"},
    ),
    "flag default never set": (LLAMA_LIKE, [(FLAG_DEFAULT, "")], "LikeForCausalLM", {"flag-default"}),
    "flag default skipped by nn.Module.__init__": (LLAMA_LIKE + SKIPS_BASE_INIT, [], "LikeEagle", {"flag-default"}),
    "flag default through super().__init__": (
        LLAMA_LIKE + SKIPS_BASE_INIT, [("        nn.Module.__init__(self)\n", "        super().__init__(config)\n")], "LikeEagle", set(),
    ),
    "flag default as a class attribute": (
        LLAMA_LIKE, [(FLAG_DEFAULT, ""), ("class LikeForCausalLM(nn.Module):\n", "class LikeForCausalLM(nn.Module):\n    capture_aux_hidden_states = False\n\n")],
        "LikeForCausalLM", set(),
    ),
    "unpack written twice": (LLAMA_LIKE, [(UNPACK, UNPACK + UNPACK)], "LikeForCausalLM", {"unpack"}),
    "unpack once in each branch": (
        LLAMA_LIKE, [(UNPACK, UNPACK + "        else:\n            hidden_states, aux_hidden_states = hidden_states, None\n".replace("hidden_states, None", "hidden_states"))],
        "LikeForCausalLM", set(),
    ),
    "unpack on every call, pair only when captured": (
        LLAMA_LIKE, [(UNPACK, "        hidden_states, aux_hidden_states = hidden_states\n")], "LikeForCausalLM", {"unpack"},
    ),
    "unpack missing": (LLAMA_LIKE, [(UNPACK, "")], "LikeForCausalLM", {"flag-read", "unpack"}),
    "unpack under a flag the hook does not set": (
        LLAMA_LIKE, [(UNPACK, UNPACK.replace("capture_aux_hidden_states", "capture_aux"))], "LikeForCausalLM", {"flag-read"},
    ),
    "unpack on what the backbone returns, flag unread": (
        LLAMA_LIKE, [(UNPACK, UNPACK.replace("self.capture_aux_hidden_states", "isinstance(hidden_states, tuple)"))], "LikeForCausalLM", set(),
    ),
    "aux not passed to logits_processor": (LLAMA_LIKE, [(LOGITS, "forward_batch)")], "LikeForCausalLM", {"logits-aux"}),
    "aux passed by keyword": (LLAMA_LIKE, [(LOGITS, "forward_batch, aux_hidden_states=aux_hidden_states)")], "LikeForCausalLM", set()),
    "backbone default never set": (LLAMA_LIKE, [("        self.layers_to_capture = []\n", "")], "LikeForCausalLM", {"selector-default"}),
    "backbone default set by the class": (
        LLAMA_LIKE, [("        self.layers_to_capture = []\n", ""), (FLAG_DEFAULT, FLAG_DEFAULT + "        self.model.layers_to_capture = []\n")],
        "LikeForCausalLM", set(),
    ),
    "backbone never reads the list": (
        LLAMA_LIKE, [(CAPTURE_IN_LOOP, ""), (BARE_TAIL, "        return hidden_states\n")], "LikeForCausalLM", {"selector-read", "pair-return"},
    ),
    "choice read after the loop only": (
        LLAMA_LIKE,
        [(CAPTURE_IN_LOOP, ""), ("        hidden_states, _ = self.norm", "        if self.end_layer in self.layers_to_capture:\n            aux_hidden_states.append(hidden_states)\n        hidden_states, _ = self.norm")],
        "LikeForCausalLM", {"capture"},
    ),
    "pair returned even when nothing was captured": (
        LLAMA_LIKE, [(BARE_TAIL, "        return hidden_states, aux_hidden_states\n")], "LikeForCausalLM", {"pair-return"},
    ),
    "pair chosen by a conditional expression": (  # Qwen3 0.5.23's shape: was read as no pair at all
        LLAMA_LIKE, [(BARE_TAIL, "        return (hidden_states, aux_hidden_states) if aux_hidden_states else hidden_states\n")], "LikeForCausalLM", set(),
    ),
    "backbone forward inherited from its base": (LLAMA_LIKE + INHERITED_BACKBONE, [], "LikeMoeForCausalLM", set()),
    "inherited backbone forward that never captures": (
        LLAMA_LIKE + INHERITED_BACKBONE, [(CAPTURE_IN_LOOP, ""), (BARE_TAIL, "        return hidden_states\n")],
        "LikeMoeForCausalLM", {"selector-read", "pair-return"},
    ),
    "backbone forward returning super().forward()": (LLAMA_LIKE + SUPER_FORWARD, [], "LikeVLForCausalLM", set()),
    "backbone forward swallowing its base's pair": (LLAMA_LIKE + SWALLOWS_PAIR, [], "LikeVLForCausalLM", {"pair-return"}),
    "hook delegated to a working causal LM": (LLAMA_LIKE + DELEGATING, [], "LikeVLWrapper", set()),
    "layer choice kept on the class too, as a copy": (
        LLAMA_LIKE,
        [("            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
          "            self.layers_to_capture = [val + 1 for val in layer_ids]\n"
          "            self.model.layers_to_capture = self.layers_to_capture\n")],
        "LikeForCausalLM", set(),
    ),
    "layer choice kept on the class only": (
        LLAMA_LIKE,
        [("            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
          "            self.layers_to_capture = [val + 1 for val in layer_ids]\n")],
        "LikeForCausalLM", {"selector-read"},
    ),
    "hook delegated with return, as apply writes it": (
        LLAMA_LIKE + DELEGATING,
        [('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language_model.',
          "        return self.language_model.")],
        "LikeVLWrapper", set(),
    ),
    "hook delegated with return to a class without one": (
        LLAMA_LIKE + DELEGATING,
        [("        self.language_model = LikeForCausalLM(config)\n", "        self.language_model = LikeModel(config)\n"),
         ('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language_model.',
          "        return self.language_model.")],
        "LikeVLWrapper", {"delegate"},
    ),
    "hook delegated through a local name, as apply writes it": (
        LLAMA_LIKE + DELEGATING,
        [('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language_model.',
          '        inner = self.language_model\n        if inner is None or not hasattr(inner, "set_eagle3_layers_to_capture"):\n'
          '            raise AttributeError("no hook")\n        return inner.')],
        "LikeVLWrapper", set(),
    ),
    "hook delegated to a branch of __init__ that has it": (
        LLAMA_LIKE + DELEGATING,
        [("        self.language_model = LikeForCausalLM(config)\n",
          "        if config.backbone_only:\n            self.language_model = LikeModel(config)\n"
          "        else:\n            self.language_model = LikeForCausalLM(config)\n"),
         ('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language_model.',
          "        return self.language_model.")],
        "LikeVLWrapper", set(),
    ),
    "hook delegated to branches of __init__ that all lack it": (
        LLAMA_LIKE + DELEGATING,
        [("        self.language_model = LikeForCausalLM(config)\n",
          "        if config.backbone_only:\n            self.language_model = LikeModel(config)\n"
          "        else:\n            self.language_model = LikeDecoderLayer()\n"),
         ('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language_model.',
          "        return self.language_model.")],
        "LikeVLWrapper", {"delegate"},
    ),
    "hook delegated to a causal LM with a gap": (LLAMA_LIKE + DELEGATING, [(LOGITS, "forward_batch)")], "LikeVLWrapper", {"logits-aux"}),
    "hook delegated behind hasattr to a class without one": (
        LLAMA_LIKE + DELEGATING, [("        self.language_model = LikeForCausalLM(config)\n", "        self.language_model = LikeModel(config)\n")],
        "LikeVLWrapper", {"hook"},
    ),
    "hook delegated to a class without one": (
        LLAMA_LIKE + DELEGATING,
        [("        self.language_model = LikeForCausalLM(config)\n", "        self.language_model = LikeModel(config)\n"),
         ('        if hasattr(self.language_model, "set_eagle3_layers_to_capture"):\n            self.language', "        self.language")],
        "LikeVLWrapper", {"delegate"},
    ),
    "per-layer flags through the backbone's hook": (PER_LAYER, [], "FlagForConditionalGeneration", set()),
    "list set on a per-layer-flag backbone": (PER_LAYER, [(FLAG_HOOK_CALL, LIST_ONLY)], "FlagForConditionalGeneration", {"selector-read"}),
    "hasattr picks the backbone's hook": (PER_LAYER, [(FLAG_HOOK_CALL, HASATTR_HOOK)], "FlagForConditionalGeneration", set()),
    "hasattr falls back on a list the backbone never reads": (
        PER_LAYER, [(FLAG_HOOK_CALL, HASATTR_HOOK), (BACKBONE_HOOK, "")], "FlagForConditionalGeneration", {"selector-read"},
    ),
    "backbone hook called, but the backbone has none": (
        PER_LAYER, [(BACKBONE_HOOK, "")], "FlagForConditionalGeneration", {"hook"},
    ),
    "hook handed to a per-layer-flag backbone, its pair unpacked": (
        PER_LAYER, [(FLAG_DELEGATION_BODY, BACKBONE_DELEGATION), (FLAG_UNPACK_TEST, TUPLE_UNPACK_TEST)], "FlagForConditionalGeneration", set(),
    ),
    "hook handed to a per-layer-flag backbone, its pair unpacked under a flag it never sets": (  # Lfm2's DFlash body in Qwen2-MoE's class
        PER_LAYER, [(FLAG_DELEGATION_BODY, BACKBONE_DELEGATION)], "FlagForConditionalGeneration", {"flag-read"},
    ),
    "hook handed to a per-layer-flag backbone, its pair never unpacked": (
        PER_LAYER, [(FLAG_DELEGATION_BODY, BACKBONE_DELEGATION), (FLAG_UNPACK_TEST + FLAG_UNPACK, "")], "FlagForConditionalGeneration", {"unpack"},
    ),
    "per-layer flags set by the class itself": (
        PER_LAYER,
        [(FLAG_HOOK_CALL, '        for layer_id in layers_to_capture:\n            setattr(self.model.layers[layer_id], "_is_layer_to_capture", True)\n')],
        "FlagForConditionalGeneration", set(),
    ),
}


def edited(base: str, edits: list[Edit]) -> str:
    text = base
    for old, new in edits:
        assert text.count(old) == 1, f"the edit's text must occur once: {old!r}"
        text = text.replace(old, new)
    return text


def report_for(text: str, name: str) -> PlumbingReport:
    classes = SourceClasses({FILE: text})
    key = classes.key(name)
    assert key is not None, f"no class {name}"
    return analyze_plumbing(classes, key)


@pytest.mark.parametrize("name", list(CASES))
def test_gaps(name: str) -> None:
    base, edits, cls, expected = CASES[name]
    report = report_for(edited(base, edits), cls)
    assert {gap.piece for gap in report.gaps} == expected, [f"{g.piece}: {g.why} ({g.at})" for g in report.gaps]
    assert not report.unresolved


def line_after(text: str, anchor: str, needle: str) -> str:
    """"file:line" of the first line holding `needle` after the line holding `anchor`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if anchor in line)
    return f"{FILE}:{next(i for i, line in enumerate(lines[start:], start + 1) if needle in line)}"


def test_each_gap_points_at_its_method() -> None:
    """pair-return at the backbone's forward, flag-default at the __init__ that runs, logits-aux at
    the forward the class runs (its base's)."""
    text = edited(LLAMA_LIKE + SKIPS_BASE_INIT, [(BARE_TAIL, "        return hidden_states\n"), (LOGITS, "forward_batch)")])
    report = report_for(text, "LikeEagle")
    assert {gap.piece: gap.at for gap in report.gaps} == {
        "pair-return": line_after(text, "class LikeModel(", "def forward("),
        "flag-default": line_after(text, "class LikeEagle(", "def __init__("),
        "logits-aux": line_after(text, "class LikeForCausalLM(", "def forward("),
    }


def test_every_gap_is_listed_not_the_first() -> None:
    text = edited(LLAMA_LIKE, [(FLAG_DEFAULT, ""), (UNPACK, UNPACK + UNPACK), (LOGITS, "forward_batch)"), ("        self.layers_to_capture = []\n", "")])
    assert {gap.piece for gap in report_for(text, "LikeForCausalLM").gaps} == {"flag-default", "unpack", "logits-aux", "selector-default"}


def test_mechanism_and_writes() -> None:
    llama = report_for(LLAMA_LIKE, "LikeForCausalLM")
    assert llama.mechanism == "list"
    assert {(w.holder, w.attribute, w.kind) for w in llama.writes} == {
        ("self", "capture_aux_hidden_states", "flag"),
        ("model", "layers_to_capture", "list"),
    }
    flags = report_for(PER_LAYER, "FlagForConditionalGeneration")
    assert flags.mechanism == "list+layer-flags"
    assert ("model", "_is_layer_to_capture", "layer-flag") in {(w.holder, w.attribute, w.kind) for w in flags.writes}
    # the backbone reads its per-layer flags: the list and the backbone's own flag are inert, not gaps
    assert any("self.model.layers_to_capture" in note for note in flags.inert)
    assert any("self.model.capture_aux_hidden_states" in note for note in flags.inert)
    assert report_for(LLAMA_LIKE + DELEGATING, "LikeVLWrapper").mechanism == "delegate"
    assert flags.complete and not flags.broken


def test_a_class_without_the_hook() -> None:
    report = report_for(LLAMA_LIKE, "LikeModel")
    assert [gap.piece for gap in report.gaps] == ["hook"] and report.mechanism == "none"


def test_an_unresolved_backbone_gives_no_verdict() -> None:
    text = edited(LLAMA_LIKE, [("        self.model = LikeModel(config)\n", "        self.model = build_backend(config)\n")])
    report = report_for(text, "LikeForCausalLM")
    assert report.unresolved and not report.complete
    assert {gap.piece for gap in report.gaps} == set()  # the class's own half holds


def test_c3_order() -> None:
    bases = {"D": ["B", "C"], "B": ["A"], "C": ["A"], "A": []}
    assert c3_order("D", lambda k: bases[k]) == ["D", "B", "C", "A"]


# --------------------------------------------------------------------------- through eaglepatch's resolver

NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})


def tree_report(tmp_path: Path, files: dict[str, str], rel: str, name: str) -> PlumbingReport:
    root = write_srt_tree(tmp_path, files)
    tree = locate_tree(root)
    resolver = Resolver(RunContext.fresh(tree, NO_PROTOCOL))
    return tree_plumbing(resolver, rel, name)


def test_tree_classes_follow_imports(tmp_path: Path) -> None:
    """The backbone and the base are in other modules, imported: the resolver finds them."""
    base = LLAMA_LIKE
    vl = textwrap.dedent(
        """\
        from torch import nn

        from sglang.srt.models.llama_like import LikeForCausalLM, LikeModel


        class OtherModel(LikeModel):
            pass


        class OtherForCausalLM(LikeForCausalLM):
            def __init__(self, config):
                super().__init__(config)
                self.model = OtherModel(config)


        EntryClass = OtherForCausalLM
        """
    )
    report = tree_report(tmp_path, {"models/llama_like.py": base, "models/other.py": vl}, "models/other.py", "OtherForCausalLM")
    assert report.complete, report
    broken = tree_report(
        tmp_path / "broken", {"models/llama_like.py": edited(base, [(BARE_TAIL, "        return hidden_states\n")]), "models/other.py": vl},
        "models/other.py", "OtherForCausalLM",
    )
    assert [(g.piece, g.at.partition(":")[0]) for g in broken.gaps] == [("pair-return", "models/llama_like.py")]


def test_tree_classes_share_one_lookup(tmp_path: Path) -> None:
    root = write_srt_tree(tmp_path, {"models/llama_like.py": LLAMA_LIKE})
    tree = locate_tree(root)
    resolver = Resolver(RunContext.fresh(tree, NO_PROTOCOL))
    classes = TreeClasses(resolver)
    first = analyze_plumbing(classes, "models/llama_like.py:LikeForCausalLM", HOOK)
    again = tree_plumbing(resolver, "models/llama_like.py", "LikeForCausalLM", classes=classes)
    assert first == again and first.complete
    assert classes.mro("models/llama_like.py:Nowhere") == ()


def test_the_files_read_are_reported(tmp_path: Path) -> None:
    """What the verdict depends on, for a result cache: the base's module too, not only the class's."""
    other = "from sglang.srt.models.llama_like import LikeForCausalLM\n\n\nclass OtherForCausalLM(LikeForCausalLM):\n    pass\n"
    report = tree_report(tmp_path, {"models/llama_like.py": LLAMA_LIKE, "models/other.py": other}, "models/other.py", "OtherForCausalLM")
    assert report.complete and report.read == ("models/llama_like.py", "models/other.py")


def test_a_class_under_a_module_level_if(tmp_path: Path) -> None:
    """A class is parsed on its own lines, numbered as in its file: one under `if` too."""
    header, classes = LLAMA_LIKE.split("\n\n\n", 1)
    nested = f"{header}\nimport sys\n\nif sys.platform:\n" + textwrap.indent(classes, "    ")
    assert tree_report(tmp_path, {FILE: nested}, FILE, "LikeForCausalLM").complete
    broken = edited(nested, [(LOGITS, "forward_batch)")])
    report = tree_report(tmp_path / "broken", {FILE: broken}, FILE, "LikeForCausalLM")
    assert [(g.piece, g.at) for g in report.gaps] == [("logits-aux", line_after(broken, "class LikeForCausalLM(", "def forward("))]
