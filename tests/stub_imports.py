"""Import real SGLang model modules without their dependencies: every package that is not installed
(torch, triton, transformers, ...) is a stub.

Run as a script in a fresh interpreter (it installs an import hook for the whole process):

    python tests/stub_imports.py SITE_PACKAGES --check SPEC.json [--code-cache FOLDER]

SPEC.json maps each module to import to {class: [members eaglepatch wrote]}.  It prints one JSON object:
for each module, "ok" or the error its import raised, and for each member whether the class has it and
what calling it on a stub instance forwarded to the inner model (`forwarding`): the given arguments, and
the inner method's very default objects, the inner class read off `self.<attribute> = Class(...)` in
`__init__`.

A stub attribute is a class, cached per name, so `torch.Tensor is torch.Tensor` holds and stub
types can be subclassed, subscripted (`Tensor[...]`), joined (`Tensor | None`) and called.

`--code-cache FOLDER` compiles through FOLDER, shared with other runs of the same session
(`share_compiled_code`): what is imported and run is the same, compiling a text again is spared.
"""

from __future__ import annotations

import abc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import re
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
# Packages left missing (ImportError) rather than stubbed: SGLang falls back when they are absent, and a
# stub would hand it a value of the wrong kind (`from nixl_ep import topk_idx_t` must be a torch dtype).
MISSING = {"nixl_ep"}
# Dunder names a stub answers (with a stub), as the function or method it may stand for would:
# `PretrainedConfig.from_dict.__func__` (SGLang patches transformers' classmethods at import time).
DUNDERS = {"__func__"}
# Stub attributes that must be plain values: triton's device backend on a machine without a GPU.
# transformers' config validators, which SGLang's transformers patches walk (none in the stub).
VALUES = {
    "triton.runtime.driver.active.get_current_target.backend": "cpu",
    "transformers.PretrainedConfig.__class_validators__": [],
    "torch.library.Library.ns": "vllm",  # vLLM 0.34 looks its custom ops up under the library's namespace
}
# Packages whose job the standard library does well enough at import time (SGLang serializes a class with
# dill, and builds patterns with `regex` that `re` reads the same).
STAND_INS = {"dill": "pickle", "regex": "re"}


class _StubMeta(abc.ABCMeta):
    """Stub classes: any attribute is another stub class; subscripting gives the class back."""

    _cache: dict = {}

    def __getattr__(cls, name):
        full = f"{cls.__module__}.{cls.__qualname__}.{name}"
        if full in VALUES:
            return VALUES[full]
        if name.startswith("__") and name.endswith("__") and name not in DUNDERS or full in ABSENT:
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


_DTYPE = re.compile(r"(u?int\d+|float\d*(_\w+)?|bfloat16|half|double|long|short|int|bool|complex\d+|cfloat|cdouble|q?u?int\d+)")
_DTYPES: dict = {}


def _dtype(name: str):
    """`torch.int64` and its kind: one instance of the stub `torch.dtype` per name, so that
    `isinstance(torch.int64, torch.dtype)` holds (SGLang asserts it at import time) and `is` compares."""
    if name not in _DTYPES:
        dtype = _DTYPES[name] = stub_class("dtype", "torch")()
        size = _ITEMSIZES.get(name)
        if size is None:
            bits = re.search(r"(\d+)", name)
            size = max(int(bits.group(1)) // 8, 1) if bits else None
        if size is not None:  # vLLM 0.34 asserts array typecodes' item sizes against its dtypes' at import
            dtype.itemsize = size
    return _DTYPES[name]


_ITEMSIZES = {"bool": 1, "half": 2, "float": 4, "double": 8, "short": 2, "int": 4, "long": 8, "cfloat": 8, "cdouble": 16}


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return _VERSION
        if self.__name__ == "torch" and _DTYPE.fullmatch(name):
            return _dtype(name)
        if name.startswith("__") and name.endswith("__") or f"{self.__name__}.{name}" in ABSENT:
            raise AttributeError(name)
        return stub_class(name, self.__name__)


class _NoDefault:
    def __repr__(self) -> str:
        return "NODEFAULT"


NODEFAULT = _NoDefault()


class Struct:
    """`msgspec.Struct` as a dataclass: SGLang's kernel registry compares specs at import time, and its
    argument groups read their fields (`msgspec.structs.fields`) to build the server's arguments."""

    def __init_subclass__(cls, frozen: bool | None = None, kw_only: bool = False, **kwargs):
        import dataclasses

        super().__init_subclass__()
        frozen = getattr(cls, "__struct_frozen__", False) if frozen is None else frozen  # msgspec: inherited
        cls.__struct_frozen__ = frozen
        for name in cls.__dict__.get("__annotations__", {}):  # msgspec copies a mutable default per instance
            value = cls.__dict__.get(name)
            if isinstance(value, (list, dict, set, bytearray)):
                setattr(cls, name, dataclasses.field(default_factory=lambda value=value: value.copy()))
        dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(cls)
        cls.__struct_fields__ = tuple(f.name for f in dataclasses.fields(cls))


def _field(*, default=NODEFAULT, default_factory=NODEFAULT, name=None):
    import dataclasses

    if default is not NODEFAULT:
        return dataclasses.field(default=default)
    if default_factory is not NODEFAULT:
        return dataclasses.field(default_factory=default_factory)
    return dataclasses.field()


class FieldInfo:
    """What `msgspec.structs.fields` tells of one field."""

    def __init__(self, name, type, default, default_factory):
        self.name, self.encode_name, self.type = name, name, type
        self.default, self.default_factory = default, default_factory
        self.required = default is NODEFAULT and default_factory is NODEFAULT


def _struct_fields(cls) -> tuple:
    import dataclasses

    cls = cls if isinstance(cls, type) else type(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = NODEFAULT if f.default is dataclasses.MISSING else f.default
        factory = NODEFAULT if f.default_factory is dataclasses.MISSING else f.default_factory
        out.append(FieldInfo(f.name, f.type, default, factory))
    return tuple(out)


def _defstruct(name, fields, *, bases=None, module=None, namespace=None, **options):
    spec = []
    namespace = dict(namespace or {})
    annotations = {}
    for item in fields:
        if isinstance(item, str):
            annotations[item] = "Any"
        else:
            annotations[item[0]] = item[1]
            if len(item) > 2:
                namespace[item[0]] = item[2]
        spec.append(item)
    namespace["__annotations__"] = annotations
    if module:
        namespace["__module__"] = module
    return type(name, tuple(bases or (Struct,)), namespace, **options)


def _msgspec() -> types.ModuleType:
    import dataclasses

    module = StubModule("msgspec")
    module.Struct, module.NODEFAULT, module.UNSET, module.field, module.defstruct = Struct, NODEFAULT, NODEFAULT, _field, _defstruct
    structs = StubModule("msgspec.structs")
    structs.__path__ = []
    structs.fields, structs.FieldInfo = _struct_fields, FieldInfo
    structs.asdict, structs.replace, structs.force_setattr = dataclasses.asdict, dataclasses.replace, object.__setattr__
    structs.astuple = dataclasses.astuple
    module.structs = structs
    sys.modules["msgspec.structs"] = structs
    return module


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any top-level package that cannot be found otherwise is a stub, and so is everything below it."""

    def __init__(self):
        self.stubbed: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if root in ("sglang", "__main__") or root in sys.stdlib_module_names or root in MISSING:
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


# --------------------------------------------------------------------------- forwarding on a stub instance


class _Given:
    """An argument the check passes for a required parameter: recognised by identity at the inner side."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<given {self.name}>"


class _Recorder:
    """Stands in for the inner model: each member named is a function recording how it was called."""

    def __init__(self, member: str):
        self.calls: list[tuple[tuple, dict]] = []
        self.returned = _Given("returned")

        def record(*args, **kwargs):
            self.calls.append((args, kwargs))
            return self.returned

        setattr(self, member, record)


class _Model:
    """Stands in for `self` under a learned hook body (eaglepatch's `synthesize` fix): every attribute is
    another stand-in, created on first read, numbers count as 32 layers, and every store is recorded."""

    def __init__(self, path: str = "self", writes: list | None = None):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_writes", writes if writes is not None else [])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        child = _Model(f"{self._path}.{name}", self._writes)
        object.__setattr__(self, name, child)
        return child

    def __setattr__(self, name, value):
        self._writes.append((f"{self._path}.{name}", repr(value) if not isinstance(value, _Model) else value._path))
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._writes.append((f"{self._path}.{name}", "deleted"))
        self.__dict__.pop(name, None)

    def __call__(self, *args, **kwargs):
        return _Model(f"{self._path}()", self._writes)

    def __len__(self):
        return 32

    def __index__(self):
        return 32

    def __int__(self):
        return 32

    def __iter__(self):
        return iter(range(32))

    def __getitem__(self, key):
        return _Model(f"{self._path}[{key!r}]", self._writes)

    def _number(self, other, op):
        return op(32, other if not isinstance(other, _Model) else 32)

    def __floordiv__(self, other):
        return self._number(other, lambda a, b: a // b)

    def __sub__(self, other):
        return self._number(other, lambda a, b: a - b)

    def __add__(self, other):
        return self._number(other, lambda a, b: a + b)

    def __radd__(self, other):
        return self._number(other, lambda a, b: b + a)

    def __rsub__(self, other):
        return self._number(other, lambda a, b: b - a)

    def __eq__(self, other):
        return isinstance(other, _Model) and other._path == self._path or other == 32

    def __ne__(self, other):
        return not self.__eq__(other)

    def __gt__(self, other):
        return 32 > other

    def __lt__(self, other):
        return 32 < other

    __hash__ = object.__hash__


_LEARNED = "# eaglepatch: learned from "
_COPIED = "# eaglepatch: plumbing learned from "  # a backbone's hook copied from its sibling (a `hook` piece)
_NAME_ERRORS = (NameError, ImportError)


def learned_from(func) -> str | None:
    """The "file:Class" a written method's marker says its body was learned from, or None."""
    import linecache

    try:
        _, start = inspect.getsourcelines(func)
        lines = linecache.getlines(inspect.getsourcefile(func))
    except (OSError, TypeError):
        return None
    index = start - 2  # the line above the def (1-based start)
    while index >= 0 and lines[index].lstrip().startswith("@"):
        index -= 1
    line = lines[index].strip() if index >= 0 else ""
    for marker in (_LEARNED, _COPIED):
        if line.startswith(marker):
            return line[len(marker) :].split(" ")[0]
    return None


def learned_runs(func, member: str, origin: str) -> dict:
    """A learned body, run on a stand-in model with fresh objects for its required parameters: every
    module-level name it reads must be bound when it runs (the check a delegation's forwarding is for
    a forward); what it stores is recorded.  Behaviour against its reference is proven elsewhere."""
    model = _Model()
    signature = inspect.signature(func)
    args = [_Given(p.name) for p in list(signature.parameters.values())[1:] if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    try:
        func(model, *args)
    except _NAME_ERRORS as exc:
        return {"forward": f"the learned body (from {origin}) reads a name its module does not bind: {type(exc).__name__}: {exc}"}
    except Exception as exc:
        return {"forward": f"skipped: a learned body (from {origin}) the stand-in cannot run to the end ({type(exc).__name__}: {exc})",
                "kind": "learned", "writes": model._writes}
    return {"forward": "ok", "kind": "learned", "learned_from": origin, "writes": model._writes}


_SOURCES: dict = {}


def _class_node(cls):
    """The `ast.ClassDef` of a class defined in an importable file, or None."""
    module = sys.modules.get(getattr(cls, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    if path not in _SOURCES:
        import ast

        with open(path, "rb") as handle:
            _SOURCES[path] = ast.parse(handle.read())
    import ast

    for node in ast.walk(_SOURCES[path]):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node
    return None


def _inner_attribute(func) -> str | None:
    """`X` of the first `self.X` the written member reads (its receiver is its first parameter)."""
    import ast
    import textwrap

    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    receiver = node.args.args[0].arg if node.args.args else (node.args.posonlyargs[0].arg if node.args.posonlyargs else None)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == receiver:
            return sub.attr
    return None


def _defines(cls, member: str) -> bool:
    """`cls` or a base that is not a stub defines `member` (on a stub subclass, `hasattr` is always true)."""
    return not vars(cls).get("_stub") and any(member in vars(k) for k in cls.__mro__ if not vars(k).get("_stub"))


def _inner_classes(cls, attribute: str, member: str) -> list:
    """Real (not stub) classes that `__init__` of `cls` or of a base assigns to `self.<attribute>` with a
    call `Name(...)` or `a.b.Name(...)`, and that have `member`: the inner model's candidates."""
    import ast

    found = []
    for klass in cls.__mro__:
        node = _class_node(klass) if str(getattr(klass, "__module__", "")).startswith("sglang") else None
        if node is None:
            continue
        namespace = vars(sys.modules[klass.__module__])
        for init in (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
            for sub in ast.walk(init):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AnnAssign) else []
                value = getattr(sub, "value", None)
                if not isinstance(value, ast.Call) or not any(
                    isinstance(t, ast.Attribute) and t.attr == attribute and isinstance(t.value, ast.Name) and t.value.id == "self"
                    for t in targets
                ):
                    continue
                chain, func = [], value.func
                while isinstance(func, ast.Attribute):
                    chain.insert(0, func.attr)
                    func = func.value
                if not isinstance(func, ast.Name) or func.id not in namespace:
                    continue
                target = namespace[func.id]
                try:
                    for part in chain:
                        target = getattr(target, part)
                except Exception:
                    continue
                if isinstance(target, type) and _defines(target, member) and target not in found:
                    found.append(target)
    return found


def forwarding(cls, member: str) -> dict:
    """Call the written `member` of `cls` on an instance made without `__init__` whose inner model is a
    recorder, and say what reached it: "ok", or "skipped: why" where a stub instance cannot tell.

    A method: called with a fresh object for each required parameter, it must call the inner's member
    once and return what that returned; the call must bind to the inner class's method (when the inner
    class can be told from `__init__`), each given object reaching its parameter and every other
    parameter getting the inner's very default object.  A property: the getter hands out the inner's
    attribute, and a setter sets it on the inner model."""
    static = inspect.getattr_static(cls, member)
    written = static.fget if isinstance(static, property) else static
    origin = learned_from(written) if inspect.isfunction(written) else None
    if origin is not None:
        return learned_runs(written, member, origin)
    attribute = _inner_attribute(written)
    if attribute is None:
        return {"forward": "skipped: the written member reads no self.<attribute>"}
    try:
        instance = object.__new__(cls)
    except Exception as exc:
        return {"forward": f"skipped: no instance without __init__ ({type(exc).__name__}: {exc})"}
    recorder = _Recorder(member)
    if getattr(instance, "__dict__", None) is None:
        return {"forward": "skipped: the instance has no __dict__"}
    if isinstance(inspect.getattr_static(cls, attribute, None), property):
        return {"forward": f"skipped: self.{attribute} is a property of the wrapper"}
    instance.__dict__[attribute] = recorder
    if isinstance(static, property):
        if getattr(instance, member) is not getattr(recorder, member):
            return {"forward": "the property does not hand out the inner's attribute", "attribute": attribute}
        if static.fset is not None:
            value = _Given("assigned")
            setattr(instance, member, value)
            if getattr(recorder, member) is not value:
                return {"forward": "the setter does not set the inner's attribute", "attribute": attribute}
        return {"forward": "ok", "attribute": attribute, "kind": "property"}
    signature = inspect.signature(getattr(instance, member))
    args, kwargs = [], {}
    for parameter in signature.parameters.values():
        if parameter.default is not inspect.Parameter.empty or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        given = _Given(parameter.name)
        if parameter.kind == parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = given
        else:
            args.append(given)
    result = getattr(instance, member)(*args, **kwargs)
    if inspect.iscoroutine(result):
        import asyncio

        result = asyncio.run(result)
    if len(recorder.calls) != 1 or result is not recorder.returned:
        return {"forward": f"the inner's {member} was called {len(recorder.calls)} times, returning {result!r}", "attribute": attribute}
    inners = _inner_classes(cls, attribute, member)
    if not inners:
        return {"forward": "ok", "attribute": attribute, "kind": "method", "defaults": "skipped: no inner class found in __init__"}
    problems = []
    for inner in inners:  # a wrapper may build one of several inner models: the call must suit one of them
        problem = _reaches(inner, member, recorder.calls[0], args, kwargs)
        if problem is None:
            return {"forward": "ok", "attribute": attribute, "kind": "method", "defaults": f"compared with {inner.__module__}.{inner.__qualname__}"}
        problems.append(f"{inner.__qualname__}: {problem}")
    return {"forward": "; ".join(problems), "attribute": attribute}


def _reaches(inner, member: str, call, args, kwargs) -> str | None:
    """None when `call` binds to `inner.member` with each given object at its parameter and the inner's very
    default object at every other; else what differs."""
    inner_static = inspect.getattr_static(inner, member)
    inner_func = inner_static.__func__ if isinstance(inner_static, (staticmethod, classmethod)) else inner_static
    if not callable(inner_func):
        return f"{member} is not a method"
    received_args, received_kwargs = call
    inner_signature = inspect.signature(inner_func)
    if not isinstance(inner_static, staticmethod):
        received_args = (_Given("inner self"), *received_args)
    try:
        bound = inner_signature.bind(*received_args, **received_kwargs)
    except TypeError as exc:
        return f"the call does not bind: {exc}"
    bound.apply_defaults()
    given = {g.name: g for g in [*args, *kwargs.values()]}
    for name, parameter in inner_signature.parameters.items():
        value = bound.arguments.get(name)
        if name in given and value is not given[name]:
            return f"{name} reached the inner as {value!r}, not as given"
        if name not in given and parameter.default is not inspect.Parameter.empty and value is not parameter.default:
            return f"{name} reached the inner as {value!r}, not its default {parameter.default!r}"
    return None


def _failure(exc: BaseException) -> dict:
    return {"import": f"{type(exc).__name__}: {exc}"[:500], "where": traceback.format_exc(limit=-1).strip().splitlines()[-3:]}


def share_compiled_code(folder: str) -> None:
    """Source files are compiled through `folder`: the code compiled from a text is kept there under the text's
    hash (and the interpreter's bytecode magic), and a file with the same text, wherever it lies, gets it back
    with its own file name (`_imp._fix_co_filename`, what importlib does with a `.pyc`).  Compiling is most of
    an import with stubs, and the releases share most of their files: the release tests pass one folder for
    the whole session, written by every process at once (each entry is published with one rename)."""
    import _imp
    import hashlib
    import marshal
    import os

    compile_source = importlib.machinery.SourceFileLoader.source_to_code
    magic = importlib.util.MAGIC_NUMBER

    def source_to_code(self, data, path, *, _optimize=-1):
        if _optimize != -1 or not isinstance(data, bytes):
            return compile_source(self, data, path, _optimize=_optimize)
        entry = os.path.join(folder, hashlib.sha256(magic + data).hexdigest())
        try:
            with open(entry, "rb") as handle:
                code = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            code = compile_source(self, data, path)  # a SyntaxError is raised as ever, and nothing is kept
            partial = f"{entry}.{os.getpid()}.tmp"
            with open(partial, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(partial, entry)
            return code
        _imp._fix_co_filename(code, path)
        return code

    importlib.machinery.SourceFileLoader.source_to_code = source_to_code


def check(site: str, spec: dict) -> dict:
    """`spec`: module -> {class: [members written]}.  For each module: "ok" or the error its import raised;
    for each class member: whether the class has it, and what a call on a stub instance forwarded."""
    sys.meta_path.append(StubFinder())
    sys.path.insert(0, site)
    report: dict = {}
    for module_name, classes in spec.items():
        try:
            module = importlib.import_module(module_name)
        except BaseException as exc:
            report[module_name] = _failure(exc)
            continue
        entry = report[module_name] = {"import": "ok", "members": {}}
        for cls_name, members in (classes or {}).items():
            for member in members:
                key = f"{cls_name}.{member}"
                cls = getattr(module, cls_name, None)
                if not isinstance(cls, type):
                    entry["members"][key] = {"present": False, "forward": f"{module_name} has no class {cls_name}"}
                    continue
                present = member in vars(cls)
                try:
                    found = forwarding(cls, member) if present else {"forward": "not written"}
                except BaseException as exc:
                    found = {"forward": f"{type(exc).__name__}: {exc}"[:500]}
                entry["members"][key] = {"present": present, **found}
    return report


if __name__ == "__main__":
    if len(sys.argv) not in (4, 6) or sys.argv[2] != "--check" or len(sys.argv) == 6 and sys.argv[4] != "--code-cache":
        sys.exit("usage: python tests/stub_imports.py SITE_PACKAGES --check SPEC.json [--code-cache FOLDER]")
    if len(sys.argv) == 6:
        share_compiled_code(sys.argv[5])
    with open(sys.argv[3], encoding="utf-8") as handle:
        json.dump(check(sys.argv[1], json.load(handle)), sys.stdout)
