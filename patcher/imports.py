"""Which file a name in a module comes from: absolute, relative and aliased imports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from codemods.names import dotted_name

from patcher.locate import SourceTree
from patcher.source import SourceCache, SourceFile

PACKAGE = "sglang.srt"


@dataclass(frozen=True)
class Origin:
    module: str  # absolute dotted module
    name: str | None  # the imported name; None when the local name is the module itself
    path: Path | None  # the in-tree file, None for out-of-tree modules


def module_path(tree: SourceTree, module: str) -> Path | None:
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[2:]
    base = tree.srt.joinpath(*parts) if parts else tree.srt
    for candidate in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


class ImportTable:
    """Local name -> Origin, for one file."""

    _cache_key = "_import_tables"

    def __init__(self, tree: SourceTree, source: SourceFile, statements: list[cst.CSTNode]):
        self.tree = tree
        self.source = source
        self.names: dict[str, Origin] = {}
        package = source.rel.split("/")[:-1]
        for stmt in statements:
            for small in getattr(stmt, "body", []):
                if isinstance(small, cst.ImportFrom):
                    self._add_from(small, package)
                elif isinstance(small, cst.Import):
                    self._add_import(small)

    @classmethod
    def of(cls, cache: SourceCache, source: SourceFile, tree: SourceTree) -> ImportTable:
        tables = cache.__dict__.setdefault(cls._cache_key, {})
        table = tables.get(source.path)
        if table is None:
            table = tables[source.path] = cls(tree, source, cache.parse_imports(source))
        return table

    def _add_from(self, node: cst.ImportFrom, package: list[str]) -> None:
        level = len(node.relative)
        module = dotted_name(node.module)
        if level:
            base = ["sglang", "srt"] + package
            if level > 1:
                base = base[: len(base) - (level - 1)]
            module = ".".join(base + ([module] if module else []))
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            submodule = module_path(self.tree, f"{module}.{name}")
            if submodule is not None:
                self.names[local] = Origin(f"{module}.{name}", None, submodule)
            else:
                self.names[local] = Origin(module, name, module_path(self.tree, module))

    def _add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = dotted_name(alias.name)
            if alias.asname and isinstance(alias.asname.name, cst.Name):
                self.names[alias.asname.name.value] = Origin(module, None, module_path(self.tree, module))
            else:
                top = module.split(".")[0]
                self.names.setdefault(top, Origin(top, None, None))
                self.names[module] = Origin(module, None, module_path(self.tree, module))

    def lookup(self, local: str) -> Origin | None:
        return self.names.get(local)

    def lookup_expr(self, node: cst.BaseExpression) -> Origin | None:
        """`Name` or `module_alias.Name` or `sglang.srt.models.x.Name`."""
        if isinstance(node, cst.Name):
            return self.lookup(node.value)
        if isinstance(node, cst.Attribute):
            dotted = dotted_name(node.value)
            origin = self.names.get(dotted)
            if origin is not None and origin.name is None:
                return Origin(origin.module, node.attr.value, origin.path)
        return None
