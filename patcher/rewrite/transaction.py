"""Write a set of edits, and optionally commit them, as one transaction: every precondition (of each
file and of the commit) is checked before any file is touched, then every file is written or none
(`write.write_all`).  What happened comes back as a record for the output stage to report, and what
the written edits leave missing (`still_missing`); nothing here prints."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import EaglepatchError
from ..read.locate import SourceTree
from ..records import FileEdit, MemberPlan, ModelPlan
from .gitrepo import commit_message, find_work_tree
from .write import Interrupted, check_writable, writable_target, write_all

Changes = dict[str, list[str]]  # class -> members, of one file


@dataclass(frozen=True)
class Transaction:
    """The outcome.  `refused` non-empty, or `stopped` set: no file was written.  Else every edit was,
    and `interrupted` is the signal that came while they were (deferred until they all were)."""

    base: Path  # what patch paths are relative to: the git work tree's root, else the path given
    written: tuple[FileEdit, ...] = ()
    dirty: tuple[str, ...] = ()  # files that had uncommitted changes before they were written
    commit: str | None = None
    interrupted: int | None = None
    stopped: int | None = None  # a signal that came while files were staged, before any was replaced
    refused: tuple[EaglepatchError, ...] = ()


def patch_base(tree: SourceTree) -> Path:
    work_tree = find_work_tree(tree.srt)
    return work_tree.root if work_tree else tree.given


def write_edits(
    tree: SourceTree,
    edits: list[FileEdit],
    changes_of: Callable[[FileEdit], Changes],
    commit: bool = False,
    command: str = "apply",
    progress: Callable[[FileEdit], None] | None = None,
) -> Transaction:
    work_tree = find_work_tree(tree.srt)
    base = work_tree.root if work_tree else tree.given
    if commit:
        if work_tree is None:
            why = "is not inside a git work tree, so --commit has nothing to commit to; run git init there, or drop --commit"
            return Transaction(base, refused=(EaglepatchError(why, path=str(tree.given)),))
        try:
            work_tree.check_can_commit([(writable_target(edit, tree.srt), edit.rel) for edit in edits])
        except EaglepatchError as exc:
            return Transaction(base, refused=(exc,))
    refused = []
    for edit in edits:
        try:
            check_writable(edit, tree.srt)
        except EaglepatchError as exc:
            refused.append(exc)
    if refused:
        return Transaction(base, refused=tuple(refused))
    dirty = tuple(edit.rel for edit in edits if work_tree is not None and work_tree.dirty(edit.path))
    do_commit = None
    if commit:
        assert work_tree is not None, "checked above"
        committing, message = work_tree, commit_message(command, {edit.rel: changes_of(edit) for edit in edits})

        def do_commit() -> str:
            return committing.commit([e.path for e in edits], message)

    try:
        written = write_all(edits, tree.srt, do_commit, progress, command)
    except Interrupted as stop:
        return Transaction(base, dirty=dirty, stopped=stop.signum)
    except EaglepatchError as exc:
        return Transaction(base, dirty=dirty, refused=(exc,))
    return Transaction(base, written.edits, dirty, written.commit, written.interrupted)


def still_missing(plans: Sequence[ModelPlan], written: list[FileEdit]) -> list[tuple[ModelPlan, MemberPlan]]:
    """(plan, member plan) for each required member no written edit adds: what apply leaves for people."""
    added = {(e.rel, cls, m) for e in written for cls, members in e.added.items() for m in members}
    fixes = {(p.wrapper.cls.file, p.wrapper.cls.name, e.member.name): e.fix for p in plans for e in p.missing}
    left = []
    for plan in plans:
        for entry in plan.required_gaps:
            where, fix = (plan.wrapper.cls.file, plan.wrapper.cls.name, entry.member.name), entry.fix
            for _ in range(len(fixes)):  # an inherited fix is written into the base, or that base's base
                if fix is None or fix.kind != "inherit":
                    break
                file, _, cls = fix.to.rpartition(":")
                where = (file, cls, entry.member.name)
                fix = fixes.get(where, fix if where in added else None)
            if fix is None or where not in added:
                left.append((plan, entry))
    return left
