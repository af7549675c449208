"""vLLM profile, stage 6: plans -> per-file edits (edits.FileEdit), so preview.py and write.py serve them.

Per wrapper file: `SupportsEagle3` added to each planned class's bases with its import
(codemods/add_base.py), then, where planned, the hooks forwarding to the language model with the
release's own signatures (codemods/add_delegations.py).  Each result is read back before it is
returned: the file parses, each class lists the base, and the name is imported from interfaces."""

from __future__ import annotations

import ast

import libcst as cst
from libcst.codemod import CodemodContext

from .codemods.add_base import AddBase
from .codemods.add_delegations import AddDelegations, Delegation
from .codemods.contract import run_command
from .edits import FileEdit
from .errors import EaglepatchError
from .locate import VLLM_MODELS, SourceTree
from .records import ModelPlan
from .source import SourceCache, SourceFile
from .vllm_protocol import BASE, ProtocolMethod, read_protocol
from .vllm_tree import INTERFACES, VllmTree

LINE_LENGTH = 88  # vLLM's ruff line-length (pyproject.toml of its checkouts)


def build_vllm_edits(tree: SourceTree, plans: list[ModelPlan], cache: SourceCache | None = None) -> tuple[list[FileEdit], list[EaglepatchError]]:
    cache = cache or SourceCache(tree.srt)
    by_file: dict[str, dict[str, ModelPlan]] = {}
    for plan in plans:
        if plan.writes:
            by_file.setdefault(plan.wrapper.path, {})[plan.wrapper.cls.name] = plan
    if not by_file:
        return [], []
    protocol = read_protocol(VllmTree(tree.srt))
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
    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError as exc:
        raise EaglepatchError(f"is not valid Python ({exc.message})", path=rel) from None
    bases = {cls: BASE for cls, plan in classes.items() if any(m.fix is not None and m.fix.kind == "base" for m in plan.writes)}
    delegations = {
        cls: [_delegation(hooks[m.member.name], m.fix.to) for m in plan.writes if m.fix is not None and m.fix.kind == "delegate"]
        for cls, plan in classes.items()
    }
    delegations = {cls: todo for cls, todo in delegations.items() if todo}
    updated = module
    spelling = interfaces_spelling(source, rel)
    transformer = AddBase(bases, spelling, LINE_LENGTH, module.default_indent, equivalents=_equivalents(rel))
    if bases:
        updated = updated.visit(transformer)
    added: dict[str, list[str]] = {cls: list(names) for cls, names in transformer.added.items()}
    if delegations:
        command = AddDelegations(CodemodContext(filename=str(source.path)), delegations, LINE_LENGTH)
        updated = run_command(command, updated)
        for cls, names in command.added.items():
            added.setdefault(cls, []).extend(names)
    data = source.rewrite(module, updated)
    _prove(rel, data, bases, spelling)
    imports = [f"from {spelling} import {BASE}"] if bases else []
    return FileEdit(source.path, source.rel, source.data, data, added, imports)


def interfaces_spelling(source: SourceFile, rel: str) -> str:
    """How the file imports interfaces.py: as it already does, else `.interfaces` inside
    model_executor/models (upstream's spelling there) and the absolute module elsewhere."""
    try:
        tree = ast.parse(source.text)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    inside = rel.startswith(VLLM_MODELS + "/") and rel.count("/") == VLLM_MODELS.count("/") + 1
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if inside and node.level == 1 and node.module == "interfaces":
                return ".interfaces"
            if node.level == 0 and node.module == INTERFACES:
                return INTERFACES
    return ".interfaces" if inside else INTERFACES


def _equivalents(rel: str) -> tuple[str, ...]:
    """Both spellings of interfaces.py inside model_executor/models; elsewhere only the absolute one."""
    inside = rel.startswith(VLLM_MODELS + "/") and rel.count("/") == VLLM_MODELS.count("/") + 1
    return (".interfaces", INTERFACES) if inside else (INTERFACES,)


def _delegation(hook: ProtocolMethod, attribute: str) -> Delegation:
    """A method forwarding to the language model, with the signature the release's Protocol declares."""
    node = hook.node
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    header = cst.parse_statement(f"def {hook.name}({ast.unparse(node.args)}){returns}: ...\n")
    assert isinstance(header, cst.FunctionDef)
    return Delegation(name=hook.name, inner_attribute=attribute, style="method", params=header.params, returns=header.returns)


def _prove(rel: str, data: bytes, bases: dict[str, str], spelling: str) -> None:
    """The patched file parses, every planned class lists its base, and the base is imported from interfaces."""
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
