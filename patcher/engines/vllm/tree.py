"""vLLM profile, reading: the modules of a vLLM tree read with `ast` through the run's SourceCache
(lazily, each once a run, for the analysis and the edits alike), names resolved through their
imports, classes' bases, and the model registry's dict literals.

Nothing here imports vLLM; every fact is read from the tree PATH names."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...analyze.mro import c3_order
from ...errors import EaglepatchError
from ...read.source_cache import MemoKey, SourceCache

MODELS_PACKAGE = "vllm.model_executor.models"
INTERFACES = f"{MODELS_PACKAGE}.interfaces"
REGISTRY = f"{MODELS_PACKAGE}.registry"
TARGET_DICTS = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")  # what a server loads as the target
MAX_DEPTH = 12  # re-exports and bases followed at most this deep


@dataclass(frozen=True)
class Module:
    """One parsed module: its classes and what each imported name stands for."""

    name: str  # dotted, e.g. vllm.model_executor.models.llama
    path: Path
    rel: str  # relative to the vllm package folder
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)  # local -> [(module, attr or None)]


@dataclass(frozen=True)
class ClassRef:
    module: Module
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def at(self) -> str:
        return f"{self.module.rel}:{self.node.lineno}"


class VllmTree:
    """The `.py` modules below the vllm package folder (the cache's srt), parsed on first use; one a
    run (`of`), so the edits read the modules the analysis read."""

    def __init__(self, cache: SourceCache):
        self.cache = cache
        self.package = cache.srt
        self.unread: dict[str, EaglepatchError] = {}  # rel -> why a module the answer needed could not be read
        self._files: dict[str, Path] | None = None
        self._modules: dict[str, Module | None] = {}

    @property
    def files(self) -> dict[str, Path]:
        if self._files is None:
            files: dict[str, Path] = {}
            for path in sorted(self.package.rglob("*.py")):
                parts = list(path.relative_to(self.package.parent).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                files[".".join(parts)] = path
            self._files = files
        return self._files

    @classmethod
    def of(cls, cache: SourceCache) -> VllmTree:
        """The run's: made when first asked for."""
        return cache.memo(_VLLM_TREE, lambda: cls(cache))

    def rel(self, path: Path) -> str:
        return path.relative_to(self.package).as_posix()

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = None
            path = self.files.get(name)
            if path is not None and not self.cache.is_excluded(path):
                try:
                    self._modules[name] = _read(name, path, self.rel(path), self.cache.module_ast(path))
                except EaglepatchError as exc:
                    self.unread[self.rel(path)] = exc
        return self._modules[name]

    def module_ast(self, rel: str) -> ast.Module | None:
        """A file the profile reads whole (a runner), or None when it is missing or left out; one that
        cannot be read is noted in `unread` (the gate does not pass on it)."""
        path = self.package / rel
        if not path.is_file() or self.cache.is_excluded(path):
            return None
        try:
            return self.cache.module_ast(path)
        except EaglepatchError as exc:
            self.unread[rel] = exc
            return None

    def required(self, name: str) -> Module:
        module = self.module(name)
        if module is None:
            rel = name.replace(".", "/").removeprefix("vllm/") + ".py"
            raise EaglepatchError("missing or not valid Python: the vLLM profile reads it", path=rel)
        return module

    def resolve(self, module: str, name: str, depth: int = 0) -> list[ClassRef]:
        """Every class a (dotted) name used in `module` may denote: one per branch of an import switch."""
        found = self.module(module)
        if found is None or depth > MAX_DEPTH:
            return []
        if "." in name:
            head, rest = name.split(".", 1)
            out: list[ClassRef] = []
            for source, attr in found.imports.get(head, []):
                target = source if attr is None else f"{source}.{attr}"
                if self.module(target) is not None:
                    out += self.resolve(target, rest, depth + 1)
            return out
        if name in found.classes:
            return [ClassRef(found, found.classes[name])]
        out = []
        for source, attr in found.imports.get(name, []):
            if attr is None or (self.module(f"{source}.{attr}") is not None and self.module(source) is None):
                continue  # a module, not a class
            out += self.resolve(source, attr, depth + 1)
        return out

    def bases(self, ref: ClassRef) -> list[ClassRef]:
        out: list[ClassRef] = []
        for base in ref.node.bases:
            out += self.resolve(ref.module.name, ast.unparse(base))[:1]
        return out

    def mro(self, ref: ClassRef) -> list[ClassRef]:
        """The class and its bases found in the tree, in Python's method resolution order (C3, as the
        SGLang engine's plumbing gate orders them): which definition of a method a class gets."""
        refs: dict[tuple[str, str], ClassRef] = {}

        def key(cls: ClassRef) -> tuple[str, str]:
            refs.setdefault((cls.module.name, cls.name), cls)
            return (cls.module.name, cls.name)

        def bases(current: tuple[str, str]) -> list[tuple[str, str]]:
            return [key(base) for base in self.bases(refs[current])]

        return [refs[k] for k in c3_order(key(ref), bases)]

    def registry(self) -> dict[str, dict[str, tuple[str, str]]]:
        """registry.py's dict literals, name -> {architecture: (module, class)}; `**other` merged in."""
        module = self.required(REGISTRY)
        dicts: dict[str, dict[str, tuple[str, str]]] = {}
        for node in module.tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
                continue
            entries: dict[str, tuple[str, str]] = {}
            for key, item in zip(value.keys, value.values):
                if key is None:
                    if isinstance(item, ast.Name):
                        entries.update(dicts.get(item.id, {}))
                    continue
                try:
                    arch, where = ast.literal_eval(key), ast.literal_eval(item)
                except ValueError:
                    continue
                if isinstance(arch, str) and isinstance(where, tuple) and len(where) == 2 and all(isinstance(x, str) for x in where):
                    entries[arch] = (where[0], where[1])
            dicts[target.id] = entries
        return dicts


def module_of(entry: str) -> str:
    """A registry module, relative to vllm.model_executor.models unless it names a vllm. package."""
    return entry if entry.startswith("vllm.") else f"{MODELS_PACKAGE}.{entry}"


_VLLM_TREE: MemoKey[VllmTree] = MemoKey("the vLLM profile's modules")


def _read(name: str, path: Path, rel: str, tree: ast.Module) -> Module:
    module = Module(name, path, rel, tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in _top_level(tree.body):
        if isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            for alias in node.names:
                module.imports.setdefault(alias.asname or alias.name, []).append((source, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                module.imports.setdefault(local, []).append((alias.name if alias.asname else local, None))
    return module


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, the branches of `if`/`try` included (platform import switches)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)


def methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def is_stub(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A Protocol method with no behaviour: a docstring and/or `...` (or `pass`) only."""
    for stmt in func.body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and (stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)):
            continue
        return False
    return True
