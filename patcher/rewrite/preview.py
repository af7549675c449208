"""Rewrite stage: show edits as a unified diff with git headers, one `git apply` and `patch -p1` accept.

The patch is bytes, built from the files' bytes: git splits lines at `\\n` only, so a form
feed, a U+2028 or a lone `\\r` stays inside its line (a CR-only file is one line to git), and
a file in latin-1 is shown in latin-1.  Decoding first and splitting as Python does would
print hunks `git apply` cannot match.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ..records import FileEdit

NO_NEWLINE = b"\\ No newline at end of file\n"
_C_ESCAPES = {7: b"\\a", 8: b"\\b", 9: b"\\t", 10: b"\\n", 11: b"\\v", 12: b"\\f", 13: b"\\r", 34: b'\\"', 92: b"\\\\"}


def git_lines(data: bytes) -> list[bytes]:
    """Lines as git sees them: each ends at `\\n`, kept; the last may have no ending."""
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def quote_path(name: bytes) -> bytes:
    """A path as git writes it in a patch: C-quoted when it holds a quote, a backslash, a control
    byte or a non-ASCII byte (git's core.quotePath), else as it is."""
    if not any(b < 0x20 or b >= 0x7F or b in (34, 92) for b in name):
        return name
    out = bytearray(b'"')
    for byte in name:
        if byte in _C_ESCAPES:
            out += _C_ESCAPES[byte]
        elif byte < 0x20 or byte >= 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def file_diff(edit: FileEdit, label: str) -> bytes:
    name = os.fsencode(label)
    old_name, new_name = quote_path(b"a/" + name), quote_path(b"b/" + name)
    body = list(difflib.diff_bytes(difflib.unified_diff, git_lines(edit.original), git_lines(edit.updated), old_name, new_name, n=3))
    if not body:
        return b""
    out = [b"diff --git " + old_name + b" " + new_name + b"\n"]
    for line in body:
        if line.endswith(b"\n"):
            out.append(line)
        else:  # the last line of a file without a final newline
            out.append(line + b"\n" + NO_NEWLINE)
    return b"".join(out)


def diff_label(edit: FileEdit, base: Path) -> str:
    """The path as seen from `base`: symlinks are not resolved first (site-packages/sglang may be one)."""
    for path, folder in ((edit.path, base), (edit.path.resolve(), base.resolve())):
        try:
            return path.relative_to(folder).as_posix()
        except ValueError:
            continue
    return edit.path.as_posix().lstrip("/")


def render_patch(edits: list[FileEdit], base: Path) -> bytes:
    return b"".join(file_diff(edit, diff_label(edit, base)) for edit in edits if edit.changed)
