"""Stage 4: resolve a wrapper class, the model(s) it holds, and what each defines.

Classes are found through the file's own imports (absolute, relative, aliased, module
aliases) and followed through in-tree inheritance.  Bases outside the tree (`nn.Module`)
are recorded, not guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from patcher.errors import EaglepatchError
from patcher.imports import ImportTable
from patcher.locate import SourceTree
from patcher.records import ClassInfo, InnerModel, Protocol, Signature, Wrapper
from patcher.source import Parsed, SourceCache, SourceFile

_ENTRY = re.compile(r"^EntryClass\s*=\s*(.+)$", re.MULTILINE)
MAX_BASE_DEPTH = 12


@dataclass
class Located:
    source: SourceFile
    parsed: Parsed
    node: cst.ClassDef


class Resolver:
    """Resolves classes once per run; shared by every wrapper `--all` looks at."""

    def __init__(self, tree: SourceTree, cache: SourceCache):
        self.tree = tree
        self.cache = cache
        self._classes: dict[tuple[Path, str], ClassInfo | None] = {}
        self._located: dict[tuple[Path, str], Located | None] = {}

    # -- finding a class ---------------------------------------------------------------
    def locate(self, source: SourceFile, name: str) -> Located | None:
        key = (source.path, name)
        if key in self._located:
            return self._located[key]
        self._located[key] = None
        header = self.cache.outline(source).find(name, "class")
        found = None
        if header is not None:
            parsed = self.cache.parse_block(source, header)
            node = _find_class(parsed.module, name)
            if node is not None:
                found = Located(source, parsed, node)
        self._located[key] = found
        return found

    def find_class(self, source: SourceFile, expr: cst.BaseExpression, depth: int = 0) -> tuple[SourceFile, str] | None:
        """Where the class named by `expr` in `source` is defined, through imports and re-exports."""
        if depth > 4:
            return None
        if isinstance(expr, cst.Name) and self.cache.outline(source).find(expr.value, "class") is not None:
            return source, expr.value
        origin = ImportTable.of(self.cache, source, self.tree).lookup_expr(expr)
        if origin is None or origin.path is None or origin.name is None:
            return None
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError:
            return None
        return self.find_class(other, cst.Name(origin.name), depth + 1)

    # -- class members -------------------------------------------------------------------
    def class_info(self, source: SourceFile, name: str, depth: int = 0) -> ClassInfo | None:
        key = (source.path, name)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None  # guards against cycles
        located = self.locate(source, name)
        if located is None:
            return None
        parsed, node = located.parsed, located.node
        own = _own_members(parsed, node, name)
        members = dict(own)
        bases: list[str] = []
        external: list[str] = []
        for arg in node.bases:
            if arg.keyword is not None:
                continue
            label = parsed.module.code_for_node(arg.value)
            found = self.find_class(source, arg.value) if depth < MAX_BASE_DEPTH else None
            base = self.class_info(found[0], found[1], depth + 1) if found else None
            if base is None:
                external.append(label)
                continue
            bases.append(base.name)
            bases.extend(b for b in base.bases if b not in bases)
            external.extend(e for e in base.external_bases if e not in external)
            for member, signature in base.members.items():
                members.setdefault(member, signature)
        info = ClassInfo(
            name=name,
            file=source.rel,
            line=parsed.line_of(node),
            members=members,
            bases=bases,
            external_bases=external,
            dynamic="__getattr__" in members,
        )
        self._classes[key] = info
        return info

    # -- wrappers ---------------------------------------------------------------------------
    def wrapper_candidates(self, source: SourceFile) -> list[str]:
        """EntryClass names when the file has them, else every top-level class."""
        match = _ENTRY.search(source.text)
        outline = self.cache.outline(source)
        top = [name for _, indent, kind, name in outline.headers if kind == "class" and indent == 0]
        if match:
            named = [n for n in re.findall(r"\w+", match.group(1)) if n in top]
            if named:
                return named
        return top

    def inner_models(self, source: SourceFile, name: str, protocol: Protocol) -> list[InnerModel]:
        """Attributes `__init__` fills with another model, and the class(es) each may hold."""
        located = self.locate(source, name)
        if located is None:
            return []
        init = _find_method(located.node, "__init__")
        if init is None:
            return []
        found: dict[str, InnerModel] = {}
        for attribute, value, conditional, at in _self_assignments(init):
            call = value if isinstance(value, cst.Call) else None
            if call is None:
                continue
            target = self.find_class(source, call.func) or self._built_by_helper(source, call.func)
            inner = found.get(attribute)
            if inner is None:
                inner = found[attribute] = InnerModel(attribute, [], located.parsed.line_of(at), conditional)
            inner.conditional = inner.conditional or conditional
            if target is None:
                inner.unresolved.append(located.parsed.module.code_for_node(call.func))
                continue
            info = self.class_info(*target)
            if info is not None and all(c.name != info.name for c in inner.classes):
                inner.classes.append(info)
        wanted = set(protocol.members)
        candidates = [i for i in found.values() if i.classes]
        providers = [i for i in candidates if any(wanted & set(c.members) for c in i.classes)]
        if providers:
            return providers
        models_dir = "models/"
        elsewhere = [i for i in candidates if any(c.file.startswith(models_dir) and c.file != source.rel for c in i.classes)]
        return elsewhere or candidates

    def _built_by_helper(self, source: SourceFile, func: cst.BaseExpression) -> tuple[SourceFile, str] | None:
        """`self.language_model = build_lm(config)`: the class the helper returns."""
        if not isinstance(func, cst.Name):
            return None
        header = self.cache.outline(source).find(func.value, "def")
        if header is None:
            return None
        parsed = self.cache.parse_block(source, header)
        for ret in _returns(parsed.module):
            if isinstance(ret.value, cst.Call):
                found = self.find_class(source, ret.value.func)
                if found:
                    return found
        return None

    def wrapper(self, source: SourceFile, name: str, protocol: Protocol) -> Wrapper:
        info = self.class_info(source, name)
        if info is None:
            raise EaglepatchError(f"class {name} not found", path=source.rel)
        inners = self.inner_models(source, name, protocol)
        dynamic = None
        if info.dynamic:
            getattr_sig = info.members["__getattr__"]
            dynamic = f"__getattr__ at {getattr_sig.at}"
        return Wrapper(cls=info, inners=inners, path=source.rel, forwards_dynamically=dynamic)


def _find_class(module: cst.Module, name: str) -> cst.ClassDef | None:
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
            return stmt
    for node in _walk_classes(module):
        if node.name.value == name:
            return node
    return None


def _walk_classes(module: cst.Module):
    found: list[cst.ClassDef] = []

    class Collect(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def _find_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def _decorator_names(func: cst.FunctionDef) -> list[str]:
    names = []
    for decorator in func.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        if isinstance(expr, cst.Name):
            names.append(expr.value)
        elif isinstance(expr, cst.Attribute):
            names.append(expr.attr.value)
    return names


def _own_members(parsed: Parsed, cls: cst.ClassDef, owner: str) -> dict[str, Signature]:
    members: dict[str, Signature] = {}
    rel = parsed.source.rel
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            decorators = _decorator_names(stmt)
            if stmt.name.value in members and ("setter" in decorators or "deleter" in decorators):
                continue
            kind = "property" if "property" in decorators or "cached_property" in decorators else "method"
            members[stmt.name.value] = Signature(
                stmt.name.value, kind, owner, rel, parsed.line_of(stmt), node=stmt, parsed=parsed
            )
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign):
                    targets = [small.target]
                for target in targets:
                    if isinstance(target, cst.Name):
                        members.setdefault(
                            target.value,
                            Signature(target.value, "attribute", owner, rel, parsed.line_of(small), parsed=parsed),
                        )
    init = _find_method(cls, "__init__")
    if init is not None:
        for attribute, _value, _cond, at in _self_assignments(init, include_none=True):
            members.setdefault(
                attribute, Signature(attribute, "attribute", owner, rel, parsed.line_of(at), parsed=parsed)
            )
    return members


def _self_assignments(func: cst.FunctionDef, include_none: bool = False):
    """(attribute, value, conditional, target node) for each `self.X = value` in a method."""
    out: list[tuple[str, cst.BaseExpression, bool, cst.CSTNode]] = []

    class Collect(cst.CSTVisitor):
        def __init__(self):
            self.depth = 0

        def visit_If(self, node: cst.If) -> None:
            self.depth += 1

        def leave_If(self, node: cst.If) -> None:
            self.depth -= 1

        def visit_Try(self, node: cst.Try) -> None:
            self.depth += 1

        def leave_Try(self, node: cst.Try) -> None:
            self.depth -= 1

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def _add(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
            if (
                isinstance(target, cst.Attribute)
                and isinstance(target.value, cst.Name)
                and target.value.value == "self"
                and value is not None
            ):
                if not include_none and isinstance(value, cst.Name) and value.value == "None":
                    return
                out.append((target.attr.value, value, self.depth > 0, self.statement))

        def visit_Assign(self, node: cst.Assign) -> None:
            self.statement = node
            for target in node.targets:
                self._add(target.target, node.value)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self.statement = node
            self._add(node.target, node.value)

    func.visit(Collect())
    return out


def _returns(module: cst.Module) -> list[cst.Return]:
    found: list[cst.Return] = []

    class Collect(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            if node.value is not None:
                found.append(node)

    module.visit(Collect())
    return found


def select_wrappers(tree: SourceTree, cache: SourceCache, resolver: Resolver, selector: str, protocol: Protocol) -> list[Wrapper]:
    """`--model kimi_k25` or `--model kimi_k25:KimiK25ForConditionalGeneration`."""
    module, _, class_name = selector.partition(":")
    module = module.removesuffix(".py").replace(".", "/")
    path = tree.models / f"{module}.py"
    rel = f"models/{module}.py"
    if not path.is_file():
        raise EaglepatchError(
            f"no such model module; pass --model with a file name under {tree.rel(tree.models)}/ "
            "(e.g. kimi_k25 or kimi_k25:KimiK25ForConditionalGeneration)",
            path=rel,
        )
    source = cache.read(path)
    if class_name:
        if cache.outline(source).find(class_name, "class") is None:
            classes = resolver.wrapper_candidates(source)
            raise EaglepatchError(
                f"has no class {class_name}; classes here: {', '.join(classes) or 'none'}", path=rel
            )
        names = [class_name]
    else:
        names = resolver.wrapper_candidates(source)
    wrappers = [resolver.wrapper(source, name, protocol) for name in names]
    holding = [w for w in wrappers if w.inners or w.forwards_dynamically]
    if not holding:
        which = class_name or ", ".join(names) or "no class"
        raise EaglepatchError(
            f"{which}: no inner model found (no `self.X = SomeModel(...)` in __init__ that resolves to a class "
            "in the tree); pass --model module:Class naming the wrapper",
            path=rel,
        )
    return holding
