"""One-off: the two source folders become the one installed package `eaglepatch` (issue "Craft").

patcher/ is the package `eaglepatch`, codemods/ is `eaglepatch.codemods`: inside them imports are
relative; tests, bench and tools import `eaglepatch...`.  Idempotent.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def inside_patcher(text: str) -> str:
    text = re.sub(r"^(\s*)from patcher import ", r"\1from . import ", text, flags=re.M)
    text = re.sub(r"^(\s*)from patcher\.(\w+) import ", r"\1from .\2 import ", text, flags=re.M)
    text = re.sub(r"^(\s*)from codemods\.(\w+) import ", r"\1from .codemods.\2 import ", text, flags=re.M)
    text = re.sub(r"^(\s*)from codemods import ", r"\1from .codemods import ", text, flags=re.M)
    return text


def inside_codemods(text: str) -> str:
    text = re.sub(r"^(\s*)from codemods\.(\w+) import ", r"\1from .\2 import ", text, flags=re.M)
    text = re.sub(r"^(\s*)from patcher\.(\w+) import ", r"\1from ..\2 import ", text, flags=re.M)
    text = re.sub(r"^(\s*)from patcher import ", r"\1from .. import ", text, flags=re.M)
    return text


def outside(text: str) -> str:
    text = re.sub(r"\bfrom codemods\.(\w+) import ", r"from eaglepatch.codemods.\1 import ", text)
    text = re.sub(r"\bfrom codemods import ", r"from eaglepatch.codemods import ", text)
    text = re.sub(r"\bfrom patcher\.(\w+) import ", r"from eaglepatch.\1 import ", text)
    text = re.sub(r"\bfrom patcher import ", r"from eaglepatch import ", text)
    text = re.sub(r"\bimport patcher\.(\w+)", r"import eaglepatch.\1", text)
    text = re.sub(r"\bpatcher\.(cli|pipeline|edits|write|preview|report|gitrepo|forms|launch|cache|synthesize|resolve|source|verify|plan|protocol|imports|records|startup)\b(?!\.py)", r"eaglepatch.\1", text)
    text = re.sub(r"""(["'])-m\1, \1patcher\1""", r"\1-m\1, \1eaglepatch\1", text)
    text = text.replace('run_module("patcher"', 'run_module("eaglepatch"').replace("python -m patcher", "python -m eaglepatch")
    text = text.replace("-m patcher", "-m eaglepatch")
    return text


def main(paths: list[str]) -> None:
    targets = [Path(p) for p in paths] or [*ROOT.glob("patcher/*.py"), *ROOT.glob("codemods/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("tools/*.py")]
    for path in targets:
        path = path.resolve()
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        folder = path.parent.name
        new = inside_patcher(text) if folder == "patcher" else inside_codemods(text) if folder == "codemods" else outside(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print("rewrote", path.relative_to(ROOT))


if __name__ == "__main__":
    main(sys.argv[1:])
