"""One exception type for every user-facing failure, so the CLI can turn it into exit 2."""

from __future__ import annotations


class EaglepatchError(Exception):
    """Bad input or an unsafe situation: one line naming the file and the fix."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message)


class UnreadableFiles(EaglepatchError):
    """Files an answer depends on that could not be decoded or parsed: every one is named, since an
    answer read around a file it could not read is no answer (the gate never passes on one)."""

    def __init__(self, errors: list[EaglepatchError], rels: list[str]):
        self.errors = tuple(errors)
        lines = [f"{error}, or leave it out with --exclude {rel}" for error, rel in zip(errors, rels)]
        super().__init__("\n".join(lines))
