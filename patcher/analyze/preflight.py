"""Analyze stage: the launch-time rules `eaglepatch preflight` checks, each read from the tree where
the tree says it, the rest mirrored with the tree location printed beside the finding.

Every rule is a function of what was read (the launch line, the two checkpoints, the tree's own
facts in `TreeFacts`) to findings; none loads a weight or imports SGLang.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..read.checkpoint import Checkpoint
from ..read.launch_line import LaunchLine, literal_strings, parsed_module
from ..read.locate import SourceTree
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


def read_registry(tree: SourceTree) -> tuple[dict[str, str], tuple[str, ...]]:
    """Every class an `EntryClass = ...` of models/ names, with its module: what SGLang's registry
    serves an `architectures` entry with; and the model files that could not be read."""
    out: dict[str, str] = {}
    unreadable: list[str] = []
    for path in sorted(tree.models.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            unreadable.append(path.relative_to(tree.srt).as_posix())
            continue
        for match in _ENTRY.finditer(text):
            for name in re.findall(r"[A-Za-z_]\w*", match.group(1)):
                out.setdefault(name, path.relative_to(tree.srt).as_posix())
    return out, tuple(unreadable)


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


def argument_branches(tree: SourceTree) -> list[tuple[str, ast.If]]:
    """Every `if` of the server's argument handling ("file:line", node): server_args.py and, from
    0.5.16, the hooks under arg_groups/.  Read once; the rules below look for their shapes in it."""
    out: list[tuple[str, ast.If]] = []
    folder = tree.srt / "arg_groups"
    for path in [tree.srt / "server_args.py", *(sorted(folder.glob("*.py")) if folder.is_dir() else [])]:
        try:
            module = parsed_module(path)
        except (OSError, SyntaxError):
            continue
        rel = path.relative_to(tree.srt).as_posix()
        out += [(f"{rel}:{node.lineno}", node) for node in ast.walk(module) if isinstance(node, ast.If)]
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


def _first_line(tree: SourceTree, rels: Sequence[str], pattern: re.Pattern[str]) -> str:
    for rel in rels:
        path = tree.srt / rel
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, text in enumerate(lines, 1):
            if pattern.search(text):
                return f"{rel}:{number}"
    return ""


def _literal_list(path: Path, name: str) -> tuple[tuple[str, ...], int]:
    try:
        module = ast.parse(path.read_bytes())
    except (OSError, SyntaxError):
        return (), 0
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)), node.lineno
    return (), 0


def read_facts(tree: SourceTree, algorithms: Sequence[str] = ()) -> TreeFacts:
    registry, unreadable = read_registry(tree)
    keys: tuple[str, ...] = ()
    keys_at = ""
    for candidate in ("utils/hf_transformers_utils.py", "utils/hf_transformers/common.py", "hf_transformers_utils.py"):
        found, line = _literal_list(tree.srt / candidate, "CONTEXT_LENGTH_KEYS")
        if found:
            keys, keys_at = found, f"{candidate}:{line}"
            break
    switch, at = "", ""
    config = tree.srt / "configs" / "model_config.py"
    if config.is_file():
        for number, text in enumerate(config.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = CONTEXT_SWITCH.search(text)
            if match:
                switch, at = match.group(1) or match.group(2), f"configs/model_config.py:{number}"
                break
    hooks = sorted(p.relative_to(tree.srt).as_posix() for p in (tree.srt / "arg_groups").glob("*.py")) if (tree.srt / "arg_groups").is_dir() else []
    quantization_at = _first_line(tree, ["server_args.py", *hooks], _DRAFT_QUANTIZATION)
    attention_at = _first_line(tree, ["model_executor/model_runner.py", "speculative/draft_utils.py"], _DRAFT_ATTENTION)
    branches = argument_branches(tree)
    self_drafting, self_drafting_at = read_self_drafting(branches)
    return TreeFacts(registry, keys, keys_at, switch, at, tuple(algorithms), unreadable, read_aliases(branches), quantization_at,
                     attention_at, self_drafting, self_drafting_at)


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


def _finding(severity: str, check: str, message: str, when: str, where: str = "", fix: str = "") -> Finding:
    return Finding(severity, check, message, when, where, fix)  # type: ignore[arg-type]  # the rules pass literals


# --------------------------------------------------------------------------- the rules


def launch_rules(line: LaunchLine) -> Iterator[Finding]:
    for error in line.errors:
        fix = "spell the option out in full" if error.startswith("ambiguous") else "check the option's name in `--help` of this release"
        yield _finding("fail", "launch-arguments", f"the server's parser stops: {error}", "arguments", line.options.at, fix)
    for option in line.missing_required:
        yield _finding("fail", "launch-arguments", f"{option.strings[0]} is required", "arguments", option.at, f"pass {option.strings[0]}")


def registry_rule(facts: TreeFacts) -> Iterator[Finding]:
    if facts.unreadable:
        yield _finding("warn", "registry", f"{len(facts.unreadable)} model file(s) could not be read, so an architecture they register "
                       f"is not seen: {', '.join(facts.unreadable[:5])}", "before-load", facts.unreadable[0], "make the files readable (UTF-8)")


def alias_rule(asked: str | None, facts: TreeFacts) -> Iterator[Finding]:
    if asked is not None and asked.upper() in facts.aliases:
        runs_as, where = facts.aliases[asked.upper()]
        yield _finding("info", "algorithm-alias", f"--speculative-algorithm {asked} runs as {runs_as} in this release: "
                       f"{runs_as}'s hooks and draft are checked", "arguments", where)


def draft_path_rule(line: LaunchLine, algorithm: str | None, draft_option_at: str, target: Checkpoint | None,
                    facts: TreeFacts) -> Iterator[Finding]:
    if algorithm not in EAGLE_ALGORITHMS or line.get("speculative_draft_model_path") is not None:
        return
    arch = target.architectures[0] if target is not None and target.architectures else None
    itself = arch is not None and arch in facts.self_drafting
    if itself and algorithm == "EAGLE":
        yield _finding("info", "draft-path-missing", f"no --speculative-draft-model-path: {arch}'s own MTP layers are the draft "
                       "(the server uses the target's folder for it)", "arguments", facts.self_drafting_at)
        return
    said = (f"--speculative-algorithm {algorithm} without --speculative-draft-model-path: the server takes {arch} itself as the draft, "
            "which is no EAGLE-3 head: the target loads twice, then the draft fails") if itself else (
        f"--speculative-algorithm {algorithm} without --speculative-draft-model-path: the target loads, then the draft cannot")
    where = facts.self_drafting_at if itself else draft_option_at
    yield _finding("fail", "draft-path-missing", said, "after-target-load", where,
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
        yield _finding("fail", "draft-attention-backend", f"{spelled} is an MLA kernel, and the draft ({arch}) inherits it: its attention "
                       "is not MLA (no kv_lora_rank in its config.json)", "after-target-load", facts.draft_attention_at, fix)
    elif not given:
        yield _finding("info", "draft-attention-backend", f"the target is MLA and the draft ({arch}) is not: the draft runs the attention "
                       "backend the server picks for the target on this GPU; if that is an MLA kernel, the draft cannot use it",
                       "after-target-load", facts.draft_attention_at, fix)


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
    yield _finding("warn", "draft-quantization", f"the draft inherits --quantization {method}, but its checkpoint is not quantized ({held}): "
                   "it fails to load, or is quantized on the fly unlike how it was trained", "after-target-load",
                   facts.draft_quantization_at, fix)


def architecture_rules(target: Checkpoint | None, draft: Checkpoint | None, algorithm: str | None, facts: TreeFacts) -> Iterator[Finding]:
    for what, checkpoint, when in (("target", target, "before-load"), ("draft", draft, "after-target-load")):
        if checkpoint is None:
            continue
        names = checkpoint.architectures
        if not names:
            yield _finding("fail", f"{what}-architecture", f"the {what}'s config.json names no architectures", when,
                           str(checkpoint.path / "config.json"), "set `architectures` in config.json")
        elif names[0] not in facts.registry:
            yield _finding("fail", f"{what}-architecture", f"the {what}'s architecture {names[0]} is not served by this release "
                           "(no EntryClass under models/ names it)", when, "models/", "use a release that has it, or a draft of a registered class")
        else:
            yield _finding("info", f"{what}-architecture", f"the {what}'s {names[0]} is served by {facts.registry[names[0]]}", when,
                           facts.registry[names[0]])
    if draft is not None and algorithm == "EAGLE" and draft.architectures and "Eagle3" in draft.architectures[0]:
        yield _finding("warn", "algorithm-draft-mismatch", f"--speculative-algorithm EAGLE with an EAGLE-3 draft ({draft.architectures[0]}): "
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
    if line.environment.get(switch, "").lower() in ("1", "true", "yes"):
        yield _finding("warn", "context-length", said + f"; {switch}=1 lets the draft run past the positions it was built for: "
                       "long requests may fail or degrade", "first-request", where, "use a draft trained for the target's context, or cap --context-length")
    else:
        yield _finding("fail", "context-length", said + ": the draft's model config raises once the target has loaded", "after-target-load", where,
                       f"set {switch}=1 before the command, or pass --context-length {draft_context}")


def aux_layer_rule(target: Checkpoint, draft: Checkpoint, shift: tuple[str, str] | None) -> Iterator[Finding]:
    """`shift`: (how the target's own hook maps the draft's ids, "file:line" of that hook)."""
    eagle = draft.config.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    layers = target.number("num_hidden_layers")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        return
    if layers is not None:
        beyond = [i for i in ids if i >= layers]
        if beyond:
            yield _finding("fail", "aux-layer-ids", f"the draft's eagle_aux_hidden_state_layer_ids {ids} name layers {beyond} "
                           f"at or beyond the target's {layers}", "first-request", "", "use a draft trained on this target")
    if shift is not None:
        how, where = shift
        yield _finding("info", "aux-layer-ids", f"the draft's ids {ids} are {how} by the target's set_eagle3_layers_to_capture in this release",
                       "silent", where)


def vocab_rule(draft: Checkpoint, line: LaunchLine) -> Iterator[Finding]:
    small, full = draft.number("draft_vocab_size", text=False), draft.number("vocab_size", text=False)
    if small is None or full is None or small >= full:
        return
    if any(name.endswith("d2t") for name in draft.weights) or line.get("speculative_token_map"):
        return
    where = ", ".join(draft.weight_files) or "no .safetensors in the folder"
    yield _finding("warn", "draft-vocab-mapping", f"the draft's draft_vocab_size ({small}) is below vocab_size ({full}) and its weights hold no d2t "
                   "mapping: its tokens map to the wrong ids and nearly nothing is accepted", "silent", where,
                   "use the draft's weights with their d2t tensor, or pass --speculative-token-map")


def hidden_size_rule(target: Checkpoint, draft: Checkpoint) -> Iterator[Finding]:
    want = target.number("hidden_size")
    have = draft.number("target_hidden_size", text=False) or draft.number("hidden_size", text=False)
    if want is not None and have is not None and want != have:
        key = "target_hidden_size" if draft.number("target_hidden_size", text=False) else "hidden_size"
        yield _finding("fail", "hidden-size", f"the draft expects target hidden states of {have} ({key}), the target's are {want}",
                       "after-target-load", str(draft.path / "config.json"), "use a draft trained on this target")


def hook_shift(source: str | None) -> str | None:
    """How a `set_eagle3_layers_to_capture` body maps the ids it is given: read from its text."""
    if source is None:
        return None
    if re.search(r"\+\s*1\b", source):
        conditional = re.search(r"if\s+[^\n]*layer_ids\[0\]|if\s+[^\n]*==\s*1", source)
        return "shifted by one only in some cases (the hook tests the ids first)" if conditional else "shifted by one (each k becomes k + 1)"
    return "taken as they are"
