"""Statements read off the source text, without parsing the file they are in.

Where a statement that spans lines ends, what its right-hand side is, and the same code on
one line for reports.
"""

from __future__ import annotations

import re

import libcst as cst

from patcher.source import _scan

_CONTINUED = re.compile(r"\\[ \t]*$")
_COMMENT = re.compile(r"""\"\"\"|'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|\#.*""")


def statement_end(lines: list[str], index: int) -> int:
    """One past the last line of the statement starting at `index` (open brackets, `\\`)."""
    depth, in_string = 0, None
    for i in range(index, len(lines)):
        depth, in_string = _scan(lines[i], depth, in_string)
        if depth <= 0 and in_string is None and not _CONTINUED.search(lines[i]):
            return i + 1
    return len(lines)


def _code_of(line: str) -> str:
    """The line without its comment (a `#` inside a string is not one)."""
    for match in _COMMENT.finditer(line):
        if match.group().startswith("#"):
            return line[: match.start()]
    return line


def one_line(lines: list[str]) -> str:
    """A multi-line statement as one line of code, for reports: `self.model = (\\n Foo(\\n x,\\n)\\n)`
    reads `self.model = (Foo(x))`."""
    text = " ".join(_code_of(line).strip().rstrip("\\").strip() for line in lines)
    text = re.sub(r"([(\[{])\s+", r"\1", text)
    text = re.sub(r",?\s+([)\]}])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def assigned_value(lines: list[str], start: int, target: str) -> str | None:
    """The right-hand side of `target = ...` (or `target: T = ...`) starting at line `start`."""
    match = re.match(rf"[ \t]*{re.escape(target)}[ \t]*(?::[^=\n]*)?=(?!=)", lines[start])
    if match is None:
        return None
    rest = [lines[start][match.end() :]] + lines[start + 1 : statement_end(lines, start)]
    return "\n".join(_code_of(line).rstrip().rstrip("\\") for line in rest).strip()


def parse_value(text: str) -> cst.BaseExpression | None:
    try:
        return cst.parse_expression(text if "\n" not in text else f"({text})")
    except cst.ParserSyntaxError:
        return None
