"""Read stage, records: the server's options as its argument parser declares them, and how the release
merges a `--config` file into a launch.  Frozen; read by read/launch_line.py, used by
read/launch_config.py and the preflight rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigMerger:
    """How the tree's ConfigArgumentMerger turns a YAML file into words."""

    at: str  # "utils/server_args_config_parser.py:31"
    spellings: bool  # a key may be any long spelling of an option (`_config_keys`), not only its dest
    single_values: bool  # any action taking one value is supported (`_takes_one_value`), not only `store`
    json_mappings: bool  # a mapping value is passed as JSON, not as Python's str() of it


@dataclass(frozen=True)
class ServeFront:
    """What the release's `sglang serve` does to the words before its server parser sees them
    (sglang/cli/serve.py, sglang/cli/utils.py): read from the tree, as the release changes it."""

    at: str  # "../cli/serve.py:90", where serve looks for the model path
    positional_model: bool  # a first word that is no option is the model path (`sglang serve MODEL ...`)
    model_path_spellings: tuple[str, ...]  # the words serve finds the model path by on the line itself, before `--config` is read


@dataclass(frozen=True)
class Option:
    """One `add_argument` of the tree's parser."""

    strings: tuple[str, ...]  # "--speculative-draft-model-path", "--speculative-draft-model"
    dest: str
    takes: str  # "none" | "one" | "many" | "optional"
    at: str  # "server_args.py:3931"
    required: bool = False
    choices: tuple[str, ...] = ()  # the values argparse accepts, when the tree spells them out
    action: str = "store"  # argparse's action by name ("store", "store_true", ...); "" for a class of the tree
    allowed: tuple[str, ...] | None = None  # every value `choices` admits, when read whole (None: not checked)
    allowed_open: str = ""  # where code of the tree can add to that list ("file:line"): a value outside it may be a plugin's


@dataclass(frozen=True)
class Options:
    by_string: Mapping[str, Option]
    allow_abbrev: bool
    at: str  # where they were read
    merger: ConfigMerger | None = None  # what `--config FILE` goes through, where the tree merges one
    serve_at: str | None = None  # where the release's `sglang` command adds `serve` ("" where it has none; None: not read)
    serve_front: ServeFront | None = None  # what `sglang serve` does to the words first (None: no sglang/cli/serve.py)

    def match(self, word: str) -> tuple[Option | None, str]:
        """The option a word names (exact, else a unique prefix when abbreviations are allowed), or
        None with why: argparse's "unrecognized" or "ambiguous"."""
        if word in self.by_string:
            return self.by_string[word], ""
        if self.allow_abbrev and word.startswith("--"):
            found = sorted({o.dest: o for s, o in self.by_string.items() if s.startswith(word)}.values(), key=lambda o: o.strings[0])
            if len(found) == 1:
                return found[0], ""
            if found:
                return None, f"ambiguous option: {word} could match " + ", ".join(o.strings[0] for o in found)
        return None, f"unrecognized argument: {word}"
