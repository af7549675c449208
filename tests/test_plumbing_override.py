"""`check`, `apply` and `revert` on a tree whose backbone marks its capture layers itself (Qwen3.5's
shape, 0.5.11-0.5.21), through the whole pipeline.

The tree (the bundled fixture checkout, plus two modules mirroring the shapes): a backbone whose
forward hands a capture list to each layer it finds marked, with DFlash's hook (which marks them) and
no EAGLE-3 hook; a multimodal wrapper that *inherits* a list-setting EAGLE-3 hook from a base shared
with other wrappers (Qwen3-VL's), its forward calling the backbone in two branches; a text causal LM
with no hook at all; and a reference pair whose hook hands its ids to its backbone's own hook.

What must hold: `check` names the inherited hook's plumbing gap *with* a fix (a hook learned into the
wrapper itself, with the backbone's copy of its DFlash hook) and the text class's missing hook with the
same copy; `apply` writes the copy once, both classes are then compliant, a second `apply` changes
nothing and `revert` gives every byte back; on stubs, the patched wrapper hands the logits processor the
streams entering the layers the reference's convention names, and with capture off runs as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import committed_copy, git, invoke, isolate_git, snapshot
from plumbing_harness import INPUTS, PPGroup, Sym, build, load, set_rank
from test_plumbing_sibling_hook import FLAG_BACKBONE, FLAG_CAUSAL_LM, HANDING, IMPORTS

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "checkout"
MODELS = Path("python/sglang/srt/models")
HOOK = "set_eagle3_layers_to_capture"

FLAG_LIKE = (
    IMPORTS
    + """

def embed_routine(input_ids, forward_batch, language_model, positions):
    return language_model(input_ids, positions, forward_batch)
"""
    + FLAG_BACKBONE
    + '''

class FlagVLBase(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.pp_group = get_pp_group()
        self.language_model_only = False
        self.model = FlagModel(config)
        self.lm_head = nn.Module()
        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def forward(self, input_ids, positions, forward_batch):
        if self.language_model_only:
            hidden_states = self.model(input_ids, positions, forward_batch)
        else:
            hidden_states = embed_routine(
                input_ids=input_ids,
                forward_batch=forward_batch,
                language_model=self.model,
                positions=positions,
            )

        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(
            input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states
        )

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]


class FlagVLForConditionalGeneration(FlagVLBase):
    pass
'''
    + FLAG_CAUSAL_LM
    + """

EntryClass = [FlagVLForConditionalGeneration, FlagForCausalLM]
"""
)

HAND_LIKE = HANDING.replace("    def forward(self, input_ids, positions, forward_batch):\n        hidden_states = self.model(", """\
    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(""") + "\n\nEntryClass = HandForCausalLM\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    isolate_git(monkeypatch)
    root = committed_copy(FIXTURE, tmp_path / "repo")
    (root / MODELS / "flag_like.py").write_text(FLAG_LIKE)
    (root / MODELS / "hand_like.py").write_text(HAND_LIKE)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "flag-marking backbone")
    return root


def report(repo: Path) -> tuple[int, dict]:
    result = invoke("check", repo, "--model", "flag_like", "--format", "json", "--no-cache")
    return result.exit_code, {m["class"]: m for m in json.loads(result.stdout)["models"]}


def test_check_offers_the_copy_and_a_learned_hook_for_both_classes(repo: Path) -> None:
    code, models = report(repo)
    assert code == 1
    copy = {"piece": "hook", "file": "models/flag_like.py", "class": "FlagModel", "method": "set_dflash_layers_to_capture", "writes": HOOK}
    wrapper = models["FlagVLForConditionalGeneration"]
    (gap,) = [g for g in wrapper["missing"] if g["name"] == HOOK]
    assert wrapper["status"] == "fixable" and gap["gap"] == "plumbing"
    assert [p["piece"] for p in gap["plumbing"]] == ["selector-read"]  # the gap stays named
    assert gap["fix"]["kind"] == "synthesize" and gap["fix"]["from"] == "models/hand_like.py:HandForCausalLM"
    assert [{k: v for k, v in p.items() if k != "line"} for p in gap["fix"]["plumbing"]] == [copy]
    text = models["FlagForCausalLM"]
    (missing,) = [g for g in text["missing"] if g["name"] == HOOK]
    assert text["status"] == "fixable" and missing["gap"] == "member"
    assert [{k: v for k, v in p.items() if k != "line"} for p in missing["fix"]["plumbing"]] == [copy]


def test_apply_writes_the_copy_once_then_check_is_clean_and_revert_exact(repo: Path) -> None:
    before = snapshot(repo)
    applied = invoke("apply", repo, "--model", "flag_like")
    assert applied.exit_code == 0, applied.output
    written = (repo / MODELS / "flag_like.py").read_text()
    assert written.count(f"def {HOOK}(self, layers_to_capture: list[int]):") == 1  # the backbone's copy
    assert written.count(f"def {HOOK}(") == 4  # the base's own (left as it was), the copy, the two learned hooks
    base = FLAG_LIKE[FLAG_LIKE.index("    def set_eagle3_layers_to_capture(self, layer_ids=None):") : FLAG_LIKE.index("class FlagVLForConditionalGeneration")]
    assert base in written
    code, models = report(repo)
    assert code == 0 and {m["status"] for m in models.values()} == {"compliant"}
    assert invoke("apply", repo, "--model", "flag_like").exit_code == 0
    assert (repo / MODELS / "flag_like.py").read_text() == written
    assert invoke("revert", repo).exit_code == 0
    assert snapshot(repo) == before


def patched_modules(repo: Path) -> tuple[object, object]:
    assert invoke("apply", repo, "--model", "flag_like").exit_code == 0
    return load(FLAG_LIKE, "original"), load((repo / MODELS / "flag_like.py").read_text(), "patched")


def test_capture_off_runs_as_before(repo: Path) -> None:
    original, patched = patched_modules(repo)
    set_rank(PPGroup())
    for cls in ("FlagVLForConditionalGeneration", "FlagForCausalLM"):
        before = build(getattr(original, cls), pair=False)
        after = build(getattr(patched, cls), pair=False)
        assert repr(after.model.forward(*INPUTS)) == repr(before.model.forward(*INPUTS)), cls
        assert after.logits.calls == before.logits.calls, cls


def test_capture_on_hands_the_streams_entering_the_chosen_layers(repo: Path) -> None:
    original, patched = patched_modules(repo)
    set_rank(PPGroup())
    for cls in ("FlagVLForConditionalGeneration", "FlagForCausalLM"):
        after = build(getattr(patched, cls), pair=False)
        after.model.set_eagle3_layers_to_capture([1, 3])
        after.model.forward(*INPUTS)
        (call,) = after.logits.calls
        assert call["aux_hidden_states"] == [Sym("h1"), Sym("h3")], cls  # layers 2 and 4 marked: what entered them
    # the inherited hook, as the tree had it, sets a list the forward never reads: nothing reaches the processor
    before = build(original.FlagVLForConditionalGeneration, pair=False)
    before.model.set_eagle3_layers_to_capture([1, 3])
    with pytest.raises(TypeError):  # the forward unpacks a pair the backbone never returned
        before.model.forward(*INPUTS)


def test_explain_says_the_hook_is_inherited_and_what_is_written_with_it(repo: Path) -> None:
    result = invoke("explain", HOOK, repo, "--model", "flag_like:FlagVLForConditionalGeneration", "--format", "json")
    assert result.exit_code == 0, result.output
    (gap,) = [m for m in json.loads(result.stdout)["models"] if m["status"] == "plumbing"]
    assert gap["defined_by"] == "FlagVLBase" and gap["fix"]["kind"] == "synthesize"
    assert [p["writes"] for p in gap["fix"]["plumbing"]] == [HOOK]
    table = invoke("explain", HOOK, repo, "--model", "flag_like:FlagVLForConditionalGeneration").stdout
    assert "FlagVLForConditionalGeneration (models/flag_like.py, target): its forward cannot use the hook defined by FlagVLBase" in " ".join(table.split())
    assert f"written with its plumbing: FlagModel.{HOOK} copied from its set_dflash_layers_to_capture" in " ".join(table.split())


def test_a_two_batch_overlap_path_left_as_it_is_is_said_by_check_and_explain(tmp_path: Path, monkeypatch) -> None:
    from test_plumbing_write import OVERLAPPED, QWEN

    isolate_git(monkeypatch)
    root = committed_copy(FIXTURE, tmp_path / "repo")
    (root / MODELS / "overlapped.py").write_text(OVERLAPPED + "\nEntryClass = TboForCausalLM\n")
    (root / MODELS / "qwen_like.py").write_text(QWEN + "\nEntryClass = QLikeForCausalLM\n")
    result = invoke("check", root, "--model", "overlapped", "--format", "json", "--no-cache")
    (model,) = json.loads(result.stdout)["models"]
    (gap,) = [g for g in model["missing"] if g["name"] == HOOK]
    (caveat,) = gap["fix"]["caveats"]
    assert caveat["piece"] == "two-batch-overlap" and caveat["at"].startswith("models/overlapped.py:")
    assert "model_forward_maybe_tbo, which captures nothing" in caveat["why"]
    for command in ("check", "explain"):
        args = (command, root, "--model", "overlapped") if command == "check" else (command, HOOK, root, "--model", "overlapped")
        assert "left as it is: TboModel.forward's two-batch-overlap path (can_run_tbo)" in " ".join(invoke(*args).stdout.split()), command


# the text class in a module of its own, its backbone imported from flag_like (Qwen3.5's qwen3_5_text.py)
FLAG_TEXT = (
    """\
from torch import nn

from sglang.srt.distributed import get_pp_group
from sglang.srt.layers.logits_processor import LogitsProcessor
from sglang.srt.models.flag_like import FlagModel
"""
    + FLAG_CAUSAL_LM.replace("FlagForCausalLM", "FlagTextForCausalLM")
    + "\n\nEntryClass = FlagTextForCausalLM\n"
)


def test_revert_of_one_module_names_the_plumbing_it_leaves_in_another(repo: Path) -> None:
    """The copy goes into the backbone's module: `revert --model` of the class's own module leaves it
    and says where it is and how to take it out; `revert` without --model takes everything out."""
    (repo / MODELS / "flag_text.py").write_text(FLAG_TEXT)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a text class in a module of its own")
    before = snapshot(repo)
    assert invoke("apply", repo, "--model", "flag_text").exit_code == 0
    assert f"def {HOOK}(self, layers_to_capture" in (repo / MODELS / "flag_like.py").read_text()
    partial = invoke("revert", repo, "--model", "flag_text")
    assert partial.exit_code == 0, partial.output
    said = " ".join(partial.stdout.split())
    assert "note: models/flag_like.py also holds plumbing eaglepatch wrote" in said and "`eaglepatch revert --model flag_like`" in said
    assert f"def {HOOK}(self, layers_to_capture" in (repo / MODELS / "flag_like.py").read_text()
    assert invoke("revert", repo).exit_code == 0
    assert snapshot(repo) == before


# a backbone that marks its layers through its own EAGLE-3 hook, under a causal LM without one
# (Qwen3.5-MoE's text class on 0.5.17, whose upstream fix was the plain hand-off): the class learns a
# hook that hands the ids on, proven by the planner with the reference it is learned from, and
# nothing else is written.  Before, the hook library's own reading of the backbone ("selects its
# layers by the per-layer flag") had the last word, and the class was needs_code.
OWN_HOOK_LIKE = (
    IMPORTS
    + FLAG_BACKBONE.replace("def set_dflash_layers_to_capture(", f"def {HOOK}(")
    + FLAG_CAUSAL_LM
    + "\n\nEntryClass = FlagForCausalLM\n"
)


def test_a_backbone_with_its_own_hook_gets_the_class_hook_handing_it_the_ids(repo: Path) -> None:
    (repo / MODELS / "own_hook_like.py").write_text(OWN_HOOK_LIKE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a backbone with its own hook")
    before = snapshot(repo)
    result = invoke("check", repo, "--model", "own_hook_like", "--format", "json", "--no-cache")
    (model,) = json.loads(result.stdout)["models"]
    gaps = {g["name"]: g for g in model["missing"]}
    assert model["status"] == "fixable", model
    eagle3 = gaps[HOOK]["fix"]
    assert eagle3["kind"] == "synthesize" and eagle3["from"] == "models/hand_like.py:HandForCausalLM" and "plumbing" not in eagle3
    applied = invoke("apply", repo, "--model", "own_hook_like")
    assert applied.exit_code == 0, applied.output
    written = (repo / MODELS / "own_hook_like.py").read_text()
    assert written.count(f"def {HOOK}(") == 2  # the backbone's own, and the class's, which hands the ids on
    assert "self.model.set_eagle3_layers_to_capture([val + 1 for val in layer_ids])" in written
    after = invoke("check", repo, "--model", "own_hook_like", "--format", "json", "--no-cache")
    assert after.exit_code == 0 and json.loads(after.stdout)["models"][0]["status"] == "compliant", after.stdout
    module = load(written, "own_hook")
    set_rank(PPGroup())
    built = build(module.FlagForCausalLM, pair=False)
    built.model.set_eagle3_layers_to_capture([1, 3])
    built.model.forward(*INPUTS)
    (call,) = built.logits.calls
    assert call["aux_hidden_states"] == [Sym("h1"), Sym("h3")]  # the streams entering layers 2 and 4
    assert invoke("revert", repo).exit_code == 0
    assert snapshot(repo) == before
