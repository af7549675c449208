"""Statements read off the source text, without parsing the file they are in."""

from __future__ import annotations

import re

from patcher.source import _scan

_CONTINUED = re.compile(r"\\[ \t]*$")


def statement_end(lines: list[str], index: int) -> int:
    """One past the last line of the statement starting at `index` (open brackets, `\\`)."""
    depth, in_string = 0, None
    for i in range(index, len(lines)):
        depth, in_string = _scan(lines[i], depth, in_string)
        if depth <= 0 and in_string is None and not _CONTINUED.search(lines[i]):
            return i + 1
    return len(lines)
