"""Issue 24's invariant over generated class shapes (hypothesis, fast tier): the members `check` lists
with a fix are the members the wrapper lacks, and exactly what `diff` adds and `apply` writes; after
`apply` the patched module compiles and `check` finds no fixable gap left.

Each example is a small SGLang-like tree (the shape of fixtures/checkout) in a fresh folder:

* ``sglang/srt/model_executor/model_runner.py`` calls ``set_eagle3_layers_to_capture`` on its model
  under the aux-hidden-state guard, ``speculative/eagle_worker.py`` calls ``get_embed_and_head`` on the
  target and ``set_embed_and_head`` on the draft: the three hooks, all of which a target must have.
* ``models/inner.py``: ``InnerForCausalLM``, which has the three hooks (an ``EntryClass``, compliant).
* ``models/wrapper.py``: ``WrapperForConditionalGeneration``, the ``EntryClass``, which holds the inner
  model under an attribute name drawn from a few, bound one of several ways (``BINDINGS``), with a body
  whose shape varies: a docstring, decorators on the class, a comment on its header, hooks and other
  members it has already, comments between and after them, a nested class that defines a hook of its
  own (not the wrapper's), a body of ``pass``, ``...`` or a docstring alone over a base that binds the
  model, two indents.

The CLI runs in-process (typer's CliRunner): ``check --all --format json``, ``diff --all``, ``apply
--all``, ``check --all --format json`` again; the three sets are read as in tests/invariant.py.

The binding forms issue 24 item 5 taught the readers (tuple assignment, ``setattr``, ``add_module``, a
one-line ``class W(Base): pass``) are among the generated ones; they were strict xfails until it landed.
A model bound in a method ``__init__`` calls is not read yet: ``test_known_binding_forms``, a strict xfail,
flips when it is.
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from invariant import added_members, apply_exit_code, apply_patch, check_fixes, disagreement, srt_relative
from typer.testing import CliRunner

from eaglepatch.cli import app

WRAPPER = "WrapperForConditionalGeneration"
WRAPPER_FILE = "models/wrapper.py"
HOOKS = ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture")
ATTRIBUTES = ("language_model", "model", "llm", "text_model", "lm")
# how __init__ (or what it reaches) binds the inner model to self.<attribute>
BINDINGS = (
    "plain", "annotated", "conditional", "method_returns", "function_returns", "base_init", "inherited_init",
    "tuple", "setattr", "add_module", "one_line",  # issue 24 item 5
    "helper_assigns",  # `__init__` calls a method of the class that binds it (found by this test)
)
# a body with no members of its own, over a base class (in the file) that binds the model
EMPTY_BODIES = ("pass", "ellipsis", "docstring")

RUNNER = CliRunner()


@dataclass(frozen=True)
class Shape:
    attribute: str
    binding: str  # one of BINDINGS
    empty_body: str | None  # with binding inherited_init or one_line: one of EMPTY_BODIES (None: members of its own)
    own_hooks: tuple[str, ...]  # hooks the wrapper already has (hand-written delegations)
    docstring: bool
    decorators: tuple[str, ...]
    header_comment: bool
    extras: tuple[str, ...]  # "forward", "property", "class_attr", "nested", "comment_between", "comment_last"
    indent: str

    @property
    def lacking(self) -> set[str]:
        return set(HOOKS) - set(self.own_hooks)


@st.composite
def shapes(draw, bindings=BINDINGS) -> Shape:
    binding = draw(st.sampled_from(bindings))
    empty_body = None
    if binding == "inherited_init":
        empty_body = draw(st.sampled_from((None, *EMPTY_BODIES)))
    elif binding == "one_line":  # `class W(Base): pass`, `: ...` or `: """doc"""`
        empty_body = draw(st.sampled_from(EMPTY_BODIES))
    own_hooks: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    if empty_body is None and binding != "one_line":
        own_hooks = tuple(h for h in HOOKS if draw(st.booleans()) and draw(st.booleans()))  # mostly lacking
        extras = tuple(draw(st.lists(st.sampled_from(("forward", "property", "class_attr", "nested", "comment_between", "comment_last")), unique=True, max_size=4)))
    return Shape(
        attribute=draw(st.sampled_from(ATTRIBUTES)),
        binding=binding,
        empty_body=empty_body,
        own_hooks=own_hooks,
        docstring=empty_body is None and binding != "one_line" and draw(st.booleans()),
        decorators=tuple(draw(st.lists(st.sampled_from(("@register", '@register_as("wrapper")')), unique=True, max_size=2))),
        header_comment=binding != "one_line" and draw(st.booleans()),
        extras=extras,
        indent=draw(st.sampled_from(("    ", "  "))),
    )


# --------------------------------------------------------------------------- the tree

NN = '''\
"""Stand-in for torch.nn."""


class Module:
    def __init__(self):
        pass

    def add_module(self, name, module):
        setattr(self, name, module)
'''

MODEL_RUNNER = '''\
"""Owns the model; turns EAGLE-3 aux-hidden-state capture on when asked."""


class ModelRunner:
    def __init__(self, model, spec_algorithm, layer_ids=None):
        self.model = model
        self.eagle_use_aux_hidden_state = spec_algorithm.is_eagle3()
        if self.eagle_use_aux_hidden_state:
            self.model.set_eagle3_layers_to_capture(layer_ids)
'''

EAGLE_WORKER = '''\
"""EAGLE-3 worker: wires the draft model to the target model."""


class EAGLEWorker:
    def __init__(self, target_worker, draft_model_runner):
        self.target_worker = target_worker
        self.draft_model_runner = draft_model_runner
        embed, head = self.target_worker.model_runner.model.get_embed_and_head()
        self.draft_model_runner.model.set_embed_and_head(embed, head)
'''

INNER = '''\
"""The causal LM the wrapper holds: it has every hook."""

from typing import List, Optional

from sglang.srt.utils import nn


class InnerForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = self.head = None
        self.layers = []
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch):
        hidden_states = input_ids
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(positions, hidden_states, forward_batch)
        return self.logits_processor(input_ids, hidden_states, self.head, forward_batch, aux_hidden_states)

    def get_embed_and_head(self):
        return self.embed, self.head

    def set_embed_and_head(self, embed, head):
        self.embed, self.head = embed, head

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        self.layers_to_capture = list(layer_ids or [])


EntryClass = InnerForCausalLM
'''


def _bind(shape: Shape) -> list[str]:
    """The lines (at depth 0) that bind self.<attribute> in an __init__."""
    a = shape.attribute
    return {
        "plain": [f"self.{a} = InnerForCausalLM(config)"],
        "annotated": [f"self.{a}: InnerForCausalLM = InnerForCausalLM(config)"],
        "conditional": [
            'if getattr(config, "text_config", None) is not None:',
            f"{{i}}self.{a} = InnerForCausalLM(config.text_config)",
            "else:",
            f"{{i}}self.{a} = InnerForCausalLM(config)",
        ],
        "method_returns": [f"self.{a} = self._build_{a}(config)"],
        "function_returns": [f"self.{a} = build_{a}(config)"],
        "helper_assigns": [f"self._init_{a}(config)"],
        "tuple": [f"self.{a}, self.vision_tower = InnerForCausalLM(config), None"],
        "setattr": [f'setattr(self, "{a}", InnerForCausalLM(config))'],
        "add_module": [f'self.add_module("{a}", InnerForCausalLM(config))'],
    }[shape.binding]


def wrapper_source(shape: Shape) -> str:
    i = shape.indent
    out: list[str] = ['"""A multimodal wrapper (generated)."""', "", "from sglang.srt.models.inner import InnerForCausalLM", "from sglang.srt.utils import nn", "", ""]
    if shape.decorators:
        out += ["def register(cls):", f"{i}return cls", "", "", "def register_as(name):", f"{i}return register", "", ""]

    def init(binding_lines: list[str], depth: int, call_super: str = "super().__init__()") -> list[str]:
        lines = [f"{i * depth}def __init__(self, config, quant_config=None):", f"{i * (depth + 1)}{call_super}"]
        lines += [f"{i * (depth + 1)}{line.format(i=i)}" for line in binding_lines]
        return lines

    if shape.binding == "function_returns":
        out += [f"def build_{shape.attribute}(config):", f"{i}return InnerForCausalLM(config)", "", ""]
    base = "nn.Module"
    if shape.binding in ("base_init", "inherited_init", "one_line"):  # a base in the file binds the model
        out += ["class WrapperBase(nn.Module):", *init(_bind(Shape(**{**shape.__dict__, "binding": "plain"})), 1), "", ""]
        base = "WrapperBase"
    out += shape.decorators
    header = f"class {WRAPPER}({base}):"
    if shape.binding == "one_line":
        one_line = {"pass": "pass", "ellipsis": "...", "docstring": '"""Holds the model its base binds."""'}[shape.empty_body or "pass"]
        out += [f"{header} {one_line}", "", ""]
        out.append(f"EntryClass = [{WRAPPER}]")
        return "\n".join(out) + "\n"
    out.append(header + ("  # the wrapper" if shape.header_comment else ""))
    body: list[str] = []
    if shape.docstring or shape.empty_body == "docstring":
        body.append(f'{i}"""Holds the language model in self.{shape.attribute}."""')
    if shape.empty_body == "pass":
        body.append(f"{i}pass")
    elif shape.empty_body == "ellipsis":
        body.append(f"{i}...")
    if shape.empty_body is None:
        if "class_attr" in shape.extras:
            body.append(f"{i}hot_token_id = None")
        if "comment_between" in shape.extras:
            body.append(f"{i}# the vision tower is built elsewhere")
        if shape.binding == "base_init":
            body += ["", *init([], 1, "super().__init__(config, quant_config)")]
        elif shape.binding != "inherited_init":
            body += ["", *init(_bind(shape), 1)]
        if shape.binding == "method_returns":
            body += ["", f"{i}def _build_{shape.attribute}(self, config):", f"{i * 2}return InnerForCausalLM(config)"]
        if shape.binding == "helper_assigns":
            body += ["", f"{i}def _init_{shape.attribute}(self, config):", f"{i * 2}self.{shape.attribute} = InnerForCausalLM(config)"]
        for hook in shape.own_hooks:
            params = {"get_embed_and_head": "", "set_embed_and_head": ", embed, head", "set_eagle3_layers_to_capture": ", layer_ids=None"}[hook]
            args = params.lstrip(", ").replace("=None", "")
            if "comment_between" in shape.extras:
                body += ["", f"{i}# written by hand"]
            else:
                body.append("")
            body += [f"{i}def {hook}(self{params}):", f"{i * 2}return self.{shape.attribute}.{hook}({args})"]
        if "forward" in shape.extras:
            body += ["", f"{i}def forward(self, input_ids, positions, forward_batch):",
                     f"{i * 2}return self.{shape.attribute}(input_ids, positions, forward_batch)"]
        if "property" in shape.extras:
            body += ["", f"{i}@property", f"{i}def config(self):", f"{i * 2}return self.{shape.attribute}.config"]
        if "nested" in shape.extras:
            body += ["", f"{i}class Processor:", f"{i * 2}def get_embed_and_head(self):", f"{i * 3}return None, None"]
        if "comment_last" in shape.extras:
            body += ["", f"{i}# end of the wrapper"]
        if not any(line.strip() and not line.strip().startswith("#") for line in body):
            body.append(f"{i}pass")  # a body of comments alone is no body
    out += body
    out += ["", "", f"EntryClass = [{WRAPPER}]"]
    return "\n".join(out) + "\n"


def write_tree(root: Path, shape: Shape) -> Path:
    srt = root / "sglang" / "srt"
    files = {
        "utils/nn.py": NN,
        "model_executor/model_runner.py": MODEL_RUNNER,
        "speculative/eagle_worker.py": EAGLE_WORKER,
        "models/inner.py": INNER,
        WRAPPER_FILE: wrapper_source(shape),
    }
    for package in ("", "utils", "model_executor", "speculative", "models"):
        (srt / package).mkdir(parents=True, exist_ok=True)
        (srt / package / "__init__.py").write_text("")
    (root / "sglang" / "__init__.py").write_text("")
    for rel, text in files.items():
        (srt / rel).write_text(text)
    return srt


def snapshot(srt: Path) -> dict[str, bytes]:
    return {p.relative_to(srt).as_posix(): p.read_bytes() for p in sorted(srt.rglob("*.py"))}


# --------------------------------------------------------------------------- running the CLI


def eaglepatch(*args) -> object:
    result = RUNNER.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def report_of(root: Path) -> dict:
    result = eaglepatch("check", root, "--all", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def wrapper_entry(report: dict) -> dict:
    (entry,) = [m for m in report["models"] if m["class"] == WRAPPER]
    return entry


def holds_invariant(shape: Shape) -> None:
    source = wrapper_source(shape)
    note(source)
    with tempfile.TemporaryDirectory(prefix="eaglepatch-invariant-") as folder:
        root = Path(folder)
        srt = write_tree(root, shape)
        before = snapshot(srt)

        report = report_of(root)
        wrapper = wrapper_entry(report)
        note(f"check: {wrapper['status']}: {wrapper['reason']}")
        fixes = check_fixes(report)

        diffed = eaglepatch("diff", root, "--all")
        assert diffed.exit_code in (0, 1), diffed.output
        patched = apply_patch(diffed.stdout_bytes, lambda path: (root / path).read_bytes() if (root / path).is_file() else None)
        diff = set().union(*(added_members(srt_relative(p), before.get(srt_relative(p)), new) for p, new in patched.items()))

        applied = eaglepatch("apply", root, "--all")
        assert applied.exit_code in (0, 1), applied.output
        after = snapshot(srt)
        assert after.keys() == before.keys(), "apply added or removed files"
        written = set().union(*(added_members(rel, before[rel], after[rel]) for rel in after if after[rel] != before[rel]))

        expected = {(WRAPPER_FILE, WRAPPER, hook) for hook in shape.lacking}
        assert fixes == diff == written == expected, "check, diff and apply disagree (or miss a hook):\n" + disagreement(fixes, diff, written) + (
            f"\n  expected {sorted(expected)}" if fixes != expected else "")
        assert applied.exit_code == apply_exit_code(report), applied.output  # 1 exactly while a required gap has no fix
        for rel, data in after.items():
            if data != before[rel]:
                compile(data, rel, "exec")
                assert patched.get(f"sglang/srt/{rel}") == data, f"{rel}: apply wrote other bytes than diff printed"

        again = report_of(root)
        left = [(m["class"], g["name"]) for m in again["models"] for g in m["missing"] if g["fix"] is not None]
        assert not left, f"fixable gaps left after apply: {left}"
        assert wrapper_entry(again)["status"] == "compliant", wrapper_entry(again)


@settings(max_examples=50, deadline=None)
@given(shape=shapes())
def test_check_diff_apply_agree_on_generated_wrappers(shape: Shape):
    holds_invariant(shape)


@pytest.mark.parametrize("binding", BINDINGS)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_every_binding_form_holds_the_invariant(binding: str, data):
    """Each form drawn on purpose, so none is left to chance (`helper_assigns` was once read as holding no model)."""
    holds_invariant(data.draw(shapes(bindings=(binding,))))


def test_generated_tree_is_what_the_fixture_shows():
    """The generator's plainest wrapper is fixable by delegation, all three hooks (a guard: a change to the
    tree that made every example trivially agree, nothing to fix, would fail here)."""
    shape = Shape("language_model", "plain", None, (), False, (), False, (), "    ")
    with tempfile.TemporaryDirectory() as folder:
        write_tree(Path(folder), shape)
        wrapper = wrapper_entry(report_of(Path(folder)))
    assert wrapper["status"] == "fixable", wrapper
    assert {g["name"]: g["fix"] for g in wrapper["missing"]} == {h: {"kind": "delegate", "to": "language_model"} for h in HOOKS}
    assert textwrap.dedent(wrapper_source(shape)).count("class ") == 1


CHAIN = '''\
from sglang.srt.models.inner import InnerForCausalLM
from sglang.srt.utils import nn


class VisionLanguageForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = InnerForCausalLM(config)


class VisionLanguageMoeForConditionalGeneration(VisionLanguageForConditionalGeneration):
    def forward(self, input_ids):
        return self.language_model(input_ids)


class VisionLanguageProForConditionalGeneration(VisionLanguageMoeForConditionalGeneration):
    def forward(self, input_ids):
        return self.language_model(input_ids)


EntryClass = [
    VisionLanguageForConditionalGeneration,
    VisionLanguageMoeForConditionalGeneration,
    VisionLanguageProForConditionalGeneration,
]
'''


def test_inherited_fix_names_the_class_apply_writes_into(tmp_path):
    """Three generations of one wrapper (sglang 0.5.9's Qwen3VL, Qwen3VLMoe and InternS1Pro): apply writes
    the hooks into the first alone, and both subclasses' fixes say so; the grandchild's once named its
    parent, which had adopted the hooks from the first and writes nothing (patcher/analyze/overlay.py:
    each round is planned through that round's writes alone)."""
    srt = write_tree(tmp_path, Shape("language_model", "plain", None, (), False, (), False, (), "    "))
    (srt / WRAPPER_FILE).write_text(CHAIN)
    before = snapshot(srt)
    report = report_of(tmp_path)
    first = f"{WRAPPER_FILE}:VisionLanguageForConditionalGeneration"
    fixes = {(m["class"], g["name"]): g["fix"] for m in report["models"] for g in m["missing"]}
    for cls in ("VisionLanguageMoeForConditionalGeneration", "VisionLanguageProForConditionalGeneration"):
        for hook in HOOKS:
            assert fixes[(cls, hook)] == {"kind": "inherit", "from": first}, (cls, hook, fixes[(cls, hook)])
    assert eaglepatch("apply", tmp_path, "--all").exit_code == 0
    after = snapshot(srt)
    written = set().union(*(added_members(rel, before[rel], after[rel]) for rel in after if after[rel] != before[rel]))
    assert check_fixes(report) == written == {(WRAPPER_FILE, "VisionLanguageForConditionalGeneration", h) for h in HOOKS}


HOLDER = '''\
from sglang.srt.models.wrapper import VisionLanguageProForConditionalGeneration
from sglang.srt.utils import nn


class OmniForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.thinker = VisionLanguageProForConditionalGeneration(config)


EntryClass = [OmniForConditionalGeneration]
'''


def test_a_holder_of_a_subclass_is_told_what_the_final_round_writes(tmp_path):
    """sglang 0.5.9's Qwen3OmniMoe holds a thinker whose class inherits the hooks three generations up:
    the signature its delegation is checked against is the one apply writes into that first class, not
    the one a middle class would have written in a round it then gave up (it inherits the hooks)."""
    srt = write_tree(tmp_path, Shape("language_model", "plain", None, (), False, (), False, (), "    "))
    (srt / WRAPPER_FILE).write_text(CHAIN.replace(
        "class VisionLanguageMoeForConditionalGeneration(VisionLanguageForConditionalGeneration):\n",
        "class VisionLanguageMoeForConditionalGeneration(VisionLanguageForConditionalGeneration):\n"
        "    def __init__(self, config):\n"
        "        super().__init__(config)\n"
        "        self.language_model = OtherForCausalLM(config)\n\n",
    ).replace(
        "class VisionLanguageProForConditionalGeneration(VisionLanguageMoeForConditionalGeneration):\n",
        "class VisionLanguageProForConditionalGeneration(VisionLanguageMoeForConditionalGeneration):\n"
        "    def set_embed_and_head(self, embed, head):\n"
        "        self.language_model.set_embed_and_head(embed, head)\n\n",  # a member of its own: the holder sees a model in it
    ).replace("from sglang.srt.utils import nn\n", "from sglang.srt.models.other import OtherForCausalLM\nfrom sglang.srt.utils import nn\n"))
    (srt / "models/other.py").write_text("\n" * 20 + INNER.replace("InnerForCausalLM", "OtherForCausalLM"))
    (srt / "models/holder.py").write_text(HOLDER)
    report = report_of(tmp_path)
    by_class = {m["class"]: {g["name"]: g for g in m["missing"] if g["gap"] == "member"} for m in report["models"]}
    first = by_class["VisionLanguageForConditionalGeneration"]
    assert {h: first[h]["fix"]["kind"] for h in HOOKS} == dict.fromkeys(HOOKS, "delegate")
    moe = by_class["VisionLanguageMoeForConditionalGeneration"]
    assert {h: moe[h]["fix"]["kind"] for h in HOOKS} == dict.fromkeys(HOOKS, "inherit")  # it wrote them in the first round only
    holder = by_class["OmniForConditionalGeneration"]
    for hook in ("get_embed_and_head", "set_eagle3_layers_to_capture"):  # the two the thinker inherits
        assert holder[hook]["fix"] == {"kind": "delegate", "to": "thinker"}
        assert holder[hook]["defined_at"] == first[hook]["defined_at"], hook
        assert holder[hook]["defined_at"].startswith("models/inner.py:"), holder[hook]["defined_at"]
