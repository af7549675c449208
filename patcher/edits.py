"""Stage 6: turn plans into per-file edits by running the codemod on each wrapper file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from codemods.add_delegations import AddDelegations, Delegation, builtin_names
from codemods.normalize_imports import NormalizeAddedImports
from patcher.errors import EaglepatchError
from patcher.imports import ImportTable
from patcher.records import MemberPlan, ModelPlan
from patcher.resolve import one_path_per_file, signature_node, syntax_error
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
    removed: dict[str, list[str]] = field(default_factory=dict)  # class -> members removed (revert)

    @property
    def changed(self) -> bool:
        return self.original != self.updated


def _root_names(node: cst.CSTNode | None, annotation: bool = False) -> set[str]:
    """Names an expression needs from its module: `torch.Tensor` needs `torch`.  In an annotation a
    string is a forward reference (`"Optional[LayerSpec]"`), and its names count too."""
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
            if annotation and isinstance(n.evaluated_value, str):
                try:
                    found.update(_root_names(cst.parse_expression(n.evaluated_value.strip()), annotation))
                except cst.ParserSyntaxError:
                    pass
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
            names |= _root_names(param.annotation.annotation, annotation=True)
        names |= _root_names(param.default)
    if func.returns is not None:
        names |= _root_names(func.returns.annotation, annotation=True)
    return names


def defined_here(cache: SourceCache, source: SourceFile) -> set[str]:
    """Names a module defines itself at top level: classes, functions, assignments (once per file)."""
    table = cache.__dict__.setdefault("_defined_here", {})
    names = table.get(source.path)
    if names is None:
        names = {name for _, indent, _, name in cache.outline(source).headers if indent == 0}
        names |= set(_TOP_ASSIGN.findall(source.text))
        table[source.path] = names
    return names


def module_names(cache: SourceCache, source: SourceFile, tree) -> set[str]:
    """Names a module binds at top level: its imports and what it defines itself."""
    return set(ImportTable.of(cache, source, tree).names) | defined_here(cache, source)


def _dotted_module(rel: str) -> str:
    return "sglang.srt." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


Import = tuple  # (module, name or None, asname or None)


def _binding(cache: SourceCache, tree, source: SourceFile, name: str):
    """What `name` means at the top of a module: (module, object name or None for a module)."""
    origin = ImportTable.of(cache, source, tree).lookup(name)
    if origin is not None:
        return origin.module, origin.name
    if name in defined_here(cache, source):
        return _dotted_module(source.rel), name
    if name in builtin_names():
        return "builtins", name
    return None


def _import_for(binding, local: str) -> Import:
    module, obj = binding
    if obj is None:  # a module object: `import torch`, `import numpy as np`
        return (module, None, None if module == local else local)
    return (module, obj, None if obj == local else local)


def names_for_signature(cache: SourceCache, tree, wrapper: SourceFile, entry: MemberPlan) -> tuple[tuple[Import, ...], dict[str, str]]:
    """Imports the wrapper needs so each name in the copied signature means what it means in the inner
    file, and renames for names the wrapper binds to something else (imported under an alias instead)."""
    signature = entry.defined
    if signature is None or signature.kind != "method" or signature_node(cache, signature) is None:
        return (), {}
    inner = cache.read(tree.srt / signature.file)
    taken = module_names(cache, wrapper, tree)
    imports: list[Import] = []
    renames: dict[str, str] = {}
    for name in sorted(_signature_names(signature.node)):
        meaning = _binding(cache, tree, inner, name)
        if meaning is None or meaning[0] == "builtins" and name not in taken:
            continue  # a builtin, or a name the inner file cannot resolve either (a star import)
        here = _binding(cache, tree, wrapper, name)
        if here == meaning:
            continue
        if here is None:
            imports.append(_import_for(meaning, name))
            continue
        leaf = meaning[0].rsplit(".", 1)[-1]
        alias = f"{leaf}_{name}"
        while alias in taken:
            alias = f"_{alias}"
        renames[name] = alias
        imports.append(_import_for(meaning, alias))
    return tuple(imports), renames


class _Rename(cst.CSTTransformer):
    """Rename free names in an annotation or default; attribute names stay."""

    def __init__(self, renames: dict[str, str]):
        super().__init__()
        self.renames = renames

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.renames.get(updated_node.value, updated_node.value))


def _renamed(node: cst.FunctionDef, renames: dict[str, str]) -> tuple[cst.Parameters, cst.Annotation | None]:
    if not renames:
        return node.params, node.returns
    rename = _Rename(renames)

    def fix(param):
        if not isinstance(param, cst.Param):
            return param
        changes = {}
        if param.annotation is not None:
            changes["annotation"] = param.annotation.visit(rename)
        if param.default is not None:
            changes["default"] = param.default.visit(rename)
        return param.with_changes(**changes)

    p = node.params
    params = p.with_changes(
        posonly_params=[fix(x) for x in p.posonly_params],
        params=[fix(x) for x in p.params],
        kwonly_params=[fix(x) for x in p.kwonly_params],
        star_arg=fix(p.star_arg),
        star_kwarg=fix(p.star_kwarg),
    )
    returns = node.returns.visit(rename) if node.returns is not None else None
    return params, returns


def delegation_for(cache: SourceCache, tree, wrapper: SourceFile, entry: MemberPlan) -> Delegation:
    signature = entry.defined
    node = signature_node(cache, signature) if signature.kind == "method" else None
    if isinstance(node, cst.FunctionDef):
        decorators = {_decorator_name(d) for d in node.decorators}
        binding = "static" if "staticmethod" in decorators else "class" if "classmethod" in decorators else "instance"
        imports, renames = names_for_signature(cache, tree, wrapper, entry)
        params, returns = _renamed(node, renames)
        return Delegation(
            name=entry.member.name,
            inner_attribute=entry.inner_attribute,
            style="method",
            params=params,
            returns=returns,
            is_async=node.asynchronous is not None,
            binding=binding,
            imports=imports,
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
        if plan.writes:
            by_file.setdefault(plan.wrapper.path, {})[plan.wrapper.cls.name] = plan.writes
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
    # CodemodCommand.transform_module would deep-copy the tree into a MetadataWrapper; this
    # transformer needs no metadata, so it visits the tree directly, and AddImportsVisitor
    # (the supplementary transform transform_module would schedule) runs only when needed.
    updated = module.visit(command)
    if context.scratch.get(AddImportsVisitor.CONTEXT_KEY):
        updated = AddImportsVisitor(context).transform_module(updated)
    added: dict[str, set[str]] = {}
    for todo in delegations.values():
        for delegation in todo:
            for module_name, obj, _asname in delegation.imports:
                if obj:
                    added.setdefault(module_name, set()).add(obj)
    if added:
        updated = updated.visit(NormalizeAddedImports(added))
    data = source.rewrite(module, updated)
    imports = sorted({_describe(i) for ds in delegations.values() for d in ds for i in d.imports})
    return FileEdit(source.path, source.rel, source.data, data, dict(command.added), imports)


def _describe(spec: Import) -> str:
    module, obj, asname = spec
    text = f"from {module} import {obj}" if obj else f"import {module}"
    return f"{text} as {asname}" if asname else text


def revert_edits(cache: SourceCache, tree, models: list[str] | None):
    """Edits that remove eaglepatch's unchanged delegations: from the named model modules, or all of models/."""
    from codemods.add_delegations import MARKER
    from codemods.remove_delegations import RemoveDelegations
    from patcher.star_imports import star_imported_names

    if models:
        paths = []
        for selector in models:
            module = selector.partition(":")[0].removesuffix(".py").replace(".", "/")
            path = tree.models / f"{module}.py"
            if not path.is_file():
                raise EaglepatchError("no such model module; pass --model with a file name under models/", path=f"models/{module}.py")
            paths.append(path)
    else:
        paths = [p for p in one_path_per_file(tree.models.rglob("*.py")) if p.is_file() and MARKER.encode() in p.read_bytes()]
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    kept: list[tuple[str, list[str]]] = []
    for path in paths:
        try:
            source = cache.read(path)
            if MARKER not in source.text:
                continue
            try:
                module = cst.parse_module(source.text)
            except cst.ParserSyntaxError:
                raise syntax_error(source) or EaglepatchError("is not valid Python; fix the syntax error", path=source.rel) from None
            command = RemoveDelegations(CodemodContext(filename=str(path)), star_imported_names(cache, tree, source, module))
            updated = module.visit(command)  # no metadata needed: skip transform_module's deep copy
            for cls, names in command.kept.items():
                kept.append((f"{source.rel}:{cls}", names))
            data = source.rewrite(module, updated)
            if data != source.data:
                edits.append(FileEdit(source.path, source.rel, source.data, data, removed=dict(command.removed)))
        except EaglepatchError as exc:
            errors.append(exc)
    return edits, errors, kept
