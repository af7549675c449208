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

Prints a Markdown table (one row per side and a total) and a per-fix list, and writes
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
import subprocess
import sys
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
                    visit(node.body)
                    visit(node.orelse)
                    for handler in getattr(node, "handlers", ()):
                        visit(handler.body)
                    visit(getattr(node, "finalbody", ()))

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
        for name, kind, line in own_members(node):
            out.setdefault(name, Member(name, kind, rel, node.name, line))
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
                truth.fixes.append(Fix(cls, name, new_rel, old_rel, member.line, shape, to))
    truth.parse_errors = sorted(set(before.parse_errors[errors_before[0]:] + after.parse_errors[errors_before[1]:]))
    truth.fixes.sort(key=lambda f: (f.file, f.cls, f.member))
    return truth


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


def run_check(repo: str, site: str, out: str) -> str:
    """``check --all --format json`` of the eaglepatch at ``repo`` on ``site``, into ``out``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "patcher", "check", "--all", "--format", "json", site],
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
        for fix in truth.fixes:
            fix.side = side(fix.member, protocol[(truth.old, truth.new)])
            row = asdict(fix)
            row.update(in_old_protocol=fix.member in old_names, required_in_new=required_new.get(fix.member))
            row.update(verdict(old_report, fix.old_file, fix.cls, fix.member))
            # what apply writes is what upstream wrote: a delegation to the same attribute
            row["as_upstream"] = bool(row["written"] and fix.shape == "delegation" and fix.to == row["fix_to"])
            rows.append(row)
        pair = asdict(truth)
        pair["fixes"] = rows
        pair["contract"] = contract(old_report)
        result_pairs.append(pair)

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
        })
    return rows


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
        "| upstream delegations written the same way |"
    )
    out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in result["table"]:
        n = row["fixes"]
        label = f"**{row['side']}**" if row["side"].startswith("total") else row["side"]
        same = f"{row.get('as_upstream', 0)} of {row.get('delegations', 0)}"
        out.append(
            f"| {label} | {n} | {pct(row['listed'], n)} | {pct(row['reported'], n)} | {pct(row['written'], n)} | {same} |"
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
