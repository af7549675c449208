"""The README's sample outputs, produced from the bundled fixture tree so they cannot drift.

    python tools/readme_samples.py --write   # rewrite every sample block in README.md
    python tools/readme_samples.py --check   # exit 1 (and show a diff) when README.md differs

A sample block in README.md is the text between ``<!-- sample: NAME -->`` and ``<!-- /sample -->``.
Each is the output of one eaglepatch command, run the way `make demo` runs it: on a copy of
``fixtures/checkout`` made into a git repository in a temporary folder, from that folder (so every
path is relative to it), with no colour, no result cache and a fixed terminal width.  The absolute
path of the copy, where a report prints one, is written as ``<demo>``.  The spaces rich pads
table lines with are dropped (a diff keeps every byte).

One block is checked rather than generated: ``config`` is a ``[tool.eaglepatch]`` table; it is
written into the copy's pyproject.toml and `check` must accept it (every key known, every consumer
glob matching a file), so the README never shows a configuration the tool refuses.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]  # `import eaglepatch` is this checkout once `make venv` installed it
README = ROOT / "README.md"
FIXTURE = ROOT / "fixtures" / "checkout"
COLUMNS = "120"
PLACEHOLDER = "<demo>"

BLOCK = re.compile(r"(<!-- sample: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /sample -->)", re.S)

# name -> (command arguments after `eaglepatch`, the exit code it must end with, fence language)
SAMPLES: dict[str, tuple[list[str], int, str]] = {
    "check": (["check", "."], 1, "text"),
    "diff": (["diff", "."], 1, "diff"),
    "diff-learned": (["diff", "--model", "olmo_like", "."], 1, "diff"),
    "github": (["check", "--format", "github", "."], 1, "text"),
    "json": (["check", "--format", "json", "."], 1, "json"),
}
CHECKED = {"config"}  # blocks kept as written, but run against the fixture tree

# JSON trimming: list key -> how many items to keep (the rest become "...")
KEEP = {"protocol": 1, "called_at": 2, "uses": 1, "missing": 1}


UNSET = ("FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLORTERM", "EAGLEPATCH_CACHE_DIR")


def environment() -> dict[str, str]:
    """What the samples are rendered under (on top of the caller's environment): no colour, no
    result cache, a fixed width, and git with no user or system configuration."""
    return dict(
        COLUMNS=COLUMNS,
        LINES="50",
        NO_COLOR="1",
        TERM="dumb",
        EAGLEPATCH_NO_CACHE="1",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="demo",
        GIT_AUTHOR_EMAIL="demo@example.invalid",
        GIT_COMMITTER_NAME="demo",
        GIT_COMMITTER_EMAIL="demo@example.invalid",
        GIT_AUTHOR_DATE="2000-01-01T00:00:00Z",
        GIT_COMMITTER_DATE="2000-01-01T00:00:00Z",
    )


def make_demo(folder: Path, env: dict[str, str]) -> Path:
    """What `make demo` does: the fixture tree, copied, committed in a fresh git repository."""
    demo = folder / "demo"
    folder.mkdir()
    shutil.copytree(FIXTURE, demo, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "fixture tree"]):
        subprocess.run(["git", *args], cwd=demo, env={**os.environ, **env}, check=True, capture_output=True)
    return demo


def eaglepatch(demo: Path, env: dict[str, str], args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `eaglepatch ARGS` run from DEMO.  In this process, through
    typer's runner (the `eaglepatch` script is eaglepatch.launch, which hands every such command to
    this same app): a fresh interpreter per sample would cost a second each in imports alone."""
    from typer.testing import CliRunner

    from eaglepatch.cli import app

    here = os.getcwd()
    os.chdir(demo)
    try:
        done = CliRunner().invoke(app, args, env={**{name: None for name in UNSET}, **env}, catch_exceptions=False)
    finally:
        os.chdir(here)
    return done.exit_code, done.stdout, done.stderr


def trim(value, key: str | None = None):
    """The JSON report, shortened the same way every time: long lists keep their first items."""
    if isinstance(value, dict):
        return {k: trim(v, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [trim(v) for v in value]
        keep = KEEP.get(key or "")
        if keep is not None and len(items) > keep:
            items = items[:keep] + ["..."]
        return items
    return value


def render(name: str, demo: Path, env: dict[str, str]) -> str:
    args, expected, language = SAMPLES[name]
    code, text, errors = eaglepatch(demo, env, args)
    if code != expected:
        raise SystemExit(f"readme_samples: `eaglepatch {' '.join(args)}` exited {code}, not {expected}\n{errors}")
    if name == "json":
        text = json.dumps(trim(json.loads(text)), indent=2, ensure_ascii=False) + "\n"
    text = text.replace(str(demo.resolve()), PLACEHOLDER).replace(str(demo), PLACEHOLDER)
    if language == "text":  # rich pads table lines with spaces; a diff's blank context line is " " and stays
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = text.rstrip("\n") + "\n"
    return f"```{language}\n{text}```\n"


def verify_config(body: str, demo: Path, env: dict[str, str]) -> None:
    """The README's [tool.eaglepatch] table must be one `check` accepts on the fixture tree."""
    found = re.search(r"```toml\n(.*?)```", body, re.S)
    if not found or "[tool.eaglepatch]" not in found.group(1):
        raise SystemExit("readme_samples: the config block holds no ```toml fence with [tool.eaglepatch]")
    (demo / "pyproject.toml").write_text(found.group(1), encoding="utf-8")
    code, out, errors = eaglepatch(demo, env, ["check", "--format", "json"])
    if code not in (0, 1):
        raise SystemExit(f"readme_samples: check refuses the README's [tool.eaglepatch] table:\n{errors}")
    ignored = set(tomllib.loads(found.group(1))["tool"]["eaglepatch"].get("ignore", []))
    if ignored & {member["name"] for member in json.loads(out)["protocol"]}:
        raise SystemExit(f"readme_samples: the README's [tool.eaglepatch] ignore = {sorted(ignored)} had no effect")


def regenerate(readme: str) -> str:
    names = [m.group("name") for m in BLOCK.finditer(readme)]
    unknown = sorted(set(names) - set(SAMPLES) - CHECKED)
    missing = sorted(set(SAMPLES) - set(names))
    if unknown or missing:
        raise SystemExit(f"readme_samples: README.md sample blocks unknown: {unknown}, absent: {missing}")
    env = environment()
    with tempfile.TemporaryDirectory(prefix="eaglepatch-readme-") as folder:
        demo = make_demo(Path(folder) / "samples", env)
        config = make_demo(Path(folder) / "config", env)  # its own copy: it gets a pyproject.toml
        rendered = {}
        for match in BLOCK.finditer(readme):
            name = match.group("name")
            if name in CHECKED:
                verify_config(match.group("body"), config, env)
            else:
                rendered[name] = render(name, demo, env)

    def replace(match: re.Match) -> str:
        name = match.group("name")
        body = match.group("body") if name in CHECKED else rendered[name]
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the sample blocks in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md differs from what --write writes")
    parser.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    current = options.readme.read_text(encoding="utf-8")
    wanted = regenerate(current)
    if options.write:
        if wanted != current:
            options.readme.write_text(wanted, encoding="utf-8", newline="\n")
            print(f"readme_samples: rewrote {options.readme}")
        return 0
    if wanted == current:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            current.splitlines(keepends=True), wanted.splitlines(keepends=True), "README.md", "README.md (generated)"
        )
    )
    print("readme_samples: README.md samples are stale; run `make readme` (python tools/readme_samples.py --write)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
