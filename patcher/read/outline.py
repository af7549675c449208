"""Read stage, outline: a file's `def`/`class` headers found by a text pass, each block's extent on demand.

No parser runs here: headers are found by regex over the whole text, and a block ends where the
next statement at its indentation or less starts, in the text with its comments and strings
masked (`mask`).  What the outline finds is what `slices` hands a parser.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Sequence
from itertools import chain

from .text import TextLines, indent_width, is_code_line, line_starts, scan_line

# a header after a newline: the engine jumps from newline to newline, where a MULTILINE `^` made it try every
# position (the first line is matched with _HEADER_FIRST)
_HEADER_AFTER_NEWLINE = re.compile(r"\n([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)")
_HEADER_FIRST = re.compile(r"([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)")
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
            depth, in_string, backslash = scan_line(line, depth, in_string)
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
        depth, in_string, backslash = scan_line(lines[k], depth, in_string)
        open_ = depth > 0 or in_string is not None or backslash
        if open_ != (k < below - 1):
            return None
    return j
