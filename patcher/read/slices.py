"""Read stage, slices: hand a parser only the slices an answer needs.

SGLang's model runner and DeepSeek model are ~3,000 lines each; parsing them whole with
libcst (and computing positions) costs most of a second.  A cheap text pass (`outline`) finds the
`def`/`class` blocks that can matter, and only those are parsed: by CPython's parser for what
is only read (`SourceCache.function_ast`), by libcst for what is copied or rewritten
(`SourceCache.parse_block`), whose import (a third of a one-model `check`) happens there.  A slice
that does not parse on its own (a multi-line string at column 0, say) falls back to the whole file.
A file with its def bodies cut to `...` (`cut_bodies`) is what the scope analysis and the codemods
read; what they change is spliced back into the whole text (`splice_cut`).
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import EaglepatchError
from .text import SourceFile, bracket_delta, dedent_lines, indent_width, libcst_may_drop_bytes, lines_with_ends

if TYPE_CHECKING:  # libcst is imported where code is parsed with it: `check` reads with CPython's parser
    import libcst as cst

# What holds a node for line numbers: a statement line, one small statement in it, or a compound one.
Statement: TypeAlias = "cst.SimpleStatementLine | cst.BaseSmallStatement | cst.BaseCompoundStatement"
IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)")
_IMPORT_ANYWHERE = re.compile(IMPORT_LINE.pattern, re.MULTILINE)
_IMPORT_WORD = re.compile(r"import\b")  # a literal: the regex engine skips to it fast
_OPENS_OR_CONTINUES = re.compile(r"[(\[{\\]")  # a line without these is a whole import statement


@dataclass
class Parsed:
    """A parsed slice: libcst nodes plus how to map them back to file lines.

    libcst's PositionProvider costs more than the parse itself, so lines come from
    CPython's own parser instead: its statements are aligned one to one with libcst's,
    which gives every statement its line; a node inside a multi-line statement is then
    placed with PositionProvider on that statement alone.
    """

    source: SourceFile
    module: cst.Module
    first_line: int  # file line of the slice's line 1, minus one
    text: str = ""  # the code that was parsed
    _lines: dict[int, tuple[int, int]] | None = None  # id(libcst statement) -> (first line, last line), slice-relative

    def _statement_lines(self) -> dict[int, tuple[int, int]]:
        if self._lines is None:
            self._lines = statement_lines(self.module, self.text)
        return self._lines

    def statement_span(self, statement: cst.CSTNode) -> tuple[int, int] | None:
        span = self._statement_lines().get(id(statement))
        if span is None:
            return None
        return span[0] + self.first_line, span[1] + self.first_line

    def line_of(self, node: cst.CSTNode, statement: Statement | None = None) -> int:
        """File line of `node`; `statement` is the statement that contains it."""
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider

        own = self.statement_span(node)
        if own is not None:
            return own[0]
        span = self.statement_span(statement) if statement is not None else None
        if span is not None and span[0] == span[1]:
            return span[0]
        holder: cst.Module | Statement = self.module if statement is None or span is None else statement
        base = span[0] - 1 if span is not None else self.first_line
        if isinstance(holder, (cst.If, cst.While)):  # a node in the condition, which starts on the header line
            holder = cst.SimpleStatementLine(body=[cst.Expr(holder.test)])
        if isinstance(holder, cst.BaseSmallStatement):
            holder = cst.SimpleStatementLine(body=[holder])
        mini = holder if isinstance(holder, cst.Module) else cst.Module(body=[holder])
        positions = MetadataWrapper(mini, unsafe_skip_copy=True).resolve(PositionProvider)
        return positions[node].start.line + base

    def suite_span(self, suite: cst.CSTNode) -> range:
        """File lines of an indented block (an `if` body, an `else`)."""
        body = _suite(suite)
        first = self.statement_span(body[0]) if body else None
        last = self.statement_span(body[-1]) if body else None
        if first is None or last is None:
            return range(0)
        return range(first[0], last[1] + 1)

    def where(self, node: cst.CSTNode, statement: Statement | None = None) -> str:
        return f"{self.source.rel}:{self.line_of(node, statement)}"


def statement_lines(module: cst.Module, text: str) -> dict[int, tuple[int, int]]:
    """id(libcst statement) -> (first line, last line) for every statement of `module`, parsed from
    `text`, as CPython's parser places its twin (a def at its `def` line); empty if CPython refuses `text`."""
    lines: dict[int, tuple[int, int]] = {}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return lines
    _align(module.body, tree.body, lines)
    return lines


def _suite(node: cst.CSTNode | None) -> Sequence[cst.CSTNode]:
    import libcst as cst

    if node is None:
        return []
    body = getattr(node, "body", None)
    if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(node.body)
    if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(body.body)
    return []


def _align(cst_body: Sequence[cst.CSTNode], ast_body: Sequence[Any], out: dict[int, tuple[int, int]]) -> int:
    """Pair libcst statements with CPython's, in order; returns how many ast statements were used.

    `ast_body` holds ast.stmt nodes, each read as the kind its libcst twin is (ast.If for cst.If, ...)."""
    import libcst as cst

    used = 0
    for node in cst_body:
        if isinstance(node, cst.SimpleStatementLine) or isinstance(node, cst.BaseSmallStatement):
            smalls = node.body if isinstance(node, cst.SimpleStatementLine) else [node]
            group = ast_body[used : used + len(smalls)]
            if len(group) != len(smalls):
                return used
            out[id(node)] = (group[0].lineno, group[-1].end_lineno)
            for small, twin in zip(smalls, group):
                out[id(small)] = (twin.lineno, twin.end_lineno)
            used += len(smalls)
            continue
        if used >= len(ast_body):
            return used
        twin = ast_body[used]
        used += 1
        out[id(node)] = (twin.lineno, twin.end_lineno)
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.With)):
            _align(_suite(node.body), twin.body, out)
        elif isinstance(node, cst.If):
            _align(_suite(node.body), twin.body, out)
            if isinstance(node.orelse, cst.If):
                _align([node.orelse], twin.orelse, out)
            elif node.orelse is not None:
                out[id(node.orelse)] = (twin.orelse[0].lineno, twin.orelse[-1].end_lineno) if twin.orelse else out[id(node)]
                _align(_suite(node.orelse.body), twin.orelse, out)
        elif isinstance(node, (cst.For, cst.While)):
            _align(_suite(node.body), twin.body, out)
            if node.orelse is not None:
                _align(_suite(node.orelse.body), twin.orelse, out)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            _align(_suite(node.body), twin.body, out)
            handlers: Sequence[cst.ExceptHandler | cst.ExceptStarHandler] = node.handlers
            for handler, twin_handler in zip(handlers, twin.handlers):
                _align(_suite(handler.body), twin_handler.body, out)
            if node.orelse is not None:
                _align(_suite(node.orelse.body), twin.orelse, out)
            if node.finalbody is not None:
                _align(_suite(node.finalbody.body), twin.finalbody, out)
        elif isinstance(node, cst.Match):
            for case, twin_case in zip(node.cases, twin.cases):
                _align(_suite(case.body), twin_case.body, out)
    return used


def import_texts(lines: Sequence[str], joined: str | None = None, masked: str | None = None) -> list[str]:
    """The text of every import statement (dedented), wherever it stands; `joined` is the lines joined
    by `\\n`, and `masked` the same masked (see `mask`): a line inside a string (a docstring's example)
    is no import."""
    if joined is None:
        joined = "\n".join(lines)
    statements: list[str] = []
    index = counted = 0
    after = 0  # lines before this one belong to an import already read
    seen = -1
    for word in _IMPORT_WORD.finditer(joined):
        start = joined.rfind("\n", 0, word.start()) + 1
        if start <= seen or not _IMPORT_ANYWHERE.match(joined, start):
            continue
        seen = start
        index += joined.count("\n", counted, start)
        counted = start
        if index < after or (masked is not None and masked.startswith("\x00", start)):
            continue
        line = lines[index]
        if not _OPENS_OR_CONTINUES.search(line):  # one line, the common case: what the loop below gives for it
            statements.append(line[indent_width(line) :] + "\n")
            after = index + 1
            continue
        depth = 0
        j = index
        while j < len(lines):
            depth += bracket_delta(lines[j])
            if depth <= 0 and not lines[j].rstrip().endswith("\\"):
                break
            j += 1
        statements.append(dedent_lines(lines[index : j + 1], indent_width(line)))
        after = j + 1
    return statements


_NOT_AST_NEWLINES = ("\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")  # str.splitlines splits there
_CUT_MARK = "# eaglepatch-cut-"


@dataclass(frozen=True)
class CutText:
    """A file's text with def bodies cut to `...`, and which lines of the file each of its lines stands for."""

    text: str
    spans: tuple[tuple[int, int], ...]  # line i of `text` stands for the file's lines [start, end) (0-based)
    cut: frozenset[int]  # lines of `text` that stand for a cut body


def cut_bodies(
    text: str, keep: frozenset[tuple[str, str]] = frozenset(), mark: bool = False, classes: frozenset[str] | None = None
) -> CutText | None:
    """`text` with the body of every def that starts on a line of its own cut to `...`, but the methods in
    `keep` ((class, name): a class at module level, a def in its body); with `classes`, the whole body of
    every class at module level not named in it is cut too. CPython's parser says where the
    bodies are. `mark`: each `...` carries a comment of its own (`# eaglepatch-cut-N`), so no other line
    can be mistaken for it when a changed copy is spliced back (`splice_cut`). None when the text is not
    that simple (not valid Python, a character at which str.splitlines and the parser count lines
    differently; with `mark`, a text that holds the mark or does not end with a newline)."""
    if any(char in text for char in _NOT_AST_NEWLINES):
        return None
    if mark and (_CUT_MARK in text or not text.endswith("\n")):
        return None  # a splice also needs the last line ended as libcst prints it
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    cuts: list[tuple[int, int, int]] = []  # (first body line, its column, last line) of each body to cut

    def cut(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        first = node.body[0]
        decorators = getattr(first, "decorator_list", None)
        if decorators:  # a decorated def or class starts at its first decorator, on a line of its own
            cuts.append((min(d.lineno for d in decorators), 0, node.end_lineno or first.lineno))
        else:
            cuts.append((first.lineno, first.col_offset, node.end_lineno or first.lineno))

    def visit(statements: list, owner: str | None) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if owner is None or (owner, node.name) not in keep:
                    cut(node)
            elif isinstance(node, ast.ClassDef):
                if owner is None and classes is not None and node.name not in classes:
                    cut(node)
                else:
                    visit(node.body, node.name if owner is None else "")  # a nested class's body is cut whole by scopes.reduced
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child], owner)
                    elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                        visit(child.body, owner)

    visit(tree.body, None)
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    spans: list[tuple[int, int]] = []
    placeholders: set[int] = set()
    done = 0  # lines [0, done) are in `kept`
    for first, column, last in cuts:
        line = lines[first - 1]
        if line.encode("utf-8")[:column].strip():
            continue  # the body shares its line with the `def` (`def f(): ...`): left as it is
        kept += lines[done : first - 1]
        spans += [(n, n + 1) for n in range(done, first - 1)]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        comment = f"  {_CUT_MARK}{len(placeholders)}" if mark else ""
        placeholders.add(len(kept))
        kept.append(indent + "..." + comment + (line[len(line.rstrip("\r\n")) :] or "\n"))
        spans.append((first - 1, last))
        done = last
    kept += lines[done:]
    spans += [(n, n + 1) for n in range(done, len(lines))]
    return CutText("".join(kept), tuple(spans), frozenset(placeholders))


def parse_cut(
    text: str, keep: frozenset[tuple[str, str]] = frozenset(), classes: frozenset[str] | None = None, mark: bool = False
) -> tuple[cst.Module, CutText] | None:
    """(`text` cut as `cut_bodies` cuts it, parsed by libcst; the cut text): what the scope analysis and the
    codemod read, for a fraction of a whole parse. None when the text is not that simple."""
    import libcst as cst

    cut = cut_bodies(text, keep, mark, classes)
    if cut is None:
        return None
    try:
        return cst.parse_module(cut.text), cut
    except cst.ParserSyntaxError:
        return None


def splice_cut(original: str, cut: CutText, printed: str, updated: str) -> str | None:
    """`original` with what a codemod changed in its cut copy: `printed` is libcst's print of the cut
    text, `updated` of the changed copy. None when a change touches a cut body or separates it from the
    line before it (the caller then runs the codemod on the whole file)."""
    old, seen, new = lines_with_ends(original), lines_with_ends(printed), lines_with_ends(updated)
    if len(seen) != len(cut.spans):
        return None
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, seen, new, autojunk=False).get_opcodes():
        if tag == "equal":
            if i1 in cut.cut:  # a body matched away from the line before it (its def) stands elsewhere now
                return None
            out += old[cut.spans[i1][0] : cut.spans[i2 - 1][1]]
        elif any(i in cut.cut for i in range(i1, i2)) or any(_CUT_MARK in line for line in new[j1:j2]):
            return None
        else:
            out += new[j1:j2]
    return "".join(out)


def rewrite_cut(source: SourceFile, before: cst.Module, after: cst.Module, cut: CutText) -> bytes | None:
    """`SourceFile.rewrite` for a module parsed from the cut text `cut`: None when the change reaches into
    a cut body.  libcst prints a parsed module back as its text (but where it may drop bytes), so
    `before` is printed only then."""
    if after is before:
        return source.data
    source.check_round_trip()
    printed = before.code if libcst_may_drop_bytes(cut.text) else cut.text
    spliced = splice_cut(source.text, cut, printed, after.code)
    return None if spliced is None else source.encode(spliced)


@dataclass
class Bodiless:
    """A file parsed by libcst with its def bodies cut (`cut_bodies`), or whole (`cut` None) when it cannot be."""

    module: cst.Module
    cut: CutText | None


def invalid_python(source: SourceFile, error: SyntaxError) -> EaglepatchError:
    """The one line a file CPython does not parse gets: the parser's message and line, and the fix."""
    return EaglepatchError(f"is not valid Python ({error.msg}); fix the syntax error", path=source.rel, line=error.lineno)


def syntax_error(source: SourceFile) -> EaglepatchError | None:
    """The first error that keeps a file from compiling, located by CPython (libcst's line can be one off).
    Compiled to bytecode rather than parsed to an ast: the same parser, without the Python objects of a
    tree nobody reads (about a third less time), and the compiler's own checks (`return` outside a
    function) count as they would on import.  Its warnings are not eaglepatch's to print."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source.text, source.rel, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return invalid_python(source, exc)
    return None


def parse_module(source: SourceFile) -> cst.Module:
    """The whole file parsed by libcst; a file it does not parse raises the error CPython's parser places
    (libcst's own message and line when only libcst refuses it)."""
    import libcst as cst

    try:
        return cst.parse_module(source.text)
    except cst.ParserSyntaxError as exc:
        raise syntax_error(source) or EaglepatchError(
            f"is not valid Python ({exc.message}); fix the syntax error", path=source.rel, line=exc.raw_line
        ) from None


@dataclass(frozen=True)
class ClassView:
    """Some top-level classes of a module, one after the other, so that a codemod editing only those
    classes parses and prints a fraction of the file; `original_line` gives a line of the view as a
    line of the file, and `splice` puts the classes it printed back into the whole text.  The whole
    text (no view) where that is not the same to libcst: a class not at top level, a text CPython does
    not parse, or a first indent (libcst's `default_indent`) that the view would change."""

    text: str
    original: str
    spans: tuple[tuple[int, int], ...] = ()  # (first line, last line), 1-based, of each class kept
    starts: tuple[int, ...] = ()  # the view's line of each span's first line

    @classmethod
    def of(cls, text: str, keep: Callable[[ast.ClassDef], bool]) -> ClassView:
        whole = cls(text, text)
        if any(char in text for char in _NOT_AST_NEWLINES):
            return whole
        try:
            module = ast.parse(text)
        except (SyntaxError, ValueError):
            return whole
        spans = tuple(_span(node) for node in module.body if isinstance(node, ast.ClassDef) and keep(node))
        lines = lines_with_ends(text)
        kept: list[str] = []
        starts: list[int] = []
        for first, last in spans:
            starts.append(len(kept) + 1)
            kept += lines[first - 1 : last]
        view = "".join(kept)
        if not spans or _first_indent(view) != _first_indent(text):
            return whole
        return cls(view, text, spans, tuple(starts))

    def original_line(self, line: int) -> int:
        """The file's line that line `line` of the view is."""
        for (first, _last), start in zip(reversed(self.spans), reversed(self.starts)):
            if line >= start:
                return first + line - start
        return line

    def splice(self, printed: str) -> str:
        """The whole text with each class as `printed` (the view, changed inside those classes only) has it."""
        if not self.spans:
            return printed
        module = ast.parse(printed)
        now = [_span(node) for node in module.body if isinstance(node, ast.ClassDef)]
        if len(now) != len(self.spans):
            raise ValueError("the printed view does not hold the classes it was given")
        old, new = lines_with_ends(self.original), lines_with_ends(printed)
        out: list[str] = []
        done = 0  # lines of the original taken so far
        for (first, last), (start, end) in zip(self.spans, now):
            out += old[done : first - 1]
            out += new[start - 1 : end]
            done = last
        out += old[done:]
        return "".join(out)


def _span(node: ast.ClassDef) -> tuple[int, int]:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno


def _first_indent(text: str) -> str | None:
    """The first INDENT token's own indentation, which libcst takes for the module's default."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.INDENT:
                return token.string
    except (tokenize.TokenError, SyntaxError):
        return None
    return None
