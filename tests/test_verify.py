"""The proof stage: every name a generated delegation uses means, in the wrapper, what it meant in the
inner file, or the delegation takes a form that needs no such name.

One regression test per failure class seen on real trees:

(a) a default or annotation that is a class attribute of the inner class;
(b) a name that reaches the inner file through `from x import *`;
(c) a name the inner file binds under a module-level `if` (or `try`);
(d) a name the wrapper imports only under `if TYPE_CHECKING:`, only inside a function, or only
    under a module-level `if`;
(e) a name the inner file imports only under `if TYPE_CHECKING:` (a package that may not be installed);
(f) a wrapper class-body name (its own attribute, or a member written before) that shadows a copied
    default or annotation;
(g) a member EAGLE-3 code assigns (`model.x = ...`);
(h) a hook the wrapper defines under `if _is_cuda:` in its class body, or assigns there (or under `try`).

Each builds a small tree, patches it in-process, imports the patched wrapper (with stub modules
for packages that are not installed) and checks that a call without arguments reaches the inner
model with the very defaults a direct call to the inner method gets.  The same check on every pinned
release's `apply --all` is in tests/test_release_range.py (test_apply_all_keeps_every_module_importing).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import textwrap
import types
from pathlib import Path

import pytest
from test_properties import INNER_CLASS, WRAPPER_CLASS, Example, Layout, tree_importable, write_tree
from typer.testing import CliRunner

from eaglepatch.cli import app
from eaglepatch.rewrite.edits import build_edits
from eaglepatch.run import analyze

HOOKS = ("get_embed_and_head", "set_eagle3_layers_to_capture")
RUNNER = CliRunner()


# --------------------------------------------------------------------------- building and patching trees


def make_tree(root: Path, inner: str, wrapper: str, names=HOOKS, extra: dict[str, str] | None = None, consumer: str | None = None) -> Path:
    """A minimal tree: models/inner.py, models/wrapper.py, a consumer calling `names`, and `extra` files."""
    ex = Example([], [], [], "typing", [], [], "absolute", [], False, False, True, True, [], Layout("    ", "\n"),
                 Layout("    ", "\n"), extra_protocol=list(names))
    write_tree(root, ex)
    srt = root / "sglang" / "srt"
    (srt / "models" / "inner.py").write_text(textwrap.dedent(inner), encoding="utf-8")
    (srt / "models" / "wrapper.py").write_text(textwrap.dedent(wrapper), encoding="utf-8")
    for rel, text in (extra or {}).items():
        path = srt / rel
        for folder in path.relative_to(srt).parents:
            (srt / folder).mkdir(parents=True, exist_ok=True)
            (srt / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    if consumer is not None:
        (srt / "speculative" / "eagle_worker.py").write_text(textwrap.dedent(consumer), encoding="utf-8")
    return srt / "models" / "wrapper.py"


def build(root: Path):
    analysis = analyze(root, [f"wrapper:{WRAPPER_CLASS}"])
    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    return analysis, [e for e in edits if e.changed], errors


def patch(root: Path) -> str:
    """Plan, prove and write the patch; the patched wrapper's text."""
    _, edits, errors = build(root)
    assert not errors, [str(e) for e in errors]
    (edit,) = edits
    edit.path.write_bytes(edit.updated)
    return edit.updated.decode("utf-8")


@contextlib.contextmanager
def stub_modules(**modules: dict):
    """Stand-ins for packages the tree imports but this environment may lack (`torch`, ...)."""
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


class Tensor:
    """`torch.Tensor` in the stub."""


TORCH = {"Tensor": Tensor}


@contextlib.contextmanager
def imported(root: Path):
    """(wrapper module, inner module) of the patched tree, with stubs for `torch`."""
    with stub_modules(torch=TORCH), tree_importable(root):
        wrapper = importlib.import_module("sglang.srt.models.wrapper")
        inner = importlib.import_module("sglang.srt.models.inner")
        yield wrapper, inner


def same_value(got, want) -> bool:
    """A default forwarded by the wrapper is the inner's own default: the very object, or an equal literal."""
    return got is want or (type(got) is type(want) and got == want and not callable(got))


def assert_forwards_inner_defaults(root: Path, member: str, args=(), kwargs=None) -> None:
    """Calling the wrapper's member reaches the inner model with what a direct call would have got."""
    with imported(root) as (wrapper_module, inner_module):
        wrapper = getattr(wrapper_module, WRAPPER_CLASS)(None)
        direct = getattr(getattr(inner_module, INNER_CLASS)(None), member)(*args, **(kwargs or {}))
        via = getattr(wrapper, member)(*args, **(kwargs or {}))
        assert isinstance(direct, dict) and set(via) == set(direct), (via, direct)
        for name, value in direct.items():
            assert same_value(via[name], value), f"{member}: {name} = {via[name]!r}, the inner's own default is {value!r}"


def received(*names: str) -> str:
    return "return {" + ", ".join(f"{n!r}: {n}" for n in names) + "}"


WRAPPER = f'''\
    from sglang.srt.models.inner import {INNER_CLASS}


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)


    EntryClass = [{WRAPPER_CLASS}]
    '''

EMBED = '''
        def get_embed_and_head(self):
            return {"embed": "embed", "head": "head"}
'''


# --------------------------------------------------------------------------- (a) class attributes of the inner class


INNER_CLASS_ATTRIBUTES = f'''\
    class LayerSpec:
        pass


    class {INNER_CLASS}:
        DEFAULT_LAYERS = (2, 4)
        MARKER = object()
        Spec = LayerSpec

        class Options:
            pass

        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids=DEFAULT_LAYERS, marker=MARKER, spec: Spec = None, options: Options = None):
            {received("layer_ids", "marker", "spec", "options")}
    '''


def test_a_class_attribute_default_and_annotation_of_the_inner_class(tmp_path):
    make_tree(tmp_path, INNER_CLASS_ATTRIBUTES, WRAPPER)
    text = patch(tmp_path)
    compile(text, "wrapper.py", "exec")
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, inner_module):
        got = inspect.signature(getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture)
        want = inspect.signature(getattr(inner_module, INNER_CLASS).set_eagle3_layers_to_capture)
        assert got == want


# --------------------------------------------------------------------------- (b) star imports


STAR_DEFAULTS = '''\
    __all__ = ["DEFAULT_SCALE", "SENTINEL", "LayerSpec"]

    DEFAULT_SCALE = 0.5
    SENTINEL = object()


    class LayerSpec:
        pass
    '''

INNER_STAR = f'''\
    from typing import Optional

    from sglang.srt.configs.star_defaults import *
    from math import *


    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids: Optional[LayerSpec] = None, scale=DEFAULT_SCALE, marker=SENTINEL, turn=tau):
            {received("layer_ids", "scale", "marker", "turn")}
    '''


def test_b_name_from_a_star_import(tmp_path):
    make_tree(tmp_path, INNER_STAR, WRAPPER, extra={"configs/star_defaults.py": STAR_DEFAULTS})
    text = patch(tmp_path)
    assert "from sglang.srt.configs.star_defaults import " in text  # imported from where the inner gets it
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, inner_module):
        hints = getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture.__annotations__
        assert hints["layer_ids"] == getattr(inner_module, INNER_CLASS).set_eagle3_layers_to_capture.__annotations__["layer_ids"]


# --------------------------------------------------------------------------- (c) bound under a module-level if


INNER_IF = f'''\
    import os
    from typing import Optional

    if os.environ.get("EAGLEPATCH_NEVER_SET"):
        DEFAULT_SCALE = 2.0

        class LayerSpec:
            kind = "never"
    else:
        DEFAULT_SCALE = 0.5

        class LayerSpec:
            kind = "this one"

    if True:
        SENTINEL = object()

    try:
        FACTOR = 3
    except ImportError:
        FACTOR = 4


    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, spec: Optional[LayerSpec] = None, scale=DEFAULT_SCALE, marker=SENTINEL, factor=FACTOR):
            {received("spec", "scale", "marker", "factor")}
    '''


def test_c_name_bound_under_a_module_level_if(tmp_path):
    make_tree(tmp_path, INNER_IF, WRAPPER)
    patch(tmp_path)
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, inner_module):
        hints = getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture.__annotations__
        assert hints["spec"].__args__[0] is inner_module.LayerSpec


# --------------------------------------------------------------------------- (d) the wrapper binds a name only where it does not run


INNER_PLAIN = f'''\
    from typing import List, Optional

    DEFAULT_SCALE = 0.5


    class LayerSpec:
        pass


    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None, spec: Optional[LayerSpec] = None, scale: float = DEFAULT_SCALE):
            {received("layer_ids", "spec", "scale")}
    '''

WRAPPER_TYPE_CHECKING = f'''\
    from typing import TYPE_CHECKING

    from sglang.srt.models.inner import {INNER_CLASS}

    if TYPE_CHECKING:
        from typing import List, Optional

        from sglang.srt.models.inner import LayerSpec


    def _helper():
        from sglang.srt.models.inner import DEFAULT_SCALE

        return DEFAULT_SCALE


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)


    EntryClass = [{WRAPPER_CLASS}]
    '''

WRAPPER_MODULE_IF = f'''\
    import os

    from sglang.srt.models.inner import {INNER_CLASS}

    if os.environ.get("EAGLEPATCH_NEVER_SET"):
        from typing import List, Optional

        from sglang.srt.models.inner import DEFAULT_SCALE, LayerSpec


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)


    EntryClass = [{WRAPPER_CLASS}]
    '''


@pytest.mark.parametrize("wrapper", [WRAPPER_TYPE_CHECKING, WRAPPER_MODULE_IF], ids=["type-checking-and-function", "module-level-if"])
def test_d_wrapper_binds_the_name_only_where_it_does_not_run(tmp_path, wrapper):
    make_tree(tmp_path, INNER_PLAIN, wrapper)
    patch(tmp_path)
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, inner_module):
        got = inspect.signature(getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture)
        assert got == inspect.signature(getattr(inner_module, INNER_CLASS).set_eagle3_layers_to_capture)


# --------------------------------------------------------------------------- (e) the inner imports a name only for type checkers


def inner_type_checking(future: bool) -> str:
    head = "from __future__ import annotations\n\n    " if future else ""
    config = "Optional[PretrainedConfig]" if future else '"Optional[PretrainedConfig]"'
    returns = "PretrainedConfig" if future else '"PretrainedConfig"'
    return f'''\
    {head}from typing import TYPE_CHECKING, Optional

    import torch

    if TYPE_CHECKING:
        from eaglepatch_absent_package import PretrainedConfig


    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids: Optional[list] = None, hidden: Optional[torch.Tensor] = None, config: {config} = None) -> {returns}:
            {received("layer_ids", "hidden", "config")}
    '''


@pytest.mark.parametrize("future", [False, True], ids=["string-annotation", "future-annotations"])
def test_e_inner_imports_the_name_only_under_type_checking(tmp_path, future):
    make_tree(tmp_path, inner_type_checking(future), WRAPPER)
    text = patch(tmp_path)
    assert "eaglepatch_absent_package" not in text, "the wrapper must not import a package the inner only type-checks with"
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, _):
        hints = getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture.__annotations__
        assert "config" not in hints and "return" not in hints  # left out: not needed at run time
        assert hints["hidden"] == __import__("typing").Optional[Tensor]  # what can be proven is kept


WRAPPER_FUTURE_TYPE_CHECKING = f'''\
    from __future__ import annotations

    from typing import TYPE_CHECKING, Optional

    from sglang.srt.models.inner import {INNER_CLASS}

    if TYPE_CHECKING:
        from eaglepatch_absent_package import PretrainedConfig


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)


    EntryClass = [{WRAPPER_CLASS}]
    '''


def test_e_wrapper_with_future_annotations_keeps_what_it_type_checks_the_same_way(tmp_path):
    wrapper = WRAPPER_FUTURE_TYPE_CHECKING
    make_tree(tmp_path, inner_type_checking(True), wrapper)
    text = patch(tmp_path)
    assert "config: Optional[PretrainedConfig] = None" in text and "-> PretrainedConfig:" in text
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")


# --------------------------------------------------------------------------- (f) a wrapper class-body name shadows a copied one


WRAPPER_SHADOWS = f'''\
    from typing import List, Optional

    from sglang.srt.models.inner import DEFAULT_SCALE, {INNER_CLASS}, LayerSpec


    class {WRAPPER_CLASS}:
        DEFAULT_SCALE = 2.0
        Optional = None
        LayerSpec = "the wrapper's own"
        int = "not the builtin"

        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)


    EntryClass = [{WRAPPER_CLASS}]
    '''

INNER_FOR_SHADOWS = INNER_PLAIN.replace("scale: float = DEFAULT_SCALE)", "scale: float = DEFAULT_SCALE, count: int = 0)").replace("{'layer_ids': layer_ids, 'spec': spec, 'scale': scale}", "{'layer_ids': layer_ids, 'spec': spec, 'scale': scale, 'count': count}")


def test_f_wrapper_class_attribute_shadows_a_copied_default(tmp_path):
    make_tree(tmp_path, INNER_FOR_SHADOWS, WRAPPER_SHADOWS)
    patch(tmp_path)
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    with imported(tmp_path) as (wrapper_module, inner_module):
        got = inspect.signature(getattr(wrapper_module, WRAPPER_CLASS).set_eagle3_layers_to_capture)
        assert got == inspect.signature(getattr(inner_module, INNER_CLASS).set_eagle3_layers_to_capture)
        assert getattr(wrapper_module, WRAPPER_CLASS).DEFAULT_SCALE == 2.0  # the wrapper's own stays


def inner_hook_default(setter_first: bool) -> str:
    """`source=get_embed_and_head` names the module function when the setter comes first in the class
    body, and the inner class's own method (bound just before) otherwise."""
    getter = """
        def get_embed_and_head(self):
            return {"embed": "embed", "head": "head"}
"""
    setter = f"""
        def set_embed_and_head(self, embed=None, head=None, source=get_embed_and_head):
            {received("embed", "head", "source")}
"""
    body = setter + getter if setter_first else getter + setter
    return f'''\
    def get_embed_and_head():
        return "the module-level helper"


    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {body}'''


@pytest.mark.parametrize("setter_first", [True, False], ids=["module-function", "inner-method"])
def test_f_member_written_before_shadows_a_copied_default(tmp_path, setter_first):
    make_tree(tmp_path, inner_hook_default(setter_first), WRAPPER, names=("get_embed_and_head", "set_embed_and_head"))
    patch(tmp_path)
    assert_forwards_inner_defaults(tmp_path, "set_embed_and_head")


# --------------------------------------------------------------------------- (g) members EAGLE-3 code assigns


CONSUMER_ASSIGNS = '''\
    """EAGLE-3 worker (generated)."""


    class EAGLEWorker:
        def __init__(self, target_worker):
            self.target_worker = target_worker

        def init_eagle3(self, *args, **kwargs):
            model = self.target_worker.model_runner.model
            model.get_embed_and_head()
            if model.hot_token_id is None:
                model.hot_token_id = [1, 2]
            model.capture_hook(*args, **kwargs)
            model.capture_hook = print
    '''

INNER_ASSIGNED = f'''\
    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
            self.hot_token_id = None
    {EMBED}
        def capture_hook(self, *args):
            return args
    '''


def test_g_assigned_member_gets_a_forwarding_setter(tmp_path):
    make_tree(tmp_path, INNER_ASSIGNED, WRAPPER, consumer=CONSUMER_ASSIGNS)
    analysis, _, _ = build(tmp_path)
    patch(tmp_path)
    with imported(tmp_path) as (wrapper_module, inner_module):
        Wrapper = getattr(wrapper_module, WRAPPER_CLASS)
        assert isinstance(inspect.getattr_static(Wrapper, "hot_token_id"), property)
        wrapper = Wrapper(None)
        assert wrapper.hot_token_id is None
        wrapper.hot_token_id = [1, 2]  # what the consumer does
        assert wrapper.language_model.hot_token_id == [1, 2] and wrapper.hot_token_id == [1, 2]
        # a method the consumer calls and replaces: the call and the replacement both reach the inner model
        assert wrapper.capture_hook(1, 2) == (1, 2)
        wrapper.capture_hook = print
        assert wrapper.language_model.capture_hook is print and wrapper.capture_hook is print
        wrapper.language_model = None
        with pytest.raises(AttributeError, match="hot_token_id"):
            wrapper.hot_token_id = [3]
    assert analysis.protocol.members["hot_token_id"].assigned_at == ("speculative/eagle_worker.py:12",)
    assert analysis.protocol.members["capture_hook"].assigned_at == ("speculative/eagle_worker.py:14",)
    result = RUNNER.invoke(app, ["revert", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sglang/srt/models/wrapper.py").read_text() == textwrap.dedent(WRAPPER)


# --------------------------------------------------------------------------- (h) hooks defined conditionally in the class body


WRAPPER_CONDITIONAL_HOOK = f'''\
    from sglang.srt.models.inner import {INNER_CLASS}

    _is_cuda = True


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)

        if _is_cuda:

            def get_embed_and_head(self):
                return "the wrapper's own"

        else:
            pass


    EntryClass = [{WRAPPER_CLASS}]
    '''

INNER_HOOKS = f'''\
    class {INNER_CLASS}:
        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            {received("layer_ids")}
    '''


def test_h_hook_defined_under_if_in_the_class_body_counts_as_present(tmp_path):
    make_tree(tmp_path, INNER_HOOKS, WRAPPER_CONDITIONAL_HOOK)
    analysis, edits, errors = build(tmp_path)
    (plan,) = analysis.plans
    assert {m.member.name for m in plan.fixes} == {"set_eagle3_layers_to_capture"}
    assert "get_embed_and_head" in {m.member.name for m in plan.forwarded}
    (edit,) = edits
    assert edit.added == {WRAPPER_CLASS: ["set_eagle3_layers_to_capture"]}
    patch(tmp_path)
    with imported(tmp_path) as (wrapper_module, _):
        assert getattr(wrapper_module, WRAPPER_CLASS)(None).get_embed_and_head() == "the wrapper's own"
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")


WRAPPER_CONDITIONAL_ATTRIBUTE = f'''\
    from sglang.srt.models.inner import {INNER_CLASS}

    _is_cuda = True


    def _own_embed_and_head(self):
        return "the wrapper's own"


    class {WRAPPER_CLASS}:
        def __init__(self, config):
            self.language_model = {INNER_CLASS}(config)

        if _is_cuda:
            get_embed_and_head = _own_embed_and_head
        else:
            get_embed_and_head = None
        try:
            set_eagle3_layers_to_capture: object = staticmethod(lambda layer_ids=None: "the wrapper's own")
        except NameError:
            pass


    EntryClass = [{WRAPPER_CLASS}]
    '''


def test_h_class_attribute_assigned_under_if_or_try_in_the_class_body_counts_as_present(tmp_path):
    """A member the wrapper's class body binds by assignment inside an `if`/`try` block is the wrapper's
    own: not planned, not written again, and `check` reports nothing missing."""
    make_tree(tmp_path, INNER_HOOKS, WRAPPER_CONDITIONAL_ATTRIBUTE)
    analysis, edits, errors = build(tmp_path)
    assert not errors, [str(e) for e in errors]
    (plan,) = analysis.plans
    assert not plan.fixes and not plan.required_gaps, [m.member.name for m in plan.fixes]
    assert {"get_embed_and_head", "set_eagle3_layers_to_capture"} <= {m.member.name for m in plan.forwarded}
    assert not edits
    result = RUNNER.invoke(app, ["check", str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"])
    assert result.exit_code == 0, result.output
    with imported(tmp_path) as (wrapper_module, _):
        wrapper = getattr(wrapper_module, WRAPPER_CLASS)(None)
        assert wrapper.get_embed_and_head() == wrapper.set_eagle3_layers_to_capture() == "the wrapper's own"


# --------------------------------------------------------------------------- what cannot be proven


INNER_UNPROVABLE = f'''\
    import os


    class {INNER_CLASS}:
        if os.environ.get("EAGLEPATCH_NEVER_SET"):
            MODE = object()
        else:
            MODE = object()

        def __init__(self, config):
            self.config = config
    {EMBED}
        def set_eagle3_layers_to_capture(self, layer_ids=None, mode=MODE):
            {received("layer_ids", "mode")}
    '''


def test_default_no_form_can_prove_is_forwarded_through_args_and_kwargs(tmp_path):
    make_tree(tmp_path, INNER_UNPROVABLE, WRAPPER)
    text = patch(tmp_path)
    assert "def set_eagle3_layers_to_capture(self, *args, **kwargs):" in text
    comment = next(line for line in text.splitlines() if "MODE" in line)
    assert comment.strip().startswith("# eaglepatch:"), comment
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture", ([7],), {"mode": "given"})
    result = RUNNER.invoke(app, ["revert", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sglang/srt/models/wrapper.py").read_text() == textwrap.dedent(WRAPPER)


INNER_FALLS_BACK_FIRST = f'''\
    import os
    from typing import Optional


    class LayerSpec:
        pass


    class {INNER_CLASS}:
        if os.environ.get("EAGLEPATCH_NEVER_SET"):
            MODE = object()
        else:
            MODE = object()

        def __init__(self, config):
            self.config = config

        def get_embed_and_head(self, spec: Optional[LayerSpec] = None, mode=MODE):
            {received("spec", "mode")}

        def set_eagle3_layers_to_capture(self, spec: Optional[LayerSpec] = None):
            {received("spec")}
    '''


def test_imports_planned_for_a_signature_that_falls_back_are_not_counted_on_by_the_next(tmp_path):
    make_tree(tmp_path, INNER_FALLS_BACK_FIRST, WRAPPER)
    text = patch(tmp_path)
    assert "def get_embed_and_head(self, *args, **kwargs):" in text
    assert "from typing import Optional" in text and "LayerSpec" in text.split("class")[0]
    assert_forwards_inner_defaults(tmp_path, "get_embed_and_head")
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")


def test_a_patch_that_fails_the_proof_is_an_error_and_nothing_is_written(tmp_path, monkeypatch):
    """The proof does not trust the planner: with signatures copied verbatim (what eaglepatch used to do),
    the file is an error (exit 2, one line naming the name, the file and the line) and stays as it was."""
    import eaglepatch.analyze.forms
    import eaglepatch.rewrite.edits

    monkeypatch.setattr(eaglepatch.rewrite.edits, "respelled_signature", eaglepatch.analyze.forms.copied_signature)
    path = make_tree(tmp_path, INNER_FOR_SHADOWS, WRAPPER_SHADOWS)
    before = path.read_bytes()
    _, edits, errors = build(tmp_path)
    assert not edits
    (error,) = errors
    message = str(error)
    assert "\n" not in message and message.startswith("models/wrapper.py:")
    assert "DEFAULT_SCALE" in message or "Optional" in message, message
    for command in ("diff", "apply"):
        result = RUNNER.invoke(app, [command, str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"])
        assert result.exit_code == 2, result.output
        errors = [line for line in result.stderr.splitlines() if line.startswith("eaglepatch: error:")]
        assert len(errors) == 1 and "models/wrapper.py:" in errors[0], result.stderr
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- explain shows the proven form


def explain_json(root: Path, member: str) -> dict:
    import json

    result = RUNNER.invoke(app, ["explain", member, str(root), "--model", f"wrapper:{WRAPPER_CLASS}", "--format", "json"])
    assert result.exit_code == 0, result.output
    # the member's own entry (a toy inner whose forward never captures gets a plumbing entry beside it)
    (model,) = [m for m in json.loads(result.stdout)["models"] if m["gap"] == "member"]
    return model


def test_explain_shows_the_proven_code_apply_writes(tmp_path):
    """Where the inner's defaults are class attributes, the code must be respelled to mean the same in the
    wrapper: explain shows that proven text, the very lines apply then writes, not a verbatim copy."""
    path = make_tree(tmp_path, INNER_CLASS_ATTRIBUTES, WRAPPER)
    model = explain_json(tmp_path, "set_eagle3_layers_to_capture")
    assert model["proven"] is True and model["proof"] is None
    assert "layer_ids=DEFAULT_LAYERS" not in model["would_write"]  # a bare class attribute of the inner means nothing here
    result = RUNNER.invoke(app, ["explain", "set_eagle3_layers_to_capture", str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"])
    assert result.exit_code == 0, result.output
    assert "proven" in result.stdout and "not proven" not in result.stdout
    # 1: written, and the toy inner's forward, which never captures, is left as check said it would be
    assert RUNNER.invoke(app, ["apply", str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"]).exit_code == 1
    written = path.read_text(encoding="utf-8")
    assert model["would_write"] in written
    assert model["would_write"].count("def set_eagle3_layers_to_capture(") == 1
    for spec in model["imports"]:  # what the file gains is in the file
        assert spec.replace(" as ", " ").split()[-1] in written, spec
    assert_forwards_inner_defaults(tmp_path, "set_eagle3_layers_to_capture")


def test_explain_says_when_the_proof_fails_and_why_in_one_line(tmp_path, monkeypatch):
    """With signatures copied verbatim the patch cannot be proven: explain still answers (exit 0), says the
    code is not proven and gives the same one-line reason diff and apply stop with."""
    import eaglepatch.analyze.forms
    import eaglepatch.rewrite.edits

    monkeypatch.setattr(eaglepatch.rewrite.edits, "respelled_signature", eaglepatch.analyze.forms.copied_signature)
    make_tree(tmp_path, INNER_FOR_SHADOWS, WRAPPER_SHADOWS)
    model = explain_json(tmp_path, "set_eagle3_layers_to_capture")
    assert model["proven"] is False
    _, _, errors = build(tmp_path)
    (error,) = errors
    assert model["proof"] == str(error) and "\n" not in model["proof"]
    result = RUNNER.invoke(app, ["explain", "set_eagle3_layers_to_capture", str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "not proven" in out and " ".join(str(error).split()) in out


# --------------------------------------------------------------------------- the names a generated body reads


@pytest.mark.parametrize(
    "module_line, name",
    [
        ("def hasattr(obj, name):\n        return True\n", "hasattr"),  # the body's look-before-you-leap
        ("AttributeError = KeyError\n", "AttributeError"),  # what the body raises
        ("import AttributeError.errors\n", "AttributeError"),  # a dotted import binds its first name
    ],
)
def test_a_body_reading_a_builtin_the_module_rebinds_is_not_written(tmp_path, module_line, name):
    """A generated body reads builtins (`hasattr`, `AttributeError`); where the wrapper's module binds
    one of them itself, the body would mean something else there: an error for the file, nothing written."""
    wrapper = WRAPPER.replace(f"\n\n    class {WRAPPER_CLASS}:", f"\n\n    {module_line}\n\n    class {WRAPPER_CLASS}:", 1)
    path = make_tree(tmp_path, INNER_PLAIN, wrapper)
    before = path.read_bytes()
    _, edits, errors = build(tmp_path)
    assert not edits
    (error,) = errors
    assert f"`{name}`" in str(error) or name in str(error), str(error)
    assert "rebinds a builtin" in str(error)
    result = RUNNER.invoke(app, ["apply", str(tmp_path), "--model", f"wrapper:{WRAPPER_CLASS}"])
    assert result.exit_code == 2, result.output
    assert path.read_bytes() == before


def test_a_body_reading_only_builtins_nothing_rebinds_is_written(tmp_path):
    """The same wrapper without the rebinding: the body is proven and written."""
    wrapper = WRAPPER.replace(f"\n\n    class {WRAPPER_CLASS}:", f"\n\n    has_attr = hasattr\n\n    class {WRAPPER_CLASS}:", 1)
    make_tree(tmp_path, INNER_PLAIN, wrapper)
    _, edits, errors = build(tmp_path)
    assert not errors and edits
