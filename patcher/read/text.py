"""Read stage, text: a file's bytes decoded once, its lines, and the line helpers every reader uses.

Decoding follows Python's own rules (a PEP 263 coding line, a UTF-8 BOM, `\\r\\n`/`\\r`/`\\n` line
ends), so a line number here is the line number CPython reports; what libcst rewrites is spliced
back into the original text, so no byte it did not mean to change moves.
"""

from __future__ import annotations

import codecs
import difflib
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, AnyStr, overload

from ..errors import EaglepatchError

if TYPE_CHECKING:  # libcst is imported where code is parsed with it: `check` reads with CPython's parser
    import libcst as cst

BOM = b"\xef\xbb\xbf"
_LF = re.compile("\n")
# Python (and the ast module) end lines at \r\n, \r or \n only; str.splitlines also splits on \f and others
_NEWLINES = re.compile(r"\r\n|\r|\n")
_NEWLINES_BYTES = re.compile(rb"\r\n|\r|\n")
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

    __slots__ = ("text", "_starts", "_count")

    def __init__(self, text: str):
        self.text = text
        self._starts: array | None = None  # found when a line is first asked for: many files read are only searched
        self._count = text.count("\n") + (0 if not text or text.endswith("\n") else 1)

    @property
    def starts(self) -> array:
        if self._starts is None:
            self._starts = line_starts(self.text)
        return self._starts

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
            starts = self._starts if self._starts is not None else self.starts
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

    def check_round_trip(self) -> None:
        """Refuse to write a file whose declared encoding does not read back to its own bytes."""
        if self.encoding != "utf-8" and self.encode(self.text) != self.data:
            raise EaglepatchError(
                f"does not read back to the same bytes in {self.encoding}; re-encode the file as UTF-8",
                path=self.rel,
            )

    def rewrite(self, before: cst.Module, after: cst.Module) -> bytes:
        """The file's bytes with what libcst changed, and not one other byte changed.

        libcst drops a form feed that starts an indented line and a lone `\\r` that ends the
        file; so every line libcst printed unchanged is taken from the original text, and
        only the lines it added or changed come from libcst.
        """
        if after is before:
            return self.data
        self.check_round_trip()
        if not libcst_may_drop_bytes(self.text):  # printing a module costs ~0.2 s per 3,000 lines
            return self.encode(after.code)
        return self.encode(splice(self.text, before.code, after.code, self.rel))


def libcst_may_drop_bytes(text: str) -> bool:
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


def indent_width(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def is_code_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def bracket_delta(line: str) -> int:
    code = line.split("#", 1)[0]
    return sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")


_TOKEN = re.compile(r"""\"\"\"|'''|"(?:\\.|[^"\\])*(?:"|\\$)|'(?:\\.|[^'\\])*(?:'|\\$)|\#|\\$|[()\[\]{}]""")
_CLOSE = {
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""'),
    "'''": re.compile(r"(?:[^'\\]|\\.|'(?!''))*'''"),
    '"': re.compile(r'(?:[^"\\]|\\.)*(?:"|\\$)'),
    "'": re.compile(r"(?:[^'\\]|\\.)*(?:'|\\$)"),
}


def bracket_scan(line: str, depth: int, in_string: str | None) -> tuple[int, str | None]:
    """Bracket depth and the string still open after `line`, skipping strings and comments."""
    depth, in_string, _ = scan_line(line, depth, in_string)
    return depth, in_string


def scan_line(line: str, depth: int, in_string: str | None) -> tuple[int, str | None, bool]:
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


class WordFinder:
    """Where any of a few words stands as a whole word (as `(?<!\\w)(?:a|b)(?!\\w)` finds it): `find`
    per word with the boundaries checked by hand, about ten times faster than that regex, whose
    look-behind keeps the engine from skipping ahead to a word's first letter."""

    __slots__ = ("words", "_encoded")

    def __init__(self, words: Iterable[str]):
        self.words = tuple(sorted({w for w in words if w}))
        self._encoded = tuple(w.encode() for w in self.words)

    def offsets(self, text: str) -> list[int]:
        """Each start, in order (whole words never overlap)."""
        return _whole_words(text, self.words, lambda at: _is_word_char(text[at]))

    def search(self, text: str) -> bool:
        return bool(self.words) and bool(self.offsets(text))

    def byte_offsets(self, data: bytes) -> list[int]:
        """As `offsets`, for a bytes pattern's `\\w` (ASCII)."""
        return _whole_words(data, self._encoded, lambda at: is_word_byte(data[at]))


def _whole_words(text: AnyStr, words: Sequence[AnyStr], word_at: Callable[[int], bool]) -> list[int]:
    """The sorted starts of `words` in `text` with no word character (`word_at`) either side."""
    found: list[int] = []
    for word in words:
        size, at = len(word), text.find(word)
        while at >= 0:
            if (at == 0 or not word_at(at - 1)) and (at + size == len(text) or not word_at(at + size)):
                found.append(at)
            at = text.find(word, at + 1)
    found.sort()
    return found


def _is_word_char(char: str) -> bool:
    """`\\w` of a str pattern: Unicode letters, digits and numerics, and the underscore."""
    return char.isalnum() or char == "_"


def is_word_byte(byte: int) -> bool:
    """`\\w` of a bytes pattern: ASCII letters, digits and the underscore."""
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122
