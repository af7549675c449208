"""One exception type for every user-facing failure, so the CLI can turn it into exit 2."""

from __future__ import annotations


class EaglepatchError(Exception):
    """Bad input or an unsafe situation: one line naming the file and the fix."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message)
