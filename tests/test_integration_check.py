"""`eaglepatch check` on real SGLang releases (wheels fetched by pip, cached).

The facts asserted here were read off the releases themselves:

* 0.5.9: ``KimiK25ForConditionalGeneration`` (models/kimi_k25.py) wraps a
  ``DeepseekV3ForCausalLM`` in ``self.language_model`` and forwards none of the
  EAGLE-3 calls; ``DeepseekV2ForCausalLM`` (its base, models/deepseek_v2.py)
  defines them at lines 2944, 2947 and 2963. ``eagle_worker.py:157`` calls
  ``get_embed_and_head`` on the target model and ``model_runner.py:622`` calls
  ``set_eagle3_layers_to_capture``. ``set_embed`` is called on draft models but
  the inner class does not define it, so it cannot be delegated.
* 0.5.10 and later: the wrapper forwards all three itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sglang_releases
from helpers import describe, json_report

pytestmark = pytest.mark.integration

REPO_ROOT = sglang_releases.REPO_ROOT
CHECK_TIMEOUT_SECONDS = 1200

WRAPPER_CLASS = "KimiK25ForConditionalGeneration"
WRAPPER_FILE = "models/kimi_k25.py"
INNER = {
    "attribute": "language_model",
    "class": "DeepseekV3ForCausalLM",
    "file": "models/deepseek_v2.py",
}
DELEGATIONS = {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}
DEFINED_AT_059 = {
    "get_embed_and_head": "models/deepseek_v2.py:2944",
    "set_embed_and_head": "models/deepseek_v2.py:2947",
    "set_eagle3_layers_to_capture": "models/deepseek_v2.py:2963",
}
SRT_LOCATION = re.compile(r"^(?!/)[\w.\-]+(/[\w.\-]+)*\.py:\d+$")  # relative "a/b.py:N"


# --------------------------------------------------------------------------- running


def run_check(path: Path, fmt: str | None = "json", cwd: Path = REPO_ROOT):
    """Run ``python -m eaglepatch check PATH [--format FMT]`` and return the process."""
    cmd = [sys.executable, "-m", "eaglepatch", "check", str(path)]
    if fmt is not None:
        cmd += ["--format", fmt]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p
    )
    env["COLUMNS"] = "250"  # rich must not cut names in a narrow, tty-less table
    env["NO_COLOR"] = "1"
    env.pop("FORCE_COLOR", None)
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=CHECK_TIMEOUT_SECONDS,
    )


def report_of(proc) -> dict:
    """The JSON report of a ``--format json`` run, checked for shape and exit code."""
    data = json_report(proc)
    _check_shape(data)
    return data


def _check_entry(entry: dict, with_defined_at: bool) -> None:
    assert isinstance(entry["name"], str) and entry["name"], entry
    assert entry["kind"] in ("call", "attribute"), entry
    assert entry["role"] in ("target", "draft", "unknown"), entry
    assert isinstance(entry["required"], bool), entry
    assert isinstance(entry["called_at"], list), entry
    for loc in entry["called_at"]:
        assert SRT_LOCATION.match(loc), f"not a srt-relative file:line: {loc!r}"
    if with_defined_at:
        assert SRT_LOCATION.match(entry["defined_at"]), entry


def _check_shape(data: dict) -> None:
    assert isinstance(data["srt"], str) and data["srt"]
    assert isinstance(data["protocol"], list) and data["protocol"]
    for entry in data["protocol"]:
        _check_entry(entry, with_defined_at=False)
    assert isinstance(data["models"], list)
    for model in data["models"]:
        assert model["file"].startswith("models/") and model["file"].endswith(".py"), model
        assert isinstance(model["class"], str) and model["class"]
        assert isinstance(model["inner"], list)
        for inner in model["inner"]:
            assert {"attribute", "class", "file"} <= inner.keys(), inner
        assert model["status"] in ("compliant", "fixable", "needs_code", "dynamic", "unresolved"), model
        assert model["role"] in ("target", "draft", "other"), model
        for entry in model["missing"] + model["forwarded"]:
            _check_entry(entry, with_defined_at=entry.get("fix") is not None)


def wrapper_of(data: dict, cls: str = WRAPPER_CLASS) -> dict:
    found = [m for m in data["models"] if m["class"] == cls]
    listed = sorted(f"{m['file']}:{m['class']}" for m in data["models"])
    assert len(found) == 1, f"{cls} listed {len(found)} times; models: {listed}"
    return found[0]


def names(entries: list[dict]) -> list[str]:
    return [e["name"] for e in entries]


def srt_of(data: dict, cwd: Path = REPO_ROOT) -> Path:
    srt = Path(data["srt"])
    return (srt if srt.is_absolute() else cwd / srt).resolve()


def _assert_wraps_deepseek(model: dict) -> None:
    assert model["file"] == WRAPPER_FILE
    inner = [
        {k: i[k] for k in ("attribute", "class", "file")} for i in model["inner"]
    ]
    assert INNER in inner, inner


# --------------------------------------------------------------------------- 0.5.9


LAYOUTS_059 = ("site-packages", "site-packages/sglang", "git checkout")


@pytest.fixture(scope="module")
def runs_059(sglang_059, tmp_path_factory):
    """One JSON run per way of pointing the tool at 0.5.9: layout -> (proc, srt)."""
    checkout = sglang_releases.make_checkout("0.5.9", tmp_path_factory.mktemp("co") / "sglang")
    targets = {
        "site-packages": (sglang_059, sglang_059 / "sglang" / "srt"),
        "site-packages/sglang": (sglang_059 / "sglang", sglang_059 / "sglang" / "srt"),
        "git checkout": (checkout, checkout / "python" / "sglang" / "srt"),
    }
    return {name: (run_check(path), srt) for name, (path, srt) in targets.items()}


@pytest.mark.parametrize("layout", LAYOUTS_059)
def test_059_kimi_misses_the_three_delegations(runs_059, layout):
    proc, srt = runs_059[layout]
    data = report_of(proc)
    assert proc.returncode == 1, describe(proc)
    assert srt_of(data) == srt.resolve()

    kimi = wrapper_of(data)
    _assert_wraps_deepseek(kimi)
    missing = {e["name"]: e for e in kimi["missing"]}
    assert sorted(names(kimi["missing"])) == sorted(DELEGATIONS)
    for name, entry in missing.items():
        assert entry["kind"] == "call", entry
        assert entry["defined_at"] == DEFINED_AT_059[name], entry
        assert entry["called_at"], entry
    assert "speculative/eagle_worker.py:157" in missing["get_embed_and_head"]["called_at"]
    assert (
        "model_executor/model_runner.py:622"
        in missing["set_eagle3_layers_to_capture"]["called_at"]
    )
    # set_embed is draft-only and DeepSeek lacks it: not the target's concern, not listed
    assert "set_embed" not in names(kimi["missing"])
    assert not DELEGATIONS & set(names(kimi["forwarded"]))


@pytest.mark.parametrize("layout", LAYOUTS_059)
def test_059_protocol_holds_the_eagle_calls_only(runs_059, layout):
    data = report_of(runs_059[layout][0])
    protocol = {e["name"]: e for e in data["protocol"]}
    assert DELEGATIONS <= protocol.keys()
    assert "set_embed" in protocol
    for generic in ("forward", "load_weights"):
        assert generic not in protocol, f"{generic} is not part of the EAGLE protocol"
    assert "speculative/eagle_worker.py:157" in protocol["get_embed_and_head"]["called_at"]
    assert (
        "model_executor/model_runner.py:622"
        in protocol["set_eagle3_layers_to_capture"]["called_at"]
    )
    # a missing entry describes the same protocol member
    for entry in wrapper_of(data)["missing"]:
        assert entry["kind"] == protocol[entry["name"]]["kind"]
        assert set(entry["called_at"]) <= set(protocol[entry["name"]]["called_at"])


def test_059_layouts_give_the_same_report(runs_059):
    reports = {layout: report_of(runs_059[layout][0]) for layout in LAYOUTS_059}
    first = reports[LAYOUTS_059[0]]
    for layout, data in reports.items():
        assert data["protocol"] == first["protocol"], layout
        assert data["models"] == first["models"], layout


def test_059_default_format_is_a_table_naming_the_gaps(sglang_059):
    proc = run_check(sglang_059, fmt=None)
    assert proc.returncode == 1, describe(proc)
    for name in sorted(DELEGATIONS):
        assert name in proc.stdout, f"{name} not shown\n{describe(proc)}"
    assert "kimi_k25" in proc.stdout or WRAPPER_CLASS in proc.stdout, describe(proc)
    with pytest.raises(json.JSONDecodeError):
        json.loads(proc.stdout)


_ANNOTATION_FILE = re.compile(r"^::error file=([^,:]+)")


def test_059_github_format_annotates_the_wrapper(checkout_of):
    root = checkout_of("0.5.9")
    proc = run_check(root, fmt="github", cwd=root)
    assert proc.returncode == 1, describe(proc)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("::error file=")]
    assert errors, describe(proc)
    for line in lines:
        assert line.startswith("::"), f"not a workflow command: {line!r}"
    on_kimi = [
        line for line in errors
        if _ANNOTATION_FILE.match(line).group(1).endswith(WRAPPER_FILE)
    ]
    assert on_kimi, f"no annotation on {WRAPPER_FILE}\n{describe(proc)}"
    companion = "set_embed_and_head"  # draft-side: written by apply, a notice rather than an error
    for name in sorted(DELEGATIONS - {companion}):
        assert any(name in line for line in on_kimi), f"{name} not annotated"
    assert any(line.startswith("::notice file=") and companion in line for line in lines), describe(proc)
    for line in on_kimi:
        path = _ANNOTATION_FILE.match(line).group(1)
        assert (root / path).is_file() or Path(path).is_file(), (
            f"annotation path {path!r} names no file (cwd {root})"
        )


# --------------------------------------------------------------------------- 0.5.10


def test_0510_kimi_forwards_all_three(sglang_0510):
    proc = run_check(sglang_0510)
    data = report_of(proc)
    assert proc.returncode == 0, describe(proc)
    kimi = wrapper_of(data)
    _assert_wraps_deepseek(kimi)
    assert kimi["missing"] == []
    assert DELEGATIONS <= set(names(kimi["forwarded"])), names(kimi["forwarded"])


# --------------------------------------------------------------------------- latest


def test_latest_release_kimi_is_complete(sglang_latest):
    proc = run_check(sglang_latest)
    data = report_of(proc)  # exit code checked against the models' missing lists
    protocol = set(names(data["protocol"]))
    assert {"get_embed_and_head", "set_eagle3_layers_to_capture"} <= protocol
    kimi = wrapper_of(data)
    assert kimi["file"] == WRAPPER_FILE
    assert kimi["missing"] == [], kimi["missing"]
