"""The gate's memory: required gaps a team has reviewed and accepted, kept in a JSON file in git.

As mypy and ruff users keep theirs: `check --all --write-baseline FILE` records every required
gap of today, `check --all --baseline FILE` fails only on gaps that are not in it, and says
which entries no longer match anything (fixed upstream, or the class is gone) so the file can
shrink.  Entries name file, class and member; nothing positional, so edits elsewhere in a
file do not invalidate them.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError
from ..records import ModelPlan

SCHEMA = 1
Key = tuple[str, str, str]  # (file relative to srt, class, member or "member (plumbing)": MemberPlan.label)


def gap_keys(plans: Sequence[ModelPlan]) -> list[Key]:
    return sorted({(p.wrapper.path, p.wrapper.cls.name, m.label) for p in plans for m in p.required_gaps})


@dataclass(frozen=True)
class Gate:
    """What fails the gate once a baseline (possibly empty) is taken into account."""

    accepted: set[Key] = field(default_factory=set)
    stale: list[Key] = field(default_factory=list)
    source: str | None = None

    def is_new(self, plan: ModelPlan, member: str) -> bool:
        return (plan.wrapper.path, plan.wrapper.cls.name, member) not in self.accepted

    def new_gaps(self, plans: Sequence[ModelPlan]) -> list[Key]:
        return [key for key in gap_keys(plans) if key not in self.accepted]


def load_gate(path: Path | None, plans: Sequence[ModelPlan]) -> Gate:
    if path is None:
        return Gate()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EaglepatchError("baseline file not found; write one with --write-baseline", path=str(path)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EaglepatchError(f"is not a readable baseline ({exc}); rewrite it with --write-baseline", path=str(path)) from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list) or data.get("schema") != SCHEMA:
        raise EaglepatchError(f"is not an eaglepatch baseline (schema {SCHEMA}); rewrite it with --write-baseline", path=str(path))
    accepted: set[Key] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("file", "class", "member")):
            raise EaglepatchError("has an entry without file, class and member strings; rewrite it with --write-baseline", path=str(path))
        accepted.add((entry["file"], entry["class"], entry["member"]))
    looked_at = {(p.wrapper.path, p.wrapper.cls.name) for p in plans}
    current = set(gap_keys(plans))
    stale = sorted(k for k in accepted if k[:2] in looked_at and k not in current)
    return Gate(accepted=accepted, stale=stale, source=str(path))


def _mode_for(target: Path) -> int:
    """The baseline's permission bits: an existing file's own, else what the user's umask gives a
    new file (0644 under the usual 022), as for any file the user creates; it is meant for git."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        pass
    umask = os.umask(0)  # read it the only portable way: set, then put it back at once
    os.umask(umask)
    return 0o666 & ~umask


def write_baseline(path: Path, plans: Sequence[ModelPlan]) -> int:
    """Atomically write every required gap; returns how many were recorded."""
    keys = gap_keys(plans)
    needed_by = {(p.wrapper.path, p.wrapper.cls.name, m.label): m.member.needed_by for p in plans for m in p.required_gaps}
    document = {
        "schema": SCHEMA,
        "tool": "eaglepatch",
        "about": "Required gaps (EAGLE-3's and other algorithms') accepted as known; `eaglepatch check --baseline` fails only on others.",
        # "algorithms" says who needs the member; it is not part of the key (a member's name is its algorithm's)
        "entries": [{"file": f, "class": c, "member": m, "algorithms": list(needed_by[f, c, m])} for f, c, m in keys],
    }
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise EaglepatchError("the folder for the baseline does not exist; create it first", path=str(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        try:
            os.fchmod(fd, _mode_for(target))  # mkstemp's 0600 would outlive the rename
        except (AttributeError, NotImplementedError):  # pragma: no cover - no fchmod (Windows)
            pass
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, target)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise EaglepatchError(f"could not write the baseline ({exc.strerror or exc})", path=str(target)) from None
    return len(keys)
