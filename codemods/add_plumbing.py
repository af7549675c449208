"""Write a PlumbingPlan's pieces into a module: the one job of this codemod.

Each piece (patcher/plumbing/planner.py) is one statement group or one argument, with the method it
goes into and the statement it goes before, after or in place of.  The group is laid out at the depth it
lands at, as black lays it out at the tree's line length, in the file's own indent and newline, and
carries one marker comment line, `# eaglepatch: plumbing learned from <origin> (<kind>, <n> statements,
digest <d>)`: the digest is the group's code as written, so codemods/remove_plumbing.py takes out exactly
what this wrote and leaves a group edited by hand.  What goes in place of a statement keeps it: a tail
keeps the `return` it replaces (its trailing comment too), an argument is added to the call the
statement holds, the call laid out again as black would (the marker says how it was laid out before:
`one line` or `hugged`), or, where it has a magic trailing comma or is not black's layout, the argument
put in where it stands (`in place`).  Blank lines and comments above an anchor stay above what is written before it.

Idempotent: a method that already holds a marker of a piece's kind gets no second one.  A piece whose
anchor is not where the plan says (the file changed since it was planned), or whose code black would
lay out in a way this codemod does not write, raises PlumbingNotWritten; nothing is written half.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
from libcst.codemod import CodemodContext

from ..plumbing.planner import INDENT, statement_fingerprint
from ..read.slices import ClassView, statement_lines
from ..read.text import indent_width, lines_with_ends
from .add_delegations import fit_call
from .contract import VisitorCommand, run_command
from .names import LINE_LENGTH, PLUMBING

if TYPE_CHECKING:
    from ..records import PlumbingPiece

LOGITS_CALL = "self.logits_processor"
HEADER = "header"  # a marker's layout for a loop whose header an `index` piece rewrote
_CALL = "__eaglepatch_call__"


class PlumbingNotWritten(ValueError):
    """A piece the codemod cannot write as planned."""


# --------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class PlumbingMarker:
    origin: str
    kind: str
    count: int  # statements in the group; 0 for an argument
    layout: str  # for an argument, how the call was laid out before: "one line", "hugged" or "in place"
    digest: str

    @property
    def text(self) -> str:
        if self.count:
            what = f"{self.count} statement{'s' if self.count > 1 else ''}"
        elif self.layout == HEADER:
            what = HEADER
        else:
            what = f"argument, {self.layout}"
        return f"{PLUMBING}{self.origin} ({self.kind}, {what}, digest {self.digest})"


_MARKER = re.compile(
    rf"^{re.escape(PLUMBING)}(?P<origin>\S+) \((?P<kind>[a-z-]+), "
    r"(?:(?P<count>\d+) statements?|argument, (?P<layout>one line|hugged|in place)|(?P<header>header)), digest (?P<digest>[0-9a-f]{12})\)$"
)


def parse_plumbing_marker(comment: str) -> PlumbingMarker | None:
    found = _MARKER.match(comment.strip())
    if found is None:
        return None
    count = int(found["count"]) if found["count"] else 0
    return PlumbingMarker(found["origin"], found["kind"], count, found["layout"] or found["header"] or "", found["digest"])


def group_digest(statements: Sequence[cst.BaseStatement], unit: str = "    ", newline: str = "\n") -> str:
    """What revert compares a group with: its code as written, the marker (and what is above it) left out."""
    printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
    code = "".join(printer.code_for_node(s.with_changes(leading_lines=()) if i == 0 else s) for i, s in enumerate(statements))
    return hashlib.sha256(code.encode("utf-8")).hexdigest()[:12]


def header_digest(loop: cst.For, unit: str = "    ", newline: str = "\n") -> str:
    """What revert compares a rewritten loop header with: the `for` line alone (its body changes with
    the pieces written into it, and is reverted first)."""
    bare = loop.with_changes(leading_lines=(), body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]), orelse=None)
    return group_digest([bare], unit, newline)


def with_index(loop: cst.For, header: str) -> cst.For:
    """`for layer in <iter>:` as `header` says (`for i, layer in enumerate(<iter>):`), the iterable's node
    kept as it is (so revert gives it back): PlumbingNotWritten for any other header."""
    given = ast.parse(f"{header}\n    pass").body[0]
    if not (isinstance(given, ast.For) and isinstance(given.target, ast.Tuple) and len(given.target.elts) == 2):
        raise PlumbingNotWritten(f"not an index header: {header!r}")
    index, layer = given.target.elts
    if not (isinstance(loop.target, cst.Name) and isinstance(index, ast.Name) and isinstance(layer, ast.Name) and layer.id == loop.target.value):
        raise PlumbingNotWritten(f"the loop is not `for {getattr(layer, 'id', '?')} in ...`")
    target = cst.Tuple(
        [cst.Element(cst.Name(index.id), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Element(loop.target)], lpar=[], rpar=[]
    )
    return loop.with_changes(target=target, iter=cst.Call(cst.Name("enumerate"), [cst.Arg(loop.iter)]))


def without_index(loop: cst.For) -> cst.For | None:
    """The loop `with_index` rewrote, given back; None when its header is not one `with_index` writes."""
    target, over = loop.target, loop.iter
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(over, cst.Call) and len(over.args) == 1):
        return None
    if not (isinstance(over.func, cst.Name) and over.func.value == "enumerate" and over.args[0].keyword is None):
        return None
    return loop.with_changes(target=target.elements[1].value, iter=over.args[0].value)


def marker_line(marker: PlumbingMarker) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, comment=cst.Comment(marker.text))


def leading_lines(statement: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The blank and comment lines above a statement (every kind of statement has them)."""
    lines: Sequence[cst.EmptyLine] = getattr(statement, "leading_lines", ())
    return list(lines)


def marker_of(statement: cst.BaseStatement) -> PlumbingMarker | None:
    """The marker of a group's first statement: the last of its leading lines."""
    leading = leading_lines(statement)
    if not leading or leading[-1].comment is None:
        return None
    return parse_plumbing_marker(leading[-1].comment.value)


# --------------------------------------------------------------------------- layout


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise PlumbingNotWritten(f"cannot read {text!r}: {exc}") from None


def _final_call(text: str) -> tuple[int, int] | None:
    """(just after the opening bracket, at the closing one) of the bracket pair that ends a line of code."""
    ops = [t for t in _tokens(text) if t.type == tokenize.OP and t.string in "()[]{}"]
    if not ops or ops[-1].string != ")" or ops[-1].end[1] != len(text.rstrip()):
        return None
    depth = 0
    for token in reversed(ops):
        depth += token.string in ")]}"
        depth -= token.string in "([{"
        if depth == 0:
            return token.end[1], ops[-1].start[1]
    return None


def _top_level_at(text: str, words: Sequence[str]) -> list[int]:
    """Where `words` (a comma, `if`, `else`) stand outside brackets in one line of code."""
    depth, found = 0, []
    for token in _tokens(text):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif depth == 0 and token.string in words:
            found.append(token.start[1])
    return found


def _items(body: str) -> list[str]:
    cuts = _top_level_at(body, [","])
    parts, begin = [], 0
    for cut in cuts:
        parts.append(body[begin:cut].strip())
        begin = cut + 1
    last = body[begin:].strip()
    return parts + ([last] if last else [])


def _ternary(text: str) -> list[str] | None:
    """`a if b else c` as black splits it: ["a", "if b", "else c"]."""
    cuts = _top_level_at(text, ["if", "else"])
    if len(cuts) != 2:
        return None
    first, second = cuts
    return [text[:first].strip(), text[first:second].strip(), text[second:].strip()]


def lay_out(code: str, column: int, unit: str = "    ", width: int = LINE_LENGTH) -> list[str]:
    """A piece's code (one logical line a statement line, INDENT a level) as lines at its depth: each line
    black leaves alone as it is, a call split as black splits it (an `if` header black would wrap in
    parentheses never fits there either: PlumbingNotWritten).
    The lines are relative to `column` (the depth of the group's first statement)."""
    out: list[str] = []
    step = len(unit.expandtabs(4))
    for raw in code.split("\n"):
        depth = 0
        while raw.startswith(INDENT):
            raw, depth = raw[len(INDENT) :], depth + 1
        indent = unit * depth
        base = column + depth * step

        def fits(text: str, deeper: int = 0, base: int = base) -> bool:
            return base + deeper * step + len(text.expandtabs(4)) <= width

        if fits(raw):
            out.append(indent + raw)
            continue
        pair = _final_call(raw)
        if pair is None:
            raise PlumbingNotWritten(f"a line too long to write as black would: {raw!r}")
        start, end = pair
        head, body, tail = raw[:start], raw[start:end], raw[end:]
        items = _items(body)
        shift = " " * column
        lines = [line[column:] for line in fit_call(shift + indent, unit, head, items, tail, width)]
        if len(items) == 1 and len(lines) == 3 and not fits(lines[1].strip(), 1):
            parts = _ternary(items[0])
            if parts is None or not all(fits(p, 1) for p in parts):
                raise PlumbingNotWritten(f"a line too long to write as black would: {raw!r}")
            lines = [lines[0], *(f"{indent}{unit}{p}" for p in parts), lines[2]]
        if not all(column + len(line.expandtabs(4)) <= width for line in lines):
            raise PlumbingNotWritten(f"a line too long to write as black would: {raw!r}")
        out += lines
    return out


def _group(code: str, column: int, unit: str, newline: str, width: int, config: cst.PartialParserConfig) -> list[cst.BaseStatement]:
    lines = lay_out(code, column, unit, width)
    return list(cst.parse_module(newline.join(lines) + newline, config=config).body)


# --------------------------------------------------------------------------- an argument added to a call


def _one_line(node: cst.CSTNode) -> str | None:
    text = cst.Module(body=[]).code_for_node(node).strip()
    return None if "\n" in text or "#" in text else text


@dataclass(frozen=True)
class _CallLine:
    """A simple statement holding `self.logits_processor(...)` as its value, cut into black's parts."""

    small: cst.BaseSmallStatement
    call: cst.Call
    head: str  # up to and including the opening bracket
    items: tuple[str, ...] | None  # each argument on one line; None when one spans lines or holds a comment
    tail: str  # the closing bracket and what follows it
    magic: bool  # a trailing comma after the last argument: black keeps it one argument a line


def _call_line(statement: cst.BaseStatement) -> _CallLine:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        raise PlumbingNotWritten("the logits processor call is not a statement of its own")
    small = statement.body[0]
    if not isinstance(small, (cst.Return, cst.Assign, cst.AnnAssign, cst.Expr)):
        raise PlumbingNotWritten("the logits processor call is not a statement of its own")
    call = small.value
    if not isinstance(call, cst.Call) or cst.Module(body=[]).code_for_node(call.func) != LOGITS_CALL:
        raise PlumbingNotWritten("the statement's value is not the logits processor call")
    placeholder = cst.Module(body=[]).code_for_node(small.with_changes(value=cst.Name(_CALL)))
    before, _, after = placeholder.partition(_CALL)
    items = [_one_line(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for arg in call.args]
    spelled = None if any(i is None for i in items) or call.lpar else tuple(i for i in items if i is not None)
    magic = bool(call.args) and isinstance(call.args[-1].comma, cst.Comma)
    return _CallLine(small, call, f"{before}{LOGITS_CALL}(", spelled, f"){after}", magic)


def _black_lines(line: _CallLine, items: Sequence[str], column: int, unit: str, width: int) -> list[str]:
    shift = " " * column
    return [text[column:] for text in fit_call(shift, unit, line.head, list(items), line.tail, width)]


def _in_place(line: _CallLine, argument: str) -> cst.BaseSmallStatement:
    """The call with `argument` after its last one, nothing else moved: the argument before it takes the
    comma that led to the next argument (the whitespace after the opening bracket, when exploded), the
    new one the comma the last one had (none, or the magic trailing one)."""
    added = cst.parse_expression(f"f({argument})")
    assert isinstance(added, cst.Call)
    args = list(line.call.args)
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        between = cst.Comma(whitespace_before=last.comma.whitespace_before, whitespace_after=line.call.whitespace_before_args)
    else:
        between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    args[-1:] = [last.with_changes(comma=between), added.args[0].with_changes(comma=last.comma)]
    return line.small.with_changes(value=line.call.with_changes(args=args))


def _taken_out(line: _CallLine) -> cst.BaseSmallStatement:
    """`_in_place` undone: the last argument out, the one before it given its comma."""
    args = list(line.call.args)
    removed = args.pop()
    args[-1] = args[-1].with_changes(comma=removed.comma)
    return line.small.with_changes(value=line.call.with_changes(args=args))


def with_argument(statement: cst.SimpleStatementLine, argument: str, column: int, unit: str, newline: str, width: int, config: cst.PartialParserConfig) -> tuple[cst.SimpleStatementLine, str]:
    """The statement with `argument` added to its logits processor call, and how the call was laid out
    before ("one line", "hugged": laid out again as black lays the longer call out; "in place": a call
    with a magic trailing comma, or not in black's layout, gets the argument where it stands)."""
    line = _call_line(statement)
    printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
    written = printer.code_for_node(statement.with_changes(leading_lines=()))
    if line.items and not line.magic:
        was = _black_lines(line, line.items, column, unit, width)
        if newline.join(was) + newline == written and len(was) in (1, 3):
            text = newline.join(_black_lines(line, [*line.items, argument], column, unit, width)) + newline
            parsed = cst.parse_statement(text, config=config)
            assert isinstance(parsed, cst.SimpleStatementLine)
            layout = "one line" if len(was) == 1 else "hugged"
            return parsed.with_changes(leading_lines=statement.leading_lines, trailing_whitespace=statement.trailing_whitespace), layout
    if not line.call.args:
        raise PlumbingNotWritten("the logits processor call takes no argument to add the aux states after")
    return statement.with_changes(body=[_in_place(line, argument)]), "in place"


def without_argument(statement: cst.SimpleStatementLine, layout: str, unit: str, newline: str, config: cst.PartialParserConfig) -> cst.SimpleStatementLine | None:
    """The statement as it was before `with_argument` wrote it with `layout` (its last argument taken out),
    or None when it cannot be: fewer than two arguments, or an argument that spans lines."""
    line = _call_line(statement)
    if len(line.call.args) < 2:
        return None
    if layout == "in place":
        before = statement.with_changes(body=[_taken_out(line)])
        argument = cst.Module(body=[]).code_for_node(line.call.args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip()
        again = statement.with_changes(body=[_in_place(_call_line(before), argument)])
        printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
        return before if printer.code_for_node(again) == printer.code_for_node(statement) else None
    if line.items is None:
        return None
    items = ", ".join(line.items[:-1])
    lines = [f"{line.head}{items}{line.tail}"] if layout == "one line" else [line.head, f"{unit}{items}", line.tail]
    parsed = cst.parse_statement(newline.join(lines) + newline, config=config)
    assert isinstance(parsed, cst.SimpleStatementLine)
    return parsed.with_changes(trailing_whitespace=statement.trailing_whitespace)


# --------------------------------------------------------------------------- the codemod


@dataclass(frozen=True)
class StatementPlaces:
    """Where each statement of a parsed view starts: its line of the file as CPython's parser places
    it (the planner's lines are ast's too), and its column, the indent of that line (a statement of an
    indented block starts its line).  libcst's PositionProvider prints the whole module to know this,
    and cost more than parsing and printing it."""

    view: ClassView
    lines: dict[int, tuple[int, int]]  # id(statement) -> (first line, last line) of the view
    text_lines: list[str]

    @classmethod
    def of(cls, module: cst.Module, view: ClassView) -> StatementPlaces:
        return cls(view, statement_lines(module, view.text), lines_with_ends(view.text))

    def _view_line(self, statement: cst.CSTNode) -> int:
        span = self.lines.get(id(statement))
        if span is None:
            raise PlumbingNotWritten("the module's statements could not be placed on its lines")
        return span[0]

    def line(self, statement: cst.CSTNode) -> int:
        return self.view.original_line(self._view_line(statement))

    def column(self, statement: cst.CSTNode) -> int:
        return indent_width(self.text_lines[self._view_line(statement) - 1])


def statement_columns(places: StatementPlaces, function: cst.FunctionDef) -> dict[int, tuple[cst.BaseStatement, int, int]]:
    """id -> (statement, line, column) of each statement of a function's blocks (not nested defs')."""
    found: dict[int, tuple[cst.BaseStatement, int, int]] = {}

    def visit(block: cst.BaseSuite) -> None:
        if not isinstance(block, cst.IndentedBlock):
            return
        for statement in block.body:
            found[id(statement)] = (statement, places.line(statement), places.column(statement))
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            for suite in _statement_suites(statement):
                visit(suite)

    visit(function.body)
    return found


def _statement_suites(statement: cst.BaseStatement) -> list[cst.BaseSuite]:
    suites: list[cst.BaseSuite] = []
    if isinstance(statement, (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar)):
        suites.append(statement.body)
        orelse = getattr(statement, "orelse", None)
        if isinstance(orelse, cst.If):
            suites += _statement_suites(orelse)
        elif orelse is not None:
            suites.append(orelse.body)
        suites += [h.body for h in getattr(statement, "handlers", ())]
        final = getattr(statement, "finalbody", None)
        if final is not None:
            suites.append(final.body)
    elif isinstance(statement, cst.Match):
        suites += [case.body for case in statement.cases]
    return suites


def _fingerprint(statement: cst.BaseStatement) -> str:
    code = cst.Module(body=[]).code_for_node(statement.with_changes(leading_lines=()))
    try:
        parsed = ast.parse(code).body
    except SyntaxError:
        return ""
    return statement_fingerprint(parsed[0]) if parsed else ""


Edit = Callable[[cst.BaseStatement], list[cst.BaseStatement]]


HOLDS_BLOCKS = (cst.Module, cst.BaseCompoundStatement, cst.BaseSuite, cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)


class BlockTransformer(cst.CSTTransformer):
    """A transformer of statement blocks: it descends only into what can hold a block, never into an
    expression or a simple statement line (most of a function's nodes, and of what visiting it costs).
    The plumbing codemods take it before their command base (`class AddPlumbing(BlockTransformer,
    VisitorCommand)`)."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        return isinstance(node, HOLDS_BLOCKS) and super().on_visit(node)


class BlockEdits(BlockTransformer):
    """Rewrites the blocks of one function: each statement an edit is keyed to (by the id of the original)
    becomes what the edit makes of it (as updated below), and `end` is appended to the function's body."""

    def __init__(self, root: cst.FunctionDef, edits: dict[int, Edit], end: Callable[[], list[cst.BaseStatement]] | None = None):
        super().__init__()
        self.root = root
        self.edits = edits
        self.end = end

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body: list[cst.BaseStatement] = []
        for original, updated in zip(original_node.body, updated_node.body):
            edit = self.edits.get(id(original))
            body += edit(updated) if edit is not None else [updated]
        if original_node is self.root.body and self.end is not None:
            body += self.end()
        return updated_node.with_changes(body=body)


class AddPlumbing(BlockTransformer, VisitorCommand):
    """Write the pieces of a PlumbingPlan that go into this module (`plan.pieces_in(file)`)."""

    DESCRIPTION = "Write the capture plumbing a PlumbingPlan names."

    def __init__(self, context: CodemodContext, pieces: Sequence[PlumbingPiece], line_length: int = LINE_LENGTH, view: ClassView | None = None):
        """`view`: what the module was parsed from (else the module is printed to place its lines)."""
        super().__init__(context)
        self._view = view
        self._places: StatementPlaces | None = None
        self.pieces = tuple(pieces)
        self.line_length = line_length
        self.written: list[PlumbingPiece] = []
        self.present: list[PlumbingPiece] = []  # already in the method (a marker of its kind): left
        self._module: cst.Module | None = None
        self._classes: list[cst.ClassDef] = []
        self._wanted = {p.cls for p in pieces}
        self._defs: Counter[str] = Counter()

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node
        view = self._view
        if view is None:
            code = node.code
            view = ClassView(code, code)
        self._places = StatementPlaces.of(node, view)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if node.name.value in self._wanted and not self._classes:
            self._classes.append(node)
            self._defs = Counter(_defined_methods(node.body))
            return True
        return False

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        if self._classes and self._classes[-1] is original_node:
            self._classes.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef | cst.FlattenSentinel[cst.BaseStatement]:
        if not self._classes:
            return updated_node
        cls = self._classes[-1].name.value
        assert self._places is not None, "visit_Module runs before any def is left"
        line = self._places.line(original_node)
        name = original_node.name.value
        # the def a piece names: by its name, and by its line where the class defines the name twice
        # (a second run, on what the first one wrote, finds its defs moved down)
        todo = [p for p in self.pieces if p.cls == cls and p.method == name and (self._defs[name] == 1 or p.method_line == line)]
        beside = [p for p in todo if p.where == "beside"]
        todo = [p for p in todo if p.where != "beside"]
        updated = self._rewrite(original_node, todo) if todo else updated_node
        return self._copies(updated, beside) if beside else updated

    def _copies(self, function: cst.FunctionDef, pieces: list[PlumbingPiece]) -> cst.FunctionDef | cst.FlattenSentinel[cst.BaseStatement]:
        """The def, then each `hook` piece's copy of it under the piece's name (a blank line and the
        marker above it), unless the class defines that name already."""
        module = self._module
        assert module is not None, "visit_Module runs before any def is left"
        if _fingerprint(function) not in {p.anchor for p in pieces}:
            raise PlumbingNotWritten(f"{pieces[0].target}: line {pieces[0].line} is not `{pieces[0].anchor}` any more")
        out: list[cst.BaseStatement] = [function]
        unit = module.default_indent
        for piece in pieces:
            if self._defs[piece.defines]:
                self.present.append(piece)
                continue
            self.written.append(piece)
            self._defs[piece.defines] += 1
            twin = function.with_changes(name=cst.Name(piece.defines), leading_lines=())
            marker = PlumbingMarker(piece.origin, piece.kind, 1, "", group_digest([twin], unit, module.default_newline))
            out.append(twin.with_changes(leading_lines=[cst.EmptyLine(indent=False), marker_line(marker)]))
        return cst.FlattenSentinel(out) if len(out) > 1 else function

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        handled = {id(p) for p in [*self.written, *self.present]}
        missing = [p for p in self.pieces if id(p) not in handled]
        if missing:
            raise PlumbingNotWritten(f"{missing[0].target} (def at line {missing[0].method_line}) is not in the module")
        return updated_node

    def _rewrite(self, function: cst.FunctionDef, todo: list[PlumbingPiece]) -> cst.FunctionDef:
        module = self._module
        assert module is not None, "visit_Module runs before any def is left"
        block = function.body
        unit = block.indent if isinstance(block, cst.IndentedBlock) and block.indent is not None else module.default_indent
        newline, width, config = module.default_newline, self.line_length, module.config_for_parsing
        printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
        held = {m.kind for text in printer.code_for_node(function).splitlines() if (m := parse_plumbing_marker(text)) is not None}
        assert self._places is not None, "visit_Module runs before any def is left"
        statements = statement_columns(self._places, function)
        by_line = {line: (statement, column) for statement, line, column in statements.values()}
        edits: dict[int, Edit] = {}
        headers: dict[int, Callable[[cst.For], cst.For]] = {}  # a loop's header is rewritten after what goes above it
        end: list[PlumbingPiece] = []
        for piece in todo:
            if piece.kind in held:
                self.present.append(piece)
                continue
            self.written.append(piece)
            if piece.where == "end":
                end.append(piece)
                continue
            found = by_line.get(piece.line)
            if found is None or _fingerprint(found[0]) != piece.anchor:
                raise PlumbingNotWritten(f"{piece.target}: line {piece.line} is not `{piece.anchor}` any more")
            statement, column = found
            if piece.where == HEADER:
                headers[id(statement)] = self._header(piece, column, unit, newline, width)
                continue
            if id(statement) in edits:
                raise PlumbingNotWritten(f"{piece.target}: two pieces at line {piece.line}")
            edits[id(statement)] = self._edit(piece, column, unit, newline, width, config)
        for key, header in headers.items():
            edits[key] = _then_header(edits.get(key), header)
        first = block.body[0] if isinstance(block, cst.IndentedBlock) and block.body else None
        column = statements[id(first)][2] if first is not None else 0

        def at_end() -> list[cst.BaseStatement]:
            out: list[cst.BaseStatement] = []
            for piece in end:
                group = _group(piece.code, column, unit, newline, width, config)
                out += _group_with_marker(group, [], piece, unit, newline)
            return out

        return function.visit(BlockEdits(function, edits, at_end if end else None))  # type: ignore[return-value]

    @staticmethod
    def _header(piece: PlumbingPiece, column: int, unit: str, newline: str, width: int) -> Callable[[cst.For], cst.For]:
        def header(loop: cst.For) -> cst.For:
            if column + len(piece.code.expandtabs(4)) > width:
                raise PlumbingNotWritten(f"{piece.target}: `{piece.code}` is longer than the line length")
            written = with_index(loop, piece.code)
            marker = PlumbingMarker(piece.origin, piece.kind, 0, HEADER, header_digest(written, unit, newline))
            return written.with_changes(leading_lines=[*loop.leading_lines, marker_line(marker)])

        return header

    def _edit(self, piece: PlumbingPiece, column: int, unit: str, newline: str, width: int, config: cst.PartialParserConfig) -> Edit:
        def before(statement: cst.BaseStatement) -> list[cst.BaseStatement]:
            group = _group(piece.code, column, unit, newline, width, config)
            return [*_group_with_marker(group, leading_lines(statement), piece, unit, newline), statement.with_changes(leading_lines=())]

        def after(statement: cst.BaseStatement) -> list[cst.BaseStatement]:
            group = _group(piece.code, column, unit, newline, width, config)
            return [statement, *_group_with_marker(group, [], piece, unit, newline)]

        def replace(statement: cst.BaseStatement) -> list[cst.BaseStatement]:
            if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Return)):
                raise PlumbingNotWritten(f"{piece.target}: line {piece.line} is not a return")
            group = _group(piece.code, column, unit, newline, width, config)
            kept = statement.with_changes(leading_lines=())
            if len(group) == 2 and isinstance(group[0], cst.If) and isinstance(group[0].body, cst.IndentedBlock):
                group[0] = group[0].with_changes(body=group[0].body.with_changes(body=[kept]))
            elif len(group) == 1 and isinstance(group[0], cst.SimpleStatementLine):
                group[0] = group[0].with_changes(trailing_whitespace=statement.trailing_whitespace)
            else:
                raise PlumbingNotWritten(f"{piece.target}: a tail the codemod does not know")
            return _group_with_marker(group, leading_lines(statement), piece, unit, newline)

        def argument(statement: cst.BaseStatement) -> list[cst.BaseStatement]:
            if not isinstance(statement, cst.SimpleStatementLine):
                raise PlumbingNotWritten(f"{piece.target}: line {piece.line} is not a simple statement")
            edited, layout = with_argument(statement, piece.code, column, unit, newline, width, config)
            digest = group_digest([edited], unit, newline)
            marker = PlumbingMarker(piece.origin, piece.kind, 0, layout, digest)
            return [edited.with_changes(leading_lines=[*statement.leading_lines, marker_line(marker)])]

        return {"before": before, "after": after, "replace": replace, "argument": argument}[piece.where]


def _then_header(edit: Edit | None, header: Callable[[cst.For], cst.For]) -> Edit:
    """`edit` (a group put above the loop), then the loop's header rewritten, its marker right above it."""

    def both(statement: cst.BaseStatement) -> list[cst.BaseStatement]:
        out = edit(statement) if edit is not None else [statement]
        if not isinstance(out[-1], cst.For):
            raise PlumbingNotWritten("the statement whose header is rewritten is not a loop")
        return [*out[:-1], header(out[-1])]

    return both


def _defined_methods(block: cst.BaseSuite) -> list[str]:
    """The names of the defs of a class body, under its `if`s and `try`s too."""
    out: list[str] = []
    for statement in block.body if isinstance(block, cst.IndentedBlock) else ():
        if isinstance(statement, cst.FunctionDef):
            out.append(statement.name.value)
        elif not isinstance(statement, cst.ClassDef):
            for suite in _statement_suites(statement):
                out += _defined_methods(suite)
    return out


def _group_with_marker(group: list[cst.BaseStatement], above: list[cst.EmptyLine], piece: PlumbingPiece, unit: str, newline: str) -> list[cst.BaseStatement]:
    """The group with its marker line (and, above it, the lines that stood above its anchor)."""
    marker = PlumbingMarker(piece.origin, piece.kind, len(group), "", group_digest(group, unit, newline))
    return [group[0].with_changes(leading_lines=[*above, marker_line(marker)]), *group[1:]]


def apply_plumbing(code: str, pieces: Sequence[PlumbingPiece], line_length: int = LINE_LENGTH) -> str:
    """The module's source with the pieces written (those of other files must not be passed).  Only the
    classes the pieces go into are handed to libcst (`ClassView`): parsing, positions and printing of
    a 3,000-line model file were most of what `apply` spent on plumbing."""
    wanted = {piece.cls for piece in pieces}
    view = ClassView.of(code, lambda node: node.name in wanted)
    command = AddPlumbing(CodemodContext(), pieces, line_length, view)
    return view.splice(run_command(command, cst.parse_module(view.text)).code)
