"""Analyze stage: the speculative algorithms a tree defines, and what each needs of a model.

Nothing here lists algorithms.  The tree's own enum of them is found by its shape: an `Enum`
under `speculative/` whose methods `def is_x(self) -> bool: return self == Enum.X` (also `!=`,
`in (...)`, `and`/`or`/`not` and calls of one another) test the enum's own members; each member
is an algorithm, except the one a classmethod returns for `None` (`from_string(None)`: no
speculation).  What selects an algorithm in the code that consumes it:

* its predicates: every `x.is_y()` whose truth set holds it, when written as membership
  (`is_dflash_family()` selects DFLASH and DSPARK; `is_speculative()`, written `!= NONE`, selects
  none, though it still tells which algorithms reach a branch);
* comparisons with a member, `algo == Enum.DFLASH`, `algo in (...)`, or its name as a string;
* flags the code derives from those: a name or attribute set `True` only under such guards, or set
  from a guard (`config.dflash_use_aux_hidden_state = True` under `if is_dflash_family():`,
  `is_dspark=spec_algorithm.is_dspark()`), and passed on (`is_dspark=self.config.is_dspark`).

Each algorithm's protocol is then read by analyze/protocol.py's walker through a `CodeScope` of its
own: modules under speculative/ named for it (its name, or the word of an `is_word()` predicate
that holds for it: `eagle_worker.py` for EAGLE and EAGLE3) count whole, and elsewhere the branches
its guards select.  Branches it never takes are not walked (`if is_dspark and ...:` under DFLASH),
a `hasattr` chain that raises when no branch is taken is a group of which one member suffices
(`OneOf`), and a member of a typing Protocol the code tests a model against with `isinstance` is
optional (a capability).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..errors import EaglepatchError
from ..read.source_cache import MemoKey, SourceCache
from ..read.statements import walk
from ..read.text import SourceFile, WordFinder, is_word_byte
from ..records import EAGLE3, Protocol, ProtocolMember
from .protocol import Block, CodeScope, OneOf, condition_literals, read_scope

if TYPE_CHECKING:
    from .context import RunContext

GuardKind = Literal["predicate", "member", "flag"]
MAX_ROUNDS = 8  # flag discovery: each round may find flags derived from the last round's

# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Predicate:
    """A method of the enum that tests which member it is."""

    name: str
    holds_for: frozenset[str]
    positive: bool  # written as membership (`==`, `in`, `or`), not as an exclusion (`!=`, `not`)
    at: str


@dataclass(frozen=True)
class AlgorithmEnum:
    """The tree's enum of speculative algorithms."""

    name: str
    at: str  # "path:line" of the class
    members: tuple[str, ...]
    predicates: Mapping[str, Predicate]
    inactive: str | None  # the member for no speculation (what a classmethod returns for None)

    @property
    def algorithms(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m != self.inactive)


@dataclass(frozen=True)
class Flag:
    """A name the code derives from the algorithm: true only when the algorithm is one of `may`."""

    name: str
    may: frozenset[str]
    names: frozenset[str]  # the algorithms that set it under a guard naming them
    at: str  # the first place it is derived


@dataclass(frozen=True)
class Guard:
    """One way the code selects an algorithm."""

    kind: GuardKind
    name: str  # "is_dflash", "SpeculativeAlgorithm.DFLASH", "dflash_use_aux_hidden_state"
    at: str  # where the tree defines it (a flag: where it is first derived)
    holds_for: tuple[str, ...]  # every algorithm it selects, in enum order


@dataclass(frozen=True)
class Algorithm:
    """One speculative algorithm and what its code needs of models.  Members of a `one_of` group are
    in `protocol` too, each optional: a model needs one of them (a group of one is just required)."""

    name: str
    guards: tuple[Guard, ...]
    modules: tuple[str, ...]  # speculative modules named for it: all of their code counts
    protocol: Protocol
    one_of: tuple[OneOf, ...] = ()  # groups of two or more members, any one suffices
    capabilities: Mapping[str, str] = field(default_factory=dict)  # member -> "file:Protocol" a model is tested against
    read_from: Literal["guards", "given"] = "guards"  # "given": the caller's own reading (read_algorithms `given`)

    @property
    def calls_hooks(self) -> bool:
        return bool(self.protocol.members)


@dataclass(frozen=True)
class Algorithms:
    enum: AlgorithmEnum | None  # None: the tree defines no algorithm enum
    flags: tuple[Flag, ...]
    algorithms: tuple[Algorithm, ...]

    def get(self, name: str) -> Algorithm | None:
        return next((a for a in self.algorithms if a.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.algorithms)


# --------------------------------------------------------------------------- the enum


class _NotAPredicate(Exception):
    pass


def _final_identifier(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _sole_return(func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The expression of a body that is only `return expr` (after a docstring)."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


class _EnumReader:
    """Reads the truth set of each `is_x(self)` of one enum class by evaluating it for every member."""

    def __init__(self, node: ast.ClassDef, rel: str):
        self.node = node
        self.rel = rel
        self.members = tuple(
            target.id
            for statement in node.body
            for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value is not None else [])
            if isinstance(target, ast.Name) and not target.id.startswith("_")
        )
        self.bodies: dict[str, tuple[ast.expr, int]] = {}
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and not statement.decorator_list:
                params = statement.args
                if [a.arg for a in params.posonlyargs + params.args] == ["self"] and not (params.vararg or params.kwarg or params.kwonlyargs):
                    returned = _sole_return(statement)
                    if returned is not None:
                        self.bodies[statement.name] = (returned, statement.lineno)
        self._memo: dict[tuple[str, str], bool] = {}
        self._negative: dict[str, bool] = {}

    def predicates(self) -> dict[str, Predicate]:
        found: dict[str, Predicate] = {}
        for name, (_, line) in self.bodies.items():
            try:
                holds = frozenset(m for m in self.members if self._call(name, m, ()))
                negative = self._is_negative(name, ())
            except _NotAPredicate:
                continue
            found[name] = Predicate(name, holds, not negative, f"{self.rel}:{line}")
        return found

    def _call(self, name: str, member: str, stack: tuple[str, ...]) -> bool:
        key = (name, member)
        if key not in self._memo:
            if name not in self.bodies or name in stack:
                raise _NotAPredicate(name)
            self._memo[key] = self._truth(self.bodies[name][0], member, stack + (name,))
        return self._memo[key]

    def _refs(self, node: ast.expr) -> frozenset[str]:
        """`Enum.X` (or a tuple, list or set of them) as the members it names."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return frozenset().union(*(self._refs(e) for e in node.elts))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in (self.node.name, "cls"):
            if node.attr in self.members:
                return frozenset({node.attr})
        raise _NotAPredicate(ast.dump(node))

    def _truth(self, node: ast.expr, member: str, stack: tuple[str, ...]) -> bool:
        if isinstance(node, ast.BoolOp):
            values = (self._truth(v, member, stack) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self._truth(node.operand, member, stack)
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                return self._call(func.attr, member, stack)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            if isinstance(right, ast.Name) and right.id == "self" and isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                left, right = right, left
            if isinstance(left, ast.Name) and left.id == "self":
                named = member in self._refs(right)
                if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                    return named
                if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
                    return not named
        raise _NotAPredicate(ast.dump(node))

    def _is_negative(self, name: str, stack: tuple[str, ...]) -> bool:
        if name not in self._negative:
            negative = False
            for child in walk(self.bodies[name][0]):
                if isinstance(child, (ast.Not, ast.NotEq, ast.NotIn, ast.IsNot)):
                    negative = True
                elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr not in stack:
                    negative = negative or (child.func.attr in self.bodies and self._is_negative(child.func.attr, stack + (name,)))
            self._negative[name] = negative
        return self._negative[name]

    def inactive(self) -> str | None:
        """The member a classmethod returns for a None argument: `if name is None: return cls.NONE`."""
        for statement in self.node.body:
            if not isinstance(statement, ast.FunctionDef) or not any(_final_identifier(d) == "classmethod" for d in statement.decorator_list):
                continue
            for node in walk(statement):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
                    continue
                right = node.test.comparators[0]
                if isinstance(node.test.ops[0], ast.Is) and isinstance(right, ast.Constant) and right.value is None:
                    first = node.body[0] if node.body else None
                    if isinstance(first, ast.Return) and first.value is not None:
                        try:
                            refs = self._refs(first.value)
                        except _NotAPredicate:
                            continue
                        if len(refs) == 1:
                            return next(iter(refs))
        return None


_ENUM: MemoKey[AlgorithmEnum | None] = MemoKey("the algorithm enum")


def find_enum(cache: SourceCache) -> AlgorithmEnum | None:
    """The enum under speculative/ with the most predicates on its own members (None: there is none);
    read once a run (the protocol, the algorithms and preflight all ask)."""
    return cache.memo(_ENUM, lambda: _find_enum(cache))


def _find_enum(cache: SourceCache) -> AlgorithmEnum | None:
    speculative = cache.srt / "speculative"
    found: list[AlgorithmEnum] = []
    if not speculative.is_dir():
        return None
    for path in sorted(speculative.rglob("*.py")):
        if cache.is_excluded(path):
            continue
        try:
            source = cache.read(path)
        except EaglepatchError:
            continue
        if "Enum" not in source.text:
            continue
        try:
            module = cache.module_ast(path)
        except EaglepatchError:
            continue
        for node in module.body:
            if isinstance(node, ast.ClassDef) and any(_final_identifier(b).endswith("Enum") for b in node.bases):
                reader = _EnumReader(node, source.rel)
                predicates = reader.predicates()
                if predicates:
                    found.append(AlgorithmEnum(node.name, f"{source.rel}:{node.lineno}", reader.members, predicates, reader.inactive()))
    return max(found, key=lambda e: len(e.predicates), default=None)


# --------------------------------------------------------------------------- reading guards


@dataclass(frozen=True)
class _Atom:
    exact: frozenset[str] | None  # true exactly when the algorithm is one of these
    may: frozenset[str] | None  # true only when it is one of these (a flag)
    names: frozenset[str]  # what a true atom names


class Guards:
    """Reads conditions against the enum: which algorithms may reach a branch, and which it selects."""

    def __init__(self, enum: AlgorithmEnum, flags: Mapping[str, Flag], ambiguous: frozenset[str] = frozenset()):
        self.enum = enum
        self.flags = flags
        self.ambiguous = ambiguous  # predicate names other classes define too: read only on an algorithm
        self.every = frozenset(enum.members)

    def _members(self, node: ast.expr) -> frozenset[str] | None:
        """`Enum.X`, "X", or a tuple/list/set of them."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
            parts = [self._members(e) for e in node.elts]
            return None if any(p is None for p in parts) else frozenset().union(*parts)  # type: ignore[arg-type]
        if isinstance(node, ast.Attribute) and _final_identifier(node.value) == self.enum.name and node.attr in self.enum.members:
            return frozenset({node.attr})
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in self.enum.members:
            return frozenset({node.value})
        return None

    def _on_algorithm(self, receiver: ast.expr) -> bool:
        if isinstance(receiver, ast.Call):
            return _final_identifier(receiver.func.value) == self.enum.name if isinstance(receiver.func, ast.Attribute) else False
        name = _final_identifier(receiver).lower()
        return "algo" in name or "spec" in name

    def atom(self, node: ast.expr) -> _Atom | None:
        if isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute):
            predicate = self.enum.predicates.get(node.func.attr)
            if predicate is None or (predicate.name in self.ambiguous and not self._on_algorithm(node.func.value)):
                return None
            holds = predicate.holds_for
            return _Atom(holds, holds, holds if predicate.positive else frozenset())
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            op, left, right = node.ops[0], node.left, node.comparators[0]
            if isinstance(op, (ast.In, ast.NotIn)):
                named = self._members(right)
            else:
                named = self._members(right)
                if named is None:
                    named = self._members(left)
            if named is None or not isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                return None
            if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                return _Atom(named, named, named)
            # `!=` and `not in` are read as denials (protocol.condition_literals): a false one names its members
            return _Atom(self.every - named, self.every - named, frozenset() if isinstance(op, ast.IsNot) else named)
        if isinstance(node, (ast.Name, ast.Attribute)):
            flag = self.flags.get(_final_identifier(node))
            if flag is not None:
                return _Atom(None, flag.may, flag.names)
        return None

    def mentions(self, node: ast.AST) -> bool:
        return any(isinstance(child, ast.expr) and self.atom(child) is not None for child in walk(node))

    def possible(self, test: ast.expr, holds: bool, algorithm: str) -> bool:
        """`test` can be `holds` when `algorithm` runs."""
        if isinstance(test, ast.NamedExpr):
            return self.possible(test.value, holds, algorithm)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.possible(test.operand, not holds, algorithm)
        if isinstance(test, ast.BoolOp):
            parts = (self.possible(v, holds, algorithm) for v in test.values)
            return all(parts) if isinstance(test.op, ast.And) == holds else any(parts)
        atom = self.atom(test)
        if atom is None:
            return True
        if atom.exact is not None:
            return (algorithm in atom.exact) == holds
        return algorithm in atom.may if holds and atom.may is not None else True

    def selects(self, test: ast.expr, holds: bool, algorithm: str) -> bool:
        """A branch where `test` is `holds` is `algorithm`'s code: it may be taken, and some check true
        there names the algorithm."""
        if not self.possible(test, holds, algorithm):
            return False
        for literal in condition_literals(test, holds):
            if literal.holds:
                atom = self.atom(literal.node)
                if atom is not None and algorithm in atom.names:
                    return True
        return False


# --------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class _Site:
    """A place a name gets a value: `x = v`, `a.x = v`, `f(x=v)`; value None when not read."""

    name: str
    value: ast.expr | None
    conds: tuple[tuple[ast.expr, bool], ...]
    at: str
    keyword: bool = False  # an argument `f(x=v)`, not an assignment


def _is_exit(statement: ast.stmt) -> bool:
    return isinstance(statement, (ast.Return, ast.Raise))


def _assignment_sites(module: ast.Module, rel: str, offset: int = 0) -> list[_Site]:
    """Every site of `module` (its line 1 is file line offset + 1), with the conditions around it."""
    found: list[_Site] = []

    def bind(target: ast.expr, value: ast.expr | None, conds: tuple, line: int) -> None:
        if isinstance(target, (ast.Name, ast.Attribute)):
            found.append(_Site(_final_identifier(target), value, conds, f"{rel}:{line + offset}"))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                bind(element.value if isinstance(element, ast.Starred) else element, None, conds, line)

    def expressions(statement: ast.stmt, conds: tuple) -> None:
        for child in ast.iter_child_nodes(statement):
            if not isinstance(child, ast.expr):
                continue
            for node in walk(child):
                if isinstance(node, ast.Call):
                    for keyword in node.keywords:
                        if keyword.arg:
                            found.append(_Site(keyword.arg, keyword.value, conds, f"{rel}:{keyword.value.lineno + offset}", True))
                elif isinstance(node, ast.NamedExpr):
                    bind(node.target, node.value, conds, node.lineno)

    def block(statements: Sequence[ast.stmt], conds: tuple) -> None:
        for statement in statements:
            expressions(statement, conds)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                block(statement.body, ())
            elif isinstance(statement, ast.If):
                block(statement.body, conds + ((statement.test, True),))
                block(statement.orelse, conds + ((statement.test, False),))
                if not statement.orelse and statement.body and _is_exit(statement.body[-1]):
                    conds = conds + ((statement.test, False),)
            elif isinstance(statement, ast.While):
                block(statement.body, conds + ((statement.test, True),))
                block(statement.orelse, conds)
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                bind(statement.target, None, conds, statement.lineno)
                block(statement.body, conds)
                block(statement.orelse, conds)
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars, None, conds, statement.lineno)
                block(statement.body, conds)
            elif isinstance(statement, ast.Try) or type(statement).__name__ == "TryStar":
                block(statement.body, conds)  # type: ignore[attr-defined]
                for handler in statement.handlers:  # type: ignore[attr-defined]
                    block(handler.body, conds)
                block(statement.orelse, conds)  # type: ignore[attr-defined]
                block(statement.finalbody, conds)  # type: ignore[attr-defined]
            elif isinstance(statement, ast.Match):
                for case in statement.cases:
                    block(case.body, conds)
            elif isinstance(statement, ast.Assert):
                conds = conds + ((statement.test, True),)
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    bind(target, statement.value, conds, statement.lineno)
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                bind(statement.target, statement.value, conds, statement.lineno)
            elif isinstance(statement, ast.AugAssign):
                bind(statement.target, None, conds, statement.lineno)

    block(module.body, ())
    return found


def _never_true(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and not value.value


def _derives(site: _Site, direct: Guards, flagged: Guards) -> bool:
    """The site sets its name True under a guard read straight off the enum (a predicate or a
    comparison, not a flag: a flag's branches set much else; and not as one call's argument,
    `f(strict=True)`), or from a boolean of guards."""
    value = site.value
    if value is None:
        return False
    if isinstance(value, ast.Constant) and value.value is True:
        return not site.keyword and any(direct.mentions(test) for test, _ in site.conds)
    return _boolean_of_guards(value, flagged)


def _sets_unguarded(site: _Site, names: set[str], guards: Guards) -> bool:
    """A site that makes its name true outside any guard, from something no guard or flag gives."""
    value = site.value
    if _never_true(value) or any(guards.mentions(test) for test, _ in site.conds):
        return False
    if value is not None and (_boolean_of_guards(value, guards) or _final_identifier(value) in names):
        return False
    return True


def _boolean_of_guards(value: ast.expr, guards: Guards) -> bool:
    if isinstance(value, ast.BoolOp):
        return any(_boolean_of_guards(v, guards) for v in value.values)
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        return _boolean_of_guards(value.operand, guards)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "bool" and len(value.args) == 1:
        return _boolean_of_guards(value.args[0], guards)
    return guards.atom(value) is not None


class _FlagReader:
    """Finds the flags: names derived from a guard, less those set anywhere from something else.

    Only the functions that name a guard are parsed (a release has ~1,800 files outside models/,
    100+ of which name the enum); a name derived there and set in any other function, or at module
    level, to anything but a false constant is no flag (that code is not guarded)."""

    def __init__(self, run: RunContext, enum: AlgorithmEnum):
        self.tree = run.tree
        self.cache = run.cache
        self.enum = enum
        self.corpus = _Corpus({path: _bytes(path) for path in self._files()})
        self.files = self.corpus.files
        self._read: dict[tuple[Path, int], list[_Site]] = {}  # (file, def header) -> its sites
        self.ambiguous = self._ambiguous()

    def _files(self) -> Iterator[Path]:
        models = self.tree.models
        for dirpath, dirnames, filenames in os.walk(self.tree.srt):
            if Path(dirpath) == models:
                dirnames[:] = []
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            for filename in sorted(filenames):
                if filename.endswith(".py"):
                    path = Path(dirpath, filename)
                    if not self.cache.is_excluded(path):
                        yield path

    def _ambiguous(self) -> frozenset[str]:
        """Predicate names some file outside speculative/ defines as a method too (`MoeA2ABackend.is_none`)."""
        speculative = str(self.tree.srt / "speculative") + os.sep
        pattern = re.compile(rb"def[ \t]+(" + b"|".join(re.escape(n.encode()) for n in self.enum.predicates) + rb")\(")
        found: set[str] = set()
        for path, data in self._holding(list(self.enum.predicates)):
            if not str(path).startswith(speculative):
                found.update(match.group(1).decode() for match in pattern.finditer(data))
        return frozenset(found)

    def _source(self, path: Path) -> SourceFile | None:
        try:
            return self.cache.read(path)
        except EaglepatchError:
            return None

    def holding(self, identifier: str) -> frozenset[Path]:
        """The files read that hold `identifier` as a word."""
        return self.corpus.with_identifier(identifier.encode())

    def _holding(self, words: Iterable[str]) -> Iterator[tuple[Path, bytes]]:
        """The files that hold one of `words` (a substring test: far faster than a regex over every file)."""
        sure: set[Path] = set()  # a word that is one identifier is held where the corpus has it
        wanted: set[Path] = set()
        literals = []
        for word in words:
            identifiers = _IDENTIFIER.findall(word.encode())
            if identifiers == [word.encode()]:
                sure |= self.corpus.with_identifier(identifiers[0])
            elif identifiers:
                wanted |= frozenset.intersection(*(self.corpus.with_identifier(i) for i in identifiers))
                literals.append(word.encode())
        for path, data in self.files.items():
            if path in sure or (path in wanted and any(w in data for w in literals)):
                yield path, data

    def _headers(self, words: Iterable[str], matches: Callable[[bytes], list[int]]) -> dict[Path, list[int]]:
        """Per file holding one of `words`, the def headers around each of `matches` (module level left out)."""
        found: dict[Path, list[int]] = {}
        for path, data in self._holding(words):
            offsets = matches(data)
            if not offsets:
                continue
            source = self._source(path)
            if source is None:
                continue
            outline = self.cache.outline(source)
            lines = set(_line_indexes(data, offsets))
            headers = sorted({outline.outer_def(line) for line in lines} - {-1})
            if headers:
                found[path] = headers
        return found

    def _sites_of(self, headers: Mapping[Path, list[int]]) -> list[_Site]:
        found: list[_Site] = []
        for path, wanted in headers.items():
            source = self._source(path)
            if source is None:
                continue
            for header in wanted:
                key = (path, header)
                if key not in self._read:
                    self._read[key] = self._def_sites(source, header)
                found += self._read[key]
        return found

    def _def_sites(self, source: SourceFile, header: int) -> list[_Site]:
        node = self.cache.function_ast(source, header)
        if node is None:
            return []
        offset = 0 if self.cache.function_text(source, header) is source.text else self.cache.block_span(source, header)[0]
        return _assignment_sites(ast.Module(body=[node], type_ignores=[]), source.rel, offset)

    def _poisoned(self, names: set[str], guards: Guards) -> set[str]:
        """Names of `names` that unguarded code sets to a value not read off a guard.  Each function
        outside those read that sets one (`x = ...`, `a.x = ...`, `f(x=...)` to anything but a false
        constant) is read too, until the name is found so set."""
        if not names:
            return set()
        found: set[str] = set()
        for path, data in self._holding(names):
            source = None
            settings = list(_settings(data, sorted(names)))
            for (_, name, value), line in zip(settings, _line_indexes(data, [at for at, _, _ in settings])):
                if name in found or value.strip().decode(errors="replace") in _FALSE_TEXTS:
                    continue
                source = source or self._source(path)
                if source is None:
                    break
                header = self.cache.outline(source).outer_def(line)
                if header < 0:  # module level: no function guards it
                    found.add(name)
                    continue
                key = (path, header)
                if key not in self._read:
                    self._read[key] = self._def_sites(source, header)
                if any(site.name == name and _sets_unguarded(site, names, guards) for site in self._read[key]):
                    found.add(name)
            if found == names:
                break
        return found

    def read(self) -> dict[str, Flag]:
        enum = self.enum
        literals = [f".{name}(" for name in enum.predicates] + [f"{enum.name}.{m}" for m in enum.members]
        literals += [f"{quote}{m}{quote}" for m in enum.members for quote in "\"'"]
        literal = re.compile(b"|".join(re.escape(w.encode()) for w in literals))
        self._sites_of(self._headers(literals, lambda data: [m.start() for m in literal.finditer(data)]))
        direct = Guards(enum, {}, self.ambiguous)
        alive: set[str] = set()
        dead: set[str] = set()
        for _ in range(MAX_ROUNDS):
            flagged = Guards(enum, {name: Flag(name, frozenset(), frozenset(), "") for name in alive}, self.ambiguous)
            found = {site.name for site in self._all_sites() if _derives(site, direct, flagged)} - alive - dead
            if not found:
                break
            both = Guards(enum, {name: Flag(name, frozenset(), frozenset(), "") for name in alive | found}, self.ambiguous)
            poisoned = {site.name for site in self._all_sites() if site.name in found and _sets_unguarded(site, found, both)}
            poisoned |= self._poisoned(found - poisoned, both)
            dead |= poisoned
            new = found - poisoned
            if not new:
                break
            alive |= new
            self._sites_of(self._headers(new, WordFinder(new).byte_offsets))  # where the new flags are read: flags of flags
        sites = self._all_sites()
        flags = self._fixpoint(alive, sites)
        dropped = {name for name, flag in flags.items() if not flag.may or set(enum.algorithms) <= flag.may}
        if dropped:
            flags = self._fixpoint(alive - dropped, sites)
            flags = {n: f for n, f in flags.items() if f.may and not set(enum.algorithms) <= f.may}
        return dict(sorted(flags.items()))

    def _all_sites(self) -> list[_Site]:
        return [site for sites in self._read.values() for site in sites]

    def _fixpoint(self, candidates: set[str], sites: list[_Site]) -> dict[str, Flag]:
        """Least fixpoint: every flag starts never true; each round adds what its sites allow."""
        by_name: dict[str, list[_Site]] = {}
        for site in dict.fromkeys(sites):
            if site.name in candidates:
                by_name.setdefault(site.name, []).append(site)
        flags = {name: Flag(name, frozenset(), frozenset(), by_name[name][0].at) for name in by_name}
        for _ in range(len(self.enum.members) * max(len(flags), 1) + 1):
            guards = Guards(self.enum, flags, self.ambiguous)
            changed = False
            for name, named_sites in by_name.items():
                may: set[str] = set()
                names: set[str] = set()
                at = ""
                for site in named_sites:
                    if _never_true(site.value):
                        continue
                    for algorithm in self.enum.members:
                        if not all(guards.possible(test, holds, algorithm) for test, holds in site.conds):
                            continue
                        if site.value is not None and not guards.possible(site.value, True, algorithm):
                            continue
                        may.add(algorithm)
                        tests = [*site.conds, *(((site.value, True),) if site.value is not None else ())]
                        if any(guards.selects(test, holds, algorithm) for test, holds in tests):
                            names.add(algorithm)
                            at = at or site.at
                flag = Flag(name, frozenset(may), frozenset(names) & frozenset(may), at or flags[name].at)
                if flag != flags[name]:
                    flags[name] = flag
                    changed = True
            if not changed:
                break
        return flags


_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_NON_WORD_TO_SPACE = bytes(byte if byte in _WORD_BYTES else 0x20 for byte in range(256))


class _Corpus:
    """The files read, with the identifiers each holds: which files hold a word is asked a few dozen
    times a run, each answer memoised (an inverted index of every identifier cost more to build
    than all the questions a run asks of it)."""

    def __init__(self, files: dict[Path, bytes]):
        self.files = files
        # runs of word bytes, split in C (a regex findall costs half as much again); a number such as
        # `1e5` stays one word, as Python's tokenizer reads it
        self._identifiers = {path: frozenset(data.translate(_NON_WORD_TO_SPACE).split()) for path, data in files.items()}
        self._holding: dict[bytes, frozenset[Path]] = {}

    def with_identifier(self, identifier: bytes) -> frozenset[Path]:
        """The files in which `identifier` is a whole word."""
        found = self._holding.get(identifier)
        if found is None:
            found = self._holding[identifier] = frozenset(path for path, held in self._identifiers.items() if identifier in held)
        return found


_SET_TO = re.compile(rb"[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*([^\n,)]*)")


def _settings(data: bytes, names: Sequence[str]) -> Iterator[tuple[int, str, bytes]]:
    """(offset, name, value text) of each `name = value` (`name: T = value`, `f(name=value)`) in `data`,
    as `(?<!\\w)(a|b)` followed by `_SET_TO` would find them left to right, without the look-behind
    that makes such a regex crawl: each name found by `find`, the rest matched where it ends."""
    starts: dict[int, list[str]] = {}
    for name in names:  # in order: at one offset the first name whose rest matches wins
        encoded, at = name.encode(), data.find(name.encode())
        while at >= 0:
            if at == 0 or not is_word_byte(data[at - 1]):
                starts.setdefault(at, []).append(name)
            at = data.find(encoded, at + 1)
    end = 0
    for at in sorted(starts):
        if at < end:
            continue  # inside the value of the setting before
        for name in starts[at]:
            rest = _SET_TO.match(data, at + len(name))
            if rest is not None:
                end = rest.end()
                yield at, name, rest.group(1)
                break


def _line_indexes(data: bytes, offsets: Sequence[int]) -> Iterator[int]:
    """The 0-based line of each of `offsets` (ascending), newlines counted once over the file."""
    line = last = 0
    for offset in offsets:
        line += data.count(b"\n", last, offset)
        last = offset
        yield line
_FALSE_TEXTS = frozenset({"False", "None", "0", '""', "''", "()", "[]", "{}"})


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# --------------------------------------------------------------------------- one algorithm's scope


class AlgorithmScope(CodeScope):
    """The code of one algorithm, as its guards select it."""

    prunes = True
    reads_chains = True
    reads_probes = True

    def __init__(
        self, algorithm: str, guards: Guards, words: Iterable[str], module_words: Iterable[str], holders: Iterable[str] | None = None
    ):
        self.algorithm = algorithm
        self.holders = None if holders is None else frozenset(holders)  # the files that hold a word, when known
        self.guards = guards
        self.label = algorithm
        self.module_label = f"{algorithm} module (all of its code)"
        self.words = tuple(sorted(set(words)))
        self._bytes = tuple(w.encode() for w in self.words)
        self._word = WordFinder(self.words)
        self._module = [re.compile(rf"(?:^|_){re.escape(w)}(?:_|$)") for w in sorted(set(module_words))]

    def is_module(self, rel_dir: str, filename: str) -> bool:
        parts = [p for p in rel_dir.replace(os.sep, "/").split("/") if p not in ("", ".")]
        parts.append(filename[:-3] if filename.endswith(".py") else filename)
        return any(pattern.search(part.lower()) for pattern in self._module for part in parts)

    def may_guard(self, data: bytes) -> bool:
        return any(word in data for word in self._bytes)

    def file_may_guard(self, path: str) -> bool:
        return super().file_may_guard(path) if self.holders is None else path in self.holders

    def has_guard(self, text: str) -> bool:
        return self._word.search(text)

    def offsets(self, text: str) -> Iterator[int]:
        return iter(self._word.offsets(text))

    def enters(self, test: ast.expr, block: Block, holds: bool) -> bool:
        return self.guards.selects(test, holds, self.algorithm)

    def may_hold(self, test: ast.expr, block: Block, holds: bool) -> bool:
        return self.guards.possible(test, holds, self.algorithm)


def guards_of(enum: AlgorithmEnum, flags: Mapping[str, Flag], algorithm: str) -> tuple[Guard, ...]:
    """What selects `algorithm`: its predicates, its member, the flags derived from them."""
    order = {m: i for i, m in enumerate(enum.members)}

    def listed(holds: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted((h for h in holds if h != enum.inactive), key=order.__getitem__))

    found = [
        Guard("predicate", p.name, p.at, listed(p.holds_for))
        for p in enum.predicates.values()
        if p.positive and algorithm in p.holds_for
    ]
    found.append(Guard("member", f"{enum.name}.{algorithm}", enum.at, (algorithm,)))
    found += [Guard("flag", f.name, f.at, listed(f.names)) for f in flags.values() if algorithm in f.names]
    return tuple(found)


def module_words(enum: AlgorithmEnum, algorithm: str) -> tuple[str, ...]:
    """The words a speculative module named for `algorithm` has: its own, and that of each `is_word()`
    membership predicate that holds for it (`eagle` for EAGLE3, from `is_eagle()`)."""
    words = {algorithm.lower()}
    for predicate in enum.predicates.values():
        if predicate.positive and algorithm in predicate.holds_for and predicate.name.startswith("is_"):
            words.add(predicate.name[len("is_") :])
    return tuple(sorted(words))


def _modules(cache: SourceCache, scope: AlgorithmScope) -> tuple[str, ...]:
    speculative = cache.srt / "speculative"
    found = []
    for dirpath, dirnames, filenames in os.walk(speculative):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        rel_dir = os.path.relpath(dirpath, speculative)
        for filename in sorted(filenames):
            if filename.endswith(".py") and scope.is_module(rel_dir, filename):
                found.append(cache.rel(Path(dirpath, filename)))
    return tuple(found)


def _with_capabilities(protocol: Protocol, capabilities: Mapping[str, str]) -> Protocol:
    """A member a model is tested for with `isinstance` before use is optional wherever it is used."""
    members = dict(protocol.members)
    for name in capabilities:
        member = members.get(name)
        if member is not None:
            members[name] = ProtocolMember(member.name, tuple(replace(u, required=False) for u in member.uses), member.assigned_at)
    return replace(protocol, members=members)


def read_algorithms(
    run: RunContext,
    extra_consumers: list[Path] | None = None,
    only: Sequence[str] | None = None,
    given: Mapping[str, Protocol] | None = None,
) -> Algorithms:
    """Every algorithm the tree's enum defines (or those of `only`), with its guards and protocol.

    `given`: protocols the caller has read already, by algorithm, taken as they are (the pipeline's
    EAGLE-3 protocol from extract_protocol for EAGLE3, so that its output stays what it was; the
    guards' own reading of EAGLE3 finds a little more, see notes/algorithms.md).  `extra_consumers`
    (files named with --consumer) count whole for every algorithm read here."""
    enum = find_enum(run.cache)
    if enum is None:
        return Algorithms(None, (), ())
    flag_reader = _FlagReader(run, enum)
    flags = flag_reader.read()
    guards = Guards(enum, flags, flag_reader.ambiguous)
    algorithms = []
    for name in enum.algorithms:
        if only is not None and name not in only:
            continue
        selected = guards_of(enum, flags, name)
        if given is not None and name in given:
            modules = _modules(run.cache, AlgorithmScope(name, guards, (), module_words(enum, name)))
            algorithms.append(Algorithm(name, selected, modules, given[name], read_from="given"))
            continue
        words = [g.name.rsplit(".", 1)[-1] for g in selected]
        holders = {str(path) for word in words for path in flag_reader.holding(word)}
        scope = AlgorithmScope(name, guards, words, module_words(enum, name), holders)
        reading = read_scope(run, scope, extra_consumers)
        groups = tuple(dict.fromkeys(g for g in reading.extraction.alternatives if len(g.members) > 1))
        capabilities = dict(sorted(reading.extraction.capabilities.items()))
        algorithms.append(
            Algorithm(
                name=name,
                guards=selected,
                modules=_modules(run.cache, scope),
                protocol=_with_capabilities(reading.protocol, capabilities),
                one_of=groups,
                capabilities=capabilities,
            )
        )
    return Algorithms(enum, tuple(flags.values()), tuple(algorithms))


# --------------------------------------------------------------------------- the run's protocol


def hook_calling(algorithms: Algorithms) -> tuple[str, ...]:
    """The algorithms whose code calls a hook on the target model: what a run checks by default."""
    return tuple(a.name for a in algorithms.algorithms if a.name == EAGLE3 or _target_members(a))


def _target_members(algorithm: Algorithm) -> list[ProtocolMember]:
    """The members its code uses on the target model, with those uses only.  A draft is built for one
    algorithm, and nothing in the tree says which a draft class serves: draft-side uses of algorithms
    other than EAGLE-3 are not held against every draft."""
    out = []
    for member in algorithm.protocol.members.values():
        uses = tuple(u for u in member.uses if u.role == "target")
        if uses:
            out.append(ProtocolMember(member.name, uses, member.assigned_at))
    return out


def run_protocol(
    run: RunContext,
    eagle3: Protocol,
    selected: Sequence[str] = (),
    extra_consumers: list[Path] | None = None,
) -> Protocol:
    """The EAGLE-3 protocol with what the other selected algorithms need of the target model, each member
    tagged with the algorithms needing it.  `selected` empty: every algorithm that calls target hooks.
    A member EAGLE-3 needs keeps EAGLE-3's reading (its roles and requiredness); the others bring their
    target-side uses.  A tree without an algorithm enum (or none but EAGLE-3's code) gives `eagle3`."""
    enum = find_enum(run.cache)
    known = enum.algorithms if enum is not None else (EAGLE3,)
    unknown = [name for name in selected if name.upper() not in known]
    if unknown:
        raise EaglepatchError(
            f"--algorithm {unknown[0]}: this tree defines {', '.join(known)}" + (f" (read from {enum.at})" if enum else "")
        )
    only = tuple(dict.fromkeys(name.upper() for name in selected)) or None  # each protocol read costs: only those asked for
    if only == (EAGLE3,):
        return replace(eagle3, members={name: replace(m, algorithms=(EAGLE3,)) for name, m in eagle3.members.items()})
    read = read_algorithms(run, extra_consumers, only=only, given={EAGLE3: eagle3})
    chosen = only or hook_calling(read) or (EAGLE3,)
    members: dict[str, ProtocolMember] = {}
    if EAGLE3 in chosen:
        members = {name: replace(m, algorithms=(EAGLE3,)) for name, m in eagle3.members.items()}
    for algorithm in read.algorithms:
        if algorithm.name == EAGLE3 or algorithm.name not in chosen:
            continue
        for member in _target_members(algorithm):
            if member.name in eagle3.ignored:
                continue
            if member.name in eagle3.members and EAGLE3 in chosen:
                have = members[member.name]
                members[member.name] = replace(have, algorithms=(*have.algorithms, algorithm.name))
            elif member.name in members:
                have = members[member.name]
                uses = tuple(dict.fromkeys([*have.uses, *member.uses]))
                members[member.name] = replace(have, uses=uses, algorithms=(*have.algorithms, algorithm.name))
            else:
                members[member.name] = replace(member, algorithms=(algorithm.name,))
    consumers = tuple(dict.fromkeys([*eagle3.consumers, *(u.at.split(":")[0] for m in members.values() for u in m.uses)]))
    groups = tuple(
        dict.fromkeys(
            group.members
            for algorithm in read.algorithms
            if algorithm.name in chosen
            for group in algorithm.one_of
            if all(m in members for m in group.members) and not any(members[m].required for m in group.members)
        )
    )
    return replace(eagle3, members=members, consumers=consumers, one_of=groups)
