"""Plumbing, written: what to insert so that a capture hook reaches the forward that runs, learned
from a class of the same tree whose plumbing is complete.

`analyze_plumbing` (patcher/plumbing/gate.py) says which pieces a class lacks; this module says
what to write for each, in the class's own names, and where.  A reference pair (a causal LM and its
backbone) is taken from the tree only when its plumbing passes the analysis with no gap and its shape
is the target's: the decoder-layer loop carries a recognisable layer index (`range(...)`, `enumerate`
over the layers or over a slice of them, whose offset the index then adds back), the layer call's
targets name the stream (`hidden_states`, and `residual` when the call takes it back in), and the
capture reads nothing but those.  Then every piece is spelled the reference's way:

* `self.capture_aux_hidden_states = False` at the end of the class's `__init__`, `self.layers_to_capture = []`
  at the end of the backbone's;
* `aux_hidden_states = []` before the layer loop, and `if i in self.layers_to_capture:
  aux_hidden_states.append(<the reference's expression of the stream entering the layer>)` right before
  the layer call;
* each `return hidden_states` after the loop becomes the reference's tail (`if len(aux_hidden_states) == 0:
  return hidden_states` / `return hidden_states, aux_hidden_states`); a pipeline-parallel proxy return is
  left as it is;
* after the class forward's one backbone call, the reference's unpack (`aux_hidden_states = None`,
  `if self.capture_aux_hidden_states: hidden_states, aux_hidden_states = hidden_states`), and the aux
  states handed to each `self.logits_processor(...)` call the way the reference hands them.

Where a precondition fails (a two-batch-overlap path, a layer call returning three values, a residual
kept outside the layer call's targets, a loop without an index, no reference of that shape), the plan
names the blocker instead, every one found, never a guess.  A plan is checked before it is returned:
its pieces (and, for a class without one, the reference's hook) are put into the classes' syntax trees
and the analysis is run again; a gap left is a blocker.

The hook itself is not a piece: the existing synthesis (patcher/analyze/synthesize.py) writes it,
learned from `PlumbingPlan.reference`, whose layer-id convention (`shift`) the capture matches.
CPython's `ast` only; codemods/add_plumbing.py writes a plan into a module.
"""

from __future__ import annotations

import ast
import copy
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..read.expressions import capture_flag_read
from ..read.statements import nested_statements, sub_blocks, walk, walk_body, walk_code
from ..records import PieceKind, PlumbingBlocker, PlumbingPiece, PlumbingPlan, Where
from .gate import HOOK, ClassLookup, ClassSource, FunctionNode, PlumbingReport, analyze_plumbing, calls_backbone, is_capture_hook, method_of, reached_methods

if TYPE_CHECKING:
    from ..analyze.resolve import Resolver
    from ..analyze.synthesize import HookLibrary

INDENT = "    "  # the unit of a piece's code; codemods/add_plumbing.py writes it in the file's own
SELF = "self"
FLAG = "capture_aux_hidden_states"  # the class's switch, when the class has no hook to name it
LOGITS = "logits_processor"
_TBO = re.compile(r"(^|_)tbo($|_)|two_batch", re.IGNORECASE)
_ROUTED = ("residual", "communicator")  # a name holding one of these words outside the layer call's targets


# --------------------------------------------------------------------------- results


# --------------------------------------------------------------------------- reading code


def statement_fingerprint(statement: ast.stmt) -> str:
    """A statement's first line as CPython spells it (a compound one's header): what the codemod
    compares the anchor it finds with."""
    head = copy.copy(statement)
    if isinstance(head, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith)):
        head.body, head.orelse = [ast.Pass()], []  # type: ignore[union-attr]
    elif isinstance(head, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        head.body, head.decorator_list = [ast.Pass()], []
    elif isinstance(head, ast.Try):
        head.body, head.handlers, head.orelse, head.finalbody = [ast.Pass()], [], [], [ast.Pass()]
    text = ast.unparse(head)
    return " ".join(text.split("\n", 1)[0].split())


def _attr_of_self(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == SELF:
        return node.attr
    return None


def _dotted_text(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted_text(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _stored_names(node: ast.AST) -> set[str]:
    return {n.id for n in walk_code(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _arg_names(call: ast.Call) -> set[str]:
    return {a.id for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, ast.Name)}


def _renamed(node: ast.expr, names: Mapping[str, str], attributes: Mapping[str, str] | None = None) -> ast.expr:
    """A copy of an expression with local names (and `self.<attribute>`s) renamed."""
    out = copy.deepcopy(node)
    for sub in walk(out):
        if isinstance(sub, ast.Name) and sub.id in names:
            sub.id = names[sub.id]
        elif attributes and isinstance(sub, ast.Attribute) and _attr_of_self(sub) in attributes:
            sub.attr = attributes[sub.attr]
    return out


def _at(owner: ClassSource, node: ast.AST) -> str:
    return f"{owner.file}:{getattr(node, 'lineno', owner.node.lineno)}"


def _sets(mro: Sequence[ClassSource], attribute: str) -> bool:
    """An `__init__` of the MRO sets `self.<attribute>` (or a class body does): a default is there."""
    for cls in mro:
        if attribute in cls.attributes():
            return True
        init = cls.method("__init__")
        for node in cls.walks.body(init) if init is not None else ():
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in _flattened(target)]
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Call) and _dotted_text(node.func) == "setattr" and len(node.args) == 3:
                first, name = node.args[0], node.args[1]
                if isinstance(first, ast.Name) and first.id == SELF and isinstance(name, ast.Constant) and name.value == attribute:
                    return True
            if any(_attr_of_self(t) == attribute for t in targets):
                return True
    return False


def _flattened(target: ast.expr) -> list[ast.expr]:
    return [e for elt in target.elts for e in _flattened(elt)] if isinstance(target, (ast.Tuple, ast.List)) else [target]


def _built_as(mro: Sequence[ClassSource], attribute: str) -> str:
    """The callee of `self.<attribute> = Callee(...)` in an `__init__` of the MRO ("" when none)."""
    for cls in mro:
        init = cls.method("__init__")
        for node in cls.walks.body(init) if init is not None else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(_attr_of_self(t) == attribute for t in node.targets):
                return _dotted_text(node.value.func)
    return ""


# --------------------------------------------------------------------------- the backbone's layer loop


@dataclass(frozen=True)
class _Loop:
    """The decoder-layer loop of a backbone forward, read."""

    node: ast.For
    top: ast.stmt  # the statement of the forward's body that holds the loop
    index: str  # the layer id, spelled: "i", "self.start_layer + i"
    index_kind: str  # "range" | "enumerate" | "enumerate-slice"
    hidden: str
    residual: str | None
    call_top: ast.stmt  # the statement of the loop's body that holds the layer call
    call_position: int
    anchor: ast.stmt  # what the capture goes right before: the layer call's statement (or call_top, for several)
    before: tuple[ast.stmt, ...]  # the statements that run before it in the loop, nearest last
    header: str = ""  # the loop carries no index: the header an `index` piece gives it (`index` is its name)


def _layer_names(loop: ast.For) -> tuple[set[str], str | None]:
    """(the names a decoder layer is bound to in the loop, the loop's index name)."""
    target = loop.target
    layers: set[str] = set()
    index = None
    if isinstance(target, ast.Name):
        if isinstance(loop.iter, ast.Call) and _dotted_text(loop.iter.func) == "range":
            index = target.id
        else:
            layers.add(target.id)
    elif isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts):
        first, second = target.elts
        assert isinstance(first, ast.Name) and isinstance(second, ast.Name)
        index = first.id
        layers.add(second.id)
    for statement, _ in nested_statements(loop.body):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            value = statement.value
            if isinstance(value, ast.Subscript) and _attr_of_self(value.value) is not None and index is not None:
                if isinstance(value.slice, ast.Name) and value.slice.id == index:
                    layers.add(statement.targets[0].id)
    return layers, index


def _is_layer_call(call: ast.Call, layers: set[str], index: str | None) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("forward", "__call__"):
        func = func.value
    if isinstance(func, ast.Name):
        return func.id in layers
    if isinstance(func, ast.Subscript) and _attr_of_self(func.value) is not None:
        return index is not None and isinstance(func.slice, ast.Name) and func.slice.id == index
    return False


def _layer_calls(loop: ast.For) -> list[tuple[ast.stmt | None, ast.Call]]:
    """Each layer call of the loop, with the assignment whose value it is (None when it is not one)."""
    layers, index = _layer_names(loop)
    direct: dict[int, ast.stmt] = {}
    for statement, _ in nested_statements(loop.body):
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
            direct[id(statement.value)] = statement
    out: list[tuple[ast.stmt | None, ast.Call]] = []
    for statement in loop.body:
        for node in walk_code(statement):
            if isinstance(node, ast.Call) and _is_layer_call(node, layers, index):
                out.append((direct.get(id(node)), node))
    return out


def _layer_loops(function: FunctionNode) -> list[tuple[ast.For, ast.stmt]]:
    found = []
    for top in function.body:
        for node in walk_code(top):
            if isinstance(node, ast.For) and _layer_calls(node):
                found.append((node, top))
    return found


def _loop_index(loop: ast.For) -> tuple[str, str] | str:
    """(the layer id spelled, the kind of loop), or why there is none."""
    target, it = loop.target, loop.iter
    if isinstance(target, ast.Name) and isinstance(it, ast.Call) and _dotted_text(it.func) == "range":
        return target.id, "range"
    enumerated = isinstance(it, ast.Call) and _dotted_text(it.func) == "enumerate" and it.args
    if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[0], ast.Name) and enumerated:
        assert isinstance(it, ast.Call)
        name = target.elts[0].id
        over = it.args[0]
        start = it.args[1] if len(it.args) > 1 else next((k.value for k in it.keywords if k.arg == "start"), None)
        lower: ast.expr | None = None
        if isinstance(over, ast.Subscript) and isinstance(over.slice, ast.Slice):
            lower = over.slice.lower
        elif isinstance(over, ast.Call) and _dotted_text(over.func).rpartition(".")[2] == "islice" and len(over.args) >= 3:
            lower = over.args[1]
        zero = lower is None or (isinstance(lower, ast.Constant) and lower.value == 0)
        no_start = start is None or (isinstance(start, ast.Constant) and start.value == 0)
        if zero:
            return (name, "enumerate") if no_start else f"enumerate starts at {ast.unparse(start)} over layers from 0"  # type: ignore[arg-type]
        assert lower is not None
        if no_start:
            return f"{ast.unparse(lower)} + {name}", "enumerate-slice"
        if start is not None and ast.unparse(start) == ast.unparse(lower):
            return name, "enumerate-slice"
        return f"enumerate starts at {ast.unparse(start)}, the layers at {ast.unparse(lower)}"  # type: ignore[arg-type]
    return f"`{statement_fingerprint(loop)}` carries no layer index"


INDEX_NAMES = ("i", "layer_id", "layer_idx")  # what an `index` piece calls the layer id, the first the forward leaves free


def _indexed_header(loop: ast.For, function: FunctionNode) -> tuple[str, str] | None:
    """(the index name, the header) that `for layer in self.layers:` gets to carry the layer id,
    `for i, layer in enumerate(self.layers):`: only over every layer of a list the class holds (an
    `enumerate` of it counts from layer 0), when a name is left free."""
    target, over = loop.target, loop.iter
    if not isinstance(target, ast.Name) or _attr_of_self(over) is None or loop.type_comment:
        return None
    taken = {n.id for n in walk_body(function) if isinstance(n, ast.Name)} | {a.arg for a in walk(function.args) if isinstance(a, ast.arg)}
    name = next((n for n in INDEX_NAMES if n not in taken), None)
    if name is None:
        return None
    return name, f"for {name}, {target.id} in enumerate({ast.unparse(over)}):"


def read_loop(owner: ClassSource, function: FunctionNode) -> _Loop | PlumbingBlocker:
    """The decoder-layer loop of a backbone forward, or why it is not one the plan can write into."""
    loops = _layer_loops(function)
    where = _at(owner, function)
    if not loops:
        return PlumbingBlocker("loop", f"{owner.name}.{function.name} has no loop over its decoder layers", where)
    if len(loops) > 1:
        lines = ", ".join(str(loop.lineno) for loop, _ in loops)
        return PlumbingBlocker("loop", f"{owner.name}.{function.name} loops over its decoder layers {len(loops)} times (lines {lines})", where)
    loop, top = loops[0]
    at = _at(owner, loop)
    outer = _enclosing_loop(function, loop)
    if outer is not None:
        return PlumbingBlocker("loop", f"the layer loop runs inside the loop at line {outer.lineno}: each layer would be captured once a pass", at)
    index = _loop_index(loop)
    header = ""
    if isinstance(index, str):
        indexed = _indexed_header(loop, function)
        if indexed is None:
            return PlumbingBlocker("loop", index, at)
        index, header = (indexed[0], "enumerate"), indexed[1]
    calls = _layer_calls(loop)
    targets: set[str] = set()
    hidden, residual = "", None
    for statement, call in calls:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return PlumbingBlocker("layer-call", f"the layer call at line {call.lineno} is not assigned to the stream's names", at)
        target = statement.targets[0]
        names = [e for e in _flattened(target)] if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(n, ast.Name) for n in names):
            return PlumbingBlocker("layer-call", f"the layer call at line {call.lineno} is unpacked into {ast.unparse(target)}", at)
        spelled = [n.id for n in names if isinstance(n, ast.Name)]
        if len(spelled) > 2:
            return PlumbingBlocker("layer-call", f"the decoder layer returns {len(spelled)} values ({', '.join(spelled)}): no reference captures that API", at)
        given = _arg_names(call)
        if spelled[0] not in given:
            return PlumbingBlocker("layer-call", f"the layer call at line {call.lineno} does not take {spelled[0]} back in: it is not the stream", at)
        hidden = spelled[0]
        residual = spelled[1] if len(spelled) == 2 and spelled[1] in given else None
        targets.add(" ".join(spelled))
    if len(targets) > 1:
        return PlumbingBlocker("layer-call", f"the layer calls assign different names ({'; '.join(sorted(targets))})", at)
    tops = [i for i, statement in enumerate(loop.body) if any(n is c for _, c in calls for n in walk_code(statement))]
    if len(set(tops)) != 1:
        return PlumbingBlocker("layer-call", "the layer calls sit in different statements of the loop", at)
    position = tops[0]
    call_top = loop.body[position]
    spelled_index = _rebound_index(loop, position, index) if not header else index[0]
    if spelled_index is None:
        return PlumbingBlocker("loop", "the loop rebinds its index before the layer call", at)
    index = (spelled_index, index[1])
    before = list(loop.body[:position])
    if len(calls) == 1 and calls[0][0] is not None:
        anchor = calls[0][0]
        block = next(b for s, b in nested_statements(loop.body) if s is anchor)
        if block is not loop.body:
            before += block[: block.index(anchor)]
    else:
        anchor = call_top
        first = min(c.lineno for _, c in calls)
        stream = {hidden, residual} - {None}
        for statement, _ in nested_statements([call_top]):
            if statement.lineno < first and isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _stored_names(statement) & stream:
                return PlumbingBlocker("layer-call", f"line {statement.lineno} changes the stream inside the statement that calls the layer", at)
    return _Loop(loop, top, index[0], index[1], hidden, residual, call_top, position, anchor, tuple(before), header)


def _enclosing_loop(function: FunctionNode, loop: ast.For) -> ast.For | ast.AsyncFor | ast.While | None:
    for node in walk_body(function):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and node is not loop and any(n is loop for n in walk(node)):
            return node
    return None


def _rebound_index(loop: ast.For, position: int, index: tuple[str, str]) -> str | None:
    """The layer id as the layer call sees it: `i` where the loop body first adds the slice's offset back
    (`i = i + self.start_layer`); None when it rebinds the index otherwise."""
    target = loop.target
    name = target.elts[0].id if isinstance(target, ast.Tuple) and isinstance(target.elts[0], ast.Name) else target.id if isinstance(target, ast.Name) else ""
    spelled = index[0]
    for statement in loop.body[:position]:
        if name not in _stored_names(statement):
            continue
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            return None
        value = statement.value
        if index[1] != "enumerate-slice" or not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
            return None
        lower = spelled.rpartition(" + ")[0]
        if {ast.unparse(value.left), ast.unparse(value.right)} != {name, lower}:
            return None
        spelled = name
    return spelled


def routed_elsewhere(owner: ClassSource, function: FunctionNode, loop: _Loop) -> str:
    """A name of the forward (of `owner`) that carries the residual (or a communicator) outside the layer
    call's targets ("" when none): the stream entering a layer is then not what the targets hold."""
    own = {loop.hidden, loop.residual}
    for node in owner.walks.body(function):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if word is not None and word not in own and any(w in word.lower() for w in _ROUTED):
            return word
    return ""


def _overlap_call(owner: ClassSource, function: FunctionNode, loop: _Loop) -> ast.Call | None:
    """The one call outside the decoder-layer loop that is handed a slice of the layers the loop runs
    (`model_forward_maybe_tbo(layers=self.layers[normal_end_layer:self.end_layer], ...)`): the
    two-batch-overlap path; None when there is not exactly one."""
    inside = {id(n) for n in walk(loop.node)}
    held = {_attr_of_self(n.value) for n in walk(loop.node) if isinstance(n, ast.Subscript)} - {None}
    if isinstance(loop.node.iter, ast.Call):
        held |= {_attr_of_self(a) for a in loop.node.iter.args} - {None}
    found = []
    for node in owner.walks.body(function):
        if isinstance(node, ast.Call) and id(node) not in inside:
            given = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(a, ast.Subscript) and isinstance(a.slice, ast.Slice) and _attr_of_self(a.value) in held for a in given):
                found.append(node)
    return found[0] if len(found) == 1 else None


def two_batch_overlap(owner: ClassSource, function: FunctionNode) -> str:
    """A two-batch-overlap path of the function (of `owner`): its name ("" when none)."""
    for node in owner.walks.body(function):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if word is not None and _TBO.search(word):
            return word
    return ""


def _indexed_after(function: FunctionNode, loop: ast.For, name: str) -> ast.Subscript | None:
    """The first `name[...]` read after the loop (Gemma 3n's `hidden_states[0]`: a stack of streams)."""
    end = loop.end_lineno or loop.lineno
    for node in walk_body(function):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name and node.lineno > end:
            return node
    return None


def _on_the_stream(value: ast.Call, loop: _Loop) -> bool:
    """A call whose only name is the stream, `self.embedding_norm(hidden_states)`: the backbone's last step."""
    names = {n.id for n in walk(value) if isinstance(n, ast.Name)} - {"self"}
    return names == {loop.hidden}


def _pp_proxy(node: ast.Return) -> bool:
    """A pipeline-parallel rank's hand-off: `PPProxyTensors(...)`, `....to_pp(...)`.  (A return of a name on
    a rank that is not the last gets the tail like any other: nothing is captured there, so it returns as
    before.)"""
    value = node.value
    if isinstance(value, ast.Call):
        name = _dotted_text(value.func)
        return "PPProxy" in name or name.rpartition(".")[2] in ("to_pp", "to_pp_proxy")
    return False


def _backbone_returns(function: FunctionNode) -> list[tuple[ast.Return, list[ast.expr], bool]]:
    """Each return of the function with the tests of the `if`s around it, and whether a loop holds it."""
    found: list[tuple[ast.Return, list[ast.expr], bool]] = []

    def visit(block: list[ast.stmt], tests: list[ast.expr], looped: bool) -> None:
        for statement in block:
            if isinstance(statement, ast.Return):
                found.append((statement, tests, looped))
            elif isinstance(statement, ast.If):
                visit(statement.body, [*tests, statement.test], looped)
                visit(statement.orelse, [*tests, statement.test], looped)
            elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = looped or isinstance(statement, (ast.For, ast.AsyncFor, ast.While))
                for part in sub_blocks(statement):
                    visit(part, tests, inner)

    visit(function.body, [], False)
    return found


# --------------------------------------------------------------------------- a reference's shape


@dataclass(frozen=True)
class _Reference:
    """A reference pair read: everything a piece is spelled from."""

    key: str
    backbone: str  # the key of the class whose forward captures
    attribute: str  # the class's backbone attribute
    flag: str
    selector: str
    unpack_test: ast.expr
    unpack_default: bool  # it binds the aux name to None right before its unpack (the plan always does)
    class_aux: str  # the class forward's aux name
    logits_position: int | None
    logits_keyword: str | None
    logits_class: str
    shift: int | None
    hook: FunctionNode
    delegates: bool  # its hook hands the layer choice to the backbone's own hook (`self.model.<hook>(...)`)
    # the backbone side, when it teaches one (else `backbone_why` says why not)
    backbone_why: str = ""
    arity: int = 0  # 2 when the capture reads a residual
    index_kind: str = ""
    capture: ast.expr | None = None  # the appended expression, in `hidden` / `residual`
    hidden: str = ""
    residual: str | None = None
    aux: str = ""  # the backbone's aux list
    tail: tuple[str, ast.expr] | None = None  # ("if", test) | ("ifexp", test), in `aux`
    form: str = ""  # the capture with the stream's names made generic: which references capture alike


def _alone(ref: _Reference) -> ast.expr | None:
    """What the reference captures when the stream is its hidden states alone: its capture, or, where it
    captures hidden and residual, the branch it takes when the residual is None (`hidden_states +
    residual if residual is not None else hidden_states`); None when it says nothing for that case."""
    capture = ref.capture
    if capture is None or ref.residual is None:
        return capture
    if isinstance(capture, ast.IfExp) and isinstance(capture.test, ast.Compare) and len(capture.test.ops) == 1:
        test = capture.test
        if isinstance(test.left, ast.Name) and test.left.id == ref.residual and _is_none(test.comparators[0]):
            branch = capture.orelse if isinstance(test.ops[0], ast.IsNot) else capture.body if isinstance(test.ops[0], ast.Is) else None
            if branch is not None and {n.id for n in walk(branch) if isinstance(n, ast.Name)} == {ref.hidden}:
                return branch
    return None


def _capture_form(capture: ast.expr, hidden: str, residual: str | None) -> str:
    """`_Reference.form`, read once a reference is: every plan's choice ranks the references by it."""
    names = {hidden: "H", **({residual: "R"} if residual else {})}
    return ast.unparse(_renamed(capture, names))


def _hook_shift(hook: FunctionNode) -> int | None:
    """`k` of `[val + k for val in layer_ids]` in the hook: the layer-id convention."""
    for node in walk_body(hook):
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and isinstance(node.generators[0].target, ast.Name):
            element, var = node.elt, node.generators[0].target.id
            if isinstance(element, ast.BinOp) and isinstance(element.op, ast.Add) and isinstance(element.left, ast.Name) and element.left.id == var:
                if isinstance(element.right, ast.Constant) and isinstance(element.right.value, int):
                    return element.right.value
            if isinstance(element, ast.Name) and element.id == var:
                return 0
    return None


def _hands_to(hook: FunctionNode, attribute: str) -> bool:
    """The hook calls `self.<attribute>.<HOOK>(...)`: the backbone's own hook chooses the layers."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == HOOK and _attr_of_self(n.func.value) == attribute for n in walk_body(hook))


def sibling_hook(mro: Sequence[ClassSource], wanted: str = HOOK) -> tuple[ClassSource, FunctionNode] | None:
    """Another algorithm's capture hook the backbone defines (`set_dflash_layers_to_capture`), for a
    backbone without the `wanted` one (EAGLE-3's): what its forward's own capture (per-layer flags) is
    set by, copied under the wanted name as upstream did for EAGLE-3's.  Only a body that names no
    algorithm (no `dflash` in a message, no further hook it hands on to) is copied: what it means must
    not depend on which algorithm calls it."""
    if method_of(mro, wanted) is not None:
        return None
    for owner in mro:
        for statement in owner.node.body:
            if isinstance(statement, ast.FunctionDef) and is_capture_hook(statement.name) and statement.name != wanted:
                word = statement.name.removeprefix("set_").removesuffix("_layers_to_capture")
                said = [n for n in walk_body(statement) if isinstance(n, ast.Constant) and isinstance(n.value, str) and word in n.value.lower()]
                handed = [n for n in walk_body(statement) if isinstance(n, ast.Attribute) and is_capture_hook(n.attr)]
                if not said and not handed:
                    return owner, statement
    return None


def _renamed_def(method: FunctionNode, name: str) -> FunctionNode:
    """A copy of `method` under `name`, its line numbers kept (what the analysis reports stays on the original)."""
    out = copy.deepcopy(method)
    out.name = name
    return out


def _backbone_call(path: Sequence[tuple[ClassSource, FunctionNode]], attribute: str) -> list[tuple[ClassSource, FunctionNode, ast.Call]]:
    return [(owner, method, node) for owner, method in path for node in owner.walks.body(method) if isinstance(node, ast.Call) and calls_backbone(node, attribute)]


def _assignment_of(method: FunctionNode, call: ast.Call) -> tuple[ast.Assign, list[ast.stmt]] | None:
    for statement, block in nested_statements(method.body):
        if isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            return statement, block
    return None


def _unpack_statement(method: FunctionNode, result: str) -> tuple[ast.If | ast.Assign, str, list[ast.stmt]] | None:
    """The statement that takes the backbone's pair apart (`if <test>: h, aux = h`, or unguarded), the aux
    name, and its block."""
    for statement, block in nested_statements(method.body):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(statement.value, ast.Name) and statement.value.id == result:
                second = target.elts[1]
                if isinstance(second, ast.Name):
                    for holder, holder_block in nested_statements(method.body):
                        if isinstance(holder, ast.If) and holder.body == [statement] and not holder.orelse:
                            return holder, second.id, holder_block
                    return statement, second.id, block
    return None


def _logits_calls(path: Sequence[tuple[ClassSource, FunctionNode]]) -> list[tuple[ClassSource, FunctionNode, ast.Call]]:
    return [(o, m, n) for o, m in path for n in o.walks.body(m) if isinstance(n, ast.Call) and _attr_of_self(n.func) == LOGITS]


def read_reference(classes: ClassLookup, key: str, report: PlumbingReport | None = None, through_hook: bool = False) -> _Reference | str:
    """A class whose plumbing is complete, read as a reference; or why it cannot be one.  Its class side
    (the unpack, the argument, the flag) is read whatever its backbone does; its backbone side (the
    capture, the aux list, the tail) only when the capture is a statement of the loop that reads the
    stream alone (`backbone_why` says why not: a capture handed to the layer call teaches nothing a
    target's layers can be trusted to do).  `through_hook`: the class side alone is wanted, from a hook
    that hands the layer choice to its backbone's hook, whatever that hook sets (list, per-layer flags)."""
    report = report or analyze_plumbing(classes, key)
    if not report.complete:
        return "its plumbing is not complete" if report.gaps else "its plumbing could not be judged"
    if report.mechanism != "list" and not (through_hook and "list" in report.mechanism.split("+")):
        return f"its hook selects layers by {report.mechanism}"
    flags = [w for w in report.writes if w.holder == SELF and w.kind == "flag"]
    lists = [w for w in report.writes if w.holder != SELF and "." not in w.holder and w.kind == "list"]
    if len({w.attribute for w in flags}) != 1 or len({(w.holder, w.attribute) for w in lists}) != 1:
        return "its hook does not write one flag and one list"
    flag, listed = flags[0].attribute, lists[0]
    mro = classes.mro(key)
    hook = method_of(mro, HOOK)
    forward = method_of(mro, "forward")
    held = classes.holds(key, listed.holder)
    if hook is None or forward is None or not held:
        return "its hook, forward or backbone cannot be read"
    found = method_of(classes.mro(held[0]), "forward")
    if found is None:
        return "its backbone has no forward"
    path = reached_methods(mro, "forward")
    calls = _backbone_call(path, listed.holder)
    if len(calls) != 1:
        return f"its forward calls self.{listed.holder} {len(calls)} times"
    _, method, call = calls[0]
    assigned = _assignment_of(method, call)
    if assigned is None:
        return "its forward does not assign the backbone's result to a name"
    result = assigned[0].targets[0]
    assert isinstance(result, ast.Name)
    unpack = _unpack_statement(method, result.id)
    if unpack is None or not isinstance(unpack[0], ast.If):
        return "its forward does not unpack the pair under a test"
    statement, class_aux, block = unpack
    assert isinstance(statement, ast.If)
    default = any(isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and s.value.value is None and _stored_names(s) == {class_aux} for s in block[: block.index(statement)])
    position = keyword = None
    for _, _, logits in _logits_calls(path):
        for i, arg in enumerate(logits.args):
            if isinstance(arg, ast.Name) and arg.id == class_aux:
                position = i
        for k in logits.keywords:
            if isinstance(k.value, ast.Name) and k.value.id == class_aux and k.arg:
                keyword = k.arg
    if position is None and keyword is None:
        return "its forward does not hand the aux states to self.logits_processor"
    common = dict(
        key=key,
        backbone=found[0].key,
        attribute=listed.holder,
        flag=flag,
        selector=listed.attribute,
        unpack_test=statement.test,
        unpack_default=default,
        class_aux=class_aux,
        logits_position=position,
        logits_keyword=keyword,
        logits_class=_built_as(mro, LOGITS),
        shift=_hook_shift(hook[1]),
        hook=hook[1],
        delegates=_hands_to(hook[1], listed.holder),
    )
    if through_hook:
        return _Reference(**common, backbone_why="only its class side is read")  # type: ignore[arg-type]
    backbone = _backbone_forms(*found, listed.attribute)
    if isinstance(backbone, str):
        return _Reference(**common, backbone_why=backbone)  # type: ignore[arg-type]
    loop, aux, expression, tail = backbone
    names = {n.id for n in walk(expression) if isinstance(n, ast.Name)}
    return _Reference(
        **common,  # type: ignore[arg-type]
        arity=2 if loop.residual is not None and loop.residual in names else 1,
        index_kind=loop.index_kind,
        capture=expression,
        hidden=loop.hidden,
        residual=loop.residual,
        aux=aux,
        tail=tail,
        form=_capture_form(expression, loop.hidden, loop.residual),
    )


def _backbone_forms(owner: ClassSource, function: FunctionNode, selector: str) -> tuple[_Loop, str, ast.expr, tuple[str, ast.expr]] | str:
    """(the loop, the aux list, the captured expression, the tail's form) of a reference backbone, or why
    it teaches no backbone piece."""
    loop = read_loop(owner, function)
    if isinstance(loop, PlumbingBlocker):
        return f"its backbone's loop: {loop.why}"
    if loop.header:
        return f"its backbone's loop: `{statement_fingerprint(loop.node)}` carries no layer index"
    capture = _capture_in(loop, selector)
    if isinstance(capture, str):
        return capture
    aux, expression = capture
    if expression is None:
        return "it captures inside the layer call"
    if not {n.id for n in walk(expression) if isinstance(n, ast.Name)} <= {loop.hidden, loop.residual}:
        return f"its capture reads more than the stream: {ast.unparse(expression)}"
    if not any(isinstance(s, ast.Assign) and _is_empty_list_of(s, aux) for s, _ in nested_statements(function.body)):
        return f"its backbone does not bind {aux} = []"
    tail = _tail_form(function, aux)
    if tail is None:
        return "its backbone's pair return is not one the plan knows"
    return loop, aux, expression, tail


def _is_empty_list_of(statement: ast.Assign, name: str) -> bool:
    value = statement.value
    return _stored_names(statement) == {name} and isinstance(value, ast.List) and not value.elts


def _capture_in(loop: _Loop, selector: str) -> tuple[str, ast.expr | None] | str:
    """(the aux list, the expression appended to it before the layer call) of a reference loop; the
    expression is None when the capture is handed to the layer call instead."""
    for statement in loop.before:
        if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1):
            continue
        test = statement.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)):
            continue
        if _attr_of_self(test.comparators[0]) != selector:
            continue
        if ast.unparse(test.left) != loop.index:
            return f"its capture tests {ast.unparse(test.left)}, not the layer index {loop.index}"
        body = statement.body[0]
        if isinstance(body, ast.Expr) and isinstance(body.value, ast.Call) and not body.value.keywords and len(body.value.args) == 1:
            func = body.value.func
            if isinstance(func, ast.Attribute) and func.attr == "append" and isinstance(func.value, ast.Name):
                return func.value.id, body.value.args[0]
        return f"its capture is `{statement_fingerprint(body)}`, not an append"
    for node in walk(loop.call_top):
        if isinstance(node, ast.Attribute) and _attr_of_self(node) == selector:
            return "", None
    return "its loop captures after the layer call, or not in the loop"


def _tail_form(function: FunctionNode, aux: str) -> tuple[str, ast.expr] | None:
    for statement, block in nested_statements(function.body):
        if not isinstance(statement, ast.Return) or statement.value is None:
            continue
        value = statement.value
        if isinstance(value, ast.Tuple) and len(value.elts) == 2 and all(isinstance(e, ast.Name) for e in value.elts):
            first, second = value.elts
            assert isinstance(first, ast.Name) and isinstance(second, ast.Name)
            if second.id != aux:
                continue
            position = block.index(statement)
            before = block[position - 1] if position else None
            if isinstance(before, ast.If) and not before.orelse and len(before.body) == 1:
                inner = before.body[0]
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Name) and inner.value.id == first.id:
                    if aux in {n.id for n in walk(before.test) if isinstance(n, ast.Name)}:
                        return "if", before.test
            return None
        if isinstance(value, ast.IfExp) and isinstance(value.body, ast.Tuple) and len(value.body.elts) == 2 and isinstance(value.orelse, ast.Name):
            second = value.body.elts[1]
            if isinstance(second, ast.Name) and second.id == aux:
                return "ifexp", value.test
    return None


# --------------------------------------------------------------------------- the plan


class _Plan:
    """One plan being made: pieces, blockers and caveats as they are found."""

    def __init__(self) -> None:
        self.pieces: list[PlumbingPiece] = []
        self.blockers: dict[tuple[str, str], PlumbingBlocker] = {}
        self.caveats: dict[tuple[str, str], PlumbingBlocker] = {}

    def block(self, piece: str, why: str, at: str) -> None:
        self.blockers.setdefault((piece, why), PlumbingBlocker(piece, why, at))

    def caveat(self, piece: str, why: str, at: str) -> None:
        """What the written plumbing leaves as it is (a path that runs layers without capture)."""
        self.caveats.setdefault((piece, why), PlumbingBlocker(piece, why, at))

    def add(self, kind: PieceKind, owner: ClassSource, method: FunctionNode, where: Where, code: str, origin: str, anchor: ast.stmt | None = None) -> None:
        self.pieces.append(
            PlumbingPiece(
                kind=kind,
                file=owner.file,
                cls=owner.name,
                method=method.name,
                method_line=method.lineno,
                where=where,
                line=anchor.lineno if anchor is not None else 0,
                anchor=statement_fingerprint(anchor) if anchor is not None else "",
                code=code,
                origin=origin,
            )
        )


@dataclass(frozen=True)
class _ClassSide:
    """What the class forward already has, and where the pieces would go."""

    forward: ClassSource  # the class whose forward runs: its __init__ takes the flag's default
    target: tuple[ClassSource, ...]  # the MRO of the class planned for
    owner: ClassSource  # the class of the method that calls the backbone
    method: FunctionNode
    statement: ast.Assign  # the backbone call's assignment
    result: str
    has_unpack: bool
    aux: str | None  # the unpack's aux name, when it has one
    logits: tuple[tuple[ClassSource, FunctionNode, ast.Call], ...]
    logits_class: str


@dataclass(frozen=True)
class _BackboneSide:
    owner: ClassSource
    method: FunctionNode
    captures: bool  # it reads the layer choice already
    has_default: bool
    init: tuple[ClassSource, FunctionNode] | None
    loop: _Loop | None
    returns: tuple[ast.Return, ...]  # the ones to give the tail
    through_hook: bool = False  # it captures by its own means, set by the hook a `hook` piece writes


class PlumbingPlanner:
    """Plans plumbing for the classes of one tree: references read once, each against the analysis."""

    def __init__(self, classes: ClassLookup, references: Sequence[str]):
        self.classes = classes
        self.reference_keys = tuple(dict.fromkeys(references))
        self._references: dict[str, _Reference | str] = {}
        self._through_hook: dict[str, _Reference | str] = {}  # read for a backbone whose own hook a piece writes
        # a plan is a function of the tree, the references and (class, attribute): the planning rounds of
        # one run ask again for the same ones
        self._plans: dict[tuple[tuple[str, ...], str, str, bool], PlumbingPlan] = {}

    def without(self, keys: Sequence[str]) -> PlumbingPlanner:
        """The same planner with the references `keys` left out (their readings and plans shared)."""
        other = PlumbingPlanner(self.classes, [k for k in self.reference_keys if k not in keys])
        other._references, other._plans, other._through_hook = self._references, self._plans, self._through_hook
        return other

    def reference(self, key: str) -> _Reference | str:
        if key not in self._references:
            self._references[key] = read_reference(self.classes, key)
        return self._references[key]

    def references(self) -> list[_Reference]:
        return [r for r in (self.reference(k) for k in self.reference_keys) if isinstance(r, _Reference)]

    def hook_reference(self, key: str) -> _Reference | str:
        """`key` read for its class side alone, when its hook hands the layer choice to its backbone's."""
        if key not in self._through_hook:
            found = read_reference(self.classes, key, through_hook=True)
            self._through_hook[key] = found if isinstance(found, str) or found.delegates else "its hook sets the backbone's layer choice itself"
        return self._through_hook[key]

    def reference_for(self, key: str) -> _Reference | str:
        """`key` as a plan may have chosen it: a full reference, else one read for its class side."""
        found = self.reference(key)
        return found if isinstance(found, _Reference) else self.hook_reference(key)

    # -- one class ------------------------------------------------------------------------------
    def sibling_plan(self, key: str, attribute: str, hook: str) -> PlumbingPlan | None:
        """The plan that gives `key`'s backbone (`self.<attribute>`) the capture hook `hook` of another
        algorithm, copied from its own sibling (EAGLE-3's, which marks the layers its forward captures):
        a hook the class learns can then hand its layer choice to it, as EAGLE-3's does.  None when the
        backbone has `hook` already, or no one sibling to copy.  The gate judges the class with it."""
        held = self.classes.holds(key, attribute)
        if not held:
            return None
        sibling = _one_sibling([self.classes.mro(b) for b in held], hook)
        if sibling is None:
            return None
        where, method = sibling
        found = _Plan()
        found.add("hook", where, method, "beside", ast.unparse(_renamed_def(method, hook)), where.key, method)
        return PlumbingPlan(cls=key, attribute=attribute, needs_hook=True, pieces=tuple(found.pieces))

    def plan(self, key: str, attribute: str = "model", override: bool = False) -> PlumbingPlan:
        """The plumbing `key` ("file:Class") needs for its capture hook (its own, or the one the synthesis
        would write, learned from the reference chosen here) to work, through `self.<attribute>`.
        `override`: the hook it inherits is not taken; the synthesis writes one into the class itself."""
        memo = (self.reference_keys, key, attribute, override)
        if memo not in self._plans:
            self._plans[memo] = self._plan(key, attribute, override)
        return self._plans[memo]

    def _plan(self, key: str, attribute: str, override: bool = False) -> PlumbingPlan:
        classes = self.classes
        mro = classes.mro(key)
        found = _Plan()
        if not mro:
            return PlumbingPlan(key, attribute, blockers=(PlumbingBlocker("class", "the class is not in the tree", key),))
        cls = mro[0]
        own_hook = None if override else method_of(mro, HOOK)
        flag = selector = None
        report = None
        if own_hook is not None:
            report = analyze_plumbing(classes, key)
            if report.complete:
                return PlumbingPlan(key, attribute)
            flags = [w for w in report.writes if w.holder == SELF and w.kind == "flag"]
            lists = [w for w in report.writes if w.holder != SELF and "." not in w.holder and w.kind == "list"]
            unfixable = [g for g in report.gaps if g.piece in ("hook", "delegate", "backbone-call", "forward", "capture")]
            for gap in unfixable:
                found.block(gap.piece, gap.why, gap.at)
            if report.mechanism != "list" or len({w.attribute for w in flags}) != 1 or len({(w.holder, w.attribute) for w in lists}) != 1:
                found.block("hook", f"its hook selects layers by {report.mechanism}: the plumbing plan writes list capture only", own_hook[0].key)
            else:
                flag, selector, attribute = flags[0].attribute, lists[0].attribute, lists[0].holder
            for note in report.unresolved:
                found.block("backbone", note, cls.key)
            if found.blockers:
                return PlumbingPlan(key, attribute, blockers=tuple(found.blockers.values()))
        side = self._class_side(mro, attribute, found)
        backbone = self._backbone_side(key, attribute, selector, found)
        if side is None or backbone is None:
            return PlumbingPlan(key, attribute, needs_hook=own_hook is None, blockers=tuple(found.blockers.values()))
        if not found.blockers and not found.pieces and _nothing_missing(side, backbone, flag or FLAG) and not (backbone.through_hook and own_hook is None):
            return PlumbingPlan(key, attribute, needs_hook=own_hook is None)  # the hook alone is missing
        reference = self._choose(side, backbone, flag, selector, found)
        if reference is None:
            return PlumbingPlan(key, attribute, needs_hook=own_hook is None, blockers=tuple(found.blockers.values()))
        flag, selector = flag or reference.flag, selector or reference.selector
        self._class_pieces(side, reference, flag, found)
        self._backbone_pieces(backbone, reference, selector, found)
        plan = PlumbingPlan(
            key,
            attribute,
            reference=reference.key,
            reference_backbone=reference.backbone,
            shift=reference.shift,
            needs_hook=own_hook is None,
            pieces=tuple(found.pieces),
            blockers=tuple(found.blockers.values()),
            caveats=tuple(found.caveats.values()),
        )
        if plan.blockers:
            return PlumbingPlan(key, attribute, reference.key, reference.backbone, reference.shift, plan.needs_hook, blockers=plan.blockers)
        left = verify_plan(classes, plan, None if own_hook is not None else reference)
        if left:
            return PlumbingPlan(key, attribute, reference.key, reference.backbone, reference.shift, plan.needs_hook, blockers=left)
        return plan

    def _class_side(self, mro: Sequence[ClassSource], attribute: str, found: _Plan) -> _ClassSide | None:
        cls = mro[0]
        forward = method_of(mro, "forward")
        if forward is None:
            found.block("forward", f"{cls.name} has no forward", cls.key)
            return None
        owner, function = forward
        path = reached_methods(mro, "forward")
        tbo = next((w for o, m in path if (w := two_batch_overlap(o, m))), "")
        if tbo:
            found.block("two-batch-overlap", f"{owner.name}.forward has a two-batch-overlap path ({tbo})", _at(owner, function))
        calls = _backbone_call(path, attribute)
        if len(calls) != 1 and not _one_result_unpacked(calls):
            lines = ", ".join(f"{o.file}:{c.lineno}" for o, _, c in calls)
            found.block("backbone-call", f"{owner.name}.forward calls self.{attribute} {len(calls)} times{f' ({lines})' if lines else ''}: the plan needs exactly one", _at(owner, function))
            return None
        call_owner, method, call = calls[-1]
        assigned = _assignment_of(method, call)
        if assigned is None:
            found.block("backbone-call", f"{call_owner.name}.{method.name} does not assign what self.{attribute} returns to one name", _at(call_owner, call))
            return None
        statement = assigned[0]
        target = statement.targets[0]
        assert isinstance(target, ast.Name)
        unpack = _unpack_statement(method, target.id)
        logits = tuple(_logits_calls(path))
        return _ClassSide(
            forward=owner,
            target=tuple(mro),
            owner=call_owner,
            method=method,
            statement=statement,
            result=target.id,
            has_unpack=unpack is not None,
            aux=unpack[1] if unpack is not None else None,
            logits=logits,
            logits_class=_built_as(mro, LOGITS),
        )

    def _backbone_side(self, key: str, attribute: str, selector: str | None, found: _Plan) -> _BackboneSide | None:
        classes = self.classes
        held = classes.holds(key, attribute)
        if not held:
            found.block("backbone", f"self.{attribute}: the class it is built as is not resolved", key)
            return None
        forwards: dict[str, tuple[ClassSource, FunctionNode]] = {}
        for backbone in held:
            bmro = classes.mro(backbone)
            if not bmro:
                found.block("backbone", f"self.{attribute}: {backbone} is not in the tree", key)
                return None
            got = method_of(bmro, "forward")
            if got is None:
                found.block("backbone", f"{bmro[0].name} has no forward", bmro[0].key)
                return None
            forwards[got[0].key] = got
        if len(forwards) > 1:
            found.block("backbone", f"self.{attribute} may be {', '.join(sorted(forwards))}, with different forwards", key)
            return None
        owner, function = next(iter(forwards.values()))
        bmro = classes.mro(owner.key)
        path = reached_methods(bmro, "forward")
        reads = {_attr_of_self(n) for o, m in path for n in o.walks.body(m) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
        wanted = selector or "layers_to_capture"
        captures = wanted in reads
        init = method_of(bmro, "__init__")
        has_default = any(_sets(classes.mro(b), wanted) for b in held)
        if captures:
            return _BackboneSide(owner, function, True, has_default, init, None, ())
        own = _own_capture(path)
        if own and selector is None and all(method_of(classes.mro(b), HOOK) is not None for b in held):
            # the backbone's own hook chooses the layers its forward captures by: the class's hook hands
            # it the ids, as a reference's does (plan() proves it with verify_plan)
            return _BackboneSide(owner, function, True, True, init, None, (), through_hook=True)
        sibling = _one_sibling([classes.mro(b) for b in held]) if own and selector is None else None
        if sibling is not None:
            # the class has no hook: the learned one hands the layer choice to this copy, which sets
            # what the forward reads (plan() proves it with verify_plan)
            where, method = sibling
            found.add("hook", where, method, "beside", ast.unparse(_renamed_def(method, HOOK)), where.key, method)
            return _BackboneSide(owner, function, True, True, init, None, (), through_hook=True)
        if own:
            found.block(
                "capture",
                f"{owner.name}.forward captures by its own means ({own}), not by self.{wanted}: the hook must choose layers its way,"
                " which a list-capture plan does not write",
                _at(owner, function),
            )
            return None
        tbo = two_batch_overlap(owner, function)
        loop = read_loop(owner, function)
        if isinstance(loop, PlumbingBlocker):
            if tbo:
                found.block("two-batch-overlap", f"{owner.name}.forward has a two-batch-overlap path ({tbo})", _at(owner, function))
            found.block(loop.piece, loop.why, loop.at)
            return None
        if tbo:
            # upstream's way (DeepSeek-V2's): capture in the ordinary loop, the overlapped layers left as they run
            overlap = _overlap_call(owner, function, loop)
            if overlap is None:
                found.block("two-batch-overlap", f"{owner.name}.forward has a two-batch-overlap path ({tbo})", _at(owner, function))
            else:
                found.caveat(
                    "two-batch-overlap",
                    f"{owner.name}.forward's two-batch-overlap path ({tbo}) runs layers through {ast.unparse(overlap.func)}, which captures"
                    " nothing: with two-batch overlap on, the chosen layers it runs hand no aux states on",
                    _at(owner, overlap),
                )
        routed = routed_elsewhere(owner, function, loop)
        if routed:
            found.block("residual", f"{owner.name}.forward routes the stream through {routed}: the layer call's targets are not the stream entering a layer", _at(owner, function))
        stacked = _indexed_after(function, loop.node, loop.hidden)
        if stacked is not None:
            found.block("stream", f"{owner.name}.forward indexes {loop.hidden} after its layer loop (line {stacked.lineno}, "
                        f"`{ast.unparse(stacked)}`): it holds several streams, not the one a layer hands on", _at(owner, stacked))
        returns: list[ast.Return] = []
        for node, _tests, looped in _backbone_returns(function):
            if looped:
                found.block("tail", f"line {node.lineno} returns from inside the layer loop", _at(owner, node))
            elif node.lineno < loop.top.lineno:
                continue  # before the loop: nothing can have been captured, the bare tensor is right
            elif _pp_proxy(node):
                continue
            elif isinstance(node.value, ast.Name) and node.value.id not in (loop.residual,):
                returns.append(node)
            elif isinstance(node.value, ast.Call) and _on_the_stream(node.value, loop):
                if loop.residual is None:
                    returns.append(node)  # a last step on the stream, `return self.final_layernorm(hidden_states)`: kept, then the tail
                else:
                    # Lfm2 ends on `self.embedding_norm(hidden_states)` though its layers hand back a residual: their
                    # own input (the stream is the hidden states alone) or one dropped by mistake, which reading cannot tell
                    found.block("tail", f"line {node.lineno} returns {ast.unparse(node.value)}, leaving out the {loop.residual} its layers "
                                f"hand back: whether that is part of the stream (capture {loop.hidden} + {loop.residual}) or a layer's own "
                                f"input handed back (capture {loop.hidden} alone) is not shown by reading", _at(owner, node))
            else:
                spelled = ast.unparse(node.value) if node.value is not None else "nothing"
                found.block("tail", f"line {node.lineno} returns {spelled}, neither the stream nor a pipeline proxy", _at(owner, node))
        if not returns:
            found.block("tail", f"{owner.name}.forward never returns the hidden states after its loop", _at(owner, function))
        return _BackboneSide(owner, function, False, has_default, init, loop, tuple(returns))

    def _choose(self, side: _ClassSide, backbone: _BackboneSide, flag: str | None, selector: str | None, found: _Plan) -> _Reference | None:
        """The reference whose shape is the target's, best first: capture of the same stream (hidden
        alone, or hidden and residual), the same backbone lineage, the same file, the same loop form,
        the most common capture; the same flag and list names when the class has its own hook."""
        refs = self.references()
        if backbone.through_hook:
            refs = [r for r in (self.hook_reference(k) for k in self.reference_keys) if isinstance(r, _Reference)]
        needs_capture = not backbone.captures
        fitting: list[_Reference] = []
        why: Counter[str] = Counter()
        loop = backbone.loop
        for ref in refs:
            if flag is not None and (ref.flag, ref.selector) != (flag, selector):
                why["its hook writes other names"] += 1
            elif needs_capture and ref.capture is None:
                why[ref.backbone_why] += 1
            elif needs_capture and loop is not None and ref.arity != (2 if loop.residual else 1) and not (loop.residual is None and _alone(ref) is not None):
                why[f"it captures {'hidden and residual' if ref.arity == 2 else 'the hidden states alone'}"] += 1
            elif side.logits_class and ref.logits_class and side.logits_class != ref.logits_class:
                why[f"its logits processor is {ref.logits_class}"] += 1
            else:
                fitting.append(ref)
        if not fitting:
            if needs_capture and loop is not None:
                stream = "hidden and residual" if loop.residual else "the hidden states alone"
                wanted = f"captures {stream} in a statement of its layer loop"
            elif backbone.through_hook:
                wanted = f"hands the layer choice to its backbone's {HOOK}"
            else:
                wanted = "can teach this class's forward its part"
            tried = [f"{n} because {w}" for w, n in why.most_common(3)]
            broken = [k for k in self.reference_keys if isinstance(self.reference(k) if not backbone.through_hook else self.hook_reference(k), str)]
            detail = f"; {len(refs)} complete, not taken: {', '.join(tried)}" if tried else ""
            found.block(
                "reference",
                f"no class of this tree with complete plumbing {wanted}{detail}"
                f"{f' ({len(broken)} more not complete or not readable)' if broken else ''}",
                side.owner.key,
            )
            return None
        forms = Counter(r.form for r in fitting)
        lineage = {c.key for c in self.classes.mro(backbone.owner.key)}
        unset = loop is not None and loop.residual is not None and _may_be_none(backbone.method, loop.residual)

        def rank(ref: _Reference) -> tuple:
            related = ref.backbone in lineage or backbone.owner.key in {c.key for c in self.classes.mro(ref.backbone)}
            same_file = ref.key.partition(":")[0] == side.owner.file
            same_loop = loop is None or ref.index_kind == loop.index_kind
            # a residual that starts as None wants a capture that says what to take then
            safe = not unset or ref.residual is None or ref.capture is None or _tests_none(ref.capture, ref.residual)
            # a capture of this very stream before one derived from the branch a reference takes without a residual
            derived = loop is not None and needs_capture and ref.arity != (2 if loop.residual else 1)
            return (not related, derived, not same_file, not safe, not same_loop, -forms[ref.form], ref.key)

        return min(fitting, key=rank)

    # -- pieces --------------------------------------------------------------------------------
    def _class_pieces(self, side: _ClassSide, ref: _Reference, flag: str, found: _Plan) -> None:
        origin = ref.key
        if not _sets(side.target, flag):
            init = method_of(self.classes.mro(side.forward.key), "__init__")
            if init is None:
                found.block("flag-default", f"{side.forward.name} has no __init__ in the tree to set self.{flag} in", side.forward.key)
            else:
                found.add("flag-default", init[0], init[1], "end", f"self.{flag} = False", origin)
        aux = side.aux or ref.class_aux
        if not side.has_unpack:
            taken = {n.id for n in side.owner.walks.body(side.method) if isinstance(n, ast.Name)}
            if aux in taken:
                found.block("unpack", f"{side.owner.name}.{side.method.name} already uses the name {aux}", _at(side.owner, side.method))
            test = ast.unparse(_renamed(ref.unpack_test, {}, {ref.flag: flag}))
            # the default whatever the reference binds it by: the logits processor is handed it either way
            lines = [f"{aux} = None"]
            lines += [f"if {test}:", f"{INDENT}{side.result}, {aux} = {side.result}"]
            found.add("unpack", side.owner, side.method, "after", "\n".join(lines), origin, side.statement)
        if not side.logits:
            found.block("logits-aux", f"{side.owner.name}.forward never calls self.{LOGITS}", _at(side.owner, side.method))
            return
        for owner, method, call in _logits_lacking(side, aux):
            given = [*call.args, *(k.value for k in call.keywords)]
            statement = _holding_statement(method, call)
            if statement is None:
                found.block("logits-aux", f"the self.{LOGITS} call at line {call.lineno} is not in a statement of its own", _at(owner, call))
                continue
            if not any(isinstance(a, ast.Name) and a.id == side.result for a in given):
                found.block("logits-aux", f"the self.{LOGITS} call at line {call.lineno} is not handed {side.result}", _at(owner, call))
                continue
            if ref.logits_position is not None:
                if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) != ref.logits_position:
                    found.block(
                        "logits-aux",
                        f"the self.{LOGITS} call at line {call.lineno} takes {len(call.args)} positional arguments"
                        f"{' and keywords' if call.keywords else ''}; the reference hands the aux states as argument {ref.logits_position + 1}",
                        _at(owner, call),
                    )
                    continue
                code = aux
            else:
                code = f"{ref.logits_keyword}={aux}"
            found.add("logits-aux", owner, method, "argument", code, origin, statement)

    def _backbone_pieces(self, backbone: _BackboneSide, ref: _Reference, selector: str, found: _Plan) -> None:
        origin = ref.backbone
        if not backbone.has_default:
            if backbone.init is None:
                found.block("selector-default", f"{backbone.owner.name} has no __init__ in the tree to set self.{selector} in", backbone.owner.key)
            else:
                found.add("selector-default", backbone.init[0], backbone.init[1], "end", f"self.{selector} = []", origin)
        loop = backbone.loop
        if backbone.captures or loop is None:
            return
        owner, function = backbone.owner, backbone.method
        assert ref.tail is not None and ref.capture is not None, "a reference is chosen for a capture only when it teaches one"
        aux = ref.aux
        if aux in {n.id for n in owner.walks.body(function) if isinstance(n, ast.Name)}:
            found.block("aux-init", f"{owner.name}.forward already uses the name {aux}", _at(owner, function))
            return
        names = {ref.hidden: loop.hidden, **({ref.residual: loop.residual} if ref.residual and loop.residual else {})}
        captured = ref.capture if loop.residual is not None else _alone(ref)
        assert captured is not None, "_choose takes a reference only when it captures this stream"
        expression = ast.unparse(_renamed(captured, names))
        if loop.header:
            found.add("index", owner, function, "header", loop.header, origin, loop.node)
        found.add("aux-init", owner, function, "before", f"{aux} = []", origin, loop.top)
        capture = f"if {loop.index} in self.{selector}:\n{INDENT}{aux}.append({expression})"
        found.add("capture", owner, function, "before", capture, origin, loop.anchor)
        form, test = ref.tail
        for node in backbone.returns:
            assert node.value is not None
            name = ast.unparse(node.value)  # the stream, or its last step (`self.norm(hidden_states)`), kept as written
            spelled = ast.unparse(_renamed(test, {ref.aux: aux}))
            if form == "if":
                code = f"if {spelled}:\n{INDENT}return {name}\nreturn {name}, {aux}"
            else:
                code = f"return ({name}, {aux}) if {spelled} else {name}"
            found.add("tail", owner, function, "replace", code, origin, node)


def _one_sibling(mros: Sequence[Sequence[ClassSource]], wanted: str = HOOK) -> tuple[ClassSource, FunctionNode] | None:
    """The one sibling hook every class the backbone may be built as reaches (sibling_hook)."""
    found = [sibling_hook(m, wanted) for m in mros]
    if not found or any(s is None for s in found) or len({(s[0].key, s[1].lineno) for s in found if s is not None}) != 1:
        return None
    return found[0]


def _one_result_unpacked(calls: Sequence[tuple[ClassSource, FunctionNode, ast.Call]]) -> bool:
    """Several calls of the backbone (one a branch: `self.model(...)` for text alone, a multimodal
    routine handed `self.model` otherwise), all in one method, each assigned to the same name, which the
    method already takes apart: the class side needs no piece placed after any one of them."""
    if len(calls) < 2 or len({(o.key, id(m)) for o, m, _ in calls}) != 1:
        return False
    _, method, _ = calls[0]
    assigned = [_assignment_of(method, c) for _, _, c in calls]
    names = {a[0].targets[0].id for a in assigned if a is not None and isinstance(a[0].targets[0], ast.Name)}
    return None not in assigned and len(names) == 1 and _unpack_statement(method, names.pop()) is not None


def _logits_lacking(side: _ClassSide, aux: str) -> list[tuple[ClassSource, FunctionNode, ast.Call]]:
    """The class forward's logits processor calls that do not hand the aux states on."""
    out = []
    for owner, method, call in side.logits:
        given = [*call.args, *(k.value for k in call.keywords)]
        if not (any(isinstance(a, ast.Name) and a.id == aux for a in given) or any(k.arg == "aux_hidden_states" for k in call.keywords)):
            out.append((owner, method, call))
    return out


def _nothing_missing(side: _ClassSide, backbone: _BackboneSide, flag: str) -> bool:
    """Every piece is there already: the class lacks (at most) the hook itself."""
    aux = side.aux or "aux_hidden_states"
    class_done = _sets(side.target, flag) and side.has_unpack and bool(side.logits) and not _logits_lacking(side, aux)
    return class_done and backbone.captures and backbone.has_default


def _own_capture(path: Sequence[tuple[ClassSource, FunctionNode]]) -> str:
    """What a backbone forward captures by, when it does so without the list: a per-layer flag read,
    a capture attribute of its own, an aux list it keeps ("" when it captures nothing)."""
    nodes = [node for owner, method in path for node in owner.walks.body(method)]
    flag = next((found for node in nodes if (found := capture_flag_read(node)) is not None), None)
    if flag is not None:
        return f"the per-layer flag {flag}"
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and "capture" in node.attr and _attr_of_self(node) is not None:
            return f"self.{node.attr}"
    for node in nodes:
        if isinstance(node, ast.Name) and "aux_hidden" in node.id:
            return f"its own {node.id}"
    return ""


def _may_be_none(function: FunctionNode, name: str) -> bool:
    """The function binds `name` to None somewhere (`residual = None`, `h, residual = x, None`)."""
    for node in walk_body(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name and _is_none(node.value):
                    return True
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts):
                    if any(isinstance(t, ast.Name) and t.id == name and _is_none(v) for t, v in zip(target.elts, node.value.elts)):
                        return True
    return False


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _tests_none(expression: ast.expr, name: str) -> bool:
    """The expression compares `name` with None (`h + r if r is not None else h`)."""
    for node in walk(expression):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == name:
            if isinstance(node.ops[0], (ast.Is, ast.IsNot)) and _is_none(node.comparators[0]):
                return True
    return False


def _holding_statement(method: FunctionNode, call: ast.Call) -> ast.stmt | None:
    """The simple statement (`return ...`, `x = ...`, an expression) whose value is `call`."""
    for statement, _ in nested_statements(method.body):
        value = getattr(statement, "value", None)
        if isinstance(statement, (ast.Return, ast.Assign, ast.AnnAssign, ast.Expr)) and value is call:
            return statement
    return None


# --------------------------------------------------------------------------- checking a plan


class PatchedClasses:
    """A ClassLookup that sees some classes as patched: `replaced` ("file:Class" -> its patched ClassSource)
    first, then the `files` given as text ({file: patched source}), else the base's own."""

    def __init__(self, base: ClassLookup, replaced: Mapping[str, ClassSource] | None = None, files: Mapping[str, str] | None = None):
        self.base = base
        self.replaced = dict(replaced or {})
        self._files: dict[str, dict[str, ClassSource]] = {}
        for file, text in (files or {}).items():
            classes: dict[str, ClassSource] = {}
            for node in walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef) and node.name not in classes:
                    classes[node.name] = ClassSource(node.name, file, node)
            self._files[file] = classes

    def _seen(self, cls: ClassSource) -> ClassSource:
        if cls.key in self.replaced:
            return self.replaced[cls.key]
        return self._files.get(cls.file, {}).get(cls.name, cls)

    def mro(self, key: str) -> tuple[ClassSource, ...]:
        return tuple(self._seen(c) for c in self.base.mro(key))

    def holds(self, key: str, attribute: str) -> tuple[str, ...] | None:
        return self.base.holds(key, attribute)


def with_hook(classes: ClassLookup, key: str, reference_key: str, hook: FunctionNode, attribute: str, reference_attribute: str) -> dict[str, ClassSource]:
    """`key`'s class with the reference's hook added (its `self.<reference_attribute>` read as
    `self.<attribute>`): what the synthesis writes, as the analysis needs it."""
    cls = classes.mro(key)[0]
    written = hook  # shared with the reference's class when it reads the same attribute: never edited
    if attribute != reference_attribute:
        copies = _Copies()
        written = copies.own(hook)
        for sub in [n for n in walk(hook) if isinstance(n, ast.Attribute) and _attr_of_self(n) == reference_attribute]:
            copies.down_to(written, sub, ast.AST).attr = attribute
    return {cls.key: with_method(cls, written)}


def with_method(cls: ClassSource, method: FunctionNode) -> ClassSource:
    """`cls` with `method` at the end of its body: a shallow copy whose statements are shared, never
    changed (patched_sources copies what it edits), as the analysis needs a method apply writes."""
    node = copy.copy(cls.node)
    node.body = [*cls.node.body, method]
    return ClassSource(cls.name, cls.file, node, cls.walks)


def patched_sources(classes: ClassLookup, pieces: Sequence[PlumbingPiece], start: Mapping[str, ClassSource] | None = None) -> dict[str, ClassSource]:
    """The classes the pieces go into, with the pieces put into copies of their syntax trees."""
    out: dict[str, ClassSource] = dict(start or {})
    inserted: set[int] = set()
    copies = _Copies()
    for piece in pieces:
        key = f"{piece.file}:{piece.cls}"
        found = out.get(key) or next(iter(classes.mro(key)), None)
        if found is None:
            raise ValueError(f"{key}: not in the tree")
        node = copies.own(found.node)
        if node is not found.node:
            out[key] = ClassSource(found.name, found.file, node, found.walks)
        _apply_piece(node, piece, inserted, copies)
    return out


_Node = TypeVar("_Node", bound=ast.AST)
_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)  # what holds a statement: a statement, a handler, a case


class _Copies:
    """The nodes one patch has made its own: shallow copies (their lists too) of the nodes on the way
    down to what a piece edits, never of the rest, which stays shared with the tree (the analysis only
    reads it).  Copying a forward whole to insert three statements into it cost more than the analysis."""

    def __init__(self) -> None:
        self._own: set[int] = set()  # ids of the copies, each held by the patched tree

    def own(self, node: _Node) -> _Node:
        """`node` when it is a copy of this patch already, else a shallow copy whose lists are its own."""
        if id(node) in self._own:
            return node
        copied = copy.copy(node)
        for name, value in ast.iter_fields(copied):
            if isinstance(value, list):
                setattr(copied, name, list(value))
        self._own.add(id(copied))
        return copied

    def down_to(self, root: ast.AST, target: _Node, through: type | tuple[type, ...]) -> _Node:
        """`target`, found under `root` (a copy of this patch) through nodes of the types `through`, made
        a copy of this patch with every node on the way: editing it, or a list of it, changes no other tree."""
        steps = _path_to(root, target, through)
        if steps is None:
            raise ValueError(f"line {getattr(target, 'lineno', '?')}: not found where the piece goes")
        node = root
        for name, index in steps:
            value = getattr(node, name)
            child = self.own(value[index] if index is not None else value)
            if index is not None:
                value[index] = child
            else:
                setattr(node, name, child)
            node = child
        return node  # type: ignore[return-value]


def _path_to(root: ast.AST, target: ast.AST, through: type | tuple[type, ...]) -> list[tuple[str, int | None]] | None:
    """The fields (and list positions) from `root` down to `target`, looking only into nodes of the
    types `through`; None when it is not there."""
    for name, value in ast.iter_fields(root):
        children = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, child in children:
            if child is target:
                return [(name, index)]
            if isinstance(child, ast.AST) and isinstance(child, through):
                below = _path_to(child, target, through)
                if below is not None:
                    return [(name, index), *below]
    return None


def _apply_piece(node: ast.ClassDef, piece: PlumbingPiece, inserted: set[int], copies: _Copies) -> None:
    """Puts `piece` into `node` (a copy of `copies`), copying what it edits on the way."""
    method = next(
        (s for s in walk(node) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == piece.method and s.lineno == piece.method_line),
        None,
    )
    if method is None:
        raise ValueError(f"{piece.target}: no def at line {piece.method_line}")
    if piece.where == "beside":
        if method not in node.body:
            raise ValueError(f"{piece.target}: the def at line {piece.method_line} is not in the class body itself")
        written = _renamed_def(method, piece.defines)
        inserted.update(id(s) for s, _ in nested_statements([written]))
        position = node.body.index(method)
        node.body[position + 1 : position + 1] = [written]
        return
    method = copies.down_to(node, method, _BLOCKS)
    if piece.where == "end":
        new = _parsed(piece.code, method.body[-1].lineno, inserted)
        method.body.extend(new)
        return
    found = next((s for s, _ in nested_statements(method.body) if s.lineno == piece.line and id(s) not in inserted), None)
    if found is None:
        raise ValueError(f"{piece.target}: no statement at line {piece.line}")
    statement = copies.down_to(method, found, _BLOCKS)
    if piece.where == "header":
        given = ast.parse(f"{piece.code}\n    pass").body[0]
        if not isinstance(statement, ast.For) or not isinstance(given, ast.For):
            raise ValueError(f"{piece.target}: line {piece.line} is not a loop")
        for sub in walk(given):
            if isinstance(sub, (ast.stmt, ast.expr)):
                sub.lineno = sub.end_lineno = piece.line
        statement.target, statement.iter = given.target, given.iter
        return
    if piece.where == "argument":
        call = next(n for n in walk_code(statement) if isinstance(n, ast.Call) and _attr_of_self(n.func) == LOGITS)
        call = copies.down_to(statement, call, ast.AST)
        added = ast.parse(f"f({piece.code})", mode="eval").body
        assert isinstance(added, ast.Call)
        call.args += added.args
        call.keywords += added.keywords
        return
    block = next(b for s, b in nested_statements(method.body) if s is statement)
    position = block.index(statement)
    new = _parsed(piece.code, piece.line, inserted)
    if piece.where == "before":
        block[position:position] = new
    elif piece.where == "after":
        block[position + 1 : position + 1] = new
    else:
        block[position : position + 1] = new


def _parsed(code: str, line: int, inserted: set[int]) -> list[ast.stmt]:
    body = ast.parse(code).body
    for statement in body:
        for sub in walk(statement):
            if isinstance(sub, (ast.stmt, ast.expr)):
                sub.lineno = sub.end_lineno = line
        inserted.add(id(statement))
        for nested, _ in nested_statements([statement]):
            inserted.add(id(nested))
    return body


def verify_plan(classes: ClassLookup, plan: PlumbingPlan, reference: _Reference | None = None) -> tuple[PlumbingBlocker, ...]:
    """The analysis run again on the classes with the plan's pieces in them (and the reference's hook, for
    a class that has none): each gap left is a blocker."""
    start = with_hook(classes, plan.cls, reference.key, reference.hook, plan.attribute, reference.attribute) if reference is not None else {}
    try:
        patched = patched_sources(classes, plan.pieces, start)
    except (ValueError, SyntaxError) as exc:
        return (PlumbingBlocker("verify", f"the pieces do not go in: {exc}", plan.cls),)
    report = analyze_plumbing(PatchedClasses(classes, patched), plan.cls)
    left = tuple(PlumbingBlocker(g.piece, f"after the plumbing is written, {g.why}", g.at) for g in report.gaps)
    left += tuple(PlumbingBlocker("backbone", note, plan.cls) for note in report.unresolved)
    return left


def check_written(classes: ClassLookup, plan: PlumbingPlan, texts: Mapping[str, str], hook: FunctionNode | None = None, hook_attribute: str = "model") -> tuple[PlumbingBlocker, ...]:
    """The analysis run on the files as the codemod wrote them (`texts`: file -> patched source), with `hook`
    (the reference's, as the synthesis writes it) added to a class that has none: each gap is a blocker."""
    for file, text in texts.items():
        try:
            compile(text, file, "exec")
        except SyntaxError as exc:
            return (PlumbingBlocker("verify", f"the patched file does not compile: {exc}", file),)
    seen = PatchedClasses(classes, files=texts)
    start = with_hook(seen, plan.cls, plan.reference, hook, plan.attribute, hook_attribute) if hook is not None else {}
    report = analyze_plumbing(PatchedClasses(classes, start, texts), plan.cls)
    return tuple(PlumbingBlocker(g.piece, f"as written, {g.why}", g.at) for g in report.gaps)


def judge_through(
    classes: ClassLookup, key: str, patched: Mapping[str, ClassSource], owner: str, planner: PlumbingPlanner, reference_key: str, attribute: str
) -> PlumbingReport | str:
    """The analysis of `key` once apply has written: the classes `patched` says (patched_sources of the
    plumbing written), and `owner` (a base of `key`, or `key` itself) holding the hook learned from
    `reference_key`, on `self.<attribute>`; or why the reference's hook cannot be read (its plumbing is
    not complete)."""
    reference = planner.reference(reference_key)
    if not isinstance(reference, _Reference):
        return reference
    seen = PatchedClasses(classes, patched)
    start = with_hook(seen, owner, reference.key, reference.hook, attribute, reference.attribute)
    return analyze_plumbing(PatchedClasses(classes, {**patched, **start}), key)


def reference_hook(planner: PlumbingPlanner, plan: PlumbingPlan) -> tuple[FunctionNode, str] | None:
    """(the hook of the plan's reference, the backbone attribute it writes on): what the synthesis learns."""
    reference = planner.reference_for(plan.reference) if plan.reference else None
    return (reference.hook, reference.attribute) if isinstance(reference, _Reference) else None


# --------------------------------------------------------------------------- entry points


def plan_plumbing(classes: ClassLookup, key: str, references: Sequence[str], attribute: str = "model") -> PlumbingPlan:
    """`PlumbingPlanner(classes, references).plan(key, attribute)`: one class, references given as keys."""
    return PlumbingPlanner(classes, references).plan(key, attribute)


def tree_references(library: HookLibrary) -> tuple[str, ...]:
    """The tree's classes that implement the hook on a bare backbone: the candidates a reference is chosen from."""
    return tuple(dict.fromkeys(f"{r.owner.file}:{r.owner.name}" for r in library.references(HOOK)))


def tree_planner(resolver: Resolver, library: HookLibrary | None = None, classes: ClassLookup | None = None) -> PlumbingPlanner:
    """A planner over a resolved tree: the run's hook library (one is made when none is given) names the
    candidate references; pass the run's TreeClasses to share its parses."""
    from ..analyze.synthesize import HookLibrary
    from .gate import TreeClasses

    library = library or HookLibrary(resolver)
    return PlumbingPlanner(classes or TreeClasses(resolver), tree_references(library))
