"""Issue 37, item 4: each pinned vLLM release's own argument parser is the oracle for what preflight reads
of a `vllm serve` line.

Every line of tests/vllm_launch_corpus.tsv (real lines, each with its source) goes to each pinned release
twice: through the release's own parser, imported with stubs in a fresh interpreter
(tests/vllm_release_parser.py), and through preflight's static reading (read_vllm_options + read_vllm_launch).
Where the parser accepts a line, preflight must not fail it and must read the same model, speculative
config, max model len and tensor parallel size.  Where the parser refuses one, preflight must say so:
a speculative config the parser could not read is a failure, and an option no parser of the release
declares is a warning naming the options the parser names (a warning, since a plugin can add options).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import vllm_releases
from helpers import parser_verdicts

from eaglepatch.read.source_cache import SourceCache
from eaglepatch.read.vllm_launch import read_vllm_launch, read_vllm_options

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "vllm_launch_corpus.tsv"
_SERVER = "vllm.entrypoints.openai.api_server"


def read_corpus() -> list[tuple[str, list[str]]]:
    lines = []
    for raw in CORPUS.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        source, tab, command = raw.partition("\t")
        assert tab and source.strip() and command.strip(), f"not SOURCE<TAB>COMMAND: {raw!r}"
        lines.append((source.strip(), shlex.split(command)))
    return lines


LINES = read_corpus()


def entry(words: list[str]) -> tuple[list[str], bool]:
    """(the words the release's parser gets, whether `vllm serve` starts it), found on the test's own terms."""
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words) and words[i + 1] == _SERVER:
            return words[i + 2 :], False
        if word == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
            return words[i + 2 :], True
    raise ValueError(f"no vLLM entry point in: {words}")


def test_the_corpus_is_sourced_and_varied():
    assert len(LINES) >= 10 and len({tuple(w) for _, w in LINES}) == len(LINES)
    text = " ".join(" ".join(w) for _, w in LINES)
    for needed in ("eagle3", "ngram", "draft_model", "--speculative_config", "--speculative-config", "-tp", "--max-model-len", _SERVER):
        assert needed in text, needed
    for _, words in LINES:
        entry(words)


def oracle(version: str, tmp_path: Path) -> list[dict]:
    site = vllm_releases.site_packages(version)
    return parser_verdicts(HERE / "vllm_release_parser.py", site, [entry(words) for _, words in LINES], tmp_path, tmp_path, 600)


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


@pytest.mark.integration
@pytest.mark.parametrize("version", vllm_releases.pinned_releases())
def test_preflight_reads_what_the_releases_own_parser_reads(version, tmp_path):
    verdicts = oracle(version, tmp_path)
    flags = read_vllm_options(SourceCache(vllm_releases.site_packages(version) / "vllm"))
    disagreements, refused = [], []
    for (source, words), verdict in zip(LINES, verdicts):
        line = read_vllm_launch(words, flags, {})
        if not verdict["accepted"]:
            refused.append((source, verdict["error"]))
            if "speculative" in verdict["error"] and "json" in verdict["error"].lower():
                assert line.errors, (source, verdict["error"])
            if verdict["error"].startswith("unrecognized arguments"):
                named = verdict["error"].split(":", 1)[1].split()
                assert line.unknown and set(line.unknown) <= {w.split("=")[0] for w in named}, (source, line.unknown, verdict["error"])
            continue
        theirs = verdict["values"]
        ours = {
            "model": line.get("model"),
            "speculative_config": dict(line.speculative) if line.speculative is not None else None,
            "max_model_len": _number(line.get("max_model_len")),
            "tensor_parallel_size": _number(line.get("tensor_parallel_size")),
        }
        expected = {**theirs, "tensor_parallel_size": theirs["tensor_parallel_size"] if ours["tensor_parallel_size"] is not None else None}
        if line.errors or line.unknown or ours != expected:
            disagreements.append((source, line.errors, ours, theirs))
    print(f"vLLM {version}: the parser accepts {len(LINES) - len(refused)} of {len(LINES)} lines; refused: {refused}")
    assert not disagreements, disagreements
    assert len(refused) < len(LINES) / 2  # the corpus is mostly lines the release serves
