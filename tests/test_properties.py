"""Property-based tests of the delegation codemod (hypothesis), through the library in-process.

Each example is a minimal SGLang tree written to a fresh temporary folder:

* ``sglang/srt/models/inner.py``: ``InnerForCausalLM`` (maybe over an in-file ``InnerBase``)
  with random members: instance, static, class and async methods, properties; positional-only
  parameters, defaults, ``*args`` or a bare ``*``, keyword-only parameters, ``**kwargs``,
  annotations from ``typing`` (or ``typing as t``) and from the module itself, defaults naming
  module constants; extra decorators; nested classes; comments and blank lines in odd places.
* ``sglang/srt/models/wrapper.py``: ``WrapperForConditionalGeneration`` holding the inner model
  in ``self.language_model``, imported one of several ways, with members of its own (methods,
  properties, class attributes, ``self.x`` attributes, members of an in-file base class) that
  may collide with the inner's, a nested class, and the same kind of formatting noise.
* ``sglang/srt/speculative/eagle_worker.py``: calls ``self.target_worker.model_runner.model.<m>``
  for every generated name, so every one of them is in the EAGLE-3 protocol.
* name situations (``Example.situations``) that once broke the copied signatures: defaults and
  annotations that are class attributes of the inner class, that reach the inner file through a
  star import, that it binds under a module-level ``if``, that it imports only under
  ``TYPE_CHECKING`` or from a package that is stubbed at import time (``torch``); names the wrapper
  binds only under ``TYPE_CHECKING`` or inside a function, and class attributes of the wrapper
  that shadow them.  The patched wrapper must import and forward the inner's very defaults.

Each file gets its own indent (4 spaces, 2 spaces, a tab) and newline (LF, CRLF).

Profiles (registered in tests/conftest.py): ``ci``, the default, 25 examples with no deadline,
and ``long``, 500 examples: ``pytest --hypothesis-profile long tests/test_properties.py``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import difflib
import importlib
import inspect
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from eaglepatch.rewrite.edits import build_edits
from eaglepatch.run import analyze

WRAPPER_CLASS = "WrapperForConditionalGeneration"
INNER_CLASS = "InnerForCausalLM"
MARKER = "# eaglepatch: forwards to self.language_model"  # may go on: "; imported A, B"
HEADER_COMMENT = "  # a comment on the class line"

MEMBER_NAMES = [
    "get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture", "get_hidden_size",
    "load_lm_head_from_target", "capture_aux", "hot_token_ids", "draft_vocab", "embed_scale", "prepare_draft",
]
# `inner`/`inner_model` collide with the generated code's local variable.  Not here: names of the
# builtins the generated body calls (`type`, `hasattr`) and `self` in a static method, see the
# known-bug tests at the end of this file.
PARAM_NAMES = [
    "a", "b", "c", "layer_ids", "embed", "head", "scale", "dtype", "strict", "inner", "inner_model",
    "options", "extra", "config", "x", "y",
]
TYPING_NAMES = ["Any", "Callable", "Dict", "List", "Optional", "Sequence", "Tuple", "Union"]
ANNOTATIONS = [
    "int", "float", "str", "bool", "Optional[int]", "List[int]", "Dict[str, Any]", "Tuple[int, ...]",
    "Union[int, str, None]", "Sequence[float]", "Callable[[int], str]", "{t}.Optional[str]", "LayerSpec",
    "Optional[LayerSpec]", "{t}.List[{t}.Any]",
]
DEFAULTS = ["None", "0", "-1", "1.5", "'s'", '"two words"', "True", "(1, 2)", "()", "DEFAULT_SCALE", "DEFAULT_SCALE * 2"]
RETURNS = ["None", "int", "Optional[LayerSpec]", "Tuple[Any, Any]", "Dict[str, Any]", "{t}.Any"]

# Name situations: (defaults, annotations) each one adds to what a parameter may draw.
SITUATIONS = {
    "class_attr": (["CLASS_SCALE", "CLASS_SENTINEL", "CLASS_LAYERS"], ["ClassSpec", "Optional[ClassSpec]"]),
    "star_import": (["STAR_SCALE", "STAR_SENTINEL"], ["StarSpec", "Optional[StarSpec]"]),
    "if_bound": (["IF_SCALE", "IF_SENTINEL"], ["IfSpec", "Optional[IfSpec]"]),
    "inner_type_checking": ([], ['"Missing"', 'Optional["Missing"]']),
    "stub_package": ([], ["torch.Tensor", "Optional[torch.Tensor]"]),
    "wrapper_type_checking": ([], []),
    "wrapper_function_import": ([], []),
    "class_shadow": ([], []),
}
TYPE_CHECKING_ONLY = "Missing"  # imported by inner.py under TYPE_CHECKING from a package that is not installed


# --------------------------------------------------------------------------- specs


@dataclass
class Param:
    name: str
    kind: str  # posonly | regular | vararg | kwonly | varkw
    default: str | None = None
    annotation: str | None = None


@dataclass
class Member:
    name: str
    kind: str  # method | static | class | async | property
    receiver: str | None
    receiver_posonly: bool
    params: list[Param]
    bare_star: bool
    returns: str | None
    traced: str  # "" | "above" | "below" | "factory": an extra identity decorator (`@traced_with("...")`)
    multiline: bool  # one parameter per line, with comments among them
    noise: list[str]  # lines before the member: "", "# ...", "#col0", "ws"


@dataclass
class Owned:
    """A member the wrapper already has."""

    name: str
    kind: str  # method | property | attribute | annotated | self_attr | base_method | base_attribute


@dataclass
class Layout:
    unit: str
    newline: str


@dataclass
class Example:
    inner: list[Member]
    inner_base: list[Member]
    inner_nested: list[str]  # method names of a class nested in the inner class
    typing_alias: str  # "typing" or "t"
    owned: list[Owned]
    wrapper_nested: list[str]
    import_style: str  # absolute | relative | alias | module
    wrapper_typing: list[str]  # names the wrapper already imports from typing
    shadow_default: bool  # the wrapper binds DEFAULT_SCALE to something else
    future: bool  # `from __future__ import annotations` in the wrapper
    entry: bool
    final_newline: bool
    wrapper_noise: list[str]
    inner_layout: Layout
    wrapper_layout: Layout
    extra_protocol: list[str] = field(default_factory=list)  # called by the consumer, defined nowhere
    header_comments: bool = False  # `class X(Base):  # comment` (see test_class_header_comment_*)
    situations: list[str] = field(default_factory=list)  # keys of SITUATIONS

    @property
    def inner_members(self) -> set[str]:
        return {m.name for m in self.inner} | {m.name for m in self.inner_base}

    @property
    def wrapper_members(self) -> set[str]:
        return {o.name for o in self.owned}

    @property
    def protocol(self) -> list[str]:
        names = [m.name for m in self.inner + self.inner_base] + [o.name for o in self.owned]
        names += self.inner_nested + self.wrapper_nested + self.extra_protocol
        return sorted(set(names))

    @property
    def expected(self) -> set[str]:
        return self.inner_members - self.wrapper_members

    def member(self, name: str) -> Member:
        return next(m for m in self.inner + self.inner_base if m.name == name)  # own members first


# --------------------------------------------------------------------------- strategies


layouts = st.builds(Layout, st.sampled_from(["\t", "    ", "  "]), st.sampled_from(["\r\n", "\n"]))
noise_lines = st.lists(st.sampled_from(["", "", "# a comment", "#", "#col0 comment", "ws"]), max_size=3)


@st.composite
def params_for(draw, kind: str, situations: tuple[str, ...] = ()) -> tuple[list[Param], bool]:
    if kind == "property":
        return [], False
    defaults = DEFAULTS + [d for name in situations for d in SITUATIONS[name][0]]
    annotations = ANNOTATIONS + [a for name in situations for a in SITUATIONS[name][1]]
    names = draw(st.lists(st.sampled_from(PARAM_NAMES), unique=True, max_size=7))
    counts = [draw(st.integers(0, 2)), draw(st.integers(0, 3)), draw(st.integers(0, 1)), draw(st.integers(0, 2)), draw(st.integers(0, 1))]
    params: list[Param] = []
    pool = iter(names)
    for kind_name, count in zip(("posonly", "regular", "vararg", "kwonly", "varkw"), counts):
        for _ in range(count):
            name = next(pool, None)
            if name is not None:
                params.append(Param(name, kind_name))
    positional = [p for p in params if p.kind in ("posonly", "regular")]
    first_default = draw(st.integers(0, len(positional)))
    for p in positional[first_default:]:
        p.default = draw(st.sampled_from(defaults))
    for p in params:
        if p.kind == "kwonly" and draw(st.booleans()):
            p.default = draw(st.sampled_from(defaults))
        if p.kind not in ("vararg", "varkw") or draw(st.booleans()):
            p.annotation = draw(st.none() | st.sampled_from(annotations))
        elif p.kind in ("vararg", "varkw"):
            p.annotation = draw(st.none() | st.sampled_from(["int", "Any"]))
    has_vararg = any(p.kind == "vararg" for p in params)
    bare_star = not has_vararg and any(p.kind == "kwonly" for p in params)
    return params, bare_star


@st.composite
def members(draw, name: str, situations: tuple[str, ...] = ()) -> Member:
    kind = draw(st.sampled_from(["method", "method", "method", "static", "class", "async", "property"]))
    receiver = {"method": draw(st.sampled_from(["self", "self", "this"])), "async": "self", "property": "self",
                "class": draw(st.sampled_from(["cls", "klass"])), "static": None}[kind]
    params, bare_star = draw(params_for(kind, situations))
    returns = RETURNS + (['"Missing"'] if "inner_type_checking" in situations else [])
    has_posonly = any(p.kind == "posonly" for p in params)
    return Member(
        name=name,
        kind=kind,
        receiver=receiver,
        receiver_posonly=receiver is not None and not has_posonly and kind != "property" and draw(st.booleans()),
        params=params,
        bare_star=bare_star,
        returns=draw(st.none() | st.sampled_from(returns)),
        traced=draw(st.sampled_from(["", "", "above", "below", "factory"])),
        multiline=kind != "property" and draw(st.booleans()),
        noise=draw(noise_lines),
    )


@st.composite
def examples(draw) -> Example:
    situations = tuple(draw(st.lists(st.sampled_from(sorted(SITUATIONS)), unique=True, max_size=4)))
    names = draw(st.lists(st.sampled_from(MEMBER_NAMES), unique=True, min_size=1, max_size=6))
    split = draw(st.integers(0, len(names)))
    inner = [draw(members(n, situations)) for n in names[:split]]
    inner_base = [draw(members(n, situations)) for n in names[split:]]
    if not inner and not inner_base:
        inner = [draw(members(names[0], situations))]
    owned_names = draw(st.lists(st.sampled_from(MEMBER_NAMES), unique=True, max_size=4))
    owned = [
        Owned(n, draw(st.sampled_from(["method", "property", "attribute", "annotated", "self_attr", "base_method", "base_attribute"])))
        for n in owned_names
    ]
    return Example(
        inner=inner,
        inner_base=inner_base,
        inner_nested=draw(st.lists(st.sampled_from(MEMBER_NAMES), unique=True, max_size=2)),
        typing_alias=draw(st.sampled_from(["typing", "t"])),
        owned=owned,
        wrapper_nested=draw(st.lists(st.sampled_from(MEMBER_NAMES), unique=True, max_size=2)),
        import_style=draw(st.sampled_from(["absolute", "relative", "alias", "module"])),
        wrapper_typing=draw(st.lists(st.sampled_from(TYPING_NAMES), unique=True, max_size=4)),
        shadow_default=draw(st.booleans()),
        future=draw(st.booleans()),
        entry=draw(st.booleans()),
        final_newline=draw(st.booleans()),
        wrapper_noise=draw(noise_lines),
        inner_layout=draw(layouts),
        wrapper_layout=draw(layouts),
        extra_protocol=draw(st.lists(st.sampled_from(["not_defined_anywhere", "also_missing"]), unique=True, max_size=1)),
        situations=list(situations),
    )


# --------------------------------------------------------------------------- rendering


Line = tuple  # (depth, text); depth None = column 0


def _noise(noise: list[str], depth: int) -> list[Line]:
    out: list[Line] = []
    for item in noise:
        if item == "#col0 comment":
            out.append((None, "# at column 0, inside the class"))
        elif item == "ws":
            out.append((depth, ""))  # a whitespace-only line
        elif item:
            out.append((depth, item))
        else:
            out.append((None, ""))
    return out


def _annotation(text: str | None, alias: str) -> str:
    return text.replace("{t}", alias) if text else ""


def _param_text(p: Param, alias: str) -> str:
    star = {"vararg": "*", "varkw": "**"}.get(p.kind, "")
    ann = f": {_annotation(p.annotation, alias)}" if p.annotation else ""
    default = (f" = {p.default}" if ann else f"={p.default}") if p.default is not None else ""
    return f"{star}{p.name}{ann}{default}"


def _signature_items(m: Member, alias: str) -> list[str]:
    items: list[str] = []
    if m.receiver:
        items.append(m.receiver)
    posonly = [p for p in m.params if p.kind == "posonly"]
    items += [_param_text(p, alias) for p in posonly]
    if posonly or m.receiver_posonly:
        items.append("/")
    items += [_param_text(p, alias) for p in m.params if p.kind == "regular"]
    items += [_param_text(p, alias) for p in m.params if p.kind == "vararg"]
    if m.bare_star:
        items.append("*")
    items += [_param_text(p, alias) for p in m.params if p.kind == "kwonly"]
    items += [_param_text(p, alias) for p in m.params if p.kind == "varkw"]
    return items


def render_member(m: Member, depth: int, alias: str) -> list[Line]:
    out = _noise(m.noise, depth)
    decorators = {"static": ["@staticmethod  # no receiver"], "class": ["@classmethod"], "property": ["@property"]}.get(m.kind, [])
    if m.traced == "above":
        decorators = ["@traced"] + decorators
    elif m.traced == "below":
        decorators = decorators + ["@traced"]
    elif m.traced == "factory":
        decorators = decorators[:1] + ['@traced_with("a reason")  # a decorator with arguments'] + decorators[1:]
    out += [(depth, d) for d in decorators]
    keyword = "async def" if m.kind == "async" else "def"
    returns = f" -> {_annotation(m.returns, alias)}" if m.returns else ""
    items = _signature_items(m, alias)
    if m.multiline and items:
        out.append((depth, f"{keyword} {m.name}("))
        for i, item in enumerate(items):
            if i == 1:
                out.append((depth + 1, "# a comment among the parameters"))
            out.append((depth + 1, f"{item},  # {item.split(':')[0].split('=')[0].strip('*')}"))
        out.append((depth, f"){returns}:  # end of signature"))
    else:
        out.append((depth, f"{keyword} {m.name}({', '.join(items)}){returns}:"))
    out.append((depth + 1, "# the body"))
    out.append((depth + 1, "return 1" if m.kind == "property" else f"return {m.name!r}"))
    return out


def render(lines: list[Line], layout: Layout, final_newline: bool = True) -> bytes:
    text = layout.newline.join(("" if d is None else layout.unit * d) + t for d, t in lines)
    if final_newline:
        text += layout.newline
    return text.encode("utf-8")


def inner_source(ex: Example) -> bytes:
    t = ex.typing_alias
    lines: list[Line] = [
        (0, '"""The language model (generated)."""'),
        (0, "import typing" if t == "typing" else "import typing as t"),
        (0, f"from typing import {', '.join(TYPING_NAMES)}"),
        (0, ""),
        (0, "DEFAULT_SCALE = 1.0"),
        (0, ""),
    ]
    lines += inner_situation_lines(ex.situations)
    lines += [
        (0, ""),
        (0, "class LayerSpec:"),
        (1, "pass"),
        (0, ""),
        (0, ""),
        (0, "def traced(fn):"),
        (1, "return fn"),
        (0, ""),
        (0, ""),
        (0, "def traced_with(reason):"),
        (1, "return traced"),
        (0, ""),
        (0, ""),
    ]
    if ex.inner_base:
        lines.append((0, "class InnerBase:"))
        lines += class_attribute_lines(ex.situations)
        for m in ex.inner_base:
            lines += render_member(m, 1, t) + [(None, "")]
        lines += [(0, ""), (0, "")]
    lines.append((0, f"class {INNER_CLASS}{'(InnerBase)' if ex.inner_base else ''}:{HEADER_COMMENT if ex.header_comments else ''}"))
    lines += class_attribute_lines(ex.situations)
    lines += [(1, "def __init__(self, config):"), (2, "self.config = config"), (None, "")]
    for m in ex.inner:
        lines += render_member(m, 1, t) + [(None, "")]
    if ex.inner_nested:
        lines.append((1, "class Config:  # nested: its methods are not the model's"))
        for name in ex.inner_nested:
            lines += [(2, f"def {name}(self):"), (3, "return 'nested'")]
    lines += [(1, "# trailing comment in the class"), (0, ""), (0, "")]
    lines.append((0, f"EntryClass = [{INNER_CLASS}]"))
    return render(lines, ex.inner_layout)


def inner_situation_lines(situations) -> list[Line]:
    """Module-level names of inner.py that the situations draw on."""
    lines: list[Line] = []
    if "star_import" in situations:
        lines += [(0, "from sglang.srt.configs.star_defaults import *"), (0, "")]
    if "stub_package" in situations:
        lines += [(0, "import torch  # a stub at import time"), (0, "")]
    if "inner_type_checking" in situations:
        lines += [(0, "from typing import TYPE_CHECKING"), (0, "if TYPE_CHECKING:"),
                  (1, f"from eaglepatch_absent_package import {TYPE_CHECKING_ONLY}"), (0, "")]
    if "if_bound" in situations:
        lines += [
            (0, "import os"), (0, ""),
            (0, 'if os.environ.get("EAGLEPATCH_NEVER_SET"):'), (1, "IF_SCALE = 2.5"), (1, "IF_SENTINEL = None"),
            (0, "else:"), (1, "IF_SCALE = 0.5"), (1, "IF_SENTINEL = object()"), (0, ""), (1, "class IfSpec:"), (2, "pass"),
            (0, ""),
        ]
    return lines


def class_attribute_lines(situations) -> list[Line]:
    """Class-body names of the inner classes, before their methods."""
    if "class_attr" not in situations:
        return []
    return [(1, "CLASS_SCALE = 0.25"), (1, "CLASS_SENTINEL = object()"), (1, "CLASS_LAYERS = (1, 2)"), (None, ""),
            (1, "class ClassSpec:"), (2, "pass"), (None, "")]


STAR_DEFAULTS = """\
\"\"\"Names inner.py reaches through `from ... import *` (generated).\"\"\"

STAR_SCALE = 0.75
STAR_SENTINEL = object()


class StarSpec:
    pass
"""

# the names the wrapper binds where they do not run, or shadows in its class body: (depth, text) lines
WRAPPER_TYPE_CHECKING: list[Line] = [
    (0, "from typing import TYPE_CHECKING"), (0, ""), (0, "if TYPE_CHECKING:"),
    (1, "from typing import Any, Dict, List, Optional"), (1, "from sglang.srt.models.inner import DEFAULT_SCALE, LayerSpec"), (0, ""),
]
WRAPPER_FUNCTION_IMPORT: list[Line] = [
    (0, ""), (0, "def _helper():"), (1, "from typing import Callable, Optional, Sequence, Tuple, Union"),
    (1, "from sglang.srt.models.inner import DEFAULT_SCALE, LayerSpec"), (None, ""), (1, "return Optional"), (0, ""),
]
WRAPPER_SHADOWS: list[Line] = [
    (1, line) for line in ("DEFAULT_SCALE = 'shadow'", "Optional = None", "LayerSpec = 'shadow'", "int = 'shadow'",
                           "CLASS_SCALE = 'shadow'", "STAR_SCALE = 'shadow'", "IF_SENTINEL = 'shadow'", "ClassSpec = None")
]


def wrapper_source(ex: Example) -> bytes:
    lines: list[Line] = [(0, "# Wrapper (generated)."), (0, '"""A wrapper around the language model."""'), (0, "")]
    if ex.future:
        lines += [(0, "from __future__ import annotations"), (0, "")]
    if ex.wrapper_typing:
        lines.append((0, f"from typing import {', '.join(sorted(ex.wrapper_typing))}"))
    ctor = {
        "absolute": ("from sglang.srt.models.inner import InnerForCausalLM", "InnerForCausalLM"),
        "relative": ("from .inner import InnerForCausalLM", "InnerForCausalLM"),
        "alias": ("from sglang.srt.models.inner import InnerForCausalLM as TextModel", "TextModel"),
        "module": ("from sglang.srt.models import inner as inner_module", "inner_module.InnerForCausalLM"),
    }[ex.import_style]
    lines += [(0, ctor[0]), (0, "")]
    if "wrapper_type_checking" in ex.situations:
        lines += WRAPPER_TYPE_CHECKING
    if "wrapper_function_import" in ex.situations:
        lines += WRAPPER_FUNCTION_IMPORT
    if ex.shadow_default:
        lines += [(0, "DEFAULT_SCALE = 'the wrapper means something else'"), (0, "")]
    base = [o for o in ex.owned if o.kind.startswith("base_")]
    if base:
        lines += [(0, ""), (0, "class WrapperBase:")]
        for o in base:
            if o.kind == "base_method":
                lines += [(1, f"def {o.name}(self, *args, **kwargs):"), (2, "return 'base'"), (None, "")]
            else:
                lines += [(1, f"{o.name} = 'base attribute'")]
        lines += [(0, "")]
    lines += [(0, ""), (0, f"class {WRAPPER_CLASS}{'(WrapperBase)' if base else ''}:{HEADER_COMMENT if ex.header_comments else ''}")]
    if "class_shadow" in ex.situations:
        lines += WRAPPER_SHADOWS
    for o in ex.owned:
        if o.kind == "attribute":
            lines.append((1, f"{o.name} = None"))
        elif o.kind == "annotated":
            lines.append((1, f"{o.name}: object = None"))
    lines += _noise(ex.wrapper_noise, 1)
    lines += [(1, "def __init__(self, config):"), (2, "self.config = config"), (2, f"self.language_model = {ctor[1]}(config)")]
    for o in ex.owned:
        if o.kind == "self_attr":
            lines.append((2, f"self.{o.name} = 'instance attribute'"))
    for o in ex.owned:
        if o.kind == "method":
            lines += [(None, ""), (1, "# its own"), (1, f"def {o.name}(self, *args, **kwargs):"), (2, "return 'own'")]
        elif o.kind == "property":
            lines += [(None, ""), (1, "@property"), (1, f"def {o.name}(self):"), (2, "return 'own property'")]
    lines += [(None, ""), (1, "def forward(self, input_ids):"), (2, "return self.language_model.forward(input_ids)")]
    if ex.wrapper_nested:
        lines += [(None, ""), (1, "class Helper:  # nested: its methods are not the wrapper's")]
        for name in ex.wrapper_nested:
            lines += [(2, f"def {name}(self):"), (3, "return 'nested'")]
    lines += _noise(ex.wrapper_noise, 1)
    lines += [(0, ""), (0, "")]
    lines.append((0, f"EntryClass = [{WRAPPER_CLASS}]" if ex.entry else "# no EntryClass"))
    return render(lines, ex.wrapper_layout, ex.final_newline)


def consumer_source(ex: Example) -> bytes:
    lines = [
        '"""EAGLE-3 worker (generated)."""',
        "",
        "",
        "class EAGLEWorker:",
        "    def __init__(self, target_worker):",
        "        self.target_worker = target_worker",
        "",
        # the arguments are passed through: any signature can take the call (shape checks are tested elsewhere)
        "    def init_eagle3(self, *args, **kwargs):",
    ]
    for name in ex.protocol:
        lines.append(f"        self.target_worker.model_runner.model.{name}(*args, **kwargs)")
    return ("\n".join(lines) + "\n").encode()


def write_tree(root: Path, ex: Example) -> Path:
    srt = root / "sglang" / "srt"
    for folder in ("models", "speculative"):
        (srt / folder).mkdir(parents=True)
        (srt / folder / "__init__.py").write_bytes(b"")
    (root / "sglang" / "__init__.py").write_bytes(b"")
    (srt / "__init__.py").write_bytes(b"")
    (srt / "models" / "inner.py").write_bytes(inner_source(ex))
    (srt / "models" / "wrapper.py").write_bytes(wrapper_source(ex))
    (srt / "speculative" / "eagle_worker.py").write_bytes(consumer_source(ex))
    if "star_import" in ex.situations:
        (srt / "configs").mkdir()
        (srt / "configs" / "__init__.py").write_bytes(b"")
        (srt / "configs" / "star_defaults.py").write_text(STAR_DEFAULTS, encoding="utf-8")
    return srt / "models" / "wrapper.py"


# --------------------------------------------------------------------------- running the library


def plan_and_build(root: Path):
    analysis = analyze(root, [f"wrapper:{WRAPPER_CLASS}"])
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    assert not errors, [str(e) for e in errors]
    return analysis, [e for e in edits if e.changed]


def class_body_names(data: bytes, cls: str) -> list[str]:
    for node in ast.parse(data).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            names = []
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.append(stmt.name)
                elif isinstance(stmt, ast.Assign):
                    names += [t.id for t in stmt.targets if isinstance(t, ast.Name)]
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names.append(stmt.target.id)
            return names
    raise AssertionError(f"class {cls} not found")


def import_spans(tree: ast.Module) -> set[int]:
    """1-based lines of module-level import statements, and a blank line that separates two of them
    (isort's gap between sections: opening a standard-library section adds one)."""
    lines: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.update(range(node.lineno, node.end_lineno + 1))
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    for first, second in zip(imports, imports[1:]):
        if tree.body.index(second) == tree.body.index(first) + 1 and second.lineno - first.end_lineno == 2:
            lines.add(first.end_lineno + 1)  # one line between consecutive imports: it is blank
    return lines


def generated_spans(data: bytes, names: set[str]) -> set[int]:
    """1-based lines of the inserted blocks: blank line, marker comment, decorators, def."""
    text = data.decode("utf-8")
    lines = text.splitlines()
    tree = ast.parse(data)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == WRAPPER_CLASS)
    spans: set[int] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if not lines[start - 2].strip().startswith(MARKER) and lines[start - 2].strip().startswith("# eaglepatch: "):
                start -= 1  # the note under the marker: why the signature is not the inner's
            assert lines[start - 2].strip().startswith(MARKER), f"no marker above {node.name}: {lines[start - 2]!r}"
            assert lines[start - 3].strip() == "", f"no blank line above the marker of {node.name}"
            spans.update(range(start - 2, node.end_lineno + 1))
    return spans


def without(data: bytes, drop: set[int]) -> list[str]:
    return [line for i, line in enumerate(data.decode("utf-8").splitlines(keepends=True), start=1) if i not in drop]


@contextlib.contextmanager
def tree_importable(root: Path):
    """Import `sglang.*` from root, and leave sys.modules and sys.path as they were afterwards."""
    ours = lambda name: name == "sglang" or name.startswith("sglang.")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.dont_write_bytecode = dont_write
        sys.path.remove(str(root))
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


class Token:
    """A fresh object per argument, so forwarding can be checked by identity."""

    def __init__(self, label: str):
        self.label = label

    def __repr__(self) -> str:
        return f"<{self.label}>"


class Recorder:
    """Stands in for the inner model: records every call and returns a fresh token."""

    def __init__(self, properties: set[str], coroutines: set[str]):
        self.calls: list[tuple] = []
        self._properties = properties
        self._coroutines = coroutines

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._properties:
            token = Token(f"{name} value")
            self.calls.append((name, None, None, token))
            return token

        def method(*args, **kwargs):
            token = Token(f"{name} result")
            self.calls.append((name, args, kwargs, token))
            if name in self._coroutines:
                async def result():
                    return token

                return result()
            return token

        return method


@st.composite
def call_for(draw, m: Member) -> tuple[tuple, dict]:
    """Arguments a caller may pass to the member: required ones always, optional ones sometimes."""
    positional = [p for p in m.params if p.kind in ("posonly", "regular")]
    # required positional-only parameters can only be passed by position
    least = max((i + 1 for i, p in enumerate(positional) if p.kind == "posonly" and p.default is None), default=0)
    n = draw(st.integers(least, len(positional)))
    args = [Token(f"arg {p.name}") for p in positional[:n]]
    kwargs: dict = {}
    for p in positional[n:]:
        if p.kind == "posonly":
            continue  # can only be passed by position; it has a default
        if p.default is None or draw(st.booleans()):
            kwargs[p.name] = Token(f"kw {p.name}")
    if n == len(positional) and any(p.kind == "vararg" for p in m.params):
        args += [Token(f"extra {i}") for i in range(draw(st.integers(0, 2)))]
    for p in m.params:
        if p.kind == "kwonly" and (p.default is None or draw(st.booleans())):
            kwargs[p.name] = Token(f"kwonly {p.name}")
    if any(p.kind == "varkw" for p in m.params):
        taken = {p.name for p in m.params if p.kind in ("regular", "kwonly")} | set(kwargs)
        free = [n for n in ["zz", "extra_kw"] + [p.name for p in m.params if p.kind == "posonly"] if n not in taken]
        for name in draw(st.lists(st.sampled_from(free), unique=True, max_size=2)) if free else []:
            kwargs[name] = Token(f"**{name}")
    return tuple(args), kwargs


def binder(m: Member, namespace: dict, alias: str):
    """A function with the member's parameters (made in the inner module's namespace) that returns what
    CPython binds each parameter to; inspect.Signature.bind in 3.11 rejects a positional-only name that
    goes to **kwargs."""
    source = f"def _probe({', '.join(_signature_items(m, alias))}):\n    return dict(locals())\n"
    scope = dict(namespace)
    exec(source, scope)
    probe = scope["_probe"]
    if m.receiver is None:
        return probe
    return lambda *args, **kwargs: {k: v for k, v in probe(None, *args, **kwargs).items() if k != m.receiver}


def same_arguments(m: Member, bind, given: tuple, received: tuple) -> None:
    want = bind(*given[0], **given[1])
    got = bind(*received[0], **received[1])  # also: the call the inner model would accept
    assert list(want) == list(got), (want, got)
    for p in m.params:
        value, other = want[p.name], got[p.name]
        if p.kind == "vararg":
            assert len(value) == len(other) and all(a is b for a, b in zip(value, other)), (p.name, value, other)
        elif p.kind == "varkw":
            assert value.keys() == other.keys() and all(value[k] is other[k] for k in value), (p.name, value, other)
        elif isinstance(value, Token):
            assert other is value, (p.name, value, other)
        else:  # a default, evaluated in the wrapper's module: equal to the inner's
            assert other == value and type(other) is type(value), (p.name, value, other)


# --------------------------------------------------------------------------- the property


@given(ex=examples(), data=st.data())
def test_delegations_are_minimal_idempotent_and_forward_exactly(ex: Example, data):
    with tempfile.TemporaryDirectory(prefix="eaglepatch-prop-") as tmp:
        root = Path(tmp)
        path = write_tree(root, ex)
        original = path.read_bytes()
        compile(original, "wrapper.py", "exec")
        compile((root / "sglang/srt/models/inner.py").read_bytes(), "inner.py", "exec")
        note(f"inner.py:\n{(root / 'sglang/srt/models/inner.py').read_bytes().decode()}")
        note(f"wrapper.py:\n{original.decode()}")

        event(f"wrapper: {ex.wrapper_layout.unit!r} {ex.wrapper_layout.newline!r}, import {ex.import_style}")
        for situation in ex.situations:
            event(f"names: {situation}")
        event(f"{len(ex.expected)} member(s) to write")
        for name in ex.expected:
            event(f"writes a {ex.member(name).kind}")
        analysis, edits = plan_and_build(root)
        assert set(analysis.protocol.members) >= set(ex.protocol) - {"__init__"}
        if not ex.expected:
            assert not edits
            return
        (edit,) = edits
        assert edit.path.resolve() == path.resolve()
        assert edit.original == original
        patched = edit.updated
        note(f"patched:\n{patched.decode()}")
        assert set(edit.added) == {WRAPPER_CLASS} and set(edit.added[WRAPPER_CLASS]) == ex.expected

        # 1. it parses and compiles
        patched_tree = ast.parse(patched)
        compile(patched, "wrapper.py", "exec")

        # 2. nothing outside the inserted blocks and the import lines changed
        blocks = generated_spans(patched, ex.expected)
        kept_old = without(original, import_spans(ast.parse(original)))
        kept_new = without(patched, blocks | import_spans(patched_tree))
        assert kept_new == kept_old, "".join(difflib.unified_diff(kept_old, kept_new, "original", "patched"))
        # ... and the inserted lines follow the file's own indent and newline
        new_lines = patched.decode().splitlines(keepends=True)
        for number in sorted(blocks):
            line = new_lines[number - 1]
            assert line.endswith(ex.wrapper_layout.newline) or (number == len(new_lines) and not ex.final_newline), repr(line)
            if ex.wrapper_layout.newline == "\n":
                assert not line.endswith("\r\n"), repr(line)
            body = line.rstrip("\r\n")
            if body.strip():
                indent = body[: len(body) - len(body.lstrip(" \t"))]
                assert indent.startswith(ex.wrapper_layout.unit) and set(indent) == set(ex.wrapper_layout.unit), repr(line)
        if ex.wrapper_layout.newline == "\r\n":
            assert patched.count(b"\n") == patched.count(b"\r\n")

        # 3. members the wrapper had are neither duplicated nor shadowed
        before_names = class_body_names(original, WRAPPER_CLASS)
        after_names = class_body_names(patched, WRAPPER_CLASS)
        assert sorted(after_names) == sorted(before_names + sorted(ex.expected))
        assert not ex.expected & ex.wrapper_members

        # 4. apply twice == apply once, byte for byte
        path.write_bytes(patched)
        again_analysis, again = plan_and_build(root)
        assert not again, [e.updated.decode() for e in again]
        assert not again_analysis.fix_count  # nothing left that apply could write
        assert path.read_bytes() == patched

        # 5. the generated code forwards exactly what it is given and returns the inner result
        check_forwarding(root, ex, data)


def check_forwarding(root: Path, ex: Example, data) -> None:
    with stubbed(STUBS), tree_importable(root):
        wrapper_module = importlib.import_module("sglang.srt.models.wrapper")
        inner_module = importlib.import_module("sglang.srt.models.inner")
        Wrapper = getattr(wrapper_module, WRAPPER_CLASS)
        Inner = getattr(inner_module, INNER_CLASS)
        bare_inner = Inner.__new__(Inner)
        owners = {m.name: Inner for m in ex.inner} | {m.name: getattr(inner_module, "InnerBase", Inner) for m in ex.inner_base}
        for name in sorted(ex.expected):
            m = ex.member(name)
            w = Wrapper(None)
            assert isinstance(w.language_model, Inner)
            properties = {name} if m.kind == "property" else set()
            w.language_model = recorder = Recorder(properties, {name} if m.kind == "async" else set())
            if m.kind == "property":
                assert isinstance(inspect.getattr_static(Wrapper, name), property)
                value = getattr(w, name)
                assert recorder.calls and value is recorder.calls[-1][3]
            else:
                got = inspect.signature(getattr(w, name), eval_str=True)
                want = expected_signature(m, getattr(bare_inner, name), vars(inner_module))
                assert got == want, f"{name}: {got} != {want}"
                assert inspect.iscoroutinefunction(getattr(Wrapper, name)) == (m.kind == "async")
                args, kwargs = data.draw(call_for(m), label=f"call {name}")
                bind = binder(m, {**vars(inner_module), **vars(owners[name])}, ex.typing_alias)
                bind(*args, **kwargs)  # the generator only makes calls the inner accepts
                result = getattr(w, name)(*args, **kwargs)
                if m.kind == "async":
                    result = asyncio.run(result)
                assert len(recorder.calls) == 1, recorder.calls
                called, rec_args, rec_kwargs, token = recorder.calls[0]
                assert called == name and result is token
                same_arguments(m, bind, (args, kwargs), (rec_args, rec_kwargs))
            # without an inner model, or with one lacking the member: AttributeError naming it
            for missing in (None, object()):
                w.language_model = missing
                try:
                    value = getattr(w, name)
                    if m.kind != "property":
                        args, kwargs = _minimal_call(m)
                        value = value(*args, **kwargs)
                        if m.kind == "async":
                            asyncio.run(value)
                except AttributeError as exc:
                    assert name in str(exc), str(exc)
                else:
                    raise AssertionError(f"{name}: no AttributeError with language_model={missing!r}")


def expected_signature(m: Member, inner_method, namespace: dict) -> inspect.Signature:
    """The inner method's signature with its string annotations evaluated, as the wrapper's should read;
    an annotation naming what inner.py imports only for type checkers is left out of the wrapper."""
    def expected(annotation, spec: str | None):
        if spec is not None and TYPE_CHECKING_ONLY in spec:
            return inspect.Parameter.empty
        return eval(annotation, namespace) if isinstance(annotation, str) else annotation

    signature = inspect.signature(inner_method)
    specs = {p.name: p.annotation for p in m.params}
    params = [p.replace(annotation=expected(p.annotation, specs.get(p.name))) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=expected(signature.return_annotation, m.returns))


class _TorchTensor:
    """`torch.Tensor` in the stub."""


STUBS = {"torch": {"Tensor": _TorchTensor}}


@contextlib.contextmanager
def stubbed(modules: dict[str, dict]):
    """Stand-ins for packages a tree imports but the test environment lacks."""
    import types

    saved = {name: sys.modules.get(name) for name in modules}
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _minimal_call(m: Member) -> tuple[tuple, dict]:
    args = tuple(Token(p.name) for p in m.params if p.kind in ("posonly", "regular") and p.default is None)
    kwargs = {p.name: Token(p.name) for p in m.params if p.kind == "kwonly" and p.default is None}
    return args, kwargs


# --------------------------------------------------------------------------- regressions (minimal reproductions)
#
# Inputs that once went wrong: comments after a class header, parameters named like the builtins
# the generated body uses, a staticmethod's parameter named `self`, quoted annotations.


INNER_PY = '''\
class LayerSpec:
    pass


class InnerBase:
    def get_embed_and_head(self):
        return "inner embed and head"


class InnerForCausalLM(InnerBase){inner_header}
    def __init__(self, config):
        self.config = config

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        return layer_ids
{inner_extra}'''

WRAPPER_PY = '''\
from sglang.srt.models.inner import InnerForCausalLM


class WrapperBase:
    def {base_member}(self):
        return "the wrapper's own"


class WrapperForConditionalGeneration(WrapperBase){wrapper_header}
    def __init__(self, config):
        self.language_model = InnerForCausalLM(config)


EntryClass = [WrapperForConditionalGeneration]
'''


def small_tree(root: Path, names=("get_embed_and_head", "set_eagle3_layers_to_capture"), inner_header=":", inner_extra="",
               wrapper_header=":", base_member="get_embed_and_head", inner_py=INNER_PY, wrapper_py=WRAPPER_PY) -> Path:
    ex = Example([], [], [], "typing", [], [], "absolute", [], False, False, True, True, [], Layout("    ", "\n"), Layout("    ", "\n"),
                 extra_protocol=list(names))
    srt = root / "sglang" / "srt"
    write_tree(root, ex)  # the folders and the consumer calling `names`
    (srt / "models" / "inner.py").write_text(inner_py.format(inner_header=inner_header, inner_extra=inner_extra), encoding="utf-8")
    (srt / "models" / "wrapper.py").write_text(wrapper_py.format(wrapper_header=wrapper_header, base_member=base_member), encoding="utf-8")
    return srt / "models" / "wrapper.py"


def written(root: Path) -> tuple[set[str], bytes | None]:
    _, edits = plan_and_build(root)
    if not edits:
        return set(), None
    (edit,) = edits
    return set(edit.added.get(WRAPPER_CLASS, [])), edit.updated


@pytest.mark.parametrize(
    "header",
    [":", ":  # noqa: E501", ":# comment"],
    ids=["no-comment", "comment", "comment-no-space"],
)
def test_class_header_comment_inner_base_members_are_delegated(tmp_path, header, request):
    small_tree(tmp_path, inner_header=header, base_member="something_else")
    names, _ = written(tmp_path)
    assert names == {"get_embed_and_head", "set_eagle3_layers_to_capture"}


@pytest.mark.parametrize(
    "header",
    [":", ":  # noqa: E501", ":# comment", ":  # a\n    # b"],
    ids=["no-comment", "comment", "comment-no-space", "comment-then-comment-line"],
)
def test_class_header_comment_wrapper_base_members_are_not_shadowed(tmp_path, header, request):
    small_tree(tmp_path, wrapper_header=header)
    names, _ = written(tmp_path)
    assert names == {"set_eagle3_layers_to_capture"}, "the wrapper's inherited get_embed_and_head was shadowed"


@pytest.mark.parametrize("param", ["type", "hasattr"])
def test_parameter_named_like_a_builtin_the_generated_body_uses(tmp_path, param):
    inner = INNER_PY.replace("layer_ids=None)", f"layer_ids=None, {param}=False)")
    path = small_tree(tmp_path, names=("set_eagle3_layers_to_capture",), inner_py=inner)
    names, patched = written(tmp_path)
    assert names == {"set_eagle3_layers_to_capture"}
    path.write_bytes(patched)
    with tree_importable(tmp_path):
        Wrapper = getattr(importlib.import_module("sglang.srt.models.wrapper"), WRAPPER_CLASS)
        w = Wrapper(None)
        assert w.set_eagle3_layers_to_capture([1], **{param: True}) == [1]
        w.language_model = None
        with pytest.raises(AttributeError, match="set_eagle3_layers_to_capture"):
            w.set_eagle3_layers_to_capture([1])


def test_static_method_with_a_parameter_named_self_compiles(tmp_path):
    inner = INNER_PY.replace(
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):",
        "    @staticmethod\n    def set_eagle3_layers_to_capture(self, layer_ids=None):",
    )
    small_tree(tmp_path, names=("set_eagle3_layers_to_capture",), inner_py=inner)
    names, patched = written(tmp_path)
    assert names == {"set_eagle3_layers_to_capture"}
    compile(patched, "wrapper.py", "exec")


def test_quoted_annotation_names_are_imported(tmp_path):
    import typing

    inner = INNER_PY.replace("layer_ids=None)", 'layer_ids: "Optional[LayerSpec]" = None)')
    inner = "from typing import Optional\n\n\n" + inner
    path = small_tree(tmp_path, names=("set_eagle3_layers_to_capture",), inner_py=inner)
    _, patched = written(tmp_path)
    path.write_bytes(patched)
    with tree_importable(tmp_path):
        Wrapper = getattr(importlib.import_module("sglang.srt.models.wrapper"), WRAPPER_CLASS)
        Inner = importlib.import_module("sglang.srt.models.inner")
        hints = typing.get_type_hints(Wrapper.set_eagle3_layers_to_capture)
        assert hints["layer_ids"] == typing.Optional[Inner.LayerSpec]
