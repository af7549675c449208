"""What a name inside a function stands for, read off the source without running it.

An inner model is often built through a name rather than a class: a constructor parameter
whose default is the class (`language_model_cls=Qwen3LLMModel`), an argument a subclass
passes up through `super().__init__(...)`, or a local assigned a few lines above.  A scope
answers "which expression is this name bound to, and where is that expression evaluated".

`__init__` bodies are long, so an `InitScope` reads them as text and parses only the lines
that answer a question (the signature, one assignment, the `super().__init__` call).  Short
methods and helper functions are read whole (`FunctionScope`).  The same kind of reading
tells whether a `__getattr__` forwards any name it is asked for, or only a few.  Everything is
read by CPython's parser (read/expressions.py): nothing here writes code.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .expressions import code_of_line, on_self, parse_statement, parse_value, source_code
from .outline import has_word
from .statements import walk
from .text import SourceFile, bracket_scan, indent_width

_CONTINUED = re.compile(r"\\[ \t]*$")
_TARGET = re.compile(r"[ \t]*([A-Za-z_][\w.]*)[ \t]*(?::[^=\n]*)?=(?!=)")  # `name =`, `self.x: T =`
_SUPER_CALL = re.compile(r"\bsuper\([^)]*\)\.__init__\(|\b([\w.]+)\.__init__\(\s*self\b")


def statement_end(lines: Sequence[str], index: int) -> int:
    """One past the last line of the statement starting at `index` (open brackets, `\\`)."""
    depth, in_string = 0, None
    for i in range(index, len(lines)):
        line = lines[i]
        depth, in_string = bracket_scan(line, depth, in_string)
        if depth <= 0 and in_string is None and not _CONTINUED.search(line):
            return i + 1
    return len(lines)


def assigned_value(lines: Sequence[str], start: int, target: str, end: int | None = None) -> str | None:
    """The right-hand side of `target = ...` (or `target: T = ...`) starting at line `start`; `end` is
    statement_end(lines, start) when the caller has it."""
    match = _TARGET.match(lines[start])
    if match is None or match.group(1) != target:
        return None
    rest = [lines[start][match.end() :], *lines[start + 1 : statement_end(lines, start) if end is None else end]]
    return "\n".join(code_of_line(line).rstrip().rstrip("\\") for line in rest).strip()


def assignment_lines(lines: Sequence[str], start: int, end: int) -> dict[str, list[int]]:
    """name -> line indices of `name = ...` (or `name: T = ...`) in lines [start, end)."""
    found: dict[str, list[int]] = {}
    for index in range(start, end):
        match = _TARGET.match(lines[index])
        if match is not None and "." not in match.group(1):
            found.setdefault(match.group(1), []).append(index)
    return found


@dataclass
class Binding:
    """`name` is bound to `expr` (None: a parameter with no default that nothing passes), which
    is evaluated in `scope`."""

    name: str
    kind: str  # "parameter" | "local"
    expr: ast.expr | None
    scope: Scope


@dataclass
class Scope:
    """Module-level names: nothing is bound here that the module's own lookup would not find."""

    source: SourceFile
    owner: tuple[SourceFile, str] | None  # the class `self` is an instance of (the most derived)

    def bindings(self, name: str) -> list[Binding]:
        """What `name` is bound to here: a parameter (its default, or what a caller passes), or
        the values a local receives; [] for a module-level name."""
        return []

    def locals(self, name: str) -> list[Binding]:
        """The values `name` receives as a local of this function (not as a parameter)."""
        return []

    def module(self) -> Scope:
        return Scope(self.source, self.owner)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def parameters(params: ast.arguments) -> list[tuple[ast.arg, ast.expr | None]]:
    """Each parameter a name can be bound to (not `*args`, `**kwargs`), with its default."""
    positional = [*params.posonlyargs, *params.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(params.defaults)) + list(params.defaults)
    return [*zip(positional, defaults), *zip(params.kwonlyargs, params.kw_defaults)]


def _positional(params: ast.arguments) -> list[ast.arg]:
    """Parameters an argument can fill by position, `self` left out."""
    return [*params.posonlyargs, *params.args][1:]


@dataclass
class FunctionScope(Scope):
    """A method or helper function, read whole: its parameters, then its locals."""

    node: Function | None = None  # always given: a default only because Scope's fields have them
    _locals: dict[str, list[ast.expr]] | None = field(default=None, repr=False)

    def function(self) -> Function:
        assert self.node is not None, "a FunctionScope is made with the def it reads"
        return self.node

    def bindings(self, name: str) -> list[Binding]:
        for param, default in parameters(self.function().args):
            if param.arg == name:
                return [Binding(name, "parameter", default, self.module())]
        return self.locals(name)

    def locals(self, name: str) -> list[Binding]:
        if self._locals is None:
            self._locals = _assignments(self.function())
        return [Binding(name, "local", value, self) for value in self._locals.get(name, [])]


def statements(function: Function) -> Iterator[ast.stmt]:
    """Every statement of a function, however deep in if/for/while/with/try/match blocks it sits, but
    not those of functions or classes defined inside it (nor those defs).  A compound statement's
    blocks come last one first (`else` before the `if` body, `finally` before the handlers), each in
    source order: the order this stage has always reported values in."""
    pending: list[ast.AST] = list(reversed(function.body))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.stmt):
            yield node
        for part in ("body", "orelse", "handlers", "finalbody", "cases"):
            child = getattr(node, part, None)
            if isinstance(child, list):
                pending.extend(reversed(child))  # the part pushed last is taken first


def _assignments(function: Function) -> dict[str, list[ast.expr]]:
    """name -> every value `name = ...` receives in the function."""
    out: dict[str, list[ast.expr]] = {}
    for statement in statements(function):
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(statement.value)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
            out.setdefault(statement.target.id, []).append(statement.value)
    return out


@dataclass
class InitScope(Scope):
    """An `__init__`, read as text: lines [start, end) of `source`, `start` its `def` line.

    `caller` is the subclass `__init__` whose `super().__init__(...)` call runs this one, so a
    parameter is bound to what that call passes before falling back to its default.
    """

    start: int = 0
    end: int = 0
    class_name: str = ""
    caller: InitScope | None = None
    _signature: Function | None = field(default=None, repr=False)
    _calls: dict | None = field(default=None, repr=False)
    _header: str | None = field(default=None, repr=False)
    _assigned: dict | None = field(default=None, repr=False)

    def header(self) -> str:
        if self._header is None:
            lines = self.source.lines
            self._header = "\n".join(lines[self.start : statement_end(lines, self.start)])
        return self._header

    def signature(self) -> Function | None:
        """The `def __init__(...)` line(s) parsed on their own."""
        if self._signature is None:
            self._signature = _parse_signature("\n".join(line.strip() for line in self.header().split("\n")))
        return self._signature

    def bindings(self, name: str) -> list[Binding]:
        if has_word(self.header(), name):
            signature = self.signature()
            if signature is not None:
                for param, default in parameters(signature.args):
                    if param.arg == name:
                        return [self._parameter(signature, name, default)]
        return self.locals(name)

    def _parameter(self, signature: Function, name: str, default: ast.expr | None) -> Binding:
        if self.caller is not None:
            passed = self.caller.argument_to(self.class_name, signature, name)
            if passed is not None:
                return Binding(name, "parameter", passed, self.caller)
        return Binding(name, "parameter", default, self.module())

    def locals(self, name: str) -> list[Binding]:
        if self._assigned is None:  # one pass over the body, however many names are asked about
            self._assigned = assignment_lines(self.source.lines, self.start + 1, self.end)
        out = []
        for index in self._assigned.get(name, ()):
            value = parse_value(assigned_value(self.source.lines, index, name) or "")
            if value is not None:
                out.append(Binding(name, "local", value, self))
        return out

    # -- what this __init__ passes to the base's --------------------------------------
    def super_calls(self) -> dict[str, tuple[ast.Call, bool]]:
        """`super().__init__(...)` (key "") and `Base.__init__(self, ...)` (key "Base") calls,
        with whether `self` is passed explicitly."""
        if self._calls is None:
            self._calls = {}
            lines = self.source.lines
            for index in range(self.start + 1, self.end):
                match = _SUPER_CALL.search(lines[index])
                if match is None:
                    continue
                call = _init_call(lines[index : statement_end(lines, index)], indent_width(lines[index]))
                if call is not None:
                    key = (match.group(1) or "").rsplit(".", 1)[-1]
                    self._calls.setdefault(key, (call, bool(match.group(1))))
        return self._calls

    def argument_to(self, base: str, signature: Function, name: str) -> ast.expr | None:
        """The expression this `__init__` passes as parameter `name` of `base.__init__`."""
        calls = self.super_calls()
        found = calls.get(base) or calls.get("")
        if found is None:
            return None
        call, explicit_self = found
        args = call.args[1:] if explicit_self else call.args
        positional = _positional(signature.args)
        for position, arg in enumerate(args):
            if isinstance(arg, ast.Starred):
                break  # after `*args` positions are unknown
            if position < len(positional) and positional[position].arg == name:
                return arg
        return next((k.value for k in call.keywords if k.arg == name), None)


@functools.lru_cache(maxsize=2048)
def _parse_signature(header: str) -> Function | None:
    """A `def` header parsed with a stand-in body; the same base `__init__` is asked about once
    per subclass, so the parse is shared."""
    node = parse_statement(header.rstrip() + "\n    pass\n")
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _init_call(lines: Sequence[str], indent: int) -> ast.Call | None:
    """The `....__init__(...)` call in a statement (`super().__init__(...)`, possibly wrapped)."""
    return _parse_init_call("\n".join(line[indent:] if indent_width(line) >= indent else line.lstrip() for line in lines))


@functools.lru_cache(maxsize=2048)
def _parse_init_call(text: str) -> ast.Call | None:
    """The first `X.__init__(...)` call of the statement, the outermost first (a walk in source order)."""
    statement = parse_statement(text + "\n")
    pending: list[ast.AST] = [statement] if statement is not None else []
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            return node
        pending.extend(reversed(list(ast.iter_child_nodes(node))))
    return None


# -- __getattr__ ----------------------------------------------------------------------------
def forwards_any_name(function: Function) -> bool:
    """True when `__getattr__` hands any name it is asked for on to another object: a
    `return getattr(self.X, name)` that no test on the name in front of it narrows down to a
    few names (`if name == "x": raise` only keeps one name out; `if name in (...)` lets only
    those through)."""
    params = _positional(function.args)
    return bool(params) and _reaches_forward(function.body, params[0].arg)


def _reaches_forward(statements: list[ast.stmt], name: str) -> bool:
    for statement in statements:
        if _is_forward(statement, name):
            return True
        if isinstance(statement, ast.If):
            narrows = _narrowing(statement.test, name)
            if narrows != "only" and _reaches_forward(statement.body, name):
                return True
            if narrows != "except" and _reaches_forward(statement.orelse, name):  # `elif`: an If alone in it
                return True
            if narrows == "except" and _ends(statement.body):
                return False  # `if name not in (...): raise`: only those names go on
        elif isinstance(statement, (ast.Try, ast.With, ast.AsyncWith)):
            blocks = [statement.body] + [h.body for h in getattr(statement, "handlers", ())]
            if any(_reaches_forward(block, name) for block in blocks):
                return True
    return False


def _is_forward(statement: ast.stmt, name: str) -> bool:
    """`return getattr(self.X, name)` (with or without a default)."""
    value = statement.value if isinstance(statement, ast.Return) else None
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "getattr"
        and len(value.args) >= 2
        and on_self(value.args[0])
        and isinstance(value.args[1], ast.Name)
        and value.args[1].id == name
    )


def _ends(statements: list[ast.stmt]) -> bool:
    """The block ends by leaving: its last line raises or returns (`x = 1; return` counts, as on one line)."""
    if not statements:
        return False
    last_line = statements[-1].lineno
    return any(isinstance(s, (ast.Raise, ast.Return)) for s in statements if s.lineno == last_line)


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in walk(node))


_EXCLUDING = (ast.NotIn, ast.NotEq, ast.IsNot)


def _narrowing(test: ast.expr, name: str) -> str | None:
    """How a condition on `name` splits names: "only" (true for a few: `name in (...)`,
    `name == "x"`, `name.startswith("x")`), "except" (true for all but a few: `not in`, `!=`), or
    None (it does not test the name, e.g. `hasattr(self.inner, name)`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _narrowing(test.operand, name)
        return {"only": "except", "except": "only"}.get(inner or "")
    if isinstance(test, ast.BoolOp):
        sides = {_narrowing(value, name) for value in test.values} - {None}
        prefer = "only" if isinstance(test.op, ast.And) else "except"
        return prefer if prefer in sides else next(iter(sides), None)
    if isinstance(test, ast.Compare) and _mentions(test, name):
        excluding = all(isinstance(op, _EXCLUDING) for op in test.ops)
        return "except" if excluding else "only"
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and _mentions(test.func.value, name):
        return "only"
    return None


# -- `self.<name>` bound by a form other than `self.<name> = value` ---------------------------------
# a line that may bind attributes of `self` without starting `self.<name> =`: a tuple or list of targets
# (`self.a, self.b = ...`, `(self.a, *self.b) = ...`), `setattr(self, "<name>", ...)`, `self.add_module(...)`
_OTHER_BINDING = re.compile(
    r"[ \t]*(?:[(\[][ \t]*)?(?:\*[ \t]*)?self\.\w+[ \t]*,[^=\n]*=(?!=)|[ \t]*setattr[ \t]*\([ \t]*self[ \t]*,|[ \t]*self\.add_module[ \t]*\("
)


@dataclass(frozen=True)
class SelfBinding:
    """One attribute of `self` a statement binds, and to what: `value` is the code of the expression it
    receives; `unpacked_from` the code it is one of the values of, when which one cannot be read
    (`self.a, self.b = build(config)`)."""

    attribute: str
    value: str
    unpacked_from: str = ""
    starred: bool = False  # a starred target: it receives a list (`value` spells it)
    position: tuple[int, int] | None = None  # (its place, the number of targets) when unpacked_from is unpacked into it alone


# the value of `self.a = ...` is itself an assignment target (`self.a = self.b = value`, `self.a = x, self.b = ...`)
CHAINED = re.compile(r"[\w.]+[ \t]*(?:,[^=\n]*)?=(?!=)")


def may_bind_self(line: str) -> bool:
    """The line starts a statement other_self_bindings may read (cheap: most lines say no at once)."""
    return "self" in line and ("," in line or "add_module" in line) and _OTHER_BINDING.match(line) is not None


def other_self_bindings(lines: Sequence[str], index: int, end: int | None = None) -> list[SelfBinding]:
    """The attributes of `self` the statement at line `index` binds through a tuple or starred target, a
    chain (`self.a = self.b = value`), `setattr(self, "<literal>", value)` or `self.add_module("<literal>",
    value)`; [] for any other statement."""
    end = statement_end(lines, index) if end is None else end
    statement = parse_statement("\n".join([lines[index].lstrip(), *lines[index + 1 : end]]) + "\n")
    out: list[SelfBinding] = []
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                _unpack(target, statement.value, out)
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                out.append(SelfBinding(target.attr, source_code(statement.value)))  # `self.a = self.b = value`
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        found = _registered(statement.value)
        if found is not None:
            out.append(SelfBinding(found[0], source_code(found[1])))
    return out


def _registered(call: ast.Call) -> tuple[str, ast.expr] | None:
    """`setattr(self, "name", value)` and `self.add_module("name", value)`: the name and the value."""
    func, args = call.func, list(call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if isinstance(func, ast.Name) and func.id == "setattr" and len(args) == 3 and not keywords:
        receiver, name, value = args
        if not (isinstance(receiver, ast.Name) and receiver.id == "self"):
            return None
    elif isinstance(func, ast.Attribute) and func.attr == "add_module" and isinstance(func.value, ast.Name) and func.value.id == "self":
        given = args + [keywords[k] for k in ("name", "module") if k in keywords]
        if len(given) != 2 or any(isinstance(a, ast.Starred) for a in args):
            return None
        name, value = given
    else:
        return None
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.isidentifier():
        return name.value, value
    return None


def _unpack(target: ast.Tuple | ast.List, value: ast.expr | None, out: list[SelfBinding], origin: str = "") -> None:
    """Pair each `self.<name>` of a tuple target with the element of `value` it receives, as Python
    unpacks: from the front up to a starred target or value, from the back after it.  A name whose
    element cannot be read (`value` is a call, or the element's place hangs on a starred value) is
    kept as unpacked from `origin`, the code of what is unpacked."""
    targets = target.elts
    values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
    if value is not None and values is None:
        origin = source_code(value)
    star_t = next((i for i, t in enumerate(targets) if isinstance(t, ast.Starred)), None)
    star_v = next((i for i, v in enumerate(values) if isinstance(v, ast.Starred)), None) if values is not None else None
    for i, element in enumerate(targets):
        starred = isinstance(element, ast.Starred)
        inner = element.value if isinstance(element, ast.Starred) else element
        received: ast.expr | None = None
        if values is not None:
            from_back = len(targets) - i  # 1 for the last target
            front = star_v if star_v is not None else len(values)  # values placed from the front
            back = len(values) - star_v - 1 if star_v is not None else len(values)  # values placed from the back
            if star_t is None or i < star_t:
                placed = i < front if star_t is not None or star_v is None else i < front or from_back <= back
                if placed:
                    received = values[i] if i < front else values[len(values) - from_back]
            elif i > star_t:
                if from_back <= back:
                    received = values[len(values) - from_back]
            elif star_v is None:  # the starred target: a list of what the others leave
                received = ast.List(elts=values[star_t : len(values) - (len(targets) - star_t - 1)], ctx=ast.Load())
            if received is None and star_v is not None:
                origin = source_code(values[star_v])
        if isinstance(inner, (ast.Tuple, ast.List)) and not starred:
            _unpack(inner, received, out, origin)
            continue
        if not (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self"):
            continue
        if received is None:
            place = (i, len(targets)) if value is not None and values is None and star_t is None else None
            out.append(SelfBinding(inner.attr, "", origin, position=place))
        elif isinstance(received, ast.List) and starred:
            out.append(SelfBinding(inner.attr, "[" + ", ".join(source_code(v) for v in received.elts) + "]", starred=True))
        else:
            out.append(SelfBinding(inner.attr, source_code(received)))


def module_bound_names(module: ast.Module) -> set[str]:
    """Every name the module's own scope binds, by CPython's parser: imports,
    defs and classes, assignment, loop, `with` and `except` targets, walrus at module level, under any `if`/`try`/loop, whether or not that code runs (as LibCST's
    scope of a module lists them).  A star import binds nothing it names."""
    found: set[str] = set()

    def bind_target(node: ast.AST) -> None:
        for sub in walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                found.add(sub.id)
            elif isinstance(sub, ast.Starred) and isinstance(sub.value, ast.Name):
                found.add(sub.value.id)

    def visit(block: Sequence[ast.stmt]) -> None:
        for statement in block:
            if isinstance(statement, ast.Import):  # `import a.b` binds `a`, and LibCST lists `a.b` too
                for alias in statement.names:
                    parts = alias.name.split(".")
                    found.update([alias.asname] if alias.asname else (".".join(parts[: i + 1]) for i in range(len(parts))))
            elif isinstance(statement, ast.ImportFrom):
                found.update(a.asname or a.name for a in statement.names if a.name != "*")
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(statement.name)
                for decorator in statement.decorator_list:
                    bind_walrus(decorator)
                continue
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                    bind_target(target)
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                bind_target(statement.target)
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    if item.optional_vars is not None:
                        bind_target(item.optional_vars)
            elif type(statement).__name__ in ("Try", "TryStar"):
                for handler in statement.handlers:  # type: ignore[attr-defined]
                    if handler.name:
                        found.add(handler.name)
                    visit(handler.body)
            elif type(statement).__name__ == "Match":  # LibCST's scope lists no capture of a pattern
                for case in statement.cases:  # type: ignore[attr-defined]
                    visit(case.body)
            bind_walrus(statement)
            for field_name in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field_name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner)

    def bind_walrus(node: ast.AST) -> None:
        stack = [node]
        while stack:
            sub = stack.pop()
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and sub is not node:
                continue
            if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                found.add(sub.target.id)
            if isinstance(sub, ast.stmt) and sub is not node:
                continue  # a nested block is visited as a block
            stack.extend(ast.iter_child_nodes(sub))

    visit(module.body)
    return found
