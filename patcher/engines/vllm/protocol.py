"""vLLM profile, analyze stage: the EAGLE-3 interface as the release declares it.

`SupportsEagle3` is a runtime-checkable Protocol in model_executor/models/interfaces.py (from
0.10.1): its methods are read from there (names, signatures, a stub or a default body), and the
names are confirmed against what the GPU model runner calls on the target model."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from ...errors import EaglepatchError
from ...read.statements import walk
from ...records import Protocol, ProtocolMember, Use
from .tree import INTERFACES, MODELS_PACKAGE, VllmTree, is_stub, methods

BASE = "SupportsEagle3"
MIXIN = "EagleModelMixin"
SETTER = "set_aux_hidden_state_layers"
# the runner's files that call the hooks on the target (the second exists from 0.18)
CONSUMERS = ("v1/worker/gpu_model_runner.py", "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py")
# where the speculative config vets the target before any class is loaded (0.10.x: the config package)
SPECULATIVE_CONFIGS = ("config/speculative.py", "config/__init__.py", "config.py")  # as releases moved it


@dataclass(frozen=True)
class TargetGate:
    """The speculative config's whitelist: EAGLE-3 only for a target whose text `model_type` contains one
    of `words` (vLLM up to at least 0.15 refuses any other with `Eagle3 is only supported for [...]`)."""

    name: str  # the list's name, e.g. eagle3_target_supported
    words: tuple[str, ...]
    at: str  # rel:line of the list


@dataclass(frozen=True)
class ProtocolMethod:
    name: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    stub: bool  # a docstring/`...` only: a class must define it itself

    @property
    def line(self) -> int:
        return self.node.lineno


@dataclass(frozen=True)
class VllmProtocol:
    line: int  # of `class SupportsEagle3` in interfaces.py
    rel: str  # interfaces.py, relative to the vllm folder
    setter: ProtocolMethod
    getter: ProtocolMethod  # get_eagle3_aux_hidden_state_layers before 0.18, get_eagle3_default_... after
    uses: dict[str, list[Use]] = field(default_factory=dict)  # member -> where the runner uses it
    warnings: list[str] = field(default_factory=list)
    target_gate: TargetGate | None = None
    duck: bool = False  # no Protocol (before 0.10.1): the runner calls the hooks by name, no base is checked

    @property
    def hooks(self) -> list[ProtocolMethod]:
        return [self.setter, self.getter]

    @property
    def stubs(self) -> bool:
        return any(m.stub for m in self.hooks)

    @property
    def unwraps_language_model(self) -> bool:
        """The setter's default takes the language model's `.model` only when it has one
        (`getattr(parent, "model", parent)`, 0.33 on): a decoder marked as the language model itself
        is reached; before, the default asserts the language model has a `.model`."""
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" and len(n.args) == 3
            and isinstance(n.args[1], ast.Constant) and n.args[1].value == "model"
            for n in walk(self.setter.node)
        )

    def as_protocol(self) -> Protocol:
        """The records.Protocol report.py prints: the base, then the two hooks."""
        members = {
            name: ProtocolMember(name, tuple(self.uses.get(name, [])))
            for name in ((BASE,) if not self.duck else ()) + (self.setter.name, self.getter.name)
        }
        consumers = tuple(sorted({u.at.rsplit(":", 1)[0] for uses in self.uses.values() for u in uses}))
        return Protocol(members, consumers, {}, tuple(self.warnings))


def read_protocol(tree: VllmTree) -> VllmProtocol:
    interfaces = tree.required(INTERFACES)
    node = interfaces.classes.get(BASE)
    if node is None:
        return _with_gate(tree, _duck_protocol(tree, interfaces.rel))
    defs = methods(node)
    setter = defs.get(SETTER)
    getters = [d for name, d in defs.items() if name.startswith("get_eagle3") and name.endswith("aux_hidden_state_layers")]
    if setter is None or len(getters) != 1:
        raise EaglepatchError(
            f"{BASE} (line {node.lineno}) does not declare {SETTER} and one get_eagle3_..._aux_hidden_state_layers: "
            "a shape of the interface the vLLM profile does not know",
            path=interfaces.rel,
        )
    protocol = VllmProtocol(
        node.lineno,
        interfaces.rel,
        ProtocolMethod(SETTER, setter, is_stub(setter)),
        ProtocolMethod(getters[0].name, getters[0], is_stub(getters[0])),
    )
    _read_consumers(tree, protocol)
    return _with_gate(tree, protocol)


def _with_gate(tree: VllmTree, protocol: VllmProtocol) -> VllmProtocol:
    gate = read_target_gate(tree)
    if gate is not None:
        protocol = replace(protocol, target_gate=gate)
        protocol.warnings.append(
            f"{gate.at}: this release runs EAGLE-3 only for a target whose text model_type contains "
            f"{' or '.join(repr(w) for w in gate.words)} ({gate.name}): it refuses any other before a class is "
            "loaded, whatever the class's verdict here"
        )
    return protocol


def _is_hook_name(name: str) -> bool:
    return name == SETTER or (name.startswith("get_eagle3") and name.endswith("aux_hidden_state_layers"))


def _duck_protocol(tree: VllmTree, interfaces: str) -> VllmProtocol:
    """Before 0.10.1 there is no Protocol: the runner calls the hooks on the target by name (`self.model.
    set_aux_hidden_state_layers(self.model.get_eagle3_aux_hidden_state_layers())`).  The names are read
    from those calls, the signatures from the first model class of the tree that defines both; a class
    needs both itself (each hook a "stub"), and no base is checked."""
    calls: dict[str, str] = {}
    for rel in CONSUMERS:
        module = tree.module_ast(rel)
        for node in walk(module) if module is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_hook_name(node.func.attr):
                owner = node.func.value
                if isinstance(owner, ast.Attribute) and owner.attr == "model":
                    calls.setdefault(node.func.attr, f"{rel}:{node.lineno}")
    setters = [n for n in calls if n == SETTER]
    getters = [n for n in calls if n != SETTER]
    if not setters or len(getters) != 1:
        raise EaglepatchError(
            f"declares no {BASE} Protocol, and the model runner ({', '.join(CONSUMERS)}) calls no {SETTER} and one "
            "get_eagle3_..._aux_hidden_state_layers on the target: a shape of EAGLE-3 support the vLLM profile does not know",
            path=interfaces,
        )
    getter = getters[0]
    for name, path in sorted(tree.files.items()):
        try:
            if not name.startswith(MODELS_PACKAGE) or name == INTERFACES or f"def {getter}(" not in tree.cache.read(path).text:
                continue
        except EaglepatchError:
            continue
        held = tree.module(name)
        if held is None:
            continue
        for cls in held.classes.values():
            found = methods(cls)
            if SETTER in found and getter in found and not is_stub(found[SETTER]) and not is_stub(found[getter]):
                rel, line = calls[SETTER].rsplit(":", 1)
                protocol = VllmProtocol(int(line), rel, ProtocolMethod(SETTER, found[SETTER], True), ProtocolMethod(getter, found[getter], True), duck=True)
                _read_consumers(tree, protocol)
                protocol.warnings.append(
                    f"{calls[SETTER]}: this release checks EAGLE-3 support by duck typing (no {BASE} before 0.10.1): the runner calls "
                    f"{SETTER} and {getter} on the target, so a class needs both itself (their signatures as {cls.name} in {held.rel} has them)"
                )
                return protocol
    raise EaglepatchError(
        f"declares no {BASE} Protocol, and no model class of the tree defines both {SETTER} and {getter}, which the runner calls "
        f"by name ({calls[SETTER]}): nothing to learn their signatures from",
        path=interfaces,
    )


def read_target_gate(tree: VllmTree) -> TargetGate | None:
    """A list of model-type words the speculative config holds a target's `model_type` against before
    raising for EAGLE-3: a list literal of strings bound in a function that raises, whose name and the
    raise's message both speak of EAGLE-3 and the list is tested against `model_type`."""
    for rel in SPECULATIVE_CONFIGS:
        module = tree.module_ast(rel)
        for func in walk(module) if module is not None else ():
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            nodes = list(walk(func))
            lists = {
                t.id: (node.value, node.lineno)
                for node in nodes
                if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                for t in node.targets
                if isinstance(t, ast.Name) and "eagle3" in t.id.lower()
            }
            if not any(isinstance(n, ast.Raise) for n in nodes):
                continue
            if not any(isinstance(n, ast.Compare) and any(isinstance(x, ast.Attribute) and x.attr == "model_type" for x in walk(n)) for n in nodes):
                continue  # no test against the target's model type
            loaded = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            for name, (value, line) in lists.items():
                words = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if words and len(words) == len(value.elts) and name in loaded:
                    return TargetGate(name, tuple(words), f"{rel}:{line}")
            one = _one_word_gate(func)
            if one is not None:
                return TargetGate(f"{one[0]!r} not in model_type", (one[0],), f"{rel}:{one[1]}")
    return None


def _one_word_gate(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, int] | None:
    """The gate before it was a list (vLLM 0.9): `if method == "eagle3" and "llama" not in ....model_type:
    raise ...`, as (the word, its line)."""
    for node in walk(func):
        if not (isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)):
            continue
        if not any(isinstance(c, ast.Constant) and c.value == "eagle3" for c in walk(node.test)):
            continue
        for test in walk(node.test):
            if (
                isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)
                and isinstance(test.left, ast.Constant) and isinstance(test.left.value, str)
                and isinstance(test.comparators[0], ast.Attribute) and test.comparators[0].attr == "model_type"
            ):
                return test.left.value, test.lineno
    return None


def _read_consumers(tree: VllmTree, protocol: VllmProtocol) -> None:
    """Where the runner calls the hooks on the model and checks supports_eagle3: the names must match."""
    hooks = {m.name for m in protocol.hooks}
    called: set[str] = set()
    for rel in CONSUMERS:
        module = tree.module_ast(rel)  # one that cannot be read: its EAGLE-3 calls are unknown, the gate does not pass
        if module is None:
            continue
        for func in walk(module):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            guard = f"{func.name}()" + (", when use_aux_hidden_state_outputs" if "use_aux_hidden_state_outputs" in ast.unparse(func) else "")
            for call in _own_calls(func):
                target = call.func
                name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
                at = f"{rel}:{call.lineno}"
                if name == "supports_eagle3":
                    protocol.uses.setdefault(BASE, []).append(Use(BASE, "attribute", "target", True, at, f"isinstance check in {guard}"))
                elif isinstance(target, ast.Attribute) and name in hooks:
                    called.add(name)
                    protocol.uses.setdefault(name, []).append(Use(name, "call", "target", True, at, f"called in {guard}"))
                elif isinstance(target, ast.Attribute) and _is_hook_name(name):
                    protocol.warnings.append(f"{at} calls {name}, which {BASE} (interfaces.py:{protocol.line}) does not declare")
    for uses in protocol.uses.values():
        uses.sort(key=lambda use: (CONSUMERS.index(use.at.rsplit(":", 1)[0]), int(use.at.rsplit(":", 1)[1])))
    for hook in protocol.hooks:
        if hook.name not in called:
            protocol.warnings.append(
                f"no call of {hook.name} found in {', '.join(CONSUMERS)}: the name is the one {BASE} declares"
            )


def _own_calls(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Call]:
    """The calls in a function's body, not those of functions nested in it (they are walked on their own)."""
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))
