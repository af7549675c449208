"""Release-history regression: what upstream fixed, against what eaglepatch said before.

For each consecutive pair (R, R+1) of the pinned releases (``tests/releases.txt``):

1. **Ground truth, from the sources alone** (CPython ``ast``, none of eaglepatch's
   analysis). Every class named in an ``EntryClass = ...`` under ``models/`` of R+1 that
   also exists in R (same file; if the file moved, the one class of that name under R's
   ``models/``) has its members read in both releases: its own ``def``s and properties,
   class-level assignments, ``self.X = ...`` in ``__init__``, and what it inherits from
   in-tree base classes (resolved through the module's imports, relative ones included,
   and re-exports). A **fix** is a (class, member) absent in R and present in R+1, for
   members of the EAGLE-3 protocol. The protocol's names are eaglepatch's own
   ``protocol[].name`` on R+1 and R (union): this script hard-codes none.

   Each fix has a **side** -- ``target`` when some use of the member has role ``target``
   or ``unknown`` (``protocol[].uses[].role``), else ``draft`` -- and a **shape**, read
   from R+1: ``delegation`` (a method whose body reaches the same member on
   ``self.<attr>``, e.g. ``return self.language_model.get_embed_and_head()``), ``body``
   (any other method or property written in the class), ``assignment`` (a class-level
   ``name = ...``), ``attribute`` (``self.name = ...`` in ``__init__``) or ``inherited``
   (the class does not define it; a base class it now inherits from does).

2. **What eaglepatch said about R**: ``check --all --format json`` on R (cached per
   release and eaglepatch commit under ``.cache/history/``), looked up by (file, class)
   in ``models[]``. ``listed``: the class is there. ``reported``: the member is in its
   ``missing[]`` -- for the old contract (no ``schema`` key) also in its
   ``not_delegable[]``, which is where that contract put the gaps it could not fill
   (the new contract puts those in ``missing[]`` with ``fix: null``). ``written``: in
   ``missing[]`` with a ``fix`` (new contract), or in ``missing[]`` of a ``delegable``
   model (old contract): what ``apply`` would have written.

3. **Context**: on the latest release, the required (class, member) gaps eaglepatch
   reports, and how many of them are in classes upstream never fixed a protocol member of
   in the whole history (likely false alarms: models nobody serves with EAGLE-3).

4. **Hook bodies on a bare backbone**: for each ``body`` / ``inherited`` fix whose method
   reaches ``self.X.…`` with ``self.X`` built from an in-tree class without ``lm_head``
   (``Fix.backbone``): whether ``apply`` on R would have written it with a learned body
   (``synthesize``, or ``inherit`` followed to the base that learns it), and if so whether
   that body (``explain --format json``'s ``would_write``, cached) behaves like upstream's R+1
   ``def`` when both run on the same stub model (``compare_bodies``; anything the stub lacks:
   not compared). For ``needs_code`` ones, whether R+1 changed the method the blocker names.
   Neither body is stored: only the differing state.

5. **Plumbing**: for each of those fixes, whether R+1 also made the class's ``forward`` or its
   backbone's carry aux hidden states (one uses ``aux_hidden_states`` / ``layers_to_capture`` in
   R+1 and did not in R, or the method a ``needs_code`` blocker named now reads what it lacked:
   ``upstream_plumbing``); whether ``apply`` on R writes plumbing with the hook (``fix.plumbing``
   in R's report, or in the base's the learned body goes to); and for each piece it writes,
   whether R+1's code of that method holds one of the same kind (``PIECE_CHECKS``: a syntax
   check per kind, no more). And per release, the target classes ``check`` gives a
   ``"gap": "plumbing"`` -- a hook their forward never uses, which a report without that gate
   called compliant.

Prints a Markdown table (one row per side and a total), one by kind of fix (delegation, learned
body, plumbing), the broken-plumbing classes per release and a per-fix list, and writes
``bench/history.json``, which is committed and regenerated on purpose (``make history``).
Runs ``check --all`` and the per-pair extraction in a process pool (``--jobs``, 2).
"""

from __future__ import annotations

import argparse
import ast
import gc
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import sglang_releases  # noqa: E402

PACKAGE = "sglang"
SRT = ("sglang", "srt")
OUTPUT = REPO / "bench" / "history.json"
CACHE = REPO / ".cache" / "history"
TARGET_ROLES = {"target", "unknown"}
SIDES = ("target", "draft")
CHECK_TIMEOUT_SECONDS = 600


# =========================================================================== ground truth
#
# Everything in this section reads Python sources with ``ast`` and nothing else.


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # "def" | "property" | "assignment" | "attribute"
    owner_file: str  # relative to srt
    owner_class: str
    line: int


@dataclass
class Fix:
    cls: str
    member: str
    file: str  # in R+1, relative to srt
    old_file: str  # in R (differs when the file moved)
    line: int  # of the member's definition in R+1
    shape: str  # delegation | body | assignment | attribute | inherited
    to: str | None = None  # delegation: the self.<attr> chain; inherited: "file:Class"
    side: str = ""  # target | draft (filled in from the protocol)
    # body / inherited: the attribute of a bare backbone (an in-tree class without lm_head, built
    # in __init__) the method reaches, e.g. "model" for `return self.model.embed_tokens.weight, ...`
    backbone: str | None = None


@dataclass
class PairTruth:
    old: str
    new: str
    fixes: list[Fix] = field(default_factory=list)
    entry_classes: int = 0  # EntryClass names in R+1
    compared: int = 0  # of those, found in R too
    new_classes: list[str] = field(default_factory=list)  # "file:Class" absent from R
    moved: list[dict] = field(default_factory=list)  # {"class", "from", "to"}
    ambiguous: list[dict] = field(default_factory=list)  # moved, several candidates in R
    unresolved: list[dict] = field(default_factory=list)  # EntryClass names with no class
    # R's class forwarded unknown names with an in-tree __getattr__: what it "gained" in R+1
    # may have been there at run time already, so it is listed here, not as a fix.
    dynamic_in_old: list[dict] = field(default_factory=list)
    # R+1's class (not R's) has an in-tree __getattr__: it may have gained members no source shows.
    became_dynamic: list[str] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)  # "version:file: message"


class SourceTree:
    """One release's ``site-packages``: modules parsed on demand, names resolved lazily."""

    def __init__(self, site: Path, label: str = ""):
        self.site = Path(site).resolve()
        self.srt = self.site.joinpath(*SRT)
        self.label = label or self.site.name
        self._modules: dict[str, tuple[Path, ast.Module] | None] = {}
        self._bindings: dict[str, dict[str, tuple]] = {}
        self.parse_errors: list[str] = []

    # ------------------------------------------------------------------ modules

    def module_name(self, path: Path) -> str:
        path = Path(path)
        try:
            rel = path.relative_to(self.site).with_suffix("")
        except ValueError:
            rel = path.resolve().relative_to(self.site).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def rel(self, module: str) -> str:
        """The module's file, relative to srt (``models/llama.py``)."""
        path, _ = self._modules[module]
        return path.relative_to(self.srt).as_posix()

    def module(self, name: str) -> ast.Module | None:
        if name not in self._modules:
            self._modules[name] = None
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                base = self.site.joinpath(*name.split("."))
                for path in (base.with_suffix(".py"), base / "__init__.py"):
                    if path.is_file():
                        try:
                            self._modules[name] = (path, ast.parse(path.read_bytes(), str(path)))
                        except (SyntaxError, ValueError) as exc:
                            self.parse_errors.append(f"{self.label}:{path.relative_to(self.site)}: {exc}")
                        break
        found = self._modules[name]
        return found[1] if found else None

    def is_package(self, name: str) -> bool:
        return self.module(name) is not None and self._modules[name][0].name == "__init__.py"

    # ------------------------------------------------------------------ names

    def _absolute(self, module: str, target: str | None, level: int) -> str:
        if not level:
            return target or ""
        parts = module.split(".")
        if not self.is_package(module):
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        return ".".join(parts + ([target] if target else []))

    def bindings(self, module: str) -> dict[str, tuple]:
        """Top-level names of ``module`` (into ``if``/``try`` too, last binding wins)."""
        if module in self._bindings:
            return self._bindings[module]
        out: dict[str, tuple] = {}
        self._bindings[module] = out
        tree = self.module(module)
        if tree is None:
            return out

        def visit(statements):
            for node in statements:
                if isinstance(node, ast.ClassDef):
                    out[node.name] = ("class", module, node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[node.name] = ("other",)
                elif isinstance(node, ast.ImportFrom):
                    source = self._absolute(module, node.module, node.level)
                    for alias in node.names:
                        if alias.name != "*":
                            out[alias.asname or alias.name] = ("from", source, alias.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            out[alias.asname] = ("module", alias.name)
                        else:
                            head = alias.name.split(".")[0]
                            out[head] = ("module", head)
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            out[target.id] = ("expr", module, node.value)
                elif isinstance(node, (ast.If, ast.Try)):
                    for block in _blocks(node):
                        visit(block)

        visit(tree.body)
        return out

    def resolve_name(self, module: str, name: str, depth: int = 0):
        """("class", module, ClassDef) | ("module", name) | None."""
        if depth > 25:
            return None
        bound = self.bindings(module).get(name)
        if bound is None:
            if self.module(f"{module}.{name}") is not None:
                return ("module", f"{module}.{name}")
            return None
        kind = bound[0]
        if kind == "class":
            return bound
        if kind == "module":
            return bound
        if kind == "from":
            _, source, original = bound
            if self.module(f"{source}.{original}") is not None:
                return ("module", f"{source}.{original}")
            if self.module(source) is None:
                return None
            return self.resolve_name(source, original, depth + 1)
        if kind == "expr":
            return self.resolve_expr(bound[1], bound[2], depth + 1)
        return None

    def resolve_expr(self, module: str, expr: ast.expr, depth: int = 0):
        if depth > 25:
            return None
        if isinstance(expr, ast.Subscript):  # Generic[T], SomeBase[...]
            return self.resolve_expr(module, expr.value, depth + 1)
        if isinstance(expr, ast.Name):
            return self.resolve_name(module, expr.id, depth + 1)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve_expr(module, expr.value, depth + 1)
            if owner and owner[0] == "module":
                return self.resolve_name(owner[1], expr.attr, depth + 1)
        return None

    # ------------------------------------------------------------------ classes

    def find_class(self, rel: str, name: str):
        """The class ``name`` as seen from the module at ``rel`` (defined or imported there)."""
        module = self.module_name(self.srt / rel)
        if self.module(module) is None:
            return None
        found = self.resolve_name(module, name)
        return found if found and found[0] == "class" else None

    def defines(self, rel: str, name: str) -> bool:
        module = self.module_name(self.srt / rel)
        if self.module(module) is None:
            return False
        bound = self.bindings(module).get(name)
        return bool(bound and bound[0] == "class")

    def members(self, found, _seen: frozenset = frozenset()) -> dict[str, Member]:
        """Own members first, then each base's (left to right, depth first)."""
        _, module, node = found
        key = (module, node.name, node.lineno)
        if key in _seen:
            return {}
        seen = _seen | {key}
        rel = self.rel(module)
        out: dict[str, Member] = {}
        own: dict[str, Member] = {}
        for name, kind, line in own_members(node):
            if kind == "attribute":  # `self.X = ...` in __init__: after the class body's own names
                own.setdefault(name, Member(name, kind, rel, node.name, line))
            else:  # the class body binds a name twice (two `def`s): the last one is the one Python keeps
                own[name] = Member(name, kind, rel, node.name, line)
        out.update(own)
        for base in node.bases:
            resolved = self.resolve_expr(module, base)
            if resolved and resolved[0] == "class":
                for name, member in self.members(resolved, seen).items():
                    out.setdefault(name, member)
        return out

    def entry_classes(self) -> dict[str, list[str]]:
        """{file relative to srt: the names in its top-level ``EntryClass``} under models/."""
        out: dict[str, list[str]] = {}
        models = self.srt / "models"
        for path in sorted(models.rglob("*.py")):
            if b"EntryClass" not in path.read_bytes():
                continue
            module = self.module_name(path)
            tree = self.module(module)
            if tree is None:
                continue
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
                if any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets):
                    value = node.value
                    items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                    names = [i.id if isinstance(i, ast.Name) else ast.unparse(i) for i in items]
                    out[path.relative_to(self.srt).as_posix()] = names
        return out


def _blocks(statement) -> list[list]:
    """The statement lists an `if` or `try` holds: its body, `else`, handlers and `finally`."""
    handlers = [handler.body for handler in getattr(statement, "handlers", ())]
    return [statement.body, statement.orelse, *handlers, getattr(statement, "finalbody", [])]


def _decorator_names(node) -> set[str]:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def own_members(node: ast.ClassDef) -> list[tuple[str, str, int]]:
    """(name, kind, line) defined in the class body itself, and ``self.X`` set in ``__init__``."""
    out = []
    init = None

    def visit(statements):
        nonlocal init
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decos = _decorator_names(stmt)
                kind = "property" if decos & {"property", "cached_property", "setter", "getter"} else "def"
                out.append((stmt.name, kind, stmt.lineno))
                if stmt.name == "__init__":
                    init = stmt
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    for leaf in _leaves(target):
                        if isinstance(leaf, ast.Name):
                            out.append((leaf.id, "assignment", stmt.lineno))
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
                out.append((stmt.target.id, "assignment", stmt.lineno))
            elif isinstance(stmt, (ast.If, ast.Try)):
                visit(stmt.body)
                visit(stmt.orelse)
                for handler in getattr(stmt, "handlers", ()):
                    visit(handler.body)
                visit(getattr(stmt, "finalbody", ()))

    visit(node.body)
    if init is not None and init.args.args:
        me = init.args.args[0].arg
        for sub in ast.walk(init):
            targets = []
            if isinstance(sub, ast.Assign):
                targets = sub.targets
            elif isinstance(sub, ast.AnnAssign) and sub.value is not None:
                targets = [sub.target]
            for target in targets:
                for leaf in _leaves(target):
                    if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) and leaf.value.id == me:
                        out.append((leaf.attr, "attribute", sub.lineno))
    return out


def _leaves(target):
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _leaves(elt)
    elif isinstance(target, ast.Starred):
        yield from _leaves(target.value)
    else:
        yield target


def _def_node(tree: ast.Module, cls: str, line: int, name: str):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name and node.lineno == line:
            return node
    return None


def delegation_target(func: ast.FunctionDef, name: str) -> str | None:
    """``"language_model"`` when ``func`` reaches ``self.language_model.<name>``, else None.

    The member must be reached on an attribute chain of ``self`` (``self.a.name`` or
    ``self.a.b.name``), called or -- for properties -- read.
    """
    if not func.args.args:
        return None
    me = func.args.args[0].arg
    if _sets_own_state(func, me):
        return None  # e.g. `self.capture_aux_hidden_states = True` before calling the backbone: a body
    for sub in ast.walk(func):
        if isinstance(sub, ast.Attribute) and sub.attr == name:
            chain = []
            value = sub.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if chain and isinstance(value, ast.Name) and value.id == me:
                return ".".join(reversed(chain))
    return None


def _sets_own_state(func: ast.FunctionDef, me: str) -> bool:
    """The method assigns an attribute of its own instance (`self.x = ...`, `self.x += ...`)."""
    for sub in ast.walk(func):
        targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me:
                return True
    return False


def _shape(tree: SourceTree, found, member: Member) -> tuple[str, str | None]:
    _, module, node = found
    if (member.owner_file, member.owner_class) != (tree.rel(module), node.name):
        return "inherited", f"{member.owner_file}:{member.owner_class}"
    if member.kind == "assignment":
        return "assignment", None
    if member.kind == "attribute":
        return "attribute", None
    func = _def_node(tree.module(module), node.name, member.line, member.name)
    to = delegation_target(func, member.name) if func is not None else None
    return ("delegation", to) if to else ("body", None)


# `self.<x>` a hook body may use that is the class's own state, not a held module
OWN_STATE = {"lm_head", "config", "pp_group", "capture_aux_hidden_states"}


def _self_heads(func: ast.FunctionDef) -> list[str]:
    """The X of every ``self.X.Y`` in ``func`` (X used as a held object), in order of first use."""
    if not func.args.args:
        return []
    me = func.args.args[0].arg
    heads: list[str] = []
    for sub in ast.walk(func):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute):
            inner = sub.value
            if isinstance(inner.value, ast.Name) and inner.value.id == me and inner.attr not in heads:
                heads.append(inner.attr)
    return heads


def _constructed_class(tree: SourceTree, found_cls, member: Member):
    """The in-tree class ``self.X = Foo(...)`` (or ``Foo(...) if c else ...``) builds in __init__.

    ``Foo`` may be a module-level name, a parameter of ``__init__`` (its default:
    ``language_model_cls=Qwen3LLMModel``) or a class-level name of the class (``self.body_cls``)."""
    found = tree.find_class(member.owner_file, member.owner_class)
    if found is None:
        return None
    _, module, node = found
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None:
        return None
    for sub in ast.walk(init):
        if not (isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.lineno == member.line and sub.value is not None):
            continue
        value = sub.value.body if isinstance(sub.value, ast.IfExp) else sub.value
        if not isinstance(value, ast.Call):
            return None
        func, where = value.func, module
        args = init.args.args + init.args.kwonlyargs
        defaults = [None] * (len(init.args.args) - len(init.args.defaults)) + init.args.defaults + init.args.kw_defaults
        if isinstance(func, ast.Name) and func.id in {a.arg for a in args}:
            func = dict(zip((a.arg for a in args), defaults)).get(func.id)  # the parameter's default
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and args and func.value.id == args[0].arg:
            held = tree.members(found_cls).get(func.attr)  # self.body_cls: a class-level name
            func = None
            if held is not None and held.kind == "assignment":
                owner = tree.find_class(held.owner_file, held.owner_class)
                where = owner[1] if owner else module
                for stmt in (owner[2].body if owner else ()):
                    if isinstance(stmt, ast.Assign) and stmt.lineno == held.line:
                        func = stmt.value
        if func is None:
            return None
        resolved = tree.resolve_expr(where, func)
        return resolved if resolved and resolved[0] == "class" else None
    return None


def bare_backbone(tree: SourceTree, found, member: Member) -> str | None:
    """The attribute of the bare backbone the method ``member`` (of ``found``, maybe inherited)
    reaches: ``self.X.…`` where ``self.X`` is built in __init__ from an in-tree class with no
    ``lm_head``. None when the method reaches none (or more than one)."""
    if member.kind not in ("def", "property"):
        return None
    owner_module = tree.module_name(tree.srt / member.owner_file)
    func = _def_node(tree.module(owner_module), member.owner_class, member.line, member.name)
    if func is None:
        return None
    members = tree.members(found)
    found_backbones = []
    for head in _self_heads(func):
        held = members.get(head)
        if head in OWN_STATE or held is None or held.kind != "attribute":
            continue
        built = _constructed_class(tree, found, held)
        if built is not None and "lm_head" not in tree.members(built):
            found_backbones.append(head)
    return found_backbones[0] if len(found_backbones) == 1 else None


def method_source(site, rel: str, cls: str, member: str) -> str | None:
    """The source of the ``def member`` Python keeps in class ``cls`` of ``rel`` (the last one
    the class body binds, ``if``/``try`` branches included), dedented; None when absent."""
    path = Path(site).joinpath(*SRT) / rel
    try:
        text = path.read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            def visit(statements):
                nonlocal found
                for stmt in statements:
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == member:
                        found = stmt
                    elif isinstance(stmt, (ast.If, ast.Try)):
                        for block in _blocks(stmt):
                            visit(block)
            visit(node.body)
    if found is None:
        return None
    segment = ast.get_source_segment(text, found, padded=True)
    return textwrap.dedent(segment) if segment else None


def _locate_old(old: SourceTree, rel: str, cls: str, old_entries: dict[str, list[str]]):
    """(file in R, found) for class ``cls`` of R+1's ``rel``; file None when absent or ambiguous."""
    if old.defines(rel, cls):
        return rel, old.find_class(rel, cls), []
    candidates = []
    for path in sorted((old.srt / "models").rglob("*.py")):
        if cls.encode() not in path.read_bytes():
            continue
        candidate = path.relative_to(old.srt).as_posix()
        if old.defines(candidate, cls):
            candidates.append(candidate)
    if len(candidates) > 1:
        listed = [c for c in candidates if cls in old_entries.get(c, ())]
        if len(listed) == 1:
            candidates = listed
    if len(candidates) == 1:
        return candidates[0], old.find_class(candidates[0], cls), []
    return None, None, candidates


def upstream_fixes(old_site, new_site, names, old: str = "R", new: str = "R+1") -> PairTruth:
    """The protocol members (``names``) that EntryClass classes of R+1 gained since R.

    ``old_site`` / ``new_site``: a ``site-packages`` folder holding ``sglang/srt``, or a
    ``SourceTree`` already made for it (parsed modules are reused).
    """
    enabled = gc.isenabled()
    gc.disable()  # thousands of live AST nodes make every collection slow, and they form no cycles
    try:
        return _upstream_fixes(old_site, new_site, set(names), old, new)
    finally:
        if enabled:
            gc.enable()


def _upstream_fixes(old_site, new_site, names: set[str], old: str, new: str) -> PairTruth:
    before = old_site if isinstance(old_site, SourceTree) else SourceTree(old_site, old)
    after = new_site if isinstance(new_site, SourceTree) else SourceTree(new_site, new)
    errors_before = len(before.parse_errors), len(after.parse_errors)
    truth = PairTruth(old, new)
    old_entries = before.entry_classes()
    seen = set()
    for rel, classes in after.entry_classes().items():
        for cls in classes:
            truth.entry_classes += 1
            found_new = after.find_class(rel, cls)
            if found_new is None:
                truth.unresolved.append({"file": rel, "class": cls})
                continue
            new_rel = after.rel(found_new[1])
            cls = found_new[2].name
            if (new_rel, cls) in seen:
                continue  # listed in two EntryClass lists
            seen.add((new_rel, cls))
            old_rel, found_old, candidates = _locate_old(before, new_rel, cls, old_entries)
            if found_old is None:
                if candidates:
                    truth.ambiguous.append({"class": cls, "to": new_rel, "candidates": candidates})
                else:
                    truth.new_classes.append(f"{new_rel}:{cls}")
                continue
            old_rel = before.rel(found_old[1])
            if old_rel != new_rel:
                truth.moved.append({"class": cls, "from": old_rel, "to": new_rel})
            truth.compared += 1
            had = before.members(found_old)
            has = after.members(found_new)
            gained = sorted(names & has.keys() - had.keys())
            if "__getattr__" in has and "__getattr__" not in had:
                truth.became_dynamic.append(f"{new_rel}:{cls}")
            if "__getattr__" in had:
                if gained:
                    truth.dynamic_in_old.append({"file": new_rel, "class": cls, "members": gained,
                                                 "getattr": f"{had['__getattr__'].owner_file}:{had['__getattr__'].owner_class}"})
                continue
            for name in gained:
                member = has[name]
                shape, to = _shape(after, found_new, member)
                backbone = bare_backbone(after, found_new, member) if shape in ("body", "inherited") else None
                truth.fixes.append(Fix(cls, name, new_rel, old_rel, member.line, shape, to, backbone=backbone))
    truth.parse_errors = sorted(set(before.parse_errors[errors_before[0]:] + after.parse_errors[errors_before[1]:]))
    truth.fixes.sort(key=lambda f: (f.file, f.cls, f.member))
    return truth


# =========================================================================== behaviour of a hook body
#
# Whether the body eaglepatch would have written in R does what upstream's in R+1 does: each is
# run as a function on the same stub model, and what the call returns and leaves behind compared.
# The stub holds only what is listed below; a body that reads anything else (of the model or of
# a module-level name) is "not compared", never run on a guess.

LAYERS = 32
CALLS = {  # member -> the calls made, each on a fresh stub
    "get_embed_and_head": [()],
    "set_eagle3_layers_to_capture": [(None,), ([1, 5, 9],)],
    "set_embed_and_head": [("<new embed>", "<new head>")],  # strings name sentinels, made per run
}
# every algorithm's capture hook (DFlash's, DSpark's) is called as EAGLE-3's is: with no ids, and with some
CAPTURE_CALLS = CALLS["set_eagle3_layers_to_capture"]
_CAPTURE_HOOK = re.compile(r"set_\w+_layers_to_capture")


def calls_for(member: str) -> list[tuple] | None:
    return CALLS.get(member) or (CAPTURE_CALLS if _CAPTURE_HOOK.fullmatch(member) else None)


class NotModelled(BaseException):
    """A body read something the stub does not hold (BaseException: `except Exception` lets it through)."""


class Sentinel:
    """An object that only has a name: a weight, a layer, a tensor handed in."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


class Stub:
    """An object holding exactly the attributes it was given (and those a body sets on it)."""

    def __init__(self, path: str, misses: list, **attrs):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_misses", misses)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name: str):
        attrs = object.__getattribute__(self, "_attrs")
        if name in attrs:
            return attrs[name]
        where = f"{object.__getattribute__(self, '_path')}.{name}"
        object.__getattribute__(self, "_misses").append(where)
        raise NotModelled(where)

    def __setattr__(self, name: str, value) -> None:
        self._attrs[name] = value

    def __delattr__(self, name: str) -> None:
        if name not in self._attrs:
            self.__getattr__(name)
        del self._attrs[name]


def _noop(*args, **kwargs):
    return None


def stub_model(backbone: str, misses: list) -> tuple[Stub, dict]:
    """(self, the module globals) for one run: one pipeline stage, a 32-layer backbone at
    ``self.<backbone>`` with ``embed_tokens.weight`` and ``layers_to_capture == []``, the class's
    own ``lm_head.weight``, ``config`` (and ``config.text_config``) with ``num_hidden_layers``,
    ``capture_aux_hidden_states`` False."""
    pp = Stub("pp_group", misses, is_first_rank=True, is_last_rank=True, world_size=1)
    held = Stub(
        f"self.{backbone}", misses,
        embed_tokens=Stub(f"self.{backbone}.embed_tokens", misses, weight=Sentinel(f"{backbone}.embed_tokens.weight")),
        layers=[Sentinel(f"{backbone}.layers[{i}]") for i in range(LAYERS)],
        layers_to_capture=[],
    )
    text_config = Stub("self.config.text_config", misses, num_hidden_layers=LAYERS)
    me = Stub("self", misses, **{
        backbone: held,
        "lm_head": Stub("self.lm_head", misses, weight=Sentinel("lm_head.weight")),
        "config": Stub("self.config", misses, num_hidden_layers=LAYERS, text_config=text_config),
        "pp_group": pp,
        "capture_aux_hidden_states": False,
    })

    class PPMissingLayer:  # one pipeline stage: no layer is missing, nothing is an instance
        pass

    cuda = Stub("torch.cuda", misses, empty_cache=_noop, synchronize=_noop)
    names = {
        "get_pp_group": lambda: pp,
        "torch": Stub("torch", misses, cuda=cuda),
        "current_platform": Stub("current_platform", misses, empty_cache=_noop, synchronize=_noop),
        "PPMissingLayer": PPMissingLayer,
    }
    return me, names


def describe(value, _depth: int = 0):
    """A comparable picture of a value: sentinels by name, stubs by their attributes."""
    if _depth > 8:
        return "..."
    if isinstance(value, Sentinel):
        return repr(value)
    if isinstance(value, Stub):
        return {k: describe(v, _depth + 1) for k, v in sorted(object.__getattribute__(value, "_attrs").items())}
    if isinstance(value, (list, tuple)):
        return [describe(v, _depth + 1) for v in value] if isinstance(value, list) else {"__tuple__": [describe(v, _depth + 1) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


def _flatten(picture, prefix: str = "self") -> dict[str, object]:
    if isinstance(picture, dict) and "__tuple__" not in picture:
        out = {}
        for key, value in picture.items():
            out.update(_flatten(value, f"{prefix}.{key}"))
        return out
    return {prefix: picture}


def _function(source: str, member: str, names: dict):
    """``source``'s ``def member`` as a plain function whose globals are ``names`` (annotations
    are not evaluated, as under ``from __future__ import annotations``)."""
    import __future__

    module = ast.parse(textwrap.dedent(source))
    defs = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == member]
    if not defs:
        raise ValueError(f"no def {member} in the source")
    code = compile(ast.Module(body=[defs[-1]], type_ignores=[]), f"<{member}>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    scope = dict(names)
    exec(code, scope)
    return scope[member]


def run_body(source: str, member: str, backbone: str) -> list[dict]:
    """Each call of ``CALLS[member]`` on a fresh stub: what it returned (or raised) and the
    model's state after, flattened to ``{"self.model.layers_to_capture": [...], ...}``.
    Raises NotModelled naming what the body read that the stub does not hold."""
    import builtins

    outcomes = []
    for args in calls_for(member) or []:
        misses: list[str] = []
        me, names = stub_model(backbone, misses)
        args = tuple(Sentinel(a[1:-1]) if isinstance(a, str) and a.startswith("<") else a for a in args)
        scope = {"__builtins__": builtins, **names}
        function = _function(source, member, scope)
        shown = (d if isinstance(d, str) else repr(d) for d in map(describe, args))
        outcome: dict = {"call": f"{member}({', '.join(shown)})"}
        try:
            outcome["returned"] = describe(function(me, *args))
        except NotModelled:
            raise
        except NameError as exc:
            raise NotModelled(f"the module-level name {exc.name}") from None
        except Exception as exc:  # the body failed on the stub: that is its behaviour
            outcome["raised"] = f"{type(exc).__name__}: {exc}"
        if misses:  # read, failed, and the failure was swallowed by the body
            raise NotModelled(misses[0])
        outcome["state"] = _flatten(describe(me))
        outcomes.append(outcome)
    return outcomes


def compare_bodies(ours: str, upstream: str, member: str, backbone: str = "model") -> dict:
    """Whether two sources of ``def member`` behave alike on the stub model.

    ``{"behaves_as_upstream": True | False | None, "differences": [...], "not_compared": why}``;
    each difference is ``{"call", "what", "eaglepatch", "upstream"}``. None when ``member`` has no
    calls to make, or either body reads something the stub does not hold."""
    if calls_for(member) is None:
        return {"behaves_as_upstream": None, "differences": [], "not_compared": f"no calls defined for {member}"}
    results = {}
    for side, source in (("eaglepatch", ours), ("upstream", upstream)):
        try:
            results[side] = run_body(source, member, backbone)
        except NotModelled as exc:
            return {"behaves_as_upstream": None, "differences": [],
                    "not_compared": f"{side}'s body reads {exc.args[0]}, which the stub does not hold"}
        except (SyntaxError, ValueError) as exc:
            return {"behaves_as_upstream": None, "differences": [], "not_compared": f"{side}'s body: {exc}"}
    differences = []
    for mine, theirs in zip(results["eaglepatch"], results["upstream"]):
        for what in ("returned", "raised"):
            if mine.get(what) != theirs.get(what):
                differences.append({"call": mine["call"], "what": what,
                                    "eaglepatch": mine.get(what), "upstream": theirs.get(what)})
        for key in sorted(set(mine["state"]) | set(theirs["state"])):
            missing = "<not set>"
            a, b = mine["state"].get(key, missing), theirs["state"].get(key, missing)
            if a != b:
                differences.append({"call": mine["call"], "what": key, "eaglepatch": a, "upstream": b})
    return {"behaves_as_upstream": not differences, "differences": differences, "not_compared": ""}


# =========================================================================== eaglepatch


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.stdout.strip() if done.returncode == 0 else ""


def eaglepatch_key(repo: Path) -> str:
    """The last commit of ``repo`` that changed the tool (``patcher/``, ``codemods/``), plus a
    hash of the tool's uncommitted changes, if any: commits to tests or bench keep the cache."""
    commit = _git("log", "-1", "--format=%H", "--", "patcher", "codemods", cwd=repo) or "nogit"
    dirty = _git("status", "--porcelain", "--", "patcher", "codemods", cwd=repo)
    if not dirty:
        return commit
    digest = hashlib.sha256()
    for folder in ("patcher", "codemods"):
        for path in sorted((repo / folder).rglob("*.py")):
            digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes())
    return f"{commit}-dirty-{digest.hexdigest()[:12]}"


def checkout_import(repo: str) -> tuple[str, str]:
    """(module, PYTHONPATH entry) that run the eaglepatch of the checkout ``repo`` rather than the
    installed one: the package `eaglepatch` is patcher/ with codemods/ inside (setuptools' package-dir),
    so a folder of links gives that layout; a checkout from before the one-package layout runs as
    `patcher` from its root."""
    root = Path(repo).resolve()
    if "from patcher." in (root / "patcher" / "cli.py").read_text(encoding="utf-8"):
        return "patcher", str(root)
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    layout = Path(os.environ.get("TMPDIR", "/tmp")) / f"eaglepatch-checkout-{digest}"
    package = layout / "eaglepatch"
    package.mkdir(parents=True, exist_ok=True)
    links = {path.name: path for path in (root / "patcher").glob("*.py")} | {"codemods": root / "codemods"}
    # the stage folders too: else `eaglepatch.analyze` is the installed eaglepatch's, not the checkout's
    links |= {path.parent.name: path.parent for path in (root / "patcher").glob("*/__init__.py")}
    for stale in package.iterdir():
        if stale.name not in links:
            stale.unlink(missing_ok=True)  # a module the checkout no longer has
    for name, target in links.items():
        try:
            (package / name).symlink_to(target)
        except FileExistsError:
            pass  # made by an earlier run, or by another worker of this one
    return "eaglepatch", str(layout)


def run_check(repo: str, site: str, out: str) -> str:
    """``check --all --format json`` of the eaglepatch at ``repo`` on ``site``, into ``out``.  Not through
    eaglepatch's result cache: its key reads the modules of the package it runs from, which this layout
    of links hid (a report of older code came back); this script keeps its own, per commit."""
    module, path = checkout_import(repo)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    env["EAGLEPATCH_NO_CACHE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", module, "check", "--all", "--format", "json", site],
        cwd=repo, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=CHECK_TIMEOUT_SECONDS,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"check --all on {site} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    json.loads(proc.stdout)  # fail here, not later, on a broken report
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(proc.stdout)
    os.replace(tmp, out)
    return out


def contract(report: dict) -> int:
    return int(report.get("schema", 1))


def gaps(model: dict, report: dict) -> dict[str, dict]:
    """{member: entry} that eaglepatch reports missing for one model, in either contract."""
    out = {e["name"]: e for e in model.get("missing", [])}
    if contract(report) < 2:  # old contract: the gaps it could not fill were listed apart
        for entry in model.get("not_delegable", []) or []:
            out.setdefault(entry["name"], entry)
    return out


def written(model: dict, entry: dict | None, report: dict) -> bool:
    """Whether ``apply`` writes this gap: the entry has a fix (new) or is delegable (old)."""
    if entry is None:
        return False
    if contract(report) >= 2:
        return entry.get("fix") is not None
    return model.get("status") == "delegable" and any(e["name"] == entry["name"] for e in model.get("missing", []))


def roles(report: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for item in report.get("protocol", []):
        found = {u.get("role") for u in item.get("uses", []) if u.get("role")}
        found |= set(item.get("roles", []) or ([item["role"]] if item.get("role") else []))
        out.setdefault(item["name"], set()).update(found)
    return out


# =========================================================================== learned bodies against upstream's

PLUMBING = re.compile(
    r"(?P<cls>\w+)(?:\.(?P<method>\w+))? \((?P<file>[\w/.]+\.py):(?P<line>\d+)\)"
    r"(?P<what> does not collect aux hidden states| does not unpack aux hidden states| has no layers_to_capture)"
)
# what each blocker says is missing, as the attribute the fixed method (or class) reads once it has it
PLUMBING_READS = {
    " does not collect aux hidden states": "layers_to_capture",
    " does not unpack aux hidden states": "capture_aux_hidden_states",
    " has no layers_to_capture": "layers_to_capture",
}


def run_explain(repo: str, site: str, member: str, selector: str, out: str) -> str:
    """``explain MEMBER SITE --model SELECTOR --format json`` of the eaglepatch at ``repo``, into ``out``."""
    module, path = checkout_import(repo)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", module, "explain", member, site, "--model", selector, "--format", "json"],
        cwd=repo, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=CHECK_TIMEOUT_SECONDS,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"explain {member} --model {selector} on {site} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    json.loads(proc.stdout)
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(proc.stdout)
    os.replace(tmp, out)
    return out


def explain_item(version: str, member: str, file: str, cls: str, repo: Path = REPO, cache: Path = CACHE) -> dict | None:
    """What ``explain`` on ``version`` says about ``cls`` of ``file`` and ``member`` (run once, cached)."""
    module = file.removeprefix("models/").removesuffix(".py").replace("/", ".")
    out = report_path(repo, version, cache).parent / "explain" / version / f"{module}.{cls}.{member}.json"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        run_explain(str(repo), str(sglang_releases.site_packages(version)), member, f"{module}:{cls}", str(out))
    data = json.loads(out.read_text())
    return next((m for m in data.get("models", []) if (m["file"], m["class"]) == (file, cls)), None)


def class_at(site, rel: str, line: int) -> str | None:
    """The name of the top-level class of ``rel`` whose body holds ``line``."""
    try:
        tree = ast.parse((Path(site).joinpath(*SRT) / rel).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return node.name
    return None


def learned_in(row: dict, report: dict) -> tuple[str, str] | None:
    """(file, class) where ``apply`` on R writes the body for this gap: the class itself for
    ``synthesize``, else the base an ``inherit`` fix points to, followed through ``report``
    (``check --all`` on R) while that base's own gap is ``inherit`` too."""
    kind, source, member = row.get("fix_kind"), row.get("fix_from"), row["member"]
    where = (row["old_file"], row["cls"])
    for _ in range(10):
        if kind == "synthesize":
            return where
        if kind != "inherit" or not source:
            return None
        base_file, _, base = source.partition(":")
        where = (base_file, base)
        model = next((m for m in report.get("models", []) if (m["file"], m["class"]) == where), None)
        entry = gaps(model, report).get(member) if model else None
        if entry is None:  # the base is no class `check --all` lists: what explain says of it decides
            return where
        fix = entry.get("fix") or {}
        kind, source = fix.get("kind"), fix.get("from")
    return None


def plumbing_check(blocker: str | None, old_site, new_site) -> dict | None:
    """For a ``needs_code`` blocker naming missing plumbing (``X.forward (file:line) does not
    unpack aux hidden states ...``): the method (or class) it names, and whether upstream's R+1
    changed it so that it reads what it lacked. None when the blocker names no plumbing."""
    found = PLUMBING.search((blocker or "").split("; compare ")[0])
    if not found:
        return None
    cls, method, file, what = found["cls"], found["method"], found["file"], found["what"]
    needed = PLUMBING_READS[what]
    named = f"{cls}.{method}" if method else cls
    out = {"names": f"{file}:{named}", "lacks": what.strip(), "changed_in_new": None, "reads_it_in_new": None}
    if method:
        # the blocker names the class fixed and where its method is defined (maybe a base's)
        owner = class_at(old_site, file, int(found["line"])) or cls
        out["names"] = f"{file}:{owner}.{method}"
        before, after = method_source(old_site, file, owner, method), method_source(new_site, file, owner, method)
        if before is not None and after is not None:
            out["changed_in_new"] = ast.dump(ast.parse(before)) != ast.dump(ast.parse(after))
            out["reads_it_in_new"] = needed in after and needed not in before
    else:
        old_tree, new_tree = SourceTree(Path(old_site)), SourceTree(Path(new_site))
        had, has = old_tree.find_class(file, cls), new_tree.find_class(file, cls)
        if had is not None and has is not None:
            gained = needed in new_tree.members(has) and needed not in old_tree.members(had)
            out["changed_in_new"] = out["reads_it_in_new"] = gained
    return out


def hook_behaviour(row: dict, old: str, new: str, old_report: dict, repo: Path = REPO) -> dict:
    """For a fix of the bare-backbone shape: did ``apply`` on R write it with a learned body
    (``synthesize``, or ``inherit`` from a base that gets one), and does that body behave like
    upstream's in R+1 on the stub model? Else, for ``needs_code``, what plumbing the blocker names.
    And for every one, the plumbing upstream and ``apply`` wrote with it (``plumbing_behaviour``)."""
    old_site, new_site = sglang_releases.site_packages(old), sglang_releases.site_packages(new)
    out = {"synthesized": False, "synthesized_in": None, "learned_from": None,
           "behaves_as_upstream": None, "differences": [], "not_compared": "", "plumbing": None}
    member = row["member"]
    where = learned_in(row, old_report)
    item = explain_item(old, member, *where, repo=repo) if where else None
    if item is not None and (item.get("fix") or {}).get("kind") == "synthesize" and item.get("would_write"):
        out.update(synthesized=True, synthesized_in=f"{where[0]}:{where[1]}", learned_from=item["fix"]["from"])
        upstream_file, upstream_cls = (row["file"], row["cls"]) if row["shape"] == "body" else row["to"].split(":")
        upstream = method_source(new_site, upstream_file, upstream_cls, member)
        if upstream is None:
            out["not_compared"] = f"no def {member} in {upstream_file}:{upstream_cls} of {new}"
        else:
            ours = textwrap.dedent(item["would_write"])
            compared = compare_bodies(ours, upstream, member, item.get("backbone") or row["backbone"])
            out.update(compared)
    elif where is not None:
        out["not_compared"] = f"explain on {old} gave no learned body for {where[0]}:{where[1]}"
    if not out["synthesized"] and row.get("status_in_old") == "needs_code":
        out["plumbing"] = plumbing_check(row.get("blocker"), old_site, new_site)
    out.update(plumbing_behaviour(row, old_report, _tree(str(old_site), old), _tree(str(new_site), new), out["plumbing"]))
    return out


# =========================================================================== plumbing: upstream's and apply's
#
# A capture hook does nothing unless the forward that runs carries what it sets: the backbone
# collects the chosen layers' states (``aux_hidden_states``, read from ``layers_to_capture``) and
# the class unpacks them and hands them to its logits processor. Upstream wrote that plumbing by
# hand, with the hook; ``apply`` writes it in pieces (``fix.plumbing``). Both are read here with
# CPython's ``ast`` on the sources, never by running them.

# The identifiers a forward uses once it carries aux hidden states: a forward of R without any of
# them carried none, whatever else it did.
AUX_NAMES = frozenset({"aux_hidden_states", "layers_to_capture"})
AUX = "aux_hidden_states"
FLAG = "capture_aux_hidden_states"
SELECTOR = "layers_to_capture"
LOGITS = "logits_processor"
INIT_PIECES = {"flag-default", "selector-default"}  # set when the class is built: any __init__ it runs


@dataclass(frozen=True)
class ForwardRead:
    """One forward of a hook-body fix (the class's, or its backbone's) in R and in R+1: where Python
    finds it (``file:Class.forward``, maybe a base's) and whether it uses an identifier of AUX_NAMES
    (None: no such forward)."""

    of: str  # "class" | "backbone"
    old: str | None
    new: str | None
    carries_in_old: bool | None
    carries_in_new: bool | None

    @property
    def added(self) -> bool:
        return self.carries_in_new is True and self.carries_in_old is not True


@dataclass(frozen=True)
class PieceMatch:
    """One piece ``apply`` on R writes, and whether R+1's code of the same method (``at``) holds
    something of that piece's kind (None: no such method in R+1)."""

    piece: str
    at: str | None
    alike: bool | None


def carries_aux(source: str | None) -> bool | None:
    """Whether a method's source uses an identifier of AUX_NAMES -- as a name, an attribute or a
    keyword -- in code (comments and strings do not count); None when there is no source."""
    if source is None:
        return None
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Name) and node.id in AUX_NAMES
                or isinstance(node, ast.Attribute) and node.attr in AUX_NAMES
                or isinstance(node, ast.keyword) and node.arg in AUX_NAMES):
            return True
    return False


def resolved_method(tree: SourceTree, found, method: str) -> tuple[str, str | None] | None:
    """("file:Class.method", its source) for the ``def method`` Python finds on the class ``found``
    (its own or a base's); None when the class has none."""
    if found is None:
        return None
    member = tree.members(found).get(method)
    if member is None or member.kind not in ("def", "property"):
        return None
    return (f"{member.owner_file}:{member.owner_class}.{method}",
            method_source(tree.site, member.owner_file, member.owner_class, method))


def backbone_class(tree: SourceTree, found, attribute: str | None):
    """The in-tree class ``self.<attribute> = Foo(...)`` builds in the ``__init__`` of ``found``."""
    if found is None or not attribute:
        return None
    held = tree.members(found).get(attribute)
    if held is None or held.kind != "attribute":
        return None
    return _constructed_class(tree, found, held)


def located(tree: SourceTree, rel: str, cls: str):
    """The class ``cls`` of ``rel`` in ``tree``, or the one class of that name under models/ when
    the file moved; None when absent or ambiguous."""
    return _locate_old(tree, rel, cls, {})[1]


def upstream_plumbing(old: SourceTree, new: SourceTree, row: dict, blocker: dict | None = None) -> dict:
    """Whether R+1 changed the class's forward or its backbone's to carry aux hidden states: for
    each, where it is and whether it uses them in R and in R+1. ``added`` when one of them does in
    R+1 and did not in R, or when the method a ``needs_code`` blocker named now reads what it lacked
    (``blocker``: ``plumbing_check``'s answer; it may name a forward neither lookup reaches). None:
    the class is missing from a release's tree."""
    had, has = located(old, row["old_file"], row["cls"]), located(new, row["file"], row["cls"])
    reads = []
    for of, before, after in (("class", had, has),
                              ("backbone", backbone_class(old, had, row.get("backbone")),
                               backbone_class(new, has, row.get("backbone")))):
        then, now = resolved_method(old, before, "forward"), resolved_method(new, after, "forward")
        reads.append(ForwardRead(of, then and then[0], now and now[0],
                                 carries_aux(then[1]) if then else None, carries_aux(now[1]) if now else None))
    added = any(r.added for r in reads) if had is not None and has is not None else None
    if blocker and blocker.get("reads_it_in_new"):
        added = True
    return {"forwards": [asdict(r) for r in reads], "added": added,
            "named_by_blocker": blocker["names"] if blocker and blocker.get("reads_it_in_new") else None}


def written_plumbing(row: dict, report: dict) -> dict | None:
    """The plumbing ``apply`` on R writes with this fix: the pieces of the gap's own ``fix.plumbing``,
    else of the class the learned body is written in (``learned_in``: an ``inherit`` fix writes the
    hook, and its plumbing, into the base). ``{"in": "file:Class", "pieces": [...]}``, None when none."""
    places = [(row["old_file"], row["cls"])]
    where = learned_in(row, report)
    if where is not None and where not in places:
        places.append(where)
    for file, cls in places:
        model = next((m for m in report.get("models", []) if (m["file"], m["class"]) == (file, cls)), None)
        entry = gaps(model, report).get(row["member"]) if model else None
        pieces = ((entry or {}).get("fix") or {}).get("plumbing") or []
        if pieces:
            return {"in": f"{file}:{cls}", "pieces": pieces}
    return None


def _is_self(node, name: str, me: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name) and node.value.id == me


def _is_name(node, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_empty(node) -> bool:
    """``[]``, ``()``, ``set()``, ``list()``: a selection of nothing."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return not node.elts
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"list", "tuple", "set"}
            and not node.args and not node.keywords)


def _assignments(func: ast.AST):
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            yield node.target, node.value


def _captures(func: ast.AST) -> bool:
    for loop in ast.walk(func):
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            for node in ast.walk(loop):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in {"append", "extend"} and _is_name(node.func.value, AUX)):
                    return True
    return False


def _hands_on(func: ast.AST, me: str) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and _is_self(node.func, LOGITS, me):
            if any(_is_name(a, AUX) for a in node.args) or any(
                    k.arg == AUX or _is_name(k.value, AUX) for k in node.keywords):
                return True
    return False


# what R+1's method must hold for the piece of that kind to be "as upstream": each one honest and
# textual, on the method's syntax tree (``me``: its first parameter)
PIECE_CHECKS = {
    "flag-default": lambda f, me: any(_is_self(t, FLAG, me) and isinstance(v, ast.Constant) and v.value is False
                                      for t, v in _assignments(f)),
    "selector-default": lambda f, me: any(_is_self(t, SELECTOR, me) and _is_empty(v) for t, v in _assignments(f)),
    "index": lambda f, me: any(isinstance(n, ast.For) and isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name)
                               and n.iter.func.id in ("enumerate", "range") for n in ast.walk(f)),
    "aux-init": lambda f, me: any(_is_name(t, AUX) and _is_empty(v) for t, v in _assignments(f)),
    "capture": lambda f, me: _captures(f),
    "tail": lambda f, me: any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)
                              and any(_is_name(e, AUX) for e in n.value.elts) for n in ast.walk(f)),
    "unpack": lambda f, me: any(isinstance(t, (ast.Tuple, ast.List)) and any(_is_name(e, AUX) for e in t.elts)
                                for t, _ in _assignments(f)),
    "logits-aux": lambda f, me: _hands_on(f, me),
}


def piece_alike(kind: str, source: str | None) -> bool | None:
    """Whether ``source`` (a ``def``) holds a piece of ``kind``; None without a source or a check."""
    check = PIECE_CHECKS.get(kind)
    if source is None or check is None:
        return None
    func = next((n for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if func is None:
        return None
    me = func.args.args[0].arg if func.args.args else "self"
    return bool(check(func, me))


def _init_chain(tree: SourceTree, found, _seen: frozenset = frozenset()):
    """("file:Class.__init__", source) of each in-tree class ``found`` is built through: its own
    ``__init__`` and its bases' (left to right, depth first), as ``super().__init__`` runs them."""
    _, module, node = found
    key = (module, node.name, node.lineno)
    if key in _seen:
        return
    rel = tree.rel(module)
    source = method_source(tree.site, rel, node.name, "__init__")
    if source is not None:
        yield f"{rel}:{node.name}.__init__", source
    for base in node.bases:
        resolved = tree.resolve_expr(module, base)
        if resolved and resolved[0] == "class":
            yield from _init_chain(tree, resolved, _seen | {key})


def pieces_as_upstream(new: SourceTree, pieces: list[dict], moved: dict[str, str]) -> list[PieceMatch]:
    """For each piece ``apply`` on R writes (its ``file``, ``class``, ``method`` in R), whether R+1's
    code of that method holds one of its kind: the method Python finds on the class in R+1, and for
    the ``__init__`` defaults any ``__init__`` the class is built through. ``moved``: {file in R: file
    in R+1} of the fixed class, the others looked up by name when their file is gone."""
    out = []
    for piece in pieces:
        found = located(new, moved.get(piece["file"], piece["file"]), piece["class"])
        if found is None:
            out.append(PieceMatch(piece["piece"], None, None))
        elif piece["piece"] in INIT_PIECES and piece["method"] == "__init__":
            chain = list(_init_chain(new, found))
            hit = next((at for at, source in chain if piece_alike(piece["piece"], source)), None)
            out.append(PieceMatch(piece["piece"], hit or (chain[0][0] if chain else None),
                                  True if hit else (False if chain else None)))
        else:
            method = resolved_method(new, found, piece["method"])
            out.append(PieceMatch(piece["piece"], method and method[0], piece_alike(piece["piece"], method and method[1])))
    return out


def plumbing_behaviour(row: dict, old_report: dict, old: SourceTree, new: SourceTree, blocker: dict | None = None) -> dict:
    """For a hook-body fix: whether upstream's R+1 made the forwards carry aux hidden states
    (``upstream_plumbing``), what plumbing ``apply`` on R writes with it (``written_plumbing``) and,
    piece by piece, whether R+1 holds one of the same kind (``as_upstream``, ``alike``: all do)."""
    out = {"upstream_plumbing": upstream_plumbing(old, new, row, blocker),
           "written_plumbing": written_plumbing(row, old_report)}
    if out["written_plumbing"]:
        matches = pieces_as_upstream(new, out["written_plumbing"]["pieces"], {row["old_file"]: row["file"]})
        out["written_plumbing"]["as_upstream"] = [asdict(m) for m in matches]
        out["written_plumbing"]["alike"] = bool(matches) and all(m.alike is True for m in matches)
    return out


# =========================================================================== plumbing: run on stubs
#
# ``pieces_as_upstream`` reads the pieces; this runs them.  For each fix ``apply`` on R writes
# plumbing for, ``apply`` runs on a copy of R (that class's file, EAGLE-3 only), and the patched class
# and upstream's R+1 class are run on the same stubs (tests/real_forward.py: the release's own forward
# and hook, the backbone a stand-in capturing the layers ``layers_to_capture`` names).  R+1 is checked
# first: where its forward hands no aux states on, the first later release whose does is the oracle.

BACKBONE_PIECES = {"selector-default", "index", "aux-init", "capture", "tail"}  # written into the backbone: run the real one
RUN_IDS_NOTE = "hook([0, 2, 4]) then forward, on the stubs of tests/real_forward.py"


def _module_name(rel: str) -> str:
    return ".".join(SRT) + "." + rel.removesuffix(".py").replace("/", ".")


def _hands_aux_on(run: dict | None) -> bool:
    calls = (run or {}).get("logits") or []
    return bool(calls) and bool(calls[0].get("aux_hidden_states"))


def plumbing_runs(row: dict, old: str, later: list[str], repo: Path, workdir: Path) -> dict:
    """``apply`` on a copy of R, then R's patched class against upstream's (R+1, or the first later
    release that captures) on the same stubs: the same returns and logits-processor arguments with
    the hook called; with it not called, the patched forward as R's own."""
    import shutil

    from real_forward import run_fresh as real_forward  # tests/ is on the path (sglang_releases above)

    hook, cls = row["member"], row["cls"]
    old_file, new_file = row["old_file"], row["file"]
    site = workdir / "site"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(sglang_releases.site_packages(old) / PACKAGE, site / PACKAGE)
    module, path = checkout_import(str(repo))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p), "NO_COLOR": "1"}
    stem = Path(old_file).stem
    applied = subprocess.run(
        [sys.executable, "-m", module, "apply", str(site), "--model", stem, "--algorithm", "EAGLE3"],
        cwd=repo, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=CHECK_TIMEOUT_SECONDS,
    )
    out: dict = {"applied": applied.returncode, "compared_with": None, "runs_as_upstream": None, "differences": []}
    if applied.returncode not in (0, 1):
        out["not_compared"] = f"apply exited {applied.returncode}: {applied.stderr.strip()[-300:]}"
        return out
    pieces = (row.get("hook") or {}).get("written_plumbing", {}).get("pieces") or []
    if any(p.get("piece") == "hook" for p in pieces):  # a backbone hook copied from its sibling: one answering its hooks
        backbone = "stand-in-hooked"
    else:
        backbone = "real" if any(p.get("piece") in BACKBONE_PIECES for p in pieces) else "stand-in"
    spec = [{"module": _module_name(old_file), "class": cls, "hooks": [hook], "backbone": backbone}]
    ours = real_forward(site, spec, workdir, "ours")[f"{_module_name(old_file)}:{cls}"]
    released = real_forward(sglang_releases.site_packages(old), spec, workdir, "released")[f"{_module_name(old_file)}:{cls}"]
    shutil.rmtree(site, ignore_errors=True)
    upstream, oracle = None, None
    for version in later:
        new_spec = [{"module": _module_name(new_file), "class": cls, "hooks": [hook], "backbone": backbone}]
        found = real_forward(sglang_releases.site_packages(version), new_spec, workdir, f"upstream-{version}")
        candidate = found.get(f"{_module_name(new_file)}:{cls}", {})
        if _hands_aux_on((candidate.get("on") or {}).get(hook)):
            upstream, oracle = candidate, version
            break
    if upstream is None:
        out["not_compared"] = f"no release from {later[0]} on hands aux states on from {cls}.{hook} ({RUN_IDS_NOTE})"
        return out
    out["compared_with"] = oracle
    mine, theirs = (ours.get("on") or {}).get(hook) or {}, upstream["on"][hook]
    if ours.get("off") != released.get("off"):
        out["differences"].append({"what": "forward with no hook called", "eaglepatch": ours.get("off"), "upstream": released.get("off")})
    for what in ("returned", "logits"):
        if mine.get(what) != theirs.get(what):
            out["differences"].append({"what": what, "eaglepatch": mine.get(what, mine.get("error")), "upstream": theirs.get(what)})
    if mine.get("backbone") != theirs.get("backbone"):  # informative: state the stand-in backbone does not read
        out["backbone"] = {"eaglepatch": mine.get("backbone"), "upstream": theirs.get("backbone")}
    out["runs_as_upstream"] = not out["differences"]
    return out


# =========================================================================== the run


_TREES: dict[str, SourceTree] = {}  # per worker process: the last trees it parsed


def _tree(site: str, label: str) -> SourceTree:
    if site not in _TREES:
        while len(_TREES) >= 2:
            _TREES.pop(next(iter(_TREES)))
        _TREES[site] = SourceTree(Path(site), label)
    return _TREES[site]


def _truth_job(old: str, new: str, old_site: str, new_site: str, names: list[str]) -> PairTruth:
    # Pairs come in contiguous chunks, so R here is usually the previous job's R+1:
    # each worker parses a release once, not twice.
    return upstream_fixes(_tree(old_site, old), _tree(new_site, new), names, old, new)


def report_path(repo: Path, version: str, cache: Path = CACHE) -> Path:
    """Where ``check --all`` of this eaglepatch (commit, or commit + dirty hash) on ``version`` is cached."""
    return cache / eaglepatch_key(repo) / f"{version}.json"


def check_report(version: str, repo: Path = REPO, cache: Path = CACHE) -> dict:
    """``check --all --format json`` of ``repo``'s eaglepatch on ``version``, run once and cached."""
    out = report_path(repo, version, cache)
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        run_check(str(repo), str(sglang_releases.site_packages(version)), str(out))
    return json.loads(out.read_text())


def side(member: str, protocol_roles: dict[str, set[str]]) -> str:
    """``target`` when some use of ``member`` has role target or unknown, else ``draft``."""
    return "target" if protocol_roles.get(member, set()) & TARGET_ROLES else "draft"


def merged_roles(*reports: dict) -> dict[str, set[str]]:
    """{protocol member: the roles of its uses} over several reports (R+1 and R)."""
    out: dict[str, set[str]] = {}
    for report in reports:
        for name, found in roles(report).items():
            out.setdefault(name, set()).update(found)
    return out


def verdict(report: dict, file: str, cls: str, member: str) -> dict:
    """What ``report`` (``check --all`` on R) said about ``cls`` in ``file`` and ``member``."""
    model = next((m for m in report.get("models", []) if (m["file"], m["class"]) == (file, cls)), None)
    entry = gaps(model, report).get(member) if model else None
    return {
        "listed": model is not None,
        "status_in_old": model.get("status") if model else None,
        "reported": entry is not None,
        "required": entry.get("required") if entry else None,
        "written": model is not None and written(model, entry, report),
        "fix_to": ((entry or {}).get("fix") or {}).get("to"),
        "fix_kind": ((entry or {}).get("fix") or {}).get("kind"),
        "fix_from": ((entry or {}).get("fix") or {}).get("from"),
        "blocker": (entry or {}).get("blocker"),
    }


def measure(versions: list[str], repo: Path, jobs: int, use_cache: bool = True) -> dict:
    sites = {v: sglang_releases.site_packages(v) for v in versions}
    key = eaglepatch_key(repo)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for v in versions:
            out = report_path(repo, v)
            out.parent.mkdir(parents=True, exist_ok=True)
            if not (use_cache and out.is_file()):
                futures.append(pool.submit(run_check, str(repo), str(sites[v]), str(out)))
        for future in futures:
            future.result()
        reports = {v: json.loads(report_path(repo, v).read_text()) for v in versions}
        checked = time.perf_counter()
        pairs = list(zip(versions, versions[1:]))
        protocol = {(o, n): merged_roles(reports[n], reports[o]) for o, n in pairs}
        chunk = -(-len(pairs) // max(1, jobs))
        truths = list(pool.map(
            _truth_job, *zip(*[(o, n, str(sites[o]), str(sites[n]), sorted(protocol[(o, n)])) for o, n in pairs]),
            chunksize=chunk,
        ))
    extracted = time.perf_counter()

    result_pairs = []
    for truth in truths:
        old_report, new_report = reports[truth.old], reports[truth.new]
        old_names = {p["name"] for p in old_report.get("protocol", [])}
        required_new = {p["name"]: bool(p.get("required")) for p in new_report.get("protocol", [])}
        rows = []
        needed_by = merged_algorithms(new_report, old_report)
        for fix in truth.fixes:
            fix.side = side(fix.member, protocol[(truth.old, truth.new)])
            row = asdict(fix)
            row["algorithms"] = needed_by.get(fix.member, [DEFAULT_ALGORITHM])
            row.update(in_old_protocol=fix.member in old_names, required_in_new=required_new.get(fix.member))
            row.update(verdict(old_report, fix.old_file, fix.cls, fix.member))
            # what apply writes is what upstream wrote: a delegation to the same attribute
            row["as_upstream"] = bool(row["written"] and fix.shape == "delegation" and fix.to == row["fix_to"])
            if fix.backbone:  # a hook body on a bare backbone: what eaglepatch would have learned
                row["hook"] = hook_behaviour(row, truth.old, truth.new, old_report, repo)
            rows.append(row)
        pair = asdict(truth)
        pair["fixes"] = rows
        pair["contract"] = contract(old_report)
        result_pairs.append(pair)

    # the written plumbing, run: apply on R, then both classes on the same stubs (cached per fix)
    for pair in result_pairs:
        later = versions[versions.index(pair["new"]):]
        for row in pair["fixes"]:
            written_plumbing = (row.get("hook") or {}).get("written_plumbing")
            if not written_plumbing:
                continue
            harness = hashlib.sha256((REPO / "tests" / "real_forward.py").read_bytes()).hexdigest()[:12]
            cached = CACHE / key / "runs" / f"{pair['old']}-{row['cls']}-{row['member']}-{harness}.json"
            if use_cache and cached.is_file():
                written_plumbing["runs"] = json.loads(cached.read_text())
                continue
            cached.parent.mkdir(parents=True, exist_ok=True)
            workdir = cached.with_suffix("")
            workdir.mkdir(exist_ok=True)
            written_plumbing["runs"] = plumbing_runs(row, pair["old"], later, repo, workdir)
            cached.write_text(json.dumps(written_plumbing["runs"]))

    latest = versions[-1]
    fixed_classes = {f["cls"] for p in result_pairs for f in p["fixes"]}
    report = reports[latest]
    required = sorted(
        (m["file"], m["class"], name, written(m, entry, report))
        for m in report.get("models", [])
        for name, entry in gaps(m, report).items()
        if entry.get("required")
    )
    never = [r for r in required if r[1] not in fixed_classes]
    return {
        "eaglepatch": key,
        "contract": {v: contract(r) for v, r in reports.items()},
        "releases": versions,
        "pairs": result_pairs,
        "table": table_rows(result_pairs),
        "kinds": kind_rows(result_pairs),
        "algorithms": algorithm_rows(result_pairs),
        "plumbing_gaps": {v: broken_plumbing(r) for v, r in reports.items()},
        "latest": {
            "release": latest,
            "required_gaps": len(required),
            "required_gaps_written": sum(r[3] for r in required),
            "required_gaps_by_member": {
                name: sum(1 for r in required if r[2] == name) for name in sorted({r[2] for r in required})
            },
            "required_gaps_in_classes_never_fixed": len(never),
            "written_gaps_in_classes_never_fixed": sum(r[3] for r in never),
            "classes_never_fixed": len({(f, c) for f, c, _, _ in never}),
            "required_gaps_in_classes_upstream_fixed": [f"{f}:{c}.{n}" for f, c, n, _ in required if c in fixed_classes],
        },
        "_timing": {"check_seconds": checked - started, "extract_seconds": extracted - checked},
    }


def table_rows(pairs: list[dict]) -> list[dict]:
    """One row per side, the total, and the total over members R's protocol already had
    (the others appeared in R+1's protocol: eaglepatch on R could not have reported them)."""
    rows = []
    all_fixes = [f for p in pairs for f in p["fixes"]]
    groups = [(side, [f for f in all_fixes if f["side"] == side]) for side in SIDES]
    groups.append(("total", all_fixes))
    groups.append(("total, already in R's protocol", [f for f in all_fixes if f["in_old_protocol"]]))
    for side, fixes in groups:
        rows.append({
            "side": side,
            "fixes": len(fixes),
            "listed": sum(f["listed"] for f in fixes),
            "reported": sum(f["reported"] for f in fixes),
            "written": sum(f["written"] for f in fixes),
            "delegations": sum(f["shape"] == "delegation" for f in fixes),
            "as_upstream": sum(f.get("as_upstream", False) for f in fixes),
            **hook_counts(fixes),
            **plumbing_counts(fixes),
        })
    return rows


def hook_counts(fixes: list[dict]) -> dict:
    """Over the fixes of the bare-backbone body shape: how many ``apply`` on R wrote with a
    learned body, how many of those behave as upstream's (True / False / not compared), and of
    the ``needs_code`` ones, how many name plumbing upstream then added in R+1."""
    hooks = [f["hook"] for f in fixes if f.get("hook")]
    plumbing = [h["plumbing"] for h in hooks if h.get("plumbing")]
    return {
        "hook_bodies": len(hooks),
        "hook_synthesized": sum(h["synthesized"] for h in hooks),
        "hook_behaves_as_upstream": sum(h["behaves_as_upstream"] is True for h in hooks),
        "hook_behaves_otherwise": sum(h["behaves_as_upstream"] is False for h in hooks),
        "hook_not_compared": sum(h["synthesized"] and h["behaves_as_upstream"] is None for h in hooks),
        "hook_plumbing_blocked": len(plumbing),
        "hook_plumbing_added_upstream": sum(bool(p["reads_it_in_new"]) for p in plumbing),
        "hook_plumbing_changed_upstream": sum(bool(p["changed_in_new"]) for p in plumbing),
    }


CAPTURE_HOOK = "set_eagle3_layers_to_capture"  # the hook plumbing is written for


def plumbing_counts(fixes: list[dict]) -> dict:
    """Over upstream's capture-hook fixes on a bare backbone: how many came with plumbing upstream
    wrote in R+1 (``upstream_plumbing.added``), how many of those ``apply`` on R writes with plumbing,
    and how many of those have every piece's kind in R+1's code; and how many ``apply`` writes with
    plumbing where upstream's forwards already carried (or still do not carry) aux states."""
    hooks = [f["hook"] for f in fixes if f.get("hook") and f["member"] == CAPTURE_HOOK]
    upstream = [h for h in hooks if (h.get("upstream_plumbing") or {}).get("added")]
    written = [h for h in upstream if h.get("written_plumbing")]
    return {
        "plumbing_hooks": len(hooks),
        "plumbing_upstream": len(upstream),
        "plumbing_written": len(written),
        "plumbing_alike": sum(h["written_plumbing"]["alike"] for h in written),
        "plumbing_runs_as_upstream": sum(bool((h["written_plumbing"].get("runs") or {}).get("runs_as_upstream")) for h in written),
        "plumbing_written_without_upstream": sum(
            bool(h.get("written_plumbing")) and not (h.get("upstream_plumbing") or {}).get("added") for h in hooks),
    }


DEFAULT_ALGORITHM = "EAGLE3"  # what a report from before `protocol[].algorithms` read: EAGLE-3's protocol alone


def merged_algorithms(*reports: dict) -> dict[str, list[str]]:
    """member -> the algorithms the reports' protocols say need it (R+1's first, then R's)."""
    out: dict[str, list[str]] = {}
    for report in reports:
        for item in report.get("protocol", []):
            names = out.setdefault(item["name"], [])
            names.extend(a for a in item.get("algorithms", [DEFAULT_ALGORITHM]) if a not in names)
    return out


def algorithm_rows(pairs: list[dict]) -> list[dict]:
    """One row per algorithm, over the fixes of members it needs (a member several need counts for
    each): upstream's fixes, from which pair on, how many `check` on R reported and `apply` on R wrote,
    delegations written as upstream's, and bare-backbone bodies learned and behaving alike."""
    fixes = [(p["new"], f) for p in pairs for f in p["fixes"]]
    names = list(dict.fromkeys(a for _, f in fixes for a in f.get("algorithms", [DEFAULT_ALGORITHM])))
    rows = []
    for name in names:
        mine = [(new, f) for new, f in fixes if name in f.get("algorithms", [DEFAULT_ALGORITHM])]
        ones = [f for _, f in mine]
        hooks = hook_counts(ones)
        rows.append({
            "algorithm": name,
            "first_fixed_in": mine[0][0],
            "fixes": len(ones),
            "reported": sum(f["reported"] for f in ones),
            "written": sum(f["written"] for f in ones),
            "delegations": sum(f["shape"] == "delegation" for f in ones),
            "delegations_as_upstream": sum(f.get("as_upstream", False) for f in ones),
            "hook_bodies": hooks["hook_bodies"],
            "hook_synthesized": hooks["hook_synthesized"],
            "hook_behaves_as_upstream": hooks["hook_behaves_as_upstream"],
        })
    return rows


def kind_rows(pairs: list[dict]) -> list[dict]:
    """One row per kind of fix ``apply`` writes -- a delegation, a learned hook body, the plumbing
    behind a capture hook -- over every pair: how many upstream wrote, how many of those ``apply``
    on R writes that way, and how many of those are as upstream's (the same attribute; behaving alike
    on the stub; for plumbing, running as upstream's on the stubs of tests/real_forward.py, every
    piece's kind in R+1's method beside it as `pieces_alike`)."""
    fixes = [f for p in pairs for f in p["fixes"]]
    delegations = [f for f in fixes if f["shape"] == "delegation"]
    hooks, plumbing = hook_counts(fixes), plumbing_counts(fixes)
    return [
        {"kind": "delegation", "upstream": len(delegations), "written": sum(f["written"] for f in delegations),
         "as_upstream": sum(f.get("as_upstream", False) for f in delegations)},
        {"kind": "learned body", "upstream": hooks["hook_bodies"], "written": hooks["hook_synthesized"],
         "as_upstream": hooks["hook_behaves_as_upstream"]},
        {"kind": "plumbing", "upstream": plumbing["plumbing_upstream"], "written": plumbing["plumbing_written"],
         "as_upstream": plumbing["plumbing_runs_as_upstream"], "pieces_alike": plumbing["plumbing_alike"]},
    ]


def broken_plumbing(report: dict) -> list[str]:
    """"file:Class" of each target class whose report has a ``"gap": "plumbing"`` entry: a capture
    hook its forward never uses -- a state a report without the plumbing gate called compliant."""
    return sorted({
        f"{m['file']}:{m['class']}" for m in report.get("models", [])
        if m.get("role", "target") == "target" and any(e.get("gap") == "plumbing" for e in m.get("missing", []))
    })


def markdown(result: dict) -> str:
    out = []

    def pct(n, d):
        return f"{n} ({100 * n / d:.0f}%)" if d else str(n)

    releases = result["releases"]
    out.append(f"## Release history {releases[0]} .. {releases[-1]} ({len(releases) - 1} pairs), "
               f"eaglepatch {result['eaglepatch'][:12]}")
    out.append("")
    out.append(
        "| side | upstream fixes | listed by `check --all` in R | reported missing in R | written by `apply` in R "
        "| upstream delegations written the same way | bare-backbone bodies: learned by `apply` in R, behaving as upstream's |"
    )
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in result["table"]:
        n = row["fixes"]
        label = f"**{row['side']}**" if row["side"].startswith("total") else row["side"]
        same = f"{row.get('as_upstream', 0)} of {row.get('delegations', 0)}"
        bodies = (f"{row.get('hook_synthesized', 0)} of {row.get('hook_bodies', 0)}, "
                  f"{row.get('hook_behaves_as_upstream', 0)} alike")
        out.append(
            f"| {label} | {n} | {pct(row['listed'], n)} | {pct(row['reported'], n)} | {pct(row['written'], n)} "
            f"| {same} | {bodies} |"
        )
    out.append("")
    shapes: dict[str, int] = {}
    for pair in result["pairs"]:
        for fix in pair["fixes"]:
            shapes[fix["shape"]] = shapes.get(fix["shape"], 0) + 1
    out.append("Shapes of the fixes (R+1): " + ", ".join(f"{k} {v}" for k, v in sorted(shapes.items())))
    latest = result["latest"]
    out.append(
        f"Latest release {latest['release']}: {latest['required_gaps']} required gaps reported "
        f"({latest['required_gaps_written']} that `apply` writes); "
        f"{latest['required_gaps_in_classes_never_fixed']} of them in {latest['classes_never_fixed']} classes "
        f"upstream never fixed a protocol member of (likely false alarms), of which `apply` would write "
        f"{latest['written_gaps_in_classes_never_fixed']}. By member: "
        + ", ".join(f"{k} {v}" for k, v in latest["required_gaps_by_member"].items())
    )
    out.append("")
    out.extend(kinds_markdown(result))
    out.extend(algorithms_markdown(result))
    out.append("| R | R+1 | EntryClass classes compared | fixes | moved | new classes |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for pair in result["pairs"]:
        out.append(f"| {pair['old']} | {pair['new']} | {pair['compared']} | {len(pair['fixes'])} | "
                   f"{len(pair['moved'])} | {len(pair['new_classes'])} |")
    out.append("")
    out.append("### Fixes")
    out.append("")
    for pair in result["pairs"]:
        if not pair["fixes"]:
            continue
        out.append(f"- **{pair['old']} -> {pair['new']}**")
        for fix in pair["fixes"]:
            shape = fix["shape"] + (f" to {fix['to']}" if fix["to"] else "")
            said = ("not listed" if not fix["listed"] else
                    f"{fix['status_in_old']}, " + ("written" if fix["written"] else
                                                  "reported" if fix["reported"] else "not reported"))
            moved = f" (was {fix['old_file']})" if fix["old_file"] != fix["file"] else ""
            if not fix["in_old_protocol"]:
                said += f"; not in {pair['old']}'s protocol"
            out.append(f"  - {fix['side']}: `{fix['file']}:{fix['cls']}.{fix['member']}` "
                       f"[{shape}]{moved} -- eaglepatch on {pair['old']}: {said}")
        for move in pair["moved"]:
            out.append(f"  - moved: {move['class']} {move['from']} -> {move['to']}")
    out.extend(hook_markdown(result))
    odd = [(p["new"], kind, item) for p in result["pairs"]
           for kind in ("dynamic_in_old", "became_dynamic", "ambiguous", "unresolved", "parse_errors")
           for item in p[kind]]
    if odd:
        out.append("")
        out.append("### Not compared")
        out.append("")
        for version, kind, item in odd:
            out.append(f"- {version} {kind}: {item}")
    return "\n".join(out)


def kinds_markdown(result: dict) -> list[str]:
    """The table by kind of fix, and per release the target classes with broken plumbing."""
    out = ["| fix kind | upstream fixes | written that way by `apply` in R | as upstream |",
           "| --- | ---: | ---: | ---: |"]
    for row in result.get("kinds", []):
        out.append(f"| {row['kind']} | {row['upstream']} | {row['written']} | {row['as_upstream']} |")
    out.append("")
    gaps_by_release = result.get("plumbing_gaps", {})
    if gaps_by_release:
        out.append("Target classes with a capture hook their forward never uses (`\"gap\": \"plumbing\"`), per release:")
        out.append("")
        for version in result["releases"]:
            names = gaps_by_release.get(version, [])
            shown = ", ".join(n.rpartition(":")[2] for n in names)
            out.append(f"- {version}: {len(names)}" + (f" ({shown})" if names else ""))
        out.append("")
    return out


def algorithms_markdown(result: dict) -> list[str]:
    """The table per algorithm (from reports that tag members with the algorithms needing them)."""
    rows = result.get("algorithms", [])
    if not rows:
        return []
    out = ["| algorithm | upstream fixes (from) | reported missing in R | written by `apply` in R "
           "| delegations written as upstream's | bare-backbone bodies: learned in R, alike |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        out.append(
            f"| {row['algorithm']} | {row['fixes']} ({row['first_fixed_in']}) | {row['reported']} | {row['written']} "
            f"| {row['delegations_as_upstream']} of {row['delegations']} "
            f"| {row['hook_synthesized']} of {row['hook_bodies']}, {row['hook_behaves_as_upstream']} alike |"
        )
    out.append("")
    return out


def hook_markdown(result: dict) -> list[str]:
    """The section on hook bodies upstream wrote on a bare backbone: one line per fix."""
    rows = [(p["old"], p["new"], f) for p in result["pairs"] for f in p["fixes"] if f.get("hook")]
    if not rows:
        return []
    total = hook_counts([f for _, _, f in rows]) | plumbing_counts([f for _, _, f in rows])
    out = ["", "### Hook bodies upstream wrote on a bare backbone", ""]
    out.append(
        f"{total['hook_bodies']} upstream fixes (own bodies and ones inherited from a base that got one) reach a bare "
        f"backbone. `apply` on R would have written {total['hook_synthesized']} with a learned body "
        f"(synthesize): {total['hook_behaves_as_upstream']} behave as upstream's R+1 body on the stub model, "
        f"{total['hook_behaves_otherwise']} differ, {total['hook_not_compared']} could not be compared. "
        f"Of the others, {total['hook_plumbing_blocked']} were `needs_code` with a blocker naming missing plumbing, "
        f"R+1 changed the method (or class) named in {total['hook_plumbing_changed_upstream']} of them, and in "
        f"{total['hook_plumbing_added_upstream']} it now reads what the blocker said it lacked."
    )
    out.append("")
    out.append(
        f"Of the {total['plumbing_hooks']} `{CAPTURE_HOOK}` fixes, {total['plumbing_upstream']} came with plumbing "
        f"upstream wrote in R+1 (a forward of the class or its backbone now carries aux hidden states); `apply` on R "
        f"writes {total['plumbing_written']} of those with plumbing, {total['plumbing_alike']} with every piece's kind "
        f"in upstream's R+1 method, and writes plumbing for {total['plumbing_written_without_upstream']} others."
    )
    out.append("")
    out.append("| R -> R+1 | class.member (shape) | eaglepatch on R | behaves as upstream's | plumbing: upstream R+1 / `apply` on R |")
    out.append("| --- | --- | --- | --- | --- |")
    for old, new, fix in rows:
        hook = fix["hook"]
        shape = fix["shape"] + (f" from {fix['to']}" if fix["shape"] == "inherited" else "")
        if hook["synthesized"]:
            said = f"synthesize (in {hook['synthesized_in']}, from {hook['learned_from']})"
            if hook["behaves_as_upstream"] is True:
                same = "yes"
            elif hook["behaves_as_upstream"] is False:
                same = "no: " + "; ".join(
                    f"after {d['call']}, {d['what']}: {d['eaglepatch']!r} vs {d['upstream']!r}" for d in hook["differences"][:3])
            else:
                same = f"not compared: {hook['not_compared']}"
        else:
            said = fix["status_in_old"] or "not listed"
            if fix["fix_kind"]:
                said += f", fix {fix['fix_kind']}"
            plumbing = hook.get("plumbing")
            if plumbing:
                added = ("added in R+1" if plumbing["reads_it_in_new"] else "changed in R+1, without reading it"
                         if plumbing["changed_in_new"] else "unchanged in R+1" if plumbing["changed_in_new"] is False
                         else "not found in R+1")
                said += f"; blocker: {plumbing['names']} {plumbing['lacks']} ({added})"
            elif fix["blocker"]:
                said += f"; blocker: {fix['blocker'][:120]}"
            same = "-"
        out.append(f"| {old} -> {new} | `{fix['cls']}.{fix['member']}` ({shape}) | {said} | {same} | {plumbing_cell(hook)} |")
    return out


def plumbing_cell(hook: dict) -> str:
    """``added`` / ``none`` for upstream, then the pieces ``apply`` writes, each ``=`` when R+1's method
    holds one of its kind, ``≠`` when not, ``?`` when R+1 has no such method."""
    upstream = hook.get("upstream_plumbing") or {}
    said = {True: "added", False: "none", None: "?"}[upstream.get("added")]
    written = hook.get("written_plumbing")
    if not written:
        return f"{said} / -"
    marks = {True: "=", False: "≠", None: "?"}
    pieces = ", ".join(f"{m['piece']} {marks[m['alike']]}" for m in written.get("as_upstream", []))
    return f"{said} / {pieces}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", default=None, help="oldest release (default: the pinned list's first)")
    parser.add_argument("--high", default=None, help="newest release (default: the pinned list's last)")
    parser.add_argument("--eaglepatch", type=Path, default=REPO, help="checkout whose `check --all` is measured")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-cache", action="store_true", help="rerun `check --all` even if cached")
    parser.add_argument("--json", type=Path, default=OUTPUT, help=f"where to write (default {OUTPUT.relative_to(REPO)})")
    args = parser.parse_args(argv)

    pinned = sglang_releases.read_releases()
    versions = sglang_releases.releases_between(args.low or pinned[0], args.high)
    if len(versions) < 2:
        parser.error(f"need two releases at least, got {versions}")
    started = time.perf_counter()
    result = measure(versions, args.eaglepatch.resolve(), args.jobs, use_cache=not args.no_cache)
    timing = result.pop("_timing")
    print(markdown(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(
        f"\nwrote {args.json}; {time.perf_counter() - started:.1f} s "
        f"(check --all {timing['check_seconds']:.1f} s, extraction {timing['extract_seconds']:.1f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
