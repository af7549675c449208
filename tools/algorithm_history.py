"""Per cached SGLang release: its speculative algorithms, each one's hooks on target models, and how
many model classes define each hook: upstream's hand-added hooks, release after release (issue 27).

    python tools/algorithm_history.py [--low 0.5.11] [--high 0.5.23] [--algorithm DFLASH ...] [--json FILE]

The algorithms and their protocols are read by patcher/analyze/algorithms.py (nothing is listed
here).  A hook is a member the algorithm's code calls on a target model (role "target"), or a
member of a group of which one suffices.  For each hook: where it is called and whether it is
required; the model classes under models/ that define it themselves (not inherited), the files they
are in, the classes new since the release before, and what the bodies do:

* `list`: set a `layers_to_capture` list (or set) on the model or its backbone;
* `per-layer`: mark each captured layer (`self.layers[i]._is_layer_to_capture = True`, setattr);
* `forwards`: call a `*_layers_to_capture` hook of an inner model (or another hook of its own);
* `other`: anything else (a stub that raises, a getter).

Release trees come from $EAGLEPATCH_SGLANG_CACHE (trees/<version>/site-packages), versions from
tests/releases.txt; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import Version

from eaglepatch.analyze.algorithms import Algorithms, read_algorithms
from eaglepatch.analyze.context import RunContext
from eaglepatch.engines import locate_tree
from eaglepatch.read.source_cache import SourceCache

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ROOT / "tests" / "releases.txt"
CAPTURE_SUFFIX = "_layers_to_capture"


@dataclass
class Hook:
    name: str
    required: str  # "required", "optional", "one of: a, b"
    called_at: list[str]
    classes: list[str] = field(default_factory=list)  # "file:Class" defining it
    mechanisms: dict[str, int] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)  # classes that did not define it in the release before

    @property
    def files(self) -> int:
        return len({c.split(":")[0] for c in self.classes})


@dataclass
class AlgorithmRow:
    name: str
    guards: list[str]
    modules: int
    members: int  # every member of its protocol (draft ones too)
    hooks: list[Hook]


@dataclass
class Release:
    version: str
    algorithms: list[AlgorithmRow]
    flags: list[str]


def pinned() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in RELEASES.read_text().splitlines())
    return [line for line in lines if line]


def tree_of(version: str) -> Path:
    base = Path(os.environ.get("EAGLEPATCH_SGLANG_CACHE") or ROOT / ".cache" / "sglang")
    return base / "trees" / version / "site-packages"


def mechanism(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """What a capture hook's body does (see the module docstring)."""
    per_layer = listed = forwards = False
    for child in ast.walk(node):
        if isinstance(child, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Subscript):
                    per_layer = True
                elif isinstance(target, ast.Attribute) and target.attr.endswith("layers_to_capture"):
                    listed = True
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "setattr":
            if child.args and isinstance(child.args[0], ast.Subscript):
                per_layer = True
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr.endswith(CAPTURE_SUFFIX):
            forwards = True
    return "per-layer" if per_layer else "list" if listed else "forwards" if forwards else "other"


def definitions(tree_root: Path, cache: SourceCache, names: set[str]) -> dict[str, list[tuple[str, str]]]:
    """hook -> [(file:Class, mechanism)] for every class under models/ that defines it itself."""
    tree = locate_tree(tree_root)
    found: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    wanted = [f"def {name}(".encode() for name in names]
    for path in sorted(tree.models.rglob("*.py")):
        data = path.read_bytes()
        if not any(w in data for w in wanted):
            continue
        source = cache.read(path)
        outline = cache.outline(source)
        for index, _indent, kind, name in outline.headers:
            if kind != "def" or name not in names:
                continue
            owner = next((h for h in outline.enclosing(index)[1:] if h[2] == "class"), None)
            if owner is None:
                continue
            node = cache.function_ast(source, index)
            found[name].append((f"{source.rel}:{owner[3]}", mechanism(node) if node is not None else "other"))
    return found


def read_release(version: str, wanted: set[str] | None) -> Release:
    root = tree_of(version)
    tree = locate_tree(root)
    cache = SourceCache(tree.srt)
    algorithms: Algorithms = read_algorithms(RunContext(tree, cache))
    rows: list[AlgorithmRow] = []
    hooks_wanted: set[str] = set()
    for algorithm in algorithms.algorithms:
        if wanted is not None and algorithm.name not in wanted:
            continue
        grouped = {member: group for group in algorithm.one_of for member in group.members}
        hooks = []
        for name, member in algorithm.protocol.members.items():
            if "target" not in member.roles and name not in grouped:
                continue
            if name in grouped:
                required = "one of: " + ", ".join(grouped[name].members)
            else:
                required = "required" if member.required else "optional"
            hooks.append(Hook(name, required, member.called_at))
            hooks_wanted.add(name)
        rows.append(AlgorithmRow(algorithm.name, [g.name for g in algorithm.guards], len(algorithm.modules), len(algorithm.protocol.members), hooks))
    defined = definitions(root, cache, hooks_wanted)
    for row in rows:
        for hook in row.hooks:
            hook.classes = sorted(c for c, _ in defined[hook.name])
            hook.mechanisms = dict(sorted(Counter(m for _, m in defined[hook.name]).items()))
    return Release(version, rows, [f.name for f in algorithms.flags])


def markdown(releases: list[Release]) -> str:
    out = ["| release | algorithm | hook | needed | called at | classes | files | bodies | new classes |", "|---|---|---|---|---|---|---|---|---|"]
    for release in releases:
        for row in release.algorithms:
            if not row.hooks:
                out.append(f"| {release.version} | {row.name} | (none) | | | | | | |")
            for hook in row.hooks:
                bodies = ", ".join(f"{k} {v}" for k, v in hook.mechanisms.items())
                new = ", ".join(c.split(":")[1] for c in hook.new) if len(hook.new) <= 6 else f"{len(hook.new)} classes"
                out.append(
                    f"| {release.version} | {row.name} | `{hook.name}` | {hook.required} | {', '.join(hook.called_at)} "
                    f"| {len(hook.classes)} | {hook.files} | {bodies} | {new} |"
                )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", default="0.5.9")
    parser.add_argument("--high", default=None)
    parser.add_argument("--algorithm", action="append", default=None, help="only this algorithm (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here too")
    args = parser.parse_args(argv)
    versions = [v for v in pinned() if Version(v) >= Version(args.low) and (args.high is None or Version(v) <= Version(args.high))]
    releases: list[Release] = []
    before: dict[tuple[str, str], set[str]] = {}
    for version in versions:
        if not (tree_of(version) / "sglang").is_dir():
            print(f"algorithm_history: {version} is not cached at {tree_of(version)}", file=sys.stderr)
            return 2
        release = read_release(version, set(args.algorithm) if args.algorithm else None)
        for row in release.algorithms:
            for hook in row.hooks:
                key = (row.name, hook.name)
                hook.new = [c for c in hook.classes if c not in before.get(key, set())] if key in before else []
                before[key] = set(hook.classes)
        releases.append(release)
        print(f"algorithm_history: {version}: {', '.join(r.name for r in release.algorithms)}", file=sys.stderr)
    sys.stdout.write(markdown(releases))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in releases], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
