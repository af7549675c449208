"""The command line: `check` (CI gate), `diff` (dry run), `apply` (write), `revert`, `explain`.

Exit codes, as ruff and Fixit use them: 0 clean, 1 findings (or changes to make), 2 errors.
Heavy modules (libcst, rich, git) are imported inside the commands so `--help` stays fast.
"""

from __future__ import annotations

import codecs
import enum
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import typer

from . import __version__
from .engines import NAMES
from .startup import fast_coercion, quiet_parsing, tune_gc

if TYPE_CHECKING:  # `check` answered from the cache imports none of these
    from rich.console import Console

    from .cache import ResultCache
    from .engine import Command, Engine, Resolved
    from .errors import EaglepatchError
    from .read.locate import SourceTree
    from .records import FileEdit
    from .rewrite.gitrepo import WorkTree
    from .selection import Analysis, Selection

fast_coercion()  # typer's pydantic layer costs more than answering from the cache

app = typer.Typer(
    name="eaglepatch",
    help=(
        "Find the EAGLE-3 methods an SGLang model class lacks, and write them: a delegation to the "
        "model a wrapper holds, or, for a class that is itself the causal LM (a bare backbone beside "
        "its own lm_head), the hook body learned from a class of the same tree that has it.\n\n"
        "The protocol is read from SGLang's own speculative-decoding code, so it follows the release "
        "you point at.  Typical use: `eaglepatch check /root/sglang`, then `eaglepatch diff`, then "
        "`eaglepatch apply`.  Defaults can live in the tree's pyproject.toml under [tool.eaglepatch]."
    ),
    epilog=(
        "Examples:\n\n\b\n"
        "  eaglepatch check /root/sglang             # what is missing (exit 1 if anything)\n"
        "  eaglepatch diff /root/sglang > fix.patch  # the patch, for review\n"
        "  eaglepatch apply /root/sglang --commit    # write it and commit it\n"
        "  eaglepatch check --all --format github    # every wrapper, as CI annotations\n"
        "  eaglepatch explain get_embed_and_head     # why a member is needed\n"
        "  eaglepatch revert /root/sglang            # take it out again"
    ),
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class ExplainFormat(str, enum.Enum):
    table = "table"
    json = "json"


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"
    github = "github"
    sarif = "sarif"


PathArg = typer.Argument(
    None,
    metavar="PATH",
    help="An SGLang checkout root, a site-packages folder, site-packages/sglang, or sglang/srt. "
    "Default: the current folder.",
    show_default=False,
)
ModelOpt = typer.Option(
    None,
    "--model",
    "-m",
    metavar="MODULE[:CLASS]",
    help="Wrapper module under models/ (kimi_k25), optionally with the class "
    "(kimi_k25:KimiK25ForConditionalGeneration). Repeatable. Default: [tool.eaglepatch] models, else kimi_k25.",
    show_default=False,
)
AllOpt = typer.Option(
    False, "--all", help=(
        "Every model class of the tree, each with a verdict: on SGLang every class an EntryClass names under "
        "models/ (targets, drafts and others); on vLLM every class of the text-generation and multimodal "
        "registries (pooling models are never a target)."
    ),
)
FormatOpt = typer.Option(
    OutputFormat.table, "--format", "-f", help="table for people; json for scripts; github or sarif for CI."
)
ConsumerOpt = typer.Option(
    None,
    "--consumer",
    metavar="GLOB",
    help="Extra file or glob (relative to srt) whose calls on models all count as EAGLE-3 code. Repeatable.",
)
IgnoreOpt = typer.Option(None, "--ignore", metavar="MEMBER", help="Protocol member never to report or write. Repeatable.")
ExcludeOpt = typer.Option(
    None,
    "--exclude",
    metavar="GLOB",
    help="File or glob (relative to srt) never to read: a file that does not parse stops every command (exit 2) "
    "until it is fixed or left out here (or in [tool.eaglepatch] exclude). Repeatable.",
)
AlgorithmOpt = typer.Option(
    None,
    "--algorithm",
    metavar="NAME",
    help="A speculative algorithm of the tree's own enum (EAGLE3, DFLASH, ...) whose hooks to check; repeatable. "
    "Default: every algorithm whose code calls a hook on the target model (or [tool.eaglepatch] algorithms).",
)
InstalledOpt = typer.Option(
    False, "--installed", help="Target the sglang that `python` on PATH would import (found without importing it)."
)
PythonOpt = typer.Option(
    None, "--python", metavar="PYTHON", help="The interpreter whose sglang to target (implies --installed)."
)
QuietOpt = typer.Option(
    False, "--quiet", "-q", help="Only errors and the output proper (findings, patch, JSON): no notes, warnings, hints or totals."
)


# --engine's choices: the registry's names (mypy reads an Enum's members only from a literal)
EngineName = enum.Enum("EngineName", [(name, name) for name in NAMES], type=str)  # type: ignore[misc]


EngineOpt = typer.Option(
    None,
    "--engine",
    help="Which engine PATH holds. Default: what the folder's shape says (an SGLang tree, else a vLLM tree: "
    "a checkout root, a site-packages folder holding vllm/, or site-packages/vllm).",
    show_default=False,
)

EPILOG_CHECK = """\
Examples:

\b
  eaglepatch check /root/sglang                       # a git checkout
  eaglepatch check --installed                        # the sglang of the active environment
  eaglepatch check --all --format github .            # every model class, as CI annotations
  eaglepatch check --all --write-baseline eagle3-baseline.json .   # accept today's gaps
  eaglepatch check --all --baseline eagle3-baseline.json .         # fail only on new ones

A member is required when EAGLE-3 code uses it on a model of the class's role (target or draft);
it fails the gate whether or not eaglepatch can write it. Companions (the inner model's hooks of
the other role, which apply also writes) never fail it.
Exit codes: 0 no required member missing (outside the baseline), 1 some missing,
2 error (bad path, bad --model, unparsable file, unreadable baseline).
"""
EPILOG_DIFF = """\
Examples:

\b
  eaglepatch diff /root/sglang > fix.patch && git -C /root/sglang apply --check fix.patch
  eaglepatch diff --all .venv/lib/python3.11/site-packages

Paths in the patch are relative to the git work tree root when PATH is inside one, else to PATH.
Exit codes: 0 nothing to change, 1 a change is shown, 2 error.
"""
EPILOG_APPLY = """\
Examples:

\b
  eaglepatch apply /root/sglang
  eaglepatch apply /root/sglang --commit      # commit just the patched files

Writes delegations, and hook bodies learned from a class of the tree on the same shape (only
where the plumbing for aux hidden states exists; every patch is proven first). All or nothing:
every file (and, with --commit, the commit) is checked and staged before the first is replaced;
one refusal, a file changed since it was read, or a refused commit leaves every file as it was.
Ctrl-C (or SIGTERM) while files are replaced waits until all are. A file another process keeps
locked is waited for EAGLEPATCH_LOCK_TIMEOUT seconds (default 10).
Exit codes: 0 written and no required member left missing (or nothing was missing),
1 required members still missing that apply cannot write (listed, with why),
2 error (nothing written), 130 interrupted (by then every file was written, or none).
"""
EPILOG_REVERT = """\
Examples:

\b
  eaglepatch revert /root/sglang
  eaglepatch revert --all /root/sglang

Only members carrying eaglepatch's marker and still exactly as eaglepatch wrote them are removed;
hand-written or hand-edited methods stay. On a vLLM tree, also the SupportsEagle3 base of a class
carrying "# eaglepatch: added SupportsEagle3 to the bases", and its import when nothing else uses it. All or nothing, as apply. Exit codes: 0 done or nothing to revert, 2 error (nothing
written), 130 interrupted.
"""
EPILOG_EXPLAIN = """\
Examples:

\b
  eaglepatch explain get_embed_and_head /root/sglang
  eaglepatch explain set_eagle3_layers_to_capture --model kimi_k25 --format json

Exit codes: 0 explained, 2 the member is not in the EAGLE-3 protocol of that tree (or another error).
"""


def _version(value: bool) -> None:
    if value:
        typer.echo(f"eaglepatch {__version__}")
        raise typer.Exit(0)


def _unencodable(error: UnicodeError) -> tuple[str | bytes, int]:
    """A file name the OS gave as bytes that are not UTF-8 (a surrogate escape) goes out as those
    bytes, as `ls` shows it; any other character the stream cannot hold is backslash-escaped."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chunk = error.object[error.start : error.end]
    if all(0xDC80 <= ord(char) <= 0xDCFF for char in chunk):
        return bytes(ord(char) - 0xDC00 for char in chunk), error.end
    return codecs.backslashreplace_errors(error)


def tolerant_output() -> None:
    """Printing a path must never fail: a name that is not UTF-8 under a strict UTF-8 stdout
    would turn a finished `apply` into an internal error."""
    codecs.register_error("eaglepatch", _unencodable)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # io.TextIOWrapper's; a replaced stream may lack it
        try:
            if reconfigure is not None:
                reconfigure(errors="eaglepatch")
        except (AttributeError, ValueError, OSError):
            continue  # not a text stream of ours to configure


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Global options."""
    tolerant_output()
    errors_as(None)


class _Errors:
    """How the running command reports a failure besides the line on stderr: `--format json|sarif`
    also puts it on stdout as a document of that format (set by the command; reset before each)."""

    output_format: str | None = None


def errors_as(output_format: Optional[str]) -> None:
    _Errors.output_format = output_format if output_format in ("json", "sarif") else None


def report_error(message: str, internal: bool = False) -> None:
    """`eaglepatch: error: LINE` on stderr for each line of MESSAGE (a message of several lines names
    several files), and with --format json|sarif the message as a document on stdout too (an
    internal error's says it is one)."""
    label = "internal error" if internal else "error"
    lines = message.splitlines() or [message]
    if _Errors.output_format is not None:
        from .output.report import write_error

        sys.stdout.flush()
        write_error(_Errors.output_format, f"{label}: {message}" if internal else message, sys.stdout)
        sys.stdout.flush()
    for line in lines:
        typer.echo(f"eaglepatch: {label}: {line}", err=True)


def fail(message: str) -> NoReturn:
    """One line on stderr per problem (a message of several lines names several files), exit 2: the
    contract for every bad input."""
    report_error(message)
    raise typer.Exit(2)


def _console(stderr: bool = False, quiet: bool = False) -> Console:
    """Colour only on a terminal (rich also honours NO_COLOR); logs get 120 columns, not 80.
    `quiet` (--quiet): a console that prints nothing, for notes and summaries."""
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 120
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width, quiet=quiet)


def _selection(
    path: Optional[Path],
    models: Optional[list[str]],
    consumers: Optional[list[str]],
    all_models: bool,
    ignore: Optional[list[str]],
    installed: bool,
    python: Optional[str],
    engine: Optional[EngineName],
    exclude: Optional[list[str]] = None,
    algorithms: Optional[list[str]] = None,
) -> Selection:
    """The command's flags as a selection.Selection (the analysis and the result cache's key read the same one)."""
    from .selection import Selection

    return Selection(
        path, tuple(models or ()), all_models, tuple(consumers or ()), tuple(ignore or ()), installed, python,
        engine.value if engine is not None else None, tuple(exclude or ()), algorithms=tuple(algorithms or ()),
    )


def _again(
    path: Optional[Path],
    models: Optional[list[str]],
    all_models: bool,
    consumers: Optional[list[str]],
    ignore: Optional[list[str]],
    installed: bool,
    python: Optional[str],
    engine: Optional[EngineName],
    exclude: Optional[list[str]] = None,
    algorithms: Optional[list[str]] = None,
) -> str:
    """The selection's flags as given, quoted for a POSIX shell: the hint after `check` names
    `diff` and `apply` with them, so copying it looks at what this check looked at."""
    import shlex

    words = ["--all"] if all_models else []
    words += [w for m in models or [] for w in ("--model", m)]
    words += [w for c in consumers or [] for w in ("--consumer", c)]
    words += [w for i in ignore or [] for w in ("--ignore", i)]
    words += [w for e in exclude or [] for w in ("--exclude", e)]
    words += [w for a in algorithms or [] for w in ("--algorithm", a)]
    words += ["--installed"] if installed else []
    words += ["--python", python] if python else []
    words += ["--engine", engine.value] if engine is not None else []
    if path is not None:
        words += ["--", str(path)] if str(path).startswith("-") else [str(path)]
    return " ".join(shlex.quote(w) for w in words)


def _pick_engine(selection: Selection, command: Command) -> tuple[Engine, SourceTree]:
    """The engine, picked once for the command, and its tree; exit 2 when the engine does not serve the
    command (before anything is read)."""
    from .errors import EaglepatchError
    from .run import locate

    try:
        engine, tree = locate(selection)
    except EaglepatchError as exc:
        fail(str(exc))
    refusal = engine.refusal(command)
    if refusal is not None:
        fail(f"{tree.given}: {refusal}")
    return engine, tree


def _resolve_selection(selection: Selection, command: Command) -> Resolved:
    """_pick_engine's engine and tree, with the selection merged with the tree's [tool.eaglepatch]."""
    from .errors import EaglepatchError
    from .run import resolve

    located = _pick_engine(selection, command)
    try:
        return resolve(selection, located)
    except EaglepatchError as exc:
        fail(str(exc))


def run_analysis(resolved: Resolved, quiet: bool = False) -> Analysis:
    from .errors import EaglepatchError
    from .run import analyze

    try:
        if sys.stderr.isatty() and not quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(
                TextColumn("reading models/"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=_console(stderr=True),
                transient=True,
            ) as bar:
                task = bar.add_task("", total=None)

                def progress(rel: str, total: int) -> None:
                    bar.update(task, total=total, advance=1, description=rel)

                return analyze(resolved, progress=progress)
        return analyze(resolved)
    except EaglepatchError as exc:
        fail(str(exc))


@app.command(epilog=EPILOG_CHECK)
def check(
    path: Optional[Path] = PathArg,
    model: Optional[list[str]] = ModelOpt,
    all_models: bool = AllOpt,
    output_format: OutputFormat = FormatOpt,
    consumer: Optional[list[str]] = ConsumerOpt,
    ignore: Optional[list[str]] = IgnoreOpt,
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", metavar="FILE", help="Accept the required gaps recorded in FILE; fail only on others."
    ),
    write_baseline: Optional[Path] = typer.Option(
        None, "--write-baseline", metavar="FILE", help="Record every required gap found now in FILE (JSON, for git), exit 0."
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Neither read nor write the result cache (also EAGLEPATCH_NO_CACHE=1)."
    ),
    engine: Optional[EngineName] = EngineOpt,
    exclude: Optional[list[str]] = ExcludeOpt,
    algorithm: Optional[list[str]] = AlgorithmOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Report every EAGLE-3 member a model class lacks (a CI gate: exit 1 when a required one is missing)."""
    errors_as(output_format.value)
    if baseline is not None and write_baseline is not None:
        fail("--baseline and --write-baseline do not go together; pass one of them")
    again = _again(path, model, all_models, consumer, ignore, installed, python, engine, exclude, algorithm)
    resolved = _resolve_selection(_selection(path, model, consumer, all_models, ignore, installed, python, engine, exclude, algorithm), "check")
    results = None
    if write_baseline is None:
        results = _result_cache(resolved, output_format, baseline, no_cache, {"again": again, "quiet": quiet})
    if results is not None:
        hit = results.lookup()
        if hit is not None:
            sys.stdout.write(hit[1])
            raise typer.Exit(hit[0])
    analysis = run_analysis(resolved, quiet)
    _leftover_journal(analysis.tree, clear=False)
    if results is None:
        _report(analysis, output_format, baseline, write_baseline, again, quiet)
    from .cache import Tee

    stdout = sys.stdout
    sys.stdout = tee = Tee(stdout)
    try:
        _report(analysis, output_format, baseline, write_baseline, again, quiet)
    except typer.Exit as done:
        results.store(done.exit_code, tee.text())
        raise
    finally:
        sys.stdout = stdout


def _result_cache(
    resolved: Resolved,
    output_format: OutputFormat,
    baseline: Optional[Path],
    no_cache: bool,
    extra: Optional[dict[str, object]] = None,
) -> Optional[ResultCache]:
    """The cache entry for this question, or None when bypassed.  `extra`: more of what the output
    depends on (the hint's flags, --quiet)."""
    from . import cache

    if cache.disabled(no_cache):
        return None
    import os

    from . import __version__
    from .read.style import style_files

    tree, merged, consumers = resolved.tree, resolved.selection, resolved.consumers
    baseline_file = os.path.abspath(baseline) if baseline is not None else None
    key = {
        "eaglepatch": __version__,
        "python": sys.version,
        "own": cache.own_files(),
        "command": "check",
        "tree": [str(tree.srt), str(tree.given), tree.layout],
        "engine": resolved.engine.name,
        "models": merged.models,
        "all": merged.all_models,
        "consumers": [str(c) for c in consumers],
        "ignore": merged.ignore,
        "exclude": merged.exclude,
        "algorithms": merged.algorithms,
        "format": output_format.value,
        "baseline": [str(baseline), baseline_file] if baseline is not None else None,
        "cwd": os.getcwd(),
        "output": cache.output_environment(sys.stdout),
        **(extra or {}),
    }
    if output_format in (OutputFormat.github, OutputFormat.sarif):
        key["repository"] = _git_folder(tree.srt)  # paths are relative to it
    outside = [c for c in consumers if tree.srt not in c.parents]
    outside += style_files(tree.models, tree.given)  # black's width decides whether a learned body fits
    deps = cache.dependencies(tree.srt, outside + ([Path(baseline_file)] if baseline_file else []))
    return cache.ResultCache(key, deps)


def _git_folder(folder: Path) -> Optional[str]:
    """The nearest folder at or above `folder` holding a .git (a cheap stand-in, for the result
    cache's key, for the work tree root GitPython finds)."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return None


def _report(
    analysis: Analysis,
    output_format: OutputFormat,
    baseline: Optional[Path],
    write_baseline: Optional[Path],
    again: str = "",
    quiet: bool = False,
) -> NoReturn:
    """`check`'s output and exit code (always raises typer.Exit)."""
    from .errors import EaglepatchError
    from .output import report
    from .output.baseline import load_gate
    from .output.baseline import write_baseline as record

    if write_baseline is not None:
        try:
            count = record(write_baseline, analysis.plans)
        except EaglepatchError as exc:
            fail(str(exc))
        if not quiet:
            typer.echo(f"eaglepatch: recorded {count} required gap(s) in {write_baseline}", err=True)
        raise typer.Exit(0)
    try:
        gate = load_gate(baseline, analysis.plans)
    except EaglepatchError as exc:
        fail(str(exc))
    if output_format is OutputFormat.json:
        report.write_json(analysis, sys.stdout, gate)
    elif output_format is OutputFormat.github:
        report.write_github(analysis, sys.stdout, gate, _patch_base(analysis.tree)[1], quiet)
    elif output_format is OutputFormat.sarif:
        report.write_sarif(analysis, sys.stdout, gate, _patch_base(analysis.tree)[1])
    elif analysis.all_models:
        report.print_summary(analysis, _console(), gate, again, quiet)
    else:
        report.print_table(analysis, _console(), gate=gate, again=again, quiet=quiet)
    raise typer.Exit(1 if gate.new_gaps(analysis.plans) else 0)


def _edits(engine: Engine, analysis: Analysis, quiet: bool = False, suffix: str = "") -> tuple[list[FileEdit], list[EaglepatchError]]:
    """Edits per file; a file that cannot be edited is reported and the others go on."""
    for warning in [] if quiet else analysis.warnings:
        typer.echo(f"eaglepatch: warning: {warning}", err=True)
    edits, errors = engine.edits(analysis)
    for error in errors:
        typer.echo(f"eaglepatch: error: {error}{suffix}", err=True)
    return [e for e in edits if e.changed], errors


def _patch_base(tree: SourceTree) -> tuple[Optional[WorkTree], Path]:
    from .rewrite.gitrepo import find_work_tree

    work_tree = find_work_tree(tree.srt)
    return work_tree, (work_tree.root if work_tree else tree.given)


def _show_patch(patch: bytes) -> None:
    """On a terminal, coloured; elsewhere the exact bytes, so `diff > fix.patch` is what apply writes."""
    if sys.stdout.isatty():
        from rich.syntax import Syntax

        text = patch.decode("utf-8", errors="backslashreplace")
        _console().print(Syntax(text, "diff", theme="ansi_dark", background_color="default", word_wrap=False))
        return
    sys.stdout.flush()
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # a text-only stream: the bytes that are not UTF-8 come out escaped
        sys.stdout.write(patch.decode("utf-8", errors="backslashreplace"))
    else:
        raw.write(patch)
        raw.flush()
    sys.stdout.flush()


@app.command(epilog=EPILOG_DIFF)
def diff(
    path: Optional[Path] = PathArg,
    model: Optional[list[str]] = ModelOpt,
    all_models: bool = AllOpt,
    consumer: Optional[list[str]] = ConsumerOpt,
    ignore: Optional[list[str]] = IgnoreOpt,
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
    engine: Optional[EngineName] = EngineOpt,
    exclude: Optional[list[str]] = ExcludeOpt,
    algorithm: Optional[list[str]] = AlgorithmOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Print what `apply` would write (delegations, learned hook bodies), as a unified diff with git headers (dry run)."""
    resolved = _resolve_selection(_selection(path, model, consumer, all_models, ignore, installed, python, engine, exclude, algorithm), "diff")
    analysis = run_analysis(resolved, quiet)
    _leftover_journal(analysis.tree, clear=False)
    edits, errors = _edits(resolved.engine, analysis, quiet)
    if not edits:
        if not errors and not quiet:  # after an error, its line is the whole story
            typer.echo("eaglepatch: nothing to change", err=True)
        raise typer.Exit(2 if errors else 0)
    from .rewrite.preview import render_patch

    _, base = _patch_base(analysis.tree)
    _show_patch(render_patch(edits, base))
    raise typer.Exit(2 if errors else 1)


NOTHING_WRITTEN = "; no file was written (writes are all or nothing)"


def _write_all(
    tree: SourceTree,
    edits: list[FileEdit],
    errors: list[EaglepatchError],
    console: Console,
    commit: bool,
    verb: str,
    changes_of: Callable[[FileEdit], dict[str, list[str]]],
    command: str = "apply",
) -> int:
    """rewrite.transaction writes (and commits) every file or none; this reports what it did.  Returns
    the exit code: 0 written, 2 nothing written (an error), 130/143 written, then stopped by SIGINT/SIGTERM."""
    import signal

    from .rewrite.preview import render_patch
    from .rewrite.transaction import write_edits

    if errors:  # a file apply could not build: nothing is written (its line was printed with the suffix)
        return 2
    with _write_progress(len(edits), console.quiet) as progress:
        done = write_edits(tree, edits, changes_of, commit, command, progress)
    for error in done.refused:
        typer.echo(f"eaglepatch: error: {error}{NOTHING_WRITTEN}", err=True)
    if done.refused:
        return 2
    for rel in done.dirty:
        console.print(f"[yellow]note:[/yellow] {rel} already had uncommitted changes")
    if done.stopped is not None:
        name = signal.Signals(done.stopped).name
        typer.echo(f"eaglepatch: interrupted ({name}) before any file was written: nothing written", err=True)
        return 128 + done.stopped
    _show_patch(render_patch(list(done.written), done.base))
    for edit in done.written:
        for cls, members in changes_of(edit).items():
            console.print(f"[green]{verb}[/green] {cls} ({edit.rel}): {', '.join(members)}")
    if done.commit is not None:
        console.print(f"committed {done.commit}")
    if done.interrupted is not None:
        name = signal.Signals(done.interrupted).name
        wrote = f"wrote all {len(done.written)} file(s)" + (" and committed them" if done.commit else "")
        typer.echo(f"eaglepatch: interrupted ({name}) while writing: {wrote} first, so no file is left half done", err=True)
        return 128 + done.interrupted
    return 0


def _write_progress(total: int, quiet: bool = False) -> AbstractContextManager[Optional[Callable[[FileEdit], None]]]:
    """A bar on a terminal's stderr while the files are renamed (apply --all writes dozens); else nothing."""
    import contextlib

    if total < 2 or quiet or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    @contextlib.contextmanager
    def bar() -> Iterator[Callable[[FileEdit], None]]:
        with Progress(TextColumn("writing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      console=_console(stderr=True), transient=True) as shown:
            task = shown.add_task("", total=total)
            yield lambda edit: shown.update(task, advance=1, description=edit.rel)

    return bar()


def _leftover_journal(tree: SourceTree, clear: bool) -> None:
    """An earlier write on this tree that was killed mid-way is named before anything else: by check and
    diff each time, by apply and revert once (they clear it; their own write replaces it)."""
    from .rewrite.journal import forget, leftover

    found = leftover(tree.srt)
    if found is None:
        return
    typer.echo(f"eaglepatch: warning: {found.describe()}", err=True)
    if clear:
        forget(found)


@app.command(epilog=EPILOG_APPLY)
def apply(
    path: Optional[Path] = PathArg,
    model: Optional[list[str]] = ModelOpt,
    all_models: bool = AllOpt,
    consumer: Optional[list[str]] = ConsumerOpt,
    ignore: Optional[list[str]] = IgnoreOpt,
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
    commit: bool = typer.Option(False, "--commit", help="Commit just the patched files (git work trees only)."),
    engine: Optional[EngineName] = EngineOpt,
    exclude: Optional[list[str]] = ExcludeOpt,
    algorithm: Optional[list[str]] = AlgorithmOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Write the missing members (delegations, learned hook bodies) into the model files, then show what was done."""
    resolved = _resolve_selection(_selection(path, model, consumer, all_models, ignore, installed, python, engine, exclude, algorithm), "apply")
    analysis = run_analysis(resolved, quiet)
    _leftover_journal(analysis.tree, clear=True)
    edits, errors = _edits(resolved.engine, analysis, quiet, NOTHING_WRITTEN)
    console = _console(quiet=quiet)
    if errors and not edits:
        raise typer.Exit(2)
    code = _write_all(analysis.tree, edits, errors, console, commit, "added to", lambda e: e.added) if edits else 0
    if code == 2:
        raise typer.Exit(2)
    from .rewrite.transaction import still_missing

    remaining = still_missing(analysis.plans, edits)
    if remaining:
        from .output.report import print_still_missing

        print_still_missing(remaining, _console(), wrote=bool(edits))  # what is left is never quiet: it is the finding
    elif not edits:
        console.print("Nothing to do: no EAGLE-3 member a class requires is missing.")
    raise typer.Exit(code or (1 if remaining else 0))


@app.command(epilog=EPILOG_REVERT)
def revert(
    path: Optional[Path] = PathArg,
    model: Optional[list[str]] = ModelOpt,
    all_models: bool = AllOpt,
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
    commit: bool = typer.Option(False, "--commit", help="Commit just the reverted files (git work trees only)."),
    quiet: bool = QuietOpt,
) -> None:
    """Remove exactly the members eaglepatch added (and the imports only they used)."""
    from .errors import EaglepatchError

    selection = _selection(path, model, None, all_models, None, installed, python, None)
    engine, tree = _pick_engine(selection, "revert")
    try:
        reverted = engine.revert(tree, selection)
    except EaglepatchError as exc:
        fail(str(exc))
    edits, errors, kept = list(reverted.edits), list(reverted.errors), reverted.kept
    _leftover_journal(tree, clear=True)
    console = _console(quiet=quiet)
    for rel, members in kept:
        console.print(f"[yellow]kept[/yellow] {rel}: {', '.join(members)} (edited since eaglepatch wrote them)")
    if reverted.elsewhere:
        modules = " ".join(f"--model {rel.removeprefix('models/').removesuffix('.py')}" for rel in reverted.elsewhere)
        console.print(
            f"[yellow]note:[/yellow] {', '.join(reverted.elsewhere)} also {'hold' if len(reverted.elsewhere) > 1 else 'holds'} plumbing eaglepatch wrote (for the backbone or base"
            f" a class runs), left as it is: `eaglepatch revert {modules}`, or `revert` without --model, takes it out"
        )
    for error in errors:
        typer.echo(f"eaglepatch: error: {error}", err=True)
    if not edits:
        if not errors:
            console.print("Nothing to revert: no unchanged eaglepatch delegations found.")
        raise typer.Exit(2 if errors else 0)
    raise typer.Exit(_write_all(tree, edits, errors, console, commit, "removed from", lambda e: e.removed, "revert"))


@app.command(epilog=EPILOG_EXPLAIN)
def explain(
    member: str = typer.Argument(..., metavar="MEMBER", help="A protocol member, e.g. get_embed_and_head."),
    path: Optional[Path] = PathArg,
    model: Optional[list[str]] = ModelOpt,
    output_format: ExplainFormat = typer.Option(ExplainFormat.table, "--format", "-f", help="table or json."),
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
) -> None:
    """Why a member is in the protocol: every call site, its guard, the inner definition or the reference a body
    is learned from, the code apply writes."""
    errors_as(output_format.value)
    resolved = _resolve_selection(_selection(path, model, None, False, None, installed, python, None), "explain")
    analysis = run_analysis(resolved)
    from .output import report
    from .output.explain import explain_json

    if member not in analysis.protocol.members:
        known = ", ".join(analysis.protocol.members)
        aside = analysis.protocol.general_interface.get(member)
        why = f"the model runner uses it on every model at {aside}" if aside else f"known members: {known}"
        fail(f"{analysis.tree.srt}: {member} is not an EAGLE-3 protocol member of this tree ({why})")
    data = explain_json(analysis, resolved.engine.explain(analysis, member))
    if output_format is ExplainFormat.json:
        import json

        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        report.print_explain(data, _console())
    raise typer.Exit(0)


EPILOG_PREFLIGHT = """\
Examples:

\b
  eaglepatch preflight /root/sglang -- python -m sglang.launch_server --model-path /models/kimi-k2.5 \\
      --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/kimi-k2.5-eagle3 --tp 8
  eaglepatch preflight --installed --format json -- SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 sglang serve ...
  eaglepatch preflight .venv/lib/python3.12/site-packages -- vllm serve /models/llama-3.1-8b \\
      --speculative-config '{"method": "eagle3", "model": "/models/llama-3.1-8b-eagle3", "num_speculative_tokens": 3}'

Everything after `--` is the launch as you would type it, environment assignments first. On
SGLang the options are read the way the tree's server parser reads them; on vLLM (`vllm serve`,
`python -m vllm.entrypoints.openai.api_server`) the model, the --speculative-config JSON and the
options that size the run are read, and an option no parser of the release declares is a warning.
The two checkpoints' config.json and the draft's safetensors headers are read, never a tensor.
Nothing is written.
Exit codes: 0 no fail finding, 1 some, 2 error (unreadable config, a path that is no checkpoint).
"""


@app.command(epilog=EPILOG_PREFLIGHT, context_settings={"allow_interspersed_args": False})
def preflight(
    words: Optional[list[str]] = typer.Argument(
        None, metavar="[PATH] -- LAUNCH...", help="The SGLang or vLLM tree (default: the current folder), then the launch command.", show_default=False
    ),
    output_format: ExplainFormat = typer.Option(ExplainFormat.table, "--format", "-f", help="table or json."),
    installed: bool = InstalledOpt,
    python: Optional[str] = PythonOpt,
) -> None:
    """Predict the launch's failures before any weight loads: the target's hooks, the draft and its context length, layer ids, vocabulary.

    On vLLM trees: the EAGLE-3 whitelist of older releases, the speculative config's fields, the
    draft's positions under the max model len, and the aux-layer ids the runner will capture."""
    errors_as(output_format.value)
    from .errors import EaglepatchError
    from .run import resolve
    from .selection import Selection

    words = list(words or [])
    path = None
    if words and not (installed or python) and Path(words[0]).is_dir():
        path = Path(words.pop(0))
    # after PATH the parser stops reading options: ours, between PATH and `--`, are read here
    while words and words[0] != "--" and words[0].startswith("-"):
        option, _, inline = words.pop(0).partition("=")
        if option == "--installed":
            installed = True
            continue
        value = inline or (words.pop(0) if words and words[0] != "--" else "")
        if option in ("--format", "-f") and value in {f.value for f in ExplainFormat}:
            output_format = ExplainFormat(value)
            errors_as(output_format.value)
        elif option == "--python" and value:
            python = value
        else:
            fail(f"preflight: {option} {value}".rstrip() + " is not an option of preflight; the launch goes after `--`")
    if words and words[0] == "--":
        words.pop(0)
    if not words:
        fail("preflight needs the launch command after `--` (e.g. -- python -m sglang.launch_server --model-path ...)")
    try:
        request = resolve(Selection(path, installed=installed, python=python))
        refusal = request.engine.refusal("preflight")
        if refusal is not None:
            raise EaglepatchError(refusal, path=str(request.tree.given))
        report = request.engine.preflight(request, words, dict(os.environ))
    except EaglepatchError as exc:
        fail(str(exc))
    from .output.preflight import print_preflight, write_preflight_json

    if output_format is ExplainFormat.json:
        write_preflight_json(report, sys.stdout)
    else:
        print_preflight(report, _console())
    raise typer.Exit(1 if report.failed else 0)


def cli_main(argv: list[str] | None = None) -> None:
    """Entry point: an unexpected failure is still exit 2 with one line, never a findings exit 1."""
    import os

    tune_gc()
    quiet_parsing()
    try:
        app(args=argv)
    except KeyboardInterrupt:
        typer.echo("eaglepatch: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("EAGLEPATCH_DEBUG"):
            raise
        report_error(f"{type(exc).__name__}: {exc} (set EAGLEPATCH_DEBUG=1 for the traceback)", internal=True)
        sys.exit(2)
