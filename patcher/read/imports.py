"""Which file a name in a module comes from: absolute, relative and aliased imports."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import EaglepatchError
from .bindings import statement_end
from .expressions import dotted_name
from .locate import SourceTree
from .slices import IMPORT_LINE
from .source_cache import MemoKey, SourceCache
from .text import SourceFile, indent_width

_TOP_ASSIGN = re.compile(r"^(\w+)\s*(?::[^=]*)?=", re.MULTILINE)
_EXCEPT = re.compile(r"^([ \t]*)except\b[^\n]*:[ \t]*(?:#.*)?$")

PACKAGE = "sglang.srt"

# what this module derives once per run, in the run's cache
_MODULE_PATHS: MemoKey[dict[Path | None, dict[str, Path | None]]] = MemoKey("srt -> module -> its in-tree file")
_IMPORT_TABLES: MemoKey[dict[Path, ImportTable]] = MemoKey("file -> its import table")
_DEFINED_HERE: MemoKey[dict[Path, set[str]]] = MemoKey("file -> names it defines at top level")


@dataclass(frozen=True)
class Origin:
    module: str  # absolute dotted module
    name: str | None  # the imported name; None when the local name is the module itself
    path: Path | None  # the in-tree file, None for out-of-tree modules


def _package_only(local: str, origin: Origin) -> bool:
    """The `a` that `import a.b` binds as a side effect: it never replaces another binding of `a`."""
    return origin == Origin(local, None, None) and "." not in local


def module_path(tree: SourceTree, module: str) -> Path | None:
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[2:]
    base = os.path.join(tree.srt, *parts)  # str paths: a run resolves about a thousand modules, pathlib's objects cost
    for candidate in (base + ".py" if parts else None, os.path.join(base, "__init__.py")):
        if candidate is not None and os.path.isfile(candidate):
            return Path(candidate)
    return None


class ImportTable:
    """Local name -> Origin, for one file.

    When a name is imported in a `try:` and again in its `except ...:` fallback, the `try`
    binding is the one that runs.  Names a `from module import *` brings in are looked up in
    that module when first asked for.
    """

    def __init__(self, tree: SourceTree, source: SourceFile, statements: list[ast.stmt], cache: SourceCache | None = None):
        self.tree = tree
        self.source = source
        self.cache = cache
        # module -> in-tree file, for this run: one module is named by hundreds of import lines
        srt = tree.srt if tree is not None else None
        self._paths: dict[str, Path | None] = cache.memo(_MODULE_PATHS, dict).setdefault(srt, {}) if cache is not None else {}
        self.names: dict[str, Origin] = {}
        self.stars: list[Origin] = []  # in-tree modules imported with `*`
        self._package = source.rel.split("/")[:-1]
        fallbacks = self._fallbacks() if "except" in source.text else set()
        for local, origin in self._bindings(statements):
            if local == "*":
                if origin.path is not None and origin not in self.stars:
                    self.stars.append(origin)
            elif local not in self.names or ((local, origin) not in fallbacks and not _package_only(local, origin)):
                self.names[local] = origin

    @classmethod
    def of(cls, cache: SourceCache, source: SourceFile, tree: SourceTree) -> ImportTable:
        tables = cache.memo(_IMPORT_TABLES, dict)
        table = tables.get(source.path)
        if table is None:
            table = tables[source.path] = cls(tree, source, cache.parse_imports_ast(source), cache)
        return table

    def _module_path(self, module: str) -> Path | None:
        if module not in self._paths:  # keyed by the module alone: a Path in a key is hashed in Python
            self._paths[module] = module_path(self.tree, module)
        return self._paths[module]

    def _bindings(self, statements: list[ast.stmt]) -> list[tuple[str, Origin]]:
        out: list[tuple[str, Origin]] = []
        for stmt in statements:
            if isinstance(stmt, ast.ImportFrom):
                out += self._from_bindings(stmt)
            elif isinstance(stmt, ast.Import):
                out += self._import_bindings(stmt)
        return out

    def _fallbacks(self) -> set[tuple[str, Origin]]:
        """Bindings made by imports inside `except ...:` blocks."""
        lines = self.source.lines
        texts: list[str] = []
        for index, line in enumerate(lines):
            match = _EXCEPT.match(line) if "except" in line else None
            if match is None:
                continue
            own = len(match.group(1))
            inner = index + 1
            while inner < len(lines) and (not lines[inner].strip() or indent_width(lines[inner]) > own):
                if IMPORT_LINE.match(lines[inner]):
                    end = statement_end(lines, inner)
                    texts.append("\n".join(line.strip() for line in lines[inner:end]))
                    inner = end
                else:
                    inner += 1
        if not texts:
            return set()
        try:
            statements = ast.parse("\n".join(texts) + "\n").body
        except (SyntaxError, ValueError):
            return set()
        return set(self._bindings(statements))

    def _from_bindings(self, node: ast.ImportFrom) -> list[tuple[str, Origin]]:
        level = node.level or 0
        module = node.module or ""
        if level:
            base = ["sglang", "srt"] + self._package
            if level > 1:
                base = base[: len(base) - (level - 1)]
            module = ".".join(base + ([module] if module else []))
        if len(node.names) == 1 and node.names[0].name == "*":
            return [("*", Origin(module, None, self._module_path(module)))]
        out = []
        for alias in node.names:
            name = alias.name
            local = alias.asname or name
            submodule = self._module_path(f"{module}.{name}")
            if submodule is not None:
                out.append((local, Origin(f"{module}.{name}", None, submodule)))
            else:
                out.append((local, Origin(module, name, self._module_path(module))))
        return out

    def _import_bindings(self, node: ast.Import) -> list[tuple[str, Origin]]:
        out = []
        for alias in node.names:
            module = alias.name
            if alias.asname:
                out.append((alias.asname, Origin(module, None, self._module_path(module))))
            else:
                top = module.split(".")[0]
                if top != module:  # `import a.b` binds `a` too, unless something else already did
                    out.append((top, Origin(top, None, None)))
                out.append((module, Origin(module, None, self._module_path(module))))
        return out

    def lookup(self, local: str, _seen: frozenset = frozenset()) -> Origin | None:
        origin = self.names.get(local)
        if origin is None and self.stars and not local.startswith("_"):
            origin = self._through_star(local, _seen | {self.source.path})
        return origin

    def _through_star(self, local: str, seen: frozenset) -> Origin | None:
        """`from sglang.srt.models.x import *`: the name, if module x defines or imports it."""
        if self.cache is None:
            return None
        for star in self.stars:
            if star.path in seen:
                continue
            assert star.path is not None  # only in-tree modules are kept as stars
            try:
                other = self.cache.read(star.path)
            except EaglepatchError:
                continue
            outline = self.cache.outline(other)
            defined = any(indent == 0 and name == local for _, indent, _, name in outline.headers)
            if defined or _assigned_at_top(other.text, local) or ImportTable.of(self.cache, other, self.tree).lookup(local, seen) is not None:
                return Origin(star.module, local, star.path)
        return None

    def lookup_expr(self, node: ast.expr) -> Origin | None:
        """`Name` or `module_alias.Name` or `sglang.srt.models.x.Name`."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            dotted = dotted_name(node.value)
            origin = self.names.get(dotted)
            if origin is not None and origin.name is None:
                return Origin(origin.module, node.attr, origin.path)
        return None


def _assigned_at_top(text: str, name: str) -> bool:
    """`re.search(rf"^{name}[ \\t]*(?::[^=\\n]*)?=(?!=)", text, re.MULTILINE)`: a line that starts by
    assigning `name`.  Searched from the literal name, each match then kept only at a line's start: a
    `^`-anchored pattern is tried at every position of the file.  No match crosses a line, so none
    hides one that starts a line."""
    for match in re.finditer(rf"{re.escape(name)}[ \t]*(?::[^=\n]*)?=(?!=)", text):
        if match.start() == 0 or text[match.start() - 1] == "\n":
            return True
    return False


def defined_here(cache: SourceCache, source: SourceFile) -> set[str]:
    """Names a module defines itself at top level: classes, functions, assignments (once per file)."""
    table = cache.memo(_DEFINED_HERE, dict)
    names = table.get(source.path)
    if names is None:
        names = {name for _, indent, _, name in cache.outline(source).headers if indent == 0}
        names |= set(_TOP_ASSIGN.findall(source.text))
        table[source.path] = names
    return names


def module_names(cache: SourceCache, source: SourceFile, tree: SourceTree) -> set[str]:
    """Names a module binds at top level: its imports and what it defines itself (a cheap reading, for
    revert; what a copied signature needs is read with scope analysis, patcher/read/scopes.py)."""
    return set(ImportTable.of(cache, source, tree).names) | defined_here(cache, source)
