"""`eaglepatch preflight` on SGLang: a launch read before it runs, every failure it would meet predicted.

read (the tree's options, the launch line, the two checkpoints' config.json and weight headers) ->
analyze (the target class's verdict for the chosen algorithm, as `check --model` gives it, and the
rules of analyze/preflight.py) -> findings.  It never writes and never imports SGLang or a weight.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ...errors import EaglepatchError
from ...records import Finding, PreflightReport

if TYPE_CHECKING:
    from ...analyze.preflight import TargetHook
    from ...engine import Resolved
    from ...read.source_cache import SourceCache


_CAPTURE_HOOK = re.compile(r"set_\w+_layers_to_capture")  # the hook a capturing algorithm calls on the target


def _target_hook(cache: SourceCache, rel: str, line: int, at: str) -> TargetHook:
    """The `def` at `rel:line` and whether a backbone of its module captures after its last layer
    (GPT-OSS's `if self.end_layer in self.layers_to_capture`).  Only the `def`'s block is parsed,
    and the module only where its text holds `end_layer in`: preflight runs before every launch."""
    import inspect
    import textwrap

    from ...analyze import preflight as rules

    try:
        text = cache.read(cache.srt / rel).text
        lines = text.splitlines(keepends=True)
        block = textwrap.dedent("".join(inspect.getblock(lines[line - 1:]))) if 0 < line <= len(lines) else ""
        function = ast.parse(block).body[0] if block else None
    except (EaglepatchError, SyntaxError, IndexError, inspect.EndOfBlock):
        return rules.TargetHook(None, at)
    source = block if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    final = False
    if re.search(r"end_layer\s+in\b", text):
        try:
            final = rules.captures_after_last_layer(cache.module_ast(cache.srt / rel))
        except EaglepatchError:
            final = False
    return rules.TargetHook(source, at, final)


def run_preflight(request: Resolved, words: Sequence[str], shell: Mapping[str, str]) -> PreflightReport:
    """The launch `words`, run from a shell exporting `shell`, read against the tree of `request`: one
    run, one reading of the tree (the options, the rules' facts and the target's analysis share
    `request.cache`)."""
    from ...analyze import preflight as rules
    from ...analyze.algorithms import find_enum
    from ...read.checkpoint import local_checkpoint
    from ...read.launch_line import read_launch, read_options
    from ...selection import Selection

    tree, cache = request.tree, request.cache
    options = read_options(cache)
    line = read_launch(words, options, shell)
    enum = find_enum(cache)
    known = enum.algorithms if enum is not None else ()
    asked = line.get("speculative_algorithm")
    target = local_checkpoint(line.get("model_path"), "the target")
    draft = local_checkpoint(line.get("speculative_draft_model_path"), "the draft")
    facts = rules.read_facts(cache, known)
    algorithm = asked.upper() if asked else None
    if algorithm is not None and algorithm in facts.aliases:
        algorithm = facts.aliases[algorithm][0]  # NEXTN runs as EAGLE: what is checked is what runs
    draft_option = options.by_string.get("--speculative-draft-model-path")
    target_class = draft_class = None
    target_hook: TargetHook | None = None
    gaps: list[Finding] = []
    if target is not None and target.architectures and target.architectures[0] in facts.registry:
        name = target.architectures[0]
        module = facts.registry[name].removeprefix("models/").removesuffix(".py")
        target_class = f"{facts.registry[name]}:{name}"
        if algorithm is not None and algorithm in known:
            asked_of = Selection(path=tree.given, models=(f"{module}:{name}",), algorithms=(algorithm,))
            analysis = request.engine.analyze(request.asking(asked_of))
            plan = analysis.plans[0]
            for entry in plan.required_gaps:
                fix = f"eaglepatch apply --model {module}:{name} {tree.given}" if entry.fix is not None else f"needs code: {entry.blocker}"
                what = "cannot work" if entry.gap == "plumbing" else "is missing"
                gaps.append(Finding(
                    "fail", "target-hooks",
                    f"{name} {what}: {entry.member.name} ({', '.join(entry.member.needed_by)} calls it at {', '.join(entry.called_at[:2])})",
                    "after-target-load", f"{plan.wrapper.path}:{plan.wrapper.cls.line}", fix,
                ))
            capture = next((m for m in analysis.protocol.members if _CAPTURE_HOOK.fullmatch(m)), None)  # the algorithm's own
            hook = next((e for e in (*plan.missing, *plan.forwarded) if e.member.name == capture), None)
            signature = (hook.defined if hook is not None else None) or (plan.wrapper.cls.members.get(capture) if capture else None)
            if signature is not None:
                target_hook = _target_hook(cache, signature.file, signature.line, signature.at)
        elif algorithm is not None:
            gaps.append(Finding("info", "target-hooks", f"--speculative-algorithm {asked}: not a member of this tree's algorithm enum "
                                f"({', '.join(known)}); the target's hooks are not checked", "arguments", enum.at if enum else ""))
    draft_arch = draft.architectures[0] if draft is not None and draft.architectures else None
    draft_arch = rules.draft_loaded_as(draft_arch, facts.draft_rewrites)[0] if draft_arch else None  # as the model config names it
    loader = None
    if draft is not None and draft_arch in facts.registry:
        draft_class = f"{facts.registry[draft_arch]}:{draft_arch}"
        if algorithm in rules.EAGLE_ALGORITHMS:  # an EAGLE head's loader; MTP and DFlash drafts load another way
            loader = rules.read_draft_loader(cache, facts.registry[draft_arch], draft_arch)
    launch = rules.Launch(line, facts, cache.srt, asked, algorithm, target, draft, draft_option.at if draft_option else "",
                          tuple(gaps), target_hook, loader)
    findings = rules.run_rules(launch)
    return PreflightReport(str(tree.srt), algorithm, target_class, draft_class, findings)
