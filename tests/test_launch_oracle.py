"""Issue 36, item 2: the release's own parser is the oracle for preflight's `launch-arguments` check.

Every launch line of tests/launch_corpus.tsv (real lines, each with its source) goes to each pinned
release twice: once through the release's own entry point with its own argparse parser, imported with
stubs in a fresh interpreter (tests/release_parser.py), and once through preflight's static reading of
the same release tree (read_options + read_launch + launch_rules).  Preflight must never fail a launch
the release's parser accepts, and must say something (a fail, or a warn where a plugin could extend a
list of choices) about every launch the parser refuses.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import sglang_releases
from helpers import parser_verdicts

from eaglepatch.analyze.preflight import launch_rules
from eaglepatch.read.launch_line import read_launch, read_options
from eaglepatch.read.source_cache import SourceCache

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "launch_corpus.tsv"
CONFIGS = HERE / "launch_corpus"  # the folder the lines run from: their `--config FILE` is here
_SERVER_MODULES = ("sglang.launch_server",)


@dataclass(frozen=True)
class CorpusLine:
    source: str
    command: str

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command)

    def entry(self) -> tuple[list[str], bool]:
        """(the words the release's parser gets, whether `sglang serve` starts it), found here on its own
        terms (the words after `-m sglang.launch_server`, or after `sglang serve`), not by preflight."""
        words = self.words
        for i, word in enumerate(words):
            if word == "-m" and i + 1 < len(words) and words[i + 1] in _SERVER_MODULES:
                return words[i + 2 :], False
            if word == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
                return words[i + 2 :], True
        raise ValueError(f"no SGLang entry point in: {self.command}")


def read_corpus(path: Path = CORPUS) -> list[CorpusLine]:
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        source, tab, command = raw.partition("\t")
        assert tab and source.strip() and command.strip(), f"not SOURCE<TAB>COMMAND: {raw!r}"
        lines.append(CorpusLine(source.strip(), command.strip()))
    return lines


LINES = read_corpus()


def oracle(version: str, lines: list[CorpusLine], tmp_path: Path) -> list[dict]:
    """The release parser's verdict on each line: one fresh interpreter for all of them."""
    site = sglang_releases.site_packages(version)
    return parser_verdicts(HERE / "release_parser.py", site, [line.entry() for line in lines], tmp_path, CONFIGS, 300)


def static_findings(options, line: CorpusLine) -> list[tuple[str, str]]:
    """(severity, message) of preflight's `launch-arguments` findings on the line."""
    launch = read_launch(line.words, options, shell={})
    return [(f.severity, f.message) for f in launch_rules(launch) if f.check == "launch-arguments"]


def test_the_corpus_is_large_varied_and_sourced():
    assert len(LINES) >= 50
    assert len({line.command for line in LINES}) == len(LINES)
    commands = " ".join(line.command for line in LINES)
    for needed in ("EAGLE3", "EAGLE ", "NGRAM", "STANDALONE", "DFLASH", "--enable-dp-attention", "--disable-cuda-graph",
                   "--attention-backend", "--quantization", "--config", "sglang serve", "--context-length"):
        assert needed in commands, needed
    for line in LINES:
        line.entry()
        if "--config" in line.words:
            assert (CONFIGS / line.words[line.words.index("--config") + 1]).is_file()


def _releases() -> list[str]:
    return sglang_releases.read_releases()


# Lines where the static reading cannot agree with the release's parser, by release: (line source, reason).
# None today: what the corpus found (`sglang serve`'s own rewriting of the words and its model-path check)
# is read from the tree now (read/launch_line.py: _serve_front, _serve_words).
EXPECTED_DISAGREEMENTS: dict[str, list[tuple[str, str]]] = {}


@pytest.mark.integration
@pytest.mark.parametrize("version", _releases())
def test_preflight_agrees_with_the_releases_own_parser(version, tmp_path, monkeypatch):
    verdicts = oracle(version, LINES, tmp_path)
    options = read_options(SourceCache(sglang_releases.site_packages(version) / "sglang" / "srt"))
    monkeypatch.chdir(CONFIGS)
    expected = {source for source, _ in EXPECTED_DISAGREEMENTS.get(version, [])}
    wrong_fails, missed = [], []
    for line, verdict in zip(LINES, verdicts):
        found = static_findings(options, line)
        if line.source in expected:
            continue
        if verdict["accepted"] and any(severity == "fail" for severity, _ in found):
            wrong_fails.append((line.source, found))
        if not verdict["accepted"] and not found:
            missed.append((line.source, verdict["error"]))
    accepted = sum(v["accepted"] for v in verdicts)
    print(f"{version}: the release's parser accepts {accepted} of {len(LINES)} lines, refuses {len(LINES) - accepted}")
    assert not wrong_fails, f"preflight fails lines {version}'s parser accepts: {wrong_fails}"
    assert not missed, f"preflight says nothing of lines {version}'s parser refuses: {missed}"
