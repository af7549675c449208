"""A vLLM release's own argument parser as an oracle: does it accept a launch line, and what does it read?

Run as a script in a fresh interpreter (tests/stub_imports.py's import hook stubs every package that is
not installed, for the whole process):

    python tests/vllm_release_parser.py SITE_PACKAGES LINES.json

LINES.json is a list of {"argv": [words after the program], "serve": bool}.  It prints one JSON list, one
{"accepted": bool, "error": str, "values": {...}} a line: the values preflight reads (model, speculative
config, max model len, tensor parallel size) as the parser left them in its namespace.

`vllm serve ARGV` goes through the release's `ServeSubcommand().subparser_init` under a parser of its
own, then the release's one rule before its server starts (a positional model tag is the model);
`python -m vllm.entrypoints.openai.api_server ARGV` through the release's `make_arg_parser`, as that
module's `__main__` block builds it.  A refusal is argparse's `error()`, message kept.

What the stubs cannot stand in for is set once, before the release is imported: no device platform is
probed (the release's own CPU platform is the current one), and `torch.library.infer_schema` reads a
function's signature, so the release's IR ops register as they do on a real torch.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_PROBED = ("libtpu", "amdsmi", "intel_extension_for_pytorch", "transformers_neuronx", "neuronx_distributed_inference",
           "pynvml", "tpu_info", "tpu_commons", "habana_frameworks", "triton_kernels")  # each a device's probe: absent on this machine


class _Refused(Exception):
    """argparse's `error()`: the message it would print before exiting with status 2."""


def _refuse(self, message):
    raise _Refused(message)


def _infer_schema(fn, *args, **kwargs) -> str:
    """A schema in torch's spelling from the signature alone: as many Tensor outputs as the return
    annotation names (what the release's IR op registration compares and counts)."""
    signature = inspect.signature(fn)
    outputs = max(1, str(signature.return_annotation).count("Tensor"))
    returns = "Tensor" if outputs == 1 else "(" + ", ".join(["Tensor"] * outputs) + ")"
    return "(" + ", ".join(f"Tensor {name}" for name in signature.parameters) + ") -> " + returns


def _first(*modules: str):
    for name in modules:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not exc.name or not name.startswith(exc.name):
                raise
    raise ModuleNotFoundError(modules[-1])


def _values(namespace: argparse.Namespace) -> dict:
    return {key: getattr(namespace, key, None) for key in ("model", "speculative_config", "max_model_len", "tensor_parallel_size")}


def judge(argv: list[str], serve: bool) -> dict:
    parser_module = _first("vllm.utils.argparse_utils", "vllm.utils")
    flexible = parser_module.FlexibleArgumentParser
    try:
        if serve:
            top = flexible(prog="vllm")
            subparsers = top.add_subparsers(dest="subparser")
            importlib.import_module("vllm.entrypoints.cli.serve").ServeSubcommand().subparser_init(subparsers)
            namespace = top.parse_args(["serve", *argv])
            if getattr(namespace, "model_tag", None) is not None:
                namespace.model = namespace.model_tag  # the release's serve command, before its server starts
        else:
            cli_args = _first("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args")
            namespace = cli_args.make_arg_parser(flexible()).parse_args(list(argv))
    except _Refused as exc:
        return {"accepted": False, "error": str(exc), "values": {}}
    except SystemExit as exc:
        return {"accepted": False, "error": f"exit {exc.code}", "values": {}}
    except Exception as exc:
        if os.environ.get("EAGLEPATCH_ORACLE_TRACE"):
            import traceback

            traceback.print_exc()
        return {"accepted": False, "error": f"{type(exc).__name__}: {exc}"[:500], "values": {}}
    return {"accepted": True, "error": "", "values": _values(namespace)}


def main(site: str, lines_file: str) -> list[dict]:
    sys.path.insert(0, str(HERE))
    import stub_imports

    for name in _PROBED:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    sys.meta_path.append(stub_imports.StubFinder())
    sys.path.insert(0, site)
    import torch.library

    torch.library.infer_schema = _infer_schema
    platforms = importlib.import_module("vllm.platforms")
    platforms._current_platform = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
    argparse.ArgumentParser.error = _refuse  # type: ignore[method-assign]
    with open(lines_file, encoding="utf-8") as handle:
        lines = json.load(handle)
    return [judge(line["argv"], line["serve"]) for line in lines]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/vllm_release_parser.py SITE_PACKAGES LINES.json")
    verdicts = main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    print(json.dumps(verdicts, default=str))
