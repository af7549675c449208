"""vLLM profile, rewrite stage: plans -> per-file edits (edits.FileEdit), so preview.py and write.py serve them.

Per wrapper file: `SupportsEagle3` added to each planned class's bases with its import
(codemods/add_base.py), then, where planned, the hooks forwarding to the language model with the
release's own signatures (codemods/add_delegations.py).  Each result is read back before it is
returned: the file parses, each class lists the base, the name is imported from interfaces, and every
name the forwarding methods read in their annotations and defaults is a builtin or bound in the file."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence

import libcst as cst
from libcst.codemod import CodemodContext

from ...codemods.add_base import AddBase
from ...codemods.add_delegations import AddDelegations, Delegation
from ...codemods.contract import run_command
from ...errors import EaglepatchError
from ...read.locate import SourceTree
from ...read.slices import parse_module
from ...read.source_cache import SourceCache
from ...read.statements import walk
from ...records import FileEdit, ModelPlan
from . import VLLM_MODELS
from .protocol import BASE, ProtocolMethod, read_protocol
from .tree import INTERFACES, VllmTree

LINE_LENGTH = 88  # vLLM's ruff line-length (pyproject.toml of its checkouts)


def build_vllm_edits(tree: SourceTree, plans: Sequence[ModelPlan], cache: SourceCache) -> tuple[list[FileEdit], list[EaglepatchError]]:
    by_file: dict[str, dict[str, ModelPlan]] = {}
    for plan in plans:
        if plan.writes:
            by_file.setdefault(plan.wrapper.path, {})[plan.wrapper.cls.name] = plan
    if not by_file:
        return [], []
    protocol = read_protocol(VllmTree.of(cache))
    hooks = {hook.name: hook for hook in protocol.hooks}
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    for rel, classes in by_file.items():
        try:
            edits.append(_edit(cache, tree, rel, classes, hooks))
        except EaglepatchError as exc:
            errors.append(exc)
    return edits, errors


def _edit(cache: SourceCache, tree: SourceTree, rel: str, classes: dict[str, ModelPlan], hooks: dict[str, ProtocolMethod]) -> FileEdit:
    source = cache.read(tree.srt / rel)
    module = parse_module(source)
    bases = {cls: BASE for cls, plan in classes.items() if any(m.fix is not None and m.fix.kind == "base" for m in plan.writes)}
    delegations = {
        cls: [_delegation(hooks[m.member.name], m.fix.to) for m in plan.writes if m.fix is not None and m.fix.kind == "delegate"]
        for cls, plan in classes.items()
    }
    delegations = {cls: todo for cls, todo in delegations.items() if todo}
    updated = module
    spelling = spelling_of(cache.module_ast(source.path), rel)  # the module the analysis parsed
    transformer = AddBase(bases, spelling, LINE_LENGTH, module.default_indent, equivalents=equivalents(rel), mark=True)
    if bases:
        updated = updated.visit(transformer)
    added: dict[str, list[str]] = {cls: list(names) for cls, names in transformer.added.items()}
    if delegations:
        command = AddDelegations(CodemodContext(filename=str(source.path)), delegations, LINE_LENGTH)
        updated = run_command(command, updated)
        for cls, names in command.added.items():
            added.setdefault(cls, []).extend(names)
    data = source.rewrite(module, updated)
    _prove(rel, data, bases, spelling, {cls: [d.name for d in todo] for cls, todo in delegations.items()})
    imports = [f"from {spelling} import {BASE}"] if bases else []
    return FileEdit(source.path, source.rel, source.data, data, added, imports)


def spelling_in(text: str, rel: str) -> str:
    """spelling_of the module `text` holds (one that does not parse imports nothing)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    return spelling_of(tree, rel)


def spelling_of(tree: ast.Module, rel: str) -> str:
    """How the file imports interfaces.py: as it already does, else `.interfaces` inside
    model_executor/models (upstream's spelling there) and the absolute module elsewhere."""
    inside = rel.startswith(VLLM_MODELS + "/") and rel.count("/") == VLLM_MODELS.count("/") + 1
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if inside and node.level == 1 and node.module == "interfaces":
                return ".interfaces"
            if node.level == 0 and node.module == INTERFACES:
                return INTERFACES
    return ".interfaces" if inside else INTERFACES


def equivalents(rel: str) -> tuple[str, ...]:
    """Both spellings of interfaces.py inside model_executor/models; elsewhere only the absolute one."""
    inside = rel.startswith(VLLM_MODELS + "/") and rel.count("/") == VLLM_MODELS.count("/") + 1
    return (".interfaces", INTERFACES) if inside else (INTERFACES,)


def _delegation(hook: ProtocolMethod, attribute: str) -> Delegation:
    """A method forwarding to the language model, with the signature the release's Protocol declares."""
    node = hook.node
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    header = cst.parse_statement(f"def {hook.name}({ast.unparse(node.args)}){returns}: ...\n")
    assert isinstance(header, cst.FunctionDef)
    params = header.params
    params = params.with_changes(**{field: [_spaced(p) for p in getattr(params, field)] for field in ("posonly_params", "params", "kwonly_params")})
    return Delegation(name=hook.name, inner_attribute=attribute, style="method", params=params, returns=header.returns)


def _spaced(param: cst.Param) -> cst.Param:
    """`layers: T = default` (PEP 8 with an annotation), where ast.unparse writes `layers: T=default`."""
    if param.default is not None and param.annotation is not None:
        return param.with_changes(equal=cst.MaybeSentinel.DEFAULT)
    return param


def _prove(rel: str, data: bytes, bases: dict[str, str], spelling: str, methods: dict[str, list[str]] | None = None) -> None:
    """The patched file parses, every planned class lists its base, the base is imported from interfaces,
    and every name the written methods (`methods`: class -> names) read in their signatures is bound."""
    try:
        tree = ast.parse(data)
    except SyntaxError as exc:
        raise EaglepatchError(f"the patch would not parse ({exc.msg}, line {exc.lineno}); nothing written", path=rel) from None
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        and ((node.level == 1 and node.module == "interfaces") or (node.level == 0 and node.module == INTERFACES))
        for alias in node.names
    }
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls, base in bases.items():
        node = classes.get(cls)
        if node is None or not any(isinstance(b, ast.Name) and b.id == base for b in node.bases):
            raise EaglepatchError(f"the patch does not add {base} to {cls}'s bases; nothing written", path=rel)
        if base not in imported:
            raise EaglepatchError(f"the patch does not import {base} from {spelling}; nothing written", path=rel)
    for cls, names in (methods or {}).items():
        node = classes.get(cls)
        written = {n.name: n for n in (node.body if node else []) if isinstance(n, ast.FunctionDef) and n.name in names}
        for name in names:
            if name not in written:
                raise EaglepatchError(f"the patch does not add {cls}.{name}; nothing written", path=rel)
            unbound = _unbound_in_signature(tree, written[name])
            if unbound:
                raise EaglepatchError(
                    f"{cls}.{name} would read {', '.join(unbound)} in its signature (from the Protocol's), "
                    f"which the file neither imports nor defines; nothing written",
                    path=rel,
                )


def _unbound_in_signature(module: ast.Module, func: ast.FunctionDef) -> list[str]:
    """The names a method's annotations and defaults read that are neither builtins nor bound at the
    module's top level. Defaults run when the class is made, so a name bound only under `if TYPE_CHECKING:`
    does not count for them; nor for annotations, unless the file postpones them (or one is a string)."""
    runtime, typing_only, star = _module_bindings(module)
    postponed = any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
        for n in module.body
    )
    if star:
        return []  # `from x import *`: what it binds cannot be read here
    args = func.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    annotations = [a.annotation for a in every if a.annotation is not None]
    if func.returns is not None:
        annotations.append(func.returns)
    defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    known = set(dir(builtins))
    missing: list[str] = []

    def need(names: set[str], bound: set[str]) -> None:
        missing.extend(sorted(n for n in names - known - bound if n not in missing))

    for annotation in annotations:
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                parsed: ast.AST = ast.parse(annotation.value, mode="eval")
            except SyntaxError:
                continue
            need(_loaded(parsed), runtime | typing_only)
        else:
            need(_loaded(annotation), runtime | typing_only if postponed else runtime)
    for default in defaults:
        need(_loaded(default), runtime)
    return missing


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _module_bindings(module: ast.Module) -> tuple[set[str], set[str], bool]:
    """Names bound at the top level (also inside top-level if/try/with/for), those bound only under
    `if TYPE_CHECKING:`, and whether there is a star import."""
    runtime: set[str] = set()
    typing_only: set[str] = set()
    star = False

    def targets(node: ast.AST, into: set[str]) -> None:
        into.update(n.id for n in walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))

    def bind(body: list[ast.stmt], into: set[str]) -> None:
        nonlocal star
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    if alias.name == "*":
                        star = True
                    else:
                        into.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                into.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    targets(target, into)
            elif isinstance(stmt, ast.If):
                checking = "TYPE_CHECKING" in _loaded(stmt.test)
                bind(stmt.body, typing_only if checking else into)
                bind(stmt.orelse, into)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                targets(stmt.target, into)
                bind(stmt.body, into)
                bind(stmt.orelse, into)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars, into)
                bind(stmt.body, into)
            elif isinstance(stmt, ast.Try):
                bind(stmt.body, into)
                for handler in stmt.handlers:
                    if handler.name:
                        into.add(handler.name)
                    bind(handler.body, into)
                bind(stmt.orelse, into)
                bind(stmt.finalbody, into)

    bind(module.body, runtime)
    return runtime, typing_only - runtime, star
