"""`eaglepatch check` on the bundled fixtures and on variants of them built in tmp_path.

Fast (no network, no real SGLang release): the CLI runs in-process through
``typer.testing.CliRunner`` except for two end-to-end runs of ``python -m eaglepatch``.
Variants copy ``fixtures/checkout/python/sglang`` and edit it with plain string
replacement; every expected line number is found by searching the file text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eaglepatch.cli import app

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
CHECKOUT = FIXTURES / "checkout"
SGLANG = CHECKOUT / "python" / "sglang"
SRT = SGLANG / "srt"
SITE_PACKAGES = FIXTURES / "site-packages"

KIMI_MISSING = {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}
KIMI_CLASS = "KimiK25ForConditionalGeneration"
KIMI_FILE = "models/kimi_k25.py"
WORKER = "speculative/eagle_worker.py"
RUNNER_FILE = "model_executor/model_runner.py"

RUNNER = CliRunner()


# --------------------------------------------------------------------------- helpers


def line_of(path: Path, needle: str, nth: int = 0) -> int:
    """1-based line of the `nth` line of `path` containing `needle` (which must exist)."""
    hits = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if needle in line]
    assert len(hits) > nth, f"{needle!r} not found {nth + 1} time(s) in {path}"
    return hits[nth]


def unique_line(path: Path, needle: str) -> int:
    hits = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"{needle!r} occurs {len(hits)} times in {path}"
    return hits[0]


def run(*args) -> object:
    """`eaglepatch check ARGS` in-process; an unexpected exception is re-raised, not read as exit 1."""
    result = RUNNER.invoke(app, ["check", *map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def check_json(path, *args) -> tuple[int, dict]:
    result = run(path, "--format", "json", *args)
    assert result.exit_code in (0, 1), f"exit {result.exit_code}: {result.stderr}"
    data = json.loads(result.stdout)
    assert result.exit_code == (1 if data["summary"]["missing"] else 0)
    return result.exit_code, data


def protocol_of(data: dict) -> dict[str, dict]:
    return {m["name"]: m for m in data["protocol"]}


def model_of(data: dict, cls: str = KIMI_CLASS) -> dict:
    matches = [m for m in data["models"] if m["class"] == cls]
    assert len(matches) == 1, [m["class"] for m in data["models"]]
    return matches[0]


def names(entries: list[dict]) -> set[str]:
    return {e["name"] for e in entries}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below `root` (symlinks followed) -> its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=True):
        for filename in filenames:
            path = Path(dirpath) / filename
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


class Tree:
    """A writable copy of the fixture checkout in tmp_path."""

    def __init__(self, root: Path):
        self.root = root
        self.srt = root / "python" / "sglang" / "srt"

    def path(self, rel: str) -> Path:
        return self.srt / rel

    def text(self, rel: str) -> str:
        return self.path(rel).read_text(encoding="utf-8")

    def replace(self, rel: str, old: str, new: str) -> None:
        text = self.text(rel)
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {rel}"
        self.path(rel).write_text(text.replace(old, new), encoding="utf-8")

    def append(self, rel: str, code: str) -> None:
        text = self.text(rel)
        assert text.endswith("\n")
        self.path(rel).write_text(text + code, encoding="utf-8")

    def write(self, rel: str, code: str) -> None:
        self.path(rel).parent.mkdir(parents=True, exist_ok=True)
        self.path(rel).write_text(code, encoding="utf-8")

    def line(self, rel: str, needle: str) -> int:
        return unique_line(self.path(rel), needle)

    def at(self, rel: str, needle: str) -> str:
        return f"{rel}:{self.line(rel, needle)}"


@pytest.fixture
def tree(tmp_path) -> Tree:
    root = tmp_path / "checkout"
    shutil.copytree(SGLANG, root / "python" / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    return Tree(root)


@pytest.fixture(scope="module")
def fixture_report() -> tuple[int, dict]:
    return check_json(CHECKOUT)


def add_worker_method(tree: Tree, body: str) -> None:
    """Append a method to EAGLEWorker (the last class of speculative/eagle_worker.py)."""
    tree.append(WORKER, "\n" + body)


# --------------------------------------------------------------------------- 1. the bundled checkout


def test_fixture_kimi_missing_exactly_the_three_hooks(fixture_report):
    code, data = fixture_report
    assert code == 1
    kimi = model_of(data)
    assert kimi["status"] == "fixable"
    assert kimi["role"] == "target"
    assert kimi["file"] == KIMI_FILE
    assert kimi["line"] == unique_line(SRT / KIMI_FILE, f"class {KIMI_CLASS}(")
    assert names(kimi["missing"]) == KIMI_MISSING
    assert kimi["forwarded"] == []
    # the target's hooks are required; the draft-side set_embed_and_head is a companion: written, never gating
    assert {m["name"]: m["required"] for m in kimi["missing"]} == {
        "get_embed_and_head": True,
        "set_eagle3_layers_to_capture": True,
        "set_embed_and_head": False,
    }
    assert all(m["fix"] == {"kind": "delegate", "to": "language_model"} for m in kimi["missing"])
    assert data["schema"] == 2
    assert data["summary"]["missing"] == 2
    assert data["summary"]["fixes"] == 3
    assert data["summary"]["by_status"] == {"fixable": 1}
    assert [(i["attribute"], i["class"], i["file"]) for i in kimi["inner"]] == [
        ("language_model", "DeepseekV3ForCausalLM", "models/deepseek_v2.py")
    ]
    assert kimi["inner"][0]["assigned_at"] == f"{KIMI_FILE}:{unique_line(SRT / KIMI_FILE, 'self.language_model = ')}"


def test_fixture_defined_at_points_at_the_real_def_lines(fixture_report):
    _, data = fixture_report
    deepseek = SRT / "models" / "deepseek_v2.py"
    for entry in model_of(data)["missing"]:
        expected = unique_line(deepseek, f"def {entry['name']}(")
        assert entry["defined_at"] == f"models/deepseek_v2.py:{expected}"
        assert entry["defined_as"] == "method"
        assert entry["inner_attribute"] == "language_model"


def test_fixture_draft_only_and_optional_members_are_not_listed_against_a_target(fixture_report):
    _, data = fixture_report
    kimi = model_of(data)
    listed = names(kimi["missing"] + kimi["forwarded"])
    assert listed.isdisjoint({"set_embed", "hot_token_id", "load_lm_head_from_target", "get_embed_and_head_for_draft"})


def test_fixture_general_interface_is_not_protocol(fixture_report):
    _, data = fixture_report
    protocol = protocol_of(data)
    for general in ("forward", "load_weights", "get_input_embeddings"):
        assert general not in protocol
        for model in data["models"]:
            assert general not in names(model["missing"] + model["forwarded"])
    # No EAGLE-3 code in the fixture touches forward & co., so nothing had to be set aside.
    assert data["general_interface"] == {}


def test_fixture_protocol_members_and_call_sites(fixture_report):
    _, data = fixture_report
    protocol = protocol_of(data)
    assert set(protocol) == KIMI_MISSING | {
        "get_embed_and_head_for_draft",
        "set_embed",
        "hot_token_id",
        "load_lm_head_from_target",
    }
    optional = protocol["get_embed_and_head_for_draft"]
    assert optional["required"] is False
    assert optional["role"] == "target"
    assert optional["called_at"] == [
        f"speculative/eagle_utils.py:{unique_line(SRT / 'speculative/eagle_utils.py', '.get_embed_and_head_for_draft(')}"
    ]
    capture = protocol["set_eagle3_layers_to_capture"]
    assert capture["required"] is True
    assert sorted(capture["called_at"]) == sorted(
        [
            f"model_executor/cuda_graph_runner.py:{unique_line(SRT / 'model_executor/cuda_graph_runner.py', '.set_eagle3_layers_to_capture(')}",
            f"{RUNNER_FILE}:{unique_line(SRT / RUNNER_FILE, '.set_eagle3_layers_to_capture(')}",
        ]
    )
    worker = SRT / WORKER
    get_sites = {
        f"{WORKER}:{line_of(worker, '.get_embed_and_head()', 0)}",
        f"{WORKER}:{line_of(worker, '.get_embed_and_head()', 1)}",
        f"speculative/eagle_utils.py:{unique_line(SRT / 'speculative/eagle_utils.py', '.get_embed_and_head()')}",
    }
    assert set(protocol["get_embed_and_head"]["called_at"]) == get_sites
    assert protocol["get_embed_and_head"]["kind"] == "call"
    assert protocol["hot_token_id"]["kind"] == "attribute"
    assert protocol["load_lm_head_from_target"]["required"] is False  # behind hasattr(...)
    assert data["consumers"] == [
        "model_executor/cuda_graph_runner.py",
        RUNNER_FILE,
        "speculative/eagle_utils.py",
        WORKER,
    ]
    assert data["warnings"] == []


def test_fixture_table_format_names_the_missing_members():
    result = run(CHECKOUT)
    assert result.exit_code == 1
    for name in ("KimiK25ForConditionalGeneration", "fixable", "2 required member(s) missing", "3 apply can write"):
        assert name in result.stdout
    assert result.stderr == ""


def test_forward_called_by_eagle_code_is_set_aside_as_general_interface(tree):
    add_worker_method(
        tree,
        "    def run_target(self, batch):\n"
        "        return self.target_worker.model_runner.model.forward(batch)\n",
    )
    _, data = check_json(tree.root)
    assert "forward" not in protocol_of(data)
    where = data["general_interface"]["forward"]
    executor_sites = set()
    for path in sorted((tree.srt / "model_executor").glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            if ".model.forward(" in line:
                executor_sites.add(f"model_executor/{path.name}:{i}")
    assert where in executor_sites
    assert names(model_of(data)["missing"]) == KIMI_MISSING


# --------------------------------------------------------------------------- 2. layouts


def _comparable(data: dict) -> dict:
    return {k: data[k] for k in ("protocol", "consumers", "general_interface", "models", "warnings", "summary")}


def test_same_report_through_every_layout(tmp_path, fixture_report):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "sglang").symlink_to(SGLANG, target_is_directory=True)
    expected_code, expected = fixture_report
    assert expected["layout"] == "checkout"
    layouts = {
        SITE_PACKAGES: "site-packages",
        SITE_PACKAGES / "sglang": "package",
        SITE_PACKAGES / "sglang" / "srt": "srt",
        SRT: "srt",
        venv: "venv",
    }
    for path, layout in layouts.items():
        code, data = check_json(path)
        assert code == expected_code == 1, path
        assert data["layout"] == layout, path
        assert _comparable(data) == _comparable(expected), path


# --------------------------------------------------------------------------- 3. inferred, not listed

HOT_CALL = "self.target_worker.model_runner.model.get_hot_token_ids()"


def _add_hot_call(tree: Tree) -> None:
    add_worker_method(tree, f"    def hot_ids(self):\n        return {HOT_CALL}\n")


def test_new_consumer_call_joins_protocol_and_missing(tree):
    _add_hot_call(tree)
    tree.replace(
        "models/deepseek_v2.py",
        "\n\n\nclass DeepseekV3ForCausalLM(",
        "\n\n    def get_hot_token_ids(self):\n        return []\n\n\nclass DeepseekV3ForCausalLM(",
    )
    code, data = check_json(tree.root)
    assert code == 1
    member = protocol_of(data)["get_hot_token_ids"]
    assert member["required"] is True and member["role"] == "target" and member["kind"] == "call"
    assert member["called_at"] == [tree.at(WORKER, HOT_CALL)]
    kimi = model_of(data)
    assert names(kimi["missing"]) == KIMI_MISSING | {"get_hot_token_ids"}
    hot = next(m for m in kimi["missing"] if m["name"] == "get_hot_token_ids")
    assert hot["defined_at"] == tree.at("models/deepseek_v2.py", "def get_hot_token_ids(")
    assert hot["fix"] == {"kind": "delegate", "to": "language_model"}
    assert data["summary"]["missing"] == 3  # two hooks and the new call; set_embed_and_head is a companion


def test_new_consumer_call_without_inner_method_is_not_delegable(tree):
    _add_hot_call(tree)
    code, data = check_json(tree.root)
    assert code == 1
    assert "get_hot_token_ids" in protocol_of(data)
    kimi = model_of(data)
    assert names(kimi["missing"]) == KIMI_MISSING | {"get_hot_token_ids"}
    hot = next(m for m in kimi["missing"] if m["name"] == "get_hot_token_ids")
    assert hot["required"] is True and hot["fix"] is None
    assert "lacks it" in hot["blocker"] and "DeepseekV3ForCausalLM" in hot["blocker"]
    assert kimi["status"] == "needs_code"


# --------------------------------------------------------------------------- 4. receiver forms


def test_local_alias_of_the_target_model(tree):
    add_worker_method(
        tree,
        "    def alias_probe(self):\n"
        "        tm = self.target_worker.model_runner.model\n"
        "        return tm.new_alias_member()\n",
    )
    _, data = check_json(tree.root)
    member = protocol_of(data)["new_alias_member"]
    assert member["called_at"] == [tree.at(WORKER, "tm.new_alias_member()")]
    assert member["role"] == "target"
    assert member["required"] is True


def test_rebound_alias_is_no_longer_a_model(tree):
    add_worker_method(
        tree,
        "    def alias_probe(self):\n"
        "        tm = self.target_worker.model_runner.model\n"
        "        tm.still_model_member()\n"
        "        tm = object()\n"
        "        return tm.not_a_model_member()\n",
    )
    _, data = check_json(tree.root)
    protocol = protocol_of(data)
    assert protocol["still_model_member"]["called_at"] == [tree.at(WORKER, "tm.still_model_member()")]
    assert "not_a_model_member" not in protocol


HELPER_MODULE = "speculative/spec_utils_x.py"
HELPER_SOURCE = '"""Helpers with a neutral name."""\n\n\ndef share(target_model):\n    return target_model.helper_member()\n'


@pytest.mark.parametrize(
    "call",
    [
        "share(self.target_worker.model_runner.model)",
        "share(target_model=self.target_worker.model_runner.model)",
    ],
    ids=["positional", "keyword"],
)
def test_helper_in_non_eagle_module_is_followed(tree, call):
    tree.write(HELPER_MODULE, HELPER_SOURCE)
    tree.replace(
        WORKER,
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n",
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n"
        "from sglang.srt.speculative.spec_utils_x import share\n",
    )
    add_worker_method(tree, f"    def share_probe(self):\n        return {call}\n")
    _, data = check_json(tree.root)
    member = protocol_of(data)["helper_member"]
    assert member["called_at"] == [tree.at(HELPER_MODULE, "target_model.helper_member()")]
    assert member["role"] == "target"
    assert member["required"] is True
    assert any(f"{WORKER}:{tree.line(WORKER, call)}" in use["guard"] for use in member["uses"])
    assert HELPER_MODULE in data["consumers"]


def test_helper_with_neutral_parameter_takes_role_from_call_site(tree):
    tree.write(HELPER_MODULE, '"""Neutral helper."""\n\n\ndef share(lm):\n    return lm.neutral_member()\n')
    tree.replace(
        WORKER,
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n",
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n"
        "from .spec_utils_x import share\n",
    )
    add_worker_method(tree, "    def share_probe(self):\n        return share(self.draft_model_runner.model)\n")
    _, data = check_json(tree.root)
    member = protocol_of(data)["neutral_member"]
    assert member["called_at"] == [tree.at(HELPER_MODULE, "lm.neutral_member()")]
    assert member["role"] == "draft"


def test_helper_called_only_from_non_eagle_code_is_not_followed(tree):
    tree.write(HELPER_MODULE, HELPER_SOURCE)
    tree.write(
        "speculative/plain_worker.py",
        '"""A worker with no EAGLE in it."""\n\n'
        "from sglang.srt.speculative.spec_utils_x import share\n\n\n"
        "class PlainWorker:\n"
        "    def probe(self):\n"
        "        return share(self.target_worker.model_runner.model)\n",
    )
    _, data = check_json(tree.root)
    assert "helper_member" not in protocol_of(data)
    assert HELPER_MODULE not in data["consumers"]


PROBE = "self.model.probe_member()"


def test_model_runner_call_inside_eagle_guard_counts(tree):
    tree.replace(
        RUNNER_FILE,
        "        if self.eagle_use_aux_hidden_state:\n",
        f"        if self.eagle_use_aux_hidden_state:\n            {PROBE}\n",
    )
    _, data = check_json(tree.root)
    member = protocol_of(data)["probe_member"]
    assert member["called_at"] == [tree.at(RUNNER_FILE, PROBE)]
    assert member["required"] is True
    assert "eagle_use_aux_hidden_state" in member["uses"][0]["guard"]


@pytest.mark.parametrize("where", ["same_function", "non_eagle_if", "own_method"])
def test_model_runner_call_outside_eagle_guard_does_not_count(tree, where):
    if where == "same_function":
        # __init__ mentions EAGLE (it has the guard), but this line is after the guarded block.
        tree.replace(
            RUNNER_FILE,
            "    # Everything below is ordinary model use",
            f"        {PROBE}\n\n    # Everything below is ordinary model use",
        )
    elif where == "non_eagle_if":
        tree.replace(
            RUNNER_FILE,
            "    # Everything below is ordinary model use",
            f"        if self.model is not None:\n            {PROBE}\n\n    # Everything below is ordinary model use",
        )
    else:
        tree.append(RUNNER_FILE, f"\n    def probe(self):\n        return {PROBE}\n")
    assert tree.line(RUNNER_FILE, PROBE)
    code, data = check_json(tree.root)
    assert code == 1
    assert "probe_member" not in protocol_of(data)
    assert "probe_member" not in data["general_interface"]
    assert names(model_of(data)["missing"]) == KIMI_MISSING


def test_call_in_else_of_negated_eagle_guard_counts(tree):
    tree.append(
        RUNNER_FILE,
        "\n    def maybe_capture(self):\n"
        "        if not self.eagle_use_aux_hidden_state:\n"
        "            return None\n"
        "        else:\n"
        "            return self.model.else_branch_member()\n",
    )
    _, data = check_json(tree.root)
    member = protocol_of(data)["else_branch_member"]
    assert member["called_at"] == [tree.at(RUNNER_FILE, "self.model.else_branch_member()")]


def test_hasattr_and_getattr_decide_required(tree):
    add_worker_method(
        tree,
        "    def probe_optional(self):\n"
        "        model = self.target_worker.model_runner.model\n"
        '        if not hasattr(model, "must_have_x"):\n'
        '            raise RuntimeError("the target model needs must_have_x")\n'
        "        model.must_have_x()\n"
        '        if hasattr(model, "maybe_y"):\n'
        "            model.maybe_y()\n"
        '        size = getattr(model, "maybe_z", None)\n'
        '        return size, getattr(model, "strict_w")\n',
    )
    _, data = check_json(tree.root)
    protocol = protocol_of(data)
    x, y, z, w = (protocol[n] for n in ("must_have_x", "maybe_y", "maybe_z", "strict_w"))
    assert (x["required"], x["kind"]) == (True, "call")
    assert x["called_at"] == [tree.at(WORKER, "model.must_have_x()")]
    assert (y["required"], y["kind"]) == (False, "call")
    assert y["called_at"] == [tree.at(WORKER, "model.maybe_y()")]
    assert (z["required"], z["kind"]) == (False, "attribute")
    assert z["called_at"] == [tree.at(WORKER, 'getattr(model, "maybe_z", None)')]
    assert (w["required"], w["kind"]) == (True, "attribute")
    assert w["called_at"] == [tree.at(WORKER, 'getattr(model, "strict_w")')]
    for member in (x, y, z, w):
        assert member["role"] == "target"


def test_hasattr_optional_member_the_inner_model_has_is_reported_optional(tree):
    add_worker_method(
        tree,
        "    def probe_optional(self):\n"
        "        model = self.target_worker.model_runner.model\n"
        '        if hasattr(model, "get_input_embeddings_for_eagle"):\n'
        "            return model.get_input_embeddings_for_eagle()\n",
    )
    tree.replace(
        "models/deepseek_v2.py",
        "\n\n\nclass DeepseekV3ForCausalLM(",
        "\n\n    def get_input_embeddings_for_eagle(self):\n        return None\n\n\nclass DeepseekV3ForCausalLM(",
    )
    code, data = check_json(tree.root)
    assert code == 1
    assert protocol_of(data)["get_input_embeddings_for_eagle"]["required"] is False
    # probed with hasattr and skipped when absent: a forwarding method that always exists would defeat the
    # probe, so it is neither required nor written
    assert "get_input_embeddings_for_eagle" not in names(model_of(data)["missing"])


def test_extra_consumer_file_counts_only_when_named(tree):
    tree.write(
        "managers/plain.py",
        "class Plain:\n    def probe(self):\n        return self.target_worker.model_runner.model.extra_member()\n",
    )
    _, without = check_json(tree.root)
    assert "extra_member" not in protocol_of(without)
    _, with_it = check_json(tree.root, "--consumer", "managers/plain.py")
    member = protocol_of(with_it)["extra_member"]
    assert member["called_at"] == [tree.at("managers/plain.py", ".extra_member()")]


def test_called_at_is_the_member_line_of_a_multi_line_statement(tree):
    add_worker_method(
        tree,
        "    def multi_line(self):\n"
        "        value = (\n"
        "            self.target_worker.model_runner.model\n"
        "            .multi_line_member()\n"
        "        )\n"
        "        if (\n"
        "            value is not None\n"
        "            and self.target_worker.model_runner.model.cond_member\n"
        "        ):\n"
        "            return value\n",
    )
    _, data = check_json(tree.root)
    protocol = protocol_of(data)
    assert protocol["multi_line_member"]["called_at"] == [tree.at(WORKER, ".multi_line_member()")]
    assert protocol["cond_member"]["called_at"] == [tree.at(WORKER, "model.cond_member")]


def test_fixture_multi_line_condition_call_site(fixture_report):
    _, data = fixture_report
    member = protocol_of(data)["load_lm_head_from_target"]
    line = unique_line(SRT / WORKER, "and self.draft_model_runner.model.load_lm_head_from_target")
    assert member["called_at"] == [f"{WORKER}:{line}"]


# --------------------------------------------------------------------------- 5. roles


def test_roles_follow_the_receiver(tree):
    add_worker_method(
        tree,
        "    def role_probe(self):\n"
        "        self.target_worker.model_runner.model.target_side()\n"
        "        self.draft_model_runner.model.draft_side()\n"
        "        return self.draft_model_runner.model.draft_attr\n",
    )
    _, data = check_json(tree.root)
    protocol = protocol_of(data)
    assert (protocol["target_side"]["role"], protocol["target_side"]["roles"]) == ("target", ["target"])
    assert (protocol["draft_side"]["role"], protocol["draft_side"]["roles"]) == ("draft", ["draft"])
    assert (protocol["draft_attr"]["role"], protocol["draft_attr"]["kind"]) == ("draft", "attribute")
    assert protocol["draft_side"]["called_at"] == [tree.at(WORKER, "model.draft_side()")]


def test_member_used_by_both_roles_counts_as_target(tree):
    add_worker_method(
        tree,
        "    def both(self):\n"
        "        self.draft_model_runner.model.shared_member()\n"
        "        self.target_worker.model_runner.model.shared_member()\n",
    )
    _, data = check_json(tree.root)
    member = protocol_of(data)["shared_member"]
    assert member["roles"] == ["draft", "target"]
    assert member["role"] == "target"


def test_fixture_roles(fixture_report):
    _, data = fixture_report
    protocol = protocol_of(data)
    assert protocol["get_embed_and_head"]["roles"] == ["target"]
    assert protocol["set_eagle3_layers_to_capture"]["roles"] == ["target"]  # aux-hidden-state guards
    for draft in ("set_embed", "hot_token_id", "load_lm_head_from_target"):
        assert protocol[draft]["roles"] == ["draft"], draft


# --------------------------------------------------------------------------- 6. wrapper resolution


def test_gemma_like_resolves_aliased_relative_import():
    code, data = check_json(CHECKOUT, "--model", "gemma_like")
    assert code == 1
    gemma = model_of(data, "GemmaLikeForConditionalGeneration")
    assert gemma["status"] == "fixable"
    [inner] = gemma["inner"]
    assert (inner["attribute"], inner["class"], inner["file"]) == ("language_model", "Gemma3ForCausalLM", "models/gemma3.py")
    assert inner["line"] == unique_line(SRT / "models/gemma3.py", "class Gemma3ForCausalLM(")
    assert inner["conditional"] is True
    assert inner["assigned_at"] == f"models/gemma_like.py:{unique_line(SRT / 'models/gemma_like.py', '= TextModel(')}"
    assert names(gemma["missing"]) == KIMI_MISSING
    for entry in gemma["missing"]:
        line = unique_line(SRT / "models/gemma3.py", "def " + entry["name"] + "(")
        assert entry["defined_at"] == f"models/gemma3.py:{line}"


def test_mistral_like_getattr_is_dynamic():
    code, data = check_json(CHECKOUT, "--model", "mistral_like")
    assert code == 0
    mistral = model_of(data, "MistralLikeForConditionalGeneration")
    assert mistral["status"] == "dynamic"
    assert mistral["missing"] == []
    line = unique_line(SRT / "models/mistral_like.py", "def __getattr__(")
    assert mistral["forwards_dynamically"] == f"__getattr__ at models/mistral_like.py:{line}"
    assert names(mistral["forwarded"]) == KIMI_MISSING


def test_llava_like_is_compliant():
    code, data = check_json(CHECKOUT, "--model", "llava_like")
    assert code == 0
    llava = model_of(data, "LlavaLikeForConditionalGeneration")
    assert llava["status"] == "compliant"
    assert llava["missing"] == []
    assert names(llava["forwarded"]) == KIMI_MISSING
    assert len(llava["forwarded"]) == 3


def test_qwen_backbone_needs_code_and_fails_the_gate():
    code, data = check_json(CHECKOUT, "--model", "qwen_backbone")
    assert code == 1  # the user serves this model: a required hook nobody can write still fails the gate
    qwen = model_of(data, "QwenBackboneWrapper")
    assert qwen["status"] == "needs_code"
    assert qwen["forwarded"] == []
    assert [(i["attribute"], i["class"]) for i in qwen["inner"]] == [("model", "Qwen2Model")]
    assert names(qwen["missing"]) == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    for entry in qwen["missing"]:
        assert entry["required"] is True and entry["fix"] is None
        assert "Qwen2Model" in entry["blocker"]
    assert "Qwen2Model" in qwen["reason"]


def test_explicit_class_selector_matches_default(fixture_report):
    code, data = check_json(CHECKOUT, "--model", f"kimi_k25:{KIMI_CLASS}")
    assert code == 1
    assert data["models"] == fixture_report[1]["models"]


def test_repeated_model_option_reports_each():
    code, data = check_json(CHECKOUT, "-m", "kimi_k25", "-m", "llava_like", "-m", "qwen_backbone")
    assert code == 1
    assert [m["class"] for m in data["models"]] == [KIMI_CLASS, "LlavaLikeForConditionalGeneration", "QwenBackboneWrapper"]
    assert data["summary"]["missing"] == 4  # two required hooks each in kimi_k25 and qwen_backbone
    assert data["summary"]["by_status"] == {"fixable": 1, "compliant": 1, "needs_code": 1}


def test_method_from_in_file_base_class_counts_as_present(tree):
    tree.replace(
        KIMI_FILE,
        f"class {KIMI_CLASS}(nn.Module):\n",
        "class KimiEagleMixin(nn.Module):\n"
        "    def get_embed_and_head(self):\n"
        "        return self.language_model.get_embed_and_head()\n\n\n"
        f"class {KIMI_CLASS}(KimiEagleMixin):\n",
    )
    code, data = check_json(tree.root)
    assert code == 1
    kimi = model_of(data)
    assert kimi["line"] == tree.line(KIMI_FILE, f"class {KIMI_CLASS}(")
    assert names(kimi["forwarded"]) == {"get_embed_and_head"}
    assert names(kimi["missing"]) == KIMI_MISSING - {"get_embed_and_head"}


def test_decorated_definitions_report_the_def_and_class_lines(tree):
    tree.replace(
        "models/deepseek_v2.py",
        "    def set_embed_and_head(self, embed, head):\n",
        "    @no_grad()\n    def set_embed_and_head(self, embed, head):\n",
    )
    tree.replace("models/deepseek_v2.py", "\n\nclass DeepseekV2MLP(", "\n\ndef no_grad():\n    return lambda f: f\n\n\nclass DeepseekV2MLP(")
    tree.replace(KIMI_FILE, f"class {KIMI_CLASS}(", f"@register_model(\n    name=\"kimi\",\n)\nclass {KIMI_CLASS}(")
    tree.replace(KIMI_FILE, "\n\nclass MoonViTStub(", "\n\ndef register_model(**kw):\n    return lambda c: c\n\n\nclass MoonViTStub(")
    code, data = check_json(tree.root)
    assert code == 1
    kimi = model_of(data)
    assert names(kimi["missing"]) == KIMI_MISSING
    assert kimi["line"] == tree.line(KIMI_FILE, f"class {KIMI_CLASS}(")
    entry = next(m for m in kimi["missing"] if m["name"] == "set_embed_and_head")
    assert entry["defined_at"] == tree.at("models/deepseek_v2.py", "def set_embed_and_head(")


def test_wrapper_forwarding_everything_exits_zero(tree):
    tree.replace(
        KIMI_FILE,
        "\n\nEntryClass = ",
        "\n    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head()\n\n"
        "    def set_embed_and_head(self, embed, head):\n        return self.language_model.set_embed_and_head(embed, head)\n\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        return self.language_model.set_eagle3_layers_to_capture(layer_ids)\n\n\nEntryClass = ",
    )
    code, data = check_json(tree.root)
    assert code == 0
    kimi = model_of(data)
    assert kimi["status"] == "compliant"
    assert names(kimi["forwarded"]) == KIMI_MISSING


# --------------------------------------------------------------------------- 7. errors


def _nonexistent(tree: Tree, tmp: Path):
    path = tmp / "no-such-folder"
    return [path], str(path)


def _a_file(tree: Tree, tmp: Path):
    path = tree.path(KIMI_FILE)
    return [path], str(path)


def _no_srt(tree: Tree, tmp: Path):
    folder = tmp / "empty"
    (folder / "python" / "sglang").mkdir(parents=True)
    (folder / "README").write_text("not sglang\n")
    return [folder], str(folder)


def _model_nosuch(tree: Tree, tmp: Path):
    return [tree.root, "--model", "nosuch"], "models/nosuch.py"


def _class_nosuch(tree: Tree, tmp: Path):
    return [tree.root, "--model", "kimi_k25:NoSuchClass"], f"{KIMI_FILE}: has no class NoSuchClass"


def _no_inner(tree: Tree, tmp: Path):
    init_end = "        self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)\n"
    text = tree.text(KIMI_FILE)
    start = text.index("        vision_config = getattr(config")
    tree.write(KIMI_FILE, text[:start] + "        self.hidden = 8\n" + text[text.index(init_end) + len(init_end) :])
    return [tree.root], f"{KIMI_FILE}: "


BROKEN_LINE = "        features = = self.vision_tower(pixel_values)\n"


def _break_wrapper(tree: Tree) -> int:
    """A syntax error inside the wrapper class; returns its line."""
    tree.replace(KIMI_FILE, "        return self.mm_projector(self.vision_tower(pixel_values))\n", BROKEN_LINE)
    return tree.line(KIMI_FILE, BROKEN_LINE.strip())


def _syntax_error(tree: Tree, tmp: Path):
    _break_wrapper(tree)
    return [tree.root], f"{KIMI_FILE}:"  # the exact line: test_syntax_error_names_the_offending_line


def _not_utf8(tree: Tree, tmp: Path):
    path = tree.path(KIMI_FILE)
    data = path.read_bytes()
    marker = b"like the real 0.5.9"
    assert data.count(marker) == 1
    line = data[: data.index(marker)].count(b"\n") + 1
    path.write_bytes(data.replace(marker, b"like the r\xe9al 0.5.9"))
    return [tree.root], f"{KIMI_FILE}:{line}: "


def _no_consumers(tree: Tree, tmp: Path):
    shutil.rmtree(tree.path("speculative"))
    shutil.rmtree(tree.path("model_executor"))
    return [tree.root], "no EAGLE-3 consumer code"


def _consumer_missing(tree: Tree, tmp: Path):
    return [tree.root, "--consumer", "speculative/nope.py"], "speculative/nope.py"


ERROR_CASES = {
    "nonexistent-path": _nonexistent,
    "path-is-a-file": _a_file,
    "no-sglang-srt": _no_srt,
    "model-nosuch": _model_nosuch,
    "class-nosuch": _class_nosuch,
    "syntax-error-in-wrapper": _syntax_error,
    "wrapper-not-utf8": _not_utf8,
    "no-eagle-consumers": _no_consumers,
    "consumer-not-a-file": _consumer_missing,
}


@pytest.mark.parametrize("case", list(ERROR_CASES), ids=list(ERROR_CASES))
def test_errors_exit_2_with_one_line_and_touch_nothing(tree, tmp_path, case):
    args, names_file = ERROR_CASES[case](tree, tmp_path)
    before = snapshot(tmp_path)
    for fmt in ("table", "json", "github"):
        result = run(*args, "--format", fmt)
        assert result.exit_code == 2, (case, fmt, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("eaglepatch: error: ")
        assert names_file in lines[0], lines[0]
        if fmt == "json":  # the error as a document too, for the script reading stdout
            assert json.loads(result.stdout) == {"schema": 2, "error": lines[0].removeprefix("eaglepatch: error: "), "exit_code": 2}
        else:
            assert result.stdout == ""
    assert snapshot(tmp_path) == before


def test_bad_model_on_bundled_fixture_touches_nothing():
    before = snapshot(FIXTURES)
    result = run(CHECKOUT, "--model", "nosuch")
    assert result.exit_code == 2
    assert result.stderr.startswith("eaglepatch: error: models/nosuch.py: ")
    assert snapshot(FIXTURES) == before


def test_successful_check_touches_nothing(tree, tmp_path):
    before = snapshot(tmp_path)
    assert run(tree.root).exit_code == 1
    assert run(tree.root, "--format", "github").exit_code == 1
    assert snapshot(tmp_path) == before


def test_non_utf8_consumer_is_an_error_until_left_out(tree):
    path = tree.path("speculative/eagle_utils.py")
    path.write_bytes(path.read_bytes().replace(b"Helpers shared", b"Helpers sh\xe4red"))
    result = run(tree.root)
    assert result.exit_code == 2
    assert result.stderr.startswith("eaglepatch: error: speculative/eagle_utils.py:") and "UTF-8" in result.stderr
    code, data = check_json(tree.root, "--exclude", "speculative/eagle_utils.py")
    assert code == 1
    assert any("speculative/eagle_utils.py" in w and "--exclude" in w for w in data["warnings"])


def test_syntax_error_names_the_offending_line(tree):
    line = _break_wrapper(tree)
    result = run(tree.root)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"eaglepatch: error: {KIMI_FILE}:{line}: is not valid Python")


def test_syntax_error_outside_wrapper_class_is_an_error(tree):
    tree.append(KIMI_FILE, "\n\ndef broken(:\n    pass\n")
    result = run(tree.root)
    assert result.exit_code == 2
    assert f"{KIMI_FILE}:{tree.line(KIMI_FILE, 'def broken(:')}" in result.stderr


def test_class_holding_no_model_is_listed_needs_code_not_an_error(tree, tmp_path):
    args, _ = _no_inner(tree, tmp_path)
    code, data = check_json(*args)
    assert code == 1
    kimi = model_of(data)
    assert (kimi["status"], kimi["inner"]) == ("needs_code", [])
    assert names(kimi["missing"]) == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert all("neither defines it nor holds a model" in m["blocker"] for m in kimi["missing"])


def test_wrapper_without_language_model_is_not_clean(tree):
    tree.replace(
        KIMI_FILE,
        "        self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)\n",
        "        self.language_model = None\n",
    )
    result = run(tree.root)
    assert result.exit_code != 0


# --------------------------------------------------------------------------- 8. GitHub annotations


def test_github_format_annotates_each_missing_member_on_class_line(tree, monkeypatch):
    monkeypatch.chdir(tree.root)
    result = run(tree.root, "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    errors = [line for line in lines if line.startswith("::error file=")]
    assert len(errors) == 2  # the required hooks; the companion is a notice
    companions = [line for line in lines if line.startswith("::notice file=")]
    assert len(companions) == 1 and "missing set_embed_and_head" in companions[0]
    class_line = tree.line(KIMI_FILE, f"class {KIMI_CLASS}(")
    seen = set()
    for line in errors:
        props, _, message = line[len("::error ") :].partition("::")
        fields = dict(p.split("=", 1) for p in props.split(","))
        assert (tree.root / fields["file"]).resolve() == tree.path(KIMI_FILE).resolve()
        assert fields["line"] == str(class_line)
        member = fields["title"].removeprefix("eaglepatch%3A missing ")
        seen.add(member)
        assert f"does not forward {member}()" in message
    assert seen == KIMI_MISSING - {"set_embed_and_head"}
    assert lines[-1].startswith("::notice ")
    assert "2 required member(s) missing, 3 apply can write" in lines[-1]


def test_github_format_path_resolves_from_repo_cwd(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    result = run(CHECKOUT, "--format", "github")
    assert result.exit_code == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 2
    expected_line = unique_line(SRT / KIMI_FILE, f"class {KIMI_CLASS}(")
    for line in errors:
        assert line.startswith(f"::error file=fixtures/checkout/python/sglang/srt/{KIMI_FILE},line={expected_line},")


def test_github_format_clean_model_has_no_error(tree):
    result = run(tree.root, "--format", "github", "--model", "llava_like")
    assert result.exit_code == 0
    assert "::error" not in result.stdout
    assert result.stdout.splitlines()[-1].startswith("::notice ")


# --------------------------------------------------------------------------- end to end


def _subprocess(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "eaglepatch", "check", *map(str, args)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )


def test_end_to_end_json(fixture_report):
    proc = _subprocess(CHECKOUT, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert names(model_of(data)["missing"]) == KIMI_MISSING
    assert _comparable(data) == _comparable(fixture_report[1])


def test_end_to_end_error(tmp_path):
    proc = _subprocess(tmp_path / "missing")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"eaglepatch: error: {tmp_path / 'missing'}: does not exist")


# --------------------------------------------------------------------------- nothing unread passes the gate


@pytest.mark.parametrize("output_format", ["table", "json", "github", "sarif"])
def test_all_stops_on_a_listed_module_that_does_not_parse(tree, output_format):
    """`check --all` once listed the broken file's class as fixable and exited 1, as if it had read it."""
    tree.append("models/gemma_like.py", "\n\ndef broken(:\n    pass\n")
    result = run(tree.root, "--all", "--format", output_format)
    assert result.exit_code == 2
    line = tree.line("models/gemma_like.py", "def broken(:")
    assert f"models/gemma_like.py:{line}: is not valid Python" in result.stderr
    assert "--exclude models/gemma_like.py" in result.stderr


def test_all_names_every_module_that_does_not_parse(tree):
    tree.append("models/gemma_like.py", "\n\ndef broken(:\n    pass\n")
    tree.append("models/olmo_like.py", "\n\nclass Broken(\n")
    result = run(tree.root, "--all")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("eaglepatch: error: ")]
    assert [e.split(": ")[2].split(":")[0] for e in errors] == ["models/gemma_like.py", "models/olmo_like.py"], result.stderr


def test_an_excluded_module_is_not_listed(tree):
    tree.append("models/gemma_like.py", "\n\ndef broken(:\n    pass\n")
    code, data = check_json(tree.root, "--all", "--exclude", "models/gemma_like.py")
    assert code == 1
    assert "GemmaLikeForConditionalGeneration" not in {m["class"] for m in data["models"]}
    assert "LlavaLikeForConditionalGeneration" in {m["class"] for m in data["models"]}
    assert any("models/gemma_like.py" in w and "--exclude" in w for w in data["warnings"])


def test_a_base_module_that_does_not_parse_stops_the_gate(tree):
    """A module no EntryClass names, read only for the base class a listed wrapper inherits from."""
    tree.path("models/base_only.py").write_text(
        "class BaseOnly:\n    def get_embed_and_head(self):\n        return None\n\n\ndef broken(:\n    pass\n", encoding="utf-8"
    )
    tree.path("models/sub_wrapper.py").write_text(
        "from sglang.srt.models.base_only import BaseOnly\n\n\nclass SubWrapper(BaseOnly):\n    pass\n\n\nEntryClass = [SubWrapper]\n",
        encoding="utf-8",
    )
    for args in (["--all"], ["--model", "sub_wrapper"]):
        result = run(tree.root, *args)
        assert result.exit_code == 2, (args, result.output)
        assert "models/base_only.py:6: is not valid Python" in result.stderr, (args, result.stderr)


def test_an_excluded_inner_module_is_not_read_and_the_class_says_so(tree):
    """Left out means not read at all: a wrapper whose inner model lives there is unresolved, naming it."""
    tree.append("models/deepseek_v2.py", "\n\ndef broken(:\n    pass\n")
    code, data = check_json(tree.root, "--exclude", "models/deepseek_v2.py")
    assert code == 1
    (kimi,) = data["models"]
    assert kimi["status"] == "unresolved"
    assert all(m["fix"] is None and "models/deepseek_v2.py" in m["blocker"] and "not read" in m["blocker"] for m in kimi["missing"])
    assert run(tree.root).exit_code == 2  # without the exclusion the broken inner module stops the gate
