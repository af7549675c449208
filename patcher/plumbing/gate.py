"""Plumbing: whether what a capture hook writes reaches the forward that runs.

`set_eagle3_layers_to_capture` only records a choice; the capture itself is the forward's.  A hook
that sets `self.capture_aux_hidden_states = True` and `self.model.layers_to_capture = [...]` works
only when the class's `forward` reads the flag and unpacks `hidden_states, aux_hidden_states` from
the backbone exactly once, hands the aux states to `self.logits_processor`, the backbone's `forward`
reads `layers_to_capture` in its decoder-layer loop and returns the pair when it captured, and the
`__init__`s that run set every default those forwards read.  A class whose hook exists but whose
plumbing does not is not EAGLE-3-capable, however "compliant" its members look.

The analysis is pure: CPython's `ast` over classes a `ClassLookup` gives (the class first, then its
in-tree bases in method resolution order) and the class(es) an attribute of `self` is built as.
`SourceClasses` reads them off plain source strings (the tests); `TreeClasses` asks eaglepatch's
own resolver (`analyze/resolve.py`) for them, read-only.  `analyze_plumbing` is the entry point.

Followed: the hook's writes (a flag on `self`, a list of layer ids on the backbone, flags set on
chosen layers, or the backbone's own hook), `hasattr(self.model, "...")` decided against the class
the backbone is; the forward of the class (through its MRO) and of each class its backbone may be,
with the helpers they call on `self` and through `super()`; the `__init__` chain that runs (super()
calls, `Base.__init__(self)`, and a call to `nn.Module.__init__` that skips the bases' own).
Not followed: decoder layers' own code, module-level helpers, anything outside the tree.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from ..analyze.mro import c3_order
from ..errors import EaglepatchError
from ..read.expressions import capture_flag_read
from ..read.statements import sub_blocks, walk, walk_body
from ..records import PlumbingGap

if TYPE_CHECKING:
    from ..analyze.class_index import ClassText
    from ..analyze.resolve import Resolver
    from ..read.text import SourceFile

HOOK = "set_eagle3_layers_to_capture"
_CAPTURE_HOOK = re.compile(r"set_\w+_layers_to_capture")  # SGLang's name for the hook of each algorithm that captures aux states


def is_capture_hook(name: str) -> bool:
    """A hook that chooses the layers whose hidden states the forward hands on (EAGLE-3's, DFlash's, ...)."""
    return _CAPTURE_HOOK.fullmatch(name) is not None

# What a gap is about, in the order the pieces run:
#   hook: the hook writes no capture state (or calls a backbone hook that does not exist);
#   flag-read / flag-default: the class flag the hook sets is never read by the class forward, or no
#     `__init__` that runs sets its default while the forward reads it;
#   selector-read / selector-default: the layer choice (a list attribute or per-layer flags) never
#     reaches the backbone forward, or its default is never set while the forward reads it;
#   capture: the choice is read, but not in a loop over the layers;
#   pair-return: the backbone never returns (hidden, aux), or returns it whether or not it captured;
#   unpack: the class forward does not unpack the pair exactly once, when the backbone returns it;
#   logits-aux: the aux states are not handed to `self.logits_processor`;
#   backbone-call: the class forward never calls (or passes on) the backbone the hook writes on;
#   forward: there is no forward to follow;
#   delegate: the hook hands the call to an inner model whose class has no such hook.
Piece = Literal[
    "hook",
    "flag-read",
    "flag-default",
    "selector-read",
    "selector-default",
    "capture",
    "pair-return",
    "unpack",
    "logits-aux",
    "backbone-call",
    "forward",
    "delegate",
]
# How the hook says which layers to capture: `list`, an attribute holding layer ids on the backbone
# (`layers_to_capture`); `layer-flags`, a flag set on each chosen decoder layer (`_is_layer_to_capture`);
# both; `delegate`, handed to an inner model's own hook; `none`, nothing recognisable is written.
Mechanism = Literal["list", "layer-flags", "list+layer-flags", "delegate", "none"]
WriteKind = Literal["flag", "list", "layer-flag"]
SELF = "self"
FORWARD = "forward"
MAX_DEPTH = 4  # delegations and backbone hooks followed: an inner's inner's inner
_AUX_WORDS = ("aux", "capture")  # a test naming them guards a capture path (`if len(aux_hidden_states) == 0:`)

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class StateWrite:
    """One piece of state the hook writes: on `self` or on the backbone attribute `holder`."""

    holder: str  # "self", or the attribute of self holding the backbone ("model")
    attribute: str  # "capture_aux_hidden_states", "layers_to_capture", or a per-layer flag's name
    kind: WriteKind
    at: str
    copy_of: str = ""  # the value is `self.<copy_of>`: the class's own choice handed on (DeepSeek-like)

    @property
    def spelled(self) -> str:
        target = "self" if self.holder == SELF else f"self.{self.holder}"
        return f"{target}.layers[i].{self.attribute}" if self.kind == "layer-flag" else f"{target}.{self.attribute}"


@dataclass(frozen=True)
class PlumbingReport:
    """What `analyze_plumbing` found for one class: every gap, not the first.

    `inert` lists writes no forward reads beside a layer choice that does reach it (harmless: Qwen3-VL
    also sets the flag on its backbone); `unresolved` what could not be followed (a backbone built
    outside the tree): no verdict is given on it, so `complete` is False."""

    cls: str  # "file:Class"
    hook: str
    mechanism: Mechanism
    writes: tuple[StateWrite, ...] = ()
    gaps: tuple[PlumbingGap, ...] = ()
    inert: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    read: tuple[str, ...] = ()  # the files of every class read: what the verdict depends on (a result cache's key)

    @property
    def complete(self) -> bool:
        return not self.gaps and not self.unresolved

    @property
    def broken(self) -> bool:
        return bool(self.gaps)


# --------------------------------------------------------------------------- the classes analysed


class Walks:
    """What the analysis reads off a function, read once a run: its nodes in `ast.walk` order, the
    calls among them, the ids of those inside a loop, the tests guarding each statement, its reads of
    `self`.  The gate follows the same forwards for every hook, class, view and plan, and a plan's
    patched classes share the methods it does not edit.  Keyed by the function node itself (held, so
    no id is reused): a node is never edited once read (patched_sources edits only the copies it makes)."""

    def __init__(self) -> None:
        self._nodes: dict[FunctionNode, tuple[ast.AST, ...]] = {}
        self._body: dict[FunctionNode, tuple[ast.AST, ...]] = {}
        self._calls: dict[FunctionNode, tuple[ast.Call, ...]] = {}
        self._looped: dict[FunctionNode, frozenset[int]] = {}
        self._guards: dict[FunctionNode, dict[int, list[ast.expr]]] = {}
        self._self_reads: dict[tuple[FunctionNode, str], tuple[_Read, ...]] = {}
        self._self_writes: dict[FunctionNode, _SelfWrites] = {}

    def nodes(self, function: FunctionNode) -> tuple[ast.AST, ...]:
        """`walk(function)`, in its order."""
        found = self._nodes.get(function)
        if found is None:
            found = self._nodes[function] = tuple(walk(function))
        return found

    def body(self, function: FunctionNode) -> tuple[ast.AST, ...]:
        """`walk_body(function)`, in its order: the function's own code (the planner's walk)."""
        found = self._body.get(function)
        if found is None:
            found = self._body[function] = tuple(walk_body(function))
        return found

    def calls(self, function: FunctionNode) -> tuple[ast.Call, ...]:
        """The calls among `nodes(function)`, in its order."""
        found = self._calls.get(function)
        if found is None:
            found = self._calls[function] = tuple(n for n in self.nodes(function) if isinstance(n, ast.Call))
        return found

    def looped(self, function: FunctionNode) -> frozenset[int]:
        """ids of the nodes inside a `for`/`while` body or a comprehension of the function."""
        found = self._looped.get(function)
        if found is None:
            found = self._looped[function] = frozenset(_loop_nodes(function))
        return found

    def guards(self, function: FunctionNode) -> dict[int, list[ast.expr]]:
        """`_guards(function)`: read it, never change it."""
        found = self._guards.get(function)
        if found is None:
            found = self._guards[function] = _guards(function)
        return found

    def self_reads(self, function: FunctionNode, file: str) -> tuple[_Read, ...]:
        """`_own_reads` of the function of `file` (a class's copy keeps its file)."""
        found = self._self_reads.get((function, file))
        if found is None:
            found = self._self_reads[function, file] = tuple(_own_reads(self, function, file))
        return found

    def self_writes(self, function: FunctionNode) -> _SelfWrites:
        """`_own_writes(function)`: what an `__init__` of a chain sets, read once for every class it runs for."""
        found = self._self_writes.get(function)
        if found is None:
            found = self._self_writes[function] = _own_writes(self.nodes(function))
        return found


@dataclass(frozen=True)
class ClassSource:
    """One class as the analysis reads it: its `ast.ClassDef`, line numbers those of its file.  `walks`
    is the run's memo of what is read off its methods, shared by every class of one lookup and by
    their patched copies."""

    name: str
    file: str  # relative to srt (or the test's file name)
    node: ast.ClassDef
    walks: Walks = field(default_factory=Walks, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.file}:{self.name}"

    def method(self, name: str) -> FunctionNode | None:
        """Its own `def name`, in its body or in an `if`/`try` block of its body."""
        for statement in _class_statements(self.node.body):
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == name:
                return statement
        return None

    def attributes(self) -> set[str]:
        """Names its body assigns: class-level defaults (`capture_aux_hidden_states = False`)."""
        found: set[str] = set()
        for statement in _class_statements(self.node.body):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(statement, ast.AnnAssign) else []
            found.update(t.id for target in targets for t in _flat(target) if isinstance(t, ast.Name))
        return found


class ClassLookup(Protocol):
    """Where the analysis gets its classes from (SourceClasses, TreeClasses)."""

    def mro(self, key: str) -> tuple[ClassSource, ...]:
        """The class, then its in-tree bases in method resolution order; empty when it is unknown."""
        ...

    def holds(self, key: str, attribute: str) -> tuple[str, ...] | None:
        """The keys of the classes `self.<attribute>` may be built as; None when not resolved."""
        ...


def _class_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in body:
        yield statement
        if isinstance(statement, ast.If):
            yield from _class_statements(statement.body)
            yield from _class_statements(statement.orelse)
        elif isinstance(statement, ast.Try):
            yield from _class_statements(statement.body)
            for handler in statement.handlers:
                yield from _class_statements(handler.body)
            yield from _class_statements(statement.orelse)
            yield from _class_statements(statement.finalbody)


def _flat(target: ast.expr) -> list[ast.expr]:
    return [e for elt in target.elts for e in _flat(elt)] if isinstance(target, (ast.Tuple, ast.List)) else [target]


class SourceClasses:
    """Classes read off source strings, `{file name: text}`: bases and backbones found by class name
    (the same file first).  What the tests and small fixtures need, no import resolution."""

    def __init__(self, files: Mapping[str, str]):
        self._classes: dict[str, ClassSource] = {}
        self._by_name: dict[str, list[str]] = {}
        walks = Walks()
        for file, text in files.items():
            for node in walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef):
                    found = ClassSource(node.name, file, node, walks)
                    self._classes[found.key] = found
                    self._by_name.setdefault(node.name, []).append(found.key)

    def key(self, name: str, file: str | None = None) -> str | None:
        keys = self._by_name.get(name, [])
        return next((k for k in keys if k.startswith(f"{file}:")), keys[0] if keys else None)

    def _bases(self, key: str) -> list[str]:
        cls = self._classes[key]
        out = []
        for base in cls.node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            found = self.key(name, cls.file) if name else None
            if found is not None:
                out.append(found)
        return out

    def mro(self, key: str) -> tuple[ClassSource, ...]:
        if key not in self._classes:
            return ()
        return tuple(self._classes[k] for k in c3_order(key, self._bases))

    def holds(self, key: str, attribute: str) -> tuple[str, ...] | None:
        """`self.<attribute> = Name(...)` in an `__init__` of the MRO, or in a method whose return it is."""
        mro = self.mro(key)
        found: list[str] = []
        for cls in mro:
            init = cls.method("__init__")
            for node in walk(init) if init is not None else ():
                if isinstance(node, ast.Assign) and any(_self_attr(t) == attribute for t in node.targets):
                    found += self._built(node.value, mro, cls.file)
        return tuple(dict.fromkeys(found)) or None

    def _built(self, value: ast.expr, mro: tuple[ClassSource, ...], file: str) -> list[str]:
        if isinstance(value, ast.IfExp):
            return self._built(value.body, mro, file) + self._built(value.orelse, mro, file)
        if not isinstance(value, ast.Call):
            return []
        if isinstance(value.func, ast.Name):
            found = self.key(value.func.id, file)
            return [found] if found else []
        helper = _self_attr(value.func)
        method = _resolve(mro, helper) if helper else None
        if method is None:
            return []
        return [k for node in walk(method.node) if isinstance(node, ast.Return) and node.value is not None for k in self._built(node.value, mro, file)]


# --------------------------------------------------------------------------- reading code


@dataclass(frozen=True)
class _Method:
    owner: ClassSource
    node: FunctionNode

    @property
    def at(self) -> str:
        return f"{self.owner.file}:{self.node.lineno}"

    @property
    def label(self) -> str:
        return f"{self.owner.name}.{self.node.name}"

    @property
    def nodes(self) -> tuple[ast.AST, ...]:
        """`ast.walk` of the method, read once a run."""
        return self.owner.walks.nodes(self.node)

    @property
    def calls(self) -> tuple[ast.Call, ...]:
        return self.owner.walks.calls(self.node)

    @property
    def guards(self) -> dict[int, list[ast.expr]]:
        return self.owner.walks.guards(self.node)


def _self_attr(node: ast.AST | None) -> str | None:
    """`self.X` -> "X"."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == SELF:
        return node.attr
    return None


def _held_attr(node: ast.AST | None) -> tuple[str, str] | None:
    """`self.A.X` -> ("A", "X")."""
    if isinstance(node, ast.Attribute):
        holder = _self_attr(node.value)
        if holder is not None:
            return holder, node.attr
    return None


def _layer_holder(node: ast.AST | None) -> str | None:
    """`self.layers[i]` -> "self", `self.A.layers[i]` -> "A": a decoder layer the hook marks."""
    if not isinstance(node, ast.Subscript):
        return None
    if _self_attr(node.value) is not None:
        return SELF
    held = _held_attr(node.value)
    return held[0] if held is not None else None


def _constant_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call_named(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _resolve(mro: Sequence[ClassSource], name: str, after: int = -1) -> _Method | None:
    """The `def name` the MRO gives, looking only past position `after` (super())."""
    for cls in mro[after + 1 :]:
        node = cls.method(name)
        if node is not None:
            return _Method(cls, node)
    return None


def method_of(mro: Sequence[ClassSource], name: str) -> tuple[ClassSource, FunctionNode] | None:
    """The `def name` the MRO gives, with the class that defines it (what a fix must go into)."""
    found = _resolve(mro, name)
    return (found.owner, found.node) if found is not None else None


def reached_methods(mro: Sequence[ClassSource], name: str) -> tuple[tuple[ClassSource, FunctionNode], ...]:
    """The `def name` the MRO gives and the methods it calls on self or through super(), transitively:
    the code that runs when it is called, as the analysis follows it."""
    start = _resolve(mro, name)
    return tuple((m.owner, m.node) for m in _reach(mro, start)) if start is not None else ()


def _position(mro: Sequence[ClassSource], owner: ClassSource) -> int:
    return next((i for i, cls in enumerate(mro) if cls.key == owner.key), -1)


def _super_target(call: ast.Call, mro: Sequence[ClassSource], owner: ClassSource) -> tuple[str, int] | None:
    """`super().m(...)` / `super(X, self).m(...)`: the method name and the MRO position searched past."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and _call_named(func.value, "super")):
        return None
    assert isinstance(func.value, ast.Call)
    args = func.value.args
    if args and isinstance(args[0], ast.Name):
        named = next((i for i, cls in enumerate(mro) if cls.name == args[0].id), None)
        return (func.attr, named) if named is not None else None
    return func.attr, _position(mro, owner)


def _reach(mro: Sequence[ClassSource], start: _Method) -> list[_Method]:
    """`start` and the methods it calls on self or through super(), transitively: the path that runs."""
    out: list[_Method] = []
    seen: set[tuple[str, str, int]] = set()
    todo = [start]
    while todo:
        method = todo.pop(0)
        ident = (method.owner.key, method.node.name, method.node.lineno)
        if ident in seen:
            continue
        seen.add(ident)
        out.append(method)
        for node in method.calls:
            helper = _self_attr(node.func)
            found = _resolve(mro, helper) if helper is not None else None
            target = _super_target(node, mro, method.owner)
            if target is not None:
                found = _resolve(mro, target[0], target[1])
            if found is not None:
                todo.append(found)
    return out


def _walk(methods: Iterable[_Method]) -> Iterator[tuple[_Method, ast.AST]]:
    for method in methods:
        for node in method.nodes:
            yield method, node


@dataclass(frozen=True)
class _Read:
    attribute: str
    guarded: bool  # getattr with a default, or under hasattr: no default needed
    in_loop: bool
    at: str


def _self_reads(methods: Sequence[_Method]) -> list[_Read]:
    """`self.X` read, `getattr(self, "X", ...)` and `hasattr(self, "X")`, with whether each sits in a
    loop (or comprehension) and whether it needs a default."""
    out = [read for method in methods for read in method.owner.walks.self_reads(method.node, method.owner.file)]
    return _hasattr_guarded(methods, out)


def _own_reads(walks: Walks, function: FunctionNode, file: str) -> Iterator[_Read]:
    """_self_reads of one function (of `file`), before a `hasattr` elsewhere on the path guards them."""
    loops = walks.looped(function)
    for node in walks.nodes(function):
        attr = _self_attr(node)
        if attr is not None and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            yield _Read(attr, False, id(node) in loops, f"{file}:{getattr(node, 'lineno', function.lineno)}")
        elif (_call_named(node, "getattr") or _call_named(node, "hasattr")) and isinstance(node, ast.Call) and node.args:
            if isinstance(node.args[0], ast.Name) and node.args[0].id == SELF:
                name = _constant_str(node.args[1]) if len(node.args) > 1 else None
                if name is not None:
                    guarded = _call_named(node, "hasattr") or len(node.args) > 2
                    yield _Read(name, guarded, id(node) in loops, f"{file}:{getattr(node, 'lineno', function.lineno)}")


def _hasattr_guarded(methods: Sequence[_Method], reads: list[_Read]) -> list[_Read]:
    """A read `hasattr(self, "X")` checks first needs no default: `hasattr(self, "X") and self.X`."""
    checked = {r.attribute for r in reads if r.guarded}
    return [_Read(r.attribute, r.guarded or r.attribute in checked, r.in_loop, r.at) for r in reads]


def _attribute_reads(methods: Sequence[_Method], name: str) -> list[_Read]:
    """`<anything>.name` read, or `getattr(<anything>, "name", ...)`: a per-layer flag read."""
    out: list[_Read] = []
    for method in methods:
        loops = method.owner.walks.looped(method.node)
        for node in method.nodes:
            if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load):
                out.append(_Read(name, False, id(node) in loops, f"{method.owner.file}:{getattr(node, 'lineno', method.node.lineno)}"))
            elif (_call_named(node, "getattr") or _call_named(node, "hasattr")) and isinstance(node, ast.Call) and len(node.args) > 1:
                if _constant_str(node.args[1]) == name:
                    out.append(_Read(name, True, id(node) in loops, f"{method.owner.file}:{getattr(node, 'lineno', method.node.lineno)}"))
    return out


def _loop_nodes(function: FunctionNode) -> set[int]:
    """ids of the nodes inside a `for`/`while` body or a comprehension of the function."""
    inside: set[int] = set()
    for node in walk(function):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for statement in [*node.body, *node.orelse]:
                inside.update(id(n) for n in walk(statement))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inside.update(id(n) for n in walk(node))
    return inside


def _guards(function: FunctionNode) -> dict[int, list[ast.expr]]:
    """For each statement (by id), the tests that guard it: those of the `if`s around it, and of an
    earlier `if ...: return` of its block (what follows it runs only when the test failed)."""
    found: dict[int, list[ast.expr]] = {}

    def visit(block: Sequence[ast.stmt], active: list[ast.expr]) -> None:
        current = list(active)
        for statement in block:
            found[id(statement)] = current
            if isinstance(statement, ast.If):
                visit(statement.body, [*current, statement.test])
                visit(statement.orelse, [*current, statement.test])
                if _exits(statement.body) or _exits(statement.orelse):
                    current = [*current, statement.test]
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            else:
                for part in sub_blocks(statement):
                    visit(part, current)

    visit(function.body, [])
    return found


def _exits(block: Sequence[ast.stmt]) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise))


def _says_captured(test: ast.expr, names: set[str]) -> bool:
    """The test names one of `names` (a local, an attribute, a string) or says aux/capture."""
    for node in walk(test):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else _constant_str(node)
        if word is not None and (word in names or any(w in word.lower() for w in _AUX_WORDS)):
            return True
    return False


def _max_on_a_path(block: Sequence[ast.stmt], counted: Callable[[ast.stmt], bool]) -> int:
    """How many statements `counted` holds for can run one after another in one call: the branches of
    an `if` are one or the other; a loop's body is counted once."""
    total = 0
    for statement in block:
        if counted(statement):
            total += 1
        elif isinstance(statement, ast.If):
            total += max(_max_on_a_path(statement.body, counted), _max_on_a_path(statement.orelse, counted))
        elif isinstance(statement, ast.Try):
            handlers = max((_max_on_a_path(h.body, counted) for h in statement.handlers), default=0)
            total += _max_on_a_path(statement.body, counted) + handlers + _max_on_a_path(statement.orelse, counted)
            total += _max_on_a_path(statement.finalbody, counted)
        elif isinstance(statement, ast.Match):
            total += max((_max_on_a_path(c.body, counted) for c in statement.cases), default=0)
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            total += sum(_max_on_a_path(part, counted) for part in sub_blocks(statement))
    return total


# --------------------------------------------------------------------------- the hook's writes


@dataclass(frozen=True)
class _HookCall:
    holder: str  # `self.<holder>.<hook>(...)`
    at: str


Decide = Callable[[ast.expr], "bool | None"]


def _statements(block: Sequence[ast.stmt], decide: Decide) -> Iterator[ast.stmt]:
    """Every statement of the block and the blocks under it, an `if` whose test `decide` settles
    followed into the branch that runs only."""
    for statement in block:
        yield statement
        if isinstance(statement, ast.If):
            verdict = decide(statement.test)
            if verdict is not False:
                yield from _statements(statement.body, decide)
            if verdict is not True:
                yield from _statements(statement.orelse, decide)
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for part in sub_blocks(statement):
                yield from _statements(part, decide)


def _kind_of(value: ast.expr | None) -> WriteKind:
    return "flag" if isinstance(value, ast.Constant) and isinstance(value.value, bool) else "list"


def _hook_writes(mro: Sequence[ClassSource], hook: _Method, hook_name: str, decide: Decide) -> tuple[list[StateWrite], list[_HookCall]]:
    """What the hook (and the helpers it calls on self) writes, and the backbone hooks it calls."""
    writes: list[StateWrite] = []
    calls: list[_HookCall] = []
    for method in _reach(mro, hook):
        aliases: dict[str, str] = {}  # `inner = self.language_model`: how apply's delegations name the inner
        for statement in _statements(method.node.body, decide):
            at = f"{method.owner.file}:{statement.lineno}"
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                held = _self_attr(statement.value)
                if held is not None:
                    aliases[statement.targets[0].id] = held
            if isinstance(statement, ast.Assign):
                pairs: list[tuple[ast.expr, ast.expr | None]] = [(t, statement.value) for target in statement.targets for t in _flat(target)]
            elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
                pairs = [(statement.target, statement.value)]
            elif isinstance(statement, (ast.Expr, ast.Return)) and isinstance(statement.value, ast.Call):
                call = statement.value  # `return self.language_model.<hook>(layer_ids)`: how a delegation is written
                pairs = []
                if _call_named(call, "setattr") and len(call.args) == 3:
                    name = _constant_str(call.args[1])
                    if name is not None:
                        writes += _classified(call.args[0], name, call.args[2], at)
                elif isinstance(call.func, ast.Attribute) and call.func.attr == hook_name:
                    receiver = call.func.value
                    holder = _self_attr(receiver) or (aliases.get(receiver.id) if isinstance(receiver, ast.Name) else None)
                    if holder is not None:
                        calls.append(_HookCall(holder, at))
            else:
                continue
            for target, value in pairs:
                if isinstance(target, ast.Attribute):
                    writes += _classified(target.value, target.attr, value, at)
    return writes, calls


def _classified(owner: ast.expr, attribute: str, value: ast.expr | None, at: str) -> list[StateWrite]:
    if isinstance(owner, ast.Name) and owner.id == SELF:
        return [StateWrite(SELF, attribute, _kind_of(value), at)]
    holder = _self_attr(owner)
    if holder is not None:
        copied = _self_attr(value) if isinstance(value, ast.Attribute) else None
        return [StateWrite(holder, attribute, _kind_of(value), at, copied or "")]
    layer = _layer_holder(owner)
    if layer is not None:
        return [StateWrite(layer, attribute, "layer-flag", at)]
    return []


def _has_member(mro: Sequence[ClassSource], name: str) -> bool:
    return any(cls.method(name) is not None or name in cls.attributes() for cls in mro)


def _decider(classes: ClassLookup, own: Sequence[ClassSource], view: Mapping[str, str]) -> Decide:
    """Settles `hasattr(self.A, "m")` (and `not ...` of it) against the class `view` says A is."""

    def decide(test: ast.expr) -> bool | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = decide(test.operand)
            return None if inner is None else not inner
        if not (_call_named(test, "hasattr") and isinstance(test, ast.Call) and len(test.args) == 2):
            return None
        name = _constant_str(test.args[1])
        if name is None:
            return None
        subject = test.args[0]
        if isinstance(subject, ast.Name) and subject.id == SELF:
            return _has_member(own, name) or None  # an attribute set anywhere may be there
        holder = _self_attr(subject)
        if holder is None or holder not in view:
            return None
        return _has_member(classes.mro(view[holder]), name)

    return decide


# --------------------------------------------------------------------------- __init__ chains


@dataclass(frozen=True)
class _SelfWrites:
    """What one function assigns (or `setattr`s) on `self`, and on an attribute of it."""

    own: frozenset[str]  # self.X
    held: frozenset[tuple[str, str]]  # self.A.X


def _own_writes(nodes: Iterable[ast.AST]) -> _SelfWrites:
    own: set[str] = set()
    held: set[tuple[str, str]] = set()
    for node in nodes:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _flat(target)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif _call_named(node, "setattr") and isinstance(node, ast.Call) and len(node.args) == 3:
            name = _constant_str(node.args[1])
            if name is not None and isinstance(node.args[0], ast.Name) and node.args[0].id == SELF:
                own.add(name)
        for target in targets:
            attr, pair = _self_attr(target), _held_attr(target)
            if attr is not None:
                own.add(attr)
            elif pair is not None:
                held.add(pair)
    return _SelfWrites(frozenset(own), frozenset(held))


@dataclass(frozen=True)
class _Defaults:
    own: frozenset[str]  # self.X set by an __init__ that runs, or a class-level attribute
    held: frozenset[tuple[str, str]]  # self.A.X set there
    at: str  # the first __init__ that runs (or the class header)


def _init_defaults(mro: Sequence[ClassSource]) -> _Defaults:
    """What the `__init__` chain that runs sets: the first `__init__` of the MRO, then what it calls:
    super().__init__ (the next one), Base.__init__(self) (that base's; `nn.Module.__init__` ends the
    chain), and the methods it calls on self."""
    own: set[str] = {name for cls in mro for name in cls.attributes()}
    held: set[tuple[str, str]] = set()
    start = _resolve(mro, "__init__")
    at = start.at if start is not None else f"{mro[0].file}:{mro[0].node.lineno}" if mro else ""
    todo = [start] if start is not None else []
    seen: set[tuple[str, str, int]] = set()
    while todo:
        method = todo.pop()
        ident = (method.owner.key, method.node.name, method.node.lineno)
        if ident in seen:
            continue
        seen.add(ident)
        writes = method.owner.walks.self_writes(method.node)
        own |= writes.own
        held |= writes.held
        for call in method.calls:
            todo += _init_callees(mro, method, call)
    return _Defaults(frozenset(own), frozenset(held), at)


def _init_callees(mro: Sequence[ClassSource], method: _Method, call: ast.Call) -> list[_Method]:
    target = _super_target(call, mro, method.owner)
    if target is not None:
        found = _resolve(mro, target[0], target[1])
        return [found] if found is not None else []
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "__init__" and call.args:
        first = call.args[0]
        if isinstance(first, ast.Name) and first.id == SELF:  # Base.__init__(self, ...)
            base = func.value.attr if isinstance(func.value, ast.Attribute) else func.value.id if isinstance(func.value, ast.Name) else None
            position = next((i for i, cls in enumerate(mro) if cls.name == base), None)
            if position is None:
                return []  # nn.Module.__init__(self): no in-tree __init__ runs after it
            found = _resolve(mro, "__init__", position - 1)
            return [found] if found is not None else []
    helper = _self_attr(func)
    found = _resolve(mro, helper) if helper is not None and helper != "__init__" else None
    return [found] if found is not None else []


# --------------------------------------------------------------------------- the analysis


class _Findings:
    """Gaps, inert writes and what was not followed, each said once."""

    def __init__(self) -> None:
        self.gaps: dict[tuple[str, str], PlumbingGap] = {}
        self.inert: dict[str, None] = {}
        self.unresolved: dict[str, None] = {}

    def gap(self, piece: Piece | str, why: str, at: str) -> None:
        """One gap per piece and place: two classes the backbone may be built as that share a forward
        share its gap (the first one's words are kept)."""
        self.gaps.setdefault((piece, at), PlumbingGap(piece, why, at))


def analyze_plumbing(classes: ClassLookup, key: str, hook: str = HOOK) -> PlumbingReport:
    """Every missing or broken piece of the plumbing behind the class's `hook` ("file:Class" `key`),
    and the mechanism the hook uses.  The class must have the hook (its own or inherited); a class
    without one gets a `hook` gap.  The tree's own classes (a TreeClasses) are judged once a run per
    (class, hook): the gate, the planner and the hook library ask the same question."""
    memo = classes.reports if isinstance(classes, TreeClasses) else None
    if memo is not None and (key, hook) in memo:
        return memo[key, hook]
    recorder = _Recorder(classes)
    report = _analyze(recorder, key, hook, 0)
    report = replace(report, read=tuple(sorted(recorder.files)))
    if memo is not None:
        memo[key, hook] = report
    return report


class _Recorder:
    """A ClassLookup that notes the file of every class it hands out."""

    def __init__(self, classes: ClassLookup):
        self.classes = classes
        self.files: set[str] = set()

    def mro(self, key: str) -> tuple[ClassSource, ...]:
        found = self.classes.mro(key)
        self.files.update(cls.file for cls in found)
        return found

    def holds(self, key: str, attribute: str) -> tuple[str, ...] | None:
        return self.classes.holds(key, attribute)


def _analyze(classes: ClassLookup, key: str, hook: str, depth: int) -> PlumbingReport:
    mro = classes.mro(key)
    found = _Findings()
    method = _resolve(mro, hook) if mro else None
    if method is None:
        found.gap("hook", f"{key.rpartition(':')[2]} has no {hook}", f"{mro[0].file}:{mro[0].node.lineno}" if mro else key)
        return _plumbing_report(key, hook, "none", [], found)
    views = _views(classes, key, mro, method, hook, found)
    all_writes: list[StateWrite] = []
    mechanisms: list[Mechanism] = []
    for view in views:
        writes, calls = _hook_writes(mro, method, hook, _decider(classes, mro, view))
        own_flags = [w for w in writes if w.holder == SELF and w.kind == "flag"]
        if calls and not own_flags and not any(w.holder == SELF for w in writes):
            mechanisms.append("delegate")
            _check_delegation(classes, mro, hook, calls, view, found, depth)
            continue
        for call in calls:
            writes += _backbone_hook_writes(classes, call, view, hook, found)
        all_writes += writes
        mechanisms.append(_mechanism(writes))
        if not [w for w in writes if w.kind != "flag"] and not own_flags:
            found.gap("hook", f"{method.label} writes no capture state (no flag, no layers to capture)", method.at)
            continue
        _check_class(classes, mro, writes, view, found)
    mechanism: Mechanism = next((m for m in mechanisms if m != "none"), "none")
    return _plumbing_report(key, hook, mechanism, all_writes, found)


def _plumbing_report(key: str, hook: str, mechanism: Mechanism, writes: list[StateWrite], found: _Findings) -> PlumbingReport:
    return PlumbingReport(
        cls=key,
        hook=hook,
        mechanism=mechanism,
        writes=tuple(dict.fromkeys(writes)),
        gaps=tuple(found.gaps.values()),
        inert=tuple(found.inert),
        unresolved=tuple(found.unresolved),
    )


def _mechanism(writes: Sequence[StateWrite]) -> Mechanism:
    kinds = {w.kind for w in writes}
    if "list" in kinds and "layer-flag" in kinds:
        return "list+layer-flags"
    if "layer-flag" in kinds:
        return "layer-flags"
    return "list" if "list" in kinds else "none"


def _views(classes: ClassLookup, key: str, mro: Sequence[ClassSource], method: _Method, hook: str, found: _Findings) -> list[dict[str, str]]:
    """One assignment of a class to each backbone attribute the hook writes on, per combination of
    the classes each may be built as (usually one)."""
    writes, calls = _hook_writes(mro, method, hook, lambda test: None)
    attributes = list(dict.fromkeys([w.holder for w in writes if w.holder != SELF] + [c.holder for c in calls]))
    holders: dict[str, tuple[str, ...]] = {}
    for attribute in attributes:
        held = classes.holds(key, attribute)
        if held is None:
            found.unresolved[f"self.{attribute}: the class it is built as is not resolved"] = None
            continue
        holders[attribute] = held
    names = list(holders)
    views = [dict(zip(names, choice)) for choice in itertools.product(*(holders[n] for n in names))]
    return views or [{}]


def _backbone_hook_writes(classes: ClassLookup, call: _HookCall, view: Mapping[str, str], hook: str, found: _Findings) -> list[StateWrite]:
    """`self.model.set_eagle3_layers_to_capture(ids)` beside the class's own flag: the backbone's hook
    writes on itself, which is `self.model` seen from the class."""
    if call.holder not in view:
        return []
    backbone = classes.mro(view[call.holder])
    method = _resolve(backbone, hook)
    if method is None:
        found.gap("hook", f"calls self.{call.holder}.{hook}, which {_name(view[call.holder])} does not define", call.at)
        return []
    writes, _ = _hook_writes(backbone, method, hook, _decider(classes, backbone, {}))
    return [StateWrite(call.holder if w.holder == SELF else f"{call.holder}.{w.holder}", w.attribute, w.kind, w.at) for w in writes]


def _name(key: str) -> str:
    return key.rpartition(":")[2]


def _check_delegation(
    classes: ClassLookup, mro: Sequence[ClassSource], hook: str, calls: Sequence[_HookCall], view: Mapping[str, str], found: _Findings, depth: int
) -> None:
    """The hook hands the call on to an inner model: its class must have the hook, and its plumbing
    must hold; the class's own forward must reach that model."""
    forward = _resolve(mro, FORWARD)
    path = _reach(mro, forward) if forward is not None else []
    for call in calls:
        if call.holder not in view:
            continue
        inner = view[call.holder]
        if forward is not None and not _references(path, call.holder):
            found.gap("backbone-call", f"{forward.label} never calls self.{call.holder}, which the hook hands the call to", forward.at)
        if not classes.mro(inner) or _resolve(classes.mro(inner), hook) is None:
            branches = classes.holds(mro[0].key, call.holder) or ()
            if any(classes.mro(other) and _resolve(classes.mro(other), hook) is not None for other in branches):
                # another branch of __init__ builds a class that has it: the delegation raises AttributeError
                # on this one, as the member's plan says (provided by / not by), and works on the other
                found.inert[f"self.{call.holder} as {_name(inner)}: has no {hook}, the delegation raises there"] = None
            else:
                found.gap("delegate", f"hands {hook} to self.{call.holder}, and {_name(inner)} has no {hook}", call.at)
            continue
        if depth >= MAX_DEPTH:
            found.unresolved[f"self.{call.holder}: delegations nested deeper than {MAX_DEPTH}"] = None
            continue
        report = _analyze(classes, inner, hook, depth + 1)
        for gap in report.gaps:
            found.gap(gap.piece, f"self.{call.holder} ({_name(inner)}): {gap.why}", gap.at)
        pair = _backbone_pair(classes.mro(inner), report)
        if pair is not None and forward is not None:  # handed to a bare backbone: this forward takes its pair
            unpacks = _check_unpack(forward, path, call.holder, set(), pair, _name(inner), found)
            if unpacks.count and unpacks.gated_by:  # the hook sets no flag of its own (else it is no delegation)
                found.gap(
                    "flag-read",
                    f"{forward.label} unpacks the pair only when self.{unpacks.gated_by[0]} is set, which the hook never sets"
                    f" (it hands the layers to self.{call.holder} alone)",
                    forward.at,
                )
        for note in report.inert:
            found.inert[f"self.{call.holder} ({_name(inner)}): {note}"] = None
        for note in report.unresolved:
            found.unresolved[f"self.{call.holder} ({_name(inner)}): {note}"] = None


def _backbone_pair(mro: Sequence[ClassSource], report: PlumbingReport) -> _Pair | None:
    """What a class a hook is handed to returns, when it is a bare backbone: its hook marks its own
    layers and its forward makes no logits (it returns the pair for its caller to unpack); None for
    a model that makes its own logits, or when its forward cannot be read."""
    if not any(w.holder == SELF and w.kind != "flag" for w in report.writes):
        return None
    forward = _resolve(mro, FORWARD)
    if forward is None or any(_self_attr(n.func) == "logits_processor" for _, n in _walk(_reach(mro, forward)) if isinstance(n, ast.Call)):
        return None
    return _pair_return(mro, forward, {w.attribute for w in report.writes})


def _references(path: Sequence[_Method], holder: str) -> bool:
    return any(_self_attr(node) == holder for _, node in _walk(path))


def _check_class(classes: ClassLookup, mro: Sequence[ClassSource], writes: Sequence[StateWrite], view: Mapping[str, str], found: _Findings) -> None:
    """The class's own forward reads its flag and unpacks what the backbone returns; each backbone
    the hook writes on reads the layer choice (or the class is its own backbone)."""
    forward = _resolve(mro, FORWARD)
    if forward is None:
        found.gap("forward", f"{mro[0].name} has no forward to read what the hook writes", f"{mro[0].file}:{mro[0].node.lineno}")
        return
    path = _reach(mro, forward)
    reads = _self_reads(path)
    defaults = _init_defaults(mro)
    own = [w for w in writes if w.holder == SELF]
    flags = {w.attribute for w in own if w.kind == "flag"}
    unpacks: list[_Unpacks] = []
    handed_on = {w.copy_of for w in writes if w.copy_of and w.holder in view}
    kept = [w for w in own if w.kind != "flag" and w.attribute not in handed_on]
    if kept:  # the class marks its own layers: it is the backbone
        _check_backbone(mro, SELF, kept, frozenset(), found)
    for write in _first_per_attribute(w for w in own if w.kind != "flag" and w.attribute in handed_on):
        found.inert[f"{write.spelled} ({write.at}): the class's copy of the layer choice it hands its backbone"] = None
    for holder in dict.fromkeys(w.holder for w in writes if w.holder != SELF and "." not in w.holder):
        if holder not in view:
            continue
        chosen = [w for w in writes if w.holder == holder]
        backbone = classes.mro(view[holder])
        if not backbone:
            found.unresolved[f"self.{holder}: {view[holder]} is not in the tree"] = None
            continue
        given = frozenset(x for a, x in defaults.held if a == holder)
        pair = _check_backbone(backbone, holder, chosen, given, found)
        unpacks.append(_check_unpack(forward, path, holder, flags, pair, _name(view[holder]), found))
    for write in (w for w in writes if "." in w.holder):
        found.unresolved[f"{write.spelled} ({write.at}): a backbone's backbone is not followed"] = None
    for write in _first_per_attribute(w for w in own if w.kind == "flag"):
        got = [r for r in reads if r.attribute == write.attribute]
        if got:
            if any(not r.guarded for r in got) and write.attribute not in defaults.own:
                found.gap("flag-default", f"{forward.label} reads self.{write.attribute}, which no __init__ that runs sets", defaults.at)
            continue
        others = sorted({a for u in unpacks for a in u.gated_by if a not in flags})
        if others:
            found.gap("flag-read", f"the hook sets {write.spelled} ({write.at}); {forward.label} unpacks under self.{others[0]} instead", forward.at)
        elif not any(u.count for u in unpacks):
            found.gap("flag-read", f"the hook sets {write.spelled} ({write.at}); {forward.label} never reads it", forward.at)
        else:  # the forward unpacks on what the backbone returns (`isinstance(hidden_states, tuple)`)
            found.inert[f"{write.spelled} ({write.at}): {forward.label} never reads it, and unpacks on what the backbone returns"] = None


def _first_per_attribute(writes: Iterable[StateWrite]) -> list[StateWrite]:
    """One write per attribute (a hook sets the flag in both branches of `if layer_ids is None`)."""
    out: dict[str, StateWrite] = {}
    for write in writes:
        out.setdefault(write.attribute, write)
    return list(out.values())


@dataclass(frozen=True)
class _Pair:
    """What the backbone forward returns: whether a (hidden, aux) pair, and whether only when it captured."""

    returned: bool
    guarded: bool
    at: str


@dataclass(frozen=True)
class _Unpacks:
    """How the class forward unpacks the backbone's result."""

    count: int  # on one path through one call
    gated_by: tuple[str, ...]  # self attributes the tests guarding an unpack read


def _check_backbone(mro: Sequence[ClassSource], holder: str, writes: Sequence[StateWrite], given: frozenset[str], found: _Findings) -> _Pair | None:
    """The backbone's forward reads the layer choice the hook writes, in its layer loop, and returns the
    pair when it captured; its __init__ chain (or the class's, `self.model.X = ...`) sets the defaults."""
    forward = _resolve(mro, FORWARD)
    spelled = "self" if holder == SELF else f"self.{holder}"
    if forward is None:
        found.gap("forward", f"{mro[0].name} ({spelled}) has no forward", f"{mro[0].file}:{mro[0].node.lineno}")
        return None
    path = _reach(mro, forward)
    reads = _self_reads(path)
    defaults = _init_defaults(mro)
    choice = _first_per_attribute(w for w in writes if w.kind != "flag")
    reaching: list[StateWrite] = []
    choice_reads: list[_Read] = []
    for write in choice:
        got = [r for r in reads if r.attribute == write.attribute] if write.kind == "list" else _attribute_reads(path, write.attribute)
        if got:
            reaching.append(write)
            choice_reads += got
    if choice and not reaching:
        names = ", ".join(w.spelled for w in choice)
        found.gap("selector-read", f"the hook sets {names} ({choice[0].at}); {forward.label} never reads it{_own_choice(path, reads)}", forward.at)
    for write in _first_per_attribute(writes):
        if write in reaching:
            continue
        if write.kind == "flag" and any(r.attribute == write.attribute for r in reads):
            reaching.append(write)
        elif reaching or (not choice and write.kind == "flag"):
            found.inert[f"{write.spelled} ({write.at}): {forward.label} never reads it"] = None
    for write in reaching:
        got = [r for r in reads if r.attribute == write.attribute] if write.kind != "layer-flag" else []
        if any(not r.guarded for r in got) and write.attribute not in defaults.own and write.attribute not in given:
            found.gap("selector-default", f"{forward.label} reads self.{write.attribute}, which no __init__ of {mro[0].name} that runs sets", defaults.at)
    if choice_reads and not any(r.in_loop for r in choice_reads):
        found.gap("capture", f"{forward.label} reads the layer choice, but not in its loop over the layers", forward.at)
    return _pair_return(mro, forward, {w.attribute for w in writes})


def _own_choice(path: Sequence[_Method], reads: Sequence[_Read]) -> str:
    """What the backbone selects layers by instead, when it is readable: `getattr(layer, "_flag")`."""
    for _, node in _walk(path):
        name = capture_flag_read(node)
        if name is not None:
            return f" (it selects layers by the per-layer flag {name})"
    listed = [r.attribute for r in reads if "capture" in r.attribute]
    return f" (it reads self.{listed[0]})" if listed else ""


def _pair_return(mro: Sequence[ClassSource], forward: _Method, hook_state: set[str]) -> _Pair:
    """Whether the forward returns (hidden, aux), and only under a test that says it captured: its own
    returns, and those of a helper or super() method whose result it returns as it is (a result it
    unpacks first, `hidden_states, self.extra = output`, is not handed on)."""
    pairs: list[tuple[str, bool]] = []
    todo: list[tuple[_Method, list[ast.expr]]] = [(forward, [])]
    seen: set[tuple[str, int]] = set()
    while todo:
        method, outer = todo.pop(0)
        if (method.owner.key, method.node.lineno) in seen:
            continue
        seen.add((method.owner.key, method.node.lineno))
        guards = method.guards
        unpacked = {n.value.id for n in method.nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and isinstance(n.targets[0], (ast.Tuple, ast.List))}
        bound = {t.id: n.value for n in method.nodes if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for node in method.nodes:
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            tests = [*outer, *guards.get(id(node), [])]
            for value, extra in _returned(node.value):
                if isinstance(value, ast.Tuple) and len(value.elts) == 2:
                    second = value.elts[1]
                    names = set(hook_state) | ({second.id} if isinstance(second, ast.Name) else set())
                    pairs.append((f"{method.owner.file}:{node.lineno}", any(_says_captured(t, names) for t in [*tests, *extra])))
                    continue
                if isinstance(value, ast.Name) and value.id not in unpacked and isinstance(bound.get(value.id), ast.Call):
                    value = bound[value.id]
                callee = _callee(mro, method, value) if isinstance(value, ast.Call) else None
                if callee is not None:
                    todo.append((callee, [*tests, *extra]))
    if not pairs:
        return _Pair(False, False, forward.at)
    return _Pair(True, all(guarded for _, guarded in pairs), pairs[0][0])


def _returned(value: ast.expr) -> list[tuple[ast.expr, list[ast.expr]]]:
    """The values a return can give, each with the tests of the conditional expressions choosing it."""
    if isinstance(value, ast.IfExp):
        return [(v, [value.test, *tests]) for branch in (value.body, value.orelse) for v, tests in _returned(branch)]
    return [(value, [])]


def _callee(mro: Sequence[ClassSource], method: _Method, call: ast.Call) -> _Method | None:
    target = _super_target(call, mro, method.owner)
    if target is not None:
        return _resolve(mro, target[0], target[1])
    helper = _self_attr(call.func)
    return _resolve(mro, helper) if helper is not None else None


def _check_unpack(
    forward: _Method,
    path: Sequence[_Method],
    holder: str,
    flags: set[str],
    pair: _Pair | None,
    backbone: str,
    found: _Findings,
) -> _Unpacks:
    """The class forward calls the backbone, unpacks its pair exactly once (when the backbone returns
    it: under a test when the backbone returns it only when it captured) and passes the aux states
    to its logits processor."""
    results: set[str] = set()
    calls = [n for _, n in _walk(path) if isinstance(n, ast.Call) and _calls_backbone(n, holder)]
    if not calls:
        found.gap("backbone-call", f"{forward.label} never calls self.{holder}, the backbone the hook writes on", forward.at)
    for _method, node in _walk(path):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _calls_backbone(node.value, holder):
            results.update(t.id for target in node.targets for t in _flat(target) if isinstance(t, ast.Name))

    def unpacks(statement: ast.stmt) -> bool:
        return _unpack_of(statement, holder, results) is not None

    count = sum(_max_on_a_path(m.node.body, unpacks) for m in path)
    aux: set[str] = set()
    unpack_guarded = True
    gated_by: set[str] = set()
    lines = []
    for method in path:
        guards = method.guards
        for node in method.nodes:
            if isinstance(node, ast.stmt) and unpacks(node):
                aux.add(_unpack_of(node, holder, results) or "")
                lines.append(f"{method.owner.file}:{node.lineno}")
                tests = guards.get(id(node), [])
                unpack_guarded = unpack_guarded and any(_says_captured(t, flags | results) for t in tests)
                gated_by |= {a for t in tests for n in walk(t) if (a := _self_attr(n)) is not None and any(w in a for w in _AUX_WORDS)}
    returned = pair is not None and pair.returned
    if pair is not None and not pair.returned:
        tail = f"while {forward.label} unpacks a pair ({lines[0]})" if count else "so there is nothing to unpack"
        found.gap("pair-return", f"{backbone}.forward returns a bare tensor, never (hidden, aux), {tail}", pair.at)
    if count == 0 and pair is not None:
        found.gap("unpack", f"{forward.label} never unpacks (hidden_states, aux_hidden_states) from self.{holder}", forward.at)
    elif count > 1:
        found.gap("unpack", f"{forward.label} unpacks the backbone's pair {count} times in one call ({', '.join(lines)})", forward.at)
    if count and returned and pair is not None:
        if pair.guarded and not unpack_guarded:
            found.gap("unpack", f"{forward.label} unpacks on every call, but {backbone}.forward returns the pair only when it captured", forward.at)
        elif not pair.guarded and unpack_guarded:
            found.gap("pair-return", f"{backbone}.forward returns the pair even when it captured nothing, and {forward.label} unpacks it only when capturing", pair.at)
    _check_logits(path, forward, aux - {""}, found)
    return _Unpacks(count, tuple(sorted(gated_by)))


def calls_backbone(call: ast.Call, holder: str) -> bool:
    """`self.<holder>(...)`, `self.<holder>.forward(...)`, or a routine handed `self.<holder>`: what the
    analysis counts as the class forward's call of its backbone."""
    return _calls_backbone(call, holder)


def _calls_backbone(call: ast.Call, holder: str) -> bool:
    """`self.model(...)`, `self.model.forward(...)`, or a routine handed `self.model` (`language_model=self.model`)."""
    func = call.func
    if _self_attr(func) == holder or (_held_attr(func) in ((holder, FORWARD), (holder, "__call__"))):
        return True
    return any(_self_attr(arg) == holder for arg in [*call.args, *(k.value for k in call.keywords)])


def _unpack_of(statement: ast.stmt, holder: str, results: set[str]) -> str | None:
    """The name the aux states land in, when the statement unpacks the backbone's result:
    `hidden_states, aux_hidden_states = hidden_states` (or `= self.model(...)`), or `aux = result[1]`."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target, value = statement.targets[0], statement.value
    from_backbone = (isinstance(value, ast.Name) and value.id in results) or (isinstance(value, ast.Call) and _calls_backbone(value, holder))
    if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2 and from_backbone:
        second = target.elts[1]
        return second.id if isinstance(second, ast.Name) else "?"
    if isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in results:
        index = value.slice
        if isinstance(index, ast.Constant) and index.value == 1:
            return target.id
    return None


def _check_logits(path: Sequence[_Method], forward: _Method, aux: set[str], found: _Findings) -> None:
    calls = [n for _, n in _walk(path) if isinstance(n, ast.Call) and _self_attr(n.func) == "logits_processor"]
    if not calls:
        found.gap("logits-aux", f"{forward.label} never calls self.logits_processor, so the aux states reach nothing", forward.at)
        return
    wanted = aux or {"aux_hidden_states"}
    for call in calls:
        given = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Name) and a.id in wanted for a in given) or any(k.arg == "aux_hidden_states" for k in call.keywords):
            return
    found.gap("logits-aux", f"{forward.label} does not pass {' or '.join(sorted(wanted))} to self.logits_processor", forward.at)


# --------------------------------------------------------------------------- eaglepatch's own resolution


class TreeClasses:
    """A ClassLookup over an SGLang tree, through eaglepatch's resolver (read-only): classes found by
    the class index, bases through the file's imports, a backbone's class(es) through the wrapper
    finder.  One per run: every file is parsed once."""

    def __init__(self, resolver: Resolver):
        self.resolver = resolver
        self._classes: dict[str, ClassSource | None] = {}
        self._bases: dict[str, list[str]] = {}
        self._mro: dict[str, tuple[ClassSource, ...]] = {}
        self.reports: dict[tuple[str, str], PlumbingReport] = {}  # analyze_plumbing's, once a run per (class, hook)
        self.walks = Walks()  # every class's: what is read off a method, once a run

    def _source(self, file: str) -> SourceFile | None:
        path = self.resolver.tree.srt / file
        if not path.is_file():
            return None
        try:
            return self.resolver.cache.read(path)
        except EaglepatchError:  # not UTF-8, too large...: the pipeline's own gate says so
            return None

    def _class(self, key: str) -> ClassSource | None:
        if key in self._classes:
            return self._classes[key]
        file, _, name = key.rpartition(":")
        source = self._source(file)
        text = self.resolver.class_text(source, name) if source is not None else None
        node = _class_node(text) if text is not None else None
        found = ClassSource(name, file, node, self.walks) if node is not None else None
        if found is not None and source is not None and text is not None:
            self._bases[key] = self._direct_bases(source, text)
        self._classes[key] = found
        return found

    def _direct_bases(self, source: SourceFile, text: ClassText) -> list[str]:
        out = []
        for expr in self.resolver.index.bases_of(text):
            where = self.resolver.find_class(source, expr)
            if where is not None:
                out.append(f"{where[0].rel}:{where[1]}")
        return out

    def mro(self, key: str) -> tuple[ClassSource, ...]:
        if key not in self._mro:
            if self._class(key) is None:
                self._mro[key] = ()
            else:
                order = c3_order(key, lambda k: self._bases.get(k, []) if self._class(k) is not None else [])
                self._mro[key] = tuple(c for c in (self._class(k) for k in order) if c is not None)
        return self._mro[key]

    def holds(self, key: str, attribute: str) -> tuple[str, ...] | None:
        file, _, name = key.rpartition(":")
        source = self._source(file)
        if source is None:
            return None
        for inner in self.resolver.inner_models(source, name):
            if inner.attribute == attribute and inner.classes:
                return tuple(f"{c.file}:{c.name}" for c in inner.classes)
        return None


def tree_plumbing(resolver: Resolver, file: str, name: str, hook: str = HOOK, classes: TreeClasses | None = None) -> PlumbingReport:
    """`analyze_plumbing` for the class `name` of `file` (relative to srt) of a resolved tree; pass
    one `classes` for every class of a run."""
    return analyze_plumbing(classes or TreeClasses(resolver), f"{file}:{name}", hook)


def _class_node(text: ClassText) -> ast.ClassDef | None:
    """The class's own lines parsed (not its whole module: a model file runs to thousands of lines),
    numbered as in its file.  One under a module-level `if` is parsed inside one."""
    lines = text.source.lines[text.header : text.end]
    indented = bool(lines) and lines[0][:1] in (" ", "\t")
    # blank lines before it number its nodes as in the file (cheaper than ast.increment_lineno)
    padding = "\n" * (text.header - 1) + "if 1:\n" if indented and text.header else "\n" * text.header
    try:
        module = ast.parse(padding + "\n".join(lines) + "\n")
    except (SyntaxError, ValueError):
        return None
    if indented and not text.header:
        module = ast.increment_lineno(module, -1)  # a class on the file's first line, indented: not Python anyway
    node = module.body[0].body[0] if indented and module.body and isinstance(module.body[0], ast.If) else module.body[0] if module.body else None
    return node if isinstance(node, ast.ClassDef) else None
