"""Import real SGLang model modules without their dependencies: every package that is not installed
(torch, triton, transformers, ...) is a stub.

Run as a script in a fresh interpreter (it installs an import hook for the whole process):

    python tests/stub_imports.py SITE_PACKAGES MODULE[:CLASS:MEMBER,...] ...

and it prints one JSON object: for each module, "ok" or the error its import raised, and for each
CLASS:MEMBER the parameters of the wrapper's member with their defaults next to the inner model's
(found through `self.<attribute>` assignments is beyond a stub: the caller names the inner class).

A stub attribute is a class, cached per name, so `torch.Tensor is torch.Tensor` holds and stub
types can be subclassed, subscripted (`Tensor[...]`), joined (`Tensor | None`) and called.
"""

from __future__ import annotations

import abc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import sys
import traceback
import types

_VERSION = "99.0.0"  # what a stub package says its __version__ is
# What a CPU-only machine does not have, where SGLang probes for it at import time: other device
# backends of torch (`hasattr(torch, "npu")`), an active triton driver.
ABSENT = {
    "torch.npu", "torch.xpu", "torch.hpu", "torch.musa", "torch.mlu",
    "torch.library.Library.m.name",  # a custom-op library's name: SGLang falls back to its own
}
# Stub attributes that must be plain values: triton's device backend on a machine without a GPU.
# transformers' config validators, which SGLang's transformers patches walk (none in the stub).
VALUES = {
    "triton.runtime.driver.active.get_current_target.backend": "cpu",
    "transformers.PretrainedConfig.__class_validators__": [],
}
# Packages whose job the standard library does well enough at import time (SGLang serializes a class with dill).
STAND_INS = {"dill": "pickle"}


class _StubMeta(abc.ABCMeta):
    """Stub classes: any attribute is another stub class; subscripting gives the class back."""

    _cache: dict = {}

    def __getattr__(cls, name):
        full = f"{cls.__module__}.{cls.__qualname__}.{name}"
        if full in VALUES:
            return VALUES[full]
        if name.startswith("__") and name.endswith("__") or full in ABSENT:
            raise AttributeError(name)
        return stub_class(f"{cls.__qualname__}.{name}", cls.__module__)

    def __getitem__(cls, item):
        return cls

    def __setitem__(cls, item, value):
        pass

    def __iter__(cls):
        return iter(())

    def __call__(cls, *args, **kwargs):
        if cls.__dict__.get("_stub") and len(args) == 1 and isinstance(args[0], types.FunctionType) and not kwargs:
            return args[0]  # `@torch.compile` on a function: keep the function
        return super().__call__(*args, **kwargs)

    # a stub used as a value at import time (`int(torch.distributed.ReduceOp.SUM)`, `if torch.version.hip:`)
    def __bool__(cls):
        return False

    def __int__(cls):
        return 0

    __index__ = __int__

    def __float__(cls):
        return 0.0

    def __len__(cls):
        return 0

    def _same(cls, *args):
        return cls

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = _same

    def __lt__(cls, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__


class StubBase(metaclass=_StubMeta):
    """What calling a stub gives: an object that takes any operation and gives a stub back."""

    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):  # `class X(nn.Module, key=value)` is fine
        pass

    @classmethod
    def register(cls, *args, **kwargs):  # `AutoProcessor.register(...)`, not ABCMeta.register
        return None

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):  # a stub type in a pydantic model: anything
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getattr__(self, name):
        kind = type(self)
        full = f"{kind.__module__}.{kind.__qualname__}.{name}"
        if name.startswith("__") and name.endswith("__") or full in ABSENT:
            raise AttributeError(name)
        if full in VALUES:
            return VALUES[full]
        return stub_class(f"{kind.__qualname__}.{name}", kind.__module__)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep what it decorates
        return self

    def __getitem__(self, item):
        return self

    def __setitem__(self, item, value):
        pass

    def __iter__(self):
        return iter((self, self))

    def __bool__(self):
        return False

    def __len__(self):
        return 0

    def __index__(self):
        return 0

    def __int__(self):
        return 0

    def __float__(self):
        return 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _same(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __rfloordiv__ = __mod__ = __pow__ = __neg__ = __and__ = __or__ = __ror__ = __lshift__ = _same

    def __lt__(self, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__


def stub_class(qualname: str, module: str):
    key = (module, qualname)
    found = _StubMeta._cache.get(key)
    if found is None:
        namespace = {"__module__": module, "__qualname__": qualname, "_stub": True}
        found = _StubMeta._cache[key] = _StubMeta(qualname.rsplit(".", 1)[-1], (StubBase,), namespace)
    return found


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return _VERSION
        if name.startswith("__") and name.endswith("__") or f"{self.__name__}.{name}" in ABSENT:
            raise AttributeError(name)
        return stub_class(name, self.__name__)


class Struct:
    """`msgspec.Struct` as a dataclass: SGLang's kernel registry compares specs at import time."""

    def __init_subclass__(cls, frozen: bool = False, kw_only: bool = False, **kwargs):
        import dataclasses

        super().__init_subclass__()
        dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(cls)
        cls.__struct_fields__ = tuple(f.name for f in dataclasses.fields(cls))


def _msgspec() -> types.ModuleType:
    module = StubModule("msgspec")
    module.Struct = Struct
    return module


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any top-level package that cannot be found otherwise is a stub, and so is everything below it."""

    def __init__(self):
        self.stubbed: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if root in ("sglang", "__main__") or root in sys.stdlib_module_names:
            return None
        if fullname in STAND_INS and not any(_finds(f, root) for f in sys.meta_path if f is not self):
            return importlib.util.spec_from_loader(fullname, self, origin=STAND_INS[fullname])
        if root not in self.stubbed:
            others = [f for f in sys.meta_path if f is not self]
            if any(_finds(f, root) for f in others):
                return None
            self.stubbed.add(root)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        if spec.name in STAND_INS:
            return importlib.import_module(STAND_INS[spec.name])
        module = _msgspec() if spec.name == "msgspec" else StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _finds(finder, name: str) -> bool:
    try:
        return finder.find_spec(name, None) is not None
    except Exception:  # a finder that cannot answer
        return False


def _parameters(func) -> list:
    """[name, kind, default] per parameter: the default as an identity token and a repr."""
    out = []
    for parameter in inspect.signature(func).parameters.values():
        default = parameter.default
        out.append([parameter.name, str(parameter.kind), None if default is inspect.Parameter.empty else [id(default), repr(default)]])
    return out


def main(site: str, targets: list[str]) -> dict:
    sys.meta_path.append(StubFinder())
    sys.path.insert(0, site)
    report: dict = {}
    for target in targets:
        module_name, _, members = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:  # noqa: BLE001 - the report says what went wrong
            report[module_name] = {"import": f"{type(exc).__name__}: {exc}", "where": traceback.format_exc(limit=-1).strip().splitlines()[-3:]}
            continue
        entry = report[module_name] = {"import": "ok", "members": {}}
        for spec in filter(None, members.split(",")):
            wrapper_name, member, inner_module, inner_name = spec.split("/")
            try:
                wrapper = getattr(getattr(module, wrapper_name), member)
                inner = getattr(getattr(importlib.import_module(inner_module), inner_name), member)
                entry["members"][f"{wrapper_name}.{member}"] = {
                    "wrapper": _parameters(wrapper.fget if isinstance(wrapper, property) else wrapper),
                    "inner": _parameters(inner.fget if isinstance(inner, property) else inner),
                    "property": isinstance(wrapper, property),
                }
            except BaseException as exc:  # noqa: BLE001
                entry["members"][f"{wrapper_name}.{member}"] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


if __name__ == "__main__":
    json.dump(main(sys.argv[1], sys.argv[2:]), sys.stdout)
