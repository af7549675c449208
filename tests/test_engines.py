"""The Engine interface (patcher/engine.py): the registry picks an engine by name or by the tree's
shape, each engine says which commands it serves, and what differs between engines in the output is
read from the engine object, so a third engine (or a fake one here) changes the output without any
string compared on the way."""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import get_args

import pytest
from rich.console import Console

from eaglepatch.engine import Command, WouldWrite
from eaglepatch.engines import ENGINES, NAMES, engine_named, find_engine
from eaglepatch.errors import EaglepatchError
from eaglepatch.output.explain import would_write_json
from eaglepatch.output.report import analysis_json, print_protocol, print_summary
from eaglepatch.run import analyze

REPO = Path(__file__).resolve().parents[1]
SGLANG_FIXTURE = REPO / "fixtures" / "site-packages"
VLLM_FIXTURE = REPO / "fixtures" / "vllm"


def test_each_engine_refuses_exactly_the_commands_it_does_not_serve():
    for engine in ENGINES:
        for command in get_args(Command):
            refusal = engine.refusal(command)
            assert (refusal is None) == (command in engine.commands), (engine.name, command)
            if refusal is not None:
                assert refusal.startswith(f"{command} does not read {engine.display_name} trees")


def test_vllm_refuses_explain_and_says_what_to_run_instead():
    vllm = engine_named("vllm")
    assert vllm.refusal("explain") == "explain does not read vLLM trees yet; eaglepatch check shows each wrapper's reasons"
    assert vllm.refusal("check") is None and vllm.refusal("revert") is None
    assert engine_named("sglang").commands == frozenset(get_args(Command))


@pytest.mark.parametrize(
    "given, name, expected",
    [
        (SGLANG_FIXTURE, None, "sglang"),
        (VLLM_FIXTURE, None, "vllm"),
        (VLLM_FIXTURE / "vllm", None, "vllm"),
        (VLLM_FIXTURE, "vllm", "vllm"),
        (SGLANG_FIXTURE, "sglang", "sglang"),
    ],
)
def test_the_registry_picks_by_shape_or_by_name(given, name, expected):
    engine, tree = find_engine(given, name)
    assert engine.name == expected
    assert tree.models.is_dir()


def test_an_unknown_engine_name_lists_the_known_ones():
    with pytest.raises(EaglepatchError, match="unknown engine 'tgi'; pass one of " + ", ".join(NAMES)):
        find_engine(SGLANG_FIXTURE, "tgi")


@dataclass(frozen=True)
class OtherTraits:
    """Another engine's traits, for the output alone."""

    name: str = "other"
    display_name: str = "Other Engine"
    report_name: str | None = "other"
    tree_key: str = "root"
    lists_clean_classes: bool = True


def test_the_report_reads_the_engine_not_its_name():
    analysis = analyze(SGLANG_FIXTURE, all_models=True)
    assert "engine" not in analysis_json(analysis)  # SGLang's reports have no "engine" key
    other = replace(analysis, engine=OtherTraits())
    assert analysis_json(other)["engine"] == "other"
    shown = io.StringIO()
    print_protocol(other, Console(file=shown, width=200))
    assert "EAGLE-3 protocol read from Other Engine's own code" in shown.getvalue()

    clean = [p.wrapper.cls.name for p in analysis.plans if p.status in ("compliant", "dynamic") and not p.missing]
    assert clean, "the fixture has classes that need nothing"

    def listed(traits: object) -> set[str]:
        out = io.StringIO()
        print_summary(replace(analysis, engine=traits), Console(file=out, width=300), quiet=True)
        return {line.split()[2] for line in out.getvalue().splitlines() if line[:1].strip()}  # status role CLASS (file:line)

    assert set(clean) <= listed(OtherTraits())
    assert not set(clean) & listed(replace(OtherTraits(), lists_clean_classes=False))


# (what the engine built for one member, the JSON `explain` shows for it)
WOULD_WRITE_CASES = [
    (
        WouldWrite(proven=True, text="    def f(self):\n        return self.m.f()\n", imports=("import torch",)),
        {"would_write": "    def f(self):\n        return self.m.f()\n", "proven": True, "proof": None, "imports": ["import torch"]},
    ),
    (WouldWrite(proven=False, proof="x.py: apply writes nothing for f in A"), {"proven": False, "proof": "x.py: apply writes nothing for f in A"}),
    (
        WouldWrite(proven=False, proof="x.py:3: does not parse", text="    def f(self): ...\n"),
        {"proven": False, "proof": "x.py:3: does not parse", "would_write": "    def f(self): ...\n"},
    ),
]


@pytest.mark.parametrize("written, expected", WOULD_WRITE_CASES)
def test_explain_lays_out_what_the_engine_built(written, expected):
    got = would_write_json(written)
    assert got == expected
    assert list(got) == list(expected)  # the key order is the JSON's


def test_explain_output_builds_nothing():
    """output/explain.py renders: it imports no stage that reads, plans or rewrites."""
    tree = ast.parse((REPO / "patcher" / "output" / "explain.py").read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    stages = {m for m in imported if m.lstrip(".").split(".")[0] in {"analyze", "rewrite", "codemods", "read", "engines", "libcst"}}
    assert not stages, stages
