"""Analyze stage: the launch-time rules `eaglepatch preflight` checks, each read from the tree where
the tree says it, the rest mirrored with the tree location printed beside the finding.

Every rule is a function of what was read (the launch line, the two checkpoints, the tree's own
facts in `TreeFacts`) to findings; none loads a weight or imports SGLang.
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError
from ..read.checkpoint import Checkpoint
from ..read.launch_line import LaunchLine, literal_strings
from ..read.source_cache import SourceCache
from ..read.statements import statement_walk, walk
from ..read.text import WordFinder
from ..records import Finding

CONTEXT_SWITCH = re.compile(r"envs\.(SGLANG_\w*LONGER_CONTEXT\w*)\.get\(\)|\b(SGLANG_\w*LONGER_CONTEXT\w*)\b")
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\(?[\w ,]+\)?)", re.MULTILINE)
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3")  # the algorithms whose draft is an EAGLE head, loaded from --speculative-draft-model-path


@dataclass(frozen=True)
class TreeFacts:
    """What the rules read of the tree, each with where it was read."""

    registry: dict[str, str] = field(default_factory=dict)  # architecture -> "models/file.py"
    context_keys: tuple[str, ...] = ()
    context_keys_at: str = ""
    context_switch: str = ""  # the environment variable that lets a longer context through
    context_at: str = ""  # where the check raises
    algorithms: tuple[str, ...] = ()  # the tree's enum members
    unreadable: tuple[str, ...] = ()  # model files the registry could not read: an architecture may hide there
    aliases: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # "NEXTN" -> ("EAGLE", "server_args.py:2352")
    draft_quantization_at: str = ""  # where the draft falls back to the target's --quantization
    draft_attention_at: str = ""  # where a draft worker takes its own attention backend, when one is given
    self_drafting: tuple[str, ...] = ()  # architectures whose own MTP layers are the draft when no path is given
    self_drafting_at: str = ""
    draft_rewrites: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # "DeepseekV3ForCausalLM" -> ("...NextN", "file:line")
    dtype_at: str = ""  # where a model config turns `--dtype` (and its config.json) into the dtype it loads in
    dflash_fallback_at: str = ""  # where DFLASH picks the target's layers itself when the draft names none
    dflash_range_at: str = ""  # where DFLASH refuses a target layer id outside the target


def read_registry(cache: SourceCache) -> tuple[dict[str, str], tuple[str, ...]]:
    """Every class an `EntryClass = ...` of models/ names, with its module: what SGLang's registry
    serves an `architectures` entry with; and the model files that could not be read."""
    out: dict[str, str] = {}
    unreadable: list[str] = []
    for path in sorted((cache.srt / "models").rglob("*.py")):
        try:
            text = cache.read(path).text
        except EaglepatchError:
            unreadable.append(cache.rel(path))
            continue
        for match in _ENTRY.finditer(text):
            for name in re.findall(r"[A-Za-z_]\w*", match.group(1)):
                out.setdefault(name, cache.rel(path))
    return out, tuple(unreadable)


@dataclass(frozen=True)
class DraftLoader:
    """What the draft class's `load_weights` accepts, read from its module (and the models modules it
    imports from): a weight whose name, renamed as it renames them, starts with none of the modules any
    `__init__` there holds is skipped without a word, its parameter left as initialised."""

    cls: str
    at: str  # "file:line" of its load_weights
    modules: frozenset[str]  # every `self.X = ...` of an `__init__` in those files, and "model"
    renames: tuple[tuple[str, str], ...] = ()  # its str -> str dict literals, and `re.sub` patterns ("re:" + pattern)
    # names it takes another way (`if "d2t" in name: self.hot_token_id = ...`, or `...; continue`) or leaves out
    # on purpose (`if "d2t" not in name and "t2d" not in name: load it`): no weight of those is skipped unawares
    consumed: tuple[str, ...] = ()


def read_draft_loader(cache: SourceCache, rel: str, cls: str) -> DraftLoader | None:
    """None where the class's module, or a `load_weights` in it, cannot be read, or the loader is not
    of the EAGLE heads' shape (a name it does not find falls back to `f"model.{name}"`, then is
    skipped): nothing is said of it."""
    module = _parsed_or_none(cache, cache.srt / rel)
    if module is None:
        return None
    loaders = [n for n in statement_walk(module) if isinstance(n, ast.FunctionDef) and n.name == "load_weights"]
    owner = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    own = [n for n in (owner.body if owner else []) if isinstance(n, ast.FunctionDef) and n.name == "load_weights"]
    if not (own or loaders):
        return None
    loader = (own or loaders)[0]
    modules = {"model"}
    imported = [n.module for n in module.body if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("sglang.srt.models.")]
    for tree_module in [module, *(_parsed_or_none(cache, cache.srt / (m.removeprefix("sglang.srt.").replace(".", "/") + ".py")) for m in imported)]:
        for init in (n for n in statement_walk(tree_module) if isinstance(n, ast.FunctionDef) and n.name == "__init__") if tree_module else ():
            modules |= {t.attr for n in walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    if not any(isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant) and n.values[0].value == "model."
               for n in walk(loader)):
        return None  # not the EAGLE heads' `f"model.{name}"` fallback: a loader of another shape, not read
    renames = [(k.value, v.value) for n in walk(loader) if isinstance(n, ast.Dict) for k, v in zip(n.keys, n.values)
               if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Constant) and isinstance(v.value, str)]
    for n in walk(loader):
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "re.sub" and len(n.args) >= 2:
            pattern, replacement = n.args[0], n.args[1]
            if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) and isinstance(replacement, ast.Constant) and isinstance(replacement.value, str):
                renames.append(("re:" + pattern.value, replacement.value))
    consumed = [token for n in walk(loader) if isinstance(n, ast.If) and _takes_the_weight(n.body) for token in _name_tests(n.test)]
    consumed += [token for n in walk(loader) if isinstance(n, ast.If) for token in _left_out(n.test)]
    return DraftLoader(cls, f"{rel}:{loader.lineno}", frozenset(modules), tuple(renames), tuple(dict.fromkeys(consumed)))


def _takes_the_weight(body: Sequence[ast.stmt]) -> bool:
    """A branch that does something of its own with the weight: goes on to the next (`continue`) or keeps
    it on the model (`self.hot_token_id = ...`), rather than falling through to the plain loading."""
    for node in (n for statement in body for n in walk(statement)):
        if isinstance(node, ast.Continue):
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" for t in targets):
            return True
    return False


def _left_out(test: ast.expr) -> list[str]:
    """The strings `"t2d" not in name` (joined by `and`) keep out of a branch that loads the others."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return [part.left.value for part in parts
            if isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.NotIn)
            and isinstance(part.left, ast.Constant) and isinstance(part.left.value, str)]


def _name_tests(test: ast.expr) -> list[str]:
    """The strings `"d2t" in name`, `name == "d2t"`, `name.endswith(".d2t")` (joined by `or`) test a name for."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return [token for value in test.values for token in _name_tests(value)]
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], ast.In) and isinstance(left, ast.Constant) and isinstance(left.value, str):
            return [left.value]
        if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
            return [right.value]
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in ("endswith", "startswith")
            and test.args and isinstance(test.args[0], ast.Constant) and isinstance(test.args[0].value, str)):
        return [test.args[0].value]
    return []


def _parsed_or_none(cache: SourceCache, path: Path) -> ast.Module | None:
    try:
        return cache.module_ast(path)
    except EaglepatchError:
        return None


def unloaded_weights(names: Sequence[str], loader: DraftLoader) -> list[str]:
    """The weight names `loader` skips: renamed as its load_weights renames them (substring for
    substring), then neither taken another way nor starting with a module the class holds."""
    out = []
    for original in names:
        name = original
        for old, new in loader.renames:
            if old.startswith("re:"):
                name = re.sub(old[3:], new, name)
            elif old in name:
                name = name.replace(old, new)
        if any(token in name for token in loader.consumed):
            continue
        head = name.removeprefix("model.").split(".")[0]
        if head not in loader.modules:
            out.append(original)
    return out


def draft_weights_rule(draft: Checkpoint, loader: DraftLoader | None) -> Iterator[Finding]:
    if loader is None or not draft.weights:
        return
    skipped = unloaded_weights(sorted(draft.weights), loader)
    if not skipped:
        return
    shown = ", ".join(skipped[:4]) + (f", and {len(skipped) - 4} more" if len(skipped) > 4 else "")
    yield finding("warn", "draft-weights", f"{len(skipped)} of the draft's {len(draft.weights)} weights name modules {loader.cls} "
                   f"does not hold ({shown}): its load_weights skips them without a word and those parameters keep their "
                   "initial values", "silent", loader.at,
                   f"rename the draft's weights to the modules {loader.cls} loads, or use a draft exported for this release")


def _names_algorithm(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name == "speculative_algorithm"


def _compared(test: ast.expr) -> list[str]:
    """The names `speculative_algorithm == "X"` (joined by `or`) tests for."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return [name for value in test.values for name in _compared(value)]
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and _names_algorithm(test.left)
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, str)):
        return [test.comparators[0].value]
    return []


def argument_branches(cache: SourceCache) -> list[tuple[str, ast.If]]:
    """Every `if` of the server's argument handling ("file:line", node): server_args.py and, from
    0.5.16, the hooks under arg_groups/.  Read once; the rules below look for their shapes in it."""
    out: list[tuple[str, ast.If]] = []
    folder = cache.srt / "arg_groups"
    for path in [cache.srt / "server_args.py", *(sorted(folder.glob("*.py")) if folder.is_dir() else [])]:
        module = _parsed_or_none(cache, path)
        if module is None:
            continue
        rel = cache.rel(path)
        out += [(f"{rel}:{node.lineno}", node) for node in statement_walk(module) if isinstance(node, ast.If)]  # an `if` is a statement
    return out


def read_aliases(branches: Sequence[tuple[str, ast.If]]) -> dict[str, tuple[str, str]]:
    """The algorithm names the server's argument handling renames before it builds a worker:
    `if self.speculative_algorithm == "NEXTN": self.speculative_algorithm = "EAGLE"` (server_args.py),
    or a hook returning the name it runs as (arg_groups/, 0.5.2x).  A name a branch renames only on
    some further condition is not taken: the rename read is the branch's own last word."""
    out: dict[str, tuple[str, str]] = {}
    for at, node in branches:
        names = _compared(node.test)
        if not names:
            continue
        runs_as = None
        for statement in node.body:
            if (isinstance(statement, ast.Assign) and any(_names_algorithm(t) for t in statement.targets)
                    or isinstance(statement, ast.Return)) and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str):
                runs_as = statement.value.value
        if runs_as is None:
            continue
        for name in names:
            if name != runs_as:
                out.setdefault(name, (runs_as, at))
    return out


def read_self_drafting(branches: Sequence[tuple[str, ast.If]]) -> tuple[tuple[str, ...], str]:
    """The architectures for which the server sets `speculative_draft_model_path = self.model_path`
    when none is given: `if model_arch in [...]: if self.speculative_draft_model_path is None: ...`."""
    for at, node in branches:
        if not (isinstance(node.test, ast.Compare) and isinstance(node.test.ops[0], ast.In)):
            continue
        if _names_algorithm(node.test.left):  # the algorithms branch around it, not the architectures
            continue
        names = literal_strings(node.test.comparators[0]) or ()
        body = ast.unparse(ast.Module(body=node.body, type_ignores=[]))
        if names and re.search(r"speculative_draft_model_path\s*=\s*(?:\w+\.)?model_path\b", body):
            return names, at
    return (), ""


_DRAFT_QUANTIZATION = re.compile(r"speculative_draft_model_quantization\s*=\s*(?:\w+\.)?quantization\b")
_DRAFT_ATTENTION = re.compile(r"\b(?:server_args|get_spec\(\))\.speculative_draft_attention_backend\b")


def _first_line(cache: SourceCache, rels: Sequence[str], pattern: re.Pattern[str]) -> str:
    for rel in rels:
        try:
            lines = cache.read(cache.srt / rel).lines
        except EaglepatchError:
            continue
        for number, text in enumerate(lines, 1):
            if pattern.search(text):
                return f"{rel}:{number}"
    return ""


def _literal_list(cache: SourceCache, path: Path, name: str) -> tuple[tuple[str, ...], int]:
    module = _parsed_or_none(cache, path)
    if module is None:
        return (), 0
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)), node.lineno
    return (), 0


def _tested_architectures(test: ast.expr) -> list[str]:
    """`is_draft_model and self.hf_config.architectures[0] == "X"` (or `in ["X", ...]`): the X's."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    flags = [part for part in parts if ast.unparse(part) in ("is_draft_model", "self.is_draft_model")]
    tests = [part for part in parts if isinstance(part, ast.Compare) and len(part.ops) == 1 and ast.unparse(part.left).endswith("architectures[0]")]
    if not flags or len(tests) != 1 or len(flags) + len(tests) != len(parts):
        return []  # a further condition (the algorithm, a config class): not the class for every draft
    right, op = tests[0].comparators[0], tests[0].ops[0]
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return [right.value]
    if isinstance(op, ast.In) and isinstance(right, (ast.List, ast.Tuple)):
        return [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def read_draft_rewrites(cache: SourceCache) -> dict[str, tuple[str, str]]:
    """The architectures the model config rewrites for a draft before the registry is asked
    (configs/model_config.py: `if is_draft_model and ...architectures[0] == "DeepseekV3ForCausalLM":
    ...architectures[0] = "DeepseekV3ForCausalLMNextN"`). Only a branch whose own body names the new
    class is taken; one that decides further (DeepSeek-V4's DSpark or MTP) is left out."""
    module = _parsed_or_none(cache, cache.srt / "configs" / "model_config.py")
    if module is None:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for node in statement_walk(module):
        if not isinstance(node, ast.If):
            continue
        names = _tested_architectures(node.test)
        new = [s.value.value for s in node.body if isinstance(s, ast.Assign) and len(s.targets) == 1
               and ast.unparse(s.targets[0]).endswith("architectures[0]") and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)]
        if names and len(new) == 1:
            for name in names:
                out.setdefault(name, (new[0], f"configs/model_config.py:{node.lineno}"))
    return out


def draft_loaded_as(architecture: str, rewrites: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    """The class the model config leaves a draft's `architecture` as, and where it was rewritten
    ("" when it is not): the branches run in file order, so A -> B then B -> C leaves C."""
    name, at = architecture, ""
    for _ in range(len(rewrites)):
        step = rewrites.get(name)
        if step is None or step[0] == name or at and int(step[1].rpartition(":")[2]) <= int(at.rpartition(":")[2]):
            break
        name, at = step
    return name, at


def read_facts(cache: SourceCache, algorithms: Sequence[str] = ()) -> TreeFacts:
    """What the rules read of the tree, through the run's reading of it."""
    registry, unreadable = read_registry(cache)
    keys: tuple[str, ...] = ()
    keys_at = ""
    for candidate in ("utils/hf_transformers_utils.py", "utils/hf_transformers/common.py", "hf_transformers_utils.py"):
        found, line = _literal_list(cache, cache.srt / candidate, "CONTEXT_LENGTH_KEYS")
        if found:
            keys, keys_at = found, f"{candidate}:{line}"
            break
    switch, at = "", ""
    config = cache.srt / "configs" / "model_config.py"
    if config.is_file():
        try:
            config_lines: Sequence[str] = cache.read(config).lines
        except EaglepatchError:
            config_lines = ()
        for number, text in enumerate(config_lines, 1):
            match = CONTEXT_SWITCH.search(text)
            if match:
                switch, at = match.group(1) or match.group(2), f"configs/model_config.py:{number}"
                break
    groups = cache.srt / "arg_groups"
    hooks = sorted(cache.rel(p) for p in groups.glob("*.py")) if groups.is_dir() else []
    quantization_at = _first_line(cache, ["server_args.py", *hooks], _DRAFT_QUANTIZATION)
    attention_at = _first_line(cache, ["model_executor/model_runner.py", "speculative/draft_utils.py"], _DRAFT_ATTENTION)
    branches = argument_branches(cache)
    self_drafting, self_drafting_at = read_self_drafting(branches)
    dtype_at = _first_line(cache, ["configs/model_config.py"], _DTYPE_RESOLUTION)
    dflash = ["speculative/dflash_utils.py"]
    return TreeFacts(registry, keys, keys_at, switch, at, tuple(algorithms), unreadable, read_aliases(branches), quantization_at,
                     attention_at, self_drafting, self_drafting_at, read_draft_rewrites(cache), dtype_at,
                     _first_line(cache, dflash, _DFLASH_FALLBACK), _first_line(cache, dflash, _DFLASH_RANGE))


def derived_context(config: Checkpoint, keys: Sequence[str]) -> int | None:
    """The context length SGLang derives from a config (get_context_length, mirrored): the first of
    `keys` present, times the rope scaling factor unless the scaling keeps the original length."""
    text = config.text_config
    rope = text.get("rope_scaling")
    factor: float = 1
    if isinstance(rope, dict):
        factor = rope.get("factor", 1) if isinstance(rope.get("factor", 1), (int, float)) else 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in keys or ("max_position_embeddings",):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(factor * value)
    return None


def finding(severity: str, check: str, message: str, when: str, where: str = "", fix: str = "") -> Finding:
    return Finding(severity, check, message, when, where, fix)  # type: ignore[arg-type]  # the rules pass literals


# --------------------------------------------------------------------------- the rules


def launch_rules(line: LaunchLine) -> Iterator[Finding]:
    for error in line.errors:
        fix = "spell the option out in full" if error.startswith("ambiguous") else "check the option's name in `--help` of this release"
        yield finding("fail", "launch-arguments", f"the server's parser stops: {error}", "arguments", line.options.at, fix)
    for option in line.missing_required:
        yield finding("fail", "launch-arguments", f"{option.strings[0]} is required", "arguments", option.at, f"pass {option.strings[0]}")
    for message, extended in line.doubts:
        yield finding("warn", "launch-arguments", f"the server's parser stops unless a plugin adds the value: {message}", "arguments",
                       extended, "check the value against `--help` of this release, or load the plugin that adds it")


def registry_rule(facts: TreeFacts) -> Iterator[Finding]:
    if facts.unreadable:
        yield finding("warn", "registry", f"{len(facts.unreadable)} model file(s) could not be read, so an architecture they register "
                       f"is not seen: {', '.join(facts.unreadable[:5])}", "before-load", facts.unreadable[0], "make the files readable (UTF-8)")


def alias_rule(asked: str | None, facts: TreeFacts) -> Iterator[Finding]:
    if asked is not None and asked.upper() in facts.aliases:
        runs_as, where = facts.aliases[asked.upper()]
        yield finding("info", "algorithm-alias", f"--speculative-algorithm {asked} runs as {runs_as} in this release: "
                       f"{runs_as}'s hooks and draft are checked", "arguments", where)


def draft_path_rule(line: LaunchLine, algorithm: str | None, draft_option_at: str, target: Checkpoint | None,
                    facts: TreeFacts) -> Iterator[Finding]:
    if algorithm not in EAGLE_ALGORITHMS or line.get("speculative_draft_model_path") is not None:
        return
    arch = target.architectures[0] if target is not None and target.architectures else None
    itself = arch is not None and arch in facts.self_drafting
    if itself and algorithm == "EAGLE":
        yield finding("info", "draft-path-missing", f"no --speculative-draft-model-path: {arch}'s own MTP layers are the draft "
                       "(the server uses the target's folder for it)", "arguments", facts.self_drafting_at)
        return
    said = (f"--speculative-algorithm {algorithm} without --speculative-draft-model-path: the server takes {arch} itself as the draft, "
            "which is no EAGLE-3 head: the target loads twice, then the draft fails") if itself else (
        f"--speculative-algorithm {algorithm} without --speculative-draft-model-path: the target loads, then the draft cannot")
    where = facts.self_drafting_at if itself else draft_option_at
    yield finding("fail", "draft-path-missing", said, "after-target-load", where,
                   "pass --speculative-draft-model-path with the EAGLE-3 draft's folder")


def is_mla(checkpoint: Checkpoint) -> bool:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): its config compresses the KV into a latent."""
    return checkpoint.number("kv_lora_rank") is not None


_ATTENTION_OPTIONS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend")


def draft_attention_rule(target: Checkpoint, draft: Checkpoint, line: LaunchLine, facts: TreeFacts) -> Iterator[Finding]:
    """An MLA target's attention kernel, inherited by a draft whose attention is not MLA."""
    if not facts.draft_attention_at or not is_mla(target) or is_mla(draft) or line.get("speculative_draft_attention_backend"):
        return
    own = line.options.by_string.get("--speculative-draft-attention-backend")
    if own is None:
        return
    arch = draft.architectures[0] if draft.architectures else "the draft"
    given = {dest: value for dest in _ATTENTION_OPTIONS if (value := line.get(dest))}
    latent = {dest: value for dest, value in given.items() if "mla" in value.lower()}
    backend = line.options.by_string.get("--attention-backend")
    plain = next((c for c in ("fa3", "flashinfer", "triton") if c in (backend.choices if backend else ())), "<a backend for MHA>")
    fix = f"pass --speculative-draft-attention-backend {plain} (or another of the release's backends that is not MLA)"
    if latent:
        spelled = ", ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in latent.items())
        yield finding("fail", "draft-attention-backend", f"{spelled} is an MLA kernel, and the draft ({arch}) inherits it: its attention "
                       "is not MLA (no kv_lora_rank in its config.json)", "after-target-load", facts.draft_attention_at, fix)
    elif not given:  # users' reports: on Hopper and Blackwell the pick is an MLA kernel (trtllm_mla on GB300)
        yield finding("warn", "draft-attention-backend", f"the target is MLA and the draft ({arch}) is not, and no backend is given: "
                       "the draft runs the attention backend the server picks for the target on this GPU, an MLA kernel on Hopper "
                       "and Blackwell GPUs, which the draft cannot run", "after-target-load", facts.draft_attention_at, fix)


def draft_quantization_rule(draft: Checkpoint, line: LaunchLine, facts: TreeFacts) -> Iterator[Finding]:
    """`--quantization` carried over to a draft whose checkpoint is not quantized that way."""
    method = line.get("quantization")
    if not facts.draft_quantization_at or method is None or method == "unquant" or line.get("speculative_draft_model_quantization"):
        return
    if isinstance(draft.config.get("quantization_config"), dict) or isinstance(draft.text_config.get("quantization_config"), dict):
        return
    own = line.options.by_string.get("--speculative-draft-model-quantization")
    dtypes = sorted({w.dtype for w in draft.weights.values() if w.dtype})
    held = f"its weights are {', '.join(dtypes)}" if dtypes else "its config.json has no quantization_config"
    fix = "pass --speculative-draft-model-quantization unquant" if own is not None and "unquant" in own.choices else (
        "pass --speculative-draft-model-quantization with the draft's own method")
    yield finding("warn", "draft-quantization", f"the draft inherits --quantization {method}, but its checkpoint is not quantized ({held}): "
                   "it fails to load, or is quantized on the fly unlike how it was trained", "after-target-load",
                   facts.draft_quantization_at, fix)


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_QUANTIZED = (".qweight", ".qzeros", ".weight_packed", ".weight_scale", ".scales")


def self_mtp_quantization_rule(target: Checkpoint | None, line: LaunchLine, algorithm: str | None, facts: TreeFacts) -> Iterator[Finding]:
    """A target that is its own draft (its MTP layers, the server pointing the draft at the target's
    folder) inherits the target's quantization for them; a GPTQ/AWQ checkpoint that keeps its MTP
    layers unquantized (plain `.weight`s where the other layers hold `.qweight`s) fails to load them."""
    if target is None or algorithm != "EAGLE" or not facts.draft_quantization_at:
        return  # MTP drafts run as EAGLE (NEXTN is renamed to it)
    path = line.get("speculative_draft_model_path")
    own = not target.architectures or target.architectures[0] not in facts.self_drafting
    if (path is None and own) or (path is not None and Path(path).expanduser().resolve() != target.path.resolve()):
        return  # the draft is another checkpoint: draft-quantization speaks of it
    if line.get("speculative_draft_model_quantization"):
        return
    method = _quant_method(target)
    layers = target.number("num_hidden_layers")
    if method is None or layers is None:
        return
    mtp = [n for n in target.weights if "mtp" in n.split(".") or ((m := _LAYER.search(n)) is not None and int(m.group(1)) >= layers)]
    if not mtp or any(n.endswith(_QUANTIZED) for n in mtp) or not any(n.endswith(_QUANTIZED) for n in target.weights):
        return
    plain = sorted({target.weights[n].dtype for n in mtp if n.endswith(".weight") and target.weights[n].dtype})
    option = line.options.by_string.get("--speculative-draft-model-quantization")
    fix = "pass --speculative-draft-model-quantization unquant" if option is not None and "unquant" in option.choices else (
        "point --speculative-draft-model-path at an MTP checkpoint quantized as the target")
    yield finding("fail", "draft-quantization", f"the draft is the target's own MTP layers, which inherit its quantization ({method}), "
                   f"but the checkpoint keeps them unquantized ({len(mtp)} tensors such as {sorted(mtp)[0]}, {'/'.join(plain) or 'plain'} "
                   "`.weight`s, where its other layers hold `.qweight`s): loading the draft fails", "after-target-load",
                   facts.draft_quantization_at, fix)


def _quant_method(checkpoint: Checkpoint) -> str | None:
    for config in (checkpoint.config, checkpoint.text_config):
        quantization = config.get("quantization_config")
        if isinstance(quantization, dict) and isinstance(quantization.get("quant_method"), str):
            return str(quantization["quant_method"])
    return None


def architecture_rules(target: Checkpoint | None, draft: Checkpoint | None, algorithm: str | None, facts: TreeFacts) -> Iterator[Finding]:
    for what, checkpoint, when in (("target", target, "before-load"), ("draft", draft, "after-target-load")):
        if checkpoint is None:
            continue
        names = checkpoint.architectures
        loaded, rewritten_at = draft_loaded_as(names[0], facts.draft_rewrites) if what == "draft" and names else ("", "")
        if rewritten_at:  # what the registry is asked for is the class the model config names
            yield finding("info", "draft-architecture", f"the draft's {names[0]} is loaded as {loaded} (the model config "
                           "rewrites it for a draft)", when, rewritten_at)
            names = (loaded, *names[1:])
        if not names:
            yield finding("fail", f"{what}-architecture", f"the {what}'s config.json names no architectures", when,
                           str(checkpoint.path / "config.json"), "set `architectures` in config.json")
        elif names[0] not in facts.registry:
            yield finding("fail", f"{what}-architecture", f"the {what}'s architecture {names[0]} is not served by this release "
                           "(no EntryClass under models/ names it)", when, "models/", "use a release that has it, or a draft of a registered class")
        else:
            yield finding("info", f"{what}-architecture", f"the {what}'s {names[0]} is served by {facts.registry[names[0]]}", when,
                           facts.registry[names[0]])
    if draft is not None and algorithm == "EAGLE" and draft.architectures and "Eagle3" in draft.architectures[0]:
        yield finding("warn", "algorithm-draft-mismatch", f"--speculative-algorithm EAGLE with an EAGLE-3 draft ({draft.architectures[0]}): "
                       "the draft gets no aux hidden states and accepts almost nothing", "silent", "", "pass --speculative-algorithm EAGLE3")


def context_rule(target: Checkpoint, draft: Checkpoint, line: LaunchLine, facts: TreeFacts) -> Iterator[Finding]:
    asked = line.get("context_length")
    target_context = int(asked) if asked is not None and asked.isdigit() else derived_context(target, facts.context_keys)
    draft_context = derived_context(draft, facts.context_keys)
    if target_context is None or draft_context is None or draft_context >= target_context:
        return
    switch = facts.context_switch or "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    where = facts.context_at or "configs/model_config.py"
    said = f"the draft's context length ({draft_context}, from its config.json) is below the target's ({target_context}" + (
        ", --context-length)" if asked is not None else ", from its config.json)")
    value, source = line.variable(switch) or ("", "")
    if value.lower() in ("1", "true", "yes"):
        yield finding("warn", "context-length", said + f"; {switch}={value} ({source}) lets the draft run past the positions it was built "
                       "for: long requests may fail or degrade", "first-request", where, "use a draft trained for the target's context, or cap --context-length")
    else:
        yield finding("fail", "context-length", said + ": the draft's model config raises once the target has loaded", "after-target-load", where,
                       f"set {switch}=1 before the command, or pass --context-length {draft_context}")


def aux_layer_rule(target: Checkpoint, draft: Checkpoint, hook: TargetHook | None) -> Iterator[Finding]:
    """The draft's aux-layer ids through the target's own hook: the layers captured in this release."""
    eagle = draft.config.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    layers = target.number("num_hidden_layers")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return
    config = {"num_hidden_layers": layers} if layers is not None else {}
    mapping = layer_mapping(hook.source, ids, config) if hook is not None else None
    where = hook.at if hook is not None else ""
    captured = list(mapping.captured) if mapping is not None and mapping.captured is not None else None
    if layers is not None:
        limit = layers + 1 if hook is not None and hook.captures_final else layers
        beyond = [i for i in (captured if captured is not None else ids) if i >= limit]
        if beyond and captured is not None and captured != ids:
            yield finding("fail", "aux-layer-ids", f"the draft's eagle_aux_hidden_state_layer_ids {ids} become layers {captured} in this "
                           f"release's set_eagle3_layers_to_capture: {beyond} at or beyond the target's {layers} never capture",
                           "first-request", where, "use a draft trained on this target (for this release's layer-id convention)")
        elif beyond:
            yield finding("fail", "aux-layer-ids", f"the draft's eagle_aux_hidden_state_layer_ids {ids} name layers {beyond} "
                           f"at or beyond the target's {layers}", "first-request", where, "use a draft trained on this target")
    if mapping is not None:
        chosen = f" (its test {mapping.condition})" if mapping.condition else ""
        layers_of = f": the backbone captures what enters layers {captured}" if captured is not None else ""
        yield finding("info", "aux-layer-ids", f"the draft's ids {ids} are {mapping.how} by the target's "
                       f"set_eagle3_layers_to_capture in this release{chosen}{layers_of}", "silent", where)


def vocab_rule(draft: Checkpoint, line: LaunchLine) -> Iterator[Finding]:
    small, full = draft.number("draft_vocab_size", text=False), draft.number("vocab_size", text=False)
    if small is None or full is None or small >= full:
        return
    if any(name.endswith("d2t") for name in draft.weights) or line.get("speculative_token_map"):
        return
    where = ", ".join(draft.weight_files) or "no .safetensors in the folder"
    yield finding("warn", "draft-vocab-mapping", f"the draft's draft_vocab_size ({small}) is below vocab_size ({full}) and its weights hold no d2t "
                   "mapping: its tokens map to the wrong ids and nearly nothing is accepted", "silent", where,
                   "use the draft's weights with their d2t tensor, or pass --speculative-token-map")


_DTYPE_RESOLUTION = re.compile(r"^def _get_and_verify_dtype\b")
_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32", "bfloat16": "bfloat16"}


def loaded_dtype(config: Checkpoint, asked: str) -> str | None:
    """The dtype SGLang loads a model in for `--dtype asked` (model_config's _get_and_verify_dtype,
    mirrored): "auto" takes the text config's `dtype`/`torch_dtype`, float32 (or none) cast down to
    float16 (bfloat16 for Gemma); None for a name it does not know."""
    if asked.lower() != "auto":
        return _DTYPES.get(asked.lower())
    text = config.text_config
    own = text.get("dtype") or text.get("torch_dtype")
    found = _DTYPES.get(own, "float32") if isinstance(own, str) else "float32"
    if found == "float32":
        model_type = text.get("model_type")
        return "bfloat16" if isinstance(model_type, str) and model_type.startswith("gemma") else "float16"
    return found


def dtype_rule(target: Checkpoint, draft: Checkpoint, line: LaunchLine, facts: TreeFacts) -> Iterator[Finding]:
    """The draft loads with the target's `--dtype`: with `auto`, each in its own config's dtype, and a
    bfloat16 target feeding a float16 draft fails the draft's first matmul (`mat1 and mat2 must have the
    same dtype`) when its CUDA graphs are captured."""
    asked = line.get("dtype") or "auto"
    if not facts.dtype_at or asked.lower() != "auto":
        return  # a dtype given loads both in it
    mine, theirs = loaded_dtype(target, asked), loaded_dtype(draft, asked)
    if mine is None or theirs is None or mine == theirs:
        return
    yield finding("fail", "dtype", f"with --dtype auto the target loads in {mine} and the draft in {theirs} (each from its config.json): "
                   "the draft's first layer gets the target's hidden states in the other dtype and raises 'mat1 and mat2 must have "
                   "the same dtype' when its CUDA graphs are captured", "after-target-load", facts.dtype_at,
                   f"pass --dtype {mine}, so both load in the target's dtype")


_DFLASH_FALLBACK = re.compile(r"^def build_target_layer_ids\b")
_DFLASH_RANGE = re.compile(r"out-of-range layer id")


def dflash_layer_rule(target: Checkpoint, draft: Checkpoint, hook: TargetHook | None, facts: TreeFacts) -> Iterator[Finding]:
    """A DFlash draft's `dflash_config.target_layer_ids`, checked as the release checks them (each below
    the target's layer count) and followed through the target's own DFlash hook (which shifts them, to
    capture after layer k): absent, the release picks the layers itself, and a draft trained on others
    accepts almost nothing, without an error."""
    if not facts.dflash_fallback_at:
        return  # the release has no DFlash
    own = draft.config.get("dflash_config")
    ids = own.get("target_layer_ids") if isinstance(own, dict) else None
    ids = ids if ids is not None else draft.config.get("target_layer_ids")
    layers = target.number("num_hidden_layers")
    if ids is None:
        yield finding("warn", "dflash-layer-ids", "the draft's config.json names no dflash_config.target_layer_ids: the release picks the "
                       "target's layers itself; unless the draft was trained on those, it accepts almost nothing, without an error",
                       "silent", facts.dflash_fallback_at, "use the draft's own config.json, with the target_layer_ids it was trained on")
        return
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or layers is None:
        return
    outside = [i for i in ids if i < 0 or i >= layers]
    if outside:
        yield finding("fail", "dflash-layer-ids", f"the draft's dflash_config.target_layer_ids {ids} name {outside}, outside the target's "
                       f"{layers} layers: the release refuses them at start-up", "after-target-load", facts.dflash_range_at or facts.dflash_fallback_at,
                       "use a draft trained on this target")
        return
    mapping = layer_mapping(hook.source, ids, {"num_hidden_layers": layers}) if hook is not None else None
    captured = list(mapping.captured) if mapping is not None and mapping.captured is not None else None
    limit = layers + 1 if hook is not None and hook.captures_final else layers
    beyond = [i for i in captured or () if i >= limit]
    if beyond and hook is not None and mapping is not None:
        yield finding("fail", "dflash-layer-ids", f"the target's DFlash hook takes the draft's target_layer_ids {ids} to layers {captured}, "
                       f"{mapping.how}: {beyond} at or beyond its {layers} layers capture nothing, and the draft's first step fails",
                       "after-target-load", hook.at, "use a draft whose target_layer_ids stop below the last layer")


_BOOKKEEPING = frozenset({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "auto_map", "quantization_config"})


def keys_read(srt: Path, keys: Iterable[str]) -> set[str]:
    """Those of `keys` some Python file under `srt` names as a word (`config.norm_before_fc`,
    `getattr(config, "norm_before_fc", ...)`, `cfg.get("norm_before_fc")`): a byte search, no parse."""
    wanted = {key: (key.encode(), WordFinder([key])) for key in keys}
    found: set[str] = set()
    for folder, dirnames, filenames in os.walk(srt):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        for filename in filenames:
            if not filename.endswith(".py"):
                continue
            try:
                data = Path(folder, filename).read_bytes()
            except OSError:
                continue
            found |= {key for key, (word, finder) in wanted.items() if key not in found and word in data and finder.byte_offsets(data)}
            if len(found) == len(wanted):
                return found  # every key named: no need to read on
    return found


def draft_keys_rule(target: Checkpoint, draft: Checkpoint, srt: Path) -> Iterator[Finding]:
    """Keys the draft's config.json adds beyond the target's, set to something, that no code of this
    release reads (`norm_before_fc: true`): the draft runs as if they were unset, and accepts less
    than it was trained to, without an error."""
    own = {*target.config, *target.text_config}
    added = {k: v for k, v in draft.config.items() if k not in own and not k.startswith("_") and k not in _BOOKKEEPING
             and v not in (None, False, 0, "", [], {})}
    unread = sorted(set(added) - keys_read(srt, added)) if added else []
    if unread:
        spelled = ", ".join(f"{k} = {json.dumps(added[k])}" for k in unread)
        yield finding("warn", "draft-config-keys", f"the draft's config.json sets {spelled}, which no code of this release reads: the draft "
                       "runs as if unset, and accepts fewer tokens than it was trained to, without an error", "silent",
                       str(draft.path / "config.json"), "use a release that reads it, or a draft trained without it")


def hidden_size_rule(target: Checkpoint, draft: Checkpoint) -> Iterator[Finding]:
    want = target.number("hidden_size")
    have = draft.number("target_hidden_size", text=False) or draft.number("hidden_size", text=False)
    if want is not None and have is not None and want != have:
        key = "target_hidden_size" if draft.number("target_hidden_size", text=False) else "hidden_size"
        yield finding("fail", "hidden-size", f"the draft expects target hidden states of {have} ({key}), the target's are {want}",
                       "after-target-load", str(draft.path / "config.json"), "use a draft trained on this target")


@dataclass(frozen=True)
class TargetHook:
    """The target's own `set_eagle3_layers_to_capture`, as the aux-layer rule reads it."""

    source: str | None  # its `def`'s text; None where the file could not be read
    at: str  # "file:line"
    captures_final: bool = False  # a backbone of its module captures id == its layer count (after the loop)


def captures_after_last_layer(module: ast.Module) -> bool:
    """`self.end_layer in self.layers_to_capture` somewhere in the module: an id equal to the layer
    count captures the last layer's output (GPT-OSS), instead of never firing."""
    return any(isinstance(n, ast.Compare) and isinstance(n.left, ast.Attribute) and n.left.attr == "end_layer"
               and isinstance(n.ops[0], ast.In) and isinstance(n.comparators[0], ast.Attribute)
               and n.comparators[0].attr == "layers_to_capture" for n in walk(module))


class _Unknown(Exception):
    """The hook's body depends on something this reading does not follow."""


@dataclass(frozen=True)
class LayerMapping:
    """What the target's own `set_eagle3_layers_to_capture` does with the draft's ids, followed through
    its body with the ids bound: the layer ids it asks the backbone to capture."""

    captured: tuple[int, ...] | None  # None: the body could not be followed for these ids
    how: str  # "shifted by one (each k becomes k + 1)", "taken as they are", ...
    condition: str = ""  # "`<test on the ids>` is true|false": what chose the branch, when the hook has more than one


def _evaluate(node: ast.expr, env: Mapping[str, object]) -> object:
    """A value of the small language layer-id hooks are written in; `_Unknown` for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unknown(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_evaluate(e, env) for e in node.elts]
    if isinstance(node, ast.BoolOp):
        value: object = isinstance(node.op, ast.And)
        for operand in node.values:
            value = _evaluate(operand, env)
            if bool(value) is not isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _evaluate(node.operand, env)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_as_int(_evaluate(node.operand, env))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        left, right = _as_int(_evaluate(node.left, env)), _as_int(_evaluate(node.right, env))
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise _Unknown(_clipped_source(node))
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Subscript):
        sequence, index = _evaluate(node.value, env), _evaluate(node.slice, env)
        if isinstance(sequence, list) and isinstance(index, int) and -len(sequence) <= index < len(sequence):
            return sequence[index]
        raise _Unknown(_clipped_source(node))
    if isinstance(node, ast.Compare):
        current = _evaluate(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            other = _evaluate(comparator, env)
            if not _compare(op, current, other):
                return False
            current = other
        return True
    if isinstance(node, ast.Attribute) and ast.unparse(node) in env:  # `self.config.num_hidden_layers`: the target's
        return env[ast.unparse(node)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SEQUENCE_CALLS and len(node.args) == 1 and not node.keywords:
        value = _evaluate(node.args[0], env)
        if not isinstance(value, list) or node.func.id in ("max", "min") and not value:
            raise _Unknown(_clipped_source(node))
        return _SEQUENCE_CALLS[node.func.id](value)
    generator = node.generators[0] if isinstance(node, ast.ListComp) and len(node.generators) == 1 else None
    if isinstance(node, ast.ListComp) and generator is not None and isinstance(generator.target, ast.Name) and not generator.is_async:
        items, name = _evaluate(generator.iter, env), generator.target.id
        if not isinstance(items, list):
            raise _Unknown(_clipped_source(generator.iter))
        bound = [{**env, name: item} for item in items]
        return [_evaluate(node.elt, e) for e in bound if all(_evaluate(test, e) for test in generator.ifs)]
    raise _Unknown(_clipped_source(node))


def _clipped_source(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


_ARITHMETIC: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
}


def evaluate(node: ast.expr, env: Mapping[str, object]) -> object | None:
    """`node`'s value in the small language layer-id code is written in, `env` bound; None where the
    reading cannot follow it."""
    try:
        return _evaluate(node, env)
    except _Unknown:
        return None


_SEQUENCE_CALLS: dict[str, Callable[[list], object]] = {"list": list, "sorted": sorted, "len": len, "max": max, "min": min}


def _as_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _Unknown(repr(value))


def _compare(op: ast.cmpop, left: object, right: object) -> bool:
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.Eq):
        return left == right
    if isinstance(op, ast.NotEq):
        return left != right
    if isinstance(op, ast.In) and isinstance(right, list):
        return left in right
    if isinstance(op, ast.NotIn) and isinstance(right, list):
        return left not in right
    if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        a, b = _as_int(left), _as_int(right)
        return {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b}[type(op)]
    raise _Unknown(type(op).__name__)


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in walk(node))


def _only_leaves(body: Sequence[ast.stmt]) -> bool:
    """A branch that only leaves: the pipeline guard's `if not self.pp_group.is_last_rank: return`."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise)) and not any(_assigns_capture(s) for s in body)


def _run_capture(body: Sequence[ast.stmt], env: dict[str, object], parameter: str, conditions: list[str]) -> tuple[bool, object]:
    """The statements run with `env`: (stopped, the last value given to `*.layers_to_capture`, or None).
    A test this reading cannot evaluate is followed where one branch only leaves: the path on which the
    hook acts (the last pipeline rank)."""
    captured: object = None
    for statement in body:
        if isinstance(statement, (ast.Return, ast.Raise)):
            return True, captured
        if isinstance(statement, ast.If):
            try:
                test = bool(_evaluate(statement.test, env))
            except _Unknown:
                if _reads(statement.test, parameter) or _only_leaves(statement.body) == _only_leaves(statement.orelse):
                    raise
                test = not _only_leaves(statement.body)
            else:
                sets = any(_assigns_capture(s) for s in [*statement.body, *statement.orelse])
                if sets and _reads(statement.test, parameter) and not _is_none_test(statement.test, parameter):
                    conditions.append(f"`{ast.unparse(statement.test)}` is {'true' if test else 'false'}")
            stopped, value = _run_capture(statement.body if test else statement.orelse, env, parameter, conditions)
            captured = value if value is not None else captured
            if stopped:
                return True, captured
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "layers_to_capture" for t in targets):
                captured = _evaluate(statement.value, env)
            for target in targets:  # `num_layers = ...`, `self.layers_to_capture = ...`: read back later
                if isinstance(target, (ast.Name, ast.Attribute)):
                    try:
                        env[ast.unparse(target)] = _evaluate(statement.value, env)
                    except _Unknown:
                        env.pop(ast.unparse(target), None)
        elif _assigns_capture(statement):
            raise _Unknown(type(statement).__name__)  # a loop or `with` that sets the ids: not followed
    return False, captured


def _assigns_capture(statement: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "layers_to_capture" and isinstance(n.ctx, ast.Store) for n in walk(statement))


def _is_none_test(test: ast.expr, parameter: str) -> bool:
    """`layer_ids is None` / `is not None`: the default branch, not a condition on the ids' values."""
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == parameter
            and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def layer_mapping(source: str | None, ids: Sequence[int], config: Mapping[str, int] | None = None) -> LayerMapping | None:
    """The target's `set_eagle3_layers_to_capture` (its `def`'s text) followed with `ids` as its
    argument and `self.config.<key>` read from the target's `config` (GPT-OSS tests `max(layer_ids)
    == num_layers`): which layers it asks the backbone to capture, and whether a test on the ids
    decided it (0.5.18's DeepSeek-V2 shifts only when `layer_ids[0] == 1`)."""
    if source is None:
        return None
    try:
        function = ast.parse(textwrap.dedent(source)).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    arguments = [a.arg for a in (*function.args.posonlyargs, *function.args.args)][1:]  # after self
    if not arguments:
        return None
    if not any(_assigns_capture(s) for s in function.body):
        return None  # it hands the ids to another hook, or marks layers by flag: nothing to say from here
    conditions: list[str] = []
    try:
        env: dict[str, object] = {arguments[0]: list(ids), **{f"self.config.{k}": v for k, v in (config or {}).items()}}
        _, captured = _run_capture(function.body, env, arguments[0], conditions)
    except _Unknown as unknown:
        return LayerMapping(None, f"mapped by a body this reading does not follow ({unknown})")
    if not isinstance(captured, list) or not all(isinstance(i, int) for i in captured):
        return LayerMapping(None, "not handed on to the backbone's layers_to_capture")
    if captured == [i + 1 for i in ids]:
        how = "shifted by one (each k becomes k + 1)"
    elif captured == list(ids):
        how = "taken as they are"
    else:
        how = f"mapped to {captured}"
    return LayerMapping(tuple(captured), how, "; ".join(conditions))

# --------------------------------------------------------------------------- the rules, registered


@dataclass(frozen=True)
class Launch:
    """Everything a rule reads of one launch, read once by the engine: the line as the tree's parser
    reads it, the tree's facts, the two checkpoints, and what the target's analysis found."""

    line: LaunchLine
    facts: TreeFacts
    srt: Path
    asked: str | None = None  # --speculative-algorithm as typed
    algorithm: str | None = None  # what runs (NEXTN runs as EAGLE)
    target: Checkpoint | None = None
    draft: Checkpoint | None = None
    draft_option_at: str = ""  # where the parser declares --speculative-draft-model-path
    target_gaps: tuple[Finding, ...] = ()  # the target class's missing hooks, as `check --model` gives them
    target_hook: TargetHook | None = None  # the algorithm's own capture hook on the target class
    draft_loader: DraftLoader | None = None  # an EAGLE head's load_weights, read


Rule = Callable[[Launch], Iterable[Finding]]
RULES: list[Rule] = []  # in the order their findings are listed


def register(rule: Rule) -> Rule:
    """One rule more (pyupgrade's and Fixit's way): a function of the Launch, yielding findings."""
    RULES.append(rule)
    return rule


def run_rules(launch: Launch) -> tuple[Finding, ...]:
    return tuple(finding for rule in RULES for finding in rule(launch))


@register
def _launch_arguments(launch: Launch) -> Iterator[Finding]:
    yield from launch_rules(launch.line)
    yield from alias_rule(launch.asked, launch.facts)
    yield from registry_rule(launch.facts)


@register
def _draft_path(launch: Launch) -> Iterator[Finding]:
    yield from draft_path_rule(launch.line, launch.algorithm, launch.draft_option_at, launch.target, launch.facts)


@register
def _architectures(launch: Launch) -> Iterator[Finding]:
    yield from architecture_rules(launch.target, launch.draft, launch.algorithm, launch.facts)


@register
def _target_hooks(launch: Launch) -> Iterator[Finding]:
    yield from launch.target_gaps


@register
def _draft_weights(launch: Launch) -> Iterator[Finding]:
    if launch.draft is not None and launch.algorithm in EAGLE_ALGORITHMS:  # MTP and DFlash drafts load another way
        yield from draft_weights_rule(launch.draft, launch.draft_loader)


@register
def _pair(launch: Launch) -> Iterator[Finding]:
    """The rules that compare the draft with the target."""
    target, draft, line, facts = launch.target, launch.draft, launch.line, launch.facts
    if target is None or draft is None:
        return
    yield from context_rule(target, draft, line, facts)
    yield from aux_layer_rule(target, draft, launch.target_hook)
    if launch.algorithm == "DFLASH":
        yield from dflash_layer_rule(target, draft, launch.target_hook, facts)
    yield from vocab_rule(draft, line)
    yield from hidden_size_rule(target, draft)
    yield from dtype_rule(target, draft, line, facts)
    yield from draft_keys_rule(target, draft, launch.srt)
    yield from draft_attention_rule(target, draft, line, facts)


@register
def _quantization(launch: Launch) -> Iterator[Finding]:
    if launch.draft is not None:
        yield from draft_quantization_rule(launch.draft, launch.line, launch.facts)
    yield from self_mtp_quantization_rule(launch.target, launch.line, launch.algorithm, launch.facts)
