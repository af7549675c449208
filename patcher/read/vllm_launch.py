"""Read stage: a vLLM launch line (`vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server
--model MODEL ...`), read for what preflight judges: the model, the speculative config and the options
that size the run.

vLLM builds most of its options from its config dataclasses' fields, so the reading is lenient on purpose:
an option it does not know is skipped (with its value, when the next word is one), never called an error,
since only the release's own parser can say which words it refuses.  What it reads, it reads as that
parser does: `--opt value` and `--opt=value`, underscores spelled as dashes, `--speculative-config` as
JSON (or as dotted keys, `--speculative-config.method eagle3`), the last spelling of an option winning,
a positional model after `serve` winning over `--model`, a `--config FILE` (YAML) put in before the
line's own options, as vLLM's parser puts it.  Whether an option takes no value is read from
the release (`bool` fields of its argument dataclasses, `store_true` actions), not listed here.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError
from .launch_line import split_environment
from .source_cache import SourceCache
from .statements import walk

_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_CLI_MODULE = "vllm.entrypoints.cli.main"
_CONSOLE = re.compile(r"(?:.*/)?vllm")
# the files whose dataclasses and parsers declare the server's options, as releases have moved them
ARGUMENT_FILES = (
    "engine/arg_utils.py",
    "entrypoints/openai/cli_args.py",
    "entrypoints/common/cli_args.py",
    "entrypoints/cli/serve.py",
)
# the options preflight reads, by their long spelling (dashes)
_READ = {
    "--model": "model",
    "--speculative-config": "speculative_config",
    "--max-model-len": "max_model_len",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--spec-method": "spec_method",
    "--spec-model": "spec_model",
    "--spec-tokens": "spec_tokens",
    "--speculative-model": "speculative_model",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--trust-remote-code": "trust_remote_code",
}


@dataclass(frozen=True)
class VllmOptions:
    """The release's options as its parsers declare them: every `--x` an `add_argument` names, each field
    of its front-end argument dataclasses (`--field-name`), and which of them take no value."""

    flags: frozenset[str]  # options that take no value
    known: frozenset[str] = frozenset()  # every option spelled out ((): not read, nothing is called unknown)
    at: str = ""  # the file they were first read from, relative to the vllm folder

    def unknown(self, word: str) -> bool:
        """No option is spelled so, nor starts so (argparse takes a unique prefix), nor is its `--no-` form."""
        if not self.known or not word.startswith("--"):
            return False
        name = word.split(".", 1)[0]
        if name.startswith("--no-") and "--" + name[5:] in self.known:
            return False
        return not any(option.startswith(name) for option in self.known)


@dataclass(frozen=True)
class VllmLaunch:
    """A vLLM launch line as preflight reads it."""

    words: tuple[str, ...]
    environment: Mapping[str, str]
    values: Mapping[str, str | bool]  # dest -> the value as typed (flags: True)
    speculative: Mapping[str, object] | None  # the speculative config as the release builds its dict
    spelled: Mapping[str, str]  # dest -> the word the user wrote
    errors: tuple[str, ...] = ()  # what the release's parser stops on (JSON it cannot read)
    unknown: tuple[str, ...] = ()  # options no parser of the release declares
    serve: bool = False  # `vllm serve`, not the api_server module
    shell: Mapping[str, str] = field(default_factory=dict)

    def get(self, dest: str) -> str | None:
        value = self.values.get(dest)
        return value if isinstance(value, str) else None


def read_vllm_options(cache: SourceCache) -> VllmOptions:
    """The options of the release's server parsers: `--x` strings its `add_argument` calls name and the
    fields of its `*FrontendArgs` dataclasses; those taking no value are `bool` fields of the dataclasses in
    its argument files (EngineArgs, the front end's) and `store_true`/`store_false` arguments."""
    flags: set[str] = set()
    known: set[str] = set()
    at = ""
    for rel in ARGUMENT_FILES:
        path = cache.srt / rel
        if not path.is_file():
            continue
        try:
            module = cache.module_ast(path)
        except EaglepatchError:
            continue
        at = at or rel
        for node in walk(module):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_bool(node.annotation):
                flags.add("--" + node.target.id.replace("_", "-"))
            elif isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
                known.update("--" + s.target.id.replace("_", "-") for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                spelled = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
                known.update(spelled)
                action = next((k.value for k in node.keywords if k.arg == "action"), None)
                if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
                    flags.update(spelled)
    return VllmOptions(frozenset(flags), frozenset(known), at)


def _is_bool(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("bool", "Optional[bool]", "bool|None")


def _server_entry(words: Sequence[str]) -> tuple[int, bool]:
    """(the index of the first word after the program, whether it is `serve`)."""
    for i, word in enumerate(words):
        if word in _SERVER_MODULES or word.endswith("/api_server.py"):
            return i + 1, False
        if word == _CLI_MODULE and i + 1 < len(words) and words[i + 1] == "serve":
            return i + 2, True
        if _CONSOLE.fullmatch(word) and i + 1 < len(words) and words[i + 1] == "serve":
            return i + 2, True
    raise EaglepatchError(
        "the launch command starts no vLLM server: pass it after `--`, as you would type it "
        "(`vllm serve MODEL --speculative-config '{...}'` or `python -m vllm.entrypoints.openai.api_server --model MODEL ...`)",
        path="LAUNCH",
    )


def _dashed(word: str) -> str:
    """vLLM's parser reads `--max_model_len` as `--max-model-len` (the name only, not a dotted key)."""
    if not word.startswith("--"):
        return word
    name, dot, key = word[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + key


def read_vllm_launch(words: Sequence[str], options: VllmOptions, shell: Mapping[str, str] | None = None) -> VllmLaunch:
    """`words` as typed, run from a shell exporting `shell`."""
    words, environment, inherited, rest = split_environment(words, shell)
    begin, serve = _server_entry(rest)
    args = _with_config_file(rest[begin:], serve)
    values: dict[str, str | bool] = {}
    spelled: dict[str, str] = {}
    dotted: dict[str, object] = {}
    errors: list[str] = []
    unknown: list[str] = []
    positional: str | None = None
    i = 0
    if serve and args and not args[0].startswith("-"):
        positional, i = args[0], 1
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-") or word == "-":
            continue
        head, eq, inline = word.partition("=")
        head = _dashed(head)
        if options.unknown(head):
            unknown.append(head)
        takes = head not in options.flags and head not in ("--help", "-h")
        value: str | bool = True
        if eq:
            value = inline
        elif takes and i < len(args) and not (args[i].startswith("-") and len(args[i]) > 1 and not args[i][1].isdigit()):
            value = args[i]
            i += 1
        name, dot, key = head.partition(".")
        if dot and name == "--speculative-config":
            dotted[key.replace("-", "_")] = _dotted_value(value) if isinstance(value, str) else value
            spelled.setdefault("speculative_config", name)
            continue
        dest = _READ.get(head)
        if dest is None:
            continue
        values[dest] = value
        spelled[dest] = head
    if positional is not None:
        values["model"] = positional
        spelled["model"] = "MODEL (after serve)"
    speculative: dict[str, object] | None = None
    raw = values.get("speculative_config")
    if isinstance(raw, str):
        try:
            loaded = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"argument --speculative-config: invalid JSON ({exc.msg} at column {exc.colno}): {raw}")
        else:
            if isinstance(loaded, dict):
                speculative = dict(loaded)
            else:
                errors.append(f"argument --speculative-config: a JSON object is wanted, not {type(loaded).__name__}: {raw}")
    elif raw is True:
        errors.append("argument --speculative-config: expected one argument")
    if dotted:
        speculative = {**(speculative or {}), **dotted}
    return VllmLaunch(tuple(words), environment, values, speculative, spelled, tuple(errors), tuple(unknown), serve, inherited)


def _with_config_file(args: list[str], serve: bool) -> list[str]:
    """The words with `--config FILE`'s options put in, as vLLM's parser does before it parses: after the
    positional model (`serve`), before the other words, so the line's own options win."""
    spelled = [i for i, word in enumerate(args) if word == "--config" or word.startswith("--config=")]
    if not spelled:
        return args
    index = spelled[0]
    inline = args[index].partition("=")[2]
    name = inline or (args[index + 1] if index + 1 < len(args) else "")
    rest = args[:index] + args[index + (1 if inline else 2):]
    if not name:
        raise EaglepatchError("--config names no file: vLLM stops before it parses the line", path="LAUNCH")
    if not name.endswith((".yaml", ".yml")):
        raise EaglepatchError("vLLM reads only a YAML config file (.yaml or .yml): it stops before it parses the line", path=name)
    words = _config_words(Path(name).expanduser())
    model_first = serve and rest and not rest[0].startswith("-")
    return [rest[0], *words, *rest[1:]] if model_first else [*words, *rest]


def _config_words(path: Path) -> list[str]:
    """A config file's keys as the options vLLM turns them into: `true` a flag, a mapping its JSON."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; only safe_load is used

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EaglepatchError(f"the launch's --config file cannot be read ({exc.strerror or exc}): preflight reads it as vLLM does", path=str(path)) from None
    except yaml.YAMLError as exc:
        raise EaglepatchError(f"the launch's --config file is not YAML vLLM can read ({str(exc).splitlines()[0]})", path=str(path)) from None
    if not isinstance(loaded, dict):
        raise EaglepatchError("the launch's --config file holds no mapping of options", path=str(path))
    words: list[str] = []
    for key, value in loaded.items():
        option = f"--{key}"
        if isinstance(value, bool):
            words += [option] if value else []
        elif isinstance(value, dict):
            words += [option, json.dumps(value)]
        elif isinstance(value, list):
            words += [option, *(str(v) for v in value)] if value else []
        elif value is not None:
            words += [option, str(value)]
    return words


def _dotted_value(text: str) -> object:
    """A dotted key's value as vLLM's parser reads it: JSON where it is JSON, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
