"""The private parts of a dependency eaglepatch relies on, named, so that a release that moves one
fails here (in CI, on the bump) rather than slowing or breaking users.

patcher/startup.py's `fast_coercion()` replaces typer's `typer.core.build_runtime_param` (typer
0.2x's private coercion layer, which imports pydantic) for plain annotations.  Typer has no public
way to do that, so pyproject.toml pins typer from above as well, and these tests spell out every
name and shape startup.py reads; on a miss, `fast_coercion()` quietly leaves typer's pydantic path
in place (correct, 0.1 s slower), so only these tests say it.  Raise the pin when they pass on the
new release.  (codemods/ uses only libcst's public API: see codemods/contract.py.)
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

REPO_ROOT = Path(__file__).resolve().parent.parent


def internal(module: str, name: str) -> object:
    """`module.name`, or a failure that names it."""
    try:
        imported = __import__(module, fromlist=[name])
    except ImportError as exc:
        pytest.fail(f"typer internal moved: cannot import {module} ({exc}); patcher/startup.py fast_coercion() relies on it")
    if not hasattr(imported, name):
        pytest.fail(f"typer internal moved: {module}.{name} is gone; patcher/startup.py fast_coercion() relies on it")
    return getattr(imported, name)


def parameters(function: object) -> list[str]:
    assert callable(function)
    return list(inspect.signature(function).parameters)


def test_typer_runtime_param_keeps_its_shape():
    base = internal("typer._coercion", "RuntimeParam")
    assert isinstance(base, type) and dataclasses.is_dataclass(base), "typer._coercion.RuntimeParam is no longer a dataclass"
    assert base.__dataclass_params__.frozen, "typer._coercion.RuntimeParam is no longer frozen"  # type: ignore[attr-defined]
    fields = [f.name for f in dataclasses.fields(base)]
    assert fields == ["parameter_info", "annotation"], f"typer._coercion.RuntimeParam fields changed: {fields}"
    coerce = getattr(base, "_coerce_value", None)
    assert coerce is not None, "typer._coercion.RuntimeParam._coerce_value is gone"
    assert parameters(coerce) == ["self", "value", "param", "ctx"], f"RuntimeParam._coerce_value(...) changed: {parameters(coerce)}"
    assert "_coerce_value" in getattr(base, "__abstractmethods__", ()), "RuntimeParam._coerce_value is no longer the abstract hook"


def test_typer_build_runtime_param_keeps_its_shape():
    internal("typer.core", "build_runtime_param")  # what fast_coercion() replaces
    build = internal("typer._coercion", "build_runtime_param")  # what it falls back to
    assert parameters(build) == ["descriptor"], f"typer._coercion.build_runtime_param(descriptor) changed: {parameters(build)}"
    descriptor = internal("typer._coercion", "TypeDescriptor")
    assert isinstance(descriptor, type) and dataclasses.is_dataclass(descriptor)
    fields = {f.name for f in dataclasses.fields(descriptor)}
    assert {"annotation", "parameter_info", "file_annotation"} <= fields, f"typer._coercion.TypeDescriptor fields changed: {fields}"
    # typer's parameters look the builder up in typer.core's namespace, which is what startup.py replaces
    getter = internal("typer.core", "_TyperParameter")
    source = inspect.getsource(getter.get_runtime_param)  # type: ignore[attr-defined]
    assert re.search(r"\bbuild_runtime_param\(", source), "typer.core._TyperParameter.get_runtime_param no longer calls build_runtime_param"


def test_typer_coerce_cli_choice_keeps_its_shape():
    choice = internal("typer._param_types", "coerce_cli_choice")
    assert parameters(choice) == ["value", "choices", "case_sensitive", "ctx"], f"typer._param_types.coerce_cli_choice changed: {parameters(choice)}"


@pytest.mark.parametrize("name", ["parser", "exists", "file_okay", "dir_okay", "writable", "readable", "resolve_path", "allow_dash", "path_type", "case_sensitive"])
def test_typer_parameter_info_keeps_the_attributes_startup_reads(name):
    for info in (typer.Option(None), typer.Argument(None)):
        assert hasattr(info, name), f"typer's {type(info).__name__}.{name} is gone (patcher/startup.py _plain_path/_converter read it)"


class Colour(str, enum.Enum):
    red = "red"
    blue = "blue"


def test_fast_coercion_is_installed_and_converts_plain_options():
    """After `fast_coercion()` (patcher/cli.py runs it on import) a command's plain options go
    through startup.py's converter, not typer's pydantic adapter, and convert as typer would."""
    import typer.core

    import eaglepatch.cli  # noqa: F401  (runs fast_coercion())

    assert getattr(typer.core.build_runtime_param, "_eaglepatch", False), "fast_coercion() did not replace typer.core.build_runtime_param"
    seen: dict[str, object] = {}
    kinds: set[str] = set()
    app = typer.Typer()

    @app.command()
    def run(
        ctx: typer.Context,
        path: Path = typer.Argument(Path(".")),
        name: str = typer.Option("x"),
        flag: bool = typer.Option(False),
        colour: Colour = typer.Option(Colour.red, case_sensitive=False),
        many: list[str] = typer.Option([]),
    ) -> None:
        seen.update(path=path, name=name, flag=flag, colour=colour, many=many)
        for param in ctx.command.params:
            kinds.add(type(param.get_runtime_param()).__name__)  # type: ignore[attr-defined]

    done = CliRunner().invoke(app, ["somewhere", "--name", "n", "--flag", "--colour", "BLUE", "--many", "a", "--many", "b"])
    assert done.exit_code == 0, done.output
    assert seen == {"path": Path("somewhere"), "name": "n", "flag": True, "colour": Colour.blue, "many": ["a", "b"]}
    assert kinds == {"PlainRuntimeParam"}, f"typer's own runtime params were used: {kinds}"
    bad = CliRunner().invoke(app, ["--colour", "green"])
    assert bad.exit_code == 2 and "green" in bad.output  # typer's own message, through the fallback


def test_typer_is_pinned_from_above():
    """The internals above are why typer has an upper bound; without one a new typer reaches users
    before these tests run on it."""
    text = (REPO_ROOT / "pyproject.toml").read_text()
    spec = re.search(r'"typer([^"]*)"', text)
    assert spec and "<" in spec.group(1), f"pyproject.toml: typer needs an upper bound (found {spec and spec.group(0)})"
