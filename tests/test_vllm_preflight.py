"""`eaglepatch preflight` on vLLM trees (issue 37, item 4), on fixtures/vllm: a hand-written tree shaped like
vLLM 0.18 (its speculative config's fields, a draft's positions never raised, a runner that reads the
draft's aux-layer ids), with the variants of other releases written into a copy where a test needs them.

The launch reading is tested as a (words, expected) table; each rule with the checkpoint that trips it
and the one beside it that does not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import checkpoint_copy, invoke

from eaglepatch.errors import EaglepatchError
from eaglepatch.read.source_cache import SourceCache
from eaglepatch.read.vllm_launch import VllmOptions, read_vllm_launch, read_vllm_options

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "vllm"
TARGET = REPO / "fixtures" / "checkpoints" / "llama-3.1-8b"
DRAFT = REPO / "fixtures" / "checkpoints" / "llama-3.1-8b-eagle3"
FLAGS = VllmOptions(frozenset({"--trust-remote-code", "--enforce-eager"}))
SPEC = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "site"
    shutil.copytree(FIXTURE, root)
    return root


def preflight(site: Path, target: Path, draft: Path | None, *extra: str, spec: dict | None = None) -> tuple[int, dict]:
    config = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3, **(spec or {})}
    result = invoke("preflight", "--format", "json", site, "--", "vllm", "serve", target, "--speculative-config", json.dumps(config), *extra)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def checks(data: dict, severity: str | None = None) -> list[str]:
    return [f["check"] for f in data["findings"] if severity is None or f["severity"] == severity]


# --------------------------------------------------------------------------- reading the launch

# (the words after `--`, what is read: {dest: value}, the speculative config, errors)
LAUNCHES = [
    (["vllm", "serve", "/m", "--speculative-config", SPEC], {"model": "/m"}, json.loads(SPEC), ()),
    (["vllm", "serve", "/m", f"--speculative_config={SPEC}", "--max_model_len", "4096"], {"model": "/m", "max_model_len": "4096"}, json.loads(SPEC), ()),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "-tp", "8"], {"model": "/m", "tensor_parallel_size": "8"}, None, ()),
    (["vllm", "serve", "/m", "--model", "/other"], {"model": "/m"}, None, ()),  # the positional model wins
    (["VLLM_USE_V1=1", "/opt/venv/bin/vllm", "serve", "/m", "--speculative-config.method", "eagle3", "--speculative-config.num_speculative_tokens", "3"],
     {"model": "/m"}, {"method": "eagle3", "num_speculative_tokens": 3}, ()),
    (["vllm", "serve", "/m", "--trust-remote-code", "--max-model-len", "2048"], {"model": "/m", "trust_remote_code": True, "max_model_len": "2048"}, None, ()),
    (["vllm", "serve", "/m", "--unknown-option", "x", "--max-model-len", "2048"], {"model": "/m", "max_model_len": "2048"}, None, ()),
    (["vllm", "serve", "/m", "--speculative-config", "{method: eagle3}"], {"model": "/m"}, None, ("invalid JSON",)),
    (["vllm", "serve", "/m", "--speculative-config", "[1, 2]"], {"model": "/m"}, None, ("a JSON object is wanted",)),
]


@pytest.mark.parametrize("words, values, speculative, errors", LAUNCHES,
                         ids=["serve", "underscores", "api-server", "positional-wins", "dotted", "flag", "unknown", "bad-json", "not-object"])
def test_a_launch_is_read_as_the_release_parses_it(words, values, speculative, errors):
    line = read_vllm_launch(words, FLAGS, {})
    assert {k: v for k, v in line.values.items() if k != "speculative_config"} == values
    assert line.speculative == speculative
    assert len(line.errors) == len(errors) and all(e in got for e, got in zip(errors, line.errors))


def test_a_line_that_starts_no_vllm_server_is_bad_input():
    with pytest.raises(EaglepatchError, match="starts no vLLM server"):
        read_vllm_launch(["python", "-m", "sglang.launch_server", "--model-path", "/m"], FLAGS, {})


def test_the_options_and_those_without_a_value_are_read_from_the_release():
    options = read_vllm_options(SourceCache(FIXTURE / "vllm"))
    assert {"--trust-remote-code", "--enforce-eager"} <= options.flags
    assert "--max-model-len" not in options.flags and options.at == "engine/arg_utils.py"
    assert {"--model", "--max-model-len", "-tp", "--speculative-config"} <= options.known


# (an option word, whether the fixture's parser has no such option)
UNKNOWN = [
    ("--max-model-len", False),
    ("--max-model", False),  # argparse takes a prefix
    ("--no-enforce-eager", False),  # a boolean's negation
    ("--speculative-config.method", False),  # a dotted key of a JSON option
    ("--speculative-model", True),
    ("--use-v2-block-manager", True),
    ("-x", False),  # a short option is not judged
]


@pytest.mark.parametrize("word, unknown", UNKNOWN)
def test_an_option_is_unknown_only_when_no_declared_option_could_be_it(word, unknown):
    assert read_vllm_options(SourceCache(FIXTURE / "vllm")).unknown(word) is unknown


def test_an_option_the_release_lacks_is_a_warning_naming_it(tmp_path):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(FIXTURE, TARGET, draft, "--speculative_model", "/d", "--max-model-len", "4096")
    assert code == 0 and checks(data, "warn") == ["launch-arguments"] and "--speculative-model" in data["findings"][0]["message"]


# --------------------------------------------------------------------------- the rules


def test_the_fixture_launch_predicts_the_draft_context_and_the_missing_layer_ids():
    code, data = preflight(FIXTURE, TARGET, DRAFT, "--max-model-len", "8192")
    assert code == 1 and checks(data, "fail") == ["draft-context"] and checks(data, "warn") == ["aux-layer-ids"]
    context = next(f for f in data["findings"] if f["check"] == "draft-context")
    assert "(2048)" in context["message"] and "(8192, --max-model-len)" in context["message"] and "--max-model-len 2048" in context["fix"]
    layers = next(f for f in data["findings"] if f["check"] == "aux-layer-ids")
    assert "(2, 16, 29)" in layers["message"]  # the fixture's default, (2, n // 2, n - 3), for the target's 32 layers
    assert layers["where"] == "v1/worker/gpu_model_runner.py:19"
    assert data["target"] == "model_executor/models/llama.py:LlamaForCausalLM"


def test_a_draft_with_its_layer_ids_and_enough_positions_passes(tmp_path):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(FIXTURE, TARGET, draft)
    assert code == 0 and checks(data) == []


def test_the_target_max_len_is_the_smallest_config_key_the_release_reads(tmp_path):
    """The fixture's model config reads max_position_embeddings and seq_length (not model_max_length):
    the smaller of the two sets the max model len the draft is held against."""
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    short = checkpoint_copy(tmp_path, TARGET, "short", seq_length=2048)
    assert preflight(FIXTURE, short, draft)[0] == 0
    unread = checkpoint_copy(tmp_path, TARGET, "unread", model_max_length=2048)
    code, data = preflight(FIXTURE, unread, draft)
    assert code == 1 and "(131072, the target's config.json)" in data["findings"][0]["message"]


RAISE = '''
    @staticmethod
    def _maybe_override_draft_max_position_embeddings(draft_hf_config, target_max_model_len):
        if not _rope_only_sizes_cache(draft_hf_config):
            return
        draft_hf_config.max_position_embeddings = target_max_model_len
'''
ROPE = '''
_CACHE_ONLY_ROPE_TYPES = frozenset({"default", "linear", "llama3"})


def _rope_only_sizes_cache(hf_config):
    return True

'''


def test_a_release_that_raises_the_drafts_positions_says_so_and_holds_other_ropes_against_it(tree, tmp_path):
    speculative = tree / "vllm" / "config" / "speculative.py"
    text = speculative.read_text().replace("\n\n@dataclass", ROPE + "\n@dataclass") + RAISE
    speculative.write_text(text)
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(tree, TARGET, draft, "--max-model-len", "8192")
    assert code == 0 and checks(data, "info") == ["draft-context"]
    assert data["findings"][0]["where"].startswith("config/speculative.py:")
    yarn = checkpoint_copy(tmp_path, DRAFT, "yarn", eagle_aux_hidden_state_layer_ids=[1, 15, 28], rope_scaling={"rope_type": "yarn", "factor": 4.0})
    code, data = preflight(tree, TARGET, yarn, "--max-model-len", "8192")
    assert code == 0 and checks(data, "warn") == ["draft-context"] and "yarn" in data["findings"][0]["message"]


def test_a_release_that_never_reads_the_drafts_ids_says_which_layers_it_captures(tree, tmp_path):
    runner = tree / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
    runner.write_text(runner.read_text().replace('getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)', "None"))
    trained = checkpoint_copy(tmp_path, DRAFT, "trained", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(tree, TARGET, trained)
    assert code == 0 and checks(data, "warn") == ["aux-layer-ids"] and "[2, 16, 29]" in data["findings"][0]["message"]
    default = checkpoint_copy(tmp_path, DRAFT, "default", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[2, 16, 29])
    assert checks(preflight(tree, TARGET, default)[1]) == []
    bare = checkpoint_copy(tmp_path, DRAFT, "bare", max_position_embeddings=131072)
    assert checks(preflight(tree, TARGET, bare)[1], "info") == ["aux-layer-ids"]


def test_ids_beyond_the_targets_layers_fail(tmp_path):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[2, 16, 32])
    code, data = preflight(FIXTURE, TARGET, draft)
    assert code == 1 and checks(data, "fail") == ["aux-layer-ids"] and "[32]" in data["findings"][0]["message"]


def test_a_key_the_speculative_config_lacks_is_refused_with_the_field_it_meant(tmp_path):
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(FIXTURE, TARGET, draft, spec={"num_speculative_token": 3})
    assert code == 1 and checks(data, "fail") == ["speculative-config"]
    assert data["findings"][0]["fix"] == "use 'num_speculative_tokens'" and data["findings"][0]["where"] == "config/speculative.py:9"
    code, data = preflight(FIXTURE, TARGET, draft, spec={"draft-tensor-parallel-size": 1})  # dashes are read as underscores
    assert code == 0


GATE = '''

def verify_eagle3_target(self):
    eagle3_target_supported = ["llama", "qwen"]
    if self.method == "eagle3" and not any(
        m in self.target_model_config.hf_text_config.model_type for m in eagle3_target_supported
    ):
        raise ValueError(f"Eagle3 is only supported for {eagle3_target_supported} models.")
'''


def test_the_whitelist_refuses_a_target_whose_text_model_type_has_none_of_its_words(tree, tmp_path):
    speculative = tree / "vllm" / "config" / "speculative.py"
    text = speculative.read_text() + GATE
    speculative.write_text(text)
    listed = next(i for i, line in enumerate(text.splitlines(), 1) if "eagle3_target_supported = [" in line)
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    assert preflight(tree, TARGET, draft)[0] == 0  # llama
    qwen_vl = checkpoint_copy(tmp_path, TARGET, "qwen-vl", model_type="qwen2_5_vl", text_config={"model_type": "qwen2_5_vl_text", "num_hidden_layers": 32})
    assert "eagle3-target-gate" not in checks(preflight(tree, qwen_vl, draft)[1])
    glm = checkpoint_copy(tmp_path, TARGET, "glm", model_type="glm4_moe")
    code, data = preflight(tree, glm, draft)
    gate = next(f for f in data["findings"] if f["check"] == "eagle3-target-gate")
    assert code == 1 and gate["severity"] == "fail" and "'glm4_moe'" in gate["message"] and gate["where"] == f"config/speculative.py:{listed}"
    other = invoke("preflight", "--format", "json", tree, "--", "vllm", "serve", glm, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3}))
    assert "eagle3-target-gate" not in checks(json.loads(other.stdout))  # the list holds EAGLE-3 only


def test_a_target_class_without_the_interface_fails_until_apply_writes_it(tree, tmp_path):
    """The target-hooks finding is `check --model`'s verdict: after `apply --model asr` the same launch passes it."""
    asr = checkpoint_copy(tmp_path, TARGET, "asr", architectures=["AsrForConditionalGeneration"])
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", max_position_embeddings=131072, eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    code, data = preflight(tree, asr, draft)
    hooks = [f for f in data["findings"] if f["check"] == "target-hooks"]
    assert code == 1 and hooks and all(f["severity"] == "fail" for f in hooks)
    assert hooks[0]["fix"].startswith("eaglepatch apply --model vllm.model_executor.models.asr:AsrForConditionalGeneration")
    assert invoke("apply", "--model", "asr", tree).exit_code == 0
    assert preflight(tree, asr, draft) == (0, {**data, "findings": [], "summary": {"fail": 0, "warn": 0, "info": 0}})


def test_a_launch_without_speculation_or_without_a_method_says_what_it_does_not_check(tmp_path):
    plain = invoke("preflight", "--format", "json", FIXTURE, "--", "vllm", "serve", TARGET)
    assert plain.exit_code == 0 and checks(json.loads(plain.stdout), "info") == ["speculative-config"]
    unnamed = invoke("preflight", "--format", "json", FIXTURE, "--", "vllm", "serve", TARGET, "--speculative-config", json.dumps({"model": str(DRAFT)}))
    data = json.loads(unnamed.stdout)
    assert unnamed.exit_code == 0 and checks(data) == ["speculative-config"] and data["algorithm"] is None


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = invoke("preflight", FIXTURE, "--", "vllm", "serve", tmp_path / "nowhere", "--speculative-config", SPEC)
    assert missing.exit_code == 2 and "is not a local folder" in missing.stderr
    sglang_line = invoke("preflight", FIXTURE, "--", "python", "-m", "sglang.launch_server", "--model-path", TARGET)
    assert sglang_line.exit_code == 2 and "starts no vLLM server" in sglang_line.stderr
    json_error = invoke("preflight", "--format", "json", FIXTURE, "--", "vllm", "serve", TARGET, "--speculative-config", "{method: eagle3}")
    assert json_error.exit_code == 1 and checks(json.loads(json_error.stdout), "fail") == ["launch-arguments"]


def test_a_config_file_is_read_before_the_lines_own_options(tmp_path, monkeypatch):
    """`vllm serve MODEL --config serve.yaml`: vLLM puts the file's options in after the model and before
    the line's own, so the line wins; a mapping is its option's JSON, `true` a flag."""
    draft = checkpoint_copy(tmp_path, DRAFT, "draft", eagle_aux_hidden_state_layer_ids=[1, 15, 28])
    (tmp_path / "serve.yaml").write_text(
        "max-model-len: 8192\ntrust_remote_code: true\nspeculative-config:\n"
        f"  method: eagle3\n  model: {draft}\n  num_speculative_tokens: 3\n"
    )
    monkeypatch.chdir(tmp_path)
    line = read_vllm_launch(["vllm", "serve", "/m", "--config", "serve.yaml", "--max-model-len", "2048"], FLAGS, {})
    assert line.get("model") == "/m" and line.get("max_model_len") == "2048" and line.values["trust_remote_code"] is True
    assert line.speculative == {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3}
    fails = invoke("preflight", "--format", "json", FIXTURE, "--", "vllm", "serve", TARGET, "--config", "serve.yaml")
    assert fails.exit_code == 1 and checks(json.loads(fails.stdout), "fail") == ["draft-context"]  # 2048 positions, 8192 from the file
    capped = invoke("preflight", "--format", "json", FIXTURE, "--", "vllm", "serve", TARGET, "--config=serve.yaml", "--max-model-len", "2048")
    assert capped.exit_code == 0 and checks(json.loads(capped.stdout)) == []


@pytest.mark.parametrize("words, said", [
    (["--config", "missing.yaml"], "cannot be read"),
    (["--config", "serve.json"], "only a YAML config file"),
    (["--config", "list.yaml"], "no mapping of options"),
])
def test_a_config_file_vllm_cannot_read_is_one_line_and_exit_2(tmp_path, monkeypatch, words, said):
    (tmp_path / "serve.json").write_text("{}")
    (tmp_path / "list.yaml").write_text("- 1\n")
    monkeypatch.chdir(tmp_path)
    result = invoke("preflight", FIXTURE, "--", "vllm", "serve", TARGET, *words)
    assert result.exit_code == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1
