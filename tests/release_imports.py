"""`apply --all` on one real SGLang release, then every patched module imported with stubs (tests/stub_imports.py)
before and after.  tests/test_release_range.py calls `check_patched` on the checkout its own `apply --all`
wrote; run as a script, it applies to a copy itself and prints one JSON report:

    python tests/release_imports.py VERSION WORKDIR

WORKDIR gets a copy of the release's `sglang/` (removed again at the end), and `apply --all` runs on
it through the real command line.  The files it changed, and in them the class members it added, are
read off the copy against the release (ast), not off the tool's own records.  The changed modules are
imported in a fresh interpreter with stubs for torch and every other package that is not installed,
each added member called on a stub instance whose inner model records the call
(stub_imports.forwarding); then the changed files get the release's bytes back and the same modules
are imported again, unpatched, in another fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _copy_file(source, dest) -> None:
    """The bytes and the modification time (bytecode is checked against it); fresh, writable permissions."""
    shutil.copyfile(source, dest)
    stat = os.stat(source)
    os.utime(dest, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _copy(source: Path, dest: Path, link: bool = False) -> None:
    """`source` copied to `dest` (bytes and mtimes), or with `link` each file hard-linked (its folders made
    afresh): nothing here writes into a file of the copy in place (`_restore` replaces the file), so the
    source stays as it is."""
    shutil.copytree(source, dest, copy_function=os.link if link else _copy_file)
    # the wheel's .py files only are cached; SGLang's JIT-kernel packages check at import time that
    # their `include/` and `csrc/` data folders exist
    for folder in dest.glob("**/*jit*"):
        if (folder / "__init__.py").is_file():
            (folder / "include").mkdir(exist_ok=True)
            (folder / "csrc").mkdir(exist_ok=True)


def changed_files(pristine: Path, patched: Path) -> list[str]:
    """Paths (relative to sglang/) of the .py files whose bytes differ; a file only one side has counts."""
    out = []
    for path in sorted(patched.rglob("*.py")):
        rel = path.relative_to(patched)
        before = pristine / rel
        if not before.is_file():
            out.append(rel.as_posix())
            continue
        old, new = before.stat(), path.stat()
        if (old.st_size, old.st_mtime_ns) != (new.st_size, new.st_mtime_ns) and before.read_bytes() != path.read_bytes():
            out.append(rel.as_posix())
    out += [p.relative_to(pristine).as_posix() for p in pristine.rglob("*.py") if not (patched / p.relative_to(pristine)).is_file()]
    return out


def _members(tree: ast.Module) -> dict[str, set[str]]:
    """Top-level class -> names its body binds (defs and assignments, under `if`/`try` too)."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = out.setdefault(node.name, set())
            todo = list(node.body)
            while todo:
                statement = todo.pop()
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(statement.name)
                elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
                else:
                    for field in ("body", "orelse", "finalbody", "handlers"):
                        todo += [s for s in getattr(statement, field, []) if isinstance(s, ast.AST)]
                    todo += [s for h in getattr(statement, "handlers", []) for s in h.body]
    return out


def added_members(before: bytes | ast.Module, after: bytes | ast.Module) -> dict[str, list[str]]:
    """Class -> members the patched text binds that the pristine one does not (either given as its text,
    or already parsed)."""
    old, new = (_members(t if isinstance(t, ast.Module) else ast.parse(t)) for t in (before, after))
    return {cls: sorted(names - old.get(cls, set())) for cls, names in new.items() if names - old.get(cls, set())}


def undefined_names(data: bytes | ast.Module, filename: str) -> set[str]:
    """What pyflakes calls an undefined name in `data` (its text, or its tree: pyflakes reads the tree only
    and leaves its own marks on the nodes; in-process: one interpreter for every file)."""
    from pyflakes import checker, messages

    tree = data if isinstance(data, ast.Module) else ast.parse(data, filename)
    found = checker.Checker(tree, filename=filename)
    return {m.message_args[0] for m in found.messages if isinstance(m, messages.UndefinedName)}


def _stub_check(site: Path, spec: dict, workdir: Path, label: str, code_cache: Path | None = None) -> dict:
    spec_file = workdir / f"{label}.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}  # SGLang's own CPU platform: no device probing
    shared = ["--code-cache", str(code_cache)] if code_cache is not None else []
    done = subprocess.run(
        [sys.executable, "-I", "-B", str(HERE / "stub_imports.py"), str(site), "--check", str(spec_file), *shared],
        capture_output=True, text=True, env=env, timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"stub import of {label} exited {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def check_release(version: str, workdir: Path) -> dict:
    """One copy of the release (mtimes kept), `apply --all` on it through the real command line, then
    `check_patched` on the copy."""
    sys.path.insert(0, str(HERE))
    import sglang_releases

    started = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    source = sglang_releases.site_packages(version) / "sglang"
    site = workdir / "site"
    try:
        _copy(source, site / "sglang")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        applied = subprocess.run(
            [sys.executable, "-m", "eaglepatch", "apply", str(site), "--all"],
            capture_output=True, text=True, env=env, timeout=1800, cwd=workdir,
        )
        apply_seconds = round(time.perf_counter() - started, 1)
        report = check_patched(source, site, workdir)
    finally:
        shutil.rmtree(site, ignore_errors=True)
    report["version"] = version
    report["apply"] = {"exit": applied.returncode, "stderr": applied.stderr[-3000:], "stdout_tail": applied.stdout[-1500:]}
    report["seconds"] = {"apply": apply_seconds, **report["seconds"], "total": round(time.perf_counter() - started, 1)}
    return report


def check_patched(source: Path, site: Path, workdir: Path, code_cache: Path | None = None) -> dict:
    """`site/sglang` is `source` (a release's `sglang/`) after `apply --all`: the files it changed are read
    against the release, the patched modules imported with stubs; then the changed files get the release's
    bytes back and the same modules are imported again.  The second interpreter reuses the bytecode the
    first wrote for every file apply did not touch.  `site` ends as the release has it.  `code_cache`: a
    folder both interpreters compile through (stub_imports.share_compiled_code), shared with other checks."""
    started = time.perf_counter()
    seconds = {}
    changed = changed_files(source, site / "sglang")
    spec, outside, static = {}, [], {}
    for rel in changed:
        if not rel.startswith("srt/models/"):
            outside.append(rel)
        module = "sglang." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        released, patched = (source / rel).read_bytes(), (site / "sglang" / rel).read_bytes()
        try:  # each side parsed once: the tree is compiled (the compiler's own errors too), read and checked
            patched_tree = ast.parse(patched, rel)
            compile(patched_tree, rel, "exec")
        except SyntaxError as exc:
            static[rel] = f"does not compile: {exc}"
            continue
        released_tree = ast.parse(released, rel)
        spec[module] = added_members(released_tree, patched_tree)
        # a name undefined in the patched file is new unless the release has it undefined too (only then
        # is the release's file checked)
        new_undefined = undefined_names(patched_tree, rel)
        if new_undefined:
            new_undefined -= undefined_names(released_tree, rel)
        if new_undefined:
            static[rel] = f"new undefined names: {sorted(new_undefined)}"
    after = _stub_check(site, spec, workdir, "patched", code_cache) if spec else {}
    seconds["import after"] = round(time.perf_counter() - started, 1)
    for rel in changed:  # the release's own bytes and mtime: the bytecode of the patched text is stale
        (site / "sglang" / rel).unlink(missing_ok=True)  # a new file, not the old one written over: it may be a hard link
        _copy_file(source / rel, site / "sglang" / rel)
    assert not changed_files(source, site / "sglang")
    before = _stub_check(site, {m: {} for m in spec}, workdir, "pristine", code_cache) if spec else {}
    seconds["import before"] = round(time.perf_counter() - started - seconds["import after"], 1)
    return {"changed": changed, "outside_models": outside, "static": static, "added": spec,
            "before": before, "after": after, "seconds": seconds}


if __name__ == "__main__":
    json.dump(check_release(sys.argv[1], Path(sys.argv[2])), sys.stdout)
