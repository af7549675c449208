"""Start-up for a short-lived process: no pydantic to convert a few strings, a garbage collector
tuned for a run that ends in a second.

Typer 0.2x converts every command-line value through a pydantic TypeAdapter; importing pydantic
costs ~0.1 s, several times what eaglepatch needs to answer from its cache.  `fast_coercion()`
gives the plain annotations eaglepatch's commands use (str, bool, Path without path checks, an
Enum of choices, and lists of those) a converter of their own, with typer's messages; any other
annotation, or a typer without that layer (older releases go through click only), is left to typer.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from typer._click.core import Context  # typer 0.2x vendors click
    from typer._coercion import RuntimeParam, TypeDescriptor
    from typer.core import _TyperParameter
    from typer.models import ParameterInfo

# value, click context -> the converted value, or None for "not plain: let typer convert it"
Converter = Callable[[Any, Optional["Context"]], Any]


def quiet_parsing() -> None:
    """What CPython's parser says of the code eaglepatch reads (an invalid escape sequence in a
    string: a SyntaxWarning from Python 3.12, a DeprecationWarning before) is about someone else's
    file, and its `<unknown>:11` names none: not eaglepatch's to print.  The code it writes is proven
    by importing it (rewrite/verify.py), not by these warnings."""
    import warnings

    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", message="invalid escape sequence", category=DeprecationWarning)


def tune_gc() -> None:
    """The objects alive now (modules, the CLI) live as long as the process: keep the collector off
    them, and collect the young generation less often (a run allocates millions of small nodes and
    then exits; each full pass over them costs without freeing much)."""
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)
    gc.enable()  # patcher.launch turns it off while the modules load


def _plain_path(info: ParameterInfo) -> bool:
    return (
        getattr(info, "parser", None) is None
        and not getattr(info, "exists", False)
        and getattr(info, "file_okay", True)
        and getattr(info, "dir_okay", True)
        and not getattr(info, "writable", False)
        and getattr(info, "readable", True)
        and not getattr(info, "resolve_path", False)
        and not getattr(info, "allow_dash", False)
        and getattr(info, "path_type", None) is None
    )


def _converter(annotation: Any, info: ParameterInfo) -> Converter | None:
    """A function value -> converted value for the plain cases, else None."""
    if getattr(info, "parser", None) is not None:
        return None
    if annotation is str:
        return lambda value, ctx: value if isinstance(value, str) else None
    if annotation is bool:
        return lambda value, ctx: value if isinstance(value, bool) else None
    if isinstance(annotation, type) and issubclass(annotation, Path) and _plain_path(info):
        return lambda value, ctx: annotation(value) if isinstance(value, str) else None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice

        choices = list(annotation)
        case_sensitive = getattr(info, "case_sensitive", True)

        def choice(value: Any, ctx: Context | None) -> Any:
            try:
                return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
            except ValueError:
                return None

        return choice
    return None


def fast_coercion() -> None:
    """Typer's private coercion layer (typer.core.build_runtime_param, typer._coercion.RuntimeParam):
    pyproject.toml pins typer from above for it, and tests/test_dependency_internals.py fails, naming
    the attribute, when a typer release moves it."""
    try:
        from typing import get_args, get_origin

        from typer import _coercion, core
    except ImportError:  # a typer that converts through click alone: nothing to do
        return
    original: Callable[[TypeDescriptor], RuntimeParam] | None = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if original is None or base is None or getattr(original, "_eaglepatch", False):
        return
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]
        convert: Converter
        many: bool
        fallback: Callable[[], RuntimeParam]

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            items = value if self.many and isinstance(value, (list, tuple)) else [value]
            out = [self.convert(item, ctx) for item in items]
            if any(item is None for item in out):  # anything unusual: typer's own path, with its message
                return self.fallback()._coerce_value(value, param=param, ctx=ctx)
            return out if self.many else out[0]

    def build_runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
        annotation: Any = descriptor.annotation  # any annotation a command declares
        info = descriptor.parameter_info
        many = get_origin(annotation) is list
        leaf = get_args(annotation)[0] if many and len(get_args(annotation)) == 1 else annotation
        convert = None if descriptor.file_annotation is not None else _converter(leaf, info)
        if convert is None or (many and leaf is annotation):
            return original(descriptor)
        return PlainRuntimeParam(
            parameter_info=info, annotation=annotation, convert=convert, many=many, fallback=lambda: original(descriptor)
        )

    build_runtime_param._eaglepatch = True  # type: ignore[attr-defined]
    core.build_runtime_param = build_runtime_param
