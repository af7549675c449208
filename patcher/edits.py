"""Stage 6: turn plans into per-file edits by running the codemod on each wrapper file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext

from codemods.add_delegations import AddDelegations, Delegation, builtin_names
from codemods.normalize_imports import NormalizeAddedImports
from patcher.errors import EaglepatchError
from patcher.imports import ImportTable
from patcher.records import MemberPlan, ModelPlan
from patcher.resolve import signature_node, syntax_error
from patcher.source import SourceCache, SourceFile

_TOP_ASSIGN = re.compile(r"^(\w+)\s*(?::[^=]*)?=", re.MULTILINE)


@dataclass
class FileEdit:
    """One wrapper file: its bytes as planned against, and as they should become."""

    path: Path
    rel: str
    original: bytes
    updated: bytes
    added: dict[str, list[str]] = field(default_factory=dict)  # class -> members added
    imports: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.original != self.updated


def _root_names(node: cst.CSTNode | None) -> set[str]:
    """Names an expression needs from its module: `torch.Tensor` needs `torch`."""
    found: set[str] = set()
    if node is None or isinstance(node, cst.MaybeSentinel):
        return found

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_SimpleString(self, n: cst.SimpleString) -> bool:
            return False

    node.visit(Collect())
    return found


def _signature_names(func: cst.FunctionDef) -> set[str]:
    names: set[str] = set()
    params = func.params
    every = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    for param in every:
        if param.annotation is not None:
            names |= _root_names(param.annotation.annotation)
        names |= _root_names(param.default)
    if func.returns is not None:
        names |= _root_names(func.returns.annotation)
    return names


def module_names(cache: SourceCache, source: SourceFile, tree) -> set[str]:
    """Names a module defines at top level: imports, classes, functions, assignments."""
    names = set(ImportTable.of(cache, source, tree).names)
    names |= {name for _, indent, _, name in cache.outline(source).headers if indent == 0}
    names |= set(_TOP_ASSIGN.findall(source.text))
    return names


def _dotted_module(rel: str) -> str:
    return "sglang.srt." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def needed_imports(cache: SourceCache, tree, wrapper: SourceFile, entry: MemberPlan) -> tuple[tuple[str, str | None], ...]:
    """Imports the wrapper file needs for the copied signature, taken the way the inner file takes them."""
    signature = entry.defined
    if signature is None or signature.kind != "method" or signature_node(cache, signature) is None:
        return ()
    inner = cache.read(tree.srt / signature.file)
    have = module_names(cache, wrapper, tree) | builtin_names()
    inner_imports = ImportTable.of(cache, inner, tree)
    inner_defines = {name for _, indent, _, name in cache.outline(inner).headers if indent == 0}
    inner_defines |= set(_TOP_ASSIGN.findall(inner.text))
    out: list[tuple[str, str | None]] = []
    for name in sorted(_signature_names(signature.node) - have):
        origin = inner_imports.lookup(name)
        if origin is not None:
            if origin.name is None:
                if origin.module.split(".")[-1] == name or origin.module == name:
                    out.append((origin.module, None))
                else:  # `import torch.nn as nn` style aliases
                    parent, _, leaf = origin.module.rpartition(".")
                    out.append((parent, leaf) if leaf == name else (origin.module, None))
            else:
                out.append((origin.module, origin.name))
        elif name in inner_defines:
            out.append((_dotted_module(signature.file), name))
    return tuple(out)


def delegation_for(cache: SourceCache, tree, wrapper: SourceFile, entry: MemberPlan) -> Delegation:
    signature = entry.defined
    node = signature_node(cache, signature) if signature.kind == "method" else None
    if isinstance(node, cst.FunctionDef):
        decorators = {_decorator_name(d) for d in node.decorators}
        binding = "static" if "staticmethod" in decorators else "class" if "classmethod" in decorators else "instance"
        return Delegation(
            name=entry.member.name,
            inner_attribute=entry.inner_attribute,
            style="method",
            params=node.params,
            returns=node.returns,
            is_async=node.asynchronous is not None,
            binding=binding,
            imports=needed_imports(cache, tree, wrapper, entry),
        )
    return Delegation(name=entry.member.name, inner_attribute=entry.inner_attribute, style="property")


def _decorator_name(decorator: cst.Decorator) -> str:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        expr = expr.func
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return expr.value if isinstance(expr, cst.Name) else ""


def build_edits(cache: SourceCache, tree, plans: list[ModelPlan]) -> tuple[list[FileEdit], list[EaglepatchError]]:
    """One edit per wrapper file that has something missing; a file that fails does not stop the others."""
    by_file: dict[str, dict[str, list[MemberPlan]]] = {}
    for plan in plans:
        if plan.missing:
            by_file.setdefault(plan.wrapper.path, {})[plan.wrapper.cls.name] = plan.missing
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    for rel, classes in by_file.items():
        try:
            source = cache.read(tree.srt / rel)
            delegations = {
                cls: [delegation_for(cache, tree, source, entry) for entry in entries] for cls, entries in classes.items()
            }
            edits.append(apply_codemod(source, delegations))
        except EaglepatchError as exc:
            errors.append(exc)
    return edits, errors


def apply_codemod(source: SourceFile, delegations: dict[str, list[Delegation]]) -> FileEdit:
    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError as exc:
        raise syntax_error(source) or EaglepatchError(f"is not valid Python ({exc.message})", path=source.rel) from None
    context = CodemodContext(filename=str(source.path))
    command = AddDelegations(context, delegations)
    updated = command.transform_module(module)
    added: dict[str, set[str]] = {}
    for todo in delegations.values():
        for delegation in todo:
            for module_name, obj in delegation.imports:
                if obj:
                    added.setdefault(module_name, set()).add(obj)
    if added:
        updated = updated.visit(NormalizeAddedImports(added))
    text = updated.code
    data = (b"\xef\xbb\xbf" if source.bom else b"") + text.encode("utf-8")
    imports = sorted({f"{m}:{o}" if o else m for ds in delegations.values() for d in ds for m, o in d.imports})
    return FileEdit(source.path, source.rel, source.data, data, dict(command.added), imports)
