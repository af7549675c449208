"""Benchmark eaglepatch honestly: paired, interleaved runs against floors, on the oldest and newest release.

Every command runs in a fresh subprocess (start-up and imports count, as for a user), with its
output sent to a file.  Commands that are compared run *interleaved*, A B A B ..., so a burst of
load from another process hits both sides of a pair alike; each pair gives one ratio A/B, and the
tables show the min and median of those ratios, for wall-clock time and for CPU time (user + system
of the child, from wait4).  Peak RSS is the child's ru_maxrss.  No absolute-time goal is checked;
the issue's "done when" lines are printed beside the measured figures.

Comparisons, on the oldest (0.5.9) and newest (0.5.23) pinned release (`tests/releases.txt`, fetched
once into .cache/ by tests/sglang_releases.py):

* `check` (one model) cold -- an empty cache folder -- against its *floor*: a bare interpreter that
  reads the files that `check` decodes and runs CPython's `ast.parse` on each;
* `check` warm (the answer is in the cache) against `python -c pass`;
* `check --all` cold against `ast.parse` of every .py file below srt, and against `libcst.parse_module`
  of every file (the naive tool); `check --all` warm against `python -c pass`;
* `--help` and `--version` against `python -c pass`;
* `preflight` of the seed's launch (fixtures/checkpoints/) against `check --model kimi_k25` without
  the cache, on the same tree (preflight reads the target class's verdict, then the launch's rules);
* on the newest pinned vLLM release (`tests/vllm_releases.txt`), `preflight` of a `vllm serve` launch
  (the bundled Llama-3.1-8B-shaped pair) against `check --model llama` without the cache;
* the scaling of `check --all` (cold) over 1x, 2x, 4x and 8x copies of models/ on the newest release:
  time per size, the paired slope (seconds per added copy from 4x to 8x over that from 2x to 4x:
  1.0 is linear) and peak RSS.

Files are in the page cache for every run (each command reads them over and over): the figures are
warm-disk figures, as in pre-commit and CI re-runs.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version as dist_version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
import sglang_releases  # noqa: E402
import vllm_releases  # noqa: E402

OLDEST, NEWEST = "0.5.9", "0.5.23"

# Each runs in its own interpreter, so its imports count as eaglepatch's do.
PARSE_ALL = """\
import pathlib, sys
mode = sys.argv[2]
if mode == "libcst":
    import libcst
    parse, errors = libcst.parse_module, (libcst.ParserSyntaxError,)
else:
    import ast
    parse, errors = ast.parse, (SyntaxError, ValueError)
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    try:
        parse(path.read_bytes())
    except errors:
        pass
"""
FLOOR = """\
import ast, sys
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(path, "rb") as handle:
        ast.parse(handle.read())
"""


class Run:
    __slots__ = ("wall", "cpu", "rss_mib", "code")

    def __init__(self, wall: float, cpu: float, rss_mib: float, code: int):
        self.wall, self.cpu, self.rss_mib, self.code = wall, cpu, rss_mib, code


def run_once(cmd: list[str], ok=(0,), env: dict | None = None) -> Run:
    """One run: wall time, CPU time and peak RSS of the child alone (wait4)."""
    with open(os.devnull, "wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.PIPE,
                                env={**os.environ, **(env or {})})
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stderr.close()
    if proc.returncode not in ok:
        sys.exit(f"bench: `{' '.join(cmd)}` exited {proc.returncode}:\n{stderr.decode(errors='replace').strip()[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


class Command:
    def __init__(self, label: str, cmd: list[str], ok=(0,), env=None, before=None):
        self.label, self.cmd, self.ok, self.env, self.before = label, cmd, ok, env or {}, before
        self.runs: list[Run] = []

    def __call__(self) -> Run:
        env = dict(self.env)
        if self.before is not None:
            env.update(self.before() or {})
        run = run_once(self.cmd, self.ok, env)
        self.runs.append(run)
        return run

    def median(self, what: str = "wall") -> float:
        return statistics.median(getattr(r, what) for r in self.runs)

    def peak_rss(self) -> float:
        return max(r.rss_mib for r in self.runs)


def interleave(commands: list[Command], rounds: int, warm_up: bool = True) -> None:
    """A B C A B C ...: one untimed round first (it fills the page cache and the warm cache)."""
    if warm_up:
        for command in commands:
            run_once(command.cmd, command.ok, {**command.env, **((command.before or (lambda: {}))() or {})})
    for round_ in range(rounds):
        for command in commands:
            command()
        print(f"    round {round_ + 1}/{rounds}: " + ", ".join(f"{c.label} {c.runs[-1].wall:.3f}s" for c in commands),
              file=sys.stderr)


def ratios(a: Command, b: Command, what: str = "wall") -> list[float]:
    return [getattr(x, what) / getattr(y, what) for x, y in zip(a.runs, b.runs)]


def pair_row(a: Command, b: Command) -> dict:
    wall, cpu = ratios(a, b), ratios(a, b, "cpu")
    return {
        "a": a.label, "b": b.label, "pairs": len(wall),
        "a_median_s": a.median(), "b_median_s": b.median(),
        "a_cpu_median_s": a.median("cpu"), "b_cpu_median_s": b.median("cpu"),
        "ratio_min": min(wall), "ratio_median": statistics.median(wall),
        "cpu_ratio_min": min(cpu), "cpu_ratio_median": statistics.median(cpu),
        "a_peak_rss_mib": a.peak_rss(), "b_peak_rss_mib": b.peak_rss(),
    }


def print_pairs(title: str, rows: list[dict]) -> None:
    print(f"\n### {title}\n")
    print("| A | B | pairs | A median wall (s) | B median wall (s) | A/B wall min | A/B wall median "
          "| A/B CPU min | A/B CPU median | A peak RSS (MiB) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['a']} | {r['b']} | {r['pairs']} | {r['a_median_s']:.3f} | {r['b_median_s']:.3f} "
              f"| {r['ratio_min']:.3f} | {r['ratio_median']:.3f} | {r['cpu_ratio_min']:.3f} "
              f"| {r['cpu_ratio_median']:.3f} | {r['a_peak_rss_mib']:.0f} |")


def decoded_files(srt: Path, model: str) -> list[str]:
    """The files `check --model MODEL` decodes (read into its SourceCache), found by running it here."""
    from eaglepatch.run import analyze
    from eaglepatch.selection import Selection

    analysis = analyze(Selection(srt, [model]))
    return sorted(str(path) for path in analysis.cache._files)


def fresh_cache_dir(root: Path):
    """A `before` hook: every run gets an empty cache folder (a cold run: miss, then store)."""
    counter = iter(range(10**9))

    def before() -> dict:
        folder = root / f"cold-{next(counter)}"
        return {"EAGLEPATCH_CACHE_DIR": str(folder)}

    return before


def release_block(version: str, args, cli: list[str], bare: Command, scratch: Path) -> dict:
    site = sglang_releases.site_packages(version)
    srt = site / "sglang" / "srt"
    tree = str(srt)
    print(f"bench: sglang {version} at {srt}", file=sys.stderr)
    files = sorted(srt.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    needed = decoded_files(srt, args.model)
    listing = scratch / f"floor-{version}.txt"
    listing.write_text("\n".join(needed) + "\n", encoding="utf-8")
    warm_dir = {"EAGLEPATCH_CACHE_DIR": str(scratch / f"warm-{version}")}
    cold = fresh_cache_dir(scratch)
    one = [*cli, "check", "--model", args.model, tree]
    every = [*cli, "check", "--all", tree]

    check_cold = Command("check cold", one, (0, 1), before=cold)
    floor = Command(f"floor (python + read + ast.parse of {len(needed)} decoded files)", [sys.executable, "-c", FLOOR, str(listing)])
    check_warm = Command("check warm", one, (0, 1), env=warm_dir)
    bare_here = Command("python -c pass", bare.cmd)
    print("  check: cold vs floor, warm vs bare python", file=sys.stderr)
    interleave([check_cold, floor, check_warm, bare_here], args.runs)

    all_cold = Command("check --all cold", every, (0, 1), before=cold)
    ast_all = Command(f"ast.parse of all {len(files)} files", [sys.executable, "-c", PARSE_ALL, tree, "ast"])
    all_warm = Command("check --all warm", every, (0, 1), env=warm_dir)
    bare_all = Command("python -c pass", bare.cmd)
    print("  check --all: cold vs ast.parse of every file, warm vs bare python", file=sys.stderr)
    interleave([all_cold, ast_all, all_warm, bare_all], args.runs)

    # the same tree as pip leaves it: every module compiled by this Python (`__pycache__`), which the
    # gate takes as the proof a file compiles instead of compiling it again
    installed = scratch / f"installed-{version}" / "sglang" / "srt"
    if not installed.is_dir():
        shutil.copytree(srt, installed, ignore=shutil.ignore_patterns("__pycache__"))
        compileall.compile_dir(installed, quiet=1)
    all_installed = Command("check --all cold, installed", [*cli, "check", "--all", str(installed)], (0, 1), before=cold)
    ast_installed = Command(f"ast.parse of all {len(files)} files", [sys.executable, "-c", PARSE_ALL, str(installed), "ast"])
    print("  check --all on the tree with its bytecode (as installed) vs ast.parse of every file", file=sys.stderr)
    interleave([all_installed, ast_installed], args.runs)

    checkpoints = REPO / "fixtures" / "checkpoints"
    launch = ["python", "-m", "sglang.launch_server", "--model-path", str(checkpoints / "kimi-k2.5"), "--speculative-algorithm",
              "EAGLE3", "--speculative-draft-model-path", str(checkpoints / "kimi-k2.5-eagle3"), "--tp", "8"]
    flight = Command("preflight (the seed's launch)", [*cli, "preflight", tree, "--", *launch], (0, 1))
    kimi = Command("check --model kimi_k25 cold", [*cli, "check", "--no-cache", "--model", "kimi_k25", tree], (0, 1))
    print("  preflight vs check --model kimi_k25 (no cache), same tree", file=sys.stderr)
    interleave([flight, kimi], args.runs)

    rows = [pair_row(check_cold, floor), pair_row(check_warm, bare_here), pair_row(all_cold, ast_all),
            pair_row(all_installed, ast_installed), pair_row(all_warm, bare_all), pair_row(flight, kimi)]
    if args.libcst_runs:
        all_cold2 = Command("check --all cold", every, (0, 1), before=cold)
        libcst_all = Command(f"libcst.parse_module of all {len(files)} files", [sys.executable, "-c", PARSE_ALL, tree, "libcst"])
        print("  check --all cold vs libcst's full parse (slow)", file=sys.stderr)
        interleave([all_cold2, libcst_all], args.libcst_runs, warm_up=False)
        rows.append(pair_row(all_cold2, libcst_all))
    print_pairs(f"sglang {version}: {len(files)} .py files, {lines:,} lines; model {args.model}", rows)
    return {"version": version, "files": len(files), "lines": lines, "decoded_by_check": len(needed), "pairs": rows,
            "check_warm_median_s": check_warm.median()}


def vllm_block(args, cli: list[str]) -> dict:
    """vLLM's preflight of a `vllm serve` launch (the bundled Llama-3.1-8B-shaped pair) against `check
    --model llama` without the cache on the same tree: what the launch's rules cost beyond the target's
    verdict, on the newest pinned vLLM release."""
    version = vllm_releases.pinned_releases()[-1]
    site = str(vllm_releases.site_packages(version))
    print(f"bench: vllm {version} at {site}", file=sys.stderr)
    checkpoints = REPO / "fixtures" / "checkpoints"
    spec = json.dumps({"method": "eagle3", "model": str(checkpoints / "llama-3.1-8b-eagle3"), "num_speculative_tokens": 3})
    launch = ["vllm", "serve", str(checkpoints / "llama-3.1-8b"), "--speculative-config", spec, "--max-model-len", "8192"]
    flight = Command("preflight (vllm serve, EAGLE-3)", [*cli, "preflight", site, "--", *launch], (0, 1))
    llama = Command("check --model llama cold", [*cli, "check", "--no-cache", "--model", "llama", site], (0, 1))
    print("  vLLM preflight vs check --model llama (no cache), same tree", file=sys.stderr)
    interleave([flight, llama], args.runs)
    rows = [pair_row(flight, llama)]
    print_pairs(f"vllm {version}", rows)
    return {"version": version, "pairs": rows}


def copy_models(srt: Path, into: Path, copies: int) -> Path:
    """A copy of sglang/srt whose models/ holds `copies` copies of every model module (the original
    and `name_xK` beside it)."""
    target = into / f"x{copies}" / "sglang" / "srt"
    shutil.copytree(srt, target, ignore=shutil.ignore_patterns("__pycache__"))
    models = target / "models"
    for k in range(1, copies):
        for path in (srt / "models").iterdir():
            if path.name.startswith("__") or path.name == "__pycache__":
                continue
            if path.is_dir():
                shutil.copytree(path, models / f"{path.name}_x{k}", ignore=shutil.ignore_patterns("__pycache__"))
            elif path.suffix == ".py":
                shutil.copy2(path, models / f"{path.stem}_x{k}.py")
    return target


def scaling(args, cli: list[str], scratch: Path) -> dict:
    version = NEWEST if NEWEST in args.releases else args.releases[-1]
    srt = sglang_releases.site_packages(version) / "sglang" / "srt"
    sizes = [1, 2, 4, 8]
    commands = []
    for copies in sizes:
        tree = copy_models(srt, scratch / "scaling", copies)
        count = sum(1 for _ in (tree / "models").rglob("*.py"))
        commands.append(Command(f"{copies}x ({count} model files)", [*cli, "check", "--all", "--no-cache", str(tree)], (0, 1)))
    print(f"  scaling of check --all over copies of models/ (sglang {version})", file=sys.stderr)
    interleave(commands, args.scaling_runs)
    by = dict(zip(sizes, commands))
    slopes = [((e.wall - d.wall) / 4) / ((d.wall - b.wall) / 2)
              for b, d, e in zip(by[2].runs, by[4].runs, by[8].runs) if d.wall > b.wall]
    cpu_slopes = [((e.cpu - d.cpu) / 4) / ((d.cpu - b.cpu) / 2)
                  for b, d, e in zip(by[2].runs, by[4].runs, by[8].runs) if d.cpu > b.cpu]
    print(f"\n### Scaling of `check --all` (cold, --no-cache) over copies of models/, sglang {version}\n")
    print("| models/ | median wall (s) | median CPU (s) | wall / 1x (paired median) | peak RSS (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for _copies, command in by.items():
        rel = statistics.median(ratios(command, by[1]))
        print(f"| {command.label} | {command.median():.3f} | {command.median('cpu'):.3f} | {rel:.2f} | {command.peak_rss():.0f} |")
    result = {
        "version": version,
        "sizes": {c: {"label": cmd.label, "wall_median_s": cmd.median(), "cpu_median_s": cmd.median("cpu"),
                      "peak_rss_mib": cmd.peak_rss()} for c, cmd in by.items()},
        "slope_4_8_over_2_4": {"wall_min": min(slopes, default=float("nan")),
                               "wall_median": statistics.median(slopes) if slopes else float("nan"),
                               "cpu_median": statistics.median(cpu_slopes) if cpu_slopes else float("nan")},
    }
    s = result["slope_4_8_over_2_4"]
    print(f"\nPaired slope (s per copy from 4x to 8x) / (s per copy from 2x to 4x): wall min {s['wall_min']:.3f}, "
          f"median {s['wall_median']:.3f}; CPU median {s['cpu_median']:.3f} (1.0 = linear)")
    return result


def done_when(start: list[dict], releases: list[dict], scale: dict | None) -> None:
    print("\n### The issue's done-when lines, against these figures\n")
    print("| line | measured | |")
    print("| --- | --- | --- |")

    def row(line: str, measured: str, ok: bool) -> None:
        print(f"| {line} | {measured} | {'met' if ok else 'NOT met'} |")

    for rel in releases:
        pairs = {p["a"] + "|" + p["b"].split(" ")[0]: p for p in rel["pairs"]}
        warm = pairs["check warm|python"]
        row(f"warm `check` <= 0.15 s and <= 10x bare python ({rel['version']})",
            f"{warm['a_median_s']:.3f} s median; {warm['ratio_median']:.1f}x bare (min {warm['ratio_min']:.1f}x)",
            warm["a_median_s"] <= 0.15 and warm["ratio_median"] <= 10)
        cold = pairs["check cold|floor"]
        row(f"cold one-model `check` <= 1.5x its floor (issue 34; {rel['version']})",
            f"{cold['ratio_median']:.2f}x median (min {cold['ratio_min']:.2f}x; CPU {cold['cpu_ratio_median']:.2f}x)",
            cold["ratio_median"] <= 1.5)
        ast_pair = pairs["check --all cold|ast.parse"]
        row(f"`--all` cold <= 0.5x the CPU time of ast.parse of every file (issue 34; {rel['version']})",
            f"{ast_pair['cpu_ratio_median']:.2f}x CPU (wall {ast_pair['ratio_median']:.2f}x, min {ast_pair['ratio_min']:.2f}x)",
            ast_pair["cpu_ratio_median"] <= 0.5)
        installed_pair = pairs.get("check --all cold, installed|ast.parse")
        if installed_pair is not None:
            row(f"`--all` cold on the installed tree (bytecode present) <= 0.5x the CPU of ast.parse (issue 34; {rel['version']})",
                f"{installed_pair['cpu_ratio_median']:.2f}x CPU (wall {installed_pair['ratio_median']:.2f}x)",
                installed_pair["cpu_ratio_median"] <= 0.5)
        flight = pairs["preflight (the seed's launch)|check"]
        row(f"`preflight` of the seed's launch < 1 s (issue 34; {rel['version']})", f"{flight['a_median_s']:.2f} s median",
            flight["a_median_s"] < 1)
        lib = pairs.get("check --all cold|libcst.parse_module")
        if lib is not None:
            speedup = 1 / lib["ratio_median"]
            row(f"`--all` cold >= 20x faster than libcst's full parse ({rel['version']})",
                f"{speedup:.2f}x faster (median of {lib['pairs']} pairs; best {1 / lib['ratio_min']:.2f}x)", speedup >= 20)
    for pair in start:
        if pair["a"] == "eaglepatch --help":
            row("`--help` <= 3x bare python", f"{pair['ratio_median']:.2f}x median (min {pair['ratio_min']:.2f}x)",
                pair["ratio_median"] <= 3)
    if scale is not None:
        s = scale["slope_4_8_over_2_4"]
        rss = scale["sizes"][8]["peak_rss_mib"]
        row("`--all` linear: paired slope <= 1.05 from 2x to 8x", f"{s['wall_median']:.3f} median (CPU {s['cpu_median']:.3f})",
            s["wall_median"] <= 1.05)
        row("peak RSS at 8x <= 300 MiB", f"{rss:.0f} MiB", rss <= 300)


def compile_eaglepatch() -> list[str]:
    """Write the bytecode of eaglepatch's modules, as `pip install` does: an editable checkout only
    gets it on a first import, and never where PYTHONDONTWRITEBYTECODE is set; without it every run
    would compile the modules again, which no installed eaglepatch does."""
    folders: list[str] = []
    for package in ("eaglepatch", "eaglepatch.codemods"):  # an editable install maps each to its folder
        spec = importlib.util.find_spec(package)
        folders += [f for f in (spec.submodule_search_locations or []) if f not in folders] if spec else []
    for folder in folders:
        compileall.compile_dir(folder, quiet=1)
    return folders


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", nargs="+", default=[OLDEST, NEWEST], help="sglang releases (default: 0.5.9 0.5.23)")
    parser.add_argument("--model", default="kimi_k25", help="model for the one-model check (default: kimi_k25)")
    parser.add_argument("--runs", type=int, default=7, help="pairs per comparison (default: 7)")
    parser.add_argument("--startup-runs", type=int, default=21, help="pairs for --help/--version (default: 21)")
    parser.add_argument("--libcst-runs", type=int, default=2, help="pairs against libcst's full parse, 0 to skip (default: 2)")
    parser.add_argument("--scaling-runs", type=int, default=3, help="rounds of the 1x/2x/4x/8x scaling, 0 to skip (default: 3)")
    parser.add_argument("--only", choices=["startup", "releases", "scaling", "vllm"], action="append", help="run only these parts")
    parser.add_argument("--json", type=Path, default=REPO / "build" / "bench.json", help="where to write the results")
    args = parser.parse_args()
    if min(args.runs, args.startup_runs) < 1 or min(args.libcst_runs, args.scaling_runs) < 0:
        parser.error("--runs and --startup-runs must be at least 1; the others at least 0")
    parts = set(args.only or ["startup", "releases", "scaling", "vllm"])

    cli = [sys.executable, "-m", "eaglepatch"]
    compiled = compile_eaglepatch()
    machine = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libcst": dist_version("libcst"),
        "typer": dist_version("typer"),
        "eaglepatch": dist_version("eaglepatch"),
        "loadavg_before": os.getloadavg()[0],
        "bytecode_written_for": compiled,
    }
    bare = Command("python -c pass", [sys.executable, "-c", "pass"])
    results: dict = {"machine": machine, "startup": [], "releases": [], "scaling": None, "vllm": None}
    with tempfile.TemporaryDirectory(prefix="eaglepatch-bench-") as tmp:
        scratch = Path(tmp)
        if "startup" in parts:
            print("bench: start-up", file=sys.stderr)
            help_ = Command("eaglepatch --help", [*cli, "--help"])
            version = Command("eaglepatch --version", [*cli, "--version"])
            bare_a, bare_b = Command("python -c pass", bare.cmd), Command("python -c pass", bare.cmd)
            interleave([help_, bare_a, version, bare_b], args.startup_runs)
            results["startup"] = [pair_row(help_, bare_a), pair_row(version, bare_b)]
        if "releases" in parts:
            for release in args.releases:
                results["releases"].append(release_block(release, args, cli, bare, scratch))
        if "scaling" in parts and args.scaling_runs:
            results["scaling"] = scaling(args, cli, scratch)
        if "vllm" in parts:
            results["vllm"] = vllm_block(args, cli)

    machine["loadavg_after"] = os.getloadavg()[0]
    print(f"\nMachine: {machine['nproc']} CPUs, Python {machine['python']} ({machine['platform']}), "
          f"libcst {machine['libcst']}, typer {machine['typer']}, eaglepatch {machine['eaglepatch']}; "
          f"1-min load average {machine['loadavg_before']:.2f} before, {machine['loadavg_after']:.2f} after")
    if results["startup"]:
        print_pairs("Start-up", results["startup"])
    if results["releases"] or results["startup"]:
        done_when(results["startup"], results["releases"], results["scaling"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
