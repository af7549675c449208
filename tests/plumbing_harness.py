"""Run a model class's forward without torch or SGLang: what the plumbing proof (tests/test_plumbing_write.py)
needs to call a patched class and its original on the same inputs.

* `Sym`, a symbolic tensor: `a + b` builds the expression `(a + b)`, `a + None` raises as a tensor's would;
* `StreamLayer`, a decoder layer that records the stream it was handed and returns a recognisable one:
  `(h{k}, r{k})` for a layer that takes the residual back in, `h{k}` for one that does not;
* `Recorder`, the logits processor: every call kept, bound to SGLang's signature (`aux_hidden_states`
  defaults to None, so a call without it and one passing None are the same call);
* `PPGroup`, one pipeline-parallel rank (`get_pp_group()` and `self.pp_group` both read `current`);
* `stubbed()`: torch and the few SGLang modules the fixtures import, as modules of this file's stand-ins,
  put into sys.modules for the time of a `with` and taken out after.

Fixtures mirror SGLang's shapes (their own code, not SGLang's); `build` makes one of their causal LMs with
the stand-ins in place of its embedding, layers, norm, head and logits processor.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field


class Sym:
    """A symbolic tensor: its expression is its identity."""

    shape = (4, 8)

    def __init__(self, expr: str):
        self.expr = expr

    def __add__(self, other: object) -> Sym:
        if not isinstance(other, Sym):
            raise TypeError(f"unsupported operand: {self.expr} + {other!r}")
        return Sym(f"({self.expr} + {other.expr})")

    def __radd__(self, other: object) -> Sym:
        if not isinstance(other, Sym):
            raise TypeError(f"unsupported operand: {other!r} + {self.expr}")
        return Sym(f"({other.expr} + {self.expr})")

    def __mul__(self, other: object) -> Sym:  # an embedding scaled (`* self.config.scale_emb`)
        return Sym(f"({self.expr} * {_term(other)})")

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Sym:
        return Sym(f"({self.expr} / {_term(other)})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and other.expr == self.expr

    def __hash__(self) -> int:
        return hash(self.expr)

    def __repr__(self) -> str:
        return self.expr


def _term(value: object) -> str:
    """A factor as an expression: a number as written, anything else by its type (stable across runs)."""
    if isinstance(value, Sym):
        return value.expr
    if isinstance(value, (int, float)):
        return repr(value)
    return f"<{type(value).__name__}>"


class Token:
    """A value that is only its name (input ids, positions, the forward batch, the head)."""

    can_run_tbo = False  # as the forward batch: two-batch overlap off (what an overlapped backbone asks)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass
class PPGroup:
    is_first_rank: bool = True
    is_last_rank: bool = True
    rank_in_group: int = 0
    world_size: int = 1


class _Current:
    pp = PPGroup()


def get_pp_group() -> PPGroup:
    return _Current.pp


class Module:
    """`torch.nn.Module`: calling it calls its forward."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.forward(*args, **kwargs)  # type: ignore[attr-defined]


class ModuleList(list):
    def __init__(self, items: object = ()) -> None:
        super().__init__(items)  # type: ignore[call-overload]


class PPProxyTensors(dict):
    """What a rank that is not the last hands on: compared by what it holds."""

    def __init__(self, tensors: dict):
        super().__init__(tensors)
        self.tensors = tensors


def logits_signature(input_ids, hidden_states, lm_head, logits_metadata, aux_hidden_states=None, hidden_states_before_norm=None):
    """SGLang's LogitsProcessor.forward, parameter for parameter (its body is not needed)."""


class Recorder:
    """The logits processor: each call kept with its arguments bound to SGLang's parameters."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.calls: list[dict[str, object]] = []

    def __call__(self, *args: object, **kwargs: object) -> Token:
        bound = inspect.signature(logits_signature).bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments))
        return Token(f"logits#{len(self.calls)}")


class RMSNorm:
    """`norm(h)` -> `norm(h)`; `norm(h, r)` -> (`norm((h + r))`, the residual after it)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, hidden: Sym, residual: Sym | None = None) -> object:
        if residual is None:
            return Sym(f"norm({hidden.expr})")
        return Sym(f"norm({(hidden + residual).expr})"), Sym("post_norm_residual")


class Embed:
    def __call__(self, input_ids: object) -> Sym:
        return Sym("embed")


@dataclass
class StreamLayer:
    """Decoder layer `index`: records the stream it is handed (hidden, residual), returns its own."""

    index: int
    pair: bool  # returns (hidden, residual) and takes the residual back in
    seen: list[tuple[Sym, Sym | None]] = field(default_factory=list)

    def __call__(self, *args: object, **kwargs: object) -> object:
        streams = [a for a in [*args, *kwargs.values()] if isinstance(a, Sym) or a is None]
        hidden = kwargs.get("hidden_states", streams[0] if streams else None)
        residual = kwargs.get("residual", streams[1] if self.pair and len(streams) > 1 else None)
        assert isinstance(hidden, Sym), f"layer {self.index} was handed no hidden states"
        self.seen.append((hidden, residual if isinstance(residual, Sym) else None))
        captured = kwargs.get("captured_last_layer_outputs")  # a layer handed a list keeps what enters it (Qwen3.5's)
        if isinstance(captured, list):
            captured.append(self.entering())
        if self.pair:
            return Sym(f"h{self.index}"), Sym(f"r{self.index}")
        return Sym(f"h{self.index}")

    def entering(self) -> Sym:
        """The stream that entered the layer on its last call: hidden + residual, when there is one."""
        hidden, residual = self.seen[-1]
        return hidden if residual is None else hidden + residual


@dataclass
class Config:
    num_hidden_layers: int = 6
    hidden_size: int = 8
    vocab_size: int = 16
    tie_word_embeddings: bool = False
    rms_norm_eps: float = 1e-6


def _no_grad() -> object:
    return lambda function: function


def _module(name: str, **attributes: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def stub_modules() -> dict[str, types.ModuleType]:
    nn = _module("torch.nn", Module=Module, ModuleList=ModuleList)
    torch = _module("torch", Tensor=Sym, nn=nn, no_grad=_no_grad)
    return {
        "torch": torch,
        "torch.nn": nn,
        "sglang": _module("sglang"),
        "sglang.srt": _module("sglang.srt"),
        "sglang.srt.layers": _module("sglang.srt.layers"),
        "sglang.srt.layers.logits_processor": _module("sglang.srt.layers.logits_processor", LogitsProcessor=Recorder),
        "sglang.srt.layers.layernorm": _module("sglang.srt.layers.layernorm", RMSNorm=RMSNorm),
        "sglang.srt.distributed": _module("sglang.srt.distributed", get_pp_group=get_pp_group),
        "sglang.srt.model_executor": _module("sglang.srt.model_executor"),
        "sglang.srt.model_executor.forward_batch_info": _module("sglang.srt.model_executor.forward_batch_info", PPProxyTensors=PPProxyTensors),
    }


@contextlib.contextmanager
def stubbed() -> Iterator[None]:
    stubs = stub_modules()
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load(source: str, name: str) -> types.ModuleType:
    """`source` run as the module `name`, against the stubs."""
    module = types.ModuleType(name)
    with stubbed():
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def set_rank(pp: PPGroup) -> None:
    _Current.pp = pp


@dataclass
class Built:
    model: object
    layers: list[StreamLayer]
    logits: Recorder


def build(cls: type, pair: bool, config: Config | None = None, start: int = 0, end: int | None = None, backbone: str = "model") -> Built:
    """An instance of the causal LM `cls` whose backbone `self.<backbone>` holds StreamLayers
    `start`..`end` (the others are None, as a pipeline stage's missing layers are not called)."""
    config = config or Config()
    end = config.num_hidden_layers if end is None else end
    model = cls(config)
    inner = getattr(model, backbone)
    layers = [StreamLayer(i, pair) for i in range(config.num_hidden_layers)]
    inner.layers = [layer if start <= i < end else None for i, layer in enumerate(layers)]
    inner.start_layer, inner.end_layer = start, end
    inner.embed_tokens = Embed()
    inner.norm = RMSNorm()
    model.lm_head = Token("lm_head")  # type: ignore[attr-defined]
    recorder = Recorder()
    model.logits_processor = recorder  # type: ignore[attr-defined]
    return Built(model, layers, recorder)


INPUTS = (Token("input_ids"), Token("positions"), Token("forward_batch"))
