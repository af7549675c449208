"""The vLLM profile on real vLLM releases (tests/vllm_releases.py pins and caches them).

Ground truth from the survey of the releases (notes of issue 13), not from eaglepatch's own runs:
* 0.18.0 -> 0.33.0, upstream added SupportsEagle3 to Qwen3ASRForConditionalGeneration (its subclass
  Qwen3ASRRealtimeGeneration inherits it) and to Qwen3OmniMoeThinkerForConditionalGeneration, the
  latter together with a rewritten `Qwen3MoeLLMModel.forward` (in 0.18.0 it collects no aux hidden
  states): so on 0.18.0 the first two are fixable by the base and the third needs code.
* 0.33.0: the survey's 22 wrappers whose language model supports EAGLE-3 but which lack the base;
  Granite4Vision's decoder forward collects nothing (needs_code), MiniCPMO dispatches in `__new__`
  (dynamic); CohereCompass, Exaone4_5 and Qwen4Exp declare the base while their language model's decoder
  collects nothing (over-declared). DotsOCRForCausalLM is a gap the survey's script missed (it assigns its language model
  with an annotation, `self.language_model: Qwen2ForCausalLM = init_vllm_registered_model(...)`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_releases
from typer.testing import CliRunner

from eaglepatch.cli import app

pytestmark = pytest.mark.integration

RUNNER = CliRunner()
TESTS = Path(__file__).resolve().parent
MODELS = "vllm.model_executor.models"


def cli(*args) -> object:
    result = RUNNER.invoke(app, [*map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def statuses(site: Path, *args: str) -> tuple[dict, dict[str, str]]:
    result = cli("check", "--format", "json", *args, site)
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    return data, {m["class"]: m["status"] for m in data["models"]}


_PRISTINE: dict[tuple[str, tuple[str, ...]], tuple[dict, dict[str, str]]] = {}


def pristine_statuses(version: str, *args: str) -> tuple[dict, dict[str, str]]:
    """`statuses` of a pinned release as released, once a worker (several tests ask the same)."""
    key = (version, args)
    if key not in _PRISTINE:
        _PRISTINE[key] = statuses(vllm_releases.site_packages(version), *args)
    return _PRISTINE[key]


def by_class_of(data: dict) -> dict[str, dict]:
    return {m["class"]: m for m in data["models"]}


def runtime_check(site: Path, *specs: str) -> dict:
    """isinstance(instance, SupportsEagle3) with the release's own interfaces.py (tests/vllm_protocol_check.py)."""
    done = subprocess.run(
        [sys.executable, str(TESTS / "vllm_protocol_check.py"), str(site), *specs],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


ASR = f"{MODELS}.qwen3_asr:Qwen3ASRForConditionalGeneration"
REALTIME = f"{MODELS}.qwen3_asr_realtime:Qwen3ASRRealtimeGeneration"
OMNI = f"{MODELS}.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration"


def test_0_18_0_reports_the_later_upstream_fixes_and_apply_passes_the_runtime_check(tmp_path):
    pristine = vllm_releases.site_packages("0.18.0")
    picked = ("--model", "qwen3_asr", "--model", "qwen3_asr_realtime", "--model", "qwen3_omni_moe_thinker")
    data, found = statuses(pristine, *picked)
    assert found == {
        "Qwen3ASRForConditionalGeneration": "fixable",
        "Qwen3ASRRealtimeGeneration": "fixable",
        "Qwen3OmniMoeThinkerForConditionalGeneration": "needs_code",
    }
    by_class = {m["class"]: m for m in data["models"]}
    assert [m["fix"] for m in by_class["Qwen3ASRForConditionalGeneration"]["missing"]] == [{"kind": "base", "base": "SupportsEagle3"}]
    assert "Qwen3MoeLLMModel.forward (model_executor/models/qwen3_omni_moe_thinker.py:1069)" in by_class[
        "Qwen3OmniMoeThinkerForConditionalGeneration"
    ]["reason"]
    assert data["protocol"][2]["name"] == "get_eagle3_default_aux_hidden_state_layers"  # the 0.18 name

    site = tmp_path / "site-packages"
    shutil.copytree(pristine, site)
    applied = cli("apply", *picked, site)
    assert applied.exit_code == 1  # Qwen3OmniMoeThinker needs code: apply writes the rest and names it
    assert "Qwen3OmniMoeThinkerForConditionalGeneration" in applied.stdout.split("still missing", 1)[1]
    asr = (site / "vllm/model_executor/models/qwen3_asr.py").read_text()
    assert "    SupportsTranscription,\n    SupportsEagle3,\n):" in asr
    assert "    MultiModalEmbeddings,\n    SupportsEagle3,\n    SupportsMRoPE," in asr
    realtime = site / "vllm/model_executor/models/qwen3_asr_realtime.py"
    assert realtime.read_bytes() == (pristine / "vllm/model_executor/models/qwen3_asr_realtime.py").read_bytes()  # inherits
    again = cli("apply", *picked, site)
    assert again.exit_code == 1 and "Nothing eaglepatch can write; 1 required member(s) missing" in " ".join(again.stdout.split())
    assert statuses(site, *picked)[1]["Qwen3ASRRealtimeGeneration"] == "compliant"

    before = runtime_check(pristine, ASR, REALTIME, OMNI)
    after = runtime_check(site, ASR, REALTIME, OMNI)
    assert {k: v["isinstance"] for k, v in before.items() if k != "interfaces"} == {ASR: False, REALTIME: False, OMNI: False}
    assert {k: v["isinstance"] for k, v in after.items() if k != "interfaces"} == {ASR: True, REALTIME: True, OMNI: False}
    assert after["interfaces"].startswith(str(site))

    # revert gives the original bytes back (the import merged into a parenthesized one, the base one a line)
    asr_rel = "vllm/model_executor/models/qwen3_asr.py"
    assert (site / asr_rel).read_bytes() != (pristine / asr_rel).read_bytes()
    reverted = cli("revert", "--model", "qwen3_asr", site)
    assert reverted.exit_code == 0 and "removed from Qwen3ASRForConditionalGeneration" in reverted.stdout
    assert (site / asr_rel).read_bytes() == (pristine / asr_rel).read_bytes()
    assert cli("revert", "--model", "qwen3_asr", site).exit_code == 0
    assert (site / asr_rel).read_bytes() == (pristine / asr_rel).read_bytes()


SURVEY_GAPS_0_33_0 = {
    "AudioFlamingo3ForConditionalGeneration", "BagelForConditionalGeneration", "Dots3NoteForCausalLM",
    "FunAudioChatForConditionalGeneration", "GlmAsrForConditionalGeneration", "IsaacForConditionalGeneration",
    "KananaVForConditionalGeneration", "KeyeForConditionalGeneration", "KeyeVL1_5ForConditionalGeneration",
    "KimiVLForConditionalGeneration", "LlavaOnevision2ForConditionalGeneration", "MiDashengLMModel",
    "MossAudioModel", "MossTranscribeDiarizeForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "Phi3VForCausalLM", "Phi4ForCausalLMV", "Qwen2AudioForConditionalGeneration", "Qwen2VLForConditionalGeneration",
    "Qwen2_5OmniThinkerForConditionalGeneration",
}  # the survey's 22, less Granite4Vision (needs_code) and MiniCPMO (dynamic), checked below


def test_0_33_0_lists_every_registered_target_with_a_status():
    data, found = pristine_statuses("0.33.0", "--all")
    listed = {(m["file"], m["class"]) for m in data["models"]}  # a class per platform folder: same name, other file
    assert sum(data["summary"]["by_status"].values()) == len(data["models"]) == len(listed)
    by_reason = {m["class"]: m["reason"] for m in data["models"]}
    fixable = {c for c, s in found.items() if s == "fixable" and by_class_of(data)[c]["inner"]}  # the wrappers
    assert fixable == SURVEY_GAPS_0_33_0 | {"DotsOCRForCausalLM"}
    assert found["Granite4VisionForConditionalGeneration"] == "needs_code"
    assert found["MiniCPMO"] == "dynamic"
    for name in ("Qwen3ASRForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration", "Llama4ForConditionalGeneration"):
        assert found[name] == "compliant"  # fixed upstream
    # over-declared (survey §4): the base in the MRO, the language model's decoder collects nothing
    over = {c for c, s in found.items() if s == "needs_code" and by_reason[c].startswith("over-declared")}
    # ... and one causal LM: MiMoModel.forward replaces Qwen2Model's loop with one that collects nothing
    assert over == {"CohereCompassForConditionalGeneration", "Exaone4_5_ForConditionalGeneration", "Qwen4ExpForConditionalGeneration", "MiMoForCausalLM"}
    assert "MiMoModel.forward (model_executor/models/mimo.py:" in by_reason["MiMoForCausalLM"]
    assert "CohereCompassTextModel.forward (model_executor/models/cohere_compass.py:" in by_reason["CohereCompassForConditionalGeneration"]
    for dynamic in ("LlavaNextForConditionalGeneration", "InternVLChatModel", "Blip2ForConditionalGeneration"):
        assert found[dynamic] == "dynamic"
    by_class = {m["class"]: m for m in data["models"]}
    forwards = {c: [m["name"] for m in by_class[c]["missing"] if m["fix"] and m["fix"]["kind"] == "delegate"] for c in fixable}
    # the LM overrides the setter and its decoder is no EagleModelMixin: the default would assert
    assert {c for c, names in forwards.items() if names} == {"KimiVLForConditionalGeneration", "Dots3NoteForCausalLM"}
    assert by_class["Dots3NoteForCausalLM"]["file"] == "models/dots3_note/nvidia/multimodal.py"


def test_0_10_1_stub_protocol_needs_the_base_and_both_hooks_for_llama4():
    """0.10.1 -> 0.18.0: upstream gave Llama4ForConditionalGeneration the base and both hooks (the
    Protocol's were stubs then, the getter still get_eagle3_aux_hidden_state_layers)."""
    data, found = statuses(vllm_releases.site_packages("0.10.1"), "--model", "mllama4")
    assert found == {"Llama4ForConditionalGeneration": "fixable"}
    (model,) = data["models"]
    assert [(m["name"], m["fix"]) for m in model["missing"]] == [
        ("SupportsEagle3", {"kind": "base", "base": "SupportsEagle3"}),
        ("set_aux_hidden_state_layers", {"kind": "delegate", "to": "language_model"}),
        ("get_eagle3_aux_hidden_state_layers", {"kind": "delegate", "to": "language_model"}),
    ]
    assert model["inner"][0]["class"] == "Llama4ForCausalLM"  # initialize_model(..., model_class=Llama4ForCausalLM)


LLAMA4 = f"{MODELS}.mllama4:Llama4ForConditionalGeneration>language_model={MODELS}.llama4:Llama4ForCausalLM"


def test_0_10_1_apply_passes_the_runtime_check_and_the_hooks_reach_the_language_model(tmp_path):
    """With 0.10.1's own interfaces.py (stub hooks): before apply the wrapper is no SupportsEagle3 and
    has neither hook; after, it is, and the setter leaves the given layers on the language model's
    decoder (Llama4ForCausalLM's own `set_aux_hidden_state_layers`), the getter returns its answer."""
    pristine = vllm_releases.site_packages("0.10.1")
    site = tmp_path / "site-packages"
    shutil.copytree(pristine, site)
    assert cli("apply", "--model", "mllama4", site).exit_code == 0

    before = runtime_check(pristine, LLAMA4)[LLAMA4]
    after = runtime_check(site, LLAMA4)
    assert before["isinstance"] is False and before["declares"] is False
    assert before["forwarded"]["set"] == "AttributeError: set_aux_hidden_state_layers"
    assert after["interfaces"].startswith(str(site))
    assert after[LLAMA4]["isinstance"] is True
    assert after[LLAMA4]["forwarded"] == {"set": True, "get": [2, 24, 45]}  # Llama's (2, n // 2, n - 3), n = 48

    # the base alone passes isinstance but its stub setter reaches nothing: why the hooks are written
    patched = site / "vllm/model_executor/models/mllama4.py"
    text = patched.read_text()
    patched.write_text(text[: text.index("\n    # eaglepatch: forwards")] + "\n")
    base_only = runtime_check(site, LLAMA4)[LLAMA4]
    assert base_only["isinstance"] is True and base_only["forwarded"]["set"] is False
    patched.write_text(text)
    assert cli("revert", "--model", "mllama4", site).exit_code == 0  # base, both hooks, the import: the original bytes
    assert patched.read_bytes() == (pristine / "vllm/model_executor/models/mllama4.py").read_bytes()


PHI3V = f"{MODELS}.phi3v:Phi3VForCausalLM"
MLLAMA4 = f"{MODELS}.mllama4:Llama4ForConditionalGeneration"


def test_0_9_2_duck_typed_release_is_read_by_the_calls_and_apply_makes_the_wrappers_answer_them(tmp_path):
    """0.9.2 has no SupportsEagle3: its runner calls set_aux_hidden_state_layers and
    get_eagle3_aux_hidden_state_layers on the target by name.  Llama and the classes inheriting its hooks
    are compliant; the two wrappers whose language model has them (upstream gave Llama 4's its hooks in
    0.11.2) get forwarders, and on stubs the forwarded setter reaches the language model's decoder."""
    pristine = vllm_releases.site_packages("0.9.2")
    runner = (pristine / "vllm/v1/worker/gpu_model_runner.py").read_text()
    assert "self.model.set_aux_hidden_state_layers(" in runner and "self.model.get_eagle3_aux_hidden_state_layers()" in runner
    data, found = pristine_statuses("0.9.2", "--all")
    assert any("duck typing" in w for w in data["warnings"]) and "SupportsEagle3" not in {m["name"] for m in data["protocol"]}
    assert found["LlamaForCausalLM"] == "compliant"
    assert {c for c, s in found.items() if s == "fixable"} == {"Phi3VForCausalLM", "Llama4ForConditionalGeneration"}
    before = runtime_check(pristine, PHI3V, MLLAMA4)
    assert before[PHI3V] == before[MLLAMA4] == {"hooks": False}

    site = tmp_path / "site-packages"
    shutil.copytree(pristine, site)
    assert cli("apply", "--model", "phi3v", "--model", "mllama4", site).exit_code == 0
    after = runtime_check(site, f"{PHI3V}>language_model={MODELS}.llama:LlamaForCausalLM", f"{MLLAMA4}>language_model={MODELS}.llama4:Llama4ForCausalLM")
    for spec in after:
        if spec != "interfaces":
            assert after[spec] == {"hooks": True, "forwarded": {"set": True, "get": [2, 24, 45]}}, (spec, after[spec])
    assert cli("revert", "--all", site).exit_code == 0
    assert _files(site) == _files(pristine)


def linked_copy(pristine: Path, site: Path) -> None:
    """`pristine` copied by hard links: apply and revert replace a file they write (a new inode), so
    the release cache is never touched and a file still linked is one nothing wrote."""
    shutil.copytree(pristine, site, copy_function=os.link)


def _differing(site: Path, pristine: Path) -> list[str]:
    """The .py files of `site` whose bytes differ from `pristine`'s (one still linked is the same file),
    and those only one side has."""
    ours = {p.relative_to(site).as_posix(): p for p in site.rglob("*.py")}
    theirs = {p.relative_to(pristine).as_posix(): p for p in pristine.rglob("*.py")}
    differ = sorted(set(ours) ^ set(theirs))
    for rel in set(ours) & set(theirs):
        a, b = ours[rel], theirs[rel]
        if not os.path.samefile(a, b) and a.read_bytes() != b.read_bytes():
            differ.append(rel)
    return sorted(differ)


def _files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*.py"))}


# the stub Protocol (0.10.1) and the newest (defaults, per-platform packages, delegations written);
# 0.18.0's and 0.33.0's shapes are 0.34.0's, and their own tests apply and revert a few modules
@pytest.mark.parametrize("version", ["0.10.1", "0.34.0"])
def test_apply_all_leaves_only_the_gaps_it_named_and_revert_all_restores_every_file(version, tmp_path):
    """What `check --all` says apply writes, `apply --all` writes (each class then compliant, every other
    verdict as before), and `revert --all` takes it all out."""
    pristine = vllm_releases.site_packages(version)
    site = tmp_path / "site-packages"
    linked_copy(pristine, site)
    before, statuses_before = pristine_statuses(version, "--all")
    fixable = {m["class"] for m in before["models"] if m["status"] == "fixable"}
    assert fixable and before["summary"]["fixes"] > 0

    applied = cli("apply", "--all", site)
    assert applied.exit_code in (0, 1), applied.stderr
    after, statuses_after = statuses(site, "--all")
    assert after["summary"]["fixes"] == 0
    assert {c for c in fixable if statuses_after[c] != "compliant"} == set()
    assert {c: s for c, s in statuses_after.items() if c not in fixable} == {c: s for c, s in statuses_before.items() if c not in fixable}

    # the causal LMs that are their own target and only lacked the base: vLLM's own check now passes
    causal = [f"{_module(m['file'])}:{m['class']}" for m in before["models"] if m["status"] == "fixable" and not m["inner"]]
    if causal:
        if version == vllm_releases.latest_release():  # before: the release's own check refuses them
            assert {k: v["isinstance"] for k, v in runtime_check(pristine, *causal).items() if k != "interfaces"} == dict.fromkeys(causal, False)
        assert {k: v["isinstance"] for k, v in runtime_check(site, *causal).items() if k != "interfaces"} == dict.fromkeys(causal, True)

    reverted = cli("revert", "--all", site)
    assert reverted.exit_code == 0, reverted.stderr
    assert _differing(site, pristine) == []


def _module(rel: str) -> str:
    return "vllm." + rel.removesuffix(".py").replace("/", ".")


# Causal LMs upstream gave SupportsEagle3 between 0.18.0 and 0.33.0, each with a decoder that collects
# (read off both releases: the base absent from the class's MRO in 0.18.0, present in 0.33.0)
UPSTREAM_CAUSAL_0_33_0 = {
    "GraniteForCausalLM", "GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM", "MiMoV2FlashForCausalLM",
    "MiniMaxM2ForCausalLM", "NemotronHForCausalLM", "Plamo3ForCausalLM", "Qwen3NextForCausalLM", "SarvamMLAForCausalLM",
}


def test_0_18_0_names_every_causal_lm_upstream_later_declared():
    """Each is listed on the release before, needs_code, its reason naming the missing base and what
    else the class lacks (a decoder that collects, or one the Protocol's default reaches); on 0.33.0 each
    is compliant."""
    old, found = pristine_statuses("0.18.0", "--all")
    reasons = {m["class"]: m["reason"] for m in old["models"]}
    assert {c: found.get(c) for c in UPSTREAM_CAUSAL_0_33_0} == dict.fromkeys(UPSTREAM_CAUSAL_0_33_0, "needs_code")
    assert all(reasons[c].startswith("no SupportsEagle3 in its MRO, and ") for c in UPSTREAM_CAUSAL_0_33_0)
    _, now = pristine_statuses("0.33.0", "--all")
    assert {c: now[c] for c in UPSTREAM_CAUSAL_0_33_0} == dict.fromkeys(UPSTREAM_CAUSAL_0_33_0, "compliant")


@pytest.mark.parametrize("version", ["0.10.1", "0.18.0", "0.33.0", "0.34.0"])
def test_the_speculative_configs_model_type_whitelist_is_named_where_the_release_has_one(version):
    """0.10.x's config package holds `eagle3_target_supported = [...]`, tested against the target's text
    model_type before raising; later releases dropped it."""
    site = vllm_releases.site_packages(version)
    config = site / "vllm" / "config" / "__init__.py"
    lines = config.read_text(encoding="utf-8").splitlines() if config.is_file() else []
    at = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("eagle3_target_supported = [")), None)
    data, _ = statuses(site, "--model", "llama")
    gated = [w for w in data["warnings"] if "runs EAGLE-3 only for a target whose text model_type" in w]
    if at is None:
        assert gated == []
    else:
        assert gated == [gated[0]] and gated[0].startswith(f"config/__init__.py:{at}: ") and "'llama' or 'qwen'" in gated[0]


def test_0_34_0_reads_the_runners_check_from_its_new_home_and_fixes_every_wrapper_it_names():
    """0.34.0 deleted gpu_model_runner.py: the protocol is confirmed in eagle3_utils.py, where the
    runner raises; the wrappers whose language model supports EAGLE-3 but which lack the base are
    fixable, and `apply` makes vLLM's own isinstance check pass for each."""
    site = vllm_releases.site_packages("0.34.0")
    assert not (site / "vllm/v1/worker/gpu_model_runner.py").exists()
    runner = (site / "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py").read_text(encoding="utf-8").splitlines()
    check_line = next(i + 1 for i, line in enumerate(runner) if "supports_eagle3(model)" in line)
    data, found = pristine_statuses("0.34.0", "--all")
    base = next(p for p in data["protocol"] if p["name"] == "SupportsEagle3")
    assert base["called_at"] == [f"v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:{check_line}"]
    assert data["consumers"] == ["v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"]
    by_class = by_class_of(data)
    wrappers = sorted(c for c, s in found.items() if s == "fixable" and by_class[c]["inner"])
    assert len(wrappers) >= 19


def _registry_classes(version: str) -> set[str]:
    """The classes of the release's text-generation and multimodal registries, read here from the dict
    literals of its registry.py (the entries' second element), not by eaglepatch."""
    import ast

    text = (vllm_releases.site_packages(version) / "vllm" / "model_executor" / "models" / "registry.py").read_text()
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id in ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS") and isinstance(node.value, ast.Dict):
            found |= {v.elts[1].value for v in node.value.values if isinstance(v, ast.Tuple) and len(v.elts) >= 2 and isinstance(v.elts[1], ast.Constant)}
    return found


@pytest.mark.parametrize("version", vllm_releases.pinned_releases())
def test_every_class_of_the_text_generation_and_multimodal_registries_is_listed(version):
    data, found = pristine_statuses(version, "--all")
    registered = _registry_classes(version)
    assert len(registered) > 100 and registered - set(found) == set()


def test_0_10_1_names_the_whitelist_and_the_causal_lms_upstream_fixed_by_0_18_0():
    """0.10.1 is the whitelist era (`["llama", "qwen"]`) and the first with SupportsEagle3, given to Llama
    and Qwen3 alone; Qwen2 and Qwen3-MoE pass the whitelist but not the runner's check until upstream
    gave them the base with decoder work (compliant on 0.18.0)."""
    data, found = pristine_statuses("0.10.1", "--all")
    assert any("eagle3_target_supported" in w and "'llama' or 'qwen'" in w for w in data["warnings"])
    assert found["LlamaForCausalLM"] == found["Qwen3ForCausalLM"] == "compliant"
    by_class = {m["class"]: m for m in data["models"]}
    for name in ("Qwen2ForCausalLM", "Qwen3MoeForCausalLM"):
        assert found[name] == "needs_code" and by_class[name]["reason"].startswith("no SupportsEagle3 in its MRO, and ")
    later = pristine_statuses("0.18.0", "--all")[1]
    assert later["Qwen2ForCausalLM"] == later["Qwen3MoeForCausalLM"] == "compliant"


# the releases test_apply_all_leaves_only_the_gaps_it_named_and_revert_all_restores_every_file does not run
@pytest.mark.parametrize("version", [v for v in vllm_releases.pinned_releases() if v not in ("0.10.1", "0.34.0")])
def test_apply_all_keeps_ruffs_width_and_revert_all_gives_every_byte_back(version, tmp_path):
    """Every line `apply --all` adds fits vLLM's ruff line length (88); `revert --all` restores each file."""
    pristine = vllm_releases.site_packages(version)
    site = tmp_path / "site-packages"
    linked_copy(pristine, site)
    assert cli("apply", "--all", site).exit_code in (0, 1)
    changed = _differing(site, pristine)
    assert changed
    for rel in changed:
        old = set((pristine / rel).read_text().splitlines())
        long = [line for line in (site / rel).read_text().splitlines() if line not in old and len(line) > 88]
        assert not long, (rel, long)
    assert cli("revert", "--all", site).exit_code == 0
    assert _differing(site, pristine) == []
