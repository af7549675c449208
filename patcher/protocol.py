"""Stage 3: infer the EAGLE-3 protocol from the code that consumes it.

Nothing here lists member names.  The protocol is every member that EAGLE-3 code reads
or calls on a model object:

* in speculative modules whose name says EAGLE (all of their code), and
* in any other file, inside a branch guarded by an EAGLE condition
  (`if self.eagle_use_aux_hidden_state:`, `if spec_algorithm.is_eagle3() and ...:`), and
* inside helpers that EAGLE-3 code hands a model to (`resolve(target_model=runner.model)`),
  followed a few calls deep.

A branch is EAGLE code when its condition, read as a conjunction of checks, has some EAGLE
check true and none false (`if not x and is_eagle3():`, `if algo == "EAGLE3":`, the else of
`if not is_eagle3():`, the rest of a block after `if not is_eagle3(): return`).  A use whose
receiver does not say which model it is (a runner's own `self.model`) takes its role from
the conditions around it: aux hidden states and `not is_draft_worker` mean the target,
`is_draft_worker` the draft.  Each call records its shape (positional count, keywords).

A "model object" is a runner's model (`self.target_worker.model_runner.model`,
`self.model` inside a runner class), a name or attribute that holds a model
(`target_model`, `self.draft_model`), or a local alias of either.  Members guarded by
`hasattr(...)` or read with `getattr(..., default)` are optional.  Members that the model
runner uses on every model outside EAGLE-3 branches (`forward`, ...) are the general model
interface, not EAGLE-3 protocol, and are set aside; that reading parses the code, so
docstrings, comments and uses behind `hasattr(model, "x")` do not count.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from .errors import EaglepatchError
from .imports import ImportTable
from .locate import SourceTree
from .records import CallShape, Protocol, ProtocolMember, Use, UseKind, UseRole
from .source import Parsed, SourceCache, SourceFile, Statement, _dedent, block_start

_EAGLE_SPELLINGS = (b"eagle", b"EAGLE", b"Eagle")
_EAGLE = re.compile(r"eagle", re.IGNORECASE)
# an `if`/`elif` whose condition (possibly opened with a parenthesis) mentions EAGLE
# spelled out rather than IGNORECASE, which makes the scan over every candidate file several times slower
_EAGLE_GUARD = re.compile(
    r"^[ \t]*(?:el)?if\b(?:[^\n]*(?:eagle|EAGLE|Eagle)|[ \t]*\([ \t]*\r?\n[^\n]*(?:eagle|EAGLE|Eagle))", re.MULTILINE
)
_GUARD_HEAD = re.compile(rb"[ \t]*(?:el)?if\b")


def _has_eagle_guard(data: bytes) -> bool:
    """True when some line holding "eagle" is an `if`/`elif`, or follows a bare `if (` line.
    Looks only around each occurrence, instead of running a regex over every line of the file."""
    for spelling in _EAGLE_SPELLINGS:
        start = data.find(spelling)
        while start >= 0:
            line_start = data.rfind(b"\n", 0, start) + 1
            if _GUARD_HEAD.match(data, line_start):
                return True
            previous = data.rfind(b"\n", 0, max(line_start - 1, 0)) + 1
            head = data[previous:line_start].strip()
            if line_start and _GUARD_HEAD.match(head) and head.rstrip(b"\\").endswith(b"("):
                return True
            start = data.find(spelling, start + len(spelling))
    return False
# a model object used on this line: `x.model.y`, `target_model.y`, passed on (`model,`) or aliased
_MODEL_USE = re.compile(r"(?:(?<![\w])model|_model)[ \t]*(?:\.[ \t]*\w|[,)\]=])|\.model[ \t]*$", re.MULTILINE)
# `x.model.member` / `model.member` / `target_model.member` in plain text, for the general interface
_GENERAL_USE = re.compile(r"(?:(?<![\w])model|\.model|\w_model)\.(\w+)")
_MODEL_DOT = re.compile(r"model\.")  # a literal first: far faster than _GENERAL_USE over whole files
MAX_HELPER_DEPTH = 3


def role_from_text(text: str) -> UseRole:
    lowered = text.lower()
    if "target" in lowered:
        return "target"
    if "draft" in lowered or "mtp" in lowered:
        return "draft"
    return "unknown"


def _last_name(node: cst.BaseExpression) -> str:
    """`self.draft_runner_list[i]` -> draft_runner_list; `self.mtp_model_runner(i)` -> mtp_model_runner."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            return node.attr.value
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            return ""


def _identifiers(node: cst.CSTNode) -> list[str]:
    """Names and attribute names in an expression (not strings)."""
    found: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

    node.visit(Collect())
    return found


def _words(node: cst.CSTNode) -> list[str]:
    """Names, attribute names and string contents in an expression: SGLang tests both
    `spec_algorithm.is_eagle3()` and `speculative_algorithm == "EAGLE3"`."""
    found: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            found.append(n.value)  # quotes and prefix included: only searched for "eagle"

        def visit_FormattedStringText(self, n: cst.FormattedStringText) -> None:
            found.append(n.value)

    node.visit(Collect())
    return found


def mentions_eagle(test: cst.CSTNode) -> bool:
    return any(_EAGLE.search(word) for word in _words(test))


@dataclass(frozen=True)
class Literal:
    """One atom of a condition, and what a branch under that condition knows about it."""

    node: cst.BaseExpression
    holds: bool  # the atom is true in the branch; False: it is false there
    certain: bool = True  # False when the atom is one alternative of a true `or`


def condition_literals(test: cst.BaseExpression, holds: bool = True, certain: bool = True) -> list[Literal]:
    """The atoms a branch knows about when `test` is `holds`: `a and not b` true gives a true, b false.
    A true `or` gives each part as an uncertain alternative; a false `and` tells nothing about any part."""
    if isinstance(test, cst.NamedExpr):
        return condition_literals(test.value, holds, certain)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return condition_literals(test.expression, not holds, certain)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And)
        if conjunction != holds:  # a false `and`, or a true `or`
            if conjunction:
                return []
            certain = False
        return condition_literals(test.left, holds, certain) + condition_literals(test.right, holds, certain)
    if isinstance(test, cst.Comparison) and _denies(test):
        return [Literal(test, not holds, certain)]
    return [Literal(test, holds, certain)]


def _denies(test: cst.Comparison) -> bool:
    """`algo != "EAGLE3"`, `algo not in (...)`, `eagle_worker is None`: true when the thing named is off."""
    if len(test.comparisons) != 1:
        return False
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(operator, (cst.NotEqual, cst.NotIn)):
        return True
    return isinstance(operator, cst.Is) and isinstance(right, cst.Name) and right.value == "None"


def eagle_guarded(test: cst.BaseExpression, holds: bool = True) -> bool:
    """True when a branch where `test` is `holds` is EAGLE code: some EAGLE check is true there and
    none is false (`if x and not is_eagle3():` is not EAGLE code, `if not x and is_eagle3():` is)."""
    signs = [literal.holds for literal in condition_literals(test, holds) if mentions_eagle(literal.node)]
    return bool(signs) and all(signs)


def role_from_conditions(conditions: tuple[tuple[cst.BaseExpression, bool], ...]) -> UseRole:
    """The role the enclosing conditions give a model whose receiver does not say (a runner's own
    `self.model`): aux hidden states are captured from the target model; `not is_draft_worker` is
    the target and `is_draft_worker` the draft.  "unknown" when nothing says, or they disagree."""
    votes = {
        vote
        for test, holds in conditions
        for literal in condition_literals(test, holds)
        if literal.certain and (vote := _role_vote(literal))
    }
    return votes.pop() if len(votes) == 1 else "unknown"


def _role_vote(literal: Literal) -> UseRole | None:
    names = [name.lower() for name in _identifiers(literal.node)]
    if any("is_draft" in name for name in names):
        return "draft" if literal.holds else "target"
    if literal.holds and any("aux_hidden" in name for name in names):
        return "target"
    return None


def call_shape(call: cst.Call) -> CallShape:
    """How `call` passes its arguments: what a delegating signature has to accept."""
    positional = sum(1 for arg in call.args if arg.keyword is None and not arg.star)
    keywords = tuple(sorted(arg.keyword.value for arg in call.args if arg.keyword is not None))
    return CallShape(positional=positional, keywords=keywords, star=any(arg.star for arg in call.args))


def _string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


@dataclass
class Frame:
    """What a piece of code knows while it is walked."""

    in_scope: bool
    guard: str
    aliases: dict[str, UseRole]  # local name -> role
    optional: frozenset[str] = frozenset()
    class_name: str = ""
    depth: int = 0
    conditions: tuple[tuple[cst.BaseExpression, bool], ...] = ()  # enclosing tests, and whether each holds here

    def child(self, **changes: Any) -> Frame:
        return dataclasses.replace(self, **changes)


@dataclass
class Extraction:
    uses: list[Use] = field(default_factory=list)
    consumers: set[str] = field(default_factory=set)
    eagle_lines: dict[str, set[int]] = field(default_factory=dict)  # file -> lines inside EAGLE scope
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why) consumers that could not be read
    followed: set[tuple[str, int, tuple]] = field(default_factory=set)
    assigned: list[tuple[str, str]] = field(default_factory=list)  # (member, "path:line") of `model.member = ...`


class ConsumerWalker:
    """Walks one parsed slice and records every model member EAGLE-3 code touches."""

    def __init__(self, protocol_reader: ProtocolReader, parsed: Parsed):
        self.reader = protocol_reader
        self.parsed = parsed
        self.out = protocol_reader.extraction
        self.statement: Statement | None = None  # innermost statement being walked, for line numbers

    # -- receivers -----------------------------------------------------------------
    def model_role(self, node: cst.BaseExpression, frame: Frame) -> UseRole | None:
        """The role of `node` if it is a model object, else None."""
        if isinstance(node, cst.Name):
            if node.value in frame.aliases:
                return frame.aliases[node.value]
            if node.value == "model" or node.value.endswith("_model"):
                return role_from_text(node.value)
            return None
        if isinstance(node, cst.Attribute):
            attr = node.attr.value
            if attr == "model":
                holder = _last_name(node.value).lower()
                if "runner" in holder or "worker" in holder:
                    return self._chain_role(node.value, frame)
                if isinstance(node.value, cst.Name) and node.value.value == "self":
                    owner = frame.class_name.lower()
                    if "runner" in owner or "worker" in owner:
                        return role_from_text(frame.class_name)
                return None
            if attr.endswith("_model") and not attr.startswith("_"):
                return role_from_text(attr)
        return None

    def _chain_role(self, holder: cst.BaseExpression, frame: Frame) -> UseRole:
        text = self.parsed.module.code_for_node(holder)
        role = role_from_text(text)
        if role == "unknown" and isinstance(holder, cst.Name) and holder.value in frame.aliases:
            role = frame.aliases[holder.value]
        if role == "unknown":
            role = role_from_text(frame.class_name)
        return role

    # -- recording -----------------------------------------------------------------
    def record(
        self,
        name: str,
        kind: UseKind,
        role: UseRole,
        required: bool,
        at_node: cst.CSTNode,
        frame: Frame,
        shape: CallShape | None = None,
    ) -> None:
        if name.startswith("__") and name.endswith("__"):
            return
        if role == "unknown":
            role = role_from_conditions(frame.conditions)
        self.out.uses.append(
            Use(
                name=name,
                kind=kind,
                role=role,
                required=required and name not in frame.optional,
                at=self.parsed.where(at_node, self.statement),
                guard=frame.guard,
                shape=shape,
            )
        )
        self.out.consumers.add(self.parsed.source.rel)

    def mark_scope(self, suite: cst.CSTNode) -> None:
        lines = self.out.eagle_lines.setdefault(self.parsed.source.rel, set())
        if isinstance(suite, cst.If):  # an `elif`: its own body and every branch after it
            span = self.parsed.statement_span(suite)
            lines.update(range(span[0], span[1] + 1) if span else ())
        else:
            lines.update(self.parsed.suite_span(suite))

    def mark_statements(self, statements) -> None:
        first, last = self.parsed.statement_span(statements[0]), self.parsed.statement_span(statements[-1])
        if first is not None and last is not None:
            self.out.eagle_lines.setdefault(self.parsed.source.rel, set()).update(range(first[0], last[1] + 1))

    # -- walking -------------------------------------------------------------------
    def walk(self, node: cst.CSTNode, frame: Frame, parent: cst.CSTNode | None = None) -> None:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            outer, self.statement = self.statement, node
            self._dispatch(node, frame, parent)
            self.statement = outer
        else:
            self._dispatch(node, frame, parent)

    def _dispatch(self, node: cst.CSTNode, frame: Frame, parent: cst.CSTNode | None) -> None:
        try:
            method = _METHODS[type(node)]
        except KeyError:
            method = _METHODS[type(node)] = getattr(ConsumerWalker, f"walk_{type(node).__name__}", None)
        if method is not None:
            method(self, node, frame, parent)
            return
        for child in _children(node):
            self.walk(child, frame, node)

    def walk_ClassDef(self, node: cst.ClassDef, frame: Frame, parent) -> None:
        self.walk(node.body, frame.child(class_name=node.name.value, aliases={}), node)

    def walk_FunctionDef(self, node: cst.FunctionDef, frame: Frame, parent) -> None:
        aliases = dict(frame.aliases)
        for param in _all_params(node.params):
            aliases.pop(param.name.value, None)
        self.walk(node.body, frame.child(aliases=aliases), node)

    def walk_If(self, node: cst.If, frame: Frame, parent) -> None:
        self.walk(node.test, frame, node)
        body_frame = self._branch(node.test, True, frame, "if", node.body)
        probed = _positive_hasattr(node.test)
        if probed:
            body_frame = body_frame.child(optional=body_frame.optional | probed)
        self.walk(node.body, body_frame, node)
        if node.orelse is not None:
            self.walk(node.orelse, self._branch(node.test, False, frame, "else of: if", node.orelse), node)

    def _branch(self, test: cst.BaseExpression, holds: bool, frame: Frame, label: str, suite: cst.CSTNode) -> Frame:
        """The frame of a branch where `test` is `holds`; it enters EAGLE scope when the test says so."""
        branch = frame.child(conditions=frame.conditions + ((test, holds),))
        if frame.in_scope or not eagle_guarded(test, holds):
            return branch
        self.mark_scope(suite)
        return branch.child(in_scope=True, guard=f"{label} {_short(self.parsed.module.code_for_node(test))}")

    def walk_IndentedBlock(self, node: cst.IndentedBlock, frame: Frame, parent) -> None:
        """Statements in order: after `if not is_eagle3(): return` the rest of the block is EAGLE code."""
        statements = node.body
        for index, statement in enumerate(statements):
            self.walk(statement, frame, node)
            leaves = _early_exit(statement)
            if leaves and isinstance(statement, cst.If) and index + 1 < len(statements):  # leaves only for an if
                frame = self._after_exit(statement.test, leaves, frame, statements[index + 1 :])

    def _after_exit(self, test: cst.BaseExpression, leaves: str, frame: Frame, rest) -> Frame:
        after = frame.child(conditions=frame.conditions + ((test, False),))
        if frame.in_scope or not eagle_guarded(test, False):
            return after
        self.mark_statements(rest)
        guard = f"after if {_short(self.parsed.module.code_for_node(test))}: {leaves}"
        return after.child(in_scope=True, guard=guard)

    def walk_BooleanOperation(self, node: cst.BooleanOperation, frame: Frame, parent) -> None:
        self.walk(node.left, frame, node)
        right = frame
        if isinstance(node.operator, cst.And):
            probed = _positive_hasattr(node.left)
            if probed:
                right = frame.child(optional=frame.optional | probed)
        self.walk(node.right, right, node)

    def walk_IfExp(self, node: cst.IfExp, frame: Frame, parent) -> None:
        self.walk(node.test, frame, node)
        probed = _positive_hasattr(node.test)
        self.walk(node.body, frame.child(optional=frame.optional | probed) if probed else frame, node)
        self.walk(node.orelse, frame, node)

    def walk_Assign(self, node: cst.Assign, frame: Frame, parent) -> None:
        self.walk(node.value, frame, node)
        for target in node.targets:
            self._bind(target.target, node.value, frame)
            self._walk_target(target.target, frame)

    def walk_AnnAssign(self, node: cst.AnnAssign, frame: Frame, parent) -> None:
        if node.value is not None:
            self.walk(node.value, frame, node)
            self._bind(node.target, node.value, frame)
        self._walk_target(node.target, frame)

    def walk_AugAssign(self, node: cst.AugAssign, frame: Frame, parent) -> None:
        self.walk(node.value, frame, node)
        self._walk_target(node.target, frame)

    def walk_NamedExpr(self, node: cst.NamedExpr, frame: Frame, parent) -> None:
        """`if (m := self.model) and ...:` makes `m` a model alias, as an assignment would."""
        self.walk(node.value, frame, node)
        self._bind(node.target, node.value, frame)

    def _walk_target(self, target: cst.BaseExpression, frame: Frame) -> None:
        """Writing `model.x = ...` needs nothing from the model, but is recorded: a member EAGLE-3 code
        assigns must not be forwarded read-only.  Reads inside the target still count."""
        if isinstance(target, cst.Attribute):
            self.walk(target.value, frame, target)
            if frame.in_scope and self.model_role(target.value, frame) is not None:
                self.out.assigned.append((target.attr.value, self.parsed.where(target.attr, self.statement)))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._walk_target(element.value, frame)
        elif isinstance(target, cst.Subscript):
            for child in target.children:
                self.walk(child, frame, target)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, frame: Frame) -> None:
        if not isinstance(target, cst.Name):
            return
        role = self.model_role(value, frame)
        if role is not None:
            frame.aliases[target.value] = role
        else:
            frame.aliases.pop(target.value, None)

    def walk_Attribute(self, node: cst.Attribute, frame: Frame, parent) -> None:
        self.walk(node.value, frame, node)
        if not frame.in_scope:
            return
        role = self.model_role(node.value, frame)
        if role is None:
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            self.record(node.attr.value, "call", role, True, node.attr, frame, call_shape(parent))
        else:
            self.record(node.attr.value, "attribute", role, True, node.attr, frame)

    def walk_Call(self, node: cst.Call, frame: Frame, parent) -> None:
        func = node.func
        if frame.in_scope and isinstance(func, cst.Name) and func.value in ("getattr", "hasattr") and len(node.args) >= 2:
            role = self.model_role(node.args[0].value, frame)
            name = _string_value(node.args[1].value)
            if role is not None and name and func.value == "getattr":
                required = len(node.args) == 2
                self.record(name, "attribute", role, required, node.args[1].value, frame)
        self.walk(func, frame, node)
        for arg in node.args:
            self.walk(arg, frame, node)
        if frame.in_scope and frame.depth < MAX_HELPER_DEPTH:
            self.reader.follow_helper(self, node, frame)

    def walk_Lambda(self, node: cst.Lambda, frame: Frame, parent) -> None:
        self.walk(node.body, frame, node)


_METHODS: dict[type[cst.CSTNode], Callable[[ConsumerWalker, Any, Frame, cst.CSTNode | None], None] | None] = {}
_FIELDS: dict[type, list[str]] = {}
_SKIP_FIELDS = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after", "header", "footer")


def _children(node: cst.CSTNode):
    """Child nodes in source order, without libcst's `children` (which rebuilds every node)."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = [
            f.name for f in dataclasses.fields(node) if not f.name.startswith(_SKIP_FIELDS)
        ]
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    out = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            out.append(star)
    return out


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _early_exit(statement: cst.CSTNode) -> str:
    """How an `if` without `else` always leaves ("return", "raise"), or "" when it may fall through."""
    if not isinstance(statement, cst.If) or statement.orelse is not None:
        return ""
    last = statement.body.body[-1] if statement.body.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    if isinstance(last, cst.Return):
        return "return"
    if isinstance(last, cst.Raise):
        return "raise"
    return ""


def _positive_hasattr(test: cst.CSTNode) -> frozenset[str]:
    """Member names a condition proves present: `hasattr(m, "x")`, also inside `and`."""
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "hasattr":
        if len(test.args) >= 2:
            name = _string_value(test.args[1].value)
            if name:
                return frozenset({name})
        return frozenset()
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _positive_hasattr(test.left) | _positive_hasattr(test.right)
    return frozenset()


class ProtocolReader:
    """Finds the consumers, walks the slices that matter and follows helpers."""

    def __init__(self, tree: SourceTree, cache: SourceCache, extra_consumers: list[Path] | None = None):
        self.tree = tree
        self.cache = cache
        self.extraction = Extraction()
        self.extra = extra_consumers or []

    # -- discovery -------------------------------------------------------------------
    def candidate_files(self) -> list[tuple[Path, bool]]:
        """(file, is an EAGLE module) for EAGLE modules, files named with --consumer, and files outside
        models/ with an `if` on an EAGLE condition: a cheap byte-level filter, so only those are
        decoded and parsed."""
        found: list[tuple[Path, bool]] = []
        models = str(self.tree.models)
        speculative = os.path.join(str(self.tree.srt), "speculative")
        for dirpath, dirnames, filenames in os.walk(self.tree.srt):
            if dirpath == models:
                dirnames[:] = []
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            in_speculative = dirpath == speculative or dirpath.startswith(speculative + os.sep)
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                path = os.path.join(dirpath, filename)
                if in_speculative and "eagle" in filename.lower():  # an EAGLE module: all of it counts
                    found.append((Path(path), True))
                    continue
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError:
                    continue
                if _has_eagle_guard(data):
                    found.append((Path(path), False))
        listed = {path for path, _ in found}
        for extra in self.extra:  # a named consumer counts as a whole, like an EAGLE module
            if extra in listed:
                found = [(path, eagle or path == extra) for path, eagle in found]
            else:
                found.append((extra, True))
        return found

    # -- reading -----------------------------------------------------------------------
    def read(self) -> Extraction:
        for path, eagle_module in self.candidate_files():
            try:
                source = self.cache.read(path)
                if not eagle_module and not _EAGLE_GUARD.search(source.text):
                    continue  # no EAGLE branch anywhere in the file: nothing can count here
                self._read_file(source, eagle_module)
            except EaglepatchError as exc:
                self.extraction.warnings.append(f"skipped consumer {exc}")
                self.extraction.skipped.append((exc.path or self.cache.rel(path), str(exc).split(": ", 1)[-1]))
        return self.extraction

    def _read_file(self, source: SourceFile, eagle_module: bool) -> None:
        """Parse only the functions that use a model and, outside EAGLE modules, mention EAGLE."""
        outline = self.cache.outline(source)
        text = outline.joined

        def functions(pattern: re.Pattern) -> dict[int, None]:
            found: dict[int, None] = {}
            for match in pattern.finditer(text):
                index = outline.line_index(match.start())
                if index < len(source.lines) and not source.lines[index].lstrip().startswith("#"):
                    # module-level code (imports, constants) makes no calls on a runner's model
                    header = outline.outer_def(index)
                    if header >= 0:
                        found[header] = None
            return found

        if eagle_module:
            headers = list(functions(_MODEL_USE))
        else:  # only functions that mention EAGLE, and of those only the ones that use a model
            lines = source.lines
            headers = [h for h in functions(_EAGLE) if _MODEL_USE.search("\n".join(lines[h : outline.ends[h]]))]
        for header in headers:
            parsed = self.cache.parse_block(source, header)
            if parsed.first_line == 0 and len(parsed.module.body) > 1:
                self._walk(parsed, eagle_module)  # fell back to the whole file
                return
            self._walk(parsed, eagle_module, self._class_of(outline, header))

    @staticmethod
    def _class_of(outline, header: int) -> str:
        own = next(indent for index, indent, _, _ in outline.headers if index == header)
        owner = ""
        for index, indent, kind, name in outline.headers:
            if index >= header:
                break
            if kind == "class" and indent < own and outline.ends.get(index, 0) > header:
                owner = name
        return owner

    def _walk(self, parsed: Parsed, eagle_module: bool, class_name: str = "") -> None:
        rel = parsed.source.rel
        frame = Frame(in_scope=eagle_module, guard="EAGLE module (all of its code)" if eagle_module else "", aliases={}, class_name=class_name)
        if eagle_module:
            self.extraction.eagle_lines.setdefault(rel, set()).update(
                range(parsed.first_line + 1, parsed.first_line + parsed.text.count("\n") + 1)
            )
        ConsumerWalker(self, parsed).walk(parsed.module, frame)

    # -- helpers -------------------------------------------------------------------------
    def follow_helper(self, walker: ConsumerWalker, call: cst.Call, frame: Frame) -> None:
        """EAGLE code that hands a model to a function makes that function EAGLE code too."""
        bound: dict[str, UseRole] = {}
        positional: list[tuple[int, UseRole]] = []
        position = 0
        for arg in call.args:
            role = walker.model_role(arg.value, frame)
            if arg.keyword is not None:
                if role is not None:
                    bound[arg.keyword.value] = role
            elif arg.star:
                continue
            else:
                if role is not None:
                    positional.append((position, role))
                position += 1
        if not bound and not positional:
            return
        target = self._resolve_function(walker.parsed.source, call.func, frame)
        if target is None:
            return
        source, header, is_method = target
        parsed = self.cache.parse_block(source, header)
        func = _find_def(parsed.module, source.lines[header])
        if func is None:
            return
        params = list(func.params.posonly_params) + list(func.params.params)
        if is_method and params and params[0].name.value in ("self", "cls"):
            params = params[1:]
        aliases: dict[str, UseRole] = {}
        for index, role in positional:
            if index < len(params):
                name = params[index].name.value
                aliases[name] = _parameter_role(role, name, frame)
        for name, role in bound.items():
            aliases[name] = _parameter_role(role, name, frame)
        key = (source.rel, header, tuple(sorted(aliases.items())))
        if key in self.extraction.followed:
            return
        self.extraction.followed.add(key)
        via = walker.parsed.where(call, walker.statement)
        helper_frame = Frame(
            in_scope=True,
            guard=f"helper {func.name.value}() called from EAGLE-3 code at {via}",
            aliases=aliases,
            class_name=self._class_of(self.cache.outline(source), header) if is_method else "",
            depth=frame.depth + 1,
        )
        span = parsed.statement_span(func)
        if span is not None:
            self.extraction.eagle_lines.setdefault(source.rel, set()).update(range(span[0], span[1] + 1))
        ConsumerWalker(self, parsed).walk(func.body, helper_frame, func)

    def _resolve_function(self, source: SourceFile, func: cst.BaseExpression, frame: Frame):
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            outline = self.cache.outline(source)
            owner = outline.find(frame.class_name, "class") if frame.class_name else None
            if owner is None:
                return None
            end = outline.ends.get(owner, owner)
            for index, _indent, kind, name in outline.headers:
                if owner < index < end and kind == "def" and name == func.attr.value:
                    return source, index, True
            return None
        if not isinstance(func, cst.Name):
            return None
        name = func.value
        outline = self.cache.outline(source)
        for index, indent, kind, header_name in outline.headers:
            if indent == 0 and kind == "def" and header_name == name:
                return source, index, False
        imports = ImportTable.of(self.cache, source, self.tree)
        origin = imports.lookup(name)
        if origin is None or origin.path is None:
            return None
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError:
            return None
        other_outline = self.cache.outline(other)
        for index, indent, kind, header_name in other_outline.headers:
            if indent == 0 and kind == "def" and header_name == origin.name:
                return other, index, False
        return None

    # -- the general model interface ---------------------------------------------------------
    def general_interface(self) -> dict[str, str]:
        """Members the model runner family uses on any model outside EAGLE-3 code."""
        found: dict[str, str] = {}
        executor = self.tree.srt / "model_executor"
        if not executor.is_dir():
            return found
        for path in sorted(executor.rglob("*.py")):
            try:
                source = self.cache.read(path)
            except EaglepatchError:
                continue
            for line, member in self._general_uses(source):
                found.setdefault(member, f"{source.rel}:{line}")
        return found

    def _general_uses(self, source: SourceFile) -> list[tuple[int, str]]:
        """(line, member) for each model member `source` uses outside EAGLE-3 code, in line order.
        A text search finds the lines and functions worth reading and CPython's parser reads them,
        so a docstring or comment naming `model.x` is no use, nor is one behind `hasattr(model, "x")`."""
        if "model." not in source.text:
            return []
        outline = self.cache.outline(source)
        inside = self.extraction.eagle_lines.get(source.rel, set())
        text = outline.joined
        wanted: dict[int, list[int]] = {}  # def header (-1: module level) -> file lines
        for match in _MODEL_DOT.finditer(text):
            index = outline.line_index(match.start())
            if index + 1 in inside or source.lines[index].lstrip().startswith("#"):
                continue  # a comment line is no use, and spares parsing the whole file for it
            if _names_a_model(text, match.start()):
                wanted.setdefault(outline.outer_def(index), []).append(index + 1)
        if not wanted:
            return []
        lines = source.lines
        whole_file = [(0, len(lines), sorted({n for found in wanted.values() for n in found}))]
        blocks = whole_file if -1 in wanted else [
            (block_start(lines, header), outline.ends[header], sorted(set(found)))
            for header, found in sorted(wanted.items())
        ]
        uses = _uses_in_blocks(lines, blocks)
        if uses is None and blocks is not whole_file:  # a slice that does not parse on its own
            uses = _uses_in_blocks(lines, whole_file)
        if uses is None:
            return _general_uses_by_text(lines, inside)
        return sorted(use for use in uses if use[0] not in inside)


def _uses_in_blocks(lines: Sequence[str], blocks: list[tuple[int, int, list[int]]]) -> list[tuple[int, str]] | None:
    """(file line, member) of the model member uses in each (start, end, lines seen) block;
    None when one of the blocks is not valid Python."""
    uses: list[tuple[int, str]] = []
    for start, end, seen in blocks:
        tree = _parse_lines(lines, start, end)
        if tree is None:
            return None
        uses += [(start + line, member) for line, member in _model_member_uses(tree, [n - start for n in seen])]
    return uses


def _names_a_model(text: str, start: int) -> bool:
    """`model.` at `start` belongs to `model`, `x.model` or `x_model`, not to `remodel`."""
    if start == 0 or not _is_word(text[start - 1]):
        return True
    return text[start - 1] == "_" and start >= 2 and _is_word(text[start - 2])


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _parse_lines(lines: Sequence[str], start: int, end: int) -> ast.Module | None:
    """CPython's tree of lines [start, end), dedented; its line 1 is file line start + 1."""
    if start >= end:
        return ast.Module(body=[], type_ignores=[])
    header = lines[start]
    try:
        return ast.parse(_dedent(lines[start:end], len(header) - len(header.lstrip(" \t"))))
    except (SyntaxError, ValueError):
        return None


def _holds_model(node: ast.expr) -> bool:
    """`model`, `runner.model`, `target_model`, `self.draft_model`: what `_GENERAL_USE` reads as a model."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "model" or (name.endswith("_model") and len(name) > len("_model"))


def _proven_by_hasattr(test: ast.expr) -> frozenset[str]:
    """Member names a condition proves present: `hasattr(m, "x")`, also inside `and`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return frozenset().union(*(_proven_by_hasattr(value) for value in test.values))
    is_hasattr = isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
    if is_hasattr and isinstance(test, ast.Call) and len(test.args) >= 2:  # isinstance again for mypy
        name = test.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return frozenset({name.value})
    return frozenset()


def _model_member_uses(tree: ast.AST, lines: list[int]) -> list[tuple[int, str]]:
    """(line, member) for each `model.member` in `tree` that no `hasattr(..., "member")` guards.
    Only nodes that span one of `lines` (sorted, where the text search saw `model.`) are read."""
    found: list[tuple[int, str]] = []
    stack: list[tuple[ast.AST, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, probed = stack.pop()
        first = getattr(node, "lineno", None)
        if first is not None and not _spans_any(lines, first, getattr(node, "end_lineno", None) or first):
            continue
        if isinstance(node, ast.Attribute) and node.attr not in probed and _holds_model(node.value):
            found.append((node.end_lineno or node.lineno, node.attr))
        if isinstance(node, (ast.If, ast.IfExp)):
            proven = probed | _proven_by_hasattr(node.test)
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            stack += [(node.test, probed)] + [(child, proven) for child in body] + [(child, probed) for child in orelse]
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            for value in node.values:
                stack.append((value, probed))
                probed = probed | _proven_by_hasattr(value)
        else:
            stack += [(child, probed) for child in ast.iter_child_nodes(node)]
    return found


def _spans_any(lines: list[int], first: int, last: int) -> bool:
    position = bisect.bisect_left(lines, first)
    return position < len(lines) and lines[position] <= last


def _general_uses_by_text(lines: Sequence[str], inside: set[int]) -> list[tuple[int, str]]:
    """The plain-text reading, for a file CPython cannot parse."""
    return [
        (index, match.group(1))
        for index, line in enumerate(lines, start=1)
        if index not in inside and not line.lstrip().startswith("#")
        for match in _GENERAL_USE.finditer(line)
    ]


def _parameter_role(role: UseRole, parameter: str, frame: Frame) -> UseRole:
    """A model handed to a helper: its role at the call, else the parameter's name
    (`target_model`), else what the conditions around the call say."""
    if role == "unknown":
        role = role_from_text(parameter)
    if role == "unknown":
        role = role_from_conditions(frame.conditions)
    return role


def _find_def(module: cst.Module, header_line: str) -> cst.FunctionDef | None:
    name = re.match(r"\s*(?:async\s+)?def\s+(\w+)", header_line)
    if not name:
        return None
    wanted = name.group(1)

    class Find(cst.CSTVisitor):
        found: cst.FunctionDef | None = None

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            if self.found is None and node.name.value == wanted:
                self.found = node
            return self.found is None

    finder = Find()
    module.visit(finder)
    return finder.found


def extract_protocol(
    tree: SourceTree, cache: SourceCache, extra_consumers: list[Path] | None = None, ignore: list[str] | None = None
) -> Protocol:
    reader = ProtocolReader(tree, cache, extra_consumers)
    extraction = reader.read()
    general = reader.general_interface()
    members: dict[str, ProtocolMember] = {}
    set_aside: dict[str, str] = {}
    ignored = set(ignore or [])
    for use in extraction.uses:
        if use.name in ignored:
            continue
        if use.name in general:
            set_aside[use.name] = general[use.name]
            continue
        members.setdefault(use.name, ProtocolMember(use.name)).uses.append(use)
    for name, at in extraction.assigned:
        if name in members and at not in members[name].assigned_at:
            members[name].assigned_at.append(at)
    if not members:
        if extraction.skipped:
            path, why = extraction.skipped[0]
            raise EaglepatchError(
                f"could not be read as an EAGLE-3 consumer ({why}), and no EAGLE-3 consumer code found "
                "elsewhere; fix that file",
                path=path,
            )
        raise EaglepatchError(
            "no EAGLE-3 consumer code found (no model member used in speculative/*eagle* files or EAGLE-guarded "
            "branches); is this an SGLang tree with EAGLE support?",
            path=str(tree.srt),
        )
    return Protocol(
        members=dict(sorted(members.items())),
        consumers=sorted(extraction.consumers),
        general_interface=dict(sorted(set_aside.items())),
        warnings=extraction.warnings,
        ignored=sorted(ignored),
    )
