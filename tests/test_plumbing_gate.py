"""The gate on plumbing: a class whose capture hook exists but whose forward never uses what it sets is
not compliant, in every output format, under a baseline, and after `apply`.

The tree is the smallest one that shows it: a runner that turns capture on under `is_eagle3()`, a
worker that reads the target's embeddings and head, and a causal LM that has both hooks.  The working
class reads its flag, collects the aux states in its layer loop and hands them to its logits
processor; each broken variant drops pieces of that, and the gate must name exactly those pieces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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

WORKING = '''\
from torch import nn


class CapModel(nn.Module):
    def __init__(self, config):
        self.layers = [object() for _ in range(config.num_hidden_layers)]
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch):
        hidden_states, residual = input_ids, None
        aux_hidden_states = []
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states, residual = self.layers[i](positions, hidden_states, forward_batch, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class CapForCausalLM(nn.Module):
    def __init__(self, config):
        self.config = config
        self.model = CapModel(config)
        self.lm_head = object()
        self.logits_processor = object()
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def set_embed_and_head(self, embed, head):
        self.model.embed_tokens.weight, self.lm_head.weight = embed, head

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids or [1, 2]]


EntryClass = CapForCausalLM
'''

# (old, new) edits of WORKING, and the pieces the gate must name: exactly those
NO_LOGITS_AUX = ("forward_batch, aux_hidden_states)", "forward_batch)")
NO_CAPTURE = ("            if i in self.layers_to_capture:\n                aux_hidden_states.append(hidden_states)\n", "")
BARE_RETURN = ("        if len(aux_hidden_states) == 0:\n            return hidden_states\n        return hidden_states, aux_hidden_states\n",
               "        return hidden_states\n")
BROKEN = {
    "logits": ([NO_LOGITS_AUX], ["logits-aux"]),
    "backbone": ([NO_CAPTURE, BARE_RETURN], ["selector-read", "pair-return"]),
}


def tree(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = WORKING
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return write_srt_tree(tmp_path, {"model_executor/model_runner.py": RUNNER, "speculative/eagle_worker.py": WORKER, "models/cap.py": text})


def check_json(root: Path, *flags: str) -> tuple[int, dict]:
    result = invoke("check", root, "--model", "cap", "--format", "json", "--no-cache", *flags)
    return result.exit_code, json.loads(result.stdout)


def test_working_plumbing_is_compliant(tmp_path: Path) -> None:
    code, data = check_json(tree(tmp_path))
    (model,) = data["models"]
    assert (code, model["status"], model["missing"]) == (0, "compliant", [])


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_plumbing_is_a_required_gap_naming_every_piece(tmp_path: Path, case: str) -> None:
    edits, pieces = BROKEN[case]
    code, data = check_json(tree(tmp_path, *edits))
    (model,) = data["models"]
    assert code == 1 and model["status"] == "needs_code"
    (gap,) = model["missing"]
    assert (gap["name"], gap["gap"], gap["required"], gap["fix"]) == ("set_eagle3_layers_to_capture", "plumbing", True, None)
    assert sorted(p["piece"] for p in gap["plumbing"]) == sorted(pieces)
    for piece in gap["plumbing"]:
        file, _, line = piece["at"].rpartition(":")
        assert file == "models/cap.py" and line.isdigit(), piece
        assert piece["piece"] in gap["blocker"]
    assert data["summary"]["missing"] == 1 and data["summary"]["fixes"] == 0


def test_every_format_names_the_plumbing(tmp_path: Path) -> None:
    root = tree(tmp_path, NO_LOGITS_AUX)
    table = invoke("check", root, "--model", "cap", "--no-cache")
    assert table.exit_code == 1 and "✗ plumbing" in table.stdout and "logits-aux" in table.stdout
    summary = invoke("check", root, "--all", "--no-cache")
    assert summary.exit_code == 1 and "broken plumbing for set_eagle3_layers_to_capture: logits-aux" in " ".join(summary.stdout.split())
    github = invoke("check", root, "--model", "cap", "--format", "github", "--no-cache")
    (line,) = [line for line in github.stdout.splitlines() if line.startswith("::error")]
    assert "title=eaglepatch%3A broken plumbing for set_eagle3_layers_to_capture" in line and "cannot work" in line
    sarif = json.loads(invoke("check", root, "--model", "cap", "--format", "sarif", "--no-cache").stdout)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "eaglepatch/broken-plumbing" and result["level"] == "error"
    assert "eaglepatch/broken-plumbing" in {rule["id"] for rule in sarif["runs"][0]["tool"]["driver"]["rules"]}


def test_a_baseline_accepts_the_plumbing_gap_by_its_own_name(tmp_path: Path) -> None:
    root = tree(tmp_path / "tree", NO_LOGITS_AUX)
    baseline = tmp_path / "baseline.json"
    assert invoke("check", root, "--model", "cap", "--write-baseline", baseline).exit_code == 0
    entries = json.loads(baseline.read_text())["entries"]
    assert entries == [{"file": "models/cap.py", "class": "CapForCausalLM", "member": "set_eagle3_layers_to_capture (plumbing)", "algorithms": ["EAGLE3"]}]
    assert invoke("check", root, "--model", "cap", "--baseline", baseline, "--no-cache").exit_code == 0
    # a baseline that accepts the member missing does not accept its plumbing broken
    entries[0]["member"] = "set_eagle3_layers_to_capture"
    baseline.write_text(json.dumps({"schema": 1, "entries": entries}))
    assert invoke("check", root, "--model", "cap", "--baseline", baseline, "--no-cache").exit_code == 1


def test_apply_says_the_plumbing_gap_is_left(tmp_path: Path) -> None:
    root = tree(tmp_path, NO_LOGITS_AUX)
    before = (root / "sglang/srt/models/cap.py").read_bytes()
    result = invoke("apply", root, "--model", "cap")
    assert result.exit_code == 1
    assert "1 required member(s) missing" in " ".join(result.stdout.split())
    assert (root / "sglang/srt/models/cap.py").read_bytes() == before


WRAPPER = '''\
from torch import nn

from sglang.srt.models.cap import CapForCausalLM


class CapVLForConditionalGeneration(nn.Module):
    def __init__(self, config):
        self.config = config
        self.language_model = CapForCausalLM(config)

    def forward(self, input_ids, positions, forward_batch):
        return self.language_model(input_ids, positions, forward_batch)


EntryClass = CapVLForConditionalGeneration
'''


def _left(data: dict) -> list[tuple[str, str, str]]:
    """The gaps apply does not write: (class, gap name, blocker)."""
    return sorted((m["class"], g["name"] + (" (plumbing)" if g["gap"] == "plumbing" else ""), g["blocker"]) for m in data["models"] for g in m["missing"] if g["fix"] is None)


def test_a_delegation_to_broken_plumbing_is_judged_before_apply_writes_it(tmp_path: Path) -> None:
    """The verdict is a fixed point: a wrapper lacking the capture hook, whose inner model has it but
    never hands the aux states on, gets the delegation written and the plumbing gap named, by `check`
    before `apply` exactly as after it; both `apply`s exit 1 and the second changes no byte."""
    root = tree(tmp_path, NO_LOGITS_AUX)
    (root / "sglang/srt/models/cap_vl.py").write_text(WRAPPER)
    code, before = check_json(root, "--model", "cap_vl")
    (model,) = [m for m in before["models"] if m["class"] == "CapVLForConditionalGeneration"]
    assert code == 1 and model["status"] == "needs_code"
    hook = [g for g in model["missing"] if g["name"] == "set_eagle3_layers_to_capture"]
    assert sorted((g["gap"], (g["fix"] or {}).get("kind")) for g in hook) == [("member", "delegate"), ("plumbing", None)]
    (plumbing,) = [g for g in hook if g["gap"] == "plumbing"]
    assert [p["piece"] for p in plumbing["plumbing"]] == ["logits-aux"]
    wrapper = root / "sglang/srt/models/cap_vl.py"
    first = invoke("apply", root, "--model", "cap_vl")
    assert first.exit_code == 1, first.stdout
    assert "def set_eagle3_layers_to_capture" in wrapper.read_text()
    code, after = check_json(root, "--model", "cap_vl")
    assert code == 1
    assert _left(after) == _left(before)
    assert not [g for m in after["models"] for g in m["missing"] if g["fix"] is not None]  # nothing apply wrote is reported again
    written = wrapper.read_bytes()
    second = invoke("apply", root, "--model", "cap_vl")
    assert second.exit_code == 1 and wrapper.read_bytes() == written
