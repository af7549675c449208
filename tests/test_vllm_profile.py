"""The vLLM engine profile on fixtures/vllm, a small hand-written tree shaped like vLLM 0.18+
(no vLLM code; pure Python, so the patched modules are imported and the runtime check is run).

fixtures/vllm/vllm/model_executor/models holds:
* interfaces.py: a runtime-checkable SupportsEagle3 whose hooks have default bodies, EagleModelMixin;
* registry.py: _TEXT_GENERATION_MODELS, _EMBEDDING_MODELS, _MULTIMODAL_MODELS (dict literals);
* LMs with the base: llama (decoder through `_init_model`, a mixin calling _maybe_add_hidden_state),
  moe (decoder through `model_cls`, collects inline), deep (overrides the setter, decoder no mixin);
* wrappers: asr (direct LlamaForCausalLM, absolute parenthesized imports: fixable by the base),
  asr_realtime (inherits asr's), omni (LM whose decoder overrides forward and collects nothing:
  needs_code), deep_vl (registry `architectures=["DeepForCausalLM"]` through a local: base + setter),
  any_vl (no architectures=: dynamic), ready_vl (declares the base: compliant), plain_vl (`self.llm`,
  no interfaces import: fixable, the import is added);
and v1/worker/gpu_model_runner.py calls the hooks on the target after the supports_eagle3 check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eaglepatch.cli import app
from eaglepatch.engines import find_engine, locate_tree
from eaglepatch.engines.vllm.plan import VllmPlanner
from eaglepatch.engines.vllm.protocol import read_protocol
from eaglepatch.engines.vllm.tree import VllmTree
from eaglepatch.errors import EaglepatchError
from eaglepatch.read.source_cache import SourceCache

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "vllm"
SGLANG_FIXTURE = REPO / "fixtures" / "site-packages"
RUNNER = CliRunner()

EXPECTED = {
    "AsrForConditionalGeneration": "fixable",
    "AsrRealtimeGeneration": "fixable",
    "DeepVLForConditionalGeneration": "fixable",
    "PlainVLForConditionalGeneration": "fixable",
    "OmniThinkerForConditionalGeneration": "needs_code",
    "AnyVLForConditionalGeneration": "dynamic",
    "ReadyVLForConditionalGeneration": "compliant",
    # the causal LMs, each its own target: the base in the MRO, a decoder that collects
    "LlamaForCausalLM": "compliant",
    "MoeForCausalLM": "compliant",
    "DeepForCausalLM": "compliant",
}


def cli(*args) -> object:
    result = RUNNER.invoke(app, [*map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def tree(tmp_path) -> Path:
    """A writable copy of the fixture (a site-packages-like folder holding vllm/)."""
    root = tmp_path / "site"
    shutil.copytree(FIXTURE, root)
    return root


def _statuses(data: dict) -> dict[str, str]:
    return {m["class"]: m["status"] for m in data["models"]}


# --------------------------------------------------------------------------- locate


def test_a_vllm_tree_is_found_in_each_layout_and_sglang_still_wins_its_own():
    for given, layout in ((FIXTURE, "site-packages"), (FIXTURE / "vllm", "package")):
        engine, found = find_engine(given)
        assert (engine.name, found.layout, found.srt) == ("vllm", layout, FIXTURE / "vllm")
        assert found.models == FIXTURE / "vllm" / "model_executor" / "models"
    assert find_engine(SGLANG_FIXTURE)[0].name == "sglang"


def test_a_checkout_root_is_named_so(tmp_path):
    shutil.copytree(FIXTURE / "vllm", tmp_path / "vllm")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'vllm'\n")
    assert locate_tree(tmp_path).layout == "checkout"


def test_engine_overrides_the_shape_and_a_wrong_engine_is_an_error():
    assert find_engine(FIXTURE, "vllm")[0].name == "vllm"
    with pytest.raises(EaglepatchError, match="no sglang/srt"):
        locate_tree(FIXTURE, "sglang")
    with pytest.raises(EaglepatchError, match="interfaces.py"):
        locate_tree(SGLANG_FIXTURE, "vllm")
    result = cli("check", "--engine", "sglang", FIXTURE)
    assert result.exit_code == 2 and "no sglang/srt" in result.stderr


def test_the_edits_read_the_modules_the_analysis_parsed(monkeypatch):
    """One reading a run: the edits ask the run's VllmTree, so no module the analysis parsed is parsed again."""
    import ast

    from eaglepatch.run import analyze

    analysis = analyze(FIXTURE, all_models=True)
    assert VllmTree.of(analysis.cache).module("vllm.model_executor.models.interfaces") is not None
    read = {path.read_bytes() for path in (FIXTURE / "vllm").rglob("*.py")}
    parsed: list[bytes] = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *args, **kwargs: parsed.append(source if isinstance(source, bytes) else source.encode()) or real(source, *args, **kwargs))
    edits, errors = analysis.engine.edits(analysis)
    assert edits and not errors
    assert parsed and not read.intersection(parsed)  # the written texts are proven; no file as it is is parsed again


# --------------------------------------------------------------------------- protocol


def test_the_protocol_is_read_from_interfaces_and_confirmed_by_the_runner():
    protocol = read_protocol(VllmTree(SourceCache(FIXTURE / "vllm")))
    assert protocol.setter.name == "set_aux_hidden_state_layers"
    assert protocol.getter.name == "get_eagle3_default_aux_hidden_state_layers"
    assert not protocol.stubs and not protocol.warnings
    runner = FIXTURE / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
    lines = runner.read_text().splitlines()
    where = {name: [u.at for u in uses] for name, uses in protocol.uses.items()}
    assert where["SupportsEagle3"] == [f"v1/worker/gpu_model_runner.py:{_line(lines, 'supports_eagle3(self.model)')}"]
    assert where["set_aux_hidden_state_layers"] == [f"v1/worker/gpu_model_runner.py:{_line(lines, '.set_aux_hidden_state_layers(')}"]


def _line(lines: list[str], needle: str) -> int:
    hits = [i for i, line in enumerate(lines, start=1) if needle in line]
    assert len(hits) == 1, needle
    return hits[0]


def _stub_release(root: Path) -> None:
    """Turn the copy into a 0.10-0.17-shaped release: stub hooks, the getter's old name."""
    interfaces = root / "vllm" / "model_executor" / "models" / "interfaces.py"
    text = interfaces.read_text()
    start = text.index("    def set_aux_hidden_state_layers")
    end = text.index("def supports_eagle3")
    stubs = textwrap.indent(
        'def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n    """Stub."""\n    ...\n\n'
        'def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n    """Stub."""\n    ...\n\n\n',
        "    ",
    )
    interfaces.write_text(text[:start] + stubs + text[end:])
    runner = root / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
    runner.write_text(runner.read_text().replace("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers"))
    for lm in ("llama.py", "moe.py"):  # LMs of that era define both hooks
        path = root / "vllm" / "model_executor" / "models" / lm
        cls = "LlamaForCausalLM" if lm == "llama.py" else "MoeForCausalLM"
        text = path.read_text()
        anchor = f"class {cls}("
        head, _, rest = text.partition(anchor)
        body_end = rest.find("\n\n\nclass ")
        hooks = (
            "\n\n    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
            "        self.model.aux_hidden_state_layers = layers\n\n"
            "    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
            "        return (2, 3)\n"
        )
        rest = rest[:body_end] + hooks + rest[body_end:] if body_end != -1 else rest.rstrip("\n") + hooks
        path.write_text(head + anchor + rest)


def test_a_stub_release_needs_the_hooks_written_with_its_own_names(tree):
    _stub_release(tree)
    protocol = read_protocol(VllmTree(SourceCache(tree / "vllm")))
    assert protocol.stubs and protocol.getter.name == "get_eagle3_aux_hidden_state_layers"
    result = cli("check", "--model", "asr", "--format", "json", tree)
    data = json.loads(result.stdout)
    (asr,) = data["models"]
    assert asr["status"] == "fixable"
    fixes = {m["name"]: m["fix"] for m in asr["missing"]}
    assert fixes == {
        "SupportsEagle3": {"kind": "base", "base": "SupportsEagle3"},
        "set_aux_hidden_state_layers": {"kind": "delegate", "to": "language_model"},
        "get_eagle3_aux_hidden_state_layers": {"kind": "delegate", "to": "language_model"},
    }


def test_a_release_without_the_protocol_and_no_class_to_learn_the_hooks_from_is_refused(tree):
    interfaces = tree / "vllm" / "model_executor" / "models" / "interfaces.py"
    interfaces.write_text(interfaces.read_text().replace("class SupportsEagle3(Protocol)", "class SomethingElse(Protocol)"))
    result = cli("check", "--all", tree)
    assert result.exit_code == 2
    assert "declares no SupportsEagle3" in result.stderr and "no model class of the tree defines both" in result.stderr


DUCK_HOOKS = """
    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.model.aux_hidden_state_layers = layers

    def get_eagle3_default_aux_hidden_state_layers(self) -> tuple[int, ...]:
        n = len(self.model.layers)
        return (2, n // 2, n - 3)
"""


def test_a_release_that_calls_the_hooks_by_name_needs_them_not_the_base(tree):
    """Before 0.10.1 the runner calls the hooks on the target by name: no base is checked.  Llama defines
    both (compliant, with the classes inheriting them), the wrappers holding it get forwarders only."""
    models = tree / "vllm" / "model_executor" / "models"
    interfaces = models / "interfaces.py"
    interfaces.write_text(interfaces.read_text().replace("class SupportsEagle3(Protocol)", "class SomethingElse(Protocol)"))
    llama = models / "llama.py"
    llama.write_text(llama.read_text().replace("SupportsEagle3", "SupportsPP") .replace(
        "        return LlamaModel(vllm_config=vllm_config, prefix=prefix)\n",
        "        return LlamaModel(vllm_config=vllm_config, prefix=prefix)\n" + DUCK_HOOKS))
    data = json.loads(cli("check", "--all", "--format", "json", tree).stdout)
    found = _statuses(data)
    assert any("duck typing" in w for w in data["warnings"]) and [m["name"] for m in data["protocol"]] == [
        "set_aux_hidden_state_layers", "get_eagle3_default_aux_hidden_state_layers"]
    assert found["LlamaForCausalLM"] == "compliant"
    asr = next(m for m in data["models"] if m["class"] == "AsrForConditionalGeneration")
    assert asr["status"] == "fixable" and {m["fix"]["kind"] for m in asr["missing"]} == {"delegate"}
    assert cli("apply", "--model", "asr", tree).exit_code == 0
    written = (models / "asr.py").read_text()
    assert "SupportsEagle3" not in written and "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:" in written


# --------------------------------------------------------------------------- plans


def test_every_registered_target_class_gets_its_status():
    result = cli("check", "--all", "--format", "json", FIXTURE)
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["engine"] == "vllm" and data["root"] == str(FIXTURE / "vllm") and "srt" not in data  # vLLM's package, named so
    assert _statuses(data) == EXPECTED  # the embedding model is no target (not in the text-generation registry)
    by_class = {m["class"]: m for m in data["models"]}
    omni = by_class["OmniThinkerForConditionalGeneration"]
    forward = _line((FIXTURE / "vllm/model_executor/models/omni.py").read_text().splitlines(), "def forward")
    assert f"OmniMoeLLMModel.forward (model_executor/models/omni.py:{forward})" in omni["reason"]
    assert omni["missing"][0]["fix"] is None
    deep = by_class["DeepVLForConditionalGeneration"]
    assert [m["fix"]["kind"] for m in deep["missing"]] == ["base", "delegate"]
    assert deep["inner"][0]["class"] == "DeepForCausalLM"  # through the local variable and the registry
    realtime = by_class["AsrRealtimeGeneration"]
    assert realtime["missing"][0]["fix"] == {"kind": "inherit", "from": "model_executor/models/asr.py:AsrForConditionalGeneration"}
    assert "architectures=" in by_class["AnyVLForConditionalGeneration"]["reason"]


OVER_VL = """from .interfaces import SupportsEagle3, SupportsMultiModal
from .llama import Module
from .omni import OmniMoeLLMForCausalLM


class OverVLForConditionalGeneration(Module, SupportsMultiModal, SupportsEagle3):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.language_model = OmniMoeLLMForCausalLM(vllm_config=vllm_config, prefix=prefix)
"""


def test_an_over_declared_wrapper_needs_code(tree):
    """The base is in the MRO (isinstance holds) but the language model's decoder collects nothing."""
    models = tree / "vllm" / "model_executor" / "models"
    (models / "over_vl.py").write_text(OVER_VL)
    registry = models / "registry.py"
    registry.write_text(registry.read_text().replace(
        "_MULTIMODAL_MODELS = {\n", '_MULTIMODAL_MODELS = {\n    "OverVLForConditionalGeneration": ("over_vl", "OverVLForConditionalGeneration"),\n'
    ))
    result = cli("check", "--all", "--format", "json", tree)
    data = json.loads(result.stdout)
    assert _statuses(data) == {**EXPECTED, "OverVLForConditionalGeneration": "needs_code"}  # ready_vl stays compliant
    over = next(m for m in data["models"] if m["class"] == "OverVLForConditionalGeneration")
    forward = _line((models / "omni.py").read_text().splitlines(), "def forward")
    assert over["reason"].startswith("over-declared: SupportsEagle3 is in its MRO, but ")
    assert f"OmniMoeLLMModel.forward (model_executor/models/omni.py:{forward})" in over["reason"]
    assert [(m["name"], m["fix"]) for m in over["missing"]] == [("set_aux_hidden_state_layers", None)]
    before = (models / "over_vl.py").read_bytes()
    applied = cli("apply", "--model", "over_vl", tree)
    assert applied.exit_code == 1 and "Nothing eaglepatch can write; 1 required member(s) missing" in applied.stdout
    assert "set_aux_hidden_state_layers" in applied.stdout
    assert (models / "over_vl.py").read_bytes() == before  # nothing apply could write


def test_the_planner_follows_init_model_and_model_cls_to_the_decoder():
    index = VllmTree(SourceCache(FIXTURE / "vllm"))
    protocol = read_protocol(index)
    planner = VllmPlanner(index, protocol, protocol.as_protocol())
    (llama,) = index.resolve("vllm.model_executor.models.llama", "LlamaForCausalLM")
    (moe,) = index.resolve("vllm.model_executor.models.moe", "MoeForCausalLM")
    (deep,) = index.resolve("vllm.model_executor.models.deep", "DeepForCausalLM")
    found = {ref.name: planner.decoder(ref) for ref in (llama, moe, deep)}
    assert {n: (d.cls.name if d.cls else None, d.collects, d.mixin) for n, d in found.items()} == {
        "LlamaForCausalLM": ("LlamaModel", True, True),
        "MoeForCausalLM": ("MoeModel", True, True),
        "DeepForCausalLM": ("DeepModel", True, False),
    }


@pytest.mark.parametrize("output", ["table", "github", "sarif"])
def test_every_output_format_reports_the_gaps(output):
    result = cli("check", "--all", "--format", output, FIXTURE)
    assert result.exit_code == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert "AsrForConditionalGeneration" in text and "OmniThinkerForConditionalGeneration" in text
    if output == "sarif":
        levels = {r["message"]["text"].split()[0]: r["level"] for r in json.loads(result.stdout)["runs"][0]["results"]}
        assert levels["AsrForConditionalGeneration"] == "error"
    if output == "github":
        assert "SupportsEagle3; EAGLE-3 uses it at v1/worker/gpu_model_runner.py" in text
    if output == "table":
        assert "EAGLE-3 protocol" not in text  # --all is the summary
        assert "add SupportsEagle3 to its bases" in text


def test_one_model_shows_the_protocol_table():
    result = cli("check", "--model", "asr", FIXTURE)
    text = " ".join(result.stdout.split())
    assert "EAGLE-3 protocol read from vLLM's own code" in text
    assert "fix: add SupportsEagle3 to the class's bases, with its import" in text


# (--model, the one line it gets): a module the registry does not name, echoed as typed, with the nearest
# one it names; a registered module without the class named
MODEL_ERRORS = [
    ("lama", "--model lama: the registry names no such model module; did you mean --model llama?"),
    ("nosuch", "--model nosuch: the registry names no such model module; pass --model MODULE[:CLASS] with a model module the registry names"),
    ("../../llama", "--model ../../llama: the registry names no such model module;"),
    ("llama:Nope", "model_executor/models/llama.py: no class registered in _TEXT_GENERATION_MODELS or _MULTIMODAL_MODELS is defined there under the name Nope"),
]


@pytest.mark.parametrize("selector, says", MODEL_ERRORS, ids=[s for s, _ in MODEL_ERRORS])
def test_a_model_that_is_not_registered_is_one_line_and_exit_2(selector, says):
    result = cli("check", "--model", selector, FIXTURE)
    assert result.exit_code == 2 and says in " ".join(result.stderr.split()), result.stderr


def test_a_per_platform_package_is_named_as_the_registry_names_it(tree):
    """vLLM's newest releases register `vllm.models.<name>` packages (a folder per platform): `--model
    <name>` and the dotted module both select its class."""
    package = tree / "vllm" / "models" / "plat"
    package.mkdir(parents=True)
    (tree / "vllm" / "models" / "__init__.py").write_text("")
    (package / "nvidia").mkdir()
    (package / "nvidia" / "__init__.py").write_text("")
    plat = (
        "from vllm.model_executor.models.llama import LlamaModel, Module\n\n\n"
        "class PlatForCausalLM(Module):\n    def __init__(self, *, vllm_config=None, prefix=''):\n"
        "        super().__init__()\n        self.model = LlamaModel(vllm_config=vllm_config, prefix=prefix)\n"
    )
    (package / "nvidia" / "causal.py").write_text(plat)
    (package / "__init__.py").write_text("from .nvidia.causal import PlatForCausalLM\n")
    registry = tree / "vllm" / "model_executor" / "models" / "registry.py"
    registry.write_text(registry.read_text().replace("_TEXT_GENERATION_MODELS = {\n", '_TEXT_GENERATION_MODELS = {\n    "PlatForCausalLM": ("vllm.models.plat", "PlatForCausalLM"),\n', 1))
    for selector in ("plat", "vllm.models.plat"):
        data = json.loads(cli("check", "--model", selector, "--format", "json", tree).stdout)
        assert [(m["class"], m["file"], m["status"]) for m in data["models"]] == [("PlatForCausalLM", "models/plat/nvidia/causal.py", "fixable")]
        assert cli("apply", "--model", selector, tree).exit_code == 0
        assert "SupportsEagle3" in (package / "nvidia" / "causal.py").read_text()
        assert cli("revert", "--model", selector, tree).exit_code == 0
        assert (package / "nvidia" / "causal.py").read_text() == plat


# --------------------------------------------------------------------------- apply


def test_apply_writes_the_bases_and_a_second_apply_changes_nothing(tree):
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    result = cli("apply", "--all", tree)
    assert result.exit_code == 1, result.stderr  # written; OmniThinker's hook is left, and named
    assert "OmniThinkerForConditionalGeneration" in " ".join(result.stdout.split("still missing", 1)[1].split())
    changed = sorted(p.relative_to(tree).as_posix() for p in before if p.read_bytes() != before[p])
    models = "vllm/model_executor/models"
    assert changed == [f"{models}/asr.py", f"{models}/deep_vl.py", f"{models}/plain_vl.py"]
    asr = (tree / models / "asr.py").read_text()
    assert "    SupportsEagle3,\n    SupportsMultiModal," in asr  # merged into the parenthesized import, sorted
    assert "    SupportsPP,\n    SupportsEagle3,\n):" in asr  # after the last base, one a line
    plain = (tree / models / "plain_vl.py").read_text()
    assert "\nfrom .interfaces import SupportsEagle3\nfrom .llama import" in plain
    after = {p: p.read_bytes() for p in tree.rglob("*.py")}
    again = cli("apply", "--all", tree)
    assert again.exit_code == 1 and "Nothing eaglepatch can write" in again.stdout
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == after
    data = json.loads(cli("check", "--all", "--format", "json", tree).stdout)
    assert _statuses(data) == {**EXPECTED, **{c: "compliant" for c, s in EXPECTED.items() if s == "fixable"}}


def test_diff_shows_what_apply_writes(tree):
    result = cli("diff", "--model", "asr", tree)
    assert result.exit_code == 1
    assert "+    SupportsEagle3,\n" in result.stdout and "a/vllm/model_executor/models/asr.py" in result.stdout


RUNTIME = """
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
from vllm.model_executor.models.interfaces import SupportsEagle3
from vllm.model_executor.models import asr, asr_realtime, deep_vl, plain_vl, omni, deep, llama
out = {}
for cls in (asr.AsrForConditionalGeneration, asr_realtime.AsrRealtimeGeneration, deep_vl.DeepVLForConditionalGeneration,
            plain_vl.PlainVLForConditionalGeneration, omni.OmniThinkerForConditionalGeneration):
    out[cls.__name__] = isinstance(object.__new__(cls), SupportsEagle3)
wrapper = asr.AsrForConditionalGeneration()  # the Protocol's default reaches the decoder
wrapper.set_aux_hidden_state_layers((1, 5))
out["asr_layers"] = list(wrapper.language_model.model.aux_hidden_state_layers)
out["asr_default"] = list(wrapper.get_eagle3_default_aux_hidden_state_layers())
vl = object.__new__(deep_vl.DeepVLForConditionalGeneration)  # its LM overrides the setter: forwarded
vl.language_model = deep.DeepForCausalLM()
vl.set_aux_hidden_state_layers((0, 2))
out["deep_layers"] = list(vl.language_model.model.aux_hidden_state_layers)
print(json.dumps(out))
"""


def _runtime(site: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", RUNTIME, str(site)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 or "AttributeError" in done.stderr, done.stderr
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr}


def test_the_patched_classes_pass_the_runtime_protocol_check(tree):
    before = subprocess.run([sys.executable, "-c", RUNTIME, str(tree)], capture_output=True, text=True, timeout=60)
    assert before.returncode != 0 and "set_aux_hidden_state_layers" in before.stderr  # unpatched: no hook at all
    assert cli("apply", "--all", tree).exit_code == 1  # OmniThinker needs code: apply says so
    assert _runtime(tree) == {
        "AsrForConditionalGeneration": True,
        "AsrRealtimeGeneration": True,
        "DeepVLForConditionalGeneration": True,
        "PlainVLForConditionalGeneration": True,
        "OmniThinkerForConditionalGeneration": False,  # needs_code: nothing written
        "asr_layers": [1, 5],
        "asr_default": [2, 4, 5],
        "deep_layers": [0, 2],
    }


@pytest.mark.parametrize(
    "signature, unbound",
    [
        ("layers: Sequence[int]", "Sequence"),  # an annotation interfaces.py imports and deep_vl.py does not
        ("layers: tuple[int, ...] = DEFAULT_LAYERS", "DEFAULT_LAYERS"),  # a default defined in interfaces.py only
    ],
)
def test_a_forwarding_method_whose_signature_reads_a_name_the_file_lacks_is_refused(tree, signature, unbound):
    interfaces = tree / "vllm" / "model_executor" / "models" / "interfaces.py"
    text = interfaces.read_text()
    text = text.replace("from typing import", "from typing import Sequence,", 1) + "\nDEFAULT_LAYERS = (1, 2)\n"
    text = text.replace("def set_aux_hidden_state_layers(self, layers: tuple[int, ...])", f"def set_aux_hidden_state_layers(self, {signature})")
    interfaces.write_text(text)
    deep_vl = tree / "vllm" / "model_executor" / "models" / "deep_vl.py"
    before = deep_vl.read_bytes()
    result = cli("apply", "--model", "deep_vl", tree)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("eaglepatch: error: model_executor/models/deep_vl.py: ")
    assert f"DeepVLForConditionalGeneration.set_aux_hidden_state_layers would read {unbound} " in line and "nothing written" in line
    assert deep_vl.read_bytes() == before
    # once the wrapper file binds the name, the same signature is written
    deep_vl.write_text(f"from .interfaces import Sequence, DEFAULT_LAYERS  # noqa\n{before.decode()}")
    assert cli("apply", "--model", "deep_vl", tree).exit_code == 0
    written = " ".join(deep_vl.read_text().split()).replace("( ", "(").replace(" )", ")")
    assert f"def set_aux_hidden_state_layers(self, {signature}) -> None:" in written


def test_explain_says_it_does_not_read_vllm_trees_yet(tree):
    result = cli("explain", "set_aux_hidden_state_layers", tree)
    assert result.exit_code == 2 and "vLLM" in result.stderr


# --------------------------------------------------------------------------- revert


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*.py")}


def test_revert_takes_out_the_bases_hooks_and_imports_apply_wrote_and_only_those(tree):
    pristine = _snapshot(tree)
    assert cli("apply", "--all", tree).exit_code == 1  # OmniThinker needs code: apply says so
    models = tree / "vllm" / "model_executor" / "models"
    assert "    # eaglepatch: added SupportsEagle3 to the bases\n    # (before: header on one line)\n" in (models / "deep_vl.py").read_text()
    ready = models / "ready_vl.py"  # declares the base by hand (no marker): revert leaves it
    assert "SupportsEagle3" in ready.read_text()
    result = cli("revert", tree)
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "removed from DeepVLForConditionalGeneration (model_executor/models/deep_vl.py): SupportsEagle3, set_aux_hidden_state_layers" in text
    assert _snapshot(tree) == pristine  # the original bytes, imports and layouts included
    again = cli("revert", tree)
    assert again.exit_code == 0 and "Nothing to revert" in again.stdout


def test_revert_model_reverts_that_module_only_and_keeps_what_was_edited(tree):
    assert cli("apply", "--all", tree).exit_code == 1  # OmniThinker needs code: apply says so
    models = tree / "vllm" / "model_executor" / "models"
    patched = _snapshot(tree)
    assert cli("revert", "--model", "asr", tree).exit_code == 0
    now = _snapshot(tree)
    assert [p.name for p in now if now[p] != patched[p]] == ["asr.py"]
    assert now[Path("vllm/model_executor/models/asr.py")] == (FIXTURE / "vllm/model_executor/models/asr.py").read_bytes()
    deep_vl = models / "deep_vl.py"  # the forwarding hook edited by hand: kept, and said so; the base goes
    deep_vl.write_text(deep_vl.read_text().replace("return inner.set_aux_hidden_state_layers(layers)", "inner.set_aux_hidden_state_layers(layers)"))
    result = cli("revert", "--model", "deep_vl", tree)
    assert result.exit_code == 0
    assert "kept model_executor/models/deep_vl.py:DeepVLForConditionalGeneration: set_aux_hidden_state_layers" in " ".join(result.stdout.split())
    text = deep_vl.read_text()
    assert "class DeepVLForConditionalGeneration(Module, SupportsMultiModal, SupportsPP):" in text
    assert "def set_aux_hidden_state_layers" in text
    assert cli("revert", "--model", "nope", tree).exit_code == 2


# -- nothing unread passes the gate ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "diff", "apply"])
def test_a_model_module_that_does_not_parse_stops_every_command(tree, command):
    """It once dropped the module's classes from `check --all` (6 classes became 5) and exited 1."""
    asr = tree / "vllm" / "model_executor" / "models" / "asr.py"
    asr.write_text(asr.read_text() + "\ndef broken(:\n    pass\n")
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    result = cli(command, "--all", tree)
    assert result.exit_code == 2
    line = len(asr.read_text().splitlines()) - 1
    assert f"model_executor/models/asr.py:{line}: is not valid Python" in result.stderr
    assert "--exclude model_executor/models/asr.py" in result.stderr
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before


def test_an_excluded_vllm_module_is_not_read_and_is_named(tree):
    asr = tree / "vllm" / "model_executor" / "models" / "asr.py"
    asr.write_text(asr.read_text() + "\ndef broken(:\n    pass\n")
    result = cli("check", "--all", "--format", "json", "--exclude", "model_executor/models/asr.py", tree)
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert "AsrForConditionalGeneration" not in {m["class"] for m in data["models"]}
    assert any("model_executor/models/asr.py" in w and "--exclude" in w for w in data["warnings"])


def test_a_vllm_consumer_that_does_not_parse_stops_the_gate(tree):
    from eaglepatch.engines.vllm.protocol import CONSUMERS

    rel = next(r for r in CONSUMERS if (tree / "vllm" / r).is_file())
    path = tree / "vllm" / rel
    path.write_text(path.read_text() + "\ndef broken(:\n    pass\n")
    result = cli("check", "--all", tree)
    assert result.exit_code == 2 and f"{rel}:" in result.stderr and f"--exclude {rel}" in result.stderr


# --------------------------------------------------------------------------- causal LMs, their own target

CAUSAL = '''"""Causal LMs that are their own target, one per shape the verdict reads."""

from .interfaces import EagleModelMixin, SupportsEagle3, SupportsMultiModal
from .llama import LlamaForCausalLM, LlamaModel, Module


class CollectingModel(Module, EagleModelMixin):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.layers = [object()] * 8

    def forward(self, hidden_states, residual=None):
        aux = []
        for index, _layer in enumerate(self.layers):
            aux = self._maybe_add_hidden_state(aux, index, hidden_states, residual)
        return hidden_states, aux


class SilentModel(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.layers = [object()] * 8

    def forward(self, hidden_states, residual=None):
        for _layer in self.layers:
            hidden_states = hidden_states + 1
        return hidden_states


class InlineModel(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.layers = [object()] * 8
        self.aux_hidden_state_layers = ()

    def forward(self, hidden_states, residual=None):
        return hidden_states, [hidden_states for i in range(len(self.layers)) if i in self.aux_hidden_state_layers]


class HandingModel(LlamaModel):
    def forward(self, hidden_states, residual=None):
        return super().forward(hidden_states, residual)


class Stack(Module, EagleModelMixin):
    def forward(self, hidden_states, residual=None):
        return hidden_states, self._maybe_add_hidden_state([], 0, hidden_states, residual)


class StackModel(Module, EagleModelMixin):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.layers = Stack()

    def forward(self, hidden_states, residual=None):
        return self.layers(hidden_states, residual)


class HelperModel(Module, EagleModelMixin):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.layers = [object()] * 8

    def forward(self, hidden_states, residual=None):
        return self._stock_forward(hidden_states, residual)

    def _stock_forward(self, hidden_states, residual):
        return hidden_states, self._maybe_add_hidden_state([], 0, hidden_states, residual)


class HelperForCausalLM(Module, SupportsEagle3):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = HelperModel(vllm_config=vllm_config, prefix=prefix)


class Composite(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.text_model = CollectingModel(vllm_config=vllm_config, prefix=prefix)


class MarkedForConditionalGeneration(Module, SupportsMultiModal):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        with self._mark_composite_model(vllm_config, language_targets=CollectingModel, tower_targets={}):
            self.model = Composite(vllm_config=vllm_config, prefix=prefix)


class MarkedSilentForConditionalGeneration(Module, SupportsMultiModal):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        with self._mark_language_model(vllm_config, targets=SilentModel):
            self.text = SilentModel(vllm_config=vllm_config, prefix=prefix)


class BaseMissingForCausalLM(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = CollectingModel(vllm_config=vllm_config, prefix=prefix)


class NothingForCausalLM(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = SilentModel(vllm_config=vllm_config, prefix=prefix)


class InlineForCausalLM(Module):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = InlineModel(vllm_config=vllm_config, prefix=prefix)


class OverForCausalLM(Module, SupportsEagle3):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = SilentModel(vllm_config=vllm_config, prefix=prefix)


class HandingForCausalLM(LlamaForCausalLM):
    def _init_model(self, vllm_config, prefix=""):
        return HandingModel(vllm_config=vllm_config, prefix=prefix)


class StackForCausalLM(Module, SupportsEagle3):
    def __init__(self, *, vllm_config=None, prefix=""):
        super().__init__()
        self.model = StackModel(vllm_config=vllm_config, prefix=prefix)
'''

# (class, status, what the reason must say) -- what SupportsEagle3's defaults and the runner make of each
CAUSAL_CASES = [
    ("BaseMissingForCausalLM", "fixable", "add SupportsEagle3 to its bases: CollectingModel.forward"),
    ("NothingForCausalLM", "needs_code", "no SupportsEagle3 in its MRO, and SilentModel.forward"),
    ("InlineForCausalLM", "needs_code", "is no EagleModelMixin and InlineForCausalLM does not override set_aux_hidden_state_layers"),
    ("OverForCausalLM", "needs_code", "over-declared: SupportsEagle3 is in its MRO, but SilentModel.forward"),
    ("HandingForCausalLM", "compliant", "SupportsEagle3 is in its MRO"),  # super().forward reaches Llama's, which collects
    ("StackForCausalLM", "compliant", "SupportsEagle3 is in its MRO"),  # its decoder calls a stack module that collects
    ("HelperForCausalLM", "compliant", "SupportsEagle3 is in its MRO"),  # its decoder's forward calls a method that collects
    # a language model marked while built, which has no .model: this (0.18-shaped) default asserts one
    ("MarkedForConditionalGeneration", "needs_code", "needs the language model's .model, and CollectingModel"),
    ("MarkedSilentForConditionalGeneration", "needs_code", "needs the language model's .model, and SilentModel"),
]


@pytest.fixture
def causal_tree(tree) -> Path:
    models = tree / "vllm" / "model_executor" / "models"
    (models / "causal.py").write_text(CAUSAL)
    registry = models / "registry.py"
    entries = "".join(f'    "{name}": ("causal", "{name}"),\n' for name, _, _ in CAUSAL_CASES)
    registry.write_text(registry.read_text().replace("_TEXT_GENERATION_MODELS = {\n", "_TEXT_GENERATION_MODELS = {\n" + entries, 1))
    return tree


@pytest.mark.parametrize("name, status, says", CAUSAL_CASES, ids=[c[0] for c in CAUSAL_CASES])
def test_a_causal_lm_is_judged_as_its_own_target(causal_tree, name, status, says):
    data = json.loads(cli("check", "--model", "causal", "--format", "json", causal_tree).stdout)
    (model,) = [m for m in data["models"] if m["class"] == name]
    assert (model["status"], model["inner"]) == (status, [])
    assert says in model["reason"], model["reason"]
    if name == "NothingForCausalLM":
        assert "collects no aux hidden states" in model["reason"]


RUN_CAUSAL = """
import sys
sys.path.insert(0, sys.argv[1])
from vllm.model_executor.models import causal
from vllm.model_executor.models.interfaces import supports_eagle3
model = causal.BaseMissingForCausalLM()
model.set_aux_hidden_state_layers((2, 4))
print(supports_eagle3(model), model.model.aux_hidden_state_layers, model.model.forward(1, 1)[1])
"""


def test_apply_makes_the_causal_lm_pass_the_runners_check_and_its_decoder_collect(causal_tree):
    """Before: the runner's check refuses it (no hook at all).  After `apply`: vLLM's own isinstance check
    passes, the Protocol's default setter reaches the decoder, which collects the chosen layers."""
    before = subprocess.run([sys.executable, "-c", RUN_CAUSAL, str(causal_tree)], capture_output=True, text=True, timeout=60)
    assert before.returncode != 0 and "set_aux_hidden_state_layers" in before.stderr
    assert cli("apply", "--model", "causal", causal_tree).exit_code == 1  # the others need code: apply says so
    after = subprocess.run([sys.executable, "-c", RUN_CAUSAL, str(causal_tree)], capture_output=True, text=True, timeout=60)
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["True", "(2,", "4)", "[2,", "2]"]  # layers 2 and 4, each hidden + residual
    assert cli("revert", "--model", "causal", causal_tree).exit_code == 0
    assert (causal_tree / "vllm/model_executor/models/causal.py").read_text() == CAUSAL


# --------------------------------------------------------------------------- the speculative config's gate

GATED = '''
class SpeculativeConfig:
    def _verify_args(self):
        eagle3_target_supported = ["llama", "qwen"]
        if self.method == "eagle3" and not any(
            m in self.target_model_config.hf_text_config.model_type for m in eagle3_target_supported
        ):
            raise ValueError(f"Eagle3 is only supported for {eagle3_target_supported} models.")
'''
ONE_WORD = '''
class SpeculativeConfig:
    def _verify_args(self):
        if self.method == "eagle3" and self.target_model_config and \\
            "llama" not in self.target_model_config.hf_text_config.model_type:
            raise ValueError("Eagle3 is only supported for Llama models.")
'''
# (the config module's text, the gate read: (name, words, line) or None)
GATE_CASES = [
    (GATED, ("eagle3_target_supported", ("llama", "qwen"), 4)),
    (GATED.replace("model_type", "architecture"), None),  # not tested against the model type
    (GATED.replace('            raise ValueError(f"Eagle3 is only supported for {eagle3_target_supported} models.")', "            pass"), None),  # no raise
    (GATED.replace('["llama", "qwen"]', '["llama", NAME]'), None),  # not a list of words
    ("", None),
    (ONE_WORD, ("'llama' not in model_type", ("llama",), 5)),  # vLLM 0.9's form
    (ONE_WORD.replace('"eagle3"', '"eagle"'), None),  # another method's test
]


@pytest.mark.parametrize("text, expected", GATE_CASES, ids=["gate", "other-field", "no-raise", "not-words", "none", "one-word", "other-method"])
def test_the_target_gate_is_read_from_the_speculative_config(tree, text, expected):
    from eaglepatch.engines.vllm.protocol import read_target_gate

    (tree / "vllm" / "config").mkdir(exist_ok=True)
    (tree / "vllm" / "config" / "speculative.py").write_text(text)
    gate = read_target_gate(VllmTree(SourceCache(tree / "vllm")))
    got = None if gate is None else (gate.name, gate.words, int(gate.at.rsplit(":", 1)[1]))
    assert got == expected
    if gate is not None:
        data = json.loads(cli("check", "--all", "--format", "json", tree).stdout)
        said = " or ".join(repr(w) for w in gate.words)
        assert any(w.startswith(f"{gate.at}: this release runs EAGLE-3 only for a target whose text model_type contains {said}") for w in data["warnings"])


UNWRAPPING = """        parent = self.get_language_model() if hasattr(self, "get_language_model") else self
        holder = getattr(parent, "model", parent)
        assert isinstance(holder, EagleModelMixin)
        holder._set_aux_hidden_state_layers(layers)
"""


def test_a_marked_language_model_is_reached_where_the_default_unwraps_only_when_it_can(causal_tree):
    """vLLM 0.33 on: the setter's default takes `.model` only when the language model has one, so the
    decoder a class marks as its language model (Idefics3's LlamaModel, built inside its composite
    model) is reached by the base alone, and is judged by its own forward."""
    interfaces = causal_tree / "vllm" / "model_executor" / "models" / "interfaces.py"
    text = interfaces.read_text()
    old = """        parent = self.get_language_model() if hasattr(self, "get_language_model") else self
        assert isinstance(parent.model, EagleModelMixin)
        parent.model._set_aux_hidden_state_layers(layers)
"""
    assert old in text
    interfaces.write_text(text.replace(old, UNWRAPPING))
    data = json.loads(cli("check", "--model", "causal", "--format", "json", causal_tree).stdout)
    by_class = {m["class"]: m for m in data["models"]}
    assert by_class["MarkedForConditionalGeneration"]["status"] == "fixable"
    assert "add SupportsEagle3 to its bases: CollectingModel.forward" in by_class["MarkedForConditionalGeneration"]["reason"]
    silent = by_class["MarkedSilentForConditionalGeneration"]
    assert silent["status"] == "needs_code" and "the forward of the language model it marks (SilentModel, model_executor/models/causal.py:" in silent["reason"]
