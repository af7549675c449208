"""What a name inside a function stands for, read off the source without running it.

An inner model is often built through a name rather than a class: a constructor parameter
whose default is the class (`language_model_cls=Qwen3LLMModel`), an argument a subclass
passes up through `super().__init__(...)`, or a local assigned a few lines above.  A scope
answers "which expression is this name bound to, and where is that expression evaluated".

`__init__` bodies are long, so an `InitScope` reads them as text and parses only the lines
that answer a question (the signature, one assignment, the `super().__init__` call).  Short
methods and helper functions are parsed whole (`FunctionScope`).  The same kind of reading
tells whether a `__getattr__` forwards any name it is asked for, or only a few.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from .source import SourceFile, _indent, _scan, has_word

_CONTINUED = re.compile(r"\\[ \t]*$")
_TARGET = re.compile(r"[ \t]*([A-Za-z_][\w.]*)[ \t]*(?::[^=\n]*)?=(?!=)")  # `name =`, `self.x: T =`
_COMMENT = re.compile(r"""\"\"\"|'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|\#.*""")
_SUPER_CALL = re.compile(r"\bsuper\([^)]*\)\.__init__\(|\b([\w.]+)\.__init__\(\s*self\b")


def statement_end(lines: Sequence[str], index: int) -> int:
    """One past the last line of the statement starting at `index` (open brackets, `\\`)."""
    depth, in_string = 0, None
    for i in range(index, len(lines)):
        line = lines[i]
        depth, in_string = _scan(line, depth, in_string)
        if depth <= 0 and in_string is None and not _CONTINUED.search(line):
            return i + 1
    return len(lines)


def _code_of(line: str) -> str:
    """The line without its comment (a `#` inside a string is not one)."""
    if "#" not in line:  # most lines: no comment to find
        return line
    for match in _COMMENT.finditer(line):
        if match.group().startswith("#"):
            return line[: match.start()]
    return line


def one_line(lines: Sequence[str]) -> str:
    """A multi-line statement as one line of code, for reports: `self.model = (\\n Foo(\\n x,\\n)\\n)`
    reads `self.model = (Foo(x))`."""
    text = " ".join(_code_of(line).strip().rstrip("\\").strip() for line in lines)
    text = re.sub(r"([(\[{])\s+", r"\1", text)
    text = re.sub(r",?\s+([)\]}])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def assigned_value(lines: Sequence[str], start: int, target: str, end: int | None = None) -> str | None:
    """The right-hand side of `target = ...` (or `target: T = ...`) starting at line `start`; `end` is
    statement_end(lines, start) when the caller has it."""
    match = _TARGET.match(lines[start])
    if match is None or match.group(1) != target:
        return None
    rest = [lines[start][match.end() :], *lines[start + 1 : statement_end(lines, start) if end is None else end]]
    return "\n".join(_code_of(line).rstrip().rstrip("\\") for line in rest).strip()


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NOT_PLAIN_NAMES = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


@functools.lru_cache(maxsize=4096)
def parse_value(text: str) -> cst.BaseExpression | None:
    """An expression parsed on its own (libcst nodes are immutable: one parse serves every
    class that builds `ParallelLMHead(`...).  A dotted name spelled without spaces (most callees:
    `LlamaModel`, `nn.Linear`) is built as the nodes libcst's parser gives, without it."""
    if _DOTTED.fullmatch(text):
        parts = text.split(".")
        if not _NOT_PLAIN_NAMES.intersection(parts):
            value: cst.BaseExpression = cst.Name(parts[0])
            for part in parts[1:]:
                value = cst.Attribute(value=value, attr=cst.Name(part))
            return value
    try:
        return cst.parse_expression(text if "\n" not in text else f"({text})")
    except cst.ParserSyntaxError:
        return None


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
    expr: cst.BaseExpression | None
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


def _parameters(params: cst.Parameters) -> list[cst.Param]:
    return [*params.posonly_params, *params.params, *params.kwonly_params]


def _positional(params: cst.Parameters) -> list[cst.Param]:
    """Parameters an argument can fill by position, `self` left out."""
    return [*params.posonly_params, *params.params][1:]


@dataclass
class FunctionScope(Scope):
    """A method or helper function, parsed whole: its parameters, then its locals."""

    node: cst.FunctionDef | None = None  # always given: a default only because Scope's fields have them
    _locals: dict[str, list[cst.BaseExpression]] | None = field(default=None, repr=False)

    def function(self) -> cst.FunctionDef:
        assert self.node is not None, "a FunctionScope is made with the def it reads"
        return self.node

    def bindings(self, name: str) -> list[Binding]:
        for param in _parameters(self.function().params):
            if param.name.value == name:
                return [Binding(name, "parameter", param.default, self.module())]
        return self.locals(name)

    def locals(self, name: str) -> list[Binding]:
        if self._locals is None:
            self._locals = _assignments(self.function())
        return [Binding(name, "local", value, self) for value in self._locals.get(name, [])]


def small_statements(function: cst.FunctionDef) -> Iterator[cst.BaseSmallStatement]:
    """Every simple statement of a function, however deep in if/for/while/with/try blocks it
    sits, but not those of functions or classes defined inside it.  A plain walk: libcst's
    visitor would go through every expression too, which costs far more."""
    pending: list[cst.CSTNode] = [function.body]
    while pending:
        block = pending.pop()
        if isinstance(block, cst.SimpleStatementLine):
            yield from block.body
        elif isinstance(block, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            pending.extend(reversed(block.body))
        elif isinstance(block, cst.BaseSmallStatement):
            yield block
        else:  # a compound statement: its blocks and clauses
            for part in ("body", "orelse", "handlers", "finalbody", "cases"):
                child = getattr(block, part, None)
                if isinstance(child, (list, tuple)):
                    pending.extend(reversed(child))
                elif child is not None:
                    pending.append(child)


def _assignments(function: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """name -> every value `name = ...` receives in the function."""
    out: dict[str, list[cst.BaseExpression]] = {}
    for small in small_statements(function):
        if isinstance(small, cst.Assign):
            for target in small.targets:
                if isinstance(target.target, cst.Name):
                    out.setdefault(target.target.value, []).append(small.value)
        elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
            out.setdefault(small.target.value, []).append(small.value)
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
    _signature: cst.FunctionDef | None = field(default=None, repr=False)
    _calls: dict | None = field(default=None, repr=False)
    _header: str | None = field(default=None, repr=False)
    _assigned: dict | None = field(default=None, repr=False)

    def header(self) -> str:
        if self._header is None:
            lines = self.source.lines
            self._header = "\n".join(lines[self.start : statement_end(lines, self.start)])
        return self._header

    def signature(self) -> cst.FunctionDef | None:
        """The `def __init__(...)` line(s) parsed on their own."""
        if self._signature is None:
            self._signature = _parse_signature("\n".join(line.strip() for line in self.header().split("\n")))
        return self._signature

    def bindings(self, name: str) -> list[Binding]:
        if has_word(self.header(), name):
            signature = self.signature()
            if signature is not None:
                for param in _parameters(signature.params):
                    if param.name.value == name:
                        return [self._parameter(signature, param)]
        return self.locals(name)

    def _parameter(self, signature: cst.FunctionDef, param: cst.Param) -> Binding:
        if self.caller is not None:
            passed = self.caller.argument_to(self.class_name, signature, param.name.value)
            if passed is not None:
                return Binding(param.name.value, "parameter", passed, self.caller)
        return Binding(param.name.value, "parameter", param.default, self.module())

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
    def super_calls(self) -> dict[str, tuple[cst.Call, bool]]:
        """`super().__init__(...)` (key "") and `Base.__init__(self, ...)` (key "Base") calls,
        with whether `self` is passed explicitly."""
        if self._calls is None:
            self._calls = {}
            lines = self.source.lines
            for index in range(self.start + 1, self.end):
                match = _SUPER_CALL.search(lines[index])
                if match is None:
                    continue
                call = _init_call(lines[index : statement_end(lines, index)], _indent(lines[index]))
                if call is not None:
                    key = (match.group(1) or "").rsplit(".", 1)[-1]
                    self._calls.setdefault(key, (call, bool(match.group(1))))
        return self._calls

    def argument_to(self, base: str, signature: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
        """The expression this `__init__` passes as parameter `name` of `base.__init__`."""
        calls = self.super_calls()
        found = calls.get(base) or calls.get("")
        if found is None:
            return None
        call, explicit_self = found
        args = list(call.args)[1:] if explicit_self else list(call.args)
        positional = _positional(signature.params)
        for position, arg in enumerate(args):
            if arg.keyword is not None or arg.star:
                break  # keywords from here on; after `*args` positions are unknown
            if position < len(positional) and positional[position].name.value == name:
                return arg.value
        return next((a.value for a in args if a.keyword is not None and a.keyword.value == name), None)


@functools.lru_cache(maxsize=2048)
def _parse_signature(header: str) -> cst.FunctionDef | None:
    """A `def` header parsed with a stand-in body; the same base `__init__` is asked about once
    per subclass, so the parse is shared."""
    try:
        node = cst.parse_statement(header.rstrip() + "\n    pass\n")
    except cst.ParserSyntaxError:
        return None
    return node if isinstance(node, cst.FunctionDef) else None


def _init_call(lines: Sequence[str], indent: int) -> cst.Call | None:
    """The `....__init__(...)` call in a statement (`super().__init__(...)`, possibly wrapped)."""
    return _parse_init_call("\n".join(line[indent:] if _indent(line) >= indent else line.lstrip() for line in lines))


@functools.lru_cache(maxsize=2048)
def _parse_init_call(text: str) -> cst.Call | None:
    try:
        module = cst.parse_module(text + "\n")
    except cst.ParserSyntaxError:
        return None
    found: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "__init__":
                found.append(node)

    module.visit(Collect())
    return found[0] if found else None


def on_self(node) -> bool:
    """`self.x`, `self.x.y`: an expression reached through `self`."""
    while isinstance(node, cst.Attribute):
        node = node.value
        if isinstance(node, cst.Name) and node.value == "self":
            return True
    return False



# -- __getattr__ ----------------------------------------------------------------------------
def forwards_any_name(function: cst.FunctionDef) -> bool:
    """True when `__getattr__` hands any name it is asked for on to another object: a
    `return getattr(self.X, name)` that no test on the name in front of it narrows down to a
    few names (`if name == "x": raise` only keeps one name out; `if name in (...)` lets only
    those through)."""
    params = _positional(function.params)
    return bool(params) and _reaches_forward(_body(function), params[0].name.value)


def _body(node) -> list:
    body = getattr(node, "body", None)
    if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(body.body)
    return []


def _reaches_forward(statements: list, name: str) -> bool:
    for statement in statements:
        if _is_forward(statement, name):
            return True
        if isinstance(statement, cst.If):
            narrows = _narrowing(statement.test, name)
            if narrows != "only" and _reaches_forward(_body(statement), name):
                return True
            orelse = statement.orelse
            rest = [orelse] if isinstance(orelse, cst.If) else _body(orelse) if orelse is not None else []
            if narrows != "except" and _reaches_forward(rest, name):
                return True
            if narrows == "except" and _ends(_body(statement)):
                return False  # `if name not in (...): raise`: only those names go on
        elif isinstance(statement, (cst.Try, cst.With)):
            blocks = [statement] + list(getattr(statement, "handlers", ()))
            if any(_reaches_forward(_body(block), name) for block in blocks):
                return True
    return False


def _is_forward(statement, name: str) -> bool:
    """`return getattr(self.X, name)` (with or without a default)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        value = small.value if isinstance(small, cst.Return) else None
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Name)
            and value.func.value == "getattr"
            and len(value.args) >= 2
            and on_self(value.args[0].value)
            and isinstance(value.args[1].value, cst.Name)
            and value.args[1].value.value == name
        ):
            return True
    return False


def _ends(statements: list) -> bool:
    last = statements[-1] if statements else None
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, (cst.Raise, cst.Return)) for s in last.body)


def _mentions(node, name: str) -> bool:
    found = []

    class Find(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            if n.value == name:
                found.append(n)

    node.visit(Find())
    return bool(found)


_EXCLUDING = (cst.NotIn, cst.NotEqual, cst.IsNot)


def _narrowing(test, name: str) -> str | None:
    """How a condition on `name` splits names: "only" (true for a few: `name in (...)`,
    `name == "x"`, `name.startswith("x")`), "except" (true for all but a few: `not in`, `!=`), or
    None (it does not test the name, e.g. `hasattr(self.inner, name)`)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _narrowing(test.expression, name)
        return {"only": "except", "except": "only"}.get(inner or "")
    if isinstance(test, cst.BooleanOperation):
        sides = {_narrowing(test.left, name), _narrowing(test.right, name)} - {None}
        prefer = "only" if isinstance(test.operator, cst.And) else "except"
        return prefer if prefer in sides else next(iter(sides), None)
    if isinstance(test, cst.Comparison) and _mentions(test, name):
        excluding = all(isinstance(c.operator, _EXCLUDING) for c in test.comparisons)
        return "except" if excluding else "only"
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute) and _mentions(test.func.value, name):
        return "only"
    return None
