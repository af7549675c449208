"""A backbone that captures by per-layer flags gets EAGLE-3's hook copied from its own hook of another
algorithm (patcher/plumbing/planner.sibling_hook, the `hook` piece), as upstream did for Qwen3.5 in 0.5.22.

Qwen3.5's text classes hold a backbone whose forward hands a capture list to each layer it finds marked
(`getattr(layer, "_is_layer_to_capture", False)`), and whose only capture hook is DFlash's, which marks
the layers it is handed.  A causal LM without EAGLE-3's hook cannot learn a list-setting one (the forward
never reads the list), but it can learn one that hands the layer choice to the backbone's own hook, once
the backbone has one: the DFlash hook's body under EAGLE-3's name.

The fixtures mirror those shapes (their own code): a reference pair whose class hook hands its ids to its
backbone's hook, and a flag-marking backbone under a causal LM with no hook.  Shown here: the plan, as a
(source, expected) table written by hand; the refusals, each named; the codemod's text, stable under
black and isort, idempotent and taken back byte for byte by revert (kept when edited by hand); and, on
stubs, the patched module with the learned hook hands the logits processor the streams entering the
layers the reference's convention names, and runs as before with capture off.
"""

from __future__ import annotations

import black
import isort
import pytest
from plumbing_harness import INPUTS, Config, PPGroup, Sym, build, load, set_rank

from eaglepatch.codemods.add_plumbing import apply_plumbing, parse_plumbing_marker
from eaglepatch.codemods.remove_plumbing import revert_plumbing
from eaglepatch.plumbing.gate import HOOK, SourceClasses, analyze_plumbing
from eaglepatch.plumbing.planner import PlumbingPlanner, check_written, patched_sources, reference_hook
from eaglepatch.records import PlumbingPiece

IMPORTS = """\
from torch import nn

from sglang.srt.distributed import get_pp_group
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.logits_processor import LogitsProcessor
"""

# a reference pair: the class hook hands its (shifted) ids to the backbone's own hook
HANDING = IMPORTS + '''

class HandDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch):
        return hidden_states


class HandModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            [HandDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers_to_capture = []

    def set_eagle3_layers_to_capture(self, layers_to_capture):
        self.layers_to_capture = layers_to_capture

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](positions, hidden_states, forward_batch)
        hidden_states = self.norm(hidden_states)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class HandForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = HandModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(
            input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states
        )

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if not self.pp_group.is_last_rank:
            return
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.set_eagle3_layers_to_capture(
                [2, num_layers // 2, num_layers - 3]
            )
        else:
            self.model.set_eagle3_layers_to_capture([val + 1 for val in layer_ids])
'''

SIBLING = '''\
    def set_dflash_layers_to_capture(self, layers_to_capture: list[int]):
        self.layers_to_capture = layers_to_capture
        for layer_id in self.layers_to_capture:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)
'''

# a backbone that captures into a list handed to each layer it finds marked, marked by its DFlash hook
FLAG_BACKBONE = f'''

class FlagDecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, **kwargs):
        return hidden_states


class FlagModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Module()
        self.layers = nn.ModuleList(
            [FlagDecoderLayer() for _ in range(config.num_hidden_layers)]
        )
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers_to_capture = []

{SIBLING}
    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            hidden_states = layer(
                positions,
                hidden_states,
                forward_batch,
                captured_last_layer_outputs=(
                    aux_hidden_states
                    if getattr(layer, "_is_layer_to_capture", False)
                    else None
                ),
            )
        hidden_states = self.norm(hidden_states)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
'''

# a causal LM over it without a hook (Qwen3.5's text classes), unpacking the pair when it is one
FLAG_CAUSAL_LM = '''

class FlagForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.model = FlagModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if isinstance(hidden_states, tuple):
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(
            input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states
        )
'''

FLAGGED = IMPORTS + FLAG_BACKBONE + FLAG_CAUSAL_LM

FILE, CLS, KEY = "models/flagged.py", "FlagForCausalLM", "models/flagged.py:FlagForCausalLM"
REFERENCE = "models/handing.py:HandForCausalLM"
SIBLING_LINE = FLAGGED.splitlines().index(SIBLING.splitlines()[0]) + 1

# what apply writes into the backbone, by hand: the sibling, then its copy under EAGLE-3's name
WRITTEN = FLAGGED.replace(
    SIBLING,
    SIBLING
    + "\n    # eaglepatch: plumbing learned from models/flagged.py:FlagModel (hook, 1 statement, digest {digest})\n"
    + SIBLING.replace("set_dflash_layers_to_capture", HOOK),
)


def planner_over(flagged: str = FLAGGED, references: tuple[str, ...] = (REFERENCE,)) -> PlumbingPlanner:
    return PlumbingPlanner(SourceClasses({"models/handing.py": HANDING, FILE: flagged}), references)


def written(source: str = FLAGGED) -> tuple[str, tuple[PlumbingPiece, ...]]:
    plan = planner_over(source).plan(KEY)
    assert plan.ok, plan.why
    return apply_plumbing(source, plan.pieces_in(FILE)), plan.pieces


def test_the_fixtures_are_black_clean_and_the_reference_complete() -> None:
    for source in (HANDING, FLAGGED):
        assert black.format_str(source, mode=black.Mode()) == source
    assert analyze_plumbing(SourceClasses({"models/handing.py": HANDING}), REFERENCE).complete


def test_the_plan_copies_the_backbones_own_hook_under_eagle3s_name() -> None:
    plan = planner_over().plan(KEY)
    assert (plan.reference, plan.shift, plan.needs_hook, plan.blockers) == (REFERENCE, 1, True, ())
    assert plan.pieces == (
        PlumbingPiece(
            kind="hook",
            file=FILE,
            cls="FlagModel",
            method="set_dflash_layers_to_capture",
            method_line=SIBLING_LINE,
            where="beside",
            line=SIBLING_LINE,
            anchor="def set_dflash_layers_to_capture(self, layers_to_capture: list[int]):",
            code=(
                f"def {HOOK}(self, layers_to_capture: list[int]):\n"
                "    self.layers_to_capture = layers_to_capture\n"
                "    for layer_id in self.layers_to_capture:\n"
                "        setattr(self.layers[layer_id], '_is_layer_to_capture', True)"
            ),
            origin="models/flagged.py:FlagModel",
        ),
    )
    assert plan.hooks_written == frozenset({HOOK})


# (what the backbone has instead, the blocker's piece, words the blocker says)
REFUSED = {
    "no sibling hook": (FLAGGED.replace(SIBLING, ""), "capture", "per-layer flag _is_layer_to_capture"),
    "a sibling that names its algorithm": (
        FLAGGED.replace(SIBLING, SIBLING + '        raise ValueError("DFLASH requires explicit layer ids")\n'),
        "capture",
        "per-layer flag _is_layer_to_capture",
    ),
    "a sibling that hands on to another hook": (
        FLAGGED.replace(SIBLING, SIBLING + "        self.inner.set_dflash_layers_to_capture(layers_to_capture)\n"),
        "capture",
        "per-layer flag _is_layer_to_capture",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_sibling_hook_that_cannot_be_copied_is_refused(case: str) -> None:
    source, piece, words = REFUSED[case]
    plan = planner_over(source).plan(KEY)
    assert not plan.pieces and [b.piece for b in plan.blockers] == [piece], plan.blockers
    assert words in plan.blockers[0].why


def test_no_reference_that_hands_its_choice_to_the_backbone_is_named() -> None:
    """A reference whose hook sets the backbone's list itself teaches nothing here: its body would never
    mark a layer."""
    setting = HANDING.replace(
        "self.model.set_eagle3_layers_to_capture([val + 1 for val in layer_ids])", "self.model.layers_to_capture = [val + 1 for val in layer_ids]"
    ).replace("self.model.set_eagle3_layers_to_capture(\n                [2, num_layers // 2, num_layers - 3]\n            )", "self.model.layers_to_capture = [2]")
    planner = PlumbingPlanner(SourceClasses({"models/handing.py": setting, FILE: FLAGGED}), (REFERENCE,))
    plan = planner.plan(KEY)
    assert [b.piece for b in plan.blockers] == ["reference"]
    assert f"hands the layer choice to its backbone's {HOOK}" in plan.blockers[0].why


def test_the_proof_in_ast_finds_the_class_complete_with_the_copy_and_the_learned_hook() -> None:
    planner = planner_over()
    plan = planner.plan(KEY)
    patched = patched_sources(planner.classes, plan.pieces)
    copy = patched["models/flagged.py:FlagModel"].method(HOOK)
    assert copy is not None and copy.lineno == SIBLING_LINE  # reported where the original stands
    out, _ = written()
    hook = reference_hook(planner, plan)
    assert hook is not None
    assert check_written(planner.classes, plan, {FILE: out}, *hook) == ()
    assert check_written(planner.classes, plan, {FILE: FLAGGED}, *hook)  # without the copy: a gap


def test_the_codemod_writes_the_copy_beside_its_original() -> None:
    out, pieces = written()
    (marker,) = [m for m in map(parse_plumbing_marker, (line.strip() for line in out.splitlines())) if m is not None]
    assert out == WRITTEN.format(digest=marker.digest)
    assert black.format_str(out, mode=black.Mode()) == out
    assert isort.code(out, profile="black", known_first_party=["sglang"]) == out
    assert apply_plumbing(out, pieces) == out  # the class has the hook now: nothing a second time
    back, removed, kept = revert_plumbing(out)
    assert back == FLAGGED and removed == {"FlagModel": [HOOK]} and not kept


def test_revert_keeps_a_copy_edited_by_hand() -> None:
    out, _ = written()
    edited = out.replace("            setattr(self.layers[layer_id], \"_is_layer_to_capture\", True)\n\n    def forward", "            setattr(self.layers[layer_id], \"_is_layer_to_capture\", 1)\n\n    def forward")
    assert edited != out
    back, removed, kept = revert_plumbing(edited)
    assert back == edited and not removed and kept == {"FlagModel": [HOOK]}


def test_a_moved_original_is_refused() -> None:
    from eaglepatch.codemods.add_plumbing import PlumbingNotWritten

    _, pieces = written()
    renamed = FLAGGED.replace("layers_to_capture: list[int]", "chosen: list[int]").replace("= layers_to_capture\n", "= chosen\n")
    with pytest.raises(PlumbingNotWritten, match="is not"):
        apply_plumbing(renamed, pieces)


def modules() -> tuple[object, object, object]:
    out, _ = written()
    return load(FLAGGED, "original"), load(out, "patched"), load(HANDING, "reference")


def hooked(module: object, reference: object) -> type:
    """The patched class with the hook the synthesis writes: the reference's own body (both on `self.model`)."""
    klass = getattr(module, CLS)
    setattr(klass, HOOK, getattr(reference.HandForCausalLM, HOOK))  # type: ignore[attr-defined]
    return klass


def test_capture_off_runs_as_before() -> None:
    original, patched, reference = modules()
    set_rank(PPGroup())
    before = build(getattr(original, CLS), pair=False)
    after = build(hooked(patched, reference), pair=False)
    assert repr(after.model.forward(*INPUTS)) == repr(before.model.forward(*INPUTS))
    assert after.logits.calls == before.logits.calls
    assert [layer.seen for layer in after.layers] == [layer.seen for layer in before.layers]


def test_capture_on_hands_the_streams_entering_the_chosen_layers() -> None:
    _, patched, reference = modules()
    set_rank(PPGroup())
    after = build(hooked(patched, reference), pair=False)
    after.model.set_eagle3_layers_to_capture([1, 3])
    assert after.model.model.layers_to_capture == [2, 4]
    after.model.forward(*INPUTS)
    (call,) = after.logits.calls
    # the stub layer k returns h{k}; the layer captured is handed the list and keeps what enters it
    assert call["aux_hidden_states"] == [Sym("h1"), Sym("h3")]
    assert call["hidden_states"] == Sym("norm(h5)")


def test_without_the_copy_the_learned_hook_fails_as_the_gate_said() -> None:
    original, _, reference = modules()
    set_rank(PPGroup())
    built = build(hooked(original, reference), pair=False, config=Config())
    with pytest.raises(AttributeError, match=HOOK):
        built.model.set_eagle3_layers_to_capture([1, 3])


# ---------------------------------------------------------------------------- the mirror: another algorithm's hook
# A class whose EAGLE-3 hook hands its ids to a flag-marking backbone's EAGLE-3 hook, and which lacks
# DFlash's (Qwen2-MoE's causal LM, 0.5.11 -> 0.5.23): the backbone gets DFlash's hook copied from its
# EAGLE-3 one, and the class learns a DFlash hook that hands its ids to it.

DFLASH = "set_dflash_layers_to_capture"
MIRRORED = IMPORTS + FLAG_BACKBONE.replace(SIBLING, SIBLING.replace(DFLASH, HOOK)) + FLAG_CAUSAL_LM


def test_another_algorithms_hook_is_copied_from_the_backbones_eagle3_hook() -> None:
    planner = planner_over(MIRRORED)
    plan = planner.sibling_plan(KEY, "model", DFLASH)
    assert plan is not None and (plan.needs_hook, plan.blockers, plan.hooks_written) == (True, (), frozenset({DFLASH}))
    (piece,) = plan.pieces
    assert (piece.kind, piece.cls, piece.method, piece.where, piece.line) == ("hook", "FlagModel", HOOK, "beside", SIBLING_LINE)
    assert piece.code == (
        f"def {DFLASH}(self, layers_to_capture: list[int]):\n"
        "    self.layers_to_capture = layers_to_capture\n"
        "    for layer_id in self.layers_to_capture:\n"
        "        setattr(self.layers[layer_id], '_is_layer_to_capture', True)"
    )
    out = apply_plumbing(MIRRORED, plan.pieces)
    assert black.format_str(out, mode=black.Mode()) == out
    assert apply_plumbing(out, plan.pieces) == out
    back, removed, kept = revert_plumbing(out)
    assert back == MIRRORED and removed == {"FlagModel": [DFLASH]} and not kept
    # on stubs the copy marks the very layers the original marks
    patched = load(out, "mirrored")
    original_side, copy_side = (build(patched.FlagForCausalLM, pair=False).model.model for _ in range(2))
    getattr(original_side, HOOK)([2, 4])
    getattr(copy_side, DFLASH)([2, 4])
    marked = [[getattr(layer, "_is_layer_to_capture", False) for layer in side.layers] for side in (original_side, copy_side)]
    assert marked[0] == marked[1] and marked[0].count(True) == 2
    assert original_side.layers_to_capture == copy_side.layers_to_capture == [2, 4]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (IMPORTS + FLAG_BACKBONE.replace(SIBLING, SIBLING + SIBLING.replace(DFLASH, HOOK)) + FLAG_CAUSAL_LM, "it has the hook already"),
        (MIRRORED.replace("        self.layers_to_capture = layers_to_capture\n", '        assert "eagle3" in "EAGLE3 ids"\n        self.layers_to_capture = layers_to_capture\n'), "its sibling names its algorithm"),
        (IMPORTS + FLAG_BACKBONE.replace(SIBLING, "") + FLAG_CAUSAL_LM, "no sibling"),
    ],
)
def test_no_copy_for_another_algorithm_where_none_is_due(source: str, why: str) -> None:
    assert planner_over(source).sibling_plan(KEY, "model", DFLASH) is None, why


def test_a_backbone_with_its_own_flag_marking_hook_needs_only_the_class_hook() -> None:
    """The backbone marks its layers through its own EAGLE-3 hook already: the class's hook hands it the
    ids, learned from a reference that does the same, and nothing else is written (upstream's plain
    delegation for Qwen3.5-MoE's text class)."""
    plan = planner_over(MIRRORED).plan(KEY)
    assert (plan.blockers, plan.pieces, plan.needs_hook, plan.reference) == ((), (), True, REFERENCE)
