"""What a file's star imports bind, as far as the tree shows: for revert, which may take out an
import eaglepatch added only when the name stays bound without it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from ..errors import EaglepatchError
from .imports import PACKAGE, module_names, module_path
from .scopes import absolute_module
from .source_cache import SourceCache
from .text import SourceFile

if TYPE_CHECKING:
    from .locate import SourceTree

_ALL = re.compile(r"^__all__\s*[:=+]", re.MULTILINE)


def star_imported_names(cache: SourceCache, tree: SourceTree, source: SourceFile, module: cst.Module) -> frozenset[str]:
    """Names the module's star imports are known to bind: each in-tree star module's public top-level
    names (imports included).  A star module outside the tree, or one with `__all__`, is not read,
    so it provides nothing here: revert then keeps an import code still uses."""
    names: set[str] = set()
    package = ".".join([PACKAGE, *source.rel.split("/")[:-1]])
    for statement in module.body:
        for small in getattr(statement, "body", []) if isinstance(statement, cst.SimpleStatementLine) else []:
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                path = module_path(tree, absolute_module(small, package))
                try:
                    star = cache.read(path) if path is not None else None
                except EaglepatchError:
                    star = None
                if star is not None and not _ALL.search(star.text):
                    names |= {n for n in module_names(cache, star, tree) if not n.startswith("_") and "." not in n}
    return frozenset(names)

