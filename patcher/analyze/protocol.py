"""Analyze stage: infer the EAGLE-3 protocol from the code that consumes it.

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

What counts as the algorithm's code is a `CodeScope`: EAGLE3_SCOPE is the reading above.
analyze/algorithms.py makes one for each speculative algorithm the tree defines, which selects
branches by that algorithm's own guards, leaves unread the branches it never takes, reads a hasattr
chain that raises when no branch is taken as a group of members of which one suffices (`OneOf`),
and reads `isinstance(model, P)` on a typing Protocol P as a hasattr of P's members.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import io
import os
import re
import tokenize
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EaglepatchError, UnreadableFiles
from ..read.imports import ImportTable
from ..read.outline import Outline, block_start, is_word_char
from ..read.slices import invalid_python
from ..read.source_cache import MemoKey
from ..read.statements import walk
from ..read.text import SourceFile, block_text, dedent_lines
from ..records import CallShape, Protocol, ProtocolMember, Use, UseKind, UseRole

if TYPE_CHECKING:
    from .context import RunContext

_EAGLE_SPELLINGS = (b"eagle", b"EAGLE", b"Eagle")
_EAGLE = re.compile(r"eagle", re.IGNORECASE)
_EAGLE_LOWER = re.compile(r"eagle")


def _eagle_offsets(text: str) -> Iterator[int]:
    """Where `_EAGLE` matches `text`: the literal `eagle` in the text lowered, which the regex engine
    finds by skipping ahead, where IGNORECASE compares every character.  Only `A E G L a e g l` lower to
    those letters, as they are the only ones IGNORECASE matches; lowering keeps each character's offset
    unless the text holds U+0130 (which lowers to two), where the regex runs as written."""
    lowered = text.lower()
    found = _EAGLE_LOWER.finditer(lowered) if len(lowered) == len(text) else _EAGLE.finditer(text)
    return (match.start() for match in found)

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
# a model object used on this line: `x.model.y`, `target_model.y`, passed on (`model,`) or aliased.
# Every branch starts at the literal `model` and looks behind it (`model` not inside a word, or `_model`;
# `.model` at a line's end), so the regex engine jumps from one `model` to the next; the same pattern
# written with its look-behinds first tried every position and took ~60x longer over a whole file.
_MODEL_USE = re.compile(r"model(?:(?<![^\W_]model)[ \t]*(?:\.[ \t]*\w|[,)\]=])|(?<=\.model)[ \t]*$)", re.MULTILINE)
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


def _last_name(node: ast.expr) -> str:
    """`self.draft_runner_list[i]` -> draft_runner_list; `self.mtp_model_runner(i)` -> mtp_model_runner."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return ""


def _name_of(node: ast.AST) -> str | None:
    """The identifier a node spells, as a word of an expression: a name, an attribute's name,
    a keyword argument's name or a lambda's parameter."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, (ast.keyword, ast.arg)):
        return node.arg
    return None


def _identifiers(node: ast.AST) -> list[str]:
    """Names and attribute names in an expression (not strings)."""
    return [name for child in walk(node) if (name := _name_of(child)) is not None]


def mentions_eagle(test: ast.expr, block: Block) -> bool:
    """Some name, attribute name or string of `test` says EAGLE: SGLang tests both
    `spec_algorithm.is_eagle3()` and `speculative_algorithm == "EAGLE3"`.  A string is read as
    written (quotes, prefix and escapes included), an f-string as a whole."""
    stack: list[ast.AST] = [test]
    while stack:
        node = stack.pop()
        word = _name_of(node)
        if word is None and isinstance(node, (ast.Constant, ast.JoinedStr)):
            if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
                word = block.code(node)
        if word is not None and _EAGLE.search(word):
            return True
        if not isinstance(node, ast.JoinedStr):
            stack.extend(ast.iter_child_nodes(node))
    return False


@dataclass(frozen=True)
class Literal:
    """One atom of a condition, and what a branch under that condition knows about it."""

    node: ast.expr
    holds: bool  # the atom is true in the branch; False: it is false there
    certain: bool = True  # False when the atom is one alternative of a true `or`


def condition_literals(test: ast.expr, holds: bool = True, certain: bool = True) -> list[Literal]:
    """The atoms a branch knows about when `test` is `holds`: `a and not b` true gives a true, b false.
    A true `or` gives each part as an uncertain alternative; a false `and` tells nothing about any part."""
    if isinstance(test, ast.NamedExpr):
        return condition_literals(test.value, holds, certain)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return condition_literals(test.operand, not holds, certain)
    if isinstance(test, ast.BoolOp):
        conjunction = isinstance(test.op, ast.And)
        if conjunction != holds:  # a false `and`, or a true `or`
            if conjunction:
                return []
            certain = False
        return [literal for value in test.values for literal in condition_literals(value, holds, certain)]
    if isinstance(test, ast.Compare) and _denies(test):
        return [Literal(test, not holds, certain)]
    return [Literal(test, holds, certain)]


def _denies(test: ast.Compare) -> bool:
    """`algo != "EAGLE3"`, `algo not in (...)`, `eagle_worker is None`: true when the thing named is off."""
    if len(test.ops) != 1:
        return False
    operator, right = test.ops[0], test.comparators[0]
    if isinstance(operator, (ast.NotEq, ast.NotIn)):
        return True
    return isinstance(operator, ast.Is) and isinstance(right, ast.Constant) and right.value is None


def eagle_guarded(test: ast.expr, block: Block, holds: bool = True) -> bool:
    """True when a branch where `test` is `holds` is EAGLE code: some EAGLE check is true there and
    none is false (`if x and not is_eagle3():` is not EAGLE code, `if not x and is_eagle3():` is)."""
    signs = [literal.holds for literal in condition_literals(test, holds) if mentions_eagle(literal.node, block)]
    return bool(signs) and all(signs)


class CodeScope:
    """Which code counts as one speculative algorithm's: by default EAGLE-3's, read as the module
    docstring says (its name in module names and conditions).  analyze/algorithms.py makes one per
    algorithm the tree defines, from the guards it reads there; each switch below is off here, so the
    EAGLE-3 reading stays as it was."""

    label = "EAGLE-3"
    module_label = "EAGLE module (all of its code)"
    # a branch the algorithm never takes is not walked (EAGLE-3: every branch may be taken)
    prunes = False
    # `if hasattr(m, "a"): m.a() elif hasattr(m, "b"): m.b() else: raise` is recorded as a group of
    # which one member is needed (Extraction.alternatives); a group of one member stays required
    reads_chains = False
    # `isinstance(m, P)` with P a typing Protocol proves P's members, as `hasattr` does; so does the
    # rest of a block after `if not hasattr(m, "x"): return` (a `raise` there still requires x)
    reads_probes = False

    def is_module(self, rel_dir: str, filename: str) -> bool:
        """A module under speculative/ (`rel_dir` relative to it) all of whose code counts."""
        return "eagle" in filename.lower()

    def may_guard(self, data: bytes) -> bool:
        """Cheap filter on a file's bytes: it may hold a branch this scope enters."""
        return _has_eagle_guard(data)

    def file_may_guard(self, path: str) -> bool:
        """may_guard on the file at `path` (False when it cannot be read)."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return False
        return self.may_guard(data)

    def has_guard(self, text: str) -> bool:
        """Some `if`/`elif` line of `text` names this scope."""
        return _EAGLE_GUARD.search(text) is not None

    def offsets(self, text: str) -> Iterator[int]:
        """Where `text` names this scope: the functions around them are read."""
        return _eagle_offsets(text)

    def enters(self, test: ast.expr, block: Block, holds: bool) -> bool:
        """A branch where `test` is `holds` is this scope's code."""
        return eagle_guarded(test, block, holds)

    def may_hold(self, test: ast.expr, block: Block, holds: bool) -> bool:
        """`test` can be `holds` under this algorithm (read only when `prunes`)."""
        return True


EAGLE3_SCOPE = CodeScope()


def role_from_conditions(conditions: tuple[tuple[ast.expr, bool], ...]) -> UseRole:
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


@dataclass(frozen=True)
class Argument:
    """One argument of a call as written: `value`, `name=value`, `*value` or `**value`."""

    value: ast.expr
    keyword: str | None = None
    star: str = ""


def _arguments(call: ast.Call) -> list[Argument]:
    """The arguments of `call` in the order they are written (ast keeps keywords apart)."""
    found = [
        (arg.lineno, arg.col_offset, Argument(arg.value, star="*") if isinstance(arg, ast.Starred) else Argument(arg))
        for arg in call.args
    ]
    found += [(kw.lineno, kw.col_offset, Argument(kw.value, kw.arg, "" if kw.arg else "**")) for kw in call.keywords]
    if call.keywords and call.args:
        found.sort(key=lambda item: (item[0], item[1]))
    return [argument for _, _, argument in found]


def call_shape(call: ast.Call) -> CallShape:
    """How `call` passes its arguments: what a delegating signature has to accept."""
    arguments = _arguments(call)
    positional = sum(1 for arg in arguments if arg.keyword is None and not arg.star)
    keywords = tuple(sorted(arg.keyword for arg in arguments if arg.keyword is not None))
    return CallShape(positional=positional, keywords=keywords, star=any(arg.star for arg in arguments))


def _string_value(node: ast.AST, block: Block) -> str | None:
    """The value of a single string literal (not bytes, not an f-string, not `"a" "b"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _one_string(block.code(node)):
        return node.value
    return None


def _one_string(text: str) -> bool:
    """`text` is one string token: libcst reads `"a" "b"` as two strings, CPython as one constant."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError):
        return False
    return len(tokens) == 1 and tokens[0].string == text


@dataclass
class Frame:
    """What a piece of code knows while it is walked."""

    in_scope: bool
    guard: str
    aliases: dict[str, UseRole]  # local name -> role
    optional: frozenset[str] = frozenset()
    class_name: str = ""
    depth: int = 0
    conditions: tuple[tuple[ast.expr, bool], ...] = ()  # enclosing tests, and whether each holds here

    def child(self, **changes: Any) -> Frame:
        return dataclasses.replace(self, **changes)


@dataclass
class Extraction:
    uses: list[Use] = field(default_factory=list)
    consumers: set[str] = field(default_factory=set)
    eagle_lines: dict[str, set[int]] = field(default_factory=dict)  # file -> lines inside EAGLE scope
    warnings: list[str] = field(default_factory=list)
    unread: list[tuple[Path, EaglepatchError]] = field(default_factory=list)  # consumers that could not be read
    followed: set[tuple[str, int, tuple]] = field(default_factory=set)
    assigned: list[tuple[str, str]] = field(default_factory=list)  # (member, "path:line") of `model.member = ...`
    alternatives: list[OneOf] = field(default_factory=list)  # hasattr chains that raise when none is there (CodeScope.reads_chains)
    capabilities: dict[str, str] = field(default_factory=dict)  # member -> "file:Protocol" a model is tested against (CodeScope.reads_probes)


@dataclass(frozen=True)
class ParsedSlices:
    """The slices the protocol readers of one run parsed: the readings of several scopes (one per
    algorithm) read mostly the same functions."""

    blocks: dict[tuple[Path, int, int], Block] = field(default_factory=dict)  # (file, start, end) -> the slice read
    general: dict[tuple[Path, int, int], ast.Module | None] = field(default_factory=dict)  # general-interface slices


_SLICES: MemoKey[ParsedSlices] = MemoKey("the slices the protocol readers parsed")


@dataclass(frozen=True)
class OneOf:
    """A chain `if hasattr(m, "a"): m.a() elif hasattr(m, "b"): m.b() else: raise`: the model needs
    one of `members` (in the order tried), any one suffices; only the branches the scope may take."""

    members: tuple[str, ...]
    at: str  # "path:line" of the chain's first `if`
    role: UseRole


_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass
class Block:
    """A def (or the whole file) read by CPython's parser, and the text it was read from.

    A use is placed on the line it is written on, except that a node in an `if`/`while` condition is
    counted from the first line of the condition (its parentheses included), as the libcst reading
    placed it (see `line_of`)."""

    source: SourceFile
    module: ast.Module
    first_line: int  # file line of the text's line 1, minus one
    text: str
    lines: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.lines = _NEWLINE.split(self.text)

    def column(self, line: int, offset: int) -> int:
        """ast's UTF-8 byte offset on `line` as a character index."""
        text = self.lines[line - 1]
        return offset if text.isascii() else len(text.encode("utf-8")[:offset].decode("utf-8", "replace"))

    def between(self, first: int, start: int, last: int, end: int) -> str:
        if first == last:
            return self.lines[first - 1][start:end]
        return "\n".join([self.lines[first - 1][start:], *self.lines[first : last - 1], self.lines[last - 1][:end]])

    def code(self, node: ast.AST) -> str:
        """The source text of `node` (libcst's code_for_node without its own parentheses)."""
        end = getattr(node, "end_col_offset", None)
        if end is None:  # made up by the walker (a dotted import name)
            return ast.unparse(node)
        first, last = node.lineno, node.end_lineno  # type: ignore[attr-defined]
        return self.between(first, self.column(first, node.col_offset), last, self.column(last, end))  # type: ignore[attr-defined]

    def condition(self, statement: ast.If | ast.While) -> tuple[str, int]:
        """The text of an `if`/`elif`/`while` condition with the parentheses around it, as libcst
        prints the condition, and the line it starts on."""
        test = statement.test
        line, start = statement.lineno, self.column(statement.lineno, statement.col_offset)
        head = self.lines[line - 1]
        start += 4 if head.startswith("elif", start) else 5 if head.startswith("while", start) else 2
        test_line, test_start = test.lineno, self.column(test.lineno, test.col_offset)
        opened: tuple[int, int] | None = None
        count = 0
        for number in range(line, test_line + 1):  # between the keyword and the test: blanks, `(`, comments
            text = self.lines[number - 1][start if number == line else 0 : test_start if number == test_line else None]
            text = text.split("#", 1)[0]
            if "(" in text:
                count += text.count("(")
                if opened is None:
                    opened = (number, text.index("(") + (start if number == line else 0))
        if opened is None:
            return self.code(test), test_line
        last, end = test.end_lineno or test_line, self.column(test.end_lineno or test_line, test.end_col_offset or 0)
        number, column = last, end
        while number <= len(self.lines):
            text = self.lines[number - 1]
            stop = text.find("#", column)
            for index in range(column, len(text) if stop < 0 else stop):
                if text[index] == ")":
                    count -= 1
                    if count == 0:
                        return self.between(opened[0], opened[1], number, index + 1), opened[0]
            number, column = number + 1, 0
        return self.code(test), test_line

    def line_of(self, line: int, statement: ast.stmt | None) -> int:
        """File line of a node that starts on `line` of the text, inside `statement`."""
        if statement is not None:
            first, last = statement.lineno, statement.end_lineno
            if first == last:
                return first + self.first_line
            if isinstance(statement, (ast.If, ast.While)):
                line -= self.condition(statement)[1] - first
        return line + self.first_line

    def where(self, line: int, statement: ast.stmt | None) -> str:
        return f"{self.source.rel}:{self.line_of(line, statement)}"


class ConsumerWalker:
    """Walks one parsed slice and records every model member EAGLE-3 code touches."""

    def __init__(self, protocol_reader: ProtocolReader, block: Block):
        self.reader = protocol_reader
        self.block = block
        self.out = protocol_reader.extraction
        self.statement: ast.stmt | None = None  # innermost statement being walked, for line numbers
        self._chains: dict[int, frozenset[str]] = {}  # id of an `if` of a raising hasattr chain -> the member it requires

    # -- receivers -----------------------------------------------------------------
    def model_role(self, node: ast.expr, frame: Frame) -> UseRole | None:
        """The role of `node` if it is a model object, else None."""
        if isinstance(node, ast.Name):
            if node.id in frame.aliases:
                return frame.aliases[node.id]
            if node.id == "model" or node.id.endswith("_model"):
                return role_from_text(node.id)
            return None
        if isinstance(node, ast.Attribute):
            attr = node.attr
            if attr == "model":
                holder = _last_name(node.value).lower()
                if "runner" in holder or "worker" in holder:
                    return self._chain_role(node.value, frame)
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    owner = frame.class_name.lower()
                    if "runner" in owner or "worker" in owner:
                        return role_from_text(frame.class_name)
                return None
            if attr.endswith("_model") and not attr.startswith("_"):
                return role_from_text(attr)
        return None

    def _chain_role(self, holder: ast.expr, frame: Frame) -> UseRole:
        role = role_from_text(self.block.code(holder))
        if role == "unknown" and isinstance(holder, ast.Name) and holder.id in frame.aliases:
            role = frame.aliases[holder.id]
        if role == "unknown":
            role = role_from_text(frame.class_name)
        return role

    # -- recording -----------------------------------------------------------------
    def record(
        self, name: str, kind: UseKind, role: UseRole, required: bool, line: int, frame: Frame, shape: CallShape | None = None
    ) -> None:
        """A use of `name` by code on `line` of the slice."""
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
                at=self.block.where(line, self.statement),
                guard=frame.guard,
                shape=shape,
            )
        )
        self.out.consumers.add(self.block.source.rel)

    def mark_lines(self, statements: Sequence[ast.stmt]) -> None:
        """Statements (a branch, or the rest of a block) are EAGLE code: their lines, first to last."""
        first, last = statements[0].lineno, statements[-1].end_lineno or statements[-1].lineno
        offset = self.block.first_line
        self.out.eagle_lines.setdefault(self.block.source.rel, set()).update(range(first + offset, last + offset + 1))

    # -- walking -------------------------------------------------------------------
    def walk(self, node: ast.AST, frame: Frame, parent: ast.AST | None = None) -> None:
        if isinstance(node, ast.stmt):
            outer, self.statement = self.statement, node
            self._dispatch(node, frame, parent)
            self.statement = outer
        else:
            self._dispatch(node, frame, parent)

    def _dispatch(self, node: ast.AST, frame: Frame, parent: ast.AST | None) -> None:
        try:
            method = _METHODS[type(node)]
        except KeyError:
            method = _METHODS[type(node)] = getattr(ConsumerWalker, f"walk_{type(node).__name__}", None)
        if method is not None:
            method(self, node, frame, parent)
            return
        for child in _children(node):
            if isinstance(child, list):
                self.walk_block(child, frame)
            else:
                self.walk(child, frame, node)

    def walk_block(self, statements: list[ast.stmt], frame: Frame, exits: bool = True) -> None:
        """Statements in order: after `if not is_eagle3(): return` the rest of the block is EAGLE code."""
        scope = self.reader.scope
        for index, statement in enumerate(statements):
            self.walk(statement, frame)
            leaves = _early_exit(statement) if exits else ""
            if leaves and isinstance(statement, ast.If) and index + 1 < len(statements):
                if scope.prunes and not scope.may_hold(statement.test, self.block, False):
                    return  # the algorithm always leaves here
                frame = self._after_exit(statement, leaves, frame, statements[index + 1 :])
                if leaves == "return" and scope.reads_probes:
                    proven = self._proven_when(statement.test, False, frame)
                    if proven:
                        frame = frame.child(optional=frame.optional | proven)

    def walk_Module(self, node: ast.Module, frame: Frame, parent: ast.AST | None) -> None:
        self.walk_block(node.body, frame, exits=False)

    def walk_ClassDef(self, node: ast.ClassDef, frame: Frame, parent: ast.AST | None) -> None:
        self.walk_block(node.body, frame.child(class_name=node.name, aliases={}))

    def walk_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame, parent: ast.AST | None) -> None:
        aliases = dict(frame.aliases)
        for param in _all_params(node.args):
            aliases.pop(param.arg, None)
        self.walk_block(node.body, frame.child(aliases=aliases))

    walk_AsyncFunctionDef = walk_FunctionDef

    def walk_If(self, node: ast.If, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.test, frame, node)
        scope = self.reader.scope
        if not scope.prunes or scope.may_hold(node.test, self.block, True):
            body_frame = self._branch(node, True, frame, "if", node.body)
            probed = self._probed(node.test, body_frame)
            if scope.reads_chains:
                alone = self._chain(node, body_frame)
                if alone is not None:
                    probed -= alone  # the one member a raising chain may find: required
            if probed:
                body_frame = body_frame.child(optional=body_frame.optional | probed)
            self.walk_block(node.body, body_frame)
        if node.orelse and (not scope.prunes or scope.may_hold(node.test, self.block, False)):
            # `else:`, or an `elif` (one If in orelse): the same lines either way
            self.walk_block(node.orelse, self._branch(node, False, frame, "else of: if", node.orelse))

    def _probed(self, test: ast.AST, frame: Frame) -> frozenset[str]:
        """Members a true `test` proves present: hasattr, and with CodeScope.reads_probes `isinstance`
        on a typing Protocol."""
        probed = _positive_hasattr(test, self.block)
        if self.reader.scope.reads_probes:
            probed |= self._protocol_probes(test, frame)
        return probed

    def _proven_when(self, test: ast.expr, holds: bool, frame: Frame) -> frozenset[str]:
        """Members proven present where `test` is `holds` (`if not isinstance(m, P): return` proves P's after it)."""
        found: frozenset[str] = frozenset()
        for literal in condition_literals(test, holds):
            if literal.certain and literal.holds:
                found |= self._probed(literal.node, frame)
        return found

    def _protocol_probes(self, test: ast.AST, frame: Frame) -> frozenset[str]:
        """`isinstance(model, P)` (also inside `and`) with P a typing Protocol of the same module: P's
        members.  Recorded as capabilities when read in scope: a model may lack them all."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return frozenset().union(*(self._protocol_probes(value, frame) for value in test.values))
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"):
            return frozenset()
        if len(test.args) != 2 or not isinstance(test.args[1], ast.Name):
            return frozenset()
        if self.model_role(test.args[0], frame) is None and not _holds_model(test.args[0]):
            return frozenset()
        found = self.reader.protocol_members(self.block.source, test.args[1].id)
        if frame.in_scope:
            for member in found:
                self.out.capabilities.setdefault(member, f"{self.block.source.rel}:{test.args[1].id}")
        return found

    def _chain(self, head: ast.If, frame: Frame) -> frozenset[str] | None:
        """For the first `if` of a hasattr chain that raises when no branch is taken, in scope: record
        the group, and give the member to require when the scope may take only one branch.  The elifs
        are looked up from the head's reading."""
        known = self._chains.get(id(head))
        if known is not None:
            return known or None
        links = [head]
        while len(links[-1].orelse) == 1 and isinstance(links[-1].orelse[0], ast.If):
            links.append(links[-1].orelse[0])
        last = links[-1].orelse
        if not frame.in_scope or not last or not isinstance(last[-1], ast.Raise):
            return None
        scope = self.reader.scope
        members: dict[str, None] = {}
        receiver: ast.expr | None = None
        for link in links:
            if scope.prunes and not scope.may_hold(link.test, self.block, True):
                continue
            probes = _hasattr_probes(link.test, self.block)
            if not probes:
                return None
            for argument, name in probes:
                if self.model_role(argument, frame) is None:
                    return None
                receiver = argument
                members[name] = None
        if not members or receiver is None:
            return None
        role = self.model_role(receiver, frame) or "unknown"
        if role == "unknown":
            role = role_from_conditions(frame.conditions)
        at = self.block.where(head.lineno, head)
        self.out.alternatives.append(OneOf(tuple(members), at, role))
        alone = frozenset(members) if len(members) == 1 else frozenset()
        for link in links:
            self._chains[id(link)] = alone
        return alone or None

    def _branch(self, statement: ast.If, holds: bool, frame: Frame, label: str, suite: list[ast.stmt]) -> Frame:
        """The frame of a branch where the test is `holds`; it enters EAGLE scope when the test says so."""
        test = statement.test
        branch = frame.child(conditions=frame.conditions + ((test, holds),))
        if frame.in_scope or not self.reader.scope.enters(test, self.block, holds):
            return branch
        self.mark_lines(suite)
        return branch.child(in_scope=True, guard=f"{label} {_short(self.block.condition(statement)[0])}")

    def _after_exit(self, statement: ast.If, leaves: str, frame: Frame, rest: list[ast.stmt]) -> Frame:
        test = statement.test
        after = frame.child(conditions=frame.conditions + ((test, False),))
        if frame.in_scope or not self.reader.scope.enters(test, self.block, False):
            return after
        self.mark_lines(rest)
        guard = f"after if {_short(self.block.condition(statement)[0])}: {leaves}"
        return after.child(in_scope=True, guard=guard)

    def walk_BoolOp(self, node: ast.BoolOp, frame: Frame, parent: ast.AST | None) -> None:
        """`a and b and c`: b is walked knowing what hasattr in a proves, c what a and b prove."""
        conjunction = isinstance(node.op, ast.And)
        probed: frozenset[str] = frozenset()
        for value in node.values:
            self.walk(value, frame.child(optional=frame.optional | probed) if probed else frame, node)
            if conjunction:
                probed |= _positive_hasattr(value, self.block)

    def walk_IfExp(self, node: ast.IfExp, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.test, frame, node)
        scope = self.reader.scope
        probed = self._probed(node.test, frame)
        if not scope.prunes or scope.may_hold(node.test, self.block, True):
            self.walk(node.body, frame.child(optional=frame.optional | probed) if probed else frame, node)
        if not scope.prunes or scope.may_hold(node.test, self.block, False):
            self.walk(node.orelse, frame, node)

    def walk_Assign(self, node: ast.Assign, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.value, frame, node)
        for target in node.targets:
            self._bind(target, node.value, frame)
            self._walk_target(target, frame)

    def walk_AnnAssign(self, node: ast.AnnAssign, frame: Frame, parent: ast.AST | None) -> None:
        if node.value is not None:
            self.walk(node.value, frame, node)
            self._bind(node.target, node.value, frame)
        self._walk_target(node.target, frame)

    def walk_AugAssign(self, node: ast.AugAssign, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.value, frame, node)
        self._walk_target(node.target, frame)

    def walk_NamedExpr(self, node: ast.NamedExpr, frame: Frame, parent: ast.AST | None) -> None:
        """`if (m := self.model) and ...:` makes `m` a model alias, as an assignment would."""
        self.walk(node.value, frame, node)
        self._bind(node.target, node.value, frame)

    def _walk_target(self, target: ast.expr, frame: Frame) -> None:
        """Writing `model.x = ...` needs nothing from the model, but is recorded: a member EAGLE-3 code
        assigns must not be forwarded read-only.  Reads inside the target still count."""
        if isinstance(target, ast.Attribute):
            self.walk(target.value, frame, target)
            if frame.in_scope and self.model_role(target.value, frame) is not None:
                self.out.assigned.append((target.attr, self.block.where(target.end_lineno or target.lineno, self.statement)))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._walk_target(element.value if isinstance(element, ast.Starred) else element, frame)
        elif isinstance(target, ast.Subscript):
            self.walk(target.value, frame, target)
            self.walk(target.slice, frame, target)

    def _bind(self, target: ast.expr, value: ast.expr, frame: Frame) -> None:
        if not isinstance(target, ast.Name):
            return
        role = self.model_role(value, frame)
        if role is not None:
            frame.aliases[target.id] = role
        else:
            frame.aliases.pop(target.id, None)

    def walk_Attribute(self, node: ast.Attribute, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.value, frame, node)
        if not frame.in_scope:
            return
        role = self.model_role(node.value, frame)
        if role is None:
            return
        line = node.end_lineno or node.lineno  # where the member's name is
        if isinstance(parent, ast.Call) and parent.func is node:
            self.record(node.attr, "call", role, True, line, frame, call_shape(parent))
        else:
            self.record(node.attr, "attribute", role, True, line, frame)

    def walk_Call(self, node: ast.Call, frame: Frame, parent: ast.AST | None) -> None:
        func = node.func
        arguments = _arguments(node)
        if frame.in_scope and isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(arguments) >= 2:
            role = self.model_role(arguments[0].value, frame)
            name = _string_value(arguments[1].value, self.block)
            if role is not None and name and func.id == "getattr":
                required = len(arguments) == 2
                self.record(name, "attribute", role, required, arguments[1].value.lineno, frame)
        self.walk(func, frame, node)
        for argument in arguments:
            self.walk(argument.value, frame, node)
        if frame.in_scope and frame.depth < MAX_HELPER_DEPTH:
            self.reader.follow_helper(self, node, arguments, frame)

    def walk_Lambda(self, node: ast.Lambda, frame: Frame, parent: ast.AST | None) -> None:
        self.walk(node.body, frame, node)

    def walk_Import(self, node: ast.Import, frame: Frame, parent: ast.AST | None) -> None:
        for alias in node.names:
            self._walk_dotted(alias.name, alias.lineno, frame, node)

    def walk_ImportFrom(self, node: ast.ImportFrom, frame: Frame, parent: ast.AST | None) -> None:
        if node.module:
            self._walk_dotted(node.module, node.lineno, frame, node)

    def _walk_dotted(self, dotted: str, line: int, frame: Frame, statement: ast.stmt) -> None:
        """A dotted module name reads as the attribute chain libcst makes of it (`x.draft_model.y`)."""
        parts = dotted.split(".")
        chain: ast.expr = ast.Name(id=parts[0], ctx=ast.Load())
        for part in parts[1:]:
            chain = ast.Attribute(value=chain, attr=part, ctx=ast.Load(), lineno=line, end_lineno=line)
        if len(parts) > 1:
            self.walk(chain, frame, statement)


_METHODS: dict[type[ast.AST], Callable[[ConsumerWalker, Any, Frame, ast.AST | None], None] | None] = {}
_NOT_WALKED = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
# libcst's order where CPython's differs: an except clause's body before its type, a case's body before its guard
_FIELDS: dict[type, tuple[str, ...]] = {ast.ExceptHandler: ("body", "type"), ast.match_case: ("pattern", "body", "guard")}


def _children(node: ast.AST) -> Iterator[ast.AST | list[ast.stmt]]:
    """Child nodes in the order libcst lists them (a block of statements as one list): a dict's keys
    and values interleaved, as written."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if key is not None:
                yield key
            yield value
        return
    if isinstance(node, ast.MatchMapping):
        for key, pattern in zip(node.keys, node.patterns):
            yield key
            yield pattern
        return
    for name in _FIELDS.get(type(node), node._fields):
        child = getattr(node, name, None)
        if isinstance(child, list):
            if child and isinstance(child[0], ast.stmt):
                yield child
            else:
                yield from (item for item in child if isinstance(item, ast.AST) and not isinstance(item, _NOT_WALKED))
        elif isinstance(child, ast.AST) and not isinstance(child, _NOT_WALKED):
            yield child


def _all_params(params: ast.arguments) -> list[ast.arg]:
    out = params.posonlyargs + params.args + params.kwonlyargs
    return out + [star for star in (params.vararg, params.kwarg) if star is not None]


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _early_exit(statement: ast.stmt) -> str:
    """How an `if` without `else` always leaves ("return", "raise"), or "" when it may fall through."""
    if not isinstance(statement, ast.If) or statement.orelse:
        return ""
    last = statement.body[-1] if statement.body else None
    if isinstance(last, ast.Return):
        return "return"
    if isinstance(last, ast.Raise):
        return "raise"
    return ""


def _hasattr_probes(test: ast.AST, block: Block) -> list[tuple[ast.expr, str]]:
    """(object, member) of each `hasattr(object, "member")` a true `test` proves (also inside `and`)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [probe for value in test.values for probe in _hasattr_probes(value, block)]
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr":
        arguments = _arguments(test)
        if len(arguments) >= 2 and not arguments[0].star:
            name = _string_value(arguments[1].value, block)
            if name:
                return [(arguments[0].value, name)]
    return []


def _positive_hasattr(test: ast.AST, block: Block) -> frozenset[str]:
    """Member names a condition proves present: `hasattr(m, "x")`, also inside `and`."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr":
        arguments = _arguments(test)
        if len(arguments) >= 2:
            name = _string_value(arguments[1].value, block)
            if name:
                return frozenset({name})
        return frozenset()
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return frozenset().union(*(_positive_hasattr(value, block) for value in test.values))
    return frozenset()


class ProtocolReader:
    """Finds the consumers, walks the slices that matter and follows helpers."""

    def __init__(self, run: RunContext, extra_consumers: list[Path] | None = None, scope: CodeScope = EAGLE3_SCOPE):
        self.tree = run.tree
        self.cache = run.cache
        self.scope = scope
        self._protocols: dict[tuple[Path, str], frozenset[str]] = {}
        self.extraction = Extraction()
        self.extra = extra_consumers or []
        slices = run.cache.memo(_SLICES, ParsedSlices)
        self._blocks = slices.blocks
        self._slices = slices.general

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
                if in_speculative and self.scope.is_module(os.path.relpath(dirpath, speculative), filename):  # all of it counts
                    found.append((Path(path), True))
                    continue
                if self.scope.file_may_guard(path):
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
        wanted: list[tuple[SourceFile, bool]] = []
        for path, eagle_module in self.candidate_files():
            if self.cache.is_excluded(path):
                continue
            try:
                source = self.cache.read(path)
            except EaglepatchError as exc:
                self.extraction.unread.append((path, exc))
                continue
            if eagle_module or self.scope.has_guard(source.text):  # else no guarded branch: nothing can count here
                wanted.append((source, eagle_module))
        join = self.cache.validate_aside([source.path for source, _ in wanted])  # whole files, beside the slices
        failed: dict[Path, Exception] = {}
        for source, eagle_module in wanted:
            try:
                self._read_file(source, eagle_module)
            except Exception as exc:  # a file that does not compile may trip the reading: said below, if so
                failed[source.path] = exc
        join()
        for source, _ in wanted:
            error = self.cache.unreadable(source.path)  # a slice that parses alone is no reading of a file that does not
            trouble = failed.get(source.path)
            if error is None and trouble is not None:
                if not isinstance(trouble, EaglepatchError):
                    raise trouble
                error = trouble
            if error is not None:
                self.extraction.unread.append((source.path, error))
        return self.extraction

    def _read_file(self, source: SourceFile, eagle_module: bool) -> None:
        """Parse only the functions that use a model and, outside EAGLE modules, mention EAGLE."""
        outline = self.cache.outline(source)
        text = outline.joined

        def functions(offsets: Iterable[int]) -> dict[int, None]:
            found: dict[int, None] = {}
            for offset in offsets:
                index = outline.line_index(offset)
                if index < len(source.lines) and not source.lines[index].lstrip().startswith("#"):
                    # module-level code (imports, constants) makes no calls on a runner's model
                    header = outline.outer_def(index)
                    if header >= 0:
                        found[header] = None
            return found

        if eagle_module:
            headers = list(functions(m.start() for m in _MODEL_USE.finditer(text)))
        else:  # only functions that mention EAGLE, and of those only the ones that use a model
            lines = source.lines
            headers = [h for h in functions(self.scope.offsets(text)) if _MODEL_USE.search("\n".join(lines[h : outline.ends[h]]))]
        for header in headers:
            block = self.parse_block(source, header)
            if block.first_line == 0 and len(block.module.body) > 1:
                self._walk(block, eagle_module)  # fell back to the whole file
                return
            self._walk(block, eagle_module, self._class_of(outline, header))

    def parse_block(self, source: SourceFile, header: int) -> Block:
        """The def whose header is line index `header`, decorators included, read by CPython's parser
        from the same dedented text libcst would read; the whole file when it does not parse alone."""
        start, end = self.cache.block_span(source, header)
        key = (source.path, start, end)
        block = self._blocks.get(key)
        if block is None:
            text = block_text(source.lines[start:end])
            try:
                block = Block(source, ast.parse(text), start, text)
            except (SyntaxError, ValueError):
                block = self._parse_whole(source)
            self._blocks[key] = block
        return block

    def _parse_whole(self, source: SourceFile) -> Block:
        key = (source.path, 0, -1)
        block = self._blocks.get(key)
        if block is None:
            try:
                module = ast.parse(source.text)
            except SyntaxError as exc:
                raise invalid_python(source, exc) from None
            block = self._blocks[key] = Block(source, module, 0, source.text)
        return block

    @staticmethod
    def _class_of(outline: Outline, header: int) -> str:
        own = next(indent for index, indent, _, _ in outline.headers if index == header)
        owner = ""
        for index, indent, kind, name in outline.headers:
            if index >= header:
                break
            if kind == "class" and indent < own and outline.ends.get(index, 0) > header:
                owner = name
        return owner

    def _walk(self, block: Block, eagle_module: bool, class_name: str = "") -> None:
        rel = block.source.rel
        frame = Frame(in_scope=eagle_module, guard=self.scope.module_label if eagle_module else "", aliases={}, class_name=class_name)
        if eagle_module:
            self.extraction.eagle_lines.setdefault(rel, set()).update(
                range(block.first_line + 1, block.first_line + block.text.count("\n") + 1)
            )
        ConsumerWalker(self, block).walk(block.module, frame)

    def protocol_members(self, source: SourceFile, name: str) -> frozenset[str]:
        """The methods of `name` when `source` defines it at module level as a typing Protocol, else none."""
        key = (source.path, name)
        found = self._protocols.get(key)
        if found is None:
            found = frozenset()
            outline = self.cache.outline(source)
            header = next((i for i, indent, kind, n in outline.headers if indent == 0 and kind == "class" and n == name), None)
            if header is not None:
                cls = next((n for n in self.parse_block(source, header).module.body if isinstance(n, ast.ClassDef)), None)
                if cls is not None and any(_last_name(base) == "Protocol" for base in cls.bases):
                    found = frozenset(n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
            self._protocols[key] = found
        return found

    # -- helpers -------------------------------------------------------------------------
    def follow_helper(self, walker: ConsumerWalker, call: ast.Call, arguments: list[Argument], frame: Frame) -> None:
        """EAGLE code that hands a model to a function makes that function EAGLE code too."""
        bound: dict[str, UseRole] = {}
        positional: list[tuple[int, UseRole]] = []
        position = 0
        for arg in arguments:
            role = walker.model_role(arg.value, frame)
            if arg.keyword is not None:
                if role is not None:
                    bound[arg.keyword] = role
            elif arg.star:
                continue
            else:
                if role is not None:
                    positional.append((position, role))
                position += 1
        if not bound and not positional:
            return
        target = self._resolve_function(walker.block.source, call.func, frame)
        if target is None:
            return
        source, header, is_method = target
        block = self.parse_block(source, header)
        func = _find_def(block.module, source.lines[header])
        if func is None:
            return
        params = func.args.posonlyargs + func.args.args
        if is_method and params and params[0].arg in ("self", "cls"):
            params = params[1:]
        aliases: dict[str, UseRole] = {}
        for index, role in positional:
            if index < len(params):
                name = params[index].arg
                aliases[name] = _parameter_role(role, name, frame)
        for name, role in bound.items():
            aliases[name] = _parameter_role(role, name, frame)
        key = (source.rel, header, tuple(sorted(aliases.items())))
        if key in self.extraction.followed:
            return
        self.extraction.followed.add(key)
        via = walker.block.where(call.lineno, walker.statement)  # libcst's line of a call leaves out parentheses around it too
        helper_frame = Frame(
            in_scope=True,
            guard=f"helper {func.name}() called from {self.scope.label} code at {via}",
            aliases=aliases,
            class_name=self._class_of(self.cache.outline(source), header) if is_method else "",
            depth=frame.depth + 1,
        )
        offset = block.first_line
        self.extraction.eagle_lines.setdefault(source.rel, set()).update(
            range(func.lineno + offset, (func.end_lineno or func.lineno) + offset + 1)
        )
        ConsumerWalker(self, block).walk_block(func.body, helper_frame)

    def _resolve_function(self, source: SourceFile, func: ast.expr, frame: Frame) -> tuple[SourceFile, int, bool] | None:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            outline = self.cache.outline(source)
            owner = outline.find(frame.class_name, "class") if frame.class_name else None
            if owner is None:
                return None
            end = outline.ends.get(owner, owner)
            for index, _indent, kind, name in outline.headers:
                if owner < index < end and kind == "def" and name == func.attr:
                    return source, index, True
            return None
        if not isinstance(func, ast.Name):
            return None
        name = func.id
        outline = self.cache.outline(source)
        for index, indent, kind, header_name in outline.headers:
            if indent == 0 and kind == "def" and header_name == name:
                return source, index, False
        imports = ImportTable.of(self.cache, source, self.tree)
        origin = imports.lookup(name)
        if origin is None or origin.path is None:
            return None
        if self.cache.is_excluded(origin.path):
            return None
        error = self.cache.unreadable(origin.path)
        if error is not None:  # a helper the consumer calls is part of the consumer
            if all(path != origin.path for path, _ in self.extraction.unread):
                self.extraction.unread.append((origin.path, error))
            return None
        other = self.cache.read(origin.path)
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
            if self.cache.is_excluded(path):
                continue
            try:
                source = self.cache.read(path)
            except EaglepatchError as exc:  # what the runner uses on every model decides what is set aside
                self.extraction.unread.append((path, exc))
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
        def parse(start: int, end: int) -> ast.Module | None:
            key = (source.path, start, end)
            if key not in self._slices:
                self._slices[key] = _parse_lines(lines, start, end)
            return self._slices[key]

        uses = _uses_in_blocks(parse, blocks)
        if uses is None and blocks is not whole_file:  # a slice that does not parse on its own
            uses = _uses_in_blocks(parse, whole_file)
        if uses is None:
            return _general_uses_by_text(lines, inside)
        return sorted(use for use in uses if use[0] not in inside)


def _uses_in_blocks(
    parse: Callable[[int, int], ast.Module | None], blocks: list[tuple[int, int, list[int]]]
) -> list[tuple[int, str]] | None:
    """(file line, member) of the model member uses in each (start, end, lines seen) block, each parsed
    by `parse`; None when one of the blocks is not valid Python."""
    uses: list[tuple[int, str]] = []
    for start, end, seen in blocks:
        tree = parse(start, end)
        if tree is None:
            return None
        uses += [(start + line, member) for line, member in _model_member_uses(tree, [n - start for n in seen])]
    return uses


def _names_a_model(text: str, start: int) -> bool:
    """`model.` at `start` belongs to `model`, `x.model` or `x_model`, not to `remodel`."""
    if start == 0 or not is_word_char(text[start - 1]):
        return True
    return text[start - 1] == "_" and start >= 2 and is_word_char(text[start - 2])



def _parse_lines(lines: Sequence[str], start: int, end: int) -> ast.Module | None:
    """CPython's tree of lines [start, end), dedented; its line 1 is file line start + 1."""
    if start >= end:
        return ast.Module(body=[], type_ignores=[])
    header = lines[start]
    try:
        return ast.parse(dedent_lines(lines[start:end], len(header) - len(header.lstrip(" \t"))))
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


def _find_def(module: ast.Module, header_line: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The first def (outermost first, in source order) named as on `header_line`."""
    name = re.match(r"\s*(?:async\s+)?def\s+(\w+)", header_line)
    if not name:
        return None
    wanted = name.group(1)
    first = module.body[0] if module.body else None
    if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef)) and first.name == wanted:
        return first  # the slice of that def
    found = [
        node for node in walk(module) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == wanted
    ]
    return min(found, key=lambda node: (node.lineno, node.col_offset), default=None)


@dataclass(frozen=True)
class ScopeReading:
    """What one scope's code uses on models: the protocol (possibly empty), the extraction it was
    built from, and every member the runner uses on any model outside that code."""

    protocol: Protocol
    extraction: Extraction
    general: Mapping[str, str]


def read_scope(
    run: RunContext,
    scope: CodeScope = EAGLE3_SCOPE,
    extra_consumers: list[Path] | None = None,
    ignore: Iterable[str] | None = None,
) -> ScopeReading:
    """The members `scope`'s code uses, less `ignore` and the general model interface."""
    reader = ProtocolReader(run, extra_consumers, scope)
    extraction = reader.read()
    general = reader.general_interface()
    if extraction.unread:  # the protocol read around a consumer is not the tree's protocol
        raise UnreadableFiles([error for _, error in extraction.unread], [run.cache.rel(path) for path, _ in extraction.unread])
    uses: dict[str, list[Use]] = {}
    set_aside: dict[str, str] = {}
    ignored = set(ignore or [])
    for use in extraction.uses:
        if use.name in ignored:
            continue
        if use.name in general:
            set_aside[use.name] = general[use.name]
            continue
        uses.setdefault(use.name, []).append(use)
    assigned: dict[str, list[str]] = {name: [] for name in uses}
    for name, at in extraction.assigned:
        if name in assigned and at not in assigned[name]:
            assigned[name].append(at)
    members = {name: ProtocolMember(name, tuple(found), tuple(assigned[name])) for name, found in uses.items()}
    protocol = Protocol(
        members=dict(sorted(members.items())),
        consumers=tuple(sorted(extraction.consumers)),
        general_interface=dict(sorted(set_aside.items())),
        warnings=tuple(extraction.warnings),
        ignored=tuple(sorted(ignored)),
    )
    return ScopeReading(protocol, extraction, general)


def extract_protocol(
    run: RunContext,
    extra_consumers: list[Path] | None = None,
    ignore: Iterable[str] | None = None,
    ignore_from: Mapping[str, str] | None = None,
) -> Protocol:
    """The members EAGLE-3 code uses, less `ignore`; a name in `ignore` that is no member is an
    error naming where it was asked for (`ignore_from`: "--ignore" or a pyproject.toml; default "--ignore")."""
    reading = read_scope(run, EAGLE3_SCOPE, extra_consumers, ignore)
    if not reading.protocol.members:
        raise EaglepatchError(
            "no EAGLE-3 consumer code found (no model member used in speculative/*eagle* files or EAGLE-guarded "
            "branches); is this an SGLang tree with EAGLE support?",
            path=str(run.tree.srt),
        )
    ignored = set(ignore or [])
    _check_ignored(ignored, {u.name for u in reading.extraction.uses} - set(reading.general), ignore_from or {})
    return reading.protocol


def _check_ignored(ignored: set[str], known: set[str], ignore_from: Mapping[str, str]) -> None:
    """A member to ignore that EAGLE-3 code of this tree never uses is a typo (or a release's
    renaming): an error naming every member there is, the flag's first, then the file's."""
    unknown = sorted(ignored - known)
    if not unknown:
        return
    members = ", ".join(sorted(known))
    by_origin: dict[str, list[str]] = {}
    for name in unknown:
        by_origin.setdefault(ignore_from.get(name, "--ignore"), []).append(name)
    origin = "--ignore" if "--ignore" in by_origin else sorted(by_origin)[0]
    names = by_origin[origin]
    listed = ", ".join(names)
    what = "is not an EAGLE-3 protocol member" if len(names) == 1 else "are not EAGLE-3 protocol members"
    if origin == "--ignore":
        raise EaglepatchError(f"{listed} {what} of this tree; its members: {members}", path=origin)
    which = "which is not an EAGLE-3 protocol member" if len(names) == 1 else "which are not EAGLE-3 protocol members"
    raise EaglepatchError(f"[tool.eaglepatch] ignore names {listed}, {which} of this tree; its members: {members}", path=origin)
