"""What a module binds, where, and whether that code runs: LibCST scope analysis for the proof stage.

A name copied into a wrapper has to be bound when the wrapper's class body runs.  Python binds a
module-level name in many ways (imports, `def`, `class`, assignments, star imports), and not all
of that code runs: an import under `if TYPE_CHECKING:` never does, one under a module-level `if`
or `try` may not, one inside a function binds nothing at module level.  `ModuleScope` records
every binding of the module scope and of each top-level class body with the context it runs in,
from LibCST's ScopeProvider.  Function bodies are left out before the analysis (they cannot bind
a module-level name, except through `global`, which is read from the text); that keeps a
3,000-line model file to a fraction of a second.

`Exports` follows a qualified name through in-tree re-exports and star imports to where it is
defined, reading other modules with CPython's parser (cheap), so that two spellings of one object
(`sglang.srt.layers.quantization.QuantizationConfig` and `...quantization.base_config.QuantizationConfig`)
compare equal.
"""

from __future__ import annotations

import ast
import builtins
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from ..codemods.names import cst_dotted_name
from .imports import PACKAGE, module_path
from .source_cache import MemoKey, SourceCache
from .statements import walk
from .text import SourceFile

if typing.TYPE_CHECKING:  # (TYPE_CHECKING below is this module's own name for a context)
    from libcst.metadata import Scope

    from .locate import SourceTree

TOP = "top"  # runs whenever the module (or class body) runs
CONDITIONAL = "conditional"  # under a module-level if/try/for/while/with/match: may not run
TYPE_CHECKING = "type_checking"  # under `if TYPE_CHECKING:`: never runs

CONSTANTS = frozenset({"None", "True", "False", "__debug__"})
BUILTINS = frozenset(dir(builtins)) - CONSTANTS
_GLOBAL = re.compile(r"^[ \t]+global[ \t]+([\w \t,]+)", re.MULTILINE)


@dataclass(frozen=True)
class Binding:
    """One place a module (or a class body) binds a name."""

    name: str
    qualified: str  # what it is bound to: "typing.Optional", "<module>.<name>" for the module's own
    context: str  # TOP | CONDITIONAL | TYPE_CHECKING
    statement: int  # index, in the module body (or class body), of the statement that binds it
    value: cst.BaseExpression | None = None  # `name = value` (one target): the value
    spec: tuple[str, str | None] | None = None  # (module, object or None) an import of the same object
    own: bool = False  # defined here (def, class, assignment), not imported


def dotted_module(rel: str) -> str:
    """`models/inner.py` -> `sglang.srt.models.inner` (a package's `__init__.py` is the package)."""
    return f"{PACKAGE}." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def absolute_module(node: cst.ImportFrom, package: str) -> str:
    """The module a `from ... import` names, relative imports resolved against `package`."""
    module = cst_dotted_name(node.module) if node.module is not None else ""
    level = len(node.relative)
    if not level:
        return module
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(base + ([module] if module else []))


def is_type_checking(test: cst.BaseExpression) -> bool:
    return (isinstance(test, cst.Name) and test.value == "TYPE_CHECKING") or (
        isinstance(test, cst.Attribute) and test.attr.value == "TYPE_CHECKING"
    )


def _branch_contexts(test: cst.BaseExpression, outer: str) -> tuple[str, str]:
    """Contexts of an `if`'s body and else branch."""
    if outer == TYPE_CHECKING:
        return TYPE_CHECKING, TYPE_CHECKING
    if is_type_checking(test):
        return TYPE_CHECKING, CONDITIONAL
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and is_type_checking(test.expression):
        return CONDITIONAL, TYPE_CHECKING
    return CONDITIONAL, CONDITIONAL


_ELLIPSIS = cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Expr(cst.Ellipsis())])])


def reduced(module: cst.Module, classes: frozenset[str] | None, keep: frozenset[tuple[str, str]] = frozenset()) -> cst.Module:
    """The module with what cannot bind a name the proof asks about left out: function bodies (but the
    methods in `keep`, (class, name) pairs) and the bodies of top-level classes not in `classes` (all
    kept when None).  Scope analysis of what is left costs a fraction of the whole file's."""
    return module.with_changes(body=[_reduce(statement, classes, keep, None) for statement in module.body])


def _reduce(statement: cst.CSTNode, classes: frozenset[str] | None, keep: frozenset[tuple[str, str]], owner: str | None) -> cst.CSTNode:
    if isinstance(statement, cst.FunctionDef):
        return statement if (owner, statement.name.value) in keep else statement.with_changes(body=_ELLIPSIS)
    if isinstance(statement, cst.ClassDef):
        name = statement.name.value
        if owner is not None or (classes is not None and name not in classes) or not isinstance(statement.body, cst.IndentedBlock):
            return statement.with_changes(body=_ELLIPSIS)
        return statement.with_changes(body=_reduce_block(statement.body, classes, keep, name))
    changes: dict[str, cst.CSTNode | list[cst.CSTNode]] = {}
    for field in ("body", "orelse", "finalbody"):
        part = getattr(statement, field, None)
        if isinstance(part, cst.IndentedBlock):
            changes[field] = _reduce_block(part, classes, keep, owner)
        elif isinstance(part, (cst.Else, cst.Finally)) and isinstance(part.body, cst.IndentedBlock):
            changes[field] = part.with_changes(body=_reduce_block(part.body, classes, keep, owner))
        elif isinstance(part, cst.If):
            changes[field] = _reduce(part, classes, keep, owner)
    handlers = getattr(statement, "handlers", None)
    if handlers:
        changes["handlers"] = [
            h.with_changes(body=_reduce_block(h.body, classes, keep, owner)) if isinstance(h.body, cst.IndentedBlock) else h
            for h in handlers
        ]
    return statement.with_changes(**changes) if changes and not isinstance(statement, cst.SimpleStatementLine) else statement


def _reduce_block(block: cst.IndentedBlock, classes: frozenset[str] | None, keep: frozenset[tuple[str, str]], owner: str | None) -> cst.IndentedBlock:
    return block.with_changes(body=[_reduce(statement, classes, keep, owner) for statement in block.body])


class _Placement(cst.CSTVisitor):
    """For every node: the top-level class whose body holds it (or None), the index of the statement of
    that body (or of the module body) it belongs to, and the context that statement runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[int, tuple[str | None, int, str]] = {}
        self.values: dict[int, cst.BaseExpression] = {}  # id(target Name) -> assigned value
        self.classes: dict[str, tuple[cst.ClassDef, int]] = {}  # top-level class -> (node, module statement)
        self._at: tuple[str | None, int, str] = (None, 0, TOP)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.where[id(node)] = self._at
        return super().on_visit(node)

    def _enter(self, statements: Sequence[cst.CSTNode], owner: str | None, index: int | None, context: str) -> None:
        saved = self._at
        for position, statement in enumerate(statements):
            self._at = (owner, position if index is None else index, context)
            statement.visit(self)
        self._at = saved

    def visit_Module(self, node: cst.Module) -> bool:
        self._enter(node.body, None, None, TOP)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        owner, index, _ = self._at
        if owner is not None:
            return True  # a nested class: its own scope, which nothing here asks about
        self.classes.setdefault(node.name.value, (node, index))
        for part in (*node.decorators, *node.bases, *node.keywords):
            part.visit(self)
        self._enter(node.body.body, node.name.value, None, TOP)
        return False

    def visit_If(self, node: cst.If) -> bool:
        owner, index, context = self._at
        node.test.visit(self)
        inside, other = _branch_contexts(node.test, context)
        self._enter(node.body.body, owner, index, inside)
        if isinstance(node.orelse, cst.If):
            self._enter([node.orelse], owner, index, other)
        elif node.orelse is not None:
            self._enter(node.orelse.body.body, owner, index, other)
        return False

    def _conditional(self, node: cst.CSTNode) -> bool:
        owner, index, context = self._at
        self._at = (owner, index, TYPE_CHECKING if context == TYPE_CHECKING else CONDITIONAL)
        return True

    visit_Try = visit_For = visit_While = visit_With = visit_Match = _conditional
    visit_TryStar = _conditional

    def _restore(self, original_node: cst.CSTNode) -> None:  # named as libcst's leave_* name it
        owner, index, _ = self._at
        self._at = (owner, index, self.where[id(original_node)][2])

    leave_Try = leave_For = leave_While = leave_With = leave_Match = leave_TryStar = _restore

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.values[id(node.targets[0].target)] = node.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None and isinstance(node.target, cst.Name):
            self.values[id(node.target)] = node.value


@dataclass(frozen=True)
class Assigned:
    """One binding of a name, as libcst's ScopeProvider records it: the node that binds it (the
    import statement, the def or class, the target `Name`)."""

    name: str
    node: cst.CSTNode
    imported: bool = False


_Names = dict[str, list[Assigned]]


class _Unread(Exception):
    """A construct `_Statements` does not read: libcst's visitors answer instead."""


@dataclass
class Read:
    """What the module scope and its class bodies bind, and where: the tables ModuleScope answers from."""

    module_names: _Names
    class_names: dict[int, _Names]  # id(ClassDef) -> what its body binds (class bodies at module level)
    where: dict[int, tuple[str | None, int, str]]  # id(binding node) -> (class or None, statement index, context)
    values: dict[int, cst.BaseExpression]  # id(target Name) -> assigned value (`name = value`, one target)
    classes: dict[str, tuple[cst.ClassDef, int]]  # class at module level -> (its first def, module statement)
    stars: list[tuple[cst.ImportFrom, str]]  # `from m import *` outside defs and classes, with its context


def read_statements(module: cst.Module, text: str) -> Read | None:
    """The bindings of a module whose function bodies are gone (`reduced`), read off its statements
    as libcst's ScopeProvider records them (`import a.b` binds `a.b` and `a`) and placed as
    `_Placement` places them: imports, defs, classes, and the targets of assignments, `for`, `with`
    and `except`. None when the module holds something else that can bind (`global`, `match`, a
    type alias) or its text has a `:=` (which binds in the enclosing scope from inside any expression):
    tests/test_scopes.py compares both readings on every model file of a release."""
    if ":=" in text:
        return None
    reader = _Statements()
    try:
        for index, statement in enumerate(module.body):
            reader.statement(statement, None, index, TOP)
    except _Unread:
        return None
    return reader.read


def read_with_libcst(module: cst.Module) -> Read:
    """The same tables from libcst's ScopeProvider and a visit of every node: for what read_statements does not read."""
    from libcst.metadata import ClassScope, GlobalScope, ImportAssignment, MetadataWrapper, ScopeProvider

    scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)

    def table(scope: Scope) -> _Names:
        out: _Names = {}
        for assignment in scope.assignments:
            node = assignment.node  # type: ignore[attr-defined]  # a module's or class's scope holds Assignments only
            out.setdefault(assignment.name, []).append(Assigned(assignment.name, node, isinstance(assignment, ImportAssignment)))
        return out

    found = next((s for s in scopes.values() if isinstance(s, GlobalScope)), None) if module.body else None
    class_names: dict[int, _Names] = {}
    for scope in {s for s in scopes.values() if isinstance(s, ClassScope) and isinstance(s.parent, GlobalScope)}:
        class_names[id(scope.node)] = table(scope)  # the class bodies at module level (a nested class is not asked about)
    placement = _Placement()
    module.visit(placement)
    stars: list[tuple[cst.ImportFrom, str]] = []

    class Stars(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if isinstance(node.names, cst.ImportStar):
                stars.append((node, placement.where.get(id(node), (None, 0, CONDITIONAL))[2]))

    module.visit(Stars())
    return Read(table(found) if found is not None else {}, class_names, placement.where, placement.values, placement.classes, stars)


class _Statements:
    """Walks statements only (no expression can bind once `:=` is ruled out), keeping the class body
    or module statement each binding belongs to and the context it runs in."""

    def __init__(self) -> None:
        self.read = Read({}, {}, {}, {}, {}, [])

    def statement(self, node: cst.CSTNode, owner: str | None, index: int, context: str) -> None:
        read = self.read
        table = read.module_names if owner is None else read.class_names[id(read.classes[owner][0])]

        def bind(name: str, at: cst.CSTNode, imported: bool = False) -> None:
            table.setdefault(name, []).append(Assigned(name, at, imported))
            read.where[id(at)] = (owner, index, context)

        def targets(target: cst.BaseExpression) -> None:  # `a`, `a, *b`, `[a, (b, c)]`; `x.y` and `x[i]` bind nothing
            if isinstance(target, cst.Name):
                bind(target.value, target)
            elif isinstance(target, (cst.Tuple, cst.List)):
                for element in target.elements:
                    targets(element.value)
            elif isinstance(target, cst.StarredElement):
                targets(target.value)

        def suite(block: cst.BaseSuite | cst.SimpleStatementLine, inner: str = context) -> None:
            for statement in block.body:
                self.statement(statement, owner, index, inner)

        conditional = TYPE_CHECKING if context == TYPE_CHECKING else CONDITIONAL
        if isinstance(node, cst.SimpleStatementLine):
            suite(node)
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            if isinstance(node.names, cst.ImportStar):
                if owner is None:
                    read.where[id(node)] = (owner, index, context)
                    read.stars.append((cst.ensure_type(node, cst.ImportFrom), context))
                return
            for alias in node.names:
                if alias.asname is not None:
                    bind(cst.ensure_type(alias.asname.name, cst.Name).value, node, True)
                else:
                    parts = cst_dotted_name(alias.name).split(".")
                    for cut in range(len(parts), 0, -1):
                        bind(".".join(parts[:cut]), node, True)
        elif isinstance(node, cst.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                read.values[id(node.targets[0].target)] = node.value
            for target in node.targets:
                targets(target.target)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None and isinstance(node.target, cst.Name):
                read.values[id(node.target)] = node.value
            targets(node.target)
        elif isinstance(node, cst.AugAssign):
            targets(node.target)
        elif isinstance(node, (cst.Expr, cst.Pass, cst.Return, cst.Raise, cst.Assert, cst.Break, cst.Continue, cst.Del)):
            return
        elif isinstance(node, cst.FunctionDef):
            bind(node.name.value, node)
        elif isinstance(node, cst.ClassDef):
            bind(node.name.value, node)
            name = node.name.value
            if owner is None and name not in read.classes:  # a class body of its own, its statements counted from 0
                read.classes[name] = (node, index)  # (a second class of the name: a scope nothing asks about)
                read.class_names[id(node)] = {}
                for position, statement in enumerate(node.body.body):
                    self.statement(statement, name, position, TOP)
        elif isinstance(node, cst.If):
            inside, other = _branch_contexts(node.test, context)
            suite(node.body, inside)
            if isinstance(node.orelse, cst.If):
                self.statement(node.orelse, owner, index, other)
            elif node.orelse is not None:
                suite(node.orelse.body, other)
        elif isinstance(node, (cst.For, cst.While)):
            if isinstance(node, cst.For):
                context = conditional
                targets(node.target)
            suite(node.body, conditional)
            if node.orelse is not None:
                suite(node.orelse.body, conditional)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            suite(node.body, conditional)
            for handler in node.handlers:
                if handler.name is not None:
                    context = conditional
                    targets(handler.name.name)
                suite(handler.body, conditional)
            for part in (node.orelse, node.finalbody):
                if part is not None:
                    suite(part.body, conditional)
        elif isinstance(node, cst.With):
            context = conditional
            for item in node.items:
                if item.asname is not None:
                    targets(item.asname.name)
            suite(node.body, conditional)
        else:
            raise _Unread(type(node).__name__)


class ModuleScope:
    """Every binding of a module's scope and of its top-level class bodies, with the context each runs in."""

    def __init__(
        self,
        module: cst.Module,
        dotted: str,
        is_package: bool = False,
        classes: frozenset[str] | None = None,
        keep: frozenset[tuple[str, str]] = frozenset(),
        text: str = "",
        cut_text: str | None = None,
    ):
        """`classes`: the top-level classes whose bodies are asked about (None: all); `keep`: methods whose
        bodies are (the generated ones); `text`: the whole file's; `cut_text`: the text `module` was parsed
        from when its bodies were cut (source.cut_bodies): a `:=` left in a cut body binds nothing here."""
        self.dotted = dotted
        self.package = dotted if is_package else dotted.rpartition(".")[0]
        stripped = reduced(module, classes, keep)
        self.module = stripped
        text = text or module.code
        read = read_statements(stripped, cut_text if cut_text is not None else text) or read_with_libcst(stripped)
        self._module_assigned, self._class_assigned = read.module_names, read.class_names
        self._where, self._values, self.classes = read.where, read.values, read.classes
        self.star_imports = [(absolute_module(node, self.package), context) for node, context in read.stars]
        self.future_annotations = _future_annotations(stripped)
        self.rebound_by_functions = frozenset(
            name.strip() for match in _GLOBAL.finditer(text) for name in match.group(1).split(",") if name.strip()
        )

    # -- what is bound -----------------------------------------------------------------------
    def module_bindings(self, name: str) -> list[Binding]:
        return sorted((self._binding(a) for a in self._module_assigned.get(name, ())), key=lambda b: b.statement)

    def class_bindings(self, cls: str, name: str) -> list[Binding]:
        return sorted((self._binding(a, cls) for a in self._class_table(cls).get(name, ())), key=lambda b: b.statement)

    def class_names(self, cls: str) -> set[str]:
        return set(self._class_table(cls))

    def module_names(self) -> set[str]:
        return set(self._module_assigned)

    def _class_table(self, cls: str) -> dict[str, list[Assigned]]:
        found = self.classes.get(cls)
        return self._class_assigned.get(id(found[0]), {}) if found else {}

    def class_statement(self, cls: str) -> int | None:
        """Index of the module statement that defines class `cls` (None when it is not a top-level class)."""
        found = self.classes.get(cls)
        return found[1] if found else None

    def member_statement(self, cls: str, member: str) -> int | None:
        """Index of the class-body statement holding the first `def member` (under an `if` counts)."""
        found = self.classes.get(cls)
        if found is None:
            return None
        for binding in self.class_bindings(cls, member):
            return binding.statement
        return None

    # -- one binding --------------------------------------------------------------------------
    def _binding(self, assignment: Assigned, cls: str | None = None) -> Binding:
        node = assignment.node
        _, statement, context = self._where.get(id(node), (None, 0, CONDITIONAL))
        name = assignment.name
        if assignment.imported:
            assert isinstance(node, (cst.Import, cst.ImportFrom)), "an import binds through its statement"
            spec = self._import_spec(node, name)
            qualified = f"{spec[0]}.{spec[1]}" if spec[1] else spec[0]
            return Binding(name, qualified, context, statement, spec=spec)
        if cls is not None:
            return Binding(name, f"{self.dotted}.{cls}.{name}", context, statement, self._values.get(id(node)), own=True)
        own = isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Name))
        return Binding(name, f"{self.dotted}.{name}", context, statement, self._values.get(id(node)), (self.dotted, name), own)

    def _import_spec(self, node: cst.Import | cst.ImportFrom, local: str) -> tuple[str, str | None]:
        """(module, object) that the import binds `local` to: `from m import X as local` -> (m, X);
        `import a.b as local` -> (a.b, None); `import a.b` binds `a` -> (a, None)."""
        assert not isinstance(node.names, cst.ImportStar), "libcst binds no name to `import *`: no ImportAssignment"
        for alias in node.names:
            full = cst_dotted_name(alias.name)
            if isinstance(node, cst.ImportFrom):
                if (alias.evaluated_alias or full) == local:
                    return absolute_module(node, self.package), full
            elif alias.evaluated_alias is not None:
                if alias.evaluated_alias == local:
                    return full, None
            elif local == full or full.startswith(local + "."):
                return local, None
        return local, None


def _future_annotations(module: cst.Module) -> bool:
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and cst_dotted_name(small.module) == "__future__":
                    if not isinstance(small.names, cst.ImportStar) and any(cst_dotted_name(a.name) == "annotations" for a in small.names):
                        return True
    return False


_MODULE_SCOPES: MemoKey[dict[tuple[Path, frozenset[str] | None], ModuleScope]] = MemoKey("(file, classes) -> its scope analysis")


def scope_of(cache: SourceCache, source: SourceFile, classes: frozenset[str] | None = None) -> ModuleScope:
    """The scope analysis of a file as it is on disk (the bodies of `classes` only), once per run."""
    table = cache.memo(_MODULE_SCOPES, dict)
    key = (source.path, classes)
    found = table.get(key)
    if found is None:
        bodiless = cache.parse_bodiless(source, classes)
        found = table[key] = ModuleScope(
            bodiless.module,
            dotted_module(source.rel),
            source.rel.endswith("__init__.py"),
            classes,
            text=source.text,
            cut_text=bodiless.cut.text if bodiless.cut is not None else None,
        )
    return found


# --------------------------------------------------------------------------- other modules, cheaply


@dataclass
class _Table:
    """What one in-tree module binds at top level: name -> [(qualified, runs unconditionally, imported)]."""

    names: dict[str, list[tuple[str, bool, bool]]]
    stars: list[str]  # modules star-imported unconditionally
    public: set[str] | None  # `__all__`, when it is a literal list or tuple


_EXPORTS: MemoKey[Exports] = MemoKey("the tree's exports, read on first use")


class Exports:
    """In-tree modules read with `ast`: enough to follow a re-export or a star import to its definition."""

    def __init__(self, srt: Path, tree: SourceTree | None = None):
        self.tree = tree
        self.srt = srt
        self._tables: dict[str, _Table | None] = {}

    @classmethod
    def of(cls, cache: SourceCache, tree: SourceTree) -> Exports:
        return cache.memo(_EXPORTS, lambda: cls(tree.srt, tree))

    def table(self, module: str) -> _Table | None:
        if module not in self._tables:
            self._tables[module] = self._read(module)
        return self._tables[module]

    def _read(self, module: str) -> _Table | None:
        path = module_path(self.tree, module) if self.tree is not None else None
        if path is None:
            return None
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            return None
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        table = _Table({}, [], None)
        for statement in tree.body:
            self._statement(statement, module, package, table, True)
        return table

    def _statement(self, statement: ast.stmt, module: str, package: str, table: _Table, top: bool) -> None:
        def bind(name: str, qualified: str, imported: bool) -> None:
            table.names.setdefault(name, []).append((qualified, top, imported))

        if isinstance(statement, ast.ImportFrom):
            source = _absolute(statement.module or "", statement.level, package)
            for alias in statement.names:
                if alias.name == "*":
                    if top:
                        table.stars.append(source)
                else:
                    bind(alias.asname or alias.name, f"{source}.{alias.name}", True)
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    bind(alias.asname, alias.name, True)
                else:
                    bind(alias.name.split(".")[0], alias.name.split(".")[0], True)
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(statement.name, f"{module}.{statement.name}", False)
        elif isinstance(statement, (ast.If, ast.Try, ast.For, ast.While, ast.With)) or type(statement).__name__ in ("Match", "TryStar"):
            for child in ast.iter_child_nodes(statement):
                if isinstance(child, ast.stmt):
                    self._statement(child, module, package, table, False)
                elif isinstance(child, ast.ExceptHandler):
                    for inner in child.body:
                        self._statement(inner, module, package, table, False)
        else:
            for node in walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bind(node.id, f"{module}.{node.id}", False)
            if top and isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets):
                try:
                    value = ast.literal_eval(statement.value)
                    table.public = {str(v) for v in value}
                except (ValueError, TypeError, SyntaxError):
                    table.public = None

    def star_provides(self, module: str, name: str, depth: int = 0) -> str | None:
        """What `from module import *` binds `name` to, when that can be read; None otherwise."""
        table = self.table(module)
        if table is None or depth > 8:
            return None
        if table.public is not None and name not in table.public:
            return None
        if table.public is None and name.startswith("_"):
            return None
        if name in table.names:
            return f"{module}.{name}"
        for star in reversed(table.stars):
            found = self.star_provides(star, name, depth + 1)
            if found is not None:
                return found
        return None

    def canonical(self, qualified: str, depth: int = 0) -> str:
        """`qualified` followed through in-tree re-exports to the module that defines it."""
        parts = qualified.split(".")
        if depth > 8 or parts[0] != PACKAGE.split(".")[0]:
            return qualified
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            table = self.table(module)
            if table is None:
                continue
            first, rest = parts[cut], parts[cut + 1 :]
            bound = table.names.get(first, [])
            target: str | None
            if len(bound) == 1 and bound[0][1] and bound[0][2]:
                target = bound[0][0]
            elif not bound:
                target = next((q for star in reversed(table.stars) if (q := self.star_provides(star, first))), None)
            else:
                target = None
            if target is None or target == f"{module}.{first}":
                return qualified
            return self.canonical(".".join([target, *rest]), depth + 1)
        return qualified


def _absolute(module: str, level: int, package: str) -> str:
    if not level:
        return module
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(base + ([module] if module else []))
