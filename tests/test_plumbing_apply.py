"""`apply` on a class that lacks the hook *and* its plumbing (fixtures: models/phi_like.py): one run
writes both, learned from a class of the same tree whose plumbing is complete, and what it wrote is
proven on stubs (tests/plumbing_harness.py) against the class as it was: with capture off the forward
returns what it returned and hands the logits processor what it handed it; with capture on, the aux
states are the streams entering the layers the tree's own convention asks for (`[val + 1 for val in
layer_ids]`, read from the reference's hook); a rank that is not the last turns nothing on.  Then
`check` is clean, a second `apply` changes nothing, black leaves it alone and `revert` gives the bytes
back.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import black
import pytest
from helpers import committed_copy, invoke, isolate_git
from plumbing_harness import INPUTS, Config, PPGroup, Sym, build

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "checkout"
SITE = FIXTURE / "python"
MODULE = Path("python/sglang/srt/models/phi_like.py")
CLASS = "PhiLikeForCausalLM"
HOOK = "set_eagle3_layers_to_capture"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    isolate_git(monkeypatch)
    return committed_copy(FIXTURE, tmp_path / "repo")


def load(text: str, name: str) -> types.ModuleType:
    """The module's text run against the fixture's own sglang package (its nn stand-in, no torch)."""
    sys.path.insert(0, str(SITE))
    try:
        module = types.ModuleType(name)
        exec(compile(text, name, "exec"), module.__dict__)
        return module
    finally:
        sys.path.remove(str(SITE))
        for loaded in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[loaded]


def test_check_says_hook_and_plumbing_are_written_together(repo: Path) -> None:
    result = invoke("check", repo, "--model", "phi_like", "--format", "json", "--no-cache")
    (model,) = json.loads(result.stdout)["models"]
    assert result.exit_code == 1 and model["status"] == "fixable"
    gaps = {g["name"]: g for g in model["missing"]}
    fix = gaps[HOOK]["fix"]
    assert fix["kind"] == "synthesize" and fix["from"].endswith("ForCausalLM")
    pieces = {(p["piece"], p["class"], p["method"]) for p in fix["plumbing"]}
    assert pieces == {
        ("selector-default", "PhiLikeModel", "__init__"),
        ("aux-init", "PhiLikeModel", "forward"),
        ("capture", "PhiLikeModel", "forward"),
        ("tail", "PhiLikeModel", "forward"),
        ("flag-default", CLASS, "__init__"),
        ("unpack", CLASS, "forward"),
        ("logits-aux", CLASS, "forward"),
    }
    assert "get_embed_and_head" in gaps and "plumbing" not in gaps["get_embed_and_head"]["fix"]


def test_apply_writes_it_check_is_clean_and_revert_gives_it_back(repo: Path) -> None:
    path = repo / MODULE
    original = path.read_bytes()
    applied = invoke("apply", repo, "--model", "phi_like")
    assert applied.exit_code == 0, applied.output
    written = path.read_text()
    compile(written, str(path), "exec")
    assert f"def {HOOK}(" in written and "aux_hidden_states.append(" in written
    assert black.format_str(written, mode=black.Mode()) == written  # the fixture is black-clean: so is what apply wrote
    after = invoke("check", repo, "--model", "phi_like", "--format", "json", "--no-cache")
    (model,) = json.loads(after.stdout)["models"]
    assert (after.exit_code, model["status"], model["missing"]) == (0, "compliant", [])
    again = invoke("apply", repo, "--model", "phi_like")
    assert again.exit_code == 0 and path.read_text() == written
    reverted = invoke("revert", repo, "--model", "phi_like")
    assert reverted.exit_code == 0, reverted.output
    assert path.read_bytes() == original


def _modules(repo: Path) -> tuple[types.ModuleType, types.ModuleType]:
    path = repo / MODULE
    before = load(path.read_text(), "phi_like_before")
    assert invoke("apply", repo, "--model", "phi_like").exit_code == 0
    return before, load(path.read_text(), "phi_like_after")


def test_capture_off_behaves_as_before(repo: Path) -> None:
    before_module, after_module = _modules(repo)
    before = build(getattr(before_module, CLASS), pair=True)
    after = build(getattr(after_module, CLASS), pair=True)
    assert repr(after.model.forward(*INPUTS)) == repr(before.model.forward(*INPUTS))
    assert after.logits.calls == before.logits.calls and before.logits.calls[0]["aux_hidden_states"] is None
    assert [layer.seen for layer in after.layers] == [layer.seen for layer in before.layers]


def test_capture_on_hands_the_streams_entering_the_chosen_layers(repo: Path) -> None:
    before_module, after_module = _modules(repo)
    before = build(getattr(before_module, CLASS), pair=True)
    after = build(getattr(after_module, CLASS), pair=True)
    after.model.set_eagle3_layers_to_capture([0, 2, 4])
    before.model.forward(*INPUTS)
    after.model.forward(*INPUTS)
    (call,) = after.logits.calls
    # the tree's convention (the reference hook's `val + 1`): layer k + 1 gets the stream layer k made
    assert call["aux_hidden_states"] == [after.layers[i].entering() for i in (1, 3, 5)]
    assert call["aux_hidden_states"] == [Sym("(h0 + r0)"), Sym("(h2 + r2)"), Sym("(h4 + r4)")]
    assert call["hidden_states"] == before.logits.calls[0]["hidden_states"]
    after.model.set_eagle3_layers_to_capture(None)  # the reference's default layers, on a 6-layer model
    after.model.forward(*INPUTS)
    layers = Config().num_hidden_layers
    chosen = {2, layers // 2, layers - 3}  # a layer is captured once however often it is named
    assert after.logits.calls[-1]["aux_hidden_states"] == [after.layers[i].entering() for i in range(layers) if i in chosen]


def test_a_rank_that_is_not_the_last_turns_nothing_on(repo: Path) -> None:
    before_module, after_module = _modules(repo)
    before = build(getattr(before_module, CLASS), pair=True)
    after = build(getattr(after_module, CLASS), pair=True)
    after.model.pp_group = PPGroup(is_first_rank=True, is_last_rank=False, rank_in_group=0, world_size=2)
    after.model.set_eagle3_layers_to_capture([0, 2])
    assert repr(after.model.forward(*INPUTS)) == repr(before.model.forward(*INPUTS))
    assert after.logits.calls == before.logits.calls
