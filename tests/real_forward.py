"""Run a real SGLang causal LM's forward on stubs: the plumbing proof for classes of real releases.

Run as a script in a fresh interpreter (stub_imports installs an import hook for the whole process):

    python tests/real_forward.py SITE_PACKAGES SPEC.json [--code-cache FOLDER]

SPEC.json is a list of {"module": ..., "class": ..., "hooks": [capture hook, ...], "backbone": "real" |
"stand-in" | "stand-in-hooked", "key": its name in the output (default "module:class")}.  For each class it prints, as JSON, what the runs did -- ``off`` (forward as built),
``on[hook]`` (after ``hook([0, 2, 4])``, for each hook the class defines) and ``not_last`` (the first
hook, on a pipeline rank that is not the last) -- each as the forward's return, every call of the logits
processor (its arguments bound to the release's own ``LogitsProcessor.forward``) and what the hook
changed on the backbone.  ``hooks`` lists the hooks the class defines, read off its MRO (a stub base
answers any attribute; it does not count).

How the class is built, and why:

* its ``__init__`` chain runs statement by statement: a statement that raises (a vision tower, a
  quantized head, ``make_layers`` on a stub config) is skipped and the next one runs, so the defaults
  the chain writes -- the flag a plumbing fix adds at its end -- are set as in the release, and nothing
  is set that the chain does not set.  With a real backbone, so do the ``__init__``s of the model
  classes the class's modules hold (the backbone's among them);
* the pipeline group is ours: ``get_pp_group()`` and ``get_parallel().pp_group`` hand out one
  ``PPGroup`` whose fields each run sets, so ``self.pp_group`` is set only where the chain sets it;
* the backbone is the attribute the capture hook writes the layer ids on (else ``self.model``).  A
  real one is the release's, built by the chain, its decoder layers, embedding and norm replaced by
  plumbing_harness's recording ones: the aux states are the streams entering the captured layers
  (``(h0 + r0)``); where its loop checks its layers' types (NemotronH's ``isinstance(layer, Layers)``)
  the recording layers take those classes on, and ``layer.forward(...)`` records as ``layer(...)``.
  A stand-in has the contract the plumbing analysis checks of a backbone: ``hidden`` when
  ``layers_to_capture`` is empty, else ``(hidden, [aux<i> for i in layers_to_capture])``, the
  proxy on a rank that is not the last; its aux names carry the ids, so the convention a hook writes
  (``val + 1``) shows in what the logits processor gets.  0.5.23's backbones hand a capture callback
  to layers of another API: the stand-in serves there;
* a name nothing set raises AttributeError, and calling a module runs its forward, as on torch's
  Module (the stub base would answer any name, and return itself when called);
* the logits processor records; ``lm_head`` is a token; ``general_mm_embed_routine`` calls the language
  model as it does for a text-only batch.

Everything else -- the class forward, the hook -- is the release's code (or what ``apply`` wrote).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import sys
import textwrap
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from plumbing_harness import Embed, PPGroup, RMSNorm, StreamLayer, Sym, Token  # noqa: E402

PP = PPGroup()
Sym.device = "meta"  # what a forward may ask a tensor beyond its shape
HOOK = "set_eagle3_layers_to_capture"
IDS = [0, 2, 4]


class _Parallel:
    @property
    def pp_group(self) -> PPGroup:
        return PP


def _get_parallel(*args: object, **kwargs: object) -> _Parallel:
    return _Parallel()


def _get_pp_group(*args: object, **kwargs: object) -> PPGroup:
    return PP


def _general_mm_embed_routine(input_ids, forward_batch, language_model, multimodal_model=None, **kwargs):
    """A text-only batch: the language model gets the ids (no image embeddings to merge in)."""
    for unused in ("data_embedding_funcs", "placeholder_tokens", "use_deepstack", "feature_dtypes"):
        kwargs.pop(unused, None)
    return language_model(input_ids=input_ids, forward_batch=forward_batch, input_embeds=None, **kwargs)


SERVICES = {"get_pp_group": _get_pp_group, "get_parallel": _get_parallel, "general_mm_embed_routine": _general_mm_embed_routine}


class Backbone:
    """The backbone as the plumbing analysis reads it: captures the layers ``layers_to_capture`` names.
    `hooked`: it also has its layers (six, as `Config`) and a capture hook of its own for every algorithm
    (``set_<x>_layers_to_capture(ids)`` choosing those layers), as a backbone that marks its chosen layers
    itself does (Qwen3.5's): which layers a class's hook hands it, and what the class does with what it
    returns, is then what shows."""

    def __init__(self, hooked: bool = False) -> None:
        self.layers_to_capture: list[int] = []
        self.calls = 0
        if hooked:
            self.layers = [Token(f"layer{i}") for i in range(6)]

    def __getattr__(self, name: str) -> object:
        if "layers" in vars(self) and re.fullmatch(r"set_\w+_layers_to_capture", name):
            def choose(layer_ids: list[int]) -> None:
                self.layers_to_capture = list(layer_ids)

            return choose
        raise AttributeError(name)

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        if not PP.is_last_rank:
            return Token("pp_proxy")
        hidden = Sym("hidden")
        if not self.layers_to_capture:
            return hidden
        return hidden, [Sym(f"aux{i}") for i in self.layers_to_capture]


class Recorder:
    """The logits processor: each call bound to the release's own ``LogitsProcessor.forward``."""

    def __init__(self, signature: inspect.Signature):
        self.signature = signature
        self.calls: list[dict] = []

    def __call__(self, *args: object, **kwargs: object) -> Token:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments))
        return Token(f"logits#{len(self.calls)}")


def describe(value: object) -> object:
    if isinstance(value, Sym):
        return value.expr
    if isinstance(value, Token):
        return f"<{value.name}>"
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


class _Tolerant(ast.NodeTransformer):
    """Every statement of a body wrapped in ``try: ... except Exception: pass``."""

    def _wrap(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            statement = self.visit(statement)
            if isinstance(statement, (ast.Return, ast.Pass)):
                out.append(statement)
                continue
            handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=None, body=[ast.Pass()])
            out.append(ast.Try(body=[statement], handlers=[handler], orelse=[], finalbody=[]))
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt) and not isinstance(node, ast.Try):
                setattr(node, name, self._wrap(body))
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.stmt):
                self.visit(child)
        return node


def tolerant_init(cls: type) -> types.FunctionType | None:
    """``cls.__init__`` with each statement skipped when it raises, compiled in its module's globals and
    with ``cls`` as its ``__class__`` (so ``super().__init__()`` is the release's call)."""
    init = cls.__dict__.get("__init__")
    if not isinstance(init, types.FunctionType):
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):  # made at run time (a dataclass's), or not a def of its own
        return None
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef) or function.name != "__init__":
        return None
    function.decorator_list = []
    function.body = _Tolerant()._wrap(function.body)
    function.body.insert(0, ast.Expr(ast.Name("__class__", ast.Load())))  # the cell zero-argument super() reads
    maker = ast.FunctionDef(
        name="_make", args=ast.arguments(posonlyargs=[], args=[ast.arg("__class__")], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[function, ast.Return(ast.Name(function.name, ast.Load()))], decorator_list=[], returns=None, type_params=[],
    )
    module = ast.fix_missing_locations(ast.Module(body=[maker], type_ignores=[]))
    namespace: dict = {}
    exec(compile(module, inspect.getsourcefile(init) or "<init>", "exec"), init.__globals__, namespace)
    made = namespace["_make"](cls)
    made.__defaults__, made.__kwdefaults__ = init.__defaults__, init.__kwdefaults__
    return made


class Config:
    """A text config: the numbers a causal LM reads; any other field is a stub."""

    num_hidden_layers = 6
    hidden_size = 8
    vocab_size = 16
    intermediate_size = 16
    num_attention_heads = 2
    num_key_value_heads = 2
    tie_word_embeddings = False
    rms_norm_eps = 1e-6
    rope_scaling: dict = {}
    architectures: list = []

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        import stub_imports

        return stub_imports.stub_class(f"Config.{name}", "config")()

    @property
    def text_config(self) -> Config:
        return self


_STACKS: dict[int, str] = {}  # backbone -> the attribute its decoder layers were installed in


def _stack_name(backbone: object) -> str:
    return _STACKS.get(id(backbone), "layers")


def _unset(self: object, name: str) -> object:
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _strict(instance: object, calls: list | None = None) -> None:
    """``instance`` made to behave as on torch: a name nothing set raises AttributeError (the stub base
    would answer it with a stub, and a flag the ``__init__`` chain never sets would read as False
    instead of failing every forward), and calling it runs its ``forward`` (the stub base's call
    returns the module itself)."""
    cls = type(instance)

    def call(self: object, *args: object, **kwargs: object) -> object:
        if calls is not None:
            calls.append(1)
        return self.forward(*args, **kwargs)  # type: ignore[attr-defined]

    namespace = {"__getattr__": _unset, "__module__": cls.__module__, "__call__": call}
    instance.__class__ = type(cls.__name__, (cls,), namespace)


def _model_classes(cls: type) -> list[type]:
    """The classes an instance of ``cls`` builds in its ``__init__`` chain, as far as the release's
    model modules go: every class of the modules its MRO is defined in, and the model classes those
    modules import (the backbone, ``Qwen2Model`` in qwen2_vl.py)."""
    modules = [sys.modules[k.__module__] for k in cls.__mro__ if k.__module__.startswith("sglang.srt.models.")]
    found: dict[type, None] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__.startswith("sglang.srt.models.") and not vars(value).get("_stub"):
                for klass in value.__mro__:
                    if klass.__module__.startswith("sglang."):
                        found[klass] = None
    return list(found)


def parts(backbone: object) -> tuple[str, str, list[str]]:
    """The backbone's embedding, decoder-layer list and final norms, by what its forward calls:
    ``self.wte(input_ids)``, ``self.h[i]`` / ``for layer in self.layers``, ``self.ln_f(hidden_states,
    residual)`` (``embed_tokens``, ``layers``, ``norm`` where its forward says nothing else)."""
    source = textwrap.dedent(inspect.getsource(type(backbone).forward))
    embed = re.search(r"self\.(\w+)\(\s*input_ids\s*\)", source)
    stack = (re.search(r"self\.(\w+)\[\s*(?:i|idx|layer_id|layer_idx|self\.start_layer)\b", source)
             or re.search(r"for \w+(?:,\s*\w+)? in (?:enumerate\(|islice\()?self\.(\w+)\b(?!\s*,)", source)
             or re.search(r"len\(self\.(\w+)\)", source))
    stack_name = stack.group(1) if stack else "layers"
    embed_name = embed.group(1) if embed else "embed_tokens"
    norms = [n for n in dict.fromkeys(re.findall(r"self\.(\w+)\(\s*hidden_states\s*(?:,\s*residual\s*)?\)", source))
             if n not in (embed_name, stack_name)]
    return embed_name, stack_name, norms or ["norm"]


def layer_targets(backbone: object) -> tuple[str, ...]:
    """What the backbone's loop unpacks a decoder layer's call into: ``("hidden_states", "residual")``,
    ``("hidden_states", "topk_indices")`` (DeepSeek-V2's), or the hidden states alone."""
    source = textwrap.dedent(inspect.getsource(type(backbone).forward))
    call = re.search(r"\(?\s*(\w+(?:\s*,\s*\w+)*)\s*,?\s*\)?\s*=\s*(?:layer|self\.\w+\[\s*\w+\s*\])(?:\.forward)?\(", source)
    return tuple(name.strip() for name in call.group(1).split(",")) if call else ("hidden_states",)


@dataclass
class Layer(StreamLayer):
    """A StreamLayer that returns what the loop unpacks: the residual as second value where the loop
    takes one back, a token for any other value (DeepSeek-V2's top-k indices)."""

    targets: tuple[str, ...] = ("hidden_states",)

    def __getattr__(self, name: str) -> object:
        """A real layer's other attributes (DeciLM's loop reads `layer._is_no_op_attention`): stubs."""
        if name.startswith("__"):
            raise AttributeError(name)
        import stub_imports

        return stub_imports.stub_class(f"Layer.{name}", "harness")()

    def forward(self, *args: object, **kwargs: object) -> object:
        """NemotronH's loop calls `layer.forward(...)`: the same recorded call."""
        return self(*args, **kwargs)

    def __call__(self, *args: object, **kwargs: object) -> object:
        returned = super().__call__(*args, **kwargs)
        extra = self.targets[2:] if self.pair else self.targets[1:]
        if not extra:
            return returned
        head = returned if isinstance(returned, tuple) else (returned,)
        return (*head, *(Token(f"{name}{self.index}") for name in extra))


def checked_layer_types(backbone: object) -> tuple[type, ...]:
    """The classes the backbone's loop checks its layers against (NemotronH's ``if not isinstance(layer,
    Layers): raise``, ``Layers`` a union of its decoder-layer classes): the recording layers take them on."""
    forward = type(backbone).forward
    source = textwrap.dedent(inspect.getsource(forward))
    found: list[type] = []
    for name in re.findall(r"isinstance\(\s*layer\w*\s*,\s*(\w+)\s*\)", source):
        value = forward.__globals__.get(name)
        for candidate in getattr(value, "__args__", None) or (value if isinstance(value, tuple) else (value,)):
            if isinstance(candidate, type) and candidate not in found:
                found.append(candidate)
    return tuple(found)


def backbone_attribute(cls: type, hooks: list[str]) -> str:
    """The attribute holding the backbone: the one the class's capture hook writes the layer ids on
    (``self.transformer.layers_to_capture = ...``), else the one its forward calls with the input ids,
    else ``model``."""
    for hook in hooks:
        owner = next((k for k in cls.__mro__ if hook in vars(k)), None)
        if owner is None:
            continue
        try:
            source = inspect.getsource(vars(owner)[hook])
        except (OSError, TypeError):
            continue
        found = re.search(r"self\.(\w+)\.(?:layers_to_capture\s*=|set_\w+_layers_to_capture\()", source)
        if found:
            return found.group(1)
    forward = next((vars(k)["forward"] for k in cls.__mro__ if "forward" in vars(k)), None)
    try:
        source = inspect.getsource(forward) if forward is not None else ""
    except (OSError, TypeError):
        source = ""
    called = re.search(r"=\s*self\.(\w+)\(\s*input_ids\b", source)  # `hidden_states = self.transformer(input_ids, ...)`
    return called.group(1) if called else "model"


def build(cls: type, signature: inspect.Signature, real_backbone: bool, attribute: str = "model", hooked: bool = False) -> tuple[object, object, Recorder, list]:
    saved = {}
    for klass in _model_classes(cls) if real_backbone else [k for k in cls.__mro__ if k.__module__.startswith("sglang.")]:
        made = tolerant_init(klass)
        if made is not None:
            saved[klass] = klass.__dict__["__init__"]
            klass.__init__ = made  # type: ignore[misc]
    try:
        model = cls(config=Config())  # as SGLang's loader calls it: `model_class(config=..., quant_config=...)`
    finally:
        for klass, init in saved.items():
            klass.__init__ = init  # type: ignore[misc]
    _strict(model)
    calls: list = []
    if real_backbone:
        backbone = vars(model).get(attribute)
        if backbone is None or vars(type(backbone)).get("_stub"):
            raise RuntimeError(f"{cls.__name__}.__init__ built no backbone in self.{attribute}: {backbone!r}")
        _strict(backbone, calls)
        config = Config()
        targets = layer_targets(backbone)
        pair = len(targets) > 1 and targets[1] == "residual"
        checked = checked_layer_types(backbone)
        kind = type("Layer", (Layer, *checked), {"__module__": __name__}) if checked else Layer
        layers = [kind(i, pair, targets=targets) for i in range(config.num_hidden_layers)]
        embed, stack, norms = parts(backbone)
        installed: dict[str, object] = {"start_layer": 0, "end_layer": len(layers), embed: Embed(), stack: layers}
        installed.update({norm: RMSNorm() for norm in norms})
        for name, value in installed.items():
            if isinstance(getattr(type(backbone), name, None), property):  # a read-only view of a field (Qwen3.5's `_start_layer`)
                object.__setattr__(backbone, f"_{name}", value)
                if getattr(backbone, name) != value:
                    raise RuntimeError(f"{type(backbone).__name__}.{name} is a property that does not read self._{name}")
                continue
            object.__setattr__(backbone, name, value)
        _STACKS[id(backbone)] = stack
    else:
        backbone = Backbone(hooked)
        object.__setattr__(model, attribute, backbone)
    recorder = Recorder(signature)
    object.__setattr__(model, "logits_processor", recorder)
    object.__setattr__(model, "lm_head", Token("lm_head"))
    return model, backbone, recorder, calls


def _forward_batch() -> object:
    import stub_imports

    return stub_imports.stub_class("ForwardBatch", "harness")()


def defines(cls: type, member: str) -> bool:
    """Defined by a class of the MRO that is not a stub (a stub answers every name)."""
    return any(member in vars(klass) for klass in cls.__mro__ if not vars(klass).get("_stub"))


_UNSEEN = object()


class Ids(Token):
    """The input ids: a token, with the shape a forward may count tokens by."""

    shape = (4,)
    device = "meta"


def run(
    cls: type, signature: inspect.Signature, hook: str | None, last: bool, real_backbone: bool = False, attribute: str = "model", hooked: bool = False
) -> dict:
    PP.is_first_rank, PP.is_last_rank, PP.rank_in_group, PP.world_size = True, last, 0, 1 if last else 2
    backbone: object = None
    state: dict = {}

    def changed() -> dict:
        """What the hook set on the backbone: a flag no forward reads shows here, not in the logits."""
        if backbone is None:
            return {}
        now = {name: describe(value) for name, value in vars(backbone).items()
               if name != "calls" and state.get(name, _UNSEEN) is not value or name == "layers_to_capture"}
        return {k: v for k, v in now.items() if not isinstance(vars(backbone).get(k), (list, Embed, RMSNorm)) or k == "layers_to_capture"}

    try:
        model, backbone, recorder, calls = build(cls, signature, real_backbone, attribute, hooked)
        state = dict(vars(backbone))
        if hook:
            getattr(model, hook)(list(IDS))
        returned = model.forward(Ids("input_ids"), Token("positions"), _forward_batch())  # type: ignore[attr-defined]
    except BaseException as exc:  # reported: the test names it; what the hook set, if it ran, is kept
        return {"error": f"{type(exc).__name__}: {exc}"[:400], "where": traceback.format_exc().splitlines()[-6:], "backbone": changed()}
    out = {
        "returned": describe(returned),
        "logits": [{k: describe(v) for k, v in call.items() if k != "self"} for call in recorder.calls],
        "backbone_calls": len(calls) if real_backbone else backbone.calls,  # type: ignore[attr-defined]
        "backbone": changed(),
    }
    if real_backbone:  # the stream that entered each decoder layer: what capturing layer i must hand on
        out["entering"] = {str(layer.index): layer.entering().expr for layer in vars(backbone).get(_stack_name(backbone), []) if getattr(layer, "seen", None)}
    return out


def main(site: str, spec: list[dict]) -> dict:
    import stub_imports

    sys.meta_path.append(stub_imports.StubFinder())
    sys.path.insert(0, site)
    out: dict = {"signature": "release"}
    try:
        forward = importlib.import_module("sglang.srt.layers.logits_processor").LogitsProcessor.forward
        if not isinstance(forward, types.FunctionType):
            raise TypeError(f"LogitsProcessor.forward is {forward!r}, not the release's function")
        signature = inspect.signature(forward)
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    except (ImportError, AttributeError, TypeError, ValueError):  # a tree without one (a fixture): SGLang's, mirrored
        import plumbing_harness

        signature, out["signature"] = inspect.signature(plumbing_harness.logits_signature), "mirrored"
    for entry in spec:
        key = entry.get("key") or f"{entry['module']}:{entry['class']}"
        try:
            module = importlib.import_module(entry["module"])
        except BaseException as exc:  # reported in the output
            out[key] = {"import": f"{type(exc).__name__}: {exc}"[:400]}
            continue
        for loaded in [m for name, m in list(sys.modules.items()) if name.startswith("sglang.srt.models.") and m]:
            for name, service in SERVICES.items():
                if name in vars(loaded):
                    setattr(loaded, name, service)
        cls = getattr(module, entry["class"])
        hooks = [hook for hook in entry.get("hooks", [HOOK]) if defines(cls, hook)]
        real = entry.get("backbone", "stand-in") == "real"
        attribute = entry.get("backbone_attribute") or backbone_attribute(cls, hooks)
        out[key] = {"import": "ok", "hooks": hooks, "backbone": "real" if real else "stand-in", "backbone_attribute": attribute}
        options = {"real_backbone": real, "attribute": attribute, "hooked": entry.get("backbone") == "stand-in-hooked"}
        out[key]["off"] = run(cls, signature, hook=None, last=True, **options)
        out[key]["on"] = {hook: run(cls, signature, hook=hook, last=True, **options) for hook in hooks}
        out[key]["not_last"] = run(cls, signature, hook=hooks[0] if hooks else None, last=False, **options)
    return out


def run_fresh(site: Path, spec: list[dict], workdir: Path, label: str, code_cache: Path | None = None) -> dict:
    """This script on `site` in a fresh interpreter (the stub import hook is process-wide): the spec
    written to `workdir/label.json`, the report returned; RuntimeError with its stderr if it fails.
    `-B`: `site` is often the shared release cache, which must never gain `__pycache__` folders."""
    import os
    import subprocess

    spec_file = workdir / f"{label}.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    shared = ["--code-cache", str(code_cache)] if code_cache is not None else []
    done = subprocess.run(
        [sys.executable, "-I", "-B", str(Path(__file__).resolve()), str(site), str(spec_file), *shared],
        capture_output=True, text=True, env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}, timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"real_forward on {site} exited {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 5) or len(sys.argv) == 5 and sys.argv[3] != "--code-cache":
        sys.exit("usage: python tests/real_forward.py SITE_PACKAGES SPEC.json [--code-cache FOLDER]")
    if len(sys.argv) == 5:  # compiled once for every interpreter of the session (stub_imports.share_compiled_code)
        import stub_imports

        stub_imports.share_compiled_code(sys.argv[4])
    json.dump(main(sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))), sys.stdout)
