"""The runtime check vLLM makes of a target model, on a patched release tree without its dependencies.

Run as a script in a fresh interpreter (it installs tests/stub_imports.py's import hook for the whole
process):

    python tests/vllm_protocol_check.py SITE_PACKAGES MODULE:CLASS[>ATTRIBUTE=MODULE:CLASS] ...

It prints one JSON object: for each spec, whether `isinstance(instance, SupportsEagle3)`
holds (in a release without the Protocol, `hooks`: whether the instance has both methods the runner
calls by name), with `SupportsEagle3` from that tree's own interfaces.py and an instance made without running
`__init__` (the Protocol checks the class's members, not the weights), or the error the import raised.
With `>ATTRIBUTE=MODULE:CLASS` (the wrapper's language model), it also calls the wrapper's hooks on an
instance holding that class's instance (its decoder `model` a plain object with 48 `layers`):
`forwarded.set` is whether `set_aux_hidden_state_layers(layers)` left that very tuple on the decoder,
`forwarded.get` what the release's getter returned (or the error either raised).

vLLM's Protocols and the stub classes (nn.Module ...) are bases of the same model classes, so the
stubs' metaclass is made a subclass of typing's Protocol metaclass; and a stub instance does not
answer the names the Protocol declares (it answers any other), so only what the class really has counts.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stub_imports

INTERFACES = "vllm.model_executor.models.interfaces"
# optional packages vLLM probes at import time and falls back without: left missing, not stubbed.
# The platform probes of vllm/platforms/__init__.py (0.10.1) count each importable one as an active
# platform and refuse two: a machine without TPU, Neuron, ROCm or XPU has none of them.
MISSING = {
    "triton_kernels",
    "libtpu", "transformers_neuronx", "neuronx_distributed_inference", "amdsmi", "intel_extension_for_pytorch",
}


# what the runner of a release without SupportsEagle3 (0.9.2) calls on the target, by name
DUCK = frozenset({"set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers"})


def _protocol_compatible_stubs() -> None:
    meta = type(typing.Protocol)
    if not issubclass(stub_imports._StubMeta, meta):
        stub_imports._StubMeta.__bases__ = (meta,)
    stub_imports.StubBase._is_protocol = False  # a stub class is no Protocol (the metaclass asks)
    stub_imports.MISSING.update(MISSING)


def _schemas() -> None:
    """vLLM (0.30+) registers each IR op's implementations only when `torch.library.infer_schema` gives
    the same schema as the native one: with torch a stub, the signature's text stands for it."""
    library = importlib.import_module("torch.library")
    if isinstance(library, stub_imports.StubModule):
        library.infer_schema = lambda func, *args, **kwargs: str(inspect.signature(func))


def check(site: str, specs: list[str]) -> dict:
    sys.dont_write_bytecode = True  # the release trees are read, never written
    _protocol_compatible_stubs()
    sys.meta_path.append(stub_imports.StubFinder())
    sys.path.insert(0, site)
    _schemas()
    report: dict = {}
    try:
        interfaces = importlib.import_module(INTERFACES)
    except BaseException as exc:
        return {"interfaces": f"{type(exc).__name__}: {exc}"[:500]}
    protocol = getattr(interfaces, "SupportsEagle3", None)
    # a stub base (nn.Module) answers any attribute: not the Protocol's, or every class would pass
    declared = frozenset(typing._get_protocol_attrs(protocol)) if protocol is not None else DUCK  # type: ignore[attr-defined]
    answer = stub_imports.StubBase.__getattr__

    def honest(self, name):
        if name in declared:
            raise AttributeError(name)
        return answer(self, name)

    stub_imports.StubBase.__getattr__ = honest  # type: ignore[method-assign]
    report["interfaces"] = str(Path(interfaces.__file__).resolve())
    getter = next(name for name in sorted(declared) if name.startswith("get_eagle3"))
    for spec in specs:
        wrapper, _, inner = spec.partition(">")
        try:
            cls = _class(wrapper)
            instance = object.__new__(cls)
            if protocol is None:  # the runner calls the hooks by name: what counts is that the class has them
                report[spec] = {"hooks": all(callable(getattr(instance, name, None)) for name in DUCK)}
            else:
                report[spec] = {"isinstance": isinstance(instance, protocol), "declares": protocol in cls.__mro__}
        except BaseException as exc:
            report[spec] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        if inner:
            attribute, _, inner_class = inner.partition("=")
            report[spec]["forwarded"] = _forwarded(cls, attribute, _class(inner_class), getter)
    return report


def _class(spec: str) -> type:
    module_name, _, cls_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), cls_name)


def _forwarded(cls: type, attribute: str, inner_cls: type, getter: str) -> dict:
    """The wrapper's hooks called on an instance whose language model is an `inner_cls` (no __init__)."""
    decoder = types.SimpleNamespace(layers=[None] * 48)
    inner = object.__new__(inner_cls)
    inner.model = decoder
    instance = object.__new__(cls)
    setattr(instance, attribute, inner)
    layers = (7, 11, 13)
    found: dict = {}
    try:
        instance.set_aux_hidden_state_layers(layers)
        found["set"] = getattr(decoder, "aux_hidden_state_layers", None) is layers
    except BaseException as exc:
        found["set"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        found["get"] = list(getattr(instance, getter)())
    except BaseException as exc:
        found["get"] = f"{type(exc).__name__}: {exc}"[:300]
    return found


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python tests/vllm_protocol_check.py SITE_PACKAGES MODULE:CLASS ...")
    json.dump(check(sys.argv[1], sys.argv[2:]), sys.stdout)
