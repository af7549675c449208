"""`eaglepatch preflight` on every pinned vLLM release (issue 37, item 4): the whitelist where the release
has one, the draft's positions under a longer max model len, a draft without its aux-layer ids.

What each release does is taken from its own text by the test (a line that holds the whitelist, the
statement raising a draft's positions, a runner line reading the draft's ids), not from eaglepatch's
reading, and the checkpoints are written here: a Llama-3.1-8B-shaped target (32 layers) and its
EAGLE-3 draft with 2048 positions, and a GLM-4.5-shaped target whose model type no whitelist holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import vllm_releases
from helpers import invoke

pytestmark = pytest.mark.integration

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
         "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}
GLM = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096, "num_hidden_layers": 46, "max_position_embeddings": 131072}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1, "max_position_embeddings": 2048}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    folders = {}
    for name, config in (("llama", LLAMA), ("glm", GLM), ("draft", DRAFT)):
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        folders[name] = folder
    return folders


def preflight(version: str, target: Path, draft: Path, *extra: str) -> tuple[int, dict]:
    site = vllm_releases.site_packages(version)
    spec = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    result = invoke("preflight", "--format", "json", site, "--", "vllm", "serve", target, "--speculative-config", spec, *extra)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def found(data: dict, check: str) -> list[dict]:
    return [f for f in data["findings"] if f["check"] == check]


def source_line(version: str, where: str) -> str:
    rel, _, line = where.rpartition(":")
    return (vllm_releases.site_packages(version) / "vllm" / rel).read_text().splitlines()[int(line) - 1]


def _whitelist(version: str) -> bool:
    """The release's speculative config refuses EAGLE-3 targets by model type (its own text says so)."""
    root = vllm_releases.site_packages(version) / "vllm"
    texts = [p.read_text() for p in (root / "config.py", root / "config" / "__init__.py", root / "config" / "speculative.py") if p.is_file()]
    return any("Eagle3 is only supported for" in t for t in texts)


@pytest.mark.parametrize("version", vllm_releases.pinned_releases())
def test_the_whitelist_refuses_a_target_only_where_the_release_has_one(version, checkpoints):
    code, data = preflight(version, checkpoints["glm"], checkpoints["draft"], "--max-model-len", "2048")
    gates = found(data, "eagle3-target-gate")
    if not _whitelist(version):
        assert gates == []
        return
    assert code == 1 and [g["severity"] for g in gates] == ["fail"] and "'glm4_moe'" in gates[0]["message"]
    assert "llama" in source_line(version, gates[0]["where"])  # the line holding the list (or the one-word test)
    assert found(preflight(version, checkpoints["llama"], checkpoints["draft"], "--max-model-len", "2048")[1], "eagle3-target-gate") == []


def _raises_positions(version: str) -> bool:
    text = (vllm_releases.site_packages(version) / "vllm" / "config" / "speculative.py")
    return text.is_file() and re.search(r"\.max_position_embeddings = target_max_model_len", text.read_text()) is not None


@pytest.mark.parametrize("version", vllm_releases.pinned_releases())
def test_a_draft_with_fewer_positions_fails_where_the_release_never_raises_them(version, checkpoints):
    code, data = preflight(version, checkpoints["llama"], checkpoints["draft"], "--max-model-len", "8192")
    context = found(data, "draft-context")
    assert len(context) == 1 and "(2048)" in context[0]["message"] and "(8192, --max-model-len)" in context[0]["message"]
    if _raises_positions(version):
        assert context[0]["severity"] == "info" and "max_position_embeddings = target_max_model_len" in source_line(version, context[0]["where"])
    else:
        assert context[0]["severity"] == "fail" and code == 1
    assert found(preflight(version, checkpoints["llama"], checkpoints["draft"], "--max-model-len", "2048")[1], "draft-context") == []


@pytest.mark.parametrize("version", vllm_releases.pinned_releases())
def test_a_draft_without_its_layer_ids_gets_the_default_named_where_the_runner_reads_them(version, checkpoints):
    _, data = preflight(version, checkpoints["llama"], checkpoints["draft"], "--max-model-len", "2048")
    layers = found(data, "aux-layer-ids")
    assert len(layers) == 1
    message, where = layers[0]["message"], layers[0]["where"]
    if layers[0]["severity"] == "warn":  # the runner reads the draft's ids: without them, the target's default
        assert "eagle_aux_hidden_state_layer_ids" in source_line(version, where)
    else:  # the release never reads them: it always captures the default
        assert layers[0]["severity"] == "info"
        assert "get_eagle3_aux_hidden_state_layers" in source_line(version, where) or "default" in source_line(version, where)
    assert "(2, 16, 29)" in message  # (2, n // 2, n - 3) for the target's 32 layers, as every pinned release's Llama says
