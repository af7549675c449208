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
AllOpt = typer.Option(
    False, "--all", help="Every model class under models/ whose __init__ holds another model (instead of --model)."
)
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


def run_analysis(path: Optional[Path], models: Optional[List[str]], consumers: Optional[List[str]], all_models: bool = False):
    from patcher.errors import EaglepatchError
    from patcher.pipeline import analyze

    if all_models and models:
        fail("--all and --model do not go together; pass one of them")
    try:
        if all_models and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(
                TextColumn("reading models/"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                console=_console(stderr=True), transient=True,
            ) as bar:
                task = bar.add_task("", total=None)

                def progress(rel: str, total: int) -> None:
                    bar.update(task, total=total, advance=1, description=rel)

                return analyze(path, models, _consumers(path, consumers), True, progress)
        return analyze(path, models, _consumers(path, consumers), all_models)
    except EaglepatchError as exc:
        fail(str(exc))


@app.command(epilog=EPILOG_CHECK)
def check(
    path: Optional[Path] = PathArg,
    model: Optional[List[str]] = ModelOpt,
    output_format: OutputFormat = FormatOpt,
    all_models: bool = AllOpt,
    consumer: Optional[List[str]] = ConsumerOpt,
) -> None:
    """Report every EAGLE-3 member a wrapper lacks (a CI gate: exit 1 when something is missing)."""
    analysis = run_analysis(path, model, consumer, all_models)
    from patcher import report

    if output_format is OutputFormat.json:
        report.write_json(analysis, sys.stdout)
    elif output_format is OutputFormat.github:
        report.write_github(analysis, sys.stdout)
    elif all_models:
        report.print_summary(analysis, _console())
    else:
        report.print_table(analysis, _console())
    raise typer.Exit(1 if analysis.missing_count else 0)


EPILOG_DIFF = """\
Examples:

  eaglepatch diff /root/sglang > fix.patch && git -C /root/sglang apply --check fix.patch

  eaglepatch diff --model kimi_k25 .venv/lib/python3.11/site-packages

Paths in the patch are relative to the git work tree root when PATH is inside one, else to PATH.
Exit codes: 0 nothing to change, 1 a change is shown, 2 error.
"""

EPILOG_APPLY = """\
Examples:

  eaglepatch apply /root/sglang

  eaglepatch apply /root/sglang --commit      # commit just the patched files

Writes are atomic; a file that changed since it was read is left alone.
Exit codes: 0 written or nothing to do, 2 error (nothing half-written).
"""


def _edits(analysis):
    """Edits per file; a file that cannot be edited is reported and the others go on."""
    from patcher.edits import build_edits

    edits, errors = build_edits(analysis.cache, analysis.tree, analysis.plans)
    for error in errors:
        typer.echo(f"eaglepatch: error: {error}", err=True)
    if errors and not edits:
        raise typer.Exit(2)
    return [e for e in edits if e.changed], errors


def _patch_base(analysis):
    from patcher.gitrepo import find_work_tree

    work_tree = find_work_tree(analysis.tree.srt)
    return work_tree, (work_tree.root if work_tree else analysis.tree.given)


def _show_patch(patch: str) -> None:
    if sys.stdout.isatty():
        from rich.syntax import Syntax

        _console().print(Syntax(patch, "diff", theme="ansi_dark", background_color="default", word_wrap=False))
    else:
        sys.stdout.write(patch)
        sys.stdout.flush()


@app.command(epilog=EPILOG_DIFF)
def diff(
    path: Optional[Path] = PathArg,
    model: Optional[List[str]] = ModelOpt,
    all_models: bool = AllOpt,
    consumer: Optional[List[str]] = ConsumerOpt,
) -> None:
    """Print the delegations `apply` would write, as a unified diff with git headers (dry run)."""
    analysis = run_analysis(path, model, consumer, all_models)
    edits, errors = _edits(analysis)
    if not edits:
        typer.echo("eaglepatch: nothing to change", err=True)
        raise typer.Exit(2 if errors else 0)
    from patcher.preview import render_patch

    _, base = _patch_base(analysis)
    _show_patch(render_patch(edits, base))
    raise typer.Exit(1)


@app.command(epilog=EPILOG_APPLY)
def apply(
    path: Optional[Path] = PathArg,
    model: Optional[List[str]] = ModelOpt,
    all_models: bool = AllOpt,
    consumer: Optional[List[str]] = ConsumerOpt,
    commit: bool = typer.Option(False, "--commit", help="Commit just the patched files (git work trees only)."),
) -> None:
    """Write the missing delegations into the wrapper files, then show what was done."""
    analysis = run_analysis(path, model, consumer, all_models)
    edits, errors = _edits(analysis)
    console = _console()
    if not edits:
        console.print("Nothing to do: every delegable EAGLE-3 member is already present.")
        raise typer.Exit(2 if errors else 0)
    from patcher.errors import EaglepatchError
    from patcher.preview import render_patch
    from patcher.write import write_edit

    work_tree, base = _patch_base(analysis)
    written, failed = [], list(errors)
    for edit in edits:
        if work_tree is not None and work_tree.dirty(edit.path):
            console.print(f"[yellow]note:[/yellow] {edit.rel} already had uncommitted changes")
        try:
            write_edit(edit, analysis.tree.srt)
        except EaglepatchError as exc:
            typer.echo(f"eaglepatch: error: {exc}", err=True)
            failed.append(edit)
            continue
        written.append(edit)
    if written:
        _show_patch(render_patch(written, base))
        for edit in written:
            for cls, members in edit.added.items():
                console.print(f"[green]added[/green] to {cls} ({edit.rel}): {', '.join(members)}")
    if commit and written:
        if work_tree is None:
            fail(f"{analysis.tree.given}: --commit needs a git work tree; the files were written but not committed")
        names = sorted({m for e in written for ms in e.added.values() for m in ms})
        classes = sorted({c for e in written for c in e.added})
        message = (
            f"Forward EAGLE-3 members from {', '.join(classes)}\n\n"
            f"Added by eaglepatch: {', '.join(names)}.\n"
        )
        try:
            sha = work_tree.commit([e.path for e in written], message)
        except Exception as exc:  # git's own message is the useful one
            fail(f"{work_tree.root}: git commit failed ({str(exc).strip().splitlines()[-1]}); the files are written")
        console.print(f"committed {sha}")
    raise typer.Exit(2 if failed else 0)


def main() -> None:
    app()
