"""The command line: `check` (CI gate), `diff` (dry run), `apply` (write).

Exit codes, as ruff and Fixit use them: 0 clean, 1 findings (or changes to make), 2 errors.
Heavy modules (libcst, rich, git) are imported inside the commands so `--help` stays fast.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import List, Optional

import typer

from patcher import __version__

EPILOG_CHECK = """\
Examples:

  eaglepatch check /root/sglang                     # a git checkout

  eaglepatch check .venv/lib/python3.11/site-packages

  eaglepatch check --model kimi_k25:KimiK25ForConditionalGeneration --format json

Exit codes: 0 nothing missing, 1 something missing, 2 error (bad path, bad --model, unparsable file).
"""

app = typer.Typer(
    name="eaglepatch",
    help=(
        "Find the EAGLE-3 methods an SGLang model wrapper fails to forward to the model it holds, "
        "and write the delegations.\n\n"
        "The protocol is read from SGLang's own speculative-decoding code, so it follows the release you point at."
    ),
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"
    github = "github"


PathArg = typer.Argument(
    None,
    help="An SGLang checkout root, a site-packages folder, site-packages/sglang, or sglang/srt. Default: the current folder.",
    show_default=False,
)
ModelOpt = typer.Option(
    None,
    "--model",
    "-m",
    help="Wrapper module under models/ (kimi_k25), optionally with the class (kimi_k25:KimiK25ForConditionalGeneration). Repeatable. Default: kimi_k25.",
    show_default=False,
)
FormatOpt = typer.Option(OutputFormat.table, "--format", "-f", help="table for people, json for scripts, github for workflow annotations.")
ConsumerOpt = typer.Option(
    None, "--consumer", help="Extra file (relative to srt or absolute) whose model calls all count as EAGLE-3 code. Repeatable."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"eaglepatch {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Global options."""


def fail(message: str) -> None:
    """One line on stderr, exit 2: the contract for every bad input."""
    typer.echo(f"eaglepatch: error: {message}", err=True)
    raise typer.Exit(2)


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _consumers(path: Optional[Path], consumers: Optional[List[str]]) -> list[Path]:
    if not consumers:
        return []
    from patcher.locate import locate_tree

    tree = locate_tree(path)
    out = []
    for item in consumers:
        candidate = Path(item)
        candidate = candidate if candidate.is_absolute() else tree.srt / candidate
        if not candidate.is_file():
            fail(f"{item}: --consumer names no file (relative paths are read from {tree.srt})")
        out.append(candidate.resolve())
    return out


def run_analysis(path: Optional[Path], models: Optional[List[str]], consumers: Optional[List[str]]):
    from patcher.errors import EaglepatchError
    from patcher.pipeline import analyze

    try:
        return analyze(path, models, _consumers(path, consumers))
    except EaglepatchError as exc:
        fail(str(exc))


@app.command(epilog=EPILOG_CHECK)
def check(
    path: Optional[Path] = PathArg,
    model: Optional[List[str]] = ModelOpt,
    output_format: OutputFormat = FormatOpt,
    consumer: Optional[List[str]] = ConsumerOpt,
) -> None:
    """Report every EAGLE-3 member a wrapper lacks (a CI gate: exit 1 when something is missing)."""
    analysis = run_analysis(path, model, consumer)
    from patcher import report

    if output_format is OutputFormat.json:
        report.write_json(analysis, sys.stdout)
    elif output_format is OutputFormat.github:
        report.write_github(analysis, sys.stdout)
    else:
        report.print_table(analysis, _console())
    raise typer.Exit(1 if analysis.missing_count else 0)


def main() -> None:
    app()
