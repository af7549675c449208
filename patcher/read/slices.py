"""Read stage: read each file once, and hand a parser only the slices an answer needs.

SGLang's model runner and DeepSeek model are ~3,000 lines each; parsing them whole with
libcst (and computing positions) costs most of a second.  A cheap text pass finds the
`def`/`class` blocks that can matter, and only those are parsed: by CPython's parser for what
is only read (`function_ast`), by libcst for what is copied or rewritten (`parse_block`), whose
import (a third of a one-model `check`) happens there.  A slice that does not parse on its own
(a multi-line string at column 0, say) falls back to the whole file.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import difflib
import os
import re
import warnings
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from ..errors import EaglepatchError

if TYPE_CHECKING:  # libcst is imported where code is parsed with it: `check` reads with CPython's parser
    import libcst as cst

# What holds a node for line numbers: a statement line, one small statement in it, or a compound one.
Statement: TypeAlias = "cst.SimpleStatementLine | cst.BaseSmallStatement | cst.BaseCompoundStatement"

BOM = b"\xef\xbb\xbf"
MAX_FILE_BYTES = 20 * 1024 * 1024
ASIDE_MINIMUM = 16  # files: fewer are compiled in this process, when asked (a fork costs more)

_LF = re.compile("\n")
# a header after a newline: the engine jumps from newline to newline, where a MULTILINE `^` made it try every
# position (the first line is matched with _HEADER_FIRST)
_HEADER_AFTER_NEWLINE = re.compile(r"\n([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)")
_HEADER_FIRST = re.compile(r"([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)")
_HEADER = re.compile(r"^([ \t]*)(?:async[ \t]+def|def|class)[ \t]+(\w+)")
# Python (and the ast module) end lines at \r\n, \r or \n only; str.splitlines also splits on \f and others
_NEWLINES = re.compile(r"\r\n|\r|\n")
_NEWLINES_BYTES = re.compile(rb"\r\n|\r|\n")
IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)")
_IMPORT_ANYWHERE = re.compile(IMPORT_LINE.pattern, re.MULTILINE)
_IMPORT_WORD = re.compile(r"import\b")  # a literal: the regex engine skips to it fast
_OPENS_OR_CONTINUES = re.compile(r"[(\[{\\]")  # a line without these is a whole import statement
# PEP 263, as the tokenize module reads it: on line 1, or on line 2 below a comment or blank line
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")
# a form feed in indentation resets Python's column count: only what follows the last one counts
_FORMFEED_INDENT = re.compile(r"^[ \t\f]*\f")


def line_starts(text: str) -> array:
    """Where each line of `text` starts: one past each "\n", found by the regex engine (no line is cut
    out), 8 bytes a line in an array rather than an int object each."""
    return array("q", [0, *[match.end() for match in _LF.finditer(text)]])


class TextLines(Sequence[str]):
    """A file's lines (no line endings), read off its text on demand: a run over a large tree keeps each
    file's text and 8 bytes a line, not a second copy of the file cut into one string object a line
    (about 100 bytes a line).  Only for text whose newlines are all `\\n` and that has no form feed."""

    __slots__ = ("text", "starts", "_count")

    def __init__(self, text: str):
        self.text = text
        self.starts = line_starts(text)
        self._count = len(self.starts) - (1 if not text or text.endswith("\n") else 0)

    def __len__(self) -> int:
        return self._count

    def _end(self, index: int) -> int:
        return self.starts[index + 1] - 1 if index + 1 < len(self.starts) else len(self.text)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if type(index) is int and 0 <= index < self._count:  # the common case, first
            starts = self.starts
            return self.text[starts[index] : starts[index + 1] - 1 if index + 1 < len(starts) else len(self.text)]
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start >= stop:
                return []
            return self.text[self.starts[start] : self._end(stop - 1)].split("\n")
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("line index out of range")
        return self.text[self.starts[index] : self._end(index)]

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (TextLines, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextLines({self._count} lines)"


@dataclass
class SourceFile:
    """A file's bytes and text, decoded once.

    `text` has no BOM and keeps its newlines and form feeds: it is what libcst rewrites.
    `lines` are for reading only: split where Python splits, with form feeds in indentation
    dropped, so an outline sees `\\fclass X:` as the top-level class Python sees.
    """

    path: Path
    rel: str
    raw: bytes | None  # the bytes as read; None when they are exactly `encode(text)` (every UTF-8 file)
    text: str
    bom: bool
    newline: str
    lines: Sequence[str] = field(repr=False)
    encoding: str = "utf-8"  # PEP 263 coding line, or UTF-8

    @property
    def data(self) -> bytes:
        """The bytes as read.  A UTF-8 file keeps only its text (strict UTF-8 decoding is one-to-one):
        a run over a large tree then holds each file once, not twice."""
        return self.raw if self.raw is not None else self.encode(self.text)

    def encode(self, text: str) -> bytes:
        """`text` as bytes in this file's own encoding, BOM included."""
        try:
            body = text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise EaglepatchError(
                f"is {self.encoding} text, which cannot hold {exc.object[exc.start : exc.end]!r} that the new code "
                "needs; re-encode the file as UTF-8 (and drop its coding line)",
                path=self.rel,
            ) from None
        return (BOM if self.bom else b"") + body

    def _check_round_trip(self) -> None:
        if self.encoding != "utf-8" and self.encode(self.text) != self.data:
            raise EaglepatchError(
                f"does not read back to the same bytes in {self.encoding}; re-encode the file as UTF-8",
                path=self.rel,
            )

    def rewrite_cut(self, before: cst.Module, after: cst.Module, cut: CutText) -> bytes | None:
        """`rewrite` for a module parsed from the cut text `cut`: None when the change reaches into a cut body."""
        if after is before:
            return self.data
        self._check_round_trip()
        spliced = splice_cut(self.text, cut, before.code, after.code)
        return None if spliced is None else self.encode(spliced)

    def rewrite(self, before: cst.Module, after: cst.Module) -> bytes:
        """The file's bytes with what libcst changed, and not one other byte changed.

        libcst drops a form feed that starts an indented line and a lone `\\r` that ends the
        file; so every line libcst printed unchanged is taken from the original text, and
        only the lines it added or changed come from libcst.
        """
        if after is before:
            return self.data
        self._check_round_trip()
        if not _libcst_may_drop_bytes(self.text):  # printing a module costs ~0.2 s per 3,000 lines
            return self.encode(after.code)
        return self.encode(splice(self.text, before.code, after.code, self.rel))


def _libcst_may_drop_bytes(text: str) -> bool:
    return "\f" in text or text.endswith("\r")


def lines_with_ends(text: str) -> list[str]:
    """Lines as Python ends them (\\r\\n, \\r or \\n), each with its own ending."""
    out, start = [], 0
    for match in _NEWLINES.finditer(text):
        out.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def splice(original: str, printed: str, updated: str, rel: str) -> str:
    """`original` with the lines `printed` (libcst's copy of it) and `updated` differ on replaced."""
    old, seen, new = lines_with_ends(original), lines_with_ends(printed), lines_with_ends(updated)
    if len(old) != len(seen):
        raise EaglepatchError(
            f"has {len(old)} lines, but libcst reads {len(seen)}; normalize its line endings (dos2unix) and run again",
            path=rel,
        )
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, seen, new, autojunk=False).get_opcodes():
        out += old[i1:i2] if tag == "equal" else new[j1:j2]
    lost = _ending(old[-1]) if old and not _ending(seen[-1]) else ""
    if lost and out and not _ending(out[-1]):
        out[-1] += lost  # the final newline libcst dropped belongs after whatever is now last
    return "".join(out)


def source_encoding(data: bytes, rel: str) -> str:
    """The encoding Python reads the file in: its PEP 263 coding line, else UTF-8."""
    bom = data.startswith(BOM)
    first_two = _NEWLINES_BYTES.split(data[len(BOM) :] if bom else data, 2)[:2]
    declared = None
    for number, line in enumerate(first_two):  # noqa: B007 - the number is read after the loop
        match = _COOKIE.match(line)
        if match is not None:
            declared = match.group(1).decode("ascii")
            break
        if not _BLANK_OR_COMMENT.match(line):
            break
    if declared is None:
        return "utf-8"
    try:
        name = codecs.lookup(declared).name
    except LookupError:
        raise EaglepatchError(
            f"declares source encoding {declared!r}, which Python does not know; fix its coding line",
            path=rel,
            line=number + 1,
        ) from None
    if "\n".encode(name, errors="replace") != b"\n":
        raise EaglepatchError(
            f"declares source encoding {declared!r}, which Python cannot read source in; re-encode the file as UTF-8",
            path=rel,
            line=number + 1,
        )
    if bom and name != "utf-8":
        raise EaglepatchError(
            f"starts with a UTF-8 BOM but its coding line says {declared}; drop the BOM or the coding line",
            path=rel,
            line=number + 1,
        )
    return "utf-8" if name == "utf-8" else declared  # as the file names it, for messages


def decode_source(path: Path, rel: str, data: bytes) -> SourceFile:
    if b"\x00" in data:
        raise EaglepatchError("is a binary file, not Python source; remove it or rename it", path=rel)
    encoding = source_encoding(data, rel)
    bom = data.startswith(BOM)
    try:
        text = data[len(BOM) :].decode(encoding) if bom else data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = len(_NEWLINES_BYTES.findall(data[: exc.start])) + 1
        if encoding == "utf-8":
            raise EaglepatchError("is not UTF-8 text; re-encode it as UTF-8", path=rel, line=line) from None
        raise EaglepatchError(
            f"is not valid {encoding} text, though its coding line says it is; fix the coding line or re-encode the file",
            path=rel,
            line=line,
        ) from None
    if "\r\n" in text:
        newline = "\r\n"
    elif "\r" in text:
        newline = "\r"
    else:
        newline = "\n"
    lines: Sequence[str]
    if newline == "\n" and "\f" not in text:
        lines = TextLines(text)
    else:
        split = _NEWLINES.split(text)
        if split and split[-1] == "":
            split.pop()  # text ends with a newline
        if "\f" in text:
            split = [_FORMFEED_INDENT.sub("", line) for line in split]
        lines = split
    raw = None if encoding == "utf-8" else data  # strict UTF-8 decoding round-trips exactly (BOM kept apart)
    return SourceFile(path, rel, raw, text, bom, newline, lines, encoding)


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
            self._lines = {}
            try:
                tree = ast.parse(self.text)
            except (SyntaxError, ValueError):
                tree = None
            if tree is not None:
                _align(self.module.body, tree.body, self._lines)
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


def indent_width(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def is_code_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _bracket_delta(line: str) -> int:
    code = line.split("#", 1)[0]
    return sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")


MASKS_KEPT = 64
_MASKED: deque[Outline] = deque()  # the outlines holding a mask, oldest first


class _Ends(dict):
    """header index -> one past the block's last line, computed when first asked for."""

    def __init__(self, outline: Outline):
        super().__init__()
        self.outline = outline
        self.lines = outline.lines

    def __missing__(self, header: int) -> int:
        value = self[header] = _block_end_fast(self.outline, header)
        return value

    def get(self, header: int, default: int) -> int:  # type: ignore[override]  # every caller gives the default for a line out of range
        if not 0 <= header < len(self.lines):
            return default
        return self[header]


class Outline:
    """The `def`/`class` headers of a file, and each block's extent on demand.

    Finding headers is a cheap pass over line starts; a block's end needs bracket and string
    tracking, so it is computed only for the blocks an answer asks about.
    """

    def __init__(self, lines: Sequence[str], text: str | None = None):
        self.lines = lines
        # no \r: regex searches and offsets work on this text; a file with only \n newlines and no form
        # feed already is that text (plus its last newline), and is not copied
        self.joined = text if text is not None and "\r" not in text and "\f" not in text else "\n".join(lines)
        if isinstance(lines, TextLines) and lines.text is self.joined:
            self._starts = lines.starts  # the same text: the same line starts
        else:
            self._starts = line_starts(self.joined)
        self.headers: list[tuple[int, int, str, str]] = []  # (line index, indent, "def"|"class", name)
        first = _HEADER_FIRST.match(self.joined)
        for match in chain([first] if first else [], _HEADER_AFTER_NEWLINE.finditer(self.joined)):
            kind = "class" if match.group(2) == "class" else "def"
            self.headers.append((self.line_index(match.start(1)), len(match.group(1)), kind, match.group(3)))
        self.ends = _Ends(self)
        self._indices = [h[0] for h in self.headers]
        self._masked: str | None = None

    def masked(self) -> str:
        """`joined` masked (see `mask`).  Kept for the last MASKS_KEPT files that asked, not for every file a
        run reads (a mask is as large as its file): an older file asks again at the cost of one regex pass."""
        if self._masked is None:
            self._masked = mask(self.joined)
            _MASKED.append(self)
            if len(_MASKED) > MASKS_KEPT:
                _MASKED.popleft()._masked = None
        return self._masked

    def module_level(self, kind: str) -> list[str]:
        """Names of the `kind` blocks no def or class encloses: at column 0, or under a module-level
        `if`/`try`/`with` (`if TYPE_CHECKING:`, a version switch), which Python runs as module code."""
        names = []
        for index, indent, k, name in self.headers:
            if k == kind and name not in names and (indent == 0 or all(h[0] == index for h in self.enclosing(index))):
                names.append(name)
        return names

    def find(self, name: str, kind: str) -> int | None:
        """Header index of `kind name`, preferring the least indented one."""
        best = None
        for index, indent, k, n in self.headers:
            if k == kind and n == name and (best is None or indent < best[1]):
                best = (index, indent)
        return best[0] if best else None

    def enclosing(self, index: int) -> list[tuple[int, int, str, str]]:
        """Blocks around line `index` (a header line is inside its own block), innermost first."""
        line = self.lines[index]
        limit = indent_width(line) if is_code_line(line) else 10**6
        out = []
        position = bisect.bisect_right(self._indices, index) - 1
        if position >= 0 and self.headers[position][0] == index:  # a header at column 0 lists itself too
            out.append(self.headers[position])
            limit = self.headers[position][1]
            position -= 1
        while position >= 0 and limit > 0:
            header = self.headers[position]
            if header[0] == index or (header[1] < limit and self.ends[header[0]] > index):
                out.append(header)
                limit = header[1]
            position -= 1
        return out

    def line_index(self, offset: int) -> int:
        """Line index of a character offset into `joined`."""
        return bisect.bisect_right(self._starts, offset) - 1

    def outer_def(self, index: int) -> int:
        """Header index of the outermost `def` around line `index` not inside another def; methods stop
        at their class (the slice is the method, which keeps slices small). -1 at module level."""
        found = -1
        for header in self.enclosing(index):
            if header[2] == "def":
                found = header[0]
            elif found >= 0:
                break
        return found


_TOKEN = re.compile(r"""\"\"\"|'''|"(?:\\.|[^"\\])*(?:"|\\$)|'(?:\\.|[^'\\])*(?:'|\\$)|\#|\\$|[()\[\]{}]""")
_CLOSE = {
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""'),
    "'''": re.compile(r"(?:[^'\\]|\\.|'(?!''))*'''"),
    '"': re.compile(r'(?:[^"\\]|\\.)*(?:"|\\$)'),
    "'": re.compile(r"(?:[^'\\]|\\.)*(?:'|\\$)"),
}


def bracket_scan(line: str, depth: int, in_string: str | None) -> tuple[int, str | None]:
    """Bracket depth and the string still open after `line`, skipping strings and comments."""
    depth, in_string, _ = _scan_line(line, depth, in_string)
    return depth, in_string


def _scan_line(line: str, depth: int, in_string: str | None) -> tuple[int, str | None, bool]:
    """Bracket depth, the string still open, and whether a backslash continues the statement, after
    `line` (no newline), skipping strings and comments.  A one-quote string is open only after a
    backslash at the end of the line."""
    pos = 0
    while True:
        if in_string:
            close = _CLOSE[in_string].match(line, pos)
            if close is None or (len(in_string) == 1 and close.group().endswith("\\")):
                return depth, in_string, False  # the string goes on to the next line
            pos = close.end()
            in_string = None
        match = _TOKEN.search(line, pos)
        if match is None:
            return depth, None, False
        token = match.group()
        pos = match.end()
        if token in ('"""', "'''"):
            in_string = token
        elif token[0] in "\"'":
            if token[-1] == "\\":  # only `\\$` ends a one-quote string token with a backslash
                return depth, token[0], False
        elif token == "#":
            return depth, None, False
        elif token == "\\":
            return depth, None, True
        elif token in "([{":
            depth += 1
        elif token in ")]}":
            depth = max(0, depth - 1)


def _block_end(lines: Sequence[str], header: int) -> int:
    """One past the last line of the block whose header is at `header`, line by line: the exact
    scanner (brackets, strings, comments, backslash continuations), and the reference for the fast one."""
    own = indent_width(lines[header])
    depth, in_string, backslash = 0, None, False
    end = header + 1
    for i in range(header, len(lines)):
        line = lines[i]
        starts_statement = depth == 0 and in_string is None and not backslash
        if i > header and starts_statement and is_code_line(line) and indent_width(line) <= own:
            break
        if line.strip() and (not starts_statement or is_code_line(line)):
            end = i + 1
        if in_string or "#" in line or "'" in line or '"' in line or "\\" in line or any(c in line for c in "()[]{}"):
            depth, in_string, backslash = _scan_line(line, depth, in_string)
        else:
            backslash = False
    return end


# One pass over a whole file: comments and strings (any prefix, escapes, triple-quoted across lines),
# in the order Python's tokenizer meets them.  An unterminated triple-quoted string runs to the end
# of the text.
_MASK = re.compile(
    r"""\#[^\n]*"""
    r'''|"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*(?:"""|\Z)'''
    r"""|'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*(?:'''|\Z)"""
    r'''|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"'''
    r"""|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'"""
)


def _mask_token(match: re.Match) -> str:
    token = match.group()
    if token[0] == "#":
        return " " * len(token)
    if "\n" not in token:
        return "S" * len(token)
    first, *rest = token.split("\n")
    return "\n".join(["S" * len(first)] + ["\x00" + "S" * (len(part) - 1) if part else "" for part in rest])


def has_word(text: str, word: str) -> bool:
    """`re.search(rf"\\b{re.escape(word)}\\b", text)` for an identifier `word`, by str.find: no pattern
    compiled for each name asked about.  A word character is what `\\w` matches: alphanumeric or `_`."""
    size, at = len(word), text.find(word)
    while at >= 0:
        before, after = at - 1, at + size
        if (before < 0 or not is_word_char(text[before])) and (after >= len(text) or not is_word_char(text[after])):
            return True
        at = text.find(word, at + 1)
    return False


def is_word_char(char: str) -> bool:
    """What `\\w` matches in a str pattern: alphanumeric or `_`."""
    return char.isalnum() or char == "_"


def mask(text: str) -> str:
    """`text` (newlines `\\n` only) with its comments blanked, its strings all `S`, and each non-empty line
    inside a string starting with `\\x00`, by one regex pass in C: same length, same line starts, and
    brackets and backslashes left only where they are code."""
    return _MASK.sub(_mask_token, text)




_DEDENTS: dict[int, re.Pattern] = {}


def _block_end_fast(outline: Outline, header: int) -> int:
    """`_block_end` by regex, on the file with its comments and strings masked out: the next line at
    the header's indentation or less that starts a statement (outside the block's brackets, not after
    a backslash).
    Trailing blank and comment lines are not part of the block."""
    lines = outline.lines
    masked, starts = outline.masked(), outline._starts
    if masked.startswith("\x00", starts[header]):
        return header + 1  # a `def` line inside a string (a docstring's example) is no block
    own = indent_width(lines[header])
    pattern = _DEDENTS.get(own)
    if pattern is None:
        # from the newline before the line, not `^`: a pattern that starts with a literal is searched for
        # by skipping to that character, a `^`-anchored one is tried at every character
        pattern = _DEDENTS[own] = re.compile(rf"\n[ \t]{{0,{own}}}(?=[^ \t\n\x00)\]}}])")
    count = len(lines)
    size = len(masked)
    counted = starts[header]
    depth = 0
    position = starts[header + 1] if header + 1 < count else size
    candidate = count
    while position < size:
        match = pattern.search(masked, position - 1)  # position is a line start: a newline is before it
        if match is None:
            break
        at = match.start() + 1  # the line's start; brackets counted in the masked text, where none is in a string or comment
        depth += sum(masked.count(c, counted, at) for c in "([{") - sum(masked.count(c, counted, at) for c in ")]}")
        counted = at
        index = bisect.bisect_right(starts, at) - 1
        if depth <= 0 and not masked.startswith("\\\n", max(0, at - 2)):  # no backslash continues the line above
            candidate = index
            break
        position = starts[index + 1] if index + 1 < count else size
    end = candidate
    while end > header + 1 and not masked[starts[end - 1] : starts[end] if end < count else size].strip():
        end -= 1
    return end


def outline(lines: Sequence[str], text: str | None = None) -> Outline:
    return Outline(lines, text)


_CLOSES_A_LINE = re.compile(r"[)\]}][ \t]*(?:#.*)?$")


def block_start(lines: Sequence[str], header: int) -> int:
    """Include the decorators above a header, a decorator spanning lines (`@torch.compile(\\n...\\n)`) too."""
    own = indent_width(lines[header])
    i = header
    while i > 0:
        above = lines[i - 1]
        if indent_width(above) == own and above.lstrip().startswith("@"):
            i -= 1
            continue
        start = _decorator_above(lines, i, own) if _CLOSES_A_LINE.search(above) else None
        if start is None:
            break
        i = start
    return i


def _decorator_above(lines: Sequence[str], below: int, own: int) -> int | None:
    """The `@` line of a decorator at indentation `own` that spans lines and ends just above `below`."""
    j = below - 1
    if indent_width(lines[j]) < own:
        return None
    while j > 0 and not (indent_width(lines[j]) <= own and is_code_line(lines[j]) and j < below - 1):
        j -= 1
    line = lines[j]
    if j == below - 1 or indent_width(line) != own or not line.lstrip().startswith("@"):
        return None
    depth, in_string, backslash = 0, None, False
    for k in range(j, below):
        depth, in_string, backslash = _scan_line(lines[k], depth, in_string)
        open_ = depth > 0 or in_string is not None or backslash
        if open_ != (k < below - 1):
            return None
    return j


def block_text(lines: Sequence[str]) -> str:
    """Lines of a block, dedented by the indentation of its least indented code line: a text that
    parses on its own."""
    return dedent_lines(lines, min((indent_width(line) for line in lines if is_code_line(line)), default=0))


def dedent_lines(lines: Sequence[str], amount: int) -> str:
    out = []
    for line in lines:
        if indent_width(line) >= amount:
            out.append(line[amount:])
        else:
            out.append(line.lstrip(" \t"))
    return "\n".join(out) + "\n"


def _import_texts(lines: Sequence[str], joined: str | None = None, masked: str | None = None) -> list[str]:
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
            depth += _bracket_delta(lines[j])
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


class SourceCache:
    """Reads each file once and parses each slice once for a whole run."""

    def __init__(self, srt: Path, excluded: frozenset[Path] = frozenset()):
        self.srt = srt
        self.excluded = excluded  # resolved paths the user left out (--exclude): read() refuses them
        self._files: dict[Path, SourceFile] = {}
        self._parsed: dict[tuple[Path, int, int], Parsed] = {}
        self._bodiless: dict[tuple[Path, frozenset[str] | None], Bodiless] = {}
        self._outlines: dict[Path, Outline] = {}
        self._ast_imports: dict[tuple[Path, int, int], list] = {}
        self._ast_functions: dict[tuple[Path, int], ast.FunctionDef | ast.AsyncFunctionDef | None] = {}
        self._ast_texts: dict[tuple[Path, int], str] = {}  # the text each function_ast was read from
        self._ast_alone: set[tuple[Path, int]] = set()  # the defs CPython parsed on their own (their _ast_texts are the slice)
        # a member's libcst def by (file, line, name): class_index.signature_node parses it once
        self.definitions: dict[tuple[Path, int, str], cst.FunctionDef | None] = {}
        # the names such a def binds itself (verify: a learned body is checked against its reference's)
        self.definition_locals: dict[tuple[Path, int, str], frozenset[str]] = {}
        # what later stages derive from a file once per run, kept here because the cache is what
        # every stage of one run shares (filled by imports.py, edits.py and scopes.py)
        self.module_paths: dict[Path | None, dict[str, Path | None]] = {}  # srt -> module -> its in-tree file
        self.import_tables: dict[str, dict[Path, Any]] = {}  # ImportTable kind -> file -> table
        self.defined_here: dict[Path, set[str]] = {}  # file -> names it defines at top level
        self.module_scopes: dict[tuple[Path, frozenset[str] | None], Any] = {}  # scopes.scope_of
        self.exports: Any = None  # scopes.Exports of the tree, made on first use
        self._validity: dict[Path, EaglepatchError | None] = {}  # unreadable(): each file compiled once per run
        self.bytes_read = 0
        self.lines_parsed = 0

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.srt).as_posix()
        except ValueError:
            return path.as_posix()

    def read(self, path: Path) -> SourceFile:
        cached = self._files.get(path)
        if cached is not None:
            return cached
        rel = self.rel(path)
        if self.is_excluded(path):
            raise EaglepatchError("is left out by --exclude (or the exclude setting), so it is not read", path=rel)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise EaglepatchError(
                    f"is {size // (1024 * 1024)} MiB, larger than any Python source eaglepatch reads; "
                    "remove it or exclude it",
                    path=rel,
                )
            data = path.read_bytes()
        except OSError as exc:
            raise EaglepatchError(f"cannot be read ({exc.strerror}); check its permissions", path=rel) from None
        self.bytes_read += len(data)
        source = decode_source(path, rel, data)
        self._files[path] = source
        return source

    def is_excluded(self, path: Path) -> bool:
        """The user left `path` out (--exclude): no stage reads it, and the gate does not ask it to parse."""
        return bool(self.excluded) and path.resolve() in self.excluded

    def unreadable(self, path: Path) -> EaglepatchError | None:
        """Why `path` cannot be read as Python (not decodable, not compilable), or None; once per run.
        An answer that depends on a file is only as good as the whole file's reading, so the gate asks this
        of every file it reads, not just of the slices it parsed."""
        if path not in self._validity:
            try:
                self._validity[path] = syntax_error(self.read(path))
            except EaglepatchError as exc:
                self._validity[path] = exc
        return self._validity[path]

    def validate_aside(self, paths: list[Path]) -> Callable[[], None]:
        """Compile `paths` in a forked child while this process goes on reading them (the gate's whole-file
        compile is a quarter of `check --all`, and a second core is idle); the returned join stores the
        child's answers, as `unreadable` would have found them.  Where forking is unsafe or not worth it (no
        fork, other threads running, a handful of files), nothing happens now and `unreadable` compiles
        each file when asked."""
        import json
        import threading

        todo = [path for path in paths if path not in self._validity]
        if len(todo) < ASIDE_MINIMUM or not hasattr(os, "fork") or threading.active_count() > 1:
            return lambda: None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return lambda: None
        if pid == 0:  # the child: answer, then leave without running anything of the parent's
            code = 1
            try:
                os.close(read_end)
                answers: list[list[str | int | None]] = []
                for path in todo:
                    error = self.unreadable(path)
                    answers.append([str(path), *(() if error is None else (error.message, error.path, error.line))])
                data = json.dumps(answers).encode("utf-8", "surrogateescape")
                while data:
                    data = data[os.write(write_end, data) :]
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)

        def join() -> None:
            chunks = []
            with os.fdopen(read_end, "rb") as pipe:
                while chunk := pipe.read(65536):
                    chunks.append(chunk)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                return  # the child failed: each file is compiled here when asked
            for path, *error in json.loads(b"".join(chunks).decode("utf-8", "surrogateescape")):
                self._validity.setdefault(Path(path), EaglepatchError(error[0], path=error[1], line=error[2]) if error else None)

        return join

    def parse_whole(self, source: SourceFile) -> Parsed:
        key = (source.path, 0, -1)
        cached = self._parsed.get(key)
        if cached is None:
            module = parse_module(source)
            self.lines_parsed += len(source.lines)
            cached = self._parsed[key] = Parsed(source, module, 0, source.text)
        return cached

    def parse_bodiless(self, source: SourceFile, classes: frozenset[str] | None = None) -> Bodiless:
        """The file with its def bodies cut, and the bodies of the classes at module level not in `classes`
        (None: none): all the scope analysis of those classes and the codemod that adds to them need, for a
        fraction of a whole parse; whole when the cut text is not that simple."""
        key = (source.path, classes)
        found = self._bodiless.get(key)
        if found is None:
            parsed = parse_cut(source.text, classes=classes, mark=True)
            found = Bodiless(*parsed) if parsed is not None else Bodiless(self.parse_whole(source).module, None)
            self._bodiless[key] = found
        return found

    def parse_lines(self, source: SourceFile, start: int, end: int) -> Parsed:
        """Parse lines [start, end) on their own; fall back to the whole file."""
        import libcst as cst

        key = (source.path, start, end)
        cached = self._parsed.get(key)
        if cached is not None:
            return cached
        text = block_text(source.lines[start:end])
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError:
            return self.parse_whole(source)
        self.lines_parsed += end - start
        parsed = self._parsed[key] = Parsed(source, module, start, text)
        return parsed

    def outline(self, source: SourceFile) -> Outline:
        cached = self._outlines.get(source.path)
        if cached is None:
            cached = self._outlines[source.path] = outline(source.lines, source.text)
        return cached

    def block_span(self, source: SourceFile, header: int) -> tuple[int, int]:
        """Lines [start, end) of the def/class block whose header line index is `header`, decorators included."""
        return block_start(source.lines, header), self.outline(source).ends.get(header, header + 1)

    def block_read_alone(self, source: SourceFile, header: int) -> str | None:
        """The (dedented) text of the block whose header is line index `header`, when libcst or CPython
        parsed it on its own; None when neither has read it, or only as part of the whole file."""
        start, end = self.block_span(source, header)
        parsed = self._parsed.get((source.path, start, end))
        if parsed is not None and parsed.first_line == start:
            return parsed.text
        key = (source.path, header)
        return self._ast_texts[key] if key in self._ast_alone else None

    def parse_block(self, source: SourceFile, header: int) -> Parsed:
        """Parse the def/class block whose header line index is `header`."""
        return self.parse_lines(source, *self.block_span(source, header))

    def function_ast(self, source: SourceFile, header: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The `def` whose header is line index `header`, read by CPython's parser: for analyses that
        only read a body (a long `forward`), ast is exact and an order of magnitude cheaper than libcst."""
        key = (source.path, header)
        if key in self._ast_functions:
            return self._ast_functions[key]
        found = None
        try:
            text = block_text(source.lines[slice(*self.block_span(source, header))])
            body = ast.parse(text).body
            found = body[-1] if body and isinstance(body[-1], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if found is not None and len(body) == 1:
                self._ast_alone.add(key)
        except (SyntaxError, ValueError):
            try:  # a slice that does not stand alone: the whole file, then the def on that line
                whole = ast.parse(source.text)
            except (SyntaxError, ValueError):
                whole = None
            for node in ast.walk(whole) if whole is not None else ():
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno - 1 == header:
                    found = node
                    break
            text = source.text
        self._ast_functions[key] = found
        self._ast_texts[key] = text
        return found

    def function_text(self, source: SourceFile, header: int) -> str:
        """The text function_ast read the def at `header` from (its positions are in it)."""
        if (source.path, header) not in self._ast_texts:
            self.function_ast(source, header)
        return self._ast_texts[(source.path, header)]

    def _import_lines(self, source: SourceFile) -> list[str]:
        """_import_texts, for a file: with strings masked when it has a triple-quoted one."""
        known = self._outlines.get(source.path)
        joined = known.joined if known is not None else "\n".join(source.lines)
        masked = None
        if '"""' in source.text or "'''" in source.text:
            masked = known.masked() if known is not None else mask(joined)
        return _import_texts(source.lines, joined, masked)

    def parse_imports_ast(self, source: SourceFile) -> list[ast.stmt]:
        """parse_imports, read by CPython's parser: what the import table needs is names, not nodes to
        edit, and ast reads import statements exactly as libcst does, several times faster."""
        key = (source.path, -2, -2)
        cached = self._ast_imports.get(key)
        if cached is None:
            statements = self._import_lines(source)
            try:
                cached = ast.parse("".join(statements)).body
            except (SyntaxError, ValueError):
                cached = []
                for text in statements:
                    try:
                        cached.extend(ast.parse(text).body)
                    except (SyntaxError, ValueError):
                        continue  # an "import" inside a docstring, not code
            self._ast_imports[key] = cached
        return list(cached)

    def parse_imports(self, source: SourceFile) -> list[cst.CSTNode]:
        """Every import statement in the file, wherever it stands (module, try, TYPE_CHECKING)."""
        import libcst as cst

        key = (source.path, -1, -1)
        cached = self._parsed.get(key)
        if cached is None:
            statements = self._import_lines(source)
            try:
                nodes = list(cst.parse_module("".join(statements)).body)
            except cst.ParserSyntaxError:
                nodes = []
                for text in statements:
                    try:
                        nodes.extend(cst.parse_module(text).body)
                    except cst.ParserSyntaxError:
                        continue  # an "import" inside a docstring, not code
            module = cst.Module(body=nodes)
            cached = self._parsed[key] = Parsed(source, module, 0)
        return list(cached.module.body)
