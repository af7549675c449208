"""The git work tree around the target, through GitPython; everything still works without git."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# GitPython refuses to import when no git binary exists; eaglepatch must still work then.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


@dataclass
class WorkTree:
    root: Path
    repo: object  # git.Repo

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
        rels = [self.rel(p) for p in paths]
        self.repo.git.add("--", *rels)
        self.repo.git.commit("-m", message, "--only", "--", *rels)
        return self.repo.head.commit.hexsha[:12]


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
