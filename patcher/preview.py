"""Stage 7a: show edits as a unified diff with git headers, one `git apply` and `patch -p1` accept."""

from __future__ import annotations

import difflib
from pathlib import Path

from patcher.edits import FileEdit

NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(data: bytes) -> list[str]:
    # keep the BOM and CRLF bytes: the patch must apply to the file as it is on disk
    return data.decode("utf-8").splitlines(keepends=True)


def file_diff(edit: FileEdit, label: str) -> str:
    old, new = _lines(edit.original), _lines(edit.updated)
    out = [f"diff --git a/{label} b/{label}\n"]
    body = list(difflib.unified_diff(old, new, f"a/{label}", f"b/{label}", n=3))
    if not body:
        return ""
    for line in body:
        if line.endswith("\n"):
            out.append(line)
        else:  # the last line of a file without a final newline
            out.append(line + "\n" + NO_NEWLINE)
    return "".join(out)


def diff_label(edit: FileEdit, base: Path) -> str:
    """The path as seen from `base`: symlinks are not resolved first (site-packages/sglang may be one)."""
    for path, folder in ((edit.path, base), (edit.path.resolve(), base.resolve())):
        try:
            return path.relative_to(folder).as_posix()
        except ValueError:
            continue
    return edit.path.as_posix().lstrip("/")


def render_patch(edits: list[FileEdit], base: Path) -> str:
    return "".join(file_diff(edit, diff_label(edit, base)) for edit in edits if edit.changed)
