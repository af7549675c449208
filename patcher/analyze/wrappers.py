"""The wrapper finder: which attributes of a model class hold another model, and its class(es).

`__init__` (and, through super(), its in-tree bases' `__init__`) is read for `self.X = ...`;
each right-hand side is followed to the classes it builds: a class name, a constructor
parameter's default or what a subclass passes for it, a class attribute, what a method or a
module-level helper returns.  What cannot be followed is kept as an `Unresolved` record with one
clause saying why.  Of the attributes found, the ones kept are those holding the language model:
towers, projectors and encoders are not what EAGLE-3 calls.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError
from ..read.bindings import (
    Binding,
    Function,
    FunctionScope,
    InitScope,
    Scope,
    assigned_value,
    assignment_lines,
    may_bind_self,
    other_self_bindings,
    statement_end,
    statements,
)
from ..read.expressions import code_of, constant_as_name, on_self, one_line, parse_value, root_name
from ..read.imports import ImportTable
from ..read.text import SourceFile, indent_width, is_code_line
from ..records import ClassInfo, InnerModel, Protocol, Signature, Unresolved, Wrapper
from .class_index import MAX_BASE_DEPTH, ClassIndex, ClassText, definition_ast, function_read

# a class name that says "model" (for an inner model class that lives in the wrapper's file)
_MODEL_NAME = re.compile(r"(Model|ForCausalLM|ForConditionalGeneration|LMHeadModel)$")
_NOT_LANGUAGE = re.compile(r"Vision|ViT|Visual|Image|Audio|Speech|Projector|Tower|Encoder|Patch|Config", re.IGNORECASE)
_CALLEE = re.compile(r"^([A-Za-z_][\w.]*)[ \t]*\(")
_BRACKET_TOKEN = re.compile(r'"{3}[\s\S]*?"{3}|\'{3}[\s\S]*?\'{3}|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#[^\n]*|[()\[\]{}]')
_SELF_METHOD_CALL = re.compile(r"\s*self\.(\w+)\(")  # a statement calling one of the class's methods
_SUPER_INIT = re.compile(r"\bsuper\([^)]*\)\.__init__\(|\b\w+\.__init__\(\s*self\b")
# a name that says "model" anywhere (`AutoModel.from_config`): an unresolved construction worth reporting
_MODEL_WORD = re.compile(r"Model|ForCausalLM|ForConditionalGeneration|LLM")
# an attribute named for the language model it holds (`language_model`, `model`, `llm`, `lm`)
_LANGUAGE_ATTRIBUTE = re.compile(r"(?:^|_)(?:language_model|model|llm|lm|text_model|backbone)$")
MAX_FOLLOW = 8  # steps from a construction to its class: names, parameters, returns, attributes


def _holds_language_model(cls: ClassInfo, wrapper_file: str) -> bool:
    """A model class from another file under models/, or a language-model-named one from the same file.
    A class with no base at all (a dataclass such as a weights mapper) is no module, let alone a model."""
    if not cls.file.startswith("models/") or _NOT_LANGUAGE.search(cls.name) or not (cls.bases or cls.external_bases):
        return False
    return cls.file != wrapper_file or bool(_MODEL_NAME.search(cls.name))


def _language_models(inners: list[InnerModel], protocol: Protocol, wrapper_file: str, plausible: set[Unresolved]) -> list[InnerModel]:
    """The inners worth reporting: those that offer protocol members, else the language models
    held; towers, projectors and layers are not that.  When none resolves, the constructions
    that look like the model but could not be followed (`AutoModel.from_config(...)`, a class
    picked at run time) are kept, each with its `Unresolved` record."""
    wanted = set(protocol.members)
    candidates = [i for i in inners if i.classes]
    providers = [i for i in candidates if any(wanted & set(c.members) for c in i.classes)]
    if providers:
        return providers
    held = [i for i in candidates if any(_holds_language_model(c, wrapper_file) for c in i.classes)]
    if held:
        return held
    return [i for i in inners if not i.classes and any(u in plausible for u in i.unresolved)]


@dataclass(frozen=True)
class _DeadEnd:
    """Where following a construction stopped: one clause, and whether what stopped it looks
    like the model (a class chosen at run time, a name that says Model)."""

    why: str
    plausible: bool


@dataclass
class _Held:
    """An inner model as `__init__`s are read: gathered here, then made into one InnerModel record."""

    line: int  # where __init__ first assigns it
    file: str  # the file whose __init__ assigns it
    conditional: bool = False
    classes: list[ClassInfo] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)


@dataclass
class _Built:
    """What a construction builds: the classes found and the paths that could not be followed."""

    classes: list[tuple[SourceFile, str]] = field(default_factory=list)
    dead_ends: list[_DeadEnd] = field(default_factory=list)

    @classmethod
    def dead(cls, why: str, plausible: bool) -> _Built:
        return cls(dead_ends=[_DeadEnd(why, plausible)])

    def said_of(self, expr: ast.expr, prefix: str) -> _Built:
        """Name the step that led to a dead end at `expr`: `minicpmv = _REGISTRY.get(v): chosen at run time`."""
        code = code_of(expr) + ":"
        self.dead_ends = [_DeadEnd(prefix + d.why if d.why.startswith(code) else d.why, d.plausible) for d in self.dead_ends]
        return self

    def merge(self, other: _Built) -> _Built:
        self.classes += [c for c in other.classes if c not in self.classes]
        self.dead_ends += [d for d in other.dead_ends if d not in self.dead_ends]
        return self


@dataclass
class Assignment:
    """`self.X = value` in an `__init__` the class runs: its own, or a base's through super()."""

    source: SourceFile
    index: int  # line index of `self.X =`
    end: int  # one past the statement's last line
    conditional: bool
    attribute: str
    value: str  # the right-hand side, every line of it
    scope: InitScope
    unpacked_from: str = ""  # `self.a, self.b = build(config)`: the code it is one of the values of
    starred: bool = False  # `self.a, *self.b = ...`: `value` is the list it receives
    position: tuple[int, int] | None = None  # (its place, how many targets) of what `unpacked_from` unpacks into


def _construction(value: str) -> ast.expr | None:
    """The part of a right-hand side that says what is built, parsed as little as possible:
    `Foo(...)` (or `Foo(...).to(dtype)`) -> the callee alone; a bare name; `A(...) if c else
    B(...)` or `REGISTRY[arch](config)` whole.  Anything else (`None`, `config.x`,
    `get_group().rank`) builds no model."""
    text = value.strip()
    head = text.lstrip("( \t\n")
    callee = _CALLEE.match(head)
    if callee is not None and not re.search(r"\)\s*if\b", text):
        rest = _after_brackets(head, callee.end() - 1)
        if not (re.fullmatch(r"[\s)]*", rest) or re.match(r"\s*\.\s*\w+\s*\(", rest)):
            return None  # `get_group().rank`, `Foo(...)[0]`: a part of what is built, not it
        func = parse_value(callee.group(1))
        return ast.Call(func=func, args=[], keywords=[]) if func is not None else None
    if re.fullmatch(r"[A-Za-z_]\w*", text):
        return parse_value(text)
    if re.search(r"\bif\b", text) and re.search(r"\belse\b", text):
        return parse_value(text)
    if text.endswith(")"):  # `REGISTRY[arch](config)`: a call of something that is not a name
        whole = parse_value(text)
        return whole if isinstance(whole, ast.Call) else None
    return None


def _after_brackets(text: str, start: int) -> str:
    """What follows the bracket that opens at `start` and the one that closes it (strings skipped)."""
    depth = 0
    for token in _BRACKET_TOKEN.finditer(text, start):
        if token.group() in "([{":
            depth += 1
        elif token.group() in ")]}":
            depth -= 1
            if depth == 0:
                return text[token.end() :]
    return ""


def _returns(function: Function) -> list[ast.expr]:
    """What a function's own `return X` statements return (not those of functions nested in it)."""
    return [s.value for s in statements(function) if isinstance(s, ast.Return) and s.value is not None]


class WrapperFinder:
    """Finds the models a class holds, through the class index; shared by every wrapper of a run."""

    def __init__(self, index: ClassIndex):
        self.index = index
        self.tree = index.tree
        self.cache = index.cache
        self._helpers: dict[tuple[Path, int, bool], _Built] = {}
        # per class, once per run: what its `__init__`s assign (read off the text alone), and the
        # models it holds (these follow `self.<member>` calls)
        self._assignments: dict[tuple[Path, str], list[Assignment]] = {}
        self._inners: dict[tuple[Path, str], tuple[Protocol, list[InnerModel]]] = {}

    def wrapper(self, source: SourceFile, name: str, protocol: Protocol) -> Wrapper:
        """The class, the language model(s) it holds, and whether `__getattr__` forwards every name."""
        info = self.index.class_info(source, name)
        if info is None:
            raise EaglepatchError(f"class {name} not found", path=source.rel)
        inners = self.inner_models(source, name, protocol)
        dynamic = None
        if info.dynamic:
            getattr_sig = info.members["__getattr__"]
            dynamic = f"__getattr__ at {getattr_sig.at}"
        return Wrapper(cls=info, inners=tuple(inners), path=source.rel, forwards_dynamically=dynamic)

    def init_assignments(
        self,
        source: SourceFile,
        name: str,
        depth: int = 0,
        caller: InitScope | None = None,
        owner: tuple[SourceFile, str] | None = None,
    ) -> list[Assignment]:
        """`self.X = ...` in __init__, the class's own first, then its in-tree bases' (via super()).

        Each comes with the scope its right-hand side is read in: a base's `__init__` sees the
        arguments the subclass passes up, and `self` is always the class asked about (`owner`).
        """
        if depth == 0 and caller is None and owner is None:
            key = (source.path, name)
            if key not in self._assignments:
                self._assignments[key] = self._init_assignments(source, name, 0, None, None)
            return list(self._assignments[key])
        return self._init_assignments(source, name, depth, caller, owner)

    def _init_assignments(
        self, source: SourceFile, name: str, depth: int, caller: InitScope | None, owner: tuple[SourceFile, str] | None
    ) -> list[Assignment]:
        text = self.index.class_text(source, name)
        if text is None:
            return []
        owner = owner or (source, name)
        init = self.index.init_range(text)
        out: list[Assignment] = []
        scope = caller  # no __init__ of its own: the base's sees what this class's caller passed
        calls_super = init is None
        if init is not None:
            scope = InitScope(source, owner, start=init[0], end=init[1], class_name=name, caller=caller)
            out += self._assignments_in(source, init, scope, False)
            for method, called_nested in self._methods_init_calls(source, text, init):
                method_scope = InitScope(source, owner, start=method[0], end=method[1], class_name=name, caller=None)
                out += self._assignments_in(source, method, method_scope, called_nested)
            calls_super = any(_SUPER_INIT.search(source.lines[i]) for i in range(init[0], init[1]))
        if calls_super and depth < MAX_BASE_DEPTH:
            for base in self.index.bases_of(text):
                found_base = self.index.find_class(source, base)
                if found_base is not None:
                    out += self.init_assignments(found_base[0], found_base[1], depth + 1, scope, owner)
        return out

    def _assignments_in(self, source: SourceFile, span: tuple[int, int], scope: InitScope, conditional: bool) -> list[Assignment]:
        """The `self.X = ...` statements of the def at `span`, each conditional when it sits in a block
        of the def's body (or the def itself is called from one)."""
        out = []
        found = self.index.self_assignments(source, *span)
        body_indent = min((assignment.indent for assignment in found), default=0)
        for index, indent, attribute, value, unpacked_from, whole, starred, position in found:
            nested = conditional or indent > body_indent or self._nested(source, span, index)
            end = statement_end(source.lines, index)
            if not whole:
                value = assigned_value(source.lines, index, f"self.{attribute}", end) or ""
            out.append(Assignment(source, index, end, nested, attribute, value, scope, unpacked_from, starred, position))
        return out

    def _methods_init_calls(self, source: SourceFile, text: ClassText, init: tuple[int, int]) -> list[tuple[tuple[int, int], bool]]:
        """The class's own methods `__init__` calls as a statement, `self._init_model(config)`: what they
        bind on `self` is bound by `__init__` (each with whether the call sits in a block)."""
        outline = self.index.cache.outline(source)
        methods = {method: index for index, method in text.methods(outline) if method != "__init__"}
        out: list[tuple[tuple[int, int], bool]] = []
        for index in range(init[0] + 1, init[1]):
            called = _SELF_METHOD_CALL.match(source.lines[index])
            start = methods.get(called.group(1)) if called else None
            if start is not None and all(span[0] != start for span, _ in out):
                out.append(((start, outline.ends.get(start, start + 1)), self._nested(source, init, index)))
        return out

    @staticmethod
    def _nested(source: SourceFile, init: tuple[int, int], index: int) -> bool:
        """True when the line sits deeper than __init__'s own body (inside an if/try/with)."""
        first = next((i for i in range(init[0] + 1, init[1]) if is_code_line(source.lines[i]) and not source.lines[i].lstrip().startswith(('"', "'", ")"))), None)
        return first is not None and indent_width(source.lines[index]) > indent_width(source.lines[first])

    def inner_models(self, source: SourceFile, name: str, protocol: Protocol) -> list[InnerModel]:
        """Attributes `__init__` fills with another model, and the class(es) each may hold.

        A construction that cannot be followed to a class is kept as an `Unresolved` record on
        its attribute, so the report can show it rather than lose it.
        """
        key = (source.path, name)
        known = self._inners.get(key)
        if known is None or known[0] is not protocol:
            known = self._inners[key] = (protocol, self._inner_models(source, name, protocol))
        return list(known[1])

    def _inner_models(self, source: SourceFile, name: str, protocol: Protocol) -> list[InnerModel]:
        found: dict[str, _Held] = {}
        plausible: set[Unresolved] = set()
        for assignment in self.init_assignments(source, name):
            if assignment.unpacked_from:
                built = self._unpacked(assignment)
            elif assignment.starred:
                built = self._listed(assignment)
            else:
                expr = _construction(assignment.value)
                built = self._built_by(expr, assignment.scope) if expr is not None else _Built()
            if not built.classes and not built.dead_ends:
                continue  # `self.x = None`, `self.x = config`: no model built here
            where = assignment.source
            held = found.get(assignment.attribute)
            if held is None:
                held = found[assignment.attribute] = _Held(assignment.index + 1, where.rel)
            held.conditional = held.conditional or assignment.conditional
            for target in built.classes:
                info = self.index.class_info(*target)
                if info is not None and all(c.name != info.name for c in held.classes):
                    held.classes.append(info)
            construct = one_line(where.lines[assignment.index : assignment.end]) if built.dead_ends else ""
            for dead_end in built.dead_ends:
                record = Unresolved(construct, f"{where.rel}:{assignment.index + 1}", dead_end.why)
                if record not in held.unresolved:
                    held.unresolved.append(record)
                if dead_end.plausible and not _NOT_LANGUAGE.search(assignment.attribute):
                    plausible.add(record)
        inners = [
            InnerModel(attribute, tuple(h.classes), h.line, h.conditional, h.file, tuple(h.unresolved)) for attribute, h in found.items()
        ]
        return _language_models(inners, protocol, source.rel, plausible)

    def _unpacked(self, assignment: Assignment) -> _Built:
        """`self.proj, self.language_model = build_parts(config)`: the element that lands in the attribute
        of each tuple the helper or method returns (or a local holds); when it cannot be read, a dead end,
        plausible when the attribute or what is unpacked says it is the model."""
        origin = one_line(assignment.unpacked_from.split("\n"))
        value = parse_value(assignment.unpacked_from)
        if assignment.position is not None and value is not None:
            built = self._element_built(value, assignment.scope, *assignment.position)
            if built.classes or built.dead_ends:
                return built
        plausible = bool(_MODEL_WORD.search(origin) or _LANGUAGE_ATTRIBUTE.search(assignment.attribute))
        return _Built.dead(f"self.{assignment.attribute} is one of the values of {origin}, which one is not followed", plausible)

    def _element_built(self, value: ast.expr, scope: Scope, place: int, count: int) -> _Built:
        """What element `place` of the `count`-tuple `value` evaluates to builds: `value` a call of a method
        or module-level helper whose returns are tuples, or a local bound to one; nothing found else."""
        tuples: list[tuple[ast.expr, Scope]] = []
        if isinstance(value, ast.Name):
            tuples = [(b.expr, b.scope) for b in scope.locals(value.id) if b.expr is not None]
        elif isinstance(value, ast.Call):
            function, source = None, None
            member = self._self_member(value.func, scope)
            if member is not None and member.kind == "method":
                function = definition_ast(self.cache, member)
                source = self.cache.read(member.path) if function is not None and member.path is not None else None
            elif isinstance(value.func, ast.Name) and not scope.bindings(value.func.id):
                helper = self._helper_function(scope.source, value.func.id)
                if helper is not None:
                    source, function = helper[0], function_read(self.cache, *helper)
            if function is not None and source is not None:
                inner = FunctionScope(source, scope.owner, node=function)
                tuples = [(returned, inner) for returned in _returns(function)]
        built = _Built()
        for expr, where in tuples:
            if isinstance(expr, (ast.Tuple, ast.List)) and len(expr.elts) == count and not any(isinstance(e, ast.Starred) for e in expr.elts):
                built.merge(self._built_by(expr.elts[place], where, 1))
        return built

    def _listed(self, assignment: Assignment) -> _Built:
        """`self.a, *self.language_model = None, Foo(config)`: a starred target receives a list; a list
        that holds a model is reported (the attribute is not the model, so nothing forwards to it)."""
        listed = parse_value(assignment.value)
        built = _Built()
        for element in listed.elts if isinstance(listed, ast.List) else []:
            expr = _construction(code_of(element))
            if expr is not None:
                built.merge(self._built_by(expr, assignment.scope))
        if not built.classes:
            return _Built()
        names = "/".join(target[1] for target in built.classes)
        return _Built.dead(f"self.{assignment.attribute} is a starred target: it holds a list of {names}, not the model", True)

    # -- following a construction to the class(es) it builds ----------------------------------
    def _built_by(self, expr: ast.expr, scope: Scope, depth: int = 0) -> _Built:
        """The classes an expression builds an instance of: `Foo(...)`, `cls(...)`,
        `self._init_model(...)`, a local holding one, either side of `A(...) if c else B(...)`."""
        if depth > MAX_FOLLOW:
            return _Built.dead(f"{code_of(expr)}: followed too many steps", False)
        if isinstance(expr, ast.IfExp):
            return self._built_by(expr.body, scope, depth + 1).merge(self._built_by(expr.orelse, scope, depth + 1))
        if isinstance(expr, ast.Name):
            built = _Built()
            for binding in scope.locals(expr.id):
                assert binding.expr is not None, "a local is bound to the value assigned"
                built.merge(self._built_by(binding.expr, binding.scope, depth + 1))
            return built  # a parameter or a global is handed in, not built here
        if isinstance(expr, ast.Call):
            return self._called(expr.func, scope, depth)
        return _Built()

    def _called(self, func: ast.expr, scope: Scope, depth: int) -> _Built:
        """What calling `func` builds: a class, or whatever the method or helper returns."""
        member = self._self_member(func, scope)
        if member is not None:
            if member.kind == "attribute":
                return self._attribute_class(member, scope, depth)
            function = definition_ast(self.cache, member)
            if function is None:
                return _Built.dead(f"{code_of(func)}: its definition could not be read", False)
            assert member.path is not None, "a definition that was read has its file"
            source = self.cache.read(member.path)
            return self._returned(function, FunctionScope(source, scope.owner, node=function), member.kind == "method", depth)
        if on_self(func):
            return _Built()  # `self.x.to(...)`, a method of an out-of-tree base: not a construction
        if isinstance(func, ast.Name) and not scope.bindings(func.id) and self.index.find_class(scope.source, func) is None:
            helper = self._helper_function(scope.source, func.id)
            if helper is not None:
                return self._built_by_helper(helper, scope.owner, depth)
        return self._class_named_by(func, scope, depth)

    def _class_named_by(self, expr: ast.expr, scope: Scope, depth: int = 0) -> _Built:
        """The class(es) an expression evaluates to: a class name, a parameter's default or what a
        subclass passes for it, a class attribute, a factory method's return."""
        if depth > MAX_FOLLOW:
            return _Built.dead(f"{code_of(expr)}: followed too many steps", False)
        if isinstance(expr, ast.IfExp):
            return self._class_named_by(expr.body, scope, depth + 1).merge(self._class_named_by(expr.orelse, scope, depth + 1))
        if isinstance(expr, ast.Constant) and expr.value is None:
            return _Built()
        if isinstance(expr, ast.Constant) and isinstance(expr.value, bool):
            # `True`/`False` where a class is expected: looked up as a name, and reported as one that
            # names no class (the clause the report has always given)
            expr = constant_as_name(expr)
        bindings = scope.bindings(expr.id) if isinstance(expr, ast.Name) else []
        if bindings:
            return self._bound_class(bindings, depth)
        member = self._self_member(expr, scope)
        if member is not None and member.kind == "attribute":
            return self._attribute_class(member, scope, depth)
        if isinstance(expr, ast.Call):
            return self._returned_class(expr, scope, depth)
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
            table = self._class_table(expr.value, scope, depth)
            if table is not None:  # `_SUPPORT_VERSION[version]`
                return table
        if isinstance(expr, (ast.Name, ast.Attribute)) and not on_self(expr):
            target = self.index.find_class(scope.source, expr)
            if target is not None:
                return _Built([target])
            name = code_of(expr)
            root = root_name(expr)  # `AutoModel` of `AutoModel.from_config`: what the name says it is
            looks_like_model = bool(_MODEL_WORD.search(name)) and not (root and _NOT_LANGUAGE.search(root.id))
            return _Built.dead(f"{name}: {self.index.why_not_found(scope.source, expr)}", looks_like_model)
        return _Built.dead(f"{code_of(expr)}: chosen at run time", True)

    def _bound_class(self, bindings: list[Binding], depth: int) -> _Built:
        built = _Built()
        for binding in bindings:
            if binding.expr is None:
                built.merge(_Built.dead(f"{binding.name}: a parameter with no default, given at run time", True))
            else:
                found = self._class_named_by(binding.expr, binding.scope, depth + 1)
                built.merge(found.said_of(binding.expr, f"{binding.name} = "))
        return built

    def _returned_class(self, call: ast.Call, scope: Scope, depth: int) -> _Built:
        """`self.get_model_cls(config)`, `pick_class(config)`: the classes the function returns;
        a registry lookup (`REGISTRY.get(arch)`) is chosen at run time."""
        member = self._self_member(call.func, scope)
        if member is not None and member.kind != "attribute":
            function = definition_ast(self.cache, member)
            if function is not None:
                assert member.path is not None, "a definition that was read has its file"
                source = self.cache.read(member.path)
                return self._returned(function, FunctionScope(source, scope.owner, node=function), False, depth)
        if isinstance(call.func, ast.Name) and not scope.bindings(call.func.id):
            helper = self._helper_function(scope.source, call.func.id)
            if helper is not None:
                return self._built_by_helper(helper, scope.owner, depth, instances=False)
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(func.value, ast.Name) and call.args:
            table = self._class_table(func.value, scope, depth)
            if table is not None:  # `_SUPPORT_VERSION.get(version)`: one of its values, or the default given
                return table.merge(self._class_named_by(call.args[1], scope, depth + 1)) if len(call.args) > 1 else table
        return _Built.dead(f"{code_of(call)}: chosen at run time", True)

    def _class_table(self, name: ast.Name, scope: Scope, depth: int) -> _Built | None:
        """The classes a module-level dict literal of classes holds (MiniCPM-V's `_SUPPORT_VERSION`, keyed
        by version), when the module binds it once and never adds to it: a lookup in it is one of them.
        None when `name` is not such a table."""
        if scope.bindings(name.id):
            return None
        lines = scope.source.lines
        at = [i for i in assignment_lines(lines, 0, len(lines)).get(name.id, []) if not lines[i][:1].isspace()]
        if len(at) != 1 or re.search(rf"^\s*{re.escape(name.id)}\s*(?:\[.*\]\s*=|\.(?:update|setdefault|__setitem__)\()", scope.source.text, re.M):
            return None
        value = parse_value(assigned_value(lines, at[0], name.id) or "")
        if not isinstance(value, ast.Dict) or not value.values or any(key is None for key in value.keys):
            return None
        built = _Built()
        for entry in value.values:
            built.merge(self._class_named_by(entry, scope.module(), depth + 1))
        return built if built.classes and not built.dead_ends else None

    def _returned(self, function: Function, scope: FunctionScope, instances: bool, depth: int) -> _Built:
        """Every `return` of a method or helper: instances built (or classes returned) there."""
        built = _Built()
        follow = self._built_by if instances else self._class_named_by
        for value in _returns(function):
            built.merge(follow(value, scope, depth + 1).said_of(value, f"{function.name} returns "))
        if not built.classes and not built.dead_ends:
            return _Built.dead(f"{function.name}: returns no model class that can be read", False)
        return built

    def _built_by_helper(self, helper: tuple[SourceFile, int], owner: tuple[SourceFile, str] | None, depth: int, instances: bool = True) -> _Built:
        """`self.language_model = build_lm(config)`: the classes a module-level helper returns
        (the same for every class that calls it: a module-level function has no `self`)."""
        key = (helper[0].path, helper[1], instances)
        if key not in self._helpers:
            self._helpers[key] = self._helper_returns(helper, owner, depth, instances)
        found = self._helpers[key]
        return _Built(list(found.classes), list(found.dead_ends))

    def _helper_returns(self, helper: tuple[SourceFile, int], owner: tuple[SourceFile, str] | None, depth: int, instances: bool) -> _Built:
        source, header = helper
        function = function_read(self.cache, source, header)
        if function is None:
            return _Built.dead(f"{source.lines[header].strip()}: could not be read", False)
        return self._returned(function, FunctionScope(source, owner, node=function), instances, depth)

    def _helper_function(self, source: SourceFile, name: str, depth: int = 0) -> tuple[SourceFile, int] | None:
        """A module-level `def name`, in this file or imported from another model module.  Helpers
        elsewhere (a parallel-group getter, a layer factory) build no model class, and reading
        their modules only costs time."""
        outline = self.cache.outline(source)
        header = next((i for i, indent, kind, n in outline.headers if kind == "def" and indent == 0 and n == name), None)
        if header is not None:
            return source, header
        origin = ImportTable.of(self.cache, source, self.tree).lookup(name)
        if origin is None or origin.path is None or origin.name is None or depth > 2:
            return None
        if not self.tree.rel(origin.path).startswith("models/"):
            return None
        try:
            return self._helper_function(self.cache.read(origin.path), origin.name, depth + 1)
        except EaglepatchError:
            return None

    def _self_member(self, expr: ast.expr, scope: Scope) -> Signature | None:
        """`self.name`: the member the most derived class has (methods resolve virtually)."""
        if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
            return None
        info = self.index.class_info(*scope.owner) if scope.owner is not None else None
        return info.members.get(expr.attr) if info is not None else None

    def _attribute_class(self, member: Signature, scope: Scope, depth: int) -> _Built:
        """`model_cls = Foo` at class level (or `self.model_cls = Foo` in __init__): the class."""
        source = self.cache.read(self.tree.srt / member.file)
        index = member.line - 1
        text = assigned_value(source.lines, index, member.name) or assigned_value(source.lines, index, f"self.{member.name}")
        if text is None and may_bind_self(source.lines[index]):  # `self.a, self.model_cls = ...`, `setattr(self, ...)`
            text = next((b.value for b in other_self_bindings(source.lines, index) if b.attribute == member.name), None)
        value = parse_value(text or "")
        if value is None:
            return _Built.dead(f"self.{member.name}: its value could not be read", False)
        return self._class_named_by(value, Scope(source, scope.owner), depth + 1)

