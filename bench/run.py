"""Benchmark eaglepatch against the goals the project states, on one real SGLang release.

Measured in one run, on the same tree (the release's ``sglang/srt``, fetched once by
``tests/sglang_releases.py`` into ``.cache/``), each command in a fresh subprocess so
interpreter start-up and imports count, as they do for a user:

1. ``eaglepatch check TREE`` (one model) and ``eaglepatch check --all TREE``;
2. the baseline: ``libcst.parse_module`` on every ``.py`` file of ``srt`` -- what a tool
   that simply parses the whole tree with libcst would pay;
3. ``eaglepatch --help`` against ``python -c pass`` with the same interpreter.

Goals: ``check --all`` at least 5x faster than the baseline, ``check`` (one model) under
1 s, ``--help`` under 0.3 s above a bare interpreter start.

Each figure is the median wall-clock time (``time.perf_counter`` around
``subprocess.run``) of several runs, after one untimed warm-up run (the baseline has
none: it reads the files the ``check`` runs have already brought into the page cache).
The median, unlike the mean, is not dragged up by the odd run that loses the CPU to
something else. A missed goal is reported, not an error: the exit status is non-zero
only when a command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import version as dist_version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import sglang_releases  # noqa: E402

# Runs in its own interpreter, so libcst's import cost counts as it does for eaglepatch.
PARSE_ALL = """\
import json, pathlib, sys
import libcst
files = lines = failed = 0
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    data = path.read_bytes()
    files += 1
    lines += data.count(b"\\n")
    try:
        libcst.parse_module(data)
    except libcst.ParserSyntaxError:
        failed += 1
print(json.dumps({"files": files, "lines": lines, "failed": failed}))
"""


def timed(cmd: list[str], ok=(0,)) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds one run of `cmd` took; abort the benchmark if it exits outside `ok`."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in ok:
        sys.exit(f"bench: `{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr.strip()}")
    return seconds, proc


def median_of(label: str, cmd: list[str], runs: int, ok=(0,), warm_up=True) -> tuple[dict, str]:
    """Median and spread of `runs` timed runs of `cmd`, and the last run's stdout."""
    if warm_up:
        timed(cmd, ok)
    times, out = [], ""
    for _ in range(runs):
        seconds, proc = timed(cmd, ok)
        times.append(seconds)
        out = proc.stdout
    print(f"  {label:<46} median {statistics.median(times):7.3f} s of {runs}", file=sys.stderr)
    return {"label": label, "median": statistics.median(times), "min": min(times), "max": max(times), "runs": times}, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", help="sglang release to measure (default: the latest on the index)")
    parser.add_argument("--model", default="kimi_k25", help="model for the one-model check (default: kimi_k25)")
    parser.add_argument("--runs", type=int, default=5, help="runs per check command (default: 5)")
    parser.add_argument("--baseline-runs", type=int, default=3, help="runs of the full libcst parse (default: 3)")
    parser.add_argument("--help-runs", type=int, default=15, help="runs of --help and of python -c pass (default: 15)")
    parser.add_argument("--json", type=Path, default=REPO / "build" / "bench.json", help="where to write the results")
    args = parser.parse_args()
    if min(args.runs, args.baseline_runs, args.help_runs) < 1:
        parser.error("every run count must be at least 1")

    version = args.version or sglang_releases.latest_release()
    site = sglang_releases.site_packages(version)
    srt = site / "sglang" / "srt"
    cli = [sys.executable, "-m", "patcher"]
    machine = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libcst": dist_version("libcst"),
        "eaglepatch": dist_version("eaglepatch"),
        "sglang": version,
        "tree": str(srt),
        "loadavg_before": os.getloadavg()[0],
    }
    print(f"bench: sglang {version} at {srt}", file=sys.stderr)

    tree = str(srt)
    check_one, _ = median_of(f"eaglepatch check --model {args.model}", [*cli, "check", "--model", args.model, tree],
                             args.runs, ok=(0, 1))
    check_all, _ = median_of("eaglepatch check --all", [*cli, "check", "--all", tree], args.runs, ok=(0, 1))
    help_, _ = median_of("eaglepatch --help", [*cli, "--help"], args.help_runs)
    bare, _ = median_of("python -c pass", [sys.executable, "-c", "pass"], args.help_runs)
    baseline, out = median_of("libcst.parse_module on every file (baseline)", [sys.executable, "-c", PARSE_ALL, tree],
                              args.baseline_runs, warm_up=False)
    counts = json.loads(out)  # files, lines, files libcst could not parse

    machine["loadavg_after"] = os.getloadavg()[0]
    speedup = baseline["median"] / check_all["median"]
    help_overhead = help_["median"] - bare["median"]
    goals = {
        "check_all_speedup": {"value": speedup, "goal": ">= 5x", "met": speedup >= 5},
        "check_one_seconds": {"value": check_one["median"], "goal": "< 1 s", "met": check_one["median"] < 1},
        "help_overhead_seconds": {"value": help_overhead, "goal": "< 0.3 s", "met": help_overhead < 0.3},
    }
    results = {
        "machine": machine,
        "tree": counts,
        "model": args.model,
        "timings": {"check": check_one, "check_all": check_all, "libcst_parse_all": baseline,
                    "help": help_, "python_pass": bare},
        "goals": goals,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")

    def met(name: str) -> str:
        return "met" if goals[name]["met"] else "NOT met"

    print(f"Machine: {machine['nproc']} CPUs, Python {machine['python']} ({machine['platform']}), "
          f"libcst {machine['libcst']}, eaglepatch {machine['eaglepatch']}; "
          f"1-min load average {machine['loadavg_before']:.2f} before, {machine['loadavg_after']:.2f} after")
    print(f"Tree: sglang {version} srt/ -- {counts['files']} .py files, {counts['lines']:,} lines"
          f" ({counts['failed']} not parsable by libcst)\n")
    print("| command | runs | median (s) | min - max (s) |")
    print("| --- | ---: | ---: | ---: |")
    for t in (check_one, check_all, baseline, help_, bare):
        print(f"| `{t['label']}` | {len(t['runs'])} | {t['median']:.3f} | {t['min']:.3f} - {t['max']:.3f} |")
    print("\n| goal | measured | target | |")
    print("| --- | ---: | ---: | --- |")
    print(f"| `check --all` speed-up vs full libcst parse | {speedup:.1f}x | >= 5x | {met('check_all_speedup')} |")
    print(f"| `check` one model | {check_one['median']:.3f} s | < 1 s | {met('check_one_seconds')} |")
    print(f"| `--help` minus bare python start | {help_overhead:.3f} s | < 0.3 s | {met('help_overhead_seconds')} |")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
