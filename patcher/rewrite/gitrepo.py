"""The git work tree around the target, through GitPython; everything still works without git."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EaglepatchError

# GitPython refuses to import when no git binary exists; eaglepatch must still work then.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

if TYPE_CHECKING:  # imported for real only where a repository is opened
    import git


@dataclass
class WorkTree:
    root: Path
    repo: git.Repo

    def rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root).as_posix()

    def dirty(self, path: Path) -> bool:
        """True when the file has uncommitted changes (staged or not); False when git cannot say."""
        try:
            rel = self.rel(path)
            if not self.repo.head.is_valid():
                return rel in self.repo.untracked_files or bool(self.repo.index.entries)
            return bool(self.repo.git.status("--porcelain", "--", rel).strip())
        except Exception:
            return False

    def commit(self, paths: list[Path], message: str) -> str:
        """Commit just `paths`, or leave the index as it was: a refusal (a hook, most likely) is raised
        with git's own words.  git runs in a session of its own, so a Ctrl-C meant for eaglepatch (which
        defers it until the commit is done) does not kill it half way."""
        rels = [self.rel(p) for p in paths]
        _, staged, _ = self._git("ls-files", "--stage", "-z", "--", *rels)
        for step in (("add", "--", *rels), ("commit", "-q", "-F", "-", "--only", "--", *rels)):
            status, _, err = self._git(*step, istream_text=message if step[0] == "commit" else None)
            if status != 0:
                self._restore_index(rels, staged)
                raise EaglepatchError(f"git {step[0]} failed ({git_reason(err)})", path=str(self.root))
        return self.repo.head.commit.hexsha[:12]

    def _restore_index(self, rels: list[str], staged: str) -> None:
        """The index entries of `rels` as `git ls-files --stage -z` listed them before the commit tried."""
        known = {entry.split("\t", 1)[1] for entry in staged.split("\0") if "\t" in entry}
        gone = [rel for rel in rels if rel not in known]
        if gone:
            self._git("rm", "-q", "--cached", "--ignore-unmatch", "--", *gone)
        if staged.strip("\0"):
            lines = "".join(f"{entry}\n" for entry in staged.split("\0") if entry)
            self._git("update-index", "--index-info", istream_text=lines)

    def check_can_commit(self, files: list[tuple[Path, str]]) -> None:
        """Raise for the first reason `commit` would fail, before any file is written.

        `files` are (real path, name to report).  Hooks can still refuse the commit; nothing
        else git checks first should.
        """
        self._check_git_runs()
        rels = {}
        for path, name in files:
            try:
                rels[self.rel(path)] = name
            except ValueError:
                raise EaglepatchError(
                    f"is outside the git work tree {self.root}, so --commit cannot commit it; drop --commit", path=name
                ) from None
        self._check_not_ignored(rels)
        self._check_no_operation_in_progress()
        self._check_identity()

    def _git(self, command: str, *args: str, istream_text: str | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of a git command run in the work tree, never raising for its
        status; `istream_text` is its standard input.  A session of its own: the terminal's Ctrl-C is not its."""
        import subprocess

        import git

        done = subprocess.run(
            [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", command, *args],
            cwd=self.root,
            input=istream_text.encode("utf-8") if istream_text is not None else None,
            stdin=subprocess.DEVNULL if istream_text is None else None,
            capture_output=True,
            start_new_session=True,
        )
        return done.returncode, done.stdout.decode("utf-8", "replace").rstrip("\n"), done.stderr.decode("utf-8", "replace")

    def _check_git_runs(self) -> None:
        try:
            runs = self._git("version")[0] == 0
        except Exception:  # GitPython reads .git without git, but cannot start a git that is not there
            runs = False
        if not runs:
            raise EaglepatchError("git cannot be run here, so --commit cannot commit; install git or drop --commit", path=str(self.root))

    def _check_not_ignored(self, rels: dict[str, str]) -> None:
        status, out, err = self._git("check-ignore", "--verbose", "--", *rels)
        if status == 0:  # tracked files are never reported: git adds them whatever .gitignore says
            rule, _, path = out.splitlines()[0].partition("\t")  # "source:line:pattern<TAB>path"
            raise EaglepatchError(
                f"is ignored by git (rule {rule}), so --commit cannot commit it; "
                "un-ignore it (or git add -f it once) or drop --commit",
                path=rels.get(path, next(iter(rels.values())) if len(rels) == 1 else path),
            )
        if status != 1:
            raise EaglepatchError(f"git check-ignore failed ({git_reason(err)}); fix the repository or drop --commit", path=str(self.root))

    def _check_no_operation_in_progress(self) -> None:
        for ref, what, finish in _OPERATIONS:
            if self._git("rev-parse", "--quiet", "--verify", ref)[0] == 0:
                raise EaglepatchError(
                    f"a {what} is in progress, and git cannot commit single files during one; {finish} or drop --commit",
                    path=str(self.root),
                )
        lock = Path(self.repo.git_dir) / "index.lock"
        if lock.exists():
            raise EaglepatchError(
                f"git's index is locked ({lock} exists); wait for the other git command, or remove the lock if none runs",
                path=str(self.root),
            )

    def _check_identity(self) -> None:
        for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
            if self._git("var", who)[0] != 0:
                raise EaglepatchError(
                    "git does not know who you are (user.name and user.email are not set), so it cannot commit; "
                    "set them with git config, or drop --commit",
                    path=str(self.root),
                )


_OPERATIONS = (
    ("MERGE_HEAD", "merge", "finish it (git commit) or abort it (git merge --abort)"),
    ("CHERRY_PICK_HEAD", "cherry-pick", "finish it or abort it (git cherry-pick --abort)"),
    ("REVERT_HEAD", "revert", "finish it or abort it (git revert --abort)"),
)


def commit_message(command: str, changes: dict[str, dict[str, list[str]]]) -> str:
    """A subject that fits 72 columns, the classes and members in the body (git's own advice).
    `command` is "apply" or "revert"; `changes` is file -> class -> members."""
    classes = sorted({cls for by_class in changes.values() for cls in by_class})
    if command == "apply":
        head, many, doing = "Add EAGLE-3 hooks to", "model classes", "Written by eaglepatch apply"
    else:
        head, many, doing = "Remove eaglepatch's hooks from", "model classes", "Removed by eaglepatch revert"
    subject = f"{head} {classes[0]}" if len(classes) == 1 else f"{head} {len(classes)} {many}"
    if len(subject) > 72:
        subject = f"{head} 1 model class"
    lines = [subject, "", f"{doing}:", ""]
    for rel in sorted(changes):
        for cls, members in sorted(changes[rel].items()):
            lines.append(f"- {cls} ({rel}): {', '.join(members)}")
    return "\n".join(lines) + "\n"


def git_reason(stderr: str) -> str:
    """What git said, without its hints: the lines that tell why."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    said = [line for line in lines if line and not line.startswith("hint:")]
    return "; ".join(said) or "no message"


def find_work_tree(path: Path) -> WorkTree | None:
    try:
        import git
    except Exception:
        return None
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except Exception:
        return None
    if repo.bare or repo.working_tree_dir is None:
        return None
    return WorkTree(Path(repo.working_tree_dir).resolve(), repo)
