"""The release's own argument parser as an oracle: does it accept a launch line?

Run as a script in a fresh interpreter (tests/stub_imports.py's import hook stubs every package that is
not installed, for the whole process):

    python tests/release_parser.py SITE_PACKAGES LINES.json

LINES.json is a list of {"argv": [words after the program], "serve": bool}; the working folder is the one
`--config FILE` is read from.  It prints one JSON list, one {"accepted": bool, "error": str} a line.

Each line goes the way the release's own entry point sends it, not a copy of it:
`python -m sglang.launch_server ARGV` calls `prepare_server_args(ARGV)`, and `sglang serve ARGV` calls the
release's `sglang.cli.serve.serve` (which rewrites ARGV as that release does: a positional model path,
`--model-type`, a missing `--model-path`) on its way to `prepare_server_args`.  Only the end is cut short:
`ArgumentParser.parse_args` parses, then stops the launch, so the release's ServerArgs checks, its model
download and its server never run.  A refusal is argparse's `error()` (its message kept), or what the
release raises before the parser is done (the `--config` merger's ValueError, serve's missing model path).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Parsed(Exception):
    """The parser accepted the line: the launch stops here."""


class _Refused(Exception):
    """argparse's `error()`: the message it would print before exiting with status 2."""


def _stop_after_parsing() -> None:
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse_args(self, args, namespace)
        raise _Parsed

    def error(self, message):
        raise _Refused(message)

    argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
    argparse.ArgumentParser.error = error  # type: ignore[method-assign]


def _serve_module():
    """The release's `sglang serve`, kept off the network and off the process tree: no model is looked at
    for a diffusion pipeline (the corpus serves language models), and nothing is killed on the way out."""
    import importlib

    module = importlib.import_module("sglang.cli.serve")
    if hasattr(module, "get_is_diffusion_model"):
        module.get_is_diffusion_model = lambda *args, **kwargs: False
    if hasattr(module, "is_registered_native_pipeline"):
        module.is_registered_native_pipeline = lambda *args, **kwargs: False
    if hasattr(module, "kill_process_tree"):
        module.kill_process_tree = lambda *args, **kwargs: None
    return module


def judge(argv: list[str], serve: bool) -> dict:
    """{"accepted": ..., "error": ...} for one line, as the release's entry point takes it."""
    try:
        if serve:
            _serve_module().serve(argparse.Namespace(subcommand="serve"), list(argv))
        else:
            from sglang.srt.server_args import prepare_server_args

            prepare_server_args(list(argv))
    except _Parsed:
        return {"accepted": True, "error": ""}
    except _Refused as exc:
        return {"accepted": False, "error": str(exc)}
    except SystemExit as exc:
        return {"accepted": False, "error": f"exit {exc.code}"}
    except Exception as exc:  # the merger's ValueError, serve's "--model-path is required"
        return {"accepted": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"accepted": False, "error": "the entry point returned without parsing the line"}


def main(site: str, lines_file: str) -> list[dict]:
    sys.path.insert(0, str(HERE))
    import stub_imports

    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")  # SGLang's own CPU platform: no device probing
    sys.meta_path.append(stub_imports.StubFinder())
    sys.path.insert(0, site)
    import sglang.srt.server_args  # noqa: F401  # imported before the parser is patched, as the release does

    _stop_after_parsing()
    with open(lines_file, encoding="utf-8") as handle:
        lines = json.load(handle)
    return [judge(line["argv"], line["serve"]) for line in lines]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/release_parser.py SITE_PACKAGES LINES.json")
    verdicts = main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    print(json.dumps(verdicts))
