"""Every output of the CLI on every pinned release, recorded, so a refactor can prove it changed none.

    python tools/golden.py record DIR [-j N] [--only VERSION ...]   # write DIR (replaced if present)
    python tools/golden.py compare DIR_A DIR_B [--only VERSION ...] # exit 1 naming each differing output
    make golden                                                     # record into build/golden/<git short sha>

Run it with the interpreter of the checkout under test (`.venv/bin/python` after `make venv`): the
CLI is run as `<that python> -m eaglepatch`, so what is recorded is what that checkout prints.
Typical use around a refactor: record a baseline from the commit before it, outside the work tree
(`.venv/bin/python tools/golden.py record /work/golden-base`), then after each step
`.venv/bin/python tools/golden.py record build/golden/new && .venv/bin/python tools/golden.py
compare /work/golden-base build/golden/new`.  To record a commit without checking it out, put a copy
of its package first on PYTHONPATH (`git archive C | tar -x -C /tmp/c && mkdir /tmp/p && cp -r
/tmp/c/patcher /tmp/p/eaglepatch && cp -r /tmp/c/codemods /tmp/p/eaglepatch/codemods`, then
`PYTHONPATH=/tmp/p .venv/bin/python tools/golden.py record DIR`): the CLI runs that copy.

The releases are the pinned ones: tests/releases.txt (SGLang; trees under
$EAGLEPATCH_SGLANG_CACHE/trees/<v>/site-packages, default .cache/sglang) and
tests/vllm_releases.txt (vLLM; $EAGLEPATCH_VLLM_CACHE, default .cache/vllm). Nothing is
downloaded: a missing tree is an error (fetch them with the integration tier first). For each one,
DIR/<engine>-<version>/ holds, as NAME.stdout, NAME.stderr and NAME.exit:

    check-all-table, check-all-json, check-all-github, check-all-sarif   check --all --format F
    check-default                                                        check (the default model)
    diff-all                                                             diff --all
    apply-all, apply-all.files     apply --all on a fresh copy of the tree; .files lists, for every
                                   file whose bytes differ from the pinned tree, its sha256 after
    revert-all, revert-all.files   revert --all on that copy right after; .files as above (what
                                   revert did not restore)
    explain-<member>-table, explain-<member>-json   explain MEMBER for each member of the protocol
                                                    that check-all-json reports

Every command runs with EAGLEPATCH_NO_CACHE=1 (and --no-cache where it takes it), no colour,
COLUMNS=120, a journal folder of its own, and no CI variables.  An error is an output like any
other (explain on a vLLM tree, vLLM 0.9.2, a release without the default model: exit 2, recorded).
The only normalisation: the temporary folder a copy lives in is written as <tmp>.  DIR/meta.json
(the commit, the package the CLI ran, the time taken) is not compared.

Commands run in parallel, -j at a time (default: one a core).  The whole record (23 releases,
about 1430 outputs) is some 650 s of CPU: 5 to 6 minutes on 2 idle cores, 8.5 measured on 2 cores
shared with other work.  `--only VERSION` records (or compares) just that release, for a quick look.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = "120"
TMP = "<tmp>"
META = "meta.json"
ENGINES = {  # engine -> (release list, cache variable, default cache folder)
    "sglang": (ROOT / "tests" / "releases.txt", "EAGLEPATCH_SGLANG_CACHE", ROOT / ".cache" / "sglang"),
    "vllm": (ROOT / "tests" / "vllm_releases.txt", "EAGLEPATCH_VLLM_CACHE", ROOT / ".cache" / "vllm"),
}
CHECK_FORMATS = ("table", "json", "github", "sarif")
# Set by CI runners or a user's shell; any of them could change what the CLI prints.
UNSET = (
    "FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLORTERM", "EAGLEPATCH_CACHE_DIR",
    "EAGLEPATCH_DEBUG", "EAGLEPATCH_STATE_DIR", "XDG_STATE_HOME", "GITHUB_ACTIONS", "CI", "EAGLEPATCH_LOCK_TIMEOUT",
)


def pinned(engine: str) -> list[str]:
    listing = ENGINES[engine][0]
    lines = (line.split("#", 1)[0].strip() for line in listing.read_text().splitlines())
    return [line for line in lines if line]


def tree(engine: str, version: str) -> Path:
    _, variable, default = ENGINES[engine]
    return Path(os.environ.get(variable) or default) / "trees" / version / "site-packages"


def environment(state: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in UNSET}
    env.update(COLUMNS=COLUMNS, LINES="50", NO_COLOR="1", TERM="dumb", EAGLEPATCH_NO_CACHE="1", EAGLEPATCH_STATE_DIR=state)
    return env


def run(args: list[str], tmp: str) -> tuple[bytes, bytes, int]:
    """One CLI run (`args` after `eaglepatch`), its output with the temporary folder `tmp` as <tmp>."""
    with tempfile.TemporaryDirectory(prefix="golden-state-") as state:
        done = subprocess.run([sys.executable, "-m", "eaglepatch", *args], capture_output=True, env=environment(state), check=False)
    return normalise(done.stdout, tmp), normalise(done.stderr, tmp), done.returncode


def normalise(data: bytes, tmp: str) -> bytes:
    if not tmp:
        return data
    for spelling in {tmp, os.path.realpath(tmp)}:
        data = data.replace(spelling.encode(), TMP.encode())
    return data


def save(folder: Path, name: str, result: tuple[bytes, bytes, int]) -> None:
    stdout, stderr, code = result
    (folder / f"{name}.stdout").write_bytes(stdout)
    (folder / f"{name}.stderr").write_bytes(stderr)
    (folder / f"{name}.exit").write_text(f"{code}\n")


def digests(top: Path) -> dict[str, str]:
    return {str(path.relative_to(top)): hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(top.rglob("*")) if path.is_file()}


def changed(original: dict[str, str], now: dict[str, str]) -> str:
    lines = [f"{now.get(name, 'removed')}  {name}" for name in sorted(original.keys() | now.keys()) if original.get(name) != now.get(name)]
    return "".join(line + "\n" for line in lines)


# --------------------------------------------------------------------------- the jobs of one release


def job_check(folder: Path, site: Path, fmt: str) -> None:
    save(folder, f"check-all-{fmt}", run(["check", "--all", "--no-cache", "--format", fmt, str(site)], ""))


def job_check_default(folder: Path, site: Path) -> None:
    save(folder, "check-default", run(["check", "--no-cache", str(site)], ""))


def job_diff(folder: Path, site: Path) -> None:
    save(folder, "diff-all", run(["diff", "--all", str(site)], ""))


def job_apply_revert(folder: Path, site: Path) -> None:
    original = digests(site)
    with tempfile.TemporaryDirectory(prefix="golden-tree-") as tmp:
        copy = Path(tmp) / "site-packages"
        shutil.copytree(site, copy, symlinks=True)
        save(folder, "apply-all", run(["apply", "--all", str(copy)], tmp))
        (folder / "apply-all.files").write_text(changed(original, digests(copy)))
        save(folder, "revert-all", run(["revert", "--all", str(copy)], tmp))
        (folder / "revert-all.files").write_text(changed(original, digests(copy)))


def job_explain(folder: Path, site: Path, member: str) -> None:
    for fmt in ("table", "json"):
        save(folder, f"explain-{member}-{fmt}", run(["explain", member, "--format", fmt, str(site)], ""))


def members(folder: Path) -> list[str]:
    """The protocol's members, as check-all-json reported them (none when that check failed: its
    output is recorded, there is nothing to explain)."""
    try:
        report = json.loads((folder / "check-all-json.stdout").read_bytes())
        names = [entry["name"] for entry in report["protocol"]]
    except (ValueError, KeyError, TypeError):
        names = []
    (folder / "explain.members").write_text("".join(f"{name}\n" for name in names))
    return names


def jobs(folder: Path, site: Path) -> list[tuple]:
    """Every job of one release but check-all-json, which ran before (it names the members)."""
    return [
        (job_apply_revert, folder, site),  # the longest first: less idle at the end
        (job_diff, folder, site),
        *((job_check, folder, site, fmt) for fmt in CHECK_FORMATS if fmt != "json"),
        (job_check_default, folder, site),
        *((job_explain, folder, site, member) for member in members(folder)),
    ]


def record(out: Path, workers: int, only: list[str]) -> int:
    releases = [(engine, version) for engine in ENGINES for version in pinned(engine) if not only or version in only]
    missing = [str(tree(engine, version)) for engine, version in releases if not tree(engine, version).is_dir()]
    if missing:
        print("golden: no tree for these pinned releases (run the integration tier once to fetch them):", *missing, sep="\n  ", file=sys.stderr)
        return 2
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    start = time.monotonic()
    folders = {(engine, version): out / f"{engine}-{version}" for engine, version in releases}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for folder in folders.values():
            folder.mkdir()
        first = [pool.submit(job_check, folder, tree(*release), "json") for release, folder in folders.items()]
        for future in first:
            future.result()
        todo = [job for release, folder in folders.items() for job in jobs(folder, tree(*release))]
        todo.sort(key=lambda job: job[0] not in (job_apply_revert, job_diff))
        for future in [pool.submit(job[0], *job[1:]) for job in todo]:
            future.result()
    seconds = round(time.monotonic() - start, 1)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True, check=False).stdout.strip())
    package = subprocess.run([sys.executable, "-c", "import eaglepatch; print(eaglepatch.__file__)"], capture_output=True, text=True, check=False)
    meta = {"commit": commit, "dirty": dirty, "package": package.stdout.strip(), "releases": [f"{e}-{v}" for e, v in releases], "seconds": seconds, "workers": workers}
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    print(f"golden: {len(releases)} releases recorded in {out} in {seconds}s ({workers} at a time)")
    return 0


def files(top: Path, only: list[str]) -> dict[str, Path]:
    found = {str(path.relative_to(top)): path for path in top.rglob("*") if path.is_file() and path.relative_to(top) != Path(META)}
    return {name: path for name, path in found.items() if not only or name.split("/", 1)[0].split("-", 1)[-1] in only}


def compare(a: Path, b: Path, only: list[str]) -> int:
    for top in (a, b):
        if not top.is_dir():
            print(f"golden: {top} is not a folder", file=sys.stderr)
            return 2
    left, right = files(a, only), files(b, only)
    differing = [
        f"{name}: {'only in ' + str(a) if name not in right else 'only in ' + str(b) if name not in left else 'differs'}"
        for name in sorted(left.keys() | right.keys())
        if name not in left or name not in right or left[name].read_bytes() != right[name].read_bytes()
    ]
    for line in differing:
        print(line)
    releases = len({name.split("/", 1)[0] for name in left.keys() | right.keys()})
    if differing:
        print(f"golden: {len(differing)} output(s) differ between {a} and {b}", file=sys.stderr)
        return 1
    print(f"golden: byte-identical: {len(left)} outputs of {releases} releases")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record every output into DIR")
    rec.add_argument("dir", type=Path)
    rec.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    rec.add_argument("--only", action="append", default=[], metavar="VERSION", help="just this release (repeatable)")
    cmp = commands.add_parser("compare", help="exit 1 naming each output that differs")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    cmp.add_argument("--only", action="append", default=[], metavar="VERSION", help="just this release (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args.dir, max(1, args.jobs), args.only)
    return compare(args.a, args.b, args.only)


if __name__ == "__main__":
    sys.exit(main())
