"""Read stage: a launch's `--config server.yaml`, merged into its words as the release merges it.

SGLang's `prepare_server_args` hands argv to `ConfigArgumentMerger` when it holds `--config`: the YAML
mapping becomes words (`key: v` -> `--key v`, a `store_true` flag's `true` -> `--key`, a list ->
`--key a b`), put before the rest of the line, so the line's own options win.  What the merger of
a release does differs by release (which keys name an option, which actions it refuses, how a
mapping is passed): those differences are read from the tree's merger module, not listed here.
Every refusal of the merger (a second `--config`, a file that is not YAML, an option it does not
support) is an error the launch stops on, said as the merger says it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .server_options import ConfigMerger, Option, Options

if TYPE_CHECKING:
    from .source_cache import SourceCache

_MERGER_FILES = ("utils/server_args_config_parser.py", "server_args_config_parser.py")
_MERGER_CLASS = re.compile(r"^class ConfigArgumentMerger\b", re.MULTILINE)


def read_merger(cache: SourceCache, server_args: str) -> ConfigMerger | None:
    """The merger `server_args` (its text) hands `--config` to, or None where it hands it to none."""
    if "ConfigArgumentMerger" not in server_args:
        return None
    for rel in _MERGER_FILES:
        path = cache.srt / rel
        if not path.is_file():
            continue
        text = cache.read(path).text
        found = _MERGER_CLASS.search(text)
        if found is None:
            continue
        line = text.count("\n", 0, found.start()) + 1
        return ConfigMerger(f"{rel}:{line}", "_config_keys" in text, "_takes_one_value" in text, "json.dumps(value)" in text)
    return None


def merge_config(args: Sequence[str], options: Options, merger: ConfigMerger) -> tuple[list[str], list[str], str]:
    """(`args` with the config file's words put first, the merger's refusals, the file's path) for the
    words after the program; `args` itself when it holds no `--config`."""
    at = [i for i, word in enumerate(args) if word == "--config"]
    if not at:
        return list(args), [], ""
    if len(at) > 1:
        return list(args), ["Multiple config files specified! Only one allowed."], ""
    index = at[0]
    if index == len(args) - 1:
        return list(args), ["No config file specified after --config flag!"], ""
    name = args[index + 1]
    path = Path(name).expanduser()
    rest = [*args[:index], *args[index + 2 :]]
    if path.suffix.lower() not in (".yaml", ".yml"):
        return rest, [f"--config {name}: Config file must be YAML format, got: {path.suffix}"], name
    if not path.exists():
        return rest, [f"--config {name}: Config file not found: {name}"], name
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; only safe_load is used

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return rest, [f"--config {name}: cannot be read as YAML ({exc.__class__.__name__})"], name
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return rest, [f"--config {name}: Config file must contain a dictionary at root level"], name
    words, refused = config_words(data, options, merger)
    return [*words, *rest], [f"--config {name}: {why}" for why in refused], name


def config_words(data: dict, options: Options, merger: ConfigMerger) -> tuple[list[str], list[str]]:
    """The words the merger makes of a YAML mapping, and what it refuses (it stops at the first)."""
    every = list({id(o): o for o in options.by_string.values()}.values())
    store_true = {key for o in every if o.action == "store_true" for key in _keys(o, merger)}
    supported = [o for o in every if _supported(o, merger)]
    supported_keys = {key for o in supported for key in _keys(o, merger)}
    unsupported = {
        key: o
        for o in every
        if o not in supported and not {"--config", "--help", "-h"} & set(o.strings)
        for key in _keys(o, merger)
        if not merger.spellings or key not in supported_keys
    }
    words: list[str] = []
    for key, value in data.items():
        key = str(key)
        normal = key.replace("-", "_")
        if normal in unsupported:
            return words, [f"Unsupported config option '{normal}' (the option {unsupported[normal].strings[0]} is not a flag or a single value)"]
        if isinstance(value, bool):
            words += [f"--{key}"] if normal in store_true and value else [] if normal in store_true else [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            words += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict) and merger.json_mappings:
            words += [f"--{key}", json.dumps(value)]
        else:
            words += [f"--{key}", str(value)]
    return words, []


def _keys(option: Option, merger: ConfigMerger) -> Iterable[str]:
    yield option.dest
    if merger.spellings:
        yield from (s[2:].replace("-", "_") for s in option.strings if s.startswith("--"))


def _supported(option: Option, merger: ConfigMerger) -> bool:
    """A flag the merger writes: `store_true`, `store`, and (where the release says so) one taking one value."""
    return option.action in ("store_true", "store") or (merger.single_values and option.takes == "one")
