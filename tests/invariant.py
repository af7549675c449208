"""One invariant read three ways (issue 24): the members `check` lists with a fix are exactly the members
`diff` prints and the members `apply` writes.

Each side is brought to the same shape, a set of ``(file, class, member)`` with ``file`` relative to
``sglang/srt``:

* `check` (``check_fixes``): from the JSON report (patcher/output/report.py, schema 2), each gap whose
  ``fix`` is not null. A ``delegate`` or ``synthesize`` fix is written into the class itself; an ``inherit``
  fix is written into the base class it names (``"file:Class"``), so it is counted there.
* `diff` (``diff_members``): the patch it prints is applied here, hunk by hunk (each context and removed
  line must match the file it patches), to the files as they were; the members added per class are read
  off the two versions with CPython's ast, not off the patch text.
* `apply` (``written_members``): the members added per class between the committed tree (``HEAD``) and
  the work tree, read the same way.

A member is a name a class body binds directly: a ``def``/``async def`` (decorated or not, properties
too), an assignment or annotated assignment to a plain name.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

Member = tuple[str, str, str]  # (file relative to srt, class, member)
WRITTEN_HERE = ("delegate", "synthesize")
SRT_PREFIXES = ("python/sglang/srt/", "sglang/srt/")


def srt_relative(path: str) -> str:
    """A path the diff or git names (relative to the checkout or site-packages root), relative to srt."""
    for prefix in SRT_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix):]
    raise AssertionError(f"{path}: not under sglang/srt")


def check_fixes(report: Mapping) -> set[Member]:
    """(file, class, member) of every gap of a `check --format json` report that has a fix, counted on
    the class apply writes it into."""
    out: set[Member] = set()
    for model in report["models"]:
        for gap in model["missing"]:
            fix = gap["fix"]
            if fix is None:
                continue
            # a hook the plumbing copies into the backbone (its sibling's body under the hook's name)
            out.update((p["file"], p["class"], p["writes"]) for p in fix.get("plumbing") or () if p.get("writes"))
            if fix["kind"] in WRITTEN_HERE:
                out.add((model["file"], model["class"], gap["name"]))
            elif fix["kind"] == "inherit":
                file, _, base = fix["from"].partition(":")
                out.add((file, base, gap["name"]))
            else:
                raise AssertionError(f"{model['file']}:{model['class']}.{gap['name']}: unknown fix kind {fix}")
    return out


def apply_exit_code(report: Mapping) -> int:
    """What `apply` exits with after writing every fix of the report: 1 while a required gap is left (one
    with no fix), 0 when none is."""
    return int(any(g["required"] and g["fix"] is None for m in report["models"] for g in m["missing"]))


@functools.lru_cache(maxsize=512)
def class_members(source: bytes) -> dict[str, frozenset[str]]:
    """Class (dotted for a nested one) -> the names its body binds directly. Cached: each old file is
    read for diff's side and for apply's, each new one is most often the same bytes on both."""
    tree = ast.parse(source)
    out: dict[str, set[str]] = {}

    def visit(body: Iterable[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                qualified = f"{prefix}{node.name}"
                names = out.setdefault(qualified, set())
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                visit(node.body, qualified + ".")
            elif isinstance(node, (ast.If, ast.Try)):  # classes defined under a module-level if/try
                for block in (node.body, node.orelse, getattr(node, "finalbody", []), *(h.body for h in getattr(node, "handlers", []))):
                    visit(block, prefix)

    visit(tree.body, "")
    return {cls: frozenset(names) for cls, names in out.items()}


def added_members(rel: str, old: bytes | None, new: bytes) -> set[Member]:
    """(rel, class, member) for each member a class has in ``new`` and not in ``old`` (a file's two versions)."""
    before = class_members(old) if old is not None else {}
    after = class_members(new)
    return {(rel, cls, name) for cls, names in after.items() for name in names - before.get(cls, frozenset())}


# --------------------------------------------------------------------------- diff


_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_patch(patch: bytes, read_old: Callable[[str], bytes | None]) -> dict[str, bytes]:
    """The files a unified diff with git headers (what `eaglepatch diff` prints) changes, as they are
    after it: path (as the patch names it, without ``a/``/``b/``) -> new bytes. ``read_old`` gives a
    file's bytes before the patch (None for a file the patch creates). Line endings are kept: lines are
    split on LF alone, so a CRLF file's lines carry their CR on both sides."""
    out: dict[str, bytes] = {}
    lines = patch.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith(b"--- "):
            i += 1
            continue
        assert lines[i + 1].startswith(b"+++ "), f"patch line {i + 2}: no +++ after ---"
        old_name = line[4:].decode("utf-8")
        new_name = lines[i + 1][4:].decode("utf-8")
        i += 2
        path = new_name[2:] if new_name.startswith("b/") else new_name
        original = None if old_name == "/dev/null" else read_old(old_name[2:] if old_name.startswith("a/") else old_name)
        source = [] if original is None else original.split(b"\n")
        result: list[bytes] = []
        at = 0  # index into source of the next line not yet copied
        no_newline = False
        while i < len(lines) and (m := _HUNK.match(lines[i])):
            start = int(m.group(1))
            old_count = 1 if m.group(2) is None else int(m.group(2))
            begin = start - 1 if old_count else start  # an empty old side names the line before
            assert begin >= at, f"{path}: hunks out of order at {lines[i]!r}"
            result += source[at:begin]
            at = begin
            i += 1
            while i < len(lines) and lines[i][:1] in (b" ", b"-", b"+", b"\\"):
                tag, text = lines[i][:1], lines[i][1:]
                if tag == b"\\":  # "\ No newline at end of file"
                    no_newline = True
                elif tag == b"+":
                    result.append(text)
                else:
                    assert at < len(source) and source[at] == text, (
                        f"{path}: the patch's {'context' if tag == b' ' else 'removed'} line {at + 1} "
                        f"{text!r} is {source[at] if at < len(source) else 'past the end'!r} in the file"
                    )
                    if tag == b" ":
                        result.append(text)
                    at += 1
                i += 1
        result += source[at:]
        text = b"\n".join(result)
        if no_newline and text.endswith(b"\n"):
            text = text[:-1]
        out[path] = text
    return out


def diff_members(patch: bytes, read_old: Callable[[str], bytes | None]) -> set[Member]:
    """The members the patch adds, per class, with files relative to srt."""
    found: set[Member] = set()
    for path, new in apply_patch(patch, read_old).items():
        found |= added_members(srt_relative(path), read_old(path), new)
    return found


# --------------------------------------------------------------------------- apply


def _git(root: Path, *args: str) -> bytes:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True)
    assert done.returncode == 0, f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace')}"
    return done.stdout


def committed(root: Path) -> Callable[[str], bytes | None]:
    """A reader of the files as committed at HEAD (None for a file HEAD does not have)."""

    @functools.cache
    def read(path: str) -> bytes | None:
        done = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=root, capture_output=True)
        return done.stdout if done.returncode == 0 else None

    return read


def written_members(root: Path, read_old: Callable[[str], bytes | None] | None = None) -> set[Member]:
    """The members added per class between HEAD (``read_old``, ``committed(root)`` unless given) and the
    work tree of the git repository at ``root``."""
    read_old = read_old or committed(root)
    changed = _git(root, "diff", "--name-only", "-z", "HEAD").decode("utf-8").split("\0")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z").decode("utf-8").split("\0")
    found: set[Member] = set()
    for path in filter(None, [*changed, *untracked]):
        if path.endswith(".py") and (root / path).is_file():
            found |= added_members(srt_relative(path), read_old(path), (root / path).read_bytes())
    return found


def disagreement(check: set[Member], diff: set[Member], apply: set[Member]) -> str:
    """What differs between the three sets, one line per member, for an assertion message ("" if none)."""
    lines = []
    for member in sorted(check | diff | apply):
        said = (member in check, member in diff, member in apply)
        if said != (True, True, True):
            where = f"{member[0]}:{member[1]}.{member[2]}"
            lines.append(f"  {where}: check {'fix' if said[0] else '-'}, diff {'adds' if said[1] else '-'}, "
                         f"apply {'writes' if said[2] else '-'}")
    return "\n".join(lines)
