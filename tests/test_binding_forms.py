"""Binding forms (issue 24, part 5): every way a class can hold its model, and every class body
shape, reads the same in `check` as in what `diff`/`apply` write.

* the wrapper finder, as a (statement in `__init__`, what it holds) table: `setattr(self, "<name>", ...)`,
  `self.add_module("<name>", ...)`, tuple, nested and starred targets; what cannot be followed is
  `unresolved`, naming the construct and file:line, never "holds no model";
* the class index: a class imported in `try:` with a same-named stub under `except ImportError:`
  is the imported one (the `try` binding is what runs);
* the writer, as a (source, expected) table: a one-line class body (`class B(A): pass`,
  `class B(A): x = 1; y = 2`) becomes the indented block black would lay out, members appended;
* the CLI on a copy of the bundled checkout: `check` says fixable exactly where `apply` writes, and
  the written code imports and forwards to the model held.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import black
import libcst as cst
import pytest
from helpers import write_srt_tree
from libcst.codemod import CodemodContext
from typer.testing import CliRunner

from eaglepatch.analyze.class_index import ClassIndex
from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.wrappers import WrapperFinder
from eaglepatch.cli import app
from eaglepatch.codemods.add_delegations import Delegation
from eaglepatch.codemods.remove_delegations import RemoveDelegations
from eaglepatch.engines import locate_tree
from eaglepatch.read.expressions import parse_value
from eaglepatch.read.text import decode_source
from eaglepatch.records import Protocol
from eaglepatch.rewrite.edits import apply_codemod

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKOUT = REPO_ROOT / "fixtures" / "checkout"
NO_PROTOCOL = Protocol(members={}, consumers=[], general_interface={})

INNER = """\
from torch import nn


class DeepseekV2Model(nn.Module):
    pass


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = DeepseekV2Model(config)
        self.lm_head = nn.Linear(8, 8)

    def get_embed_and_head(self):
        pass


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
"""
WRAPPER_HEAD = """\
from torch import nn

from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM


def build_parts(config):
    return None, DeepseekV3ForCausalLM(config)


class WForConditionalGeneration(nn.Module):
    def __init__(self, config, extras=()):
        super().__init__()
"""
WRAPPER_LINE = WRAPPER_HEAD.count("\n") + 1  # the line of the statement under test

V3 = {"language_model": ["DeepseekV3ForCausalLM"]}

# (statement in __init__, attribute -> classes held, unresolved (attribute, why) pairs)
FORMS = [
    pytest.param('setattr(self, "language_model", DeepseekV3ForCausalLM(config))', V3, [], id="setattr-literal"),
    pytest.param('self.add_module("language_model", DeepseekV3ForCausalLM(config))', V3, [], id="add_module"),
    pytest.param('self.add_module(name="language_model", module=DeepseekV3ForCausalLM(config))', V3, [], id="add_module-keywords"),
    pytest.param("self.proj, self.language_model = None, DeepseekV3ForCausalLM(config)", V3, [], id="tuple"),
    pytest.param("[self.proj, self.language_model] = (None, DeepseekV3ForCausalLM(config))", V3, [], id="list-target"),
    pytest.param("(self.proj, self.language_model), self.n = (None, DeepseekV3ForCausalLM(config)), 2", V3, [], id="nested"),
    pytest.param("self.proj, self.language_model = (\n    None,\n    DeepseekV3ForCausalLM(config),\n)", V3, [], id="over-lines"),
    pytest.param("*self.rest, self.language_model = None, None, DeepseekV3ForCausalLM(config)", V3, [], id="starred-other-target"),
    pytest.param(
        "self.language_model = self.lm = DeepseekV3ForCausalLM(config)",
        {"language_model": ["DeepseekV3ForCausalLM"], "lm": ["DeepseekV3ForCausalLM"]},
        [],
        id="chained",
    ),
    pytest.param("self.language_model, *self.rest = DeepseekV3ForCausalLM(config), *extras", V3, [], id="starred-value-after"),
    pytest.param("self.proj, self.language_model = build_parts(config)", V3, [], id="unpacked-from-a-helper"),
    pytest.param(
        "self.proj, self.language_model = REGISTRY[config.arch](config)",
        {"language_model": []},
        [("language_model", "self.language_model is one of the values of REGISTRY[config.arch](config), which one is not followed")],
        id="unpacked-from-a-call-not-followed",
    ),
    pytest.param(
        "self.proj, *self.language_model = None, DeepseekV3ForCausalLM(config)",
        {"language_model": []},
        [("language_model", "self.language_model is a starred target: it holds a list of DeepseekV3ForCausalLM, not the model")],
        id="starred-target-holds-a-list",
    ),
]


def _finder(root: Path) -> WrapperFinder:
    tree = locate_tree(root)
    return WrapperFinder(ClassIndex(RunContext.fresh(tree)))


@pytest.mark.parametrize("statement, held, unresolved", FORMS)
def test_binding_forms_hold_the_model(tmp_path, statement, held, unresolved):
    body = textwrap.indent(statement, " " * 8) + "\n"
    root = write_srt_tree(tmp_path, {"models/deepseek_v2.py": INNER, "models/w.py": WRAPPER_HEAD + body})
    finder = _finder(root)
    inners = finder.inner_models(finder.cache.read(finder.tree.srt / "models/w.py"), "WForConditionalGeneration", NO_PROTOCOL)
    assert {i.attribute: [c.name for c in i.classes] for i in inners} == held
    got = [(i.attribute, u.why) for i in inners for u in i.unresolved]
    assert got == unresolved
    for inner in inners:
        assert (inner.file, inner.line) == ("models/w.py", WRAPPER_LINE)
        for record in inner.unresolved:  # the construct as written, on one line, and where it is
            assert record.at == f"models/w.py:{WRAPPER_LINE}"
            assert record.construct == " ".join(statement.split()).replace("( ", "(").replace(", )", ")")


def test_an_unpacked_method_return_or_local_is_followed(tmp_path):
    """`self.proj, self.language_model = self._build(config)` and `... = parts`: the element the attribute gets."""
    wrapper = (
        "from torch import nn\n\nfrom sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM\n\n\n"
        "class ByMethodForConditionalGeneration(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        self.language_model, self.proj = self._build(config)\n\n"
        "    def _build(self, config):\n"
        "        if config.tiny:\n"
        "            return DeepseekV3ForCausalLM(config), None\n"
        "        return DeepseekV3ForCausalLM(config.text_config), nn.Linear(8, 8)\n\n\n"
        "class ByLocalForConditionalGeneration(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        parts = (None, DeepseekV3ForCausalLM(config))\n"
        "        self.proj, self.language_model = parts\n"
    )
    root = write_srt_tree(tmp_path, {"models/deepseek_v2.py": INNER, "models/w.py": wrapper})
    finder = _finder(root)
    source = finder.cache.read(finder.tree.srt / "models/w.py")
    for name, line in (("ByMethodForConditionalGeneration", 9), ("ByLocalForConditionalGeneration", 21)):
        inners = finder.inner_models(source, name, NO_PROTOCOL)
        assert [(i.attribute, [c.name for c in i.classes], i.line, i.unresolved) for i in inners] == [
            ("language_model", ["DeepseekV3ForCausalLM"], line, ())
        ], name


def test_a_tuple_bound_member_is_a_member_of_the_class(tmp_path):
    """`self.layers, self.start_layer, self.end_layer = make_pp_layers(...)`: the class has `layers`."""
    body = "        self.layers, self.start, self.end = make_pp_layers(config)\n        setattr(self, 'norm', None)\n"
    root = write_srt_tree(tmp_path, {"models/deepseek_v2.py": INNER, "models/w.py": WRAPPER_HEAD + body})
    finder = _finder(root)
    info = finder.index.class_info(finder.cache.read(finder.tree.srt / "models/w.py"), "WForConditionalGeneration")
    assert info is not None
    assert {"layers", "start", "end", "norm"} <= set(info.members)
    assert info.members["layers"].line == WRAPPER_LINE


# --------------------------------------------------------------------------- try / except ImportError

TRY_CASES = [
    # (module header, the name __init__ builds, the file and class it resolves to)
    pytest.param(
        "try:\n    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM\n"
        "except ImportError:\n    class DeepseekV3ForCausalLM(nn.Module):\n        pass\n",
        "DeepseekV3ForCausalLM",
        ("models/deepseek_v2.py", "DeepseekV3ForCausalLM"),
        id="same-name-stub",
    ),
    pytest.param(
        "try:\n    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM as Inner\n"
        "except (ImportError, ModuleNotFoundError):  # optional\n    class Inner(nn.Module):\n        pass\n",
        "Inner",
        ("models/deepseek_v2.py", "DeepseekV3ForCausalLM"),
        id="aliased-import-stub",
    ),
    pytest.param(
        "try:\n    import flash_attn\nexcept ImportError:\n    class Inner(nn.Module):\n        pass\n",
        "Inner",
        ("models/w.py", "Inner"),
        id="a-stub-nothing-imports-is-the-class",
    ),
]


@pytest.mark.parametrize("header, name, expected", TRY_CASES)
def test_the_try_binding_is_what_runs(tmp_path, header, name, expected):
    wrapper = (
        "from torch import nn\n\n" + header + "\n\n"
        "class WForConditionalGeneration(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        f"        self.language_model = {name}(config)\n"
    )
    root = write_srt_tree(tmp_path, {"models/deepseek_v2.py": INNER, "models/w.py": wrapper})
    finder = _finder(root)
    source = finder.cache.read(finder.tree.srt / "models/w.py")
    found = finder.index.find_class(source, parse_value(name))
    assert found is not None and (found[0].rel, found[1]) == expected
    if expected[0] != "models/w.py":
        inners = finder.inner_models(source, "WForConditionalGeneration", NO_PROTOCOL)
        assert {i.attribute: [(c.file, c.name) for c in i.classes] for i in inners} == {"language_model": [expected]}


# --------------------------------------------------------------------------- the writer on one-line bodies

GET = Delegation("get_embed_and_head", "language_model", params=cst.parse_statement("def f(self): pass\n").params)
GET_TEXT = '''\
    # eaglepatch: forwards to self.language_model
    def get_embed_and_head(self):
        """Forward to ``self.language_model`` (EAGLE-3 speculative decoding)."""
        inner = self.language_model
        if inner is None or not hasattr(inner, "get_embed_and_head"):
            raise AttributeError(
                f"{self.__class__.__name__}.language_model has no get_embed_and_head"
            )
        return inner.get_embed_and_head()
'''
# (one-line class, what apply writes, what revert leaves: the block, as black lays it out)
ONE_LINE_CASES = [
    pytest.param("class B(A): pass\n", "class B(A):\n" + GET_TEXT, "class B(A):\n    pass\n", id="pass"),
    pytest.param("class B(A): ...\n", "class B(A):\n" + GET_TEXT, "class B(A):\n    pass\n", id="ellipsis"),
    pytest.param(
        "class B(A): pass  # noqa: D101\n",
        "class B(A):  # noqa: D101\n" + GET_TEXT,
        "class B(A):  # noqa: D101\n    pass\n",
        id="pass-with-a-comment",
    ),
    pytest.param(
        "class B(A): x = 1; y = 2\n", "class B(A):\n    x = 1\n    y = 2\n\n" + GET_TEXT, "class B(A):\n    x = 1\n    y = 2\n", id="two-statements"
    ),
    pytest.param("class B(A): x = 1; pass;\n", "class B(A):\n    x = 1\n\n" + GET_TEXT, "class B(A):\n    x = 1\n", id="trailing-semicolon"),
    pytest.param("class B(\n    A,\n): pass\n", "class B(\n    A,\n):\n" + GET_TEXT, "class B(\n    A,\n):\n    pass\n", id="header-over-lines"),
    pytest.param(
        "class B(A): get_embed_and_head = None\n",
        "class B(A): get_embed_and_head = None\n",
        "class B(A): get_embed_and_head = None\n",
        id="member-bound-there-is-kept",
    ),
]


def _apply(text: str) -> str:
    source = decode_source(Path("models/m.py"), "models/m.py", text.encode())
    return apply_codemod(source, {"B": [GET]}).updated.decode()


def _revert(text: str) -> str:
    return cst.parse_module(text).visit(RemoveDelegations(CodemodContext())).code


@pytest.mark.parametrize("source, expected, reverted", ONE_LINE_CASES)
def test_a_one_line_class_body_is_written_as_a_block(source, expected, reverted):
    head = "class A:\n    pass\n\n\n"
    after = _apply(head + source)
    assert after == head + expected
    if after != head + source:
        assert black.format_str(after, mode=black.Mode()) == after  # what black leaves as it is
    assert _apply(after) == after  # idempotent
    back = _revert(after)  # every member written goes, the block stays: the class means what it did
    assert back == head + reverted
    if back != head + source:
        assert black.format_str(back, mode=black.Mode()) == back


def test_check_sees_what_a_one_line_body_binds(tmp_path):
    """`class B(A): get_embed_and_head = None`: check counts the member, as the writer does."""
    files = {
        "models/deepseek_v2.py": INNER,
        "models/w.py": "from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM\n\n\n"
        "class WForConditionalGeneration(DeepseekV3ForCausalLM): get_embed_and_head = None; hot = 1\n",
    }
    finder = _finder(write_srt_tree(tmp_path, files))
    info = finder.index.class_info(finder.cache.read(finder.tree.srt / "models/w.py"), "WForConditionalGeneration")
    assert info is not None
    assert info.members["get_embed_and_head"].owner == "WForConditionalGeneration"
    assert info.members["hot"].kind == "attribute"


# --------------------------------------------------------------------------- the CLI: check agrees with apply

CLI_WRAPPERS = '''\
"""Wrappers holding their model through binding forms other than `self.x = ...`."""

from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
from sglang.srt.utils import nn

try:
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM as TextModel
except ImportError:
    class TextModel(nn.Module):
        pass


class Holder(nn.Module):
    def add_module(self, name, module):
        setattr(self, name, module)


class SetattrForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        setattr(self, "language_model", DeepseekV3ForCausalLM(config.text_config))


class AddModuleForConditionalGeneration(Holder):
    def __init__(self, config):
        super().__init__()
        self.add_module("language_model", DeepseekV3ForCausalLM(config.text_config))


class TupleForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj, self.language_model = None, DeepseekV3ForCausalLM(config.text_config)


class StubbedForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = TextModel(config.text_config)


class OneLineBase(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = DeepseekV3ForCausalLM(config.text_config)


class OneLineForConditionalGeneration(OneLineBase): pass


class OneLineAttrsForConditionalGeneration(OneLineBase): x = 1; y = 2


EntryClass = [
    SetattrForConditionalGeneration,
    AddModuleForConditionalGeneration,
    TupleForConditionalGeneration,
    StubbedForConditionalGeneration,
    OneLineForConditionalGeneration,
    OneLineAttrsForConditionalGeneration,
]
'''
CLI_CLASSES = [
    "SetattrForConditionalGeneration",
    "AddModuleForConditionalGeneration",
    "TupleForConditionalGeneration",
    "StubbedForConditionalGeneration",
    "OneLineForConditionalGeneration",
    "OneLineAttrsForConditionalGeneration",
]
HOOKS = {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}

FORWARD_SCRIPT = r'''
import importlib, sys, types
sys.path.insert(0, sys.argv[1])
module = importlib.import_module("sglang.srt.models.binding_forms")
N = types.SimpleNamespace
for name in sys.argv[2:]:
    cls = getattr(module, name)
    w = cls(N(text_config=N(num_hidden_layers=8, hidden_size=8, vocab_size=32)))
    inner = w.language_model
    assert type(inner).__name__ == "DeepseekV3ForCausalLM", (name, type(inner))
    assert w.get_embed_and_head() == inner.get_embed_and_head(), name
    w.set_eagle3_layers_to_capture([1, 2])
    assert inner.model.layers_to_capture == [2, 3], (name, inner.model.layers_to_capture)
    print(name, "forwards")
print("OK")
'''


def _cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _models(root: Path) -> dict[str, dict]:
    result = _cli("check", root, "--all", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return {m["class"]: m for m in json.loads(result.stdout)["models"] if m["file"] == "models/binding_forms.py"}


def test_check_calls_fixable_what_apply_writes_and_the_code_forwards(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(CHECKOUT, root)
    target = root / "python/sglang/srt/models/binding_forms.py"
    target.write_text(CLI_WRAPPERS)
    before = _models(root)
    for name in CLI_CLASSES:
        model = before[name]
        assert model["status"] == "fixable", (name, model["reason"])
        assert [i["attribute"] for i in model["inner"]] == ["language_model"], name
        assert {i["class"] for i in model["inner"]} == {"DeepseekV3ForCausalLM"}, name
        assert {m["name"] for m in model["missing"]} == HOOKS, name
        assert all(m["fix"] == {"kind": "delegate", "to": "language_model"} for m in model["missing"]), name

    result = _cli("apply", root, "--all")
    assert result.exit_code == 1 and "still missing" in result.output, result.output  # the checkout's needs_code class
    assert not any(name in line for line in result.output.split("still missing", 1)[1].splitlines() for name in CLI_CLASSES)
    written = target.read_text()
    tree = ast.parse(written)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in CLI_CLASSES:
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            assert HOOKS <= methods, (node.name, methods)
    assert "class OneLineForConditionalGeneration(OneLineBase):\n    # eaglepatch: forwards to self.language_model\n" in written
    assert "class OneLineAttrsForConditionalGeneration(OneLineBase):\n    x = 1\n    y = 2\n\n    # eaglepatch:" in written

    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", FORWARD_SCRIPT, str(root / "python"), *CLI_CLASSES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr

    after = _models(root)
    assert {name: after[name]["status"] for name in CLI_CLASSES} == dict.fromkeys(CLI_CLASSES, "compliant")
    assert _cli("diff", root, "--all").stdout.count("binding_forms.py") == 0  # nothing left to write there

    assert _cli("revert", root).exit_code == 0
    reverted = target.read_text()
    assert "eaglepatch" not in reverted  # every member apply wrote went, the one-line bodies' first ones too
    assert "class OneLineForConditionalGeneration(OneLineBase):\n    pass\n" in reverted
    assert {name: m["status"] for name, m in _models(root).items()} == {name: before[name]["status"] for name in CLI_CLASSES}
