"""Where plumbing is proven: `check` proves a plan in `ast` (its pieces put into copies of the classes'
syntax trees, the analysis run again) and never runs a codemod; the libcst write, its idempotence and
revert are proven once, where the file is written (rewrite/verify.py: prove_plumbing), and a written
text that is not the tree `check` judged is an error for its file."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

import eaglepatch.codemods.add_plumbing as add_plumbing  # with_plumbing imports apply_plumbing at call time
from eaglepatch.errors import EaglepatchError
from eaglepatch.plumbing.gate import SourceClasses
from eaglepatch.plumbing.planner import PlumbingPlanner
from eaglepatch.rewrite.verify import prove_plumbing
from eaglepatch.run import analyze
from eaglepatch.selection import Selection

CHECKOUT = Path(__file__).resolve().parent.parent / "fixtures" / "checkout"


def _counting(monkeypatch) -> Counter:
    calls: Counter = Counter()
    real = add_plumbing.apply_plumbing

    def counted(text, pieces, *args, **kwargs):
        calls[(text, repr(pieces))] += 1
        return real(text, pieces, *args, **kwargs)

    monkeypatch.setattr(add_plumbing, "apply_plumbing", counted)
    return calls


def test_check_plans_plumbing_without_the_codemod_and_apply_writes_each_file_once(tmp_path, monkeypatch):
    from eaglepatch.rewrite.edits import build_edits

    tree = tmp_path / "tree"
    shutil.copytree(CHECKOUT, tree, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    calls = _counting(monkeypatch)
    analysis = analyze(Selection(path=tree, all_models=True))
    assert any(m.writes_plumbing is not None for p in analysis.plans for m in p.writes), "the fixture has a plumbing fix"
    assert not calls, "check ran the plumbing codemod"
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans, analysis.style)
    assert not errors and edits
    written = {text for text, _ in calls}
    originals = {e.original.decode() for e in edits if any("(plumbing)" in m for ms in e.added.values() for m in ms)}
    assert originals and originals <= written  # each plumbed file written from its text as read ...
    assert max(calls.values()) == 1  # ... once, and its written text run again once (the idempotence proof)


# (reference source, target source) as tests/test_plumbing_write.py's fixtures lay them out: one file each
REFERENCE = '''\
class LlamaModel:
    def __init__(self):
        self.layers = []
        self.layers_to_capture = []

    def forward(self, input_ids, positions):
        hidden_states = input_ids
        aux_hidden_states = []
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](positions, hidden_states)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class LlamaForCausalLM:
    def __init__(self):
        self.model = LlamaModel()
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions):
        aux_hidden_states = None
        hidden_states = self.model(input_ids, positions)
        if self.capture_aux_hidden_states:
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(input_ids, hidden_states, aux_hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
'''

TARGET = '''\
class PhiModel:
    def __init__(self):
        self.layers = []

    def forward(self, input_ids, positions):
        hidden_states = input_ids
        for i in range(len(self.layers)):
            hidden_states = self.layers[i](positions, hidden_states)
        return hidden_states


class PhiForCausalLM:
    def __init__(self):
        self.model = PhiModel()

    def forward(self, input_ids, positions):
        hidden_states = self.model(input_ids, positions)
        return self.logits_processor(input_ids, hidden_states)
'''


def _plan():
    classes = SourceClasses({"models/llama.py": REFERENCE, "models/phi.py": TARGET})
    plan = PlumbingPlanner(classes, ["models/llama.py:LlamaForCausalLM"]).plan("models/phi.py:PhiForCausalLM")
    assert plan.ok, plan.why
    return plan.pieces_in("models/phi.py")


def test_the_codemods_text_is_the_tree_check_proved():
    pieces = _plan()
    written = add_plumbing.apply_plumbing(TARGET, pieces, 88)
    prove_plumbing("models/phi.py", TARGET, written, pieces, 88)  # no error: the two proofs agree


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        # a piece that did not land as planned: the written class is not the one judged
        (lambda s: s.replace("            return hidden_states\n", "            return None\n", 1), "is not the code check proved in PhiModel"),
        (lambda s: s.replace("self.capture_aux_hidden_states = False", "self.capture_aux_hidden_states = True"), "is not the code check proved"),
        (lambda s: s + "\nclass Broken(:\n", "cannot be read back"),
        # the same syntax tree, but the markers that make a second run and revert know the pieces are gone
        (lambda s: "\n".join(line for line in s.splitlines() if "eaglepatch: plumbing" not in line) + "\n", "would change again on a second run"),
        (lambda s: re.sub(r"digest [0-9a-f]+", "digest 000000000000", s), "would not be taken back whole by revert"),
    ],
)
def test_a_written_text_check_did_not_prove_is_an_error(edit, why):
    pieces = _plan()
    written = add_plumbing.apply_plumbing(TARGET, pieces, 88)
    assert edit(written) != written
    with pytest.raises(EaglepatchError, match=why) as raised:
        prove_plumbing("models/phi.py", TARGET, edit(written), pieces, 88)
    assert raised.value.path == "models/phi.py"
