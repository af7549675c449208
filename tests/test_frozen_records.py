"""Every dataclass of the package is frozen, save the working state named below with its reason.

A record one stage returns and another reads is never changed after it is made: a stage derives a new
one (`dataclasses.replace`), so no answer depends on which stage last touched a shared object (the
same-run adoption of written members once did: patcher/analyze/overlay.py replaced it).  Read with
`ast`, so a new mutable dataclass fails here until it is frozen or named, with why, below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = [*sorted((ROOT / "patcher").rglob("*.py")), *sorted((ROOT / "codemods").rglob("*.py"))]

# class name -> why it is working state, not a record (built up by its own stage, never handed on changed)
WORKING_STATE = {
    "SourceFile": "the read stage's handle on one file: its decoded text and line index, filled lazily",
    "Parsed": "a parse result with its position index, filled on first question",
    "Bodiless": "a parse of a file with bodies cut out, and the cut's bookkeeping",
    "Scope": "a scope being read: bindings are added as statements are walked",
    "FunctionScope": "a scope being read: bindings are added as statements are walked",
    "InitScope": "a scope being read: bindings are added as statements are walked",
    "Binding": "one name's bindings in a scope being read (read/bindings.py)",
    "Read": "the reads of one name, gathered as a scope is walked (read/scopes.py)",
    "_Table": "a symbol table being filled as a module is walked (read/scopes.py)",
    "Frame": "the protocol reader's stack frame while it walks a consumer",
    "Extraction": "what the protocol reader gathers over the consumers, before the Protocol record is made",
    "Block": "a guarded block of a consumer as the protocol reader walks it",
    "HookLibrary": "the run's memo of learned-hook references, filled on first need",
    "ClassText": "a class's text with lazily read outline facts (class_index.py)",
    "Assignment": "an __init__ assignment with its lazily read value (wrappers.py)",
    "_Built": "what one construction builds, gathered while it is followed (wrappers.py)",
    "_Held": "an inner model gathered over __init__s, then made into one InnerModel record",
    "SignatureForm": "how one written member will be spelled, decided step by step (forms.py)",
    "PendingSpelling": "names a spelling will import, gathered before they are committed",
    "_InnerSide": "the inner side of a delegation while its spelling is decided (forms.py)",
    "RoleBook": "the roles learned from the tree, memoised per class",
    "WorkTree": "a git work tree handle: its repository object and index state",
    "RenderedSignature": "a signature being rendered by a codemod",
}


def dataclasses_of(path: Path) -> list[tuple[str, int, bool]]:
    """(class, line of its `class`, frozen) for each `@dataclass` / `@dataclass(...)` class of the module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name != "dataclass":
                continue
            frozen = isinstance(decorator, ast.Call) and any(
                k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True for k in decorator.keywords
            )
            out.append((node.name, node.lineno, frozen))
    return out


def test_every_record_is_frozen():
    mutable = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in PACKAGE
        for name, line, frozen in dataclasses_of(path)
        if not frozen and name not in WORKING_STATE
    ]
    assert not mutable, "mutable dataclasses (freeze them, or name them in WORKING_STATE with why):\n" + "\n".join(mutable)


def test_the_working_state_named_exists_and_is_not_frozen():
    """A name left here after its class was frozen, renamed or removed would let a new class through."""
    mutable = {name for path in PACKAGE for name, _line, frozen in dataclasses_of(path) if not frozen}
    stale = sorted(set(WORKING_STATE) - mutable)
    assert not stale, f"WORKING_STATE names no mutable dataclass: {stale}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("@dataclass\nclass A:\n    x: int\n", [("A", 2, False)]),
        ("@dataclass(frozen=True)\nclass A:\n    x: int\n", [("A", 2, True)]),
        ("@dataclasses.dataclass(frozen=True, slots=True)\nclass A:\n    x: int\n", [("A", 2, True)]),
        ("@dataclass(frozen=False)\nclass A:\n    x: int\n", [("A", 2, False)]),
        ("@dataclass(eq=False)\nclass A:\n    x: int\n", [("A", 2, False)]),
        ("class A:\n    x: int\n", []),
    ],
)
def test_the_reader_tells_frozen_from_mutable(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert dataclasses_of(path) == expected
