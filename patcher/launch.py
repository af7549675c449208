"""The `eaglepatch` entry point: answers `--version` and `--help` without importing typer.

Importing typer alone costs about twice a bare interpreter start.  `--version` needs none of it;
`--help` (of eaglepatch or of one command) is typer's own text, rendered once and kept in the
result cache (patcher/cache.py) under a key of eaglepatch's modules, the Python version, the
arguments, the program name and what shapes the output (terminal, width, colour), so it is
re-rendered whenever any of them changes.  Everything else goes to patcher.cli.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # typing's own costs `--version` an import; type checkers read this name as True
if TYPE_CHECKING:
    from .cache import ResultCache

COMMANDS = ("check", "diff", "apply", "revert", "explain", "preflight")
HELP = ("--help", "-h")


def _help_question(argv: list[str]) -> bool:
    return (len(argv) == 1 and argv[0] in HELP) or (len(argv) == 2 and argv[0] in COMMANDS and argv[1] in HELP)


def main(argv: list[str] | None = None) -> int:
    """Run one command with `argv` (default: the process's arguments) and return its exit status:
    0 clean, 1 findings, 2 an error (the console script exits with it)."""
    try:
        _run(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as done:
        return _status(done.code)
    return 0


def run() -> None:
    """The console script: `main`, then the process ends at once, as mypy's does.  Everything is written
    and flushed by then, and tearing down a run's objects one by one costs a tenth of a one-model `check`
    on a large tree (0.25 s on 0.5.23).  Where a stream cannot be flushed (a closed pipe), the
    interpreter's own shutdown reports it, as it always did."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        sys.exit(code)
    os._exit(code)


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # what sys.exit("text") would have printed
    return 1


def _run(argv: list[str]) -> None:
    gc.disable()  # imports allocate many objects that all live to the end: no collection passes over them
    if argv == ["--version"]:
        from . import __version__

        sys.stdout.write(f"eaglepatch {__version__}\n")
        sys.stdout.flush()
        return
    entry = _help_entry(argv) if _help_question(argv) else None
    if entry is not None:
        hit = entry.lookup()
        if hit is not None:
            sys.stdout.write(hit[1])
            sys.stdout.flush()
            sys.exit(hit[0])
    from .cli import cli_main

    if entry is None:
        cli_main(argv)
        return
    from .cache import Tee

    stdout = sys.stdout
    sys.stdout = tee = Tee(stdout)
    try:
        cli_main(argv)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
        sys.stdout = stdout
        if code == 0:
            entry.store(0, tee.text())
        raise
    finally:
        sys.stdout = stdout


def _help_entry(argv: list[str]) -> ResultCache | None:
    from . import cache

    if cache.disabled():
        return None
    from . import __version__

    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    key = {
        "eaglepatch": __version__,
        "python": sys.version,
        "argv": argv,
        "prog": os.path.basename(sys.argv[0]),
        "main": main_spec and main_spec.name,
        "output": cache.output_environment(sys.stdout),
    }
    return cache.ResultCache(key, cache.own_fingerprint(), kind="help")


if __name__ == "__main__":
    run()
