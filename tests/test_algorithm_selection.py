"""Every speculative algorithm the tree defines, beside EAGLE-3 (analyze/algorithms.py: run_protocol).

The bundled checkout knows EAGLE and EAGLE3 only; here a copy of it gains a DFLASH member in its enum,
a runner branch that calls `set_dflash_layers_to_capture` on the target under `is_dflash()`, and that
hook on the DeepSeek language model the Kimi wrapper holds, as SGLang 0.5.16+ has them.  The wrapper
lacks the hook: `check` names it with its algorithm, `--algorithm` selects, `apply` writes the
delegation, and the patched module imports and forwards the runner's call.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import invoke, isolate_git, snapshot

CHECKOUT = Path(__file__).resolve().parent.parent / "fixtures" / "checkout"
SRT = Path("python/sglang/srt")
KIMI = "KimiK25ForConditionalGeneration"
DFLASH_HOOK = "set_dflash_layers_to_capture"

EDITS = {
    "speculative/spec_info.py": [
        ("    NGRAM = auto()\n", "    NGRAM = auto()\n    DFLASH = auto()\n"),
        (
            "    def is_ngram(self):\n",
            "    def is_dflash(self):\n        return self == SpeculativeAlgorithm.DFLASH\n\n    def is_ngram(self):\n",
        ),
    ],
    "model_executor/model_runner.py": [
        (
            "                self.eagle_aux_hidden_state_layer_ids\n            )\n",
            "                self.eagle_aux_hidden_state_layer_ids\n            )\n"
            "        self.dflash_use_aux_hidden_state = spec_algorithm.is_dflash()\n"
            "        if self.dflash_use_aux_hidden_state:\n"
            "            self.model.set_dflash_layers_to_capture(\n"
            "                self.eagle_aux_hidden_state_layer_ids\n            )\n",
        ),
    ],
    "models/deepseek_v2.py": [
        (
            "class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):\n",
            "    def set_dflash_layers_to_capture(self, layer_ids: List[int]):\n"
            "        self.capture_aux_hidden_states = True\n"
            "        self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
            "\n\n"
            "class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):\n",
        ),
    ],
}


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch):
    isolate_git(monkeypatch, columns=200)


eaglepatch = invoke


def edited(root: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    """The tree at `root` with each (old, new) replacement made in its file; each old text is there once."""
    for rel, pairs in edits.items():
        path = root / SRT / rel
        text = path.read_text(encoding="utf-8")
        for old, new in pairs:
            assert text.count(old) == 1, f"{rel}: the fixture changed, {old!r} is not there once"
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
    return root


def dflash_checkout(root: Path) -> Path:
    shutil.copytree(CHECKOUT, root, symlinks=True)
    return edited(root, EDITS)


def kimi(data: dict) -> dict:
    (model,) = [m for m in data["models"] if m["class"] == KIMI]
    return model


def gaps(model: dict) -> dict[str, dict]:
    return {m["name"]: m for m in model["missing"]}


def check_json(root: Path, *flags: str) -> tuple[int, dict]:
    result = eaglepatch("check", root, "--format", "json", "--no-cache", *flags)
    return result.exit_code, json.loads(result.stdout)


def test_the_kimi_wrapper_lacks_the_dflash_hook_and_check_names_its_algorithm(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    code, data = check_json(root)
    assert code == 1
    missing = gaps(kimi(data))
    hook = missing[DFLASH_HOOK]
    assert hook["algorithms"] == ["DFLASH"] and hook["role"] == "target" and hook["required"]
    assert hook["called_at"] == ["model_executor/model_runner.py:18"]
    assert hook["fix"] == {"kind": "delegate", "to": "language_model"}
    assert missing["set_eagle3_layers_to_capture"]["algorithms"] == ["EAGLE3"]  # still EAGLE-3's alone
    assert "EAGLE" in missing["get_embed_and_head"]["algorithms"]  # both EAGLE workers use it
    table = eaglepatch("check", root, "--no-cache")
    assert f"{DFLASH_HOOK} (DFLASH): fix: forward to self.language_model" in table.stdout
    github = eaglepatch("check", root, "--no-cache", "--format", "github").stdout
    line = next(x for x in github.splitlines() if DFLASH_HOOK in x and KIMI in x)
    assert f"title=eaglepatch%3A missing {DFLASH_HOOK} (DFLASH)::" in line and "DFLASH uses it at" in line


def test_algorithm_selects_what_is_checked(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    _, only_eagle3 = check_json(root, "--algorithm", "EAGLE3")
    assert DFLASH_HOOK not in gaps(kimi(only_eagle3))
    _, default = check_json(root)
    assert set(gaps(kimi(default))) - {DFLASH_HOOK} == set(gaps(kimi(only_eagle3)))  # the rest is EAGLE-3's as it was
    _, only_dflash = check_json(root, "--algorithm", "dflash")
    assert set(gaps(kimi(only_dflash))) == {DFLASH_HOOK}
    assert [m["name"] for m in only_dflash["protocol"]] == [DFLASH_HOOK]


def test_an_algorithm_the_tree_does_not_define_is_an_error_naming_those_it_does(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    before = snapshot(root)
    result = eaglepatch("apply", root, "--algorithm", "MEDUSA")
    assert result.exit_code == 2
    assert "--algorithm MEDUSA: this tree defines EAGLE, EAGLE3, NGRAM, DFLASH (read from speculative/spec_info.py:7)" in result.output
    assert snapshot(root) == before


def test_the_pyproject_table_selects_and_a_flag_wins(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    (root / "pyproject.toml").write_text('[tool.eaglepatch]\nalgorithms = ["EAGLE3"]\n', encoding="utf-8")
    _, data = check_json(root)
    assert DFLASH_HOOK not in gaps(kimi(data))
    _, flagged = check_json(root, "--algorithm", "DFLASH")
    assert DFLASH_HOOK in gaps(kimi(flagged))


def test_a_tree_without_another_algorithm_reads_as_before():
    """The bundled checkout defines EAGLE and EAGLE3 only: every member is EAGLE-3's, none is tagged."""
    code, data = check_json(CHECKOUT, "--all")
    assert code == 1
    assert all("EAGLE3" in m["algorithms"] for m in data["protocol"])
    assert "(EAGLE" not in eaglepatch("check", CHECKOUT, "--all", "--no-cache").stdout


FORWARD_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import types
from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration as Wrapper
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as Algo

N = types.SimpleNamespace
w = Wrapper(N(text_config=N(hidden_size=8, vocab_size=32, num_hidden_layers=6)))
inner = w.language_model
assert not inner.capture_aux_hidden_states
ModelRunner(w, Algo.DFLASH, [1, 3])
assert inner.capture_aux_hidden_states and inner.model.layers_to_capture == [2, 4], inner.model.layers_to_capture
print("OK")
"""


def test_apply_writes_the_dflash_delegation_and_the_runner_reaches_the_inner_hook(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    before = subprocess.run([sys.executable, "-I", "-B", "-c", FORWARD_SCRIPT, str(root / "python")], capture_output=True, text=True, timeout=60)
    assert before.returncode != 0 and f"'{KIMI}' object has no attribute '{DFLASH_HOOK}'" in before.stderr
    result = eaglepatch("apply", root, "--model", "kimi_k25", "--algorithm", "DFLASH")
    assert result.exit_code == 0, result.output
    text = (root / SRT / "models" / "kimi_k25.py").read_text(encoding="utf-8")
    assert f"    def {DFLASH_HOOK}(self, layer_ids: List[int]):\n" in text
    assert '"""Forward to ``self.language_model`` (DFLASH speculative decoding)."""' in text
    assert f"        return inner.{DFLASH_HOOK}(layer_ids)\n" in text
    assert "def set_eagle3_layers_to_capture" not in text  # --algorithm DFLASH: EAGLE-3's hooks are not written
    after = subprocess.run([sys.executable, "-I", "-B", "-c", FORWARD_SCRIPT, str(root / "python")], capture_output=True, text=True, timeout=60)
    assert after.returncode == 0 and after.stdout.strip().endswith("OK"), after.stdout + after.stderr
    patched = snapshot(root)
    again = eaglepatch("apply", root, "--model", "kimi_k25", "--algorithm", "DFLASH")
    assert again.exit_code == 0 and snapshot(root) == patched  # idempotent
    code, data = check_json(root, "--model", "kimi_k25", "--algorithm", "DFLASH")
    assert code == 0 and kimi(data)["status"] == "compliant"
    assert eaglepatch("revert", root, "--model", "kimi_k25").exit_code == 0
    assert snapshot(root) == snapshot(dflash_checkout(tmp_path / "pristine"))  # the bytes back


def test_the_vllm_profile_refuses_an_algorithm_other_than_eagle3(tmp_path):
    vllm = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
    result = eaglepatch("check", vllm, "--algorithm", "DFLASH", "--no-cache")
    assert result.exit_code == 2
    assert "--algorithm DFLASH: the vLLM profile reads EAGLE-3's interface (SupportsEagle3) only" in result.output
    assert eaglepatch("check", vllm, "--algorithm", "EAGLE3", "--no-cache").exit_code == eaglepatch("check", vllm, "--no-cache").exit_code


# --------------------------------------------------------------------------- a learned DFlash hook, proven on stubs


def _load_fixture(text: str, name: str):
    """The module's text run against the fixture's own sglang package (its nn stand-in, no torch)."""
    import types

    site = str(CHECKOUT / "python")
    sys.path.insert(0, site)
    try:
        module = types.ModuleType(name)
        exec(compile(text, name, "exec"), module.__dict__)
        return module
    finally:
        sys.path.remove(site)
        for loaded in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[loaded]


def test_a_learned_dflash_hook_captures_what_the_trees_eagle3_hook_does(tmp_path):
    """Qwen2ForCausalLM has EAGLE-3's hook and plumbing, not DFlash's: apply learns DFlash's from the
    tree's reference (DeepSeek's `[val + 1 for val in layer_ids]`), writes nothing else, and on stubs
    the patched class hands the logits processor the streams entering layers k + 1, as its own EAGLE-3
    hook with the same ids does."""
    from plumbing_harness import INPUTS, Sym, build

    root = dflash_checkout(tmp_path / "tree")
    path = root / SRT / "models" / "qwen2.py"
    original = path.read_text(encoding="utf-8")
    code, data = check_json(root, "--model", "qwen2", "--algorithm", "DFLASH")
    (model,) = data["models"]
    assert code == 1 and gaps(model)[DFLASH_HOOK]["fix"] == {"kind": "synthesize", "from": "models/deepseek_v2.py:DeepseekV2ForCausalLM"}
    assert eaglepatch("apply", root, "--model", "qwen2", "--algorithm", "DFLASH").exit_code == 0
    written = path.read_text(encoding="utf-8")
    assert written.count(f"def {DFLASH_HOOK}(") == 1
    assert [line for line in original.splitlines() if line not in written.splitlines()] == []  # nothing else touched
    patched = _load_fixture(written, "qwen2_after")
    cls = patched.Qwen2ForCausalLM
    dflash, eagle3 = build(cls, pair=True), build(cls, pair=True)
    getattr(dflash.model, DFLASH_HOOK)([0, 2, 4])
    eagle3.model.set_eagle3_layers_to_capture([0, 2, 4])
    dflash.model.forward(*INPUTS)
    eagle3.model.forward(*INPUTS)
    (call,) = dflash.logits.calls
    assert call["aux_hidden_states"] == [Sym("(h0 + r0)"), Sym("(h2 + r2)"), Sym("(h4 + r4)")]
    assert dflash.logits.calls == eagle3.logits.calls
    off = build(cls, pair=True)
    off.model.forward(*INPUTS)
    assert off.logits.calls[0]["aux_hidden_states"] is None  # capture off: as before
    code, data = check_json(root, "--model", "qwen2", "--algorithm", "DFLASH")
    assert code == 0 and data["models"][0]["status"] == "compliant"
    assert eaglepatch("revert", root, "--model", "qwen2").exit_code == 0
    assert path.read_text(encoding="utf-8") == original


def test_a_learned_dflash_hook_is_refused_where_the_forward_would_not_use_it(tmp_path):
    """The same class with its forward no longer handing the aux states on: the learned hook would set
    state nothing reads, so it is not offered, and the gap names the piece."""
    root = dflash_checkout(tmp_path / "tree")
    path = root / SRT / "models" / "qwen2.py"
    text = path.read_text(encoding="utf-8")
    old = "input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "input_ids, hidden_states, self.lm_head, forward_batch\n"), encoding="utf-8")
    before = snapshot(root)
    code, data = check_json(root, "--model", "qwen2", "--algorithm", "DFLASH")
    (model,) = data["models"]
    hook = gaps(model)[DFLASH_HOOK]
    assert code == 1 and model["status"] == "needs_code" and hook["fix"] is None
    assert "learned from models/deepseek_v2.py:DeepseekV2ForCausalLM would not work here: logits-aux" in hook["blocker"]
    result = eaglepatch("apply", root, "--model", "qwen2", "--algorithm", "DFLASH")
    assert result.exit_code == 1 and snapshot(root) == before  # required gaps remain, nothing written


# --------------------------------------------------------------------------- one of a group: DSpark's hasattr chain

DSPARK_EDITS = {
    "speculative/spec_info.py": [
        ("    DFLASH = auto()\n", "    DFLASH = auto()\n    DSPARK = auto()\n"),
        (
            "    def is_dflash(self):\n        return self == SpeculativeAlgorithm.DFLASH\n",
            "    def is_dflash(self):\n        return self == SpeculativeAlgorithm.DFLASH\n\n"
            "    def is_dspark(self):\n        return self == SpeculativeAlgorithm.DSPARK\n\n"
            "    def is_dflash_family(self):\n        return self.is_dflash() or self.is_dspark()\n",
        ),
    ],
    "model_executor/model_runner.py": [
        (
            "        self.dflash_use_aux_hidden_state = spec_algorithm.is_dflash()\n"
            "        if self.dflash_use_aux_hidden_state:\n"
            "            self.model.set_dflash_layers_to_capture(\n"
            "                self.eagle_aux_hidden_state_layer_ids\n            )\n",
            "        self.dflash_use_aux_hidden_state = spec_algorithm.is_dflash_family()\n"
            "        is_dspark = spec_algorithm.is_dspark()\n"
            "        ids = self.eagle_aux_hidden_state_layer_ids\n"
            "        if self.dflash_use_aux_hidden_state:\n"
            '            if is_dspark and hasattr(self.model, "set_dspark_layers_to_capture"):\n'
            "                self.model.set_dspark_layers_to_capture(ids)\n"
            '            elif hasattr(self.model, "set_dflash_layers_to_capture"):\n'
            "                self.model.set_dflash_layers_to_capture(ids)\n"
            "            else:\n"
            '                raise ValueError("implements neither hook")\n',
        ),
    ],
}


def dspark_checkout(root: Path) -> Path:
    return edited(dflash_checkout(root), DSPARK_EDITS)


def test_a_class_needs_one_member_of_a_group_the_one_its_inner_model_has(tmp_path):
    """DSpark calls its own hook when the model has it, else DFlash's, else raises: a class with
    neither is held to the one its inner model defines (DFlash's here); one with either needs nothing."""
    root = dspark_checkout(tmp_path / "tree")
    code, data = check_json(root, "--all", "--algorithm", "DSPARK")
    by_class = {m["class"]: m for m in data["models"]}
    kimi_gaps = gaps(by_class[KIMI])
    assert code == 1 and set(kimi_gaps) == {DFLASH_HOOK}
    assert kimi_gaps[DFLASH_HOOK]["required"] and kimi_gaps[DFLASH_HOOK]["fix"] == {"kind": "delegate", "to": "language_model"}
    assert kimi_gaps[DFLASH_HOOK]["algorithms"] == ["DSPARK"]
    assert by_class["DeepseekV2ForCausalLM"]["status"] == "compliant"  # it has DFlash's: DSpark takes it
    exotic = gaps(by_class["ExoticForCausalLM"])  # no inner model with either: held to the group's first
    assert set(exotic) == {"set_dspark_layers_to_capture"} and exotic["set_dspark_layers_to_capture"]["required"]
    protocol = {m["name"]: m for m in data["protocol"]}
    assert not protocol["set_dspark_layers_to_capture"]["required"] and not protocol[DFLASH_HOOK]["required"]
    _, both = check_json(root, "--model", "kimi_k25", "--algorithm", "DSPARK", "--algorithm", "DFLASH")
    assert gaps(kimi(both))[DFLASH_HOOK]["algorithms"] == ["DFLASH", "DSPARK"]  # required by DFlash itself


def test_a_learned_dflash_hook_rides_on_the_plumbing_written_for_eagle3(tmp_path):
    """phi_like lacks both capture hooks and their plumbing: with EAGLE-3 and DFlash checked, apply
    writes the plumbing once, EAGLE-3's hook and DFlash's beside it, and on stubs DFlash's captures
    what EAGLE-3's does.  With DFlash alone nothing writes the plumbing, so neither is offered."""
    from plumbing_harness import INPUTS, build

    root = dflash_checkout(tmp_path / "tree")
    llama = root / SRT / "models" / "llama.py"  # a reference that keeps pp_group, as phi_like does
    text = llama.read_text(encoding="utf-8")
    hook = (
        f"    def {DFLASH_HOOK}(self, layer_ids: List[int]):\n        if not self.pp_group.is_last_rank:\n            return\n"
        "        self.capture_aux_hidden_states = True\n        self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
    )
    assert text.count("\n\nEntryClass = LlamaForCausalLM") == 1
    llama.write_text(text.replace("\n\nEntryClass = LlamaForCausalLM", "\n" + hook + "\n\nEntryClass = LlamaForCausalLM"), encoding="utf-8")
    _, alone = check_json(root, "--model", "phi_like", "--algorithm", "DFLASH")
    hook = gaps(alone["models"][0])[DFLASH_HOOK]
    assert hook["fix"] is None and "has no layers_to_capture" in hook["blocker"]
    code, data = check_json(root, "--model", "phi_like")
    missing = gaps(data["models"][0])
    assert missing["set_eagle3_layers_to_capture"]["fix"]["plumbing"]
    assert missing[DFLASH_HOOK]["fix"] == {"kind": "synthesize", "from": "models/llama.py:LlamaForCausalLM"}
    path = root / SRT / "models" / "phi_like.py"
    original = path.read_text(encoding="utf-8")
    assert eaglepatch("apply", root, "--model", "phi_like").exit_code == 0
    written = path.read_text(encoding="utf-8")
    assert written.count("aux_hidden_states.append(") == 1 and written.count(f"def {DFLASH_HOOK}(") == 1
    cls = _load_fixture(written, "phi_after").PhiLikeForCausalLM
    dflash, eagle3 = build(cls, pair=True), build(cls, pair=True)
    getattr(dflash.model, DFLASH_HOOK)([0, 2, 4])
    eagle3.model.set_eagle3_layers_to_capture([0, 2, 4])
    dflash.model.forward(*INPUTS)
    eagle3.model.forward(*INPUTS)
    assert dflash.logits.calls == eagle3.logits.calls and dflash.logits.calls[0]["aux_hidden_states"]
    code, after = check_json(root, "--model", "phi_like")
    assert code == 0 and after["models"][0]["status"] == "compliant"
    assert eaglepatch("revert", root, "--model", "phi_like").exit_code == 0
    assert path.read_text(encoding="utf-8") == original


# --------------------------------------------------------------------------- a backbone that marks its own layers

# Qwen3.5's shape (0.5.17): the backbone's own DFlash hook sets a flag on each chosen layer, and its loop
# hands those layers the list they append what enters them to.  FlagMoeForCausalLM hands the hook to its
# backbone with the tree's shift (Qwen3-MoE's); FlagTextForCausalLM, a second class of the same shape,
# unpacks on what its backbone returns and lacks the hook.
FLAG_BACKBONE = '''\
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(getattr(config, "vocab_size", 32), getattr(config, "hidden_size", 8))
        self.layers = nn.ModuleList([nn.DecoderLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def set_dflash_layers_to_capture(self, layers_to_capture: List[int]):
        self.layers_to_capture = layers_to_capture
        for layer_id in self.layers_to_capture:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        aux_hidden_states = []
        for i in range(len(self.layers)):
            layer = self.layers[i]
            hidden_states, residual = layer(
                positions,
                hidden_states,
                forward_batch,
                residual,
                captured_last_layer_outputs=aux_hidden_states if getattr(layer, "_is_layer_to_capture", False) else None,
            )
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
'''
FLAG_CAUSAL_LM = '''\
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        super().__init__()
        self.config = config
        self.model = {backbone}(config, quant_config)
        self.lm_head = nn.Linear(getattr(config, "hidden_size", 8), getattr(config, "vocab_size", 32))
        self.logits_processor = nn.LogitsProcessor(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = self.model(input_ids, positions, forward_batch)
        aux_hidden_states = None
        if isinstance(hidden_states, tuple):
            hidden_states, aux_hidden_states = hidden_states
        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch, aux_hidden_states)
'''
FLAGS = (
    '"""Per-layer-flag stand-ins (eaglepatch tests): backbones that mark the layers to capture themselves."""\n\n'
    "from typing import List\n\nfrom sglang.srt.utils import nn\n\n\n"
    "class FlagMoeModel(nn.Module):\n" + FLAG_BACKBONE + "\n\n"
    "class FlagMoeForCausalLM(nn.Module):\n" + FLAG_CAUSAL_LM.replace("{backbone}", "FlagMoeModel") + "\n"
    "    def set_dflash_layers_to_capture(self, layer_ids: List[int]):\n"
    "        self.capture_aux_hidden_states = True\n"
    "        self.model.set_dflash_layers_to_capture([val + 1 for val in layer_ids])\n\n\n"
    "class FlagTextModel(nn.Module):\n" + FLAG_BACKBONE + "\n\n"
    "class FlagTextForCausalLM(nn.Module):\n" + FLAG_CAUSAL_LM.replace("{backbone}", "FlagTextModel") + "\n\n"
    "EntryClass = [FlagMoeForCausalLM, FlagTextForCausalLM]\n"
)


def test_a_dflash_hook_is_learned_where_the_backbone_marks_its_own_layers(tmp_path):
    """Of the tree's DFlash hooks, DeepSeek's sets a list FlagTextModel never reads: the gate refuses it in
    FlagTextForCausalLM.  FlagMoeForCausalLM's hands the ids, shifted, to the backbone's own hook: learned,
    and on stubs the patched class hands the logits processor the streams entering layers k + 1, as the
    reference does and as the tree's EAGLE-3 hooks do for the same ids (Qwen2's)."""
    from plumbing_harness import INPUTS, Sym, build

    root = dflash_checkout(tmp_path / "tree")
    path = root / SRT / "models" / "flags.py"
    path.write_text(FLAGS, encoding="utf-8")
    code, data = check_json(root, "--model", "flags", "--algorithm", "DFLASH")
    by_class = {m["class"]: m for m in data["models"]}
    assert by_class["FlagMoeForCausalLM"]["status"] == "compliant"
    hook = gaps(by_class["FlagTextForCausalLM"])[DFLASH_HOOK]
    assert code == 1 and hook["fix"] == {"kind": "synthesize", "from": "models/flags.py:FlagMoeForCausalLM"}
    assert eaglepatch("apply", root, "--model", "flags", "--algorithm", "DFLASH").exit_code == 0
    written = path.read_text(encoding="utf-8")
    assert written.count("self.model.set_dflash_layers_to_capture([val + 1 for val in layer_ids])") == 2
    patched = _load_fixture(written, "flags_after")
    text, reference = build(patched.FlagTextForCausalLM, pair=True), build(patched.FlagMoeForCausalLM, pair=True)
    getattr(text.model, DFLASH_HOOK)([0, 2, 4])
    getattr(reference.model, DFLASH_HOOK)([0, 2, 4])
    text.model.forward(*INPUTS)
    reference.model.forward(*INPUTS)
    (call,) = text.logits.calls
    assert call["aux_hidden_states"] == [Sym("(h0 + r0)"), Sym("(h2 + r2)"), Sym("(h4 + r4)")]
    assert text.logits.calls == reference.logits.calls
    off = build(patched.FlagTextForCausalLM, pair=True)
    off.model.forward(*INPUTS)
    assert off.logits.calls[0]["aux_hidden_states"] is None  # capture off: as before
    code, data = check_json(root, "--model", "flags", "--algorithm", "DFLASH")
    assert code == 0 and {m["status"] for m in data["models"]} == {"compliant"}


def test_no_dflash_hook_is_learned_where_the_forward_never_unpacks(tmp_path):
    root = dflash_checkout(tmp_path / "tree")
    unpack = "        if isinstance(hidden_states, tuple):\n            hidden_states, aux_hidden_states = hidden_states\n"
    text_class = FLAGS.index("class FlagTextForCausalLM")
    assert FLAGS.count(unpack) == 2
    (root / SRT / "models" / "flags.py").write_text(FLAGS[:text_class] + FLAGS[text_class:].replace(unpack, ""), encoding="utf-8")
    before = snapshot(root)
    code, data = check_json(root, "--model", "flags", "--algorithm", "DFLASH")
    hook = gaps({m["class"]: m for m in data["models"]}["FlagTextForCausalLM"])[DFLASH_HOOK]
    assert code == 1 and hook["fix"] is None and hook["blocker"]
    assert eaglepatch("apply", root, "--model", "flags", "--algorithm", "DFLASH").exit_code == 1 and snapshot(root) == before
