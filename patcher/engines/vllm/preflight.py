"""`eaglepatch preflight` on vLLM: a `vllm serve` launch read before it runs.

read (the launch line, the speculative config it carries, the two checkpoints' config.json, the facts
of the release: its SpeculativeConfig's fields, its EAGLE-3 whitelist, how it sizes the draft's
positions, whether its runner reads the draft's aux-layer ids) -> analyze (the target class as `check
--model` judges it, and the rules below) -> findings.  Every fact is read from the release, with the
file and line it came from; what a release does not have, its rule does not say.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...analyze.preflight import evaluate, finding, hidden_size_rule
from ...errors import EaglepatchError
from ...read.statements import walk
from ...records import Finding, PreflightReport
from .protocol import BASE

if TYPE_CHECKING:
    from ...engine import Resolved
    from ...read.checkpoint import Checkpoint
    from ...read.vllm_launch import VllmLaunch
    from .protocol import TargetGate
    from .tree import VllmTree

EAGLE3_METHOD = "eagle3"
_DRAFT_POSITIONS = "max_position_embeddings"
_AUX_IDS = "eagle_aux_hidden_state_layer_ids"
_DEFAULT_LAYERS = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")  # 0.11+, before
_CONTEXT_FILES = ("transformers_utils/model_arch_config_convertor.py", "config/model.py", "config/__init__.py", "config.py")
_RUNNER_FILES = ("v1/worker", "v1/spec_decode")


@dataclass(frozen=True)
class VllmFacts:
    """What the release's own code says about a speculative launch, each with where it says it."""

    gate: TargetGate | None
    fields: tuple[str, ...]  # SpeculativeConfig's fields ((): not read)
    fields_at: str
    raises_positions_at: str  # where it raises a draft's max_position_embeddings to the target's ("": never)
    cache_only_rope: tuple[str, ...] | None  # the RoPE types it does that for (None: every draft)
    context_keys: tuple[str, ...]  # the config keys the max model len is the smallest of
    context_at: str
    aux_ids_at: str  # where the runner reads the draft's eagle_aux_hidden_state_layer_ids ("": never)


def _speculative_class(tree: VllmTree) -> tuple[ast.ClassDef, str] | None:
    from .protocol import SPECULATIVE_CONFIGS

    for rel in SPECULATIVE_CONFIGS:
        module = tree.module_ast(rel)
        for node in module.body if module is not None else ():
            if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
                return node, rel
    return None


def _fields(found: tuple[ast.ClassDef, str] | None) -> tuple[tuple[str, ...], str]:
    if found is None:
        return (), ""
    node, rel = found
    names = tuple(
        s.target.id for s in node.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and "ClassVar" not in ast.unparse(s.annotation)
        and not s.target.id.startswith("_")
    )
    return names, f"{rel}:{node.lineno}"


def _position_raise(tree: VllmTree, found: tuple[ast.ClassDef, str] | None) -> tuple[str, tuple[str, ...] | None]:
    """(where the release sets a draft config's max_position_embeddings, the RoPE types it limits that to)."""
    if found is None:
        return "", None
    node, rel = found
    at = ""
    for statement in walk(node):
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == _DRAFT_POSITIONS for t in statement.targets):
            at = f"{rel}:{statement.lineno}"
            break
    if not at:
        return "", None
    module = tree.module_ast(rel)
    for statement in module.body if module is not None else ():
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and "ROPE" in t.id for t in statement.targets):
            words = [c.value for c in walk(statement.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if words:
                return at, tuple(words)
    return at, None


def _context_keys(tree: VllmTree) -> tuple[tuple[str, ...], str]:
    for rel in _CONTEXT_FILES:
        path = tree.cache.srt / rel
        try:
            if not path.is_file() or "possible_keys" not in tree.cache.read(path).text:
                continue
        except EaglepatchError:
            continue
        module = tree.module_ast(rel)
        for node in walk(module) if module is not None else ():
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "possible_keys" for t in node.targets) and isinstance(node.value, ast.List):
                keys = tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
                if _DRAFT_POSITIONS in keys:
                    return keys, f"{rel}:{node.lineno}"
    return (_DRAFT_POSITIONS,), ""


def _aux_ids_read(tree: VllmTree) -> str:
    """Where the runner reads the draft config's aux-layer ids: a string constant naming the key in a
    `getattr`/`hasattr` of the runner's or the EAGLE proposer's code."""
    srt = tree.cache.srt
    for folder in _RUNNER_FILES:
        for path in sorted((srt / folder).rglob("*.py")) if (srt / folder).is_dir() else ():
            try:
                if _AUX_IDS not in tree.cache.read(path).text:
                    continue
                module = tree.cache.module_ast(path)
            except EaglepatchError:
                continue
            for node in walk(module):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                    if any(isinstance(a, ast.Constant) and a.value == _AUX_IDS for a in node.args):
                        return f"{tree.rel(path)}:{node.lineno}"
    return ""


def read_vllm_facts(tree: VllmTree) -> VllmFacts:
    from .protocol import read_target_gate

    found = _speculative_class(tree)
    fields, fields_at = _fields(found)
    raises_at, rope = _position_raise(tree, found)
    keys, keys_at = _context_keys(tree)
    return VllmFacts(read_target_gate(tree), fields, fields_at, raises_at, rope, keys, keys_at, _aux_ids_read(tree))


# --------------------------------------------------------------------------- the rules


def config_rules(line: VllmLaunch, facts: VllmFacts) -> Iterator[Finding]:
    """What the release refuses before it loads anything: the line's JSON, keys SpeculativeConfig lacks."""
    for error in line.errors:
        yield finding("fail", "launch-arguments", f"the server's parser stops: {error}", "arguments", fix="pass the speculative config as one JSON object")
    spec = line.speculative
    if spec is None or not facts.fields:
        return
    for key in spec:
        if key.replace("-", "_") not in facts.fields:
            near = difflib.get_close_matches(key.replace("-", "_"), facts.fields, n=1, cutoff=0.7)
            yield finding("fail", "speculative-config", f"--speculative-config has {key!r}, which this release's SpeculativeConfig has no field for: "
                           "it refuses the config before loading", "before-load", facts.fields_at,
                           f"use {near[0]!r}" if near else "remove it (the fields are SpeculativeConfig's)")


def text_model_type(config: Checkpoint) -> str:
    """What vLLM's `hf_text_config.model_type` reads: the text config's model_type where there is one."""
    value = config.text_config.get("model_type") or config.config.get("model_type")
    return value if isinstance(value, str) else ""


def gate_rule(target: Checkpoint, facts: VllmFacts) -> Iterator[Finding]:
    gate = facts.gate
    if gate is None:
        return
    model_type = text_model_type(target)
    if any(word in model_type for word in gate.words):
        return
    words = ", ".join(repr(w) for w in gate.words)
    yield finding("fail", "eagle3-target-gate", f"this release runs EAGLE-3 only for a target whose text model_type contains {words}; "
                   f"the target's is {model_type or 'not given'!r}: `Eagle3 is only supported for ...` before anything loads",
                   "before-load", gate.at, "use a release without this list (it is gone from vLLM's speculative config in later releases), or another method")


def max_model_len(target: Checkpoint, line: VllmLaunch, facts: VllmFacts) -> tuple[int | None, str]:
    """The max model len the launch runs with, and where it comes from: --max-model-len, else the smallest
    of the target's config keys the release reads (times a RoPE factor that stretches positions)."""
    asked = line.get("max_model_len")
    if asked is not None and asked.isdigit():
        return int(asked), "--max-model-len"
    text = target.text_config
    present = [v for k in facts.context_keys if isinstance(v := text.get(k), int) and not isinstance(v, bool)]
    if not present:
        return None, ""
    length = min(present)
    stated = text.get("model_max_length")
    if "model_max_length" in facts.context_keys and isinstance(stated, int):  # the release's Command-R rule
        length = stated
    rope = text.get("rope_scaling")
    if isinstance(rope, dict) and isinstance(rope.get("factor"), (int, float)) and rope.get("rope_type", rope.get("type")) not in ("llama3", "longrope", "su", "dynamic", "mrope", "default"):
        length = int(length * rope["factor"])
    return length, "the target's config.json"


def _rope_types(config: Checkpoint) -> list[str]:
    rope = config.text_config.get("rope_scaling") or config.text_config.get("rope_parameters")
    if isinstance(rope, dict):
        kind = rope.get("rope_type", rope.get("type", "default"))
        return [kind if isinstance(kind, str) else "default"]
    return ["default"]


def draft_context_rule(target: Checkpoint, draft: Checkpoint, line: VllmLaunch, facts: VllmFacts) -> Iterator[Finding]:
    positions = draft.number(_DRAFT_POSITIONS)
    length, source = max_model_len(target, line, facts)
    if positions is None or length is None or positions >= length:
        return
    said = f"the draft's {_DRAFT_POSITIONS} ({positions}) is below the max model len ({length}, {source})"
    if facts.raises_positions_at:
        kinds = _rope_types(draft)
        if facts.cache_only_rope is None or all(k in facts.cache_only_rope for k in kinds):
            yield finding("info", "draft-context", f"{said}: this release raises the draft's to {length}, as its RoPE only sizes a cache",
                           "silent", facts.raises_positions_at)
            return
        yield finding("warn", "draft-context", f"{said}, and its RoPE ({', '.join(kinds)}) is not one this release stretches "
                       f"({', '.join(facts.cache_only_rope)}): the draft runs on positions it was not built for",
                       "first-request", facts.raises_positions_at, f"pass --max-model-len {positions}, or use a draft built for {length} positions")
        return
    yield finding("fail", "draft-context", f"{said}: this release sizes the draft's rotary cache by it and never raises it, so a "
                   f"sequence past {positions} tokens indexes the cache out of bounds (a device-side assert)", "first-request",
                   str(draft.path / "config.json"),
                   f"pass --max-model-len {positions}, or (for a draft whose RoPE only sizes a cache) set {_DRAFT_POSITIONS} to {length} in its config.json")


def _default_layers(tree: VllmTree, registry: tuple[str, str] | None, layers: int | None) -> tuple[list[int] | None, str]:
    """The layers the target's own default hook names for `layers` decoder layers, and where it is."""
    from .tree import methods

    if registry is None:
        return None, ""
    module, cls = registry
    refs = tree.resolve(module, cls)
    if not refs:
        return None, ""
    for ref in tree.mro(refs[0]):
        found = methods(ref.node)
        function = next((found[n] for n in _DEFAULT_LAYERS if n in found), None)
        if function is None:
            continue
        at = f"{ref.module.rel}:{function.lineno}"
        if layers is None:
            return None, at
        env: dict[str, object] = {}
        for statement in function.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                value = statement.value
                counted = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "len"
                if counted or ast.unparse(value).endswith("num_hidden_layers"):
                    env[statement.targets[0].id] = layers
            elif isinstance(statement, ast.Return) and statement.value is not None:
                chosen = evaluate(statement.value, env)
                if isinstance(chosen, list) and all(isinstance(v, int) for v in chosen):
                    return list(chosen), at
                return None, at
        return None, at
    return None, ""


def aux_ids_rule(target: Checkpoint, draft: Checkpoint, facts: VllmFacts, default: list[int] | None, default_at: str) -> Iterator[Finding]:
    ids = draft.config.get(_AUX_IDS)
    eagle = draft.config.get("eagle_config")
    if ids is None and isinstance(eagle, dict):
        ids = eagle.get(_AUX_IDS)
    layers = target.number("num_hidden_layers")
    fallback = f" {tuple(default)}" if default is not None else ""
    if ids is None:
        if facts.aux_ids_at:
            yield finding("warn", "aux-layer-ids", f"the draft's config.json has no {_AUX_IDS}: the runner takes the target's default "
                           f"layers{fallback} ({default_at or 'its get_eagle3_default_aux_hidden_state_layers'}); a draft trained on "
                           "others is accepted about 1% of the time", "silent", facts.aux_ids_at,
                           f"set {_AUX_IDS} in the draft's config.json to the layers it was trained on")
        elif default is not None:
            yield finding("info", "aux-layer-ids", f"this release never reads a draft's {_AUX_IDS}: its runner captures the "
                           f"target's default layers {tuple(default)}", "silent", default_at)
        return
    if not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        return
    if layers is not None and (beyond := [i for i in ids if i >= layers]):
        yield finding("fail", "aux-layer-ids", f"the draft's {_AUX_IDS} {ids} name layers {beyond} at or beyond the target's {layers}",
                       "first-request", str(draft.path / "config.json"), "use a draft trained on this target")
    if not facts.aux_ids_at and default is not None and ids != default:
        yield finding("warn", "aux-layer-ids", f"this release never reads the draft's {_AUX_IDS} {ids}: its runner captures the target's "
                       f"default layers {default} ({default_at}), so the draft gets states it was not trained on", "silent", default_at,
                       "use a release whose runner reads the draft's ids, or a draft trained on the default layers")


# --------------------------------------------------------------------------- the run


def _target_findings(request: Resolved, registry: tuple[str, str], name: str) -> tuple[list[Finding], str]:
    """The target class as `check --model` judges it: each required gap a failure after the target loads."""
    from ...selection import Selection

    module, cls = registry
    selector = f"{module}:{cls}"
    try:
        analysis = request.engine.analyze(request.asking(Selection(path=request.tree.given, models=(selector,))))
    except EaglepatchError as exc:
        where = module.removeprefix("vllm.").replace(".", "/") + f".py:{cls}"
        return [finding("info", "target-hooks", f"{name}'s EAGLE-3 support is not checked: {exc.message}", "after-target-load", exc.path or "")], where
    findings = []
    target_class = ""
    checked = BASE in analysis.protocol.members  # the runner's isinstance check; before 0.10.1 it calls the hooks by name
    for plan in analysis.plans:
        target_class = target_class or f"{plan.wrapper.path}:{plan.wrapper.cls.name}"
        for entry in plan.required_gaps:
            fix = f"eaglepatch apply --model {selector} {request.tree.given}" if entry.fix is not None else f"needs code: {entry.blocker}"
            raised = "`Model does not support EAGLE3 interface`" if checked else f"`AttributeError: ... has no attribute '{entry.member.name}'`"
            findings.append(finding(
                "fail", "target-hooks",
                f"{plan.wrapper.cls.name} lacks {entry.member.name} (the runner needs it at {', '.join(entry.called_at[:2])}): "
                f"{raised} once the target loads",
                "after-target-load", f"{plan.wrapper.path}:{plan.wrapper.cls.line}", fix,
            ))
    return findings, target_class


def run_vllm_preflight(request: Resolved, words: Sequence[str], shell: Mapping[str, str]) -> PreflightReport:
    from ...read.checkpoint import local_checkpoint
    from ...read.vllm_launch import read_vllm_launch, read_vllm_options
    from .tree import VllmTree, module_of

    cache = request.cache
    tree = VllmTree.of(cache)
    options = read_vllm_options(cache)
    line = read_vllm_launch(words, options, shell)
    facts = read_vllm_facts(tree)
    spec = dict(line.speculative or {})
    for option, key in (("spec_method", "method"), ("spec_model", "model"), ("spec_tokens", "num_speculative_tokens")):
        if line.get(option) is not None:
            spec.setdefault(key, line.get(option))
    method = spec.get("method")
    method = method.lower() if isinstance(method, str) else None
    target = local_checkpoint(line.get("model"), "the target")
    draft_path = spec.get("model")
    draft = local_checkpoint(draft_path, "the draft") if isinstance(draft_path, str) else None
    findings = list(config_rules(line, facts))
    if line.unknown:
        findings.append(finding("warn", "launch-arguments", f"no parser of this release declares {', '.join(line.unknown)}: it stops with "
                                 "`unrecognized arguments` unless a plugin adds the option", "arguments", options.at,
                                 "check the option's name in `vllm serve --help` of this release"))
    if not spec:
        findings.append(finding("info", "speculative-config", "the launch has no --speculative-config: it runs no speculative decoding",
                                 "arguments", facts.fields_at))
    elif method is None:
        findings.append(finding("info", "speculative-config", "--speculative-config names no method: the release infers it from the draft; "
                                 "the EAGLE-3 checks run only for \"method\": \"eagle3\"", "arguments", facts.fields_at))
    target_class = draft_class = None
    registry = tree.registry()
    every = {arch: (module_of(m), c) for entries in registry.values() for arch, (m, c) in entries.items()}
    found = None
    if target is not None and target.architectures:
        name = target.architectures[0]
        found = every.get(name)
        if method == EAGLE3_METHOD:
            findings += gate_rule(target, facts)
            if found is None:
                findings.append(finding("warn", "target-hooks", f"{name} is in none of this release's model registries: vLLM may serve it "
                                         "through its Transformers backend, whose EAGLE-3 support is not checked here", "before-load"))
            else:
                gaps, target_class = _target_findings(request, found, name)
                findings += gaps
    if draft is not None and draft.architectures:
        hit = every.get(draft.architectures[0])
        draft_class = f"{hit[0]}:{hit[1]}" if hit else None
    if target is not None and draft is not None and method == EAGLE3_METHOD:
        findings += draft_context_rule(target, draft, line, facts)
        default, default_at = _default_layers(tree, found, target.number("num_hidden_layers"))
        findings += aux_ids_rule(target, draft, facts, default, default_at)
        findings += hidden_size_rule(target, draft)
    algorithm = "EAGLE3" if method == EAGLE3_METHOD else (method.upper() if method else None)
    return PreflightReport(str(request.tree.srt), algorithm, target_class, draft_class, tuple(findings))
