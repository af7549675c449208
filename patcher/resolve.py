"""Stage 4: resolve a wrapper class, the model(s) it holds, and what each defines.

Classes are found through the file's own imports (absolute, relative, aliased, module
aliases) and followed through in-tree inheritance.  Bases outside the tree (`nn.Module`)
are recorded, not guessed at.

Which members a class has is read off the file's outline (the `def` headers, class-level
assignments and `self.X = ...` lines of `__init__`); libcst parses only what needs a real
tree: class headers (for the bases), the right-hand sides that build inner models, and the
signatures that the codemod copies.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from .bindings import (
    Binding,
    FunctionScope,
    InitScope,
    Scope,
    assigned_value,
    assignment_lines,
    forwards_any_name,
    on_self,
    one_line,
    parse_value,
    small_statements,
    statement_end,
)
from .errors import EaglepatchError
from .imports import ImportTable
from .locate import SourceTree
from .records import ClassInfo, InnerModel, Protocol, Signature, SignatureKind, Unresolved, Wrapper
from .source import SourceCache, SourceFile, _indent, _is_code, _scan

_ENTRY = re.compile(r"^[ \t]*EntryClass\s*=\s*(.+)$", re.MULTILINE)  # indented under a module-level `if` too
MAX_BASE_DEPTH = 12
# a class name that says "model" (for an inner model class that lives in the wrapper's file)
# a class-body line opening a block whose assignments still bind class attributes
_COMPOUND = re.compile(r"^[ \t]*(?:if|elif|else|try|except|finally|with|async[ \t]+with|for|async[ \t]+for|while|match)\b")
_MODEL_NAME = re.compile(r"(Model|ForCausalLM|ForConditionalGeneration|LMHeadModel)$")
_NOT_LANGUAGE = re.compile(r"Vision|ViT|Visual|Image|Audio|Speech|Projector|Tower|Encoder|Patch|Config", re.IGNORECASE)
_CLASS_ATTR = re.compile(r"^[ \t]*(\w+)[ \t]*(?::[^=\n]*)?=(?!=)")
_SELF_ASSIGN = re.compile(r"^([ \t]*)self\.(\w+)[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*(.*)$")
_CALLEE = re.compile(r"^([A-Za-z_][\w.]*)[ \t]*\(")
_BRACKET_TOKEN = re.compile(r'"{3}[\s\S]*?"{3}|\'{3}[\s\S]*?\'{3}|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#[^\n]*|[()\[\]{}]')
_SUPER_INIT = re.compile(r"\bsuper\([^)]*\)\.__init__\(|\b\w+\.__init__\(\s*self\b")
# why_not_found() clauses that mean the tree itself is broken (the import would fail at run time),
# as opposed to an inner model chosen at run time or built outside the tree
_BROKEN_IMPORT = (
    "is not in this tree",
    "has no class",
    "neither defined nor imported",
    ": class ",  # "<file>: class X could not be read"
    "is not UTF-8",  # the inner file itself cannot be read (SourceCache.read's errors)
    "is a binary file",
    "MiB",
    "is not valid Python",
    "cannot be read (",
)
_DECORATOR = re.compile(r"^[ \t]*@([\w.]+)")
# a name that says "model" anywhere (`AutoModel.from_config`): an unresolved construction worth reporting
_MODEL_WORD = re.compile(r"Model|ForCausalLM|ForConditionalGeneration|LLM")
MAX_FOLLOW = 8  # steps from a construction to its class: names, parameters, returns, attributes


def _balanced(text: str, start: int) -> str:
    """The expression starting at `start`, up to the end of its line once brackets are closed:
    `EntryClass = [\n    A,\n    B,\n]` spans lines."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "\n" and depth <= 0:
            return text[start:index]
    return text[start:]


def _holds_language_model(cls: ClassInfo, wrapper_file: str) -> bool:
    """A model class from another file under models/, or a language-model-named one from the same file.
    A class with no base at all (a dataclass such as a weights mapper) is no module, let alone a model."""
    if not cls.file.startswith("models/") or _NOT_LANGUAGE.search(cls.name) or not (cls.bases or cls.external_bases):
        return False
    return cls.file != wrapper_file or bool(_MODEL_NAME.search(cls.name))


def _code(node: cst.CSTNode) -> str:
    return one_line(cst.Module(body=[]).code_for_node(node).split("\n"))


def _root_name(expr: cst.BaseExpression) -> cst.Name | None:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr if isinstance(expr, cst.Name) else None


def _same_name(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    return _code(a) == _code(b)


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
class _Built:
    """What a construction builds: the classes found and the paths that could not be followed."""

    classes: list[tuple[SourceFile, str]] = field(default_factory=list)
    dead_ends: list[_DeadEnd] = field(default_factory=list)

    @classmethod
    def dead(cls, why: str, plausible: bool) -> _Built:
        return cls(dead_ends=[_DeadEnd(why, plausible)])

    def said_of(self, expr: cst.BaseExpression, prefix: str) -> _Built:
        """Name the step that led to a dead end at `expr`: `minicpmv = _REGISTRY.get(v): chosen at run time`."""
        code = _code(expr) + ":"
        self.dead_ends = [_DeadEnd(prefix + d.why if d.why.startswith(code) else d.why, d.plausible) for d in self.dead_ends]
        return self

    def merge(self, other: _Built) -> _Built:
        self.classes += [c for c in other.classes if c not in self.classes]
        self.dead_ends += [d for d in other.dead_ends if d not in self.dead_ends]
        return self


@dataclass
class _Assignment:
    """`self.X = value` in an `__init__` the class runs: its own, or a base's through super()."""

    source: SourceFile
    index: int  # line index of `self.X =`
    end: int  # one past the statement's last line
    conditional: bool
    attribute: str
    value: str  # the right-hand side, every line of it
    scope: InitScope


def _construction(value: str) -> cst.BaseExpression | None:
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
        return cst.Call(func=func) if func is not None else None
    if re.fullmatch(r"[A-Za-z_]\w*", text):
        return cst.Name(text)
    if re.search(r"\bif\b", text) and re.search(r"\belse\b", text):
        return parse_value(text)
    if text.endswith(")"):  # `REGISTRY[arch](config)`: a call of something that is not a name
        whole = parse_value(text)
        return whole if isinstance(whole, cst.Call) else None
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


@dataclass
class ClassText:
    """Where a class is in its file, from the outline: no parsing needed."""

    source: SourceFile
    name: str
    header: int  # line index of `class`
    end: int  # one past its last line
    body_indent: int

    def methods(self, outline) -> list[tuple[int, str]]:
        """The class's own `def`s: in its body, or in an `if`/`try`/`with` block of its body (a hook
        defined under `if _is_cuda:` is there), not inside a method or a nested class."""
        return [
            (index, name)
            for index, indent, kind, name in outline.headers
            if kind == "def" and self.header < index < self.end and self._directly_in_body(outline, index, indent)
        ]

    def _directly_in_body(self, outline, index: int, indent: int) -> bool:
        if indent <= self.body_indent:
            return indent == self.body_indent
        around = outline.enclosing(index)  # the def itself first, then the blocks around it
        return len(around) > 1 and around[1][0] == self.header

    def block_attributes(self) -> list[tuple[int, str]]:
        """(line index, name) of the names the class body assigns inside an `if`/`try`/`with`/... block
        of its own (`if _is_cuda: get_embed_and_head = ...`): the class has them too.  Parsed (ast) only
        for a class whose body has such a block; the assignments at the body's own indent are not here."""
        lines = self.source.lines
        if not any(
            _indent(lines[i]) == self.body_indent and _COMPOUND.match(lines[i]) for i in range(self.header + 1, self.end)
        ):
            return []
        indented = _indent(lines[self.header]) > 0  # under a module-level `if`: parse it in one too
        text = ("if 1:\n" if indented else "") + "\n".join(lines[self.header : self.end]) + "\n"
        try:
            node = ast.parse(text).body[0]
        except (SyntaxError, IndexError):
            return []
        if indented:
            assert isinstance(node, ast.If), "the text was wrapped in `if 1:`"
            node = node.body[0]
        if not isinstance(node, ast.ClassDef):
            return []
        shift = self.header - (2 if indented else 1)  # ast line numbers are 1-based
        found: list[tuple[int, str]] = []
        todo = [(statement, False) for statement in node.body]
        while todo:
            statement, in_block = todo.pop(0)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                if in_block:
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    for target in targets:
                        for name in [target] if isinstance(target, ast.Name) else getattr(target, "elts", []):
                            if isinstance(name, ast.Name):
                                found.append((statement.lineno + shift, name.id))
                continue
            inner = [*getattr(statement, "body", []), *getattr(statement, "orelse", []), *getattr(statement, "finalbody", [])]
            inner += [s for part in (*getattr(statement, "handlers", []), *getattr(statement, "cases", [])) for s in part.body]
            todo += [(s, True) for s in inner if isinstance(s, ast.stmt)]
        return found


def syntax_error(source: SourceFile) -> EaglepatchError | None:
    """The first syntax error in a file, located by CPython's parser (libcst's line can be one off)."""
    try:
        ast.parse(source.text)
    except SyntaxError as exc:
        return EaglepatchError(
            f"is not valid Python ({exc.msg}); fix the syntax error", path=source.rel, line=exc.lineno
        )
    return None


class Resolver:
    """Resolves classes once per run; shared by every wrapper `--all` looks at."""

    def __init__(self, tree: SourceTree, cache: SourceCache):
        self.tree = tree
        self.cache = cache
        self._classes: dict[tuple[Path, str], ClassInfo | None] = {}
        self._texts: dict[tuple[Path, str], ClassText | None] = {}
        self._checked: set[Path] = set()
        self._helpers: dict[tuple[Path, int, bool], _Built] = {}
        self._named: dict[tuple[Path, str], tuple[SourceFile, str] | None] = {}
        self._module_assignments: dict[Path, dict[str, int]] = {}  # module-level `name = ...` lines
        self._bases: dict[tuple[Path, int], list[cst.Arg]] = {}  # class headers, parsed once
        self.warnings: list[str] = []

    def require_valid(self, source: SourceFile) -> None:
        if source.path not in self._checked:
            error = syntax_error(source)
            if error is not None:
                raise error
            self._checked.add(source.path)

    # -- finding a class ---------------------------------------------------------------
    def class_text(self, source: SourceFile, name: str) -> ClassText | None:
        key = (source.path, name)
        if key not in self._texts:
            outline = self.cache.outline(source)
            header = outline.find(name, "class")
            found = None
            if header is not None:
                end = outline.ends.get(header, header + 1)
                body = next((i for i in range(header + 1, end) if _is_code(source.lines[i]) and _indent(source.lines[i]) > _indent(source.lines[header])), None)
                indent = _indent(source.lines[body]) if body is not None else _indent(source.lines[header]) + 4
                found = ClassText(source, name, header, end, indent)
            self._texts[key] = found
        return self._texts[key]

    def find_class(self, source: SourceFile, expr: cst.BaseExpression, depth: int = 0) -> tuple[SourceFile, str] | None:
        """Where the class named by `expr` in `source` is defined, through imports, re-exports,
        star imports and module-level aliases (`B = A`)."""
        if depth > 4:
            return None
        if isinstance(expr, cst.Name) and depth == 0:
            key = (source.path, expr.value)
            if key not in self._named:
                self._named[key] = self._find_class(source, expr, depth)
            return self._named[key]
        return self._find_class(source, expr, depth)

    def _find_class(self, source: SourceFile, expr: cst.BaseExpression, depth: int) -> tuple[SourceFile, str] | None:
        if isinstance(expr, cst.Name) and self.cache.outline(source).find(expr.value, "class") is not None:
            return source, expr.value
        origin = ImportTable.of(self.cache, source, self.tree).lookup_expr(expr)
        if origin is None:
            alias = self._module_alias(source, expr)
            return self.find_class(source, alias, depth + 1) if alias is not None else None
        if origin.path is None or origin.name is None:
            return None
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError:
            return None
        return self.find_class(other, cst.Name(origin.name), depth + 1)

    def _module_alias(self, source: SourceFile, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """`B = A` (or `B = module.A`) at module level: the expression `B` names."""
        if not isinstance(expr, cst.Name):
            return None
        if "\n" + expr.value not in source.text and not source.text.startswith(expr.value):
            return None
        if source.path not in self._module_assignments:
            found = assignment_lines(source.lines, 0, len(source.lines))
            at_top = {name: [i for i in lines if _indent(source.lines[i]) == 0] for name, lines in found.items()}
            self._module_assignments[source.path] = {name: lines[-1] for name, lines in at_top.items() if lines}
        index = self._module_assignments[source.path].get(expr.value)
        if index is None:
            return None
        value = parse_value(assigned_value(source.lines, index, expr.value) or "")
        return value if isinstance(value, (cst.Name, cst.Attribute)) and not _same_name(value, expr) else None

    def bases_of(self, text: ClassText) -> list[cst.Arg]:
        """The class header, parsed on its own, once: every `__init__` that calls super() reads it."""
        key = (text.source.path, text.header)
        if key not in self._bases:
            self._bases[key] = self._parse_bases(text)
        return list(self._bases[key])

    @staticmethod
    def _parse_bases(text: ClassText) -> list[cst.Arg]:
        lines = text.source.lines
        outline_end = text.header
        depth, in_string = 0, None
        for i in range(text.header, text.end):
            depth, in_string = _scan(lines[i], depth, in_string)  # skips strings and comments
            outline_end = i
            if depth <= 0 and in_string is None:
                break
        header = "\n".join(line.strip() for line in lines[text.header : outline_end + 1])
        simple = dotted_bases(header)
        if simple is not None:
            return simple
        try:
            node = cst.parse_statement(header + "\n    pass\n")
        except cst.ParserSyntaxError:
            try:  # `class B(A): pass` carries its body on the header line
                node = cst.parse_statement(header + "\n")
            except cst.ParserSyntaxError:
                return []
        return list(node.bases) if isinstance(node, cst.ClassDef) else []

    # -- class members -------------------------------------------------------------------
    def class_info(self, source: SourceFile, name: str, depth: int = 0) -> ClassInfo | None:
        key = (source.path, name)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None  # guards against cycles
        text = self.class_text(source, name)
        if text is None:
            return None
        members = dict(self._own_members(text))
        bases: list[str] = []
        external: list[str] = []
        for arg in self.bases_of(text):
            if arg.keyword is not None:
                continue
            label = cst.Module(body=[]).code_for_node(arg.value)
            found = self.find_class(source, arg.value) if depth < MAX_BASE_DEPTH else None
            base = self.class_info(found[0], found[1], depth + 1) if found else None
            if base is None:
                external.append(label)
                continue
            bases.append(base.name)
            bases.extend(b for b in base.bases if b not in bases)
            external.extend(e for e in base.external_bases if e not in external)
            for member, signature in base.members.items():
                members.setdefault(member, signature)
        info = ClassInfo(
            name=name,
            file=source.rel,
            line=text.header + 1,
            members=members,
            bases=bases,
            external_bases=external,
            dynamic=self._forwards_any_name(members.get("__getattr__")),
        )
        self._classes[key] = info
        return info

    def _forwards_any_name(self, getattr_: Signature | None) -> bool:
        """A `__getattr__` that can hand any name on: one that forwards a few names is not dynamic."""
        node = signature_node(self.cache, getattr_) if getattr_ is not None and getattr_.kind == "method" else None
        return node is not None and forwards_any_name(node)

    def _own_members(self, text: ClassText) -> dict[str, Signature]:
        source, outline = text.source, self.cache.outline(text.source)
        members: dict[str, Signature] = {}
        for index, name in text.methods(outline):
            decorators = _decorators_above(source.lines, index)
            if name in members and any(d.endswith((".setter", ".deleter")) for d in decorators):
                continue
            kind: SignatureKind = "property" if {"property", "cached_property", "functools.cached_property"} & set(decorators) else "method"
            members[name] = Signature(name, kind, text.name, source.rel, index + 1, path=source.path, header=index)
        nested = {i for h, _, _, _ in outline.headers if text.header < h < text.end for i in range(h, outline.ends.get(h, h + 1))}
        for index in range(text.header + 1, text.end):
            line = source.lines[index]
            if index in nested or _indent(line) != text.body_indent:
                continue
            match = _CLASS_ATTR.match(line)
            if match:
                members.setdefault(match.group(1), Signature(match.group(1), "attribute", text.name, source.rel, index + 1))
        for index, name in text.block_attributes():
            members.setdefault(name, Signature(name, "attribute", text.name, source.rel, index + 1))
        init = self._init_range(text)
        if init is not None:
            for index, _column, attribute, _value in self._self_assignments(source, *init):
                members.setdefault(attribute, Signature(attribute, "attribute", text.name, source.rel, index + 1))
        return members

    def _init_range(self, text: ClassText) -> tuple[int, int] | None:
        outline = self.cache.outline(text.source)
        for index, name in text.methods(outline):
            if name == "__init__":
                return index, outline.ends.get(index, index + 1)
        return None

    @staticmethod
    def _self_assignments(source: SourceFile, start: int, end: int):
        """(line index, indent, attribute, right-hand side text) for `self.X = ...` lines in a method."""
        out = []
        for index in range(start + 1, end):
            match = _SELF_ASSIGN.match(source.lines[index])
            if match:
                out.append((index, len(match.group(1)), match.group(2), match.group(3).strip()))
        return out

    def adopt(self, written: dict[tuple[str, str], dict[str, Signature]]) -> bool:
        """Let subclasses see members this run will write into their base classes, so one `apply`
        does what two would (a wrapper whose inner model inherits from a class apply also fixes).
        The class written into is left as it is: its own plan still shows the gap it fixes."""
        changed = False
        by_name = {name: (file, members) for (file, name), members in written.items()}
        for info in self._classes.values():
            if info is None:
                continue
            for base in info.bases:
                file, members = by_name.get(base, ("", {}))
                for member, signature in members.items():
                    if member not in info.members:
                        info.members[member] = signature
                        info.pending[member] = f"{file}:{base}"
                        changed = True
        return changed

    # -- wrappers ---------------------------------------------------------------------------
    def wrapper_candidates(self, source: SourceFile, entry_only: bool = False) -> list[str]:
        """EntryClass names when the file has them, else every module-level class (one under a
        module-level `if` included: apply writes into it, so check must see it too)."""
        outline = self.cache.outline(source)
        top = outline.module_level("class")
        named: list[str] = []
        for match in _ENTRY.finditer(outline.joined):  # the lines Python sees: \r and form feeds are gone
            value = _balanced(outline.joined, match.start(1))
            named += [n for n in re.findall(r"\w+", value) if n in top and n not in named]
        if named or entry_only:
            return named
        return top

    def _init_assignments(
        self,
        source: SourceFile,
        name: str,
        depth: int = 0,
        caller: InitScope | None = None,
        owner: tuple[SourceFile, str] | None = None,
    ) -> list[_Assignment]:
        """`self.X = ...` in __init__, the class's own first, then its in-tree bases' (via super()).

        Each comes with the scope its right-hand side is read in: a base's `__init__` sees the
        arguments the subclass passes up, and `self` is always the class asked about (`owner`).
        """
        text = self.class_text(source, name)
        if text is None:
            return []
        owner = owner or (source, name)
        init = self._init_range(text)
        out: list[_Assignment] = []
        scope = caller  # no __init__ of its own: the base's sees what this class's caller passed
        calls_super = init is None
        if init is not None:
            scope = InitScope(source, owner, start=init[0], end=init[1], class_name=name, caller=caller)
            found = self._self_assignments(source, *init)
            body_indent = min((indent for _, indent, _, _ in found), default=0)
            for index, indent, attribute, _value in found:
                conditional = indent > body_indent or self._nested(source, init, index)
                end = statement_end(source.lines, index)
                value = assigned_value(source.lines, index, f"self.{attribute}") or ""
                out.append(_Assignment(source, index, end, conditional, attribute, value, scope))
            calls_super = any(_SUPER_INIT.search(source.lines[i]) for i in range(init[0], init[1]))
        if calls_super and depth < MAX_BASE_DEPTH:
            for arg in self.bases_of(text):
                if arg.keyword is None:
                    found_base = self.find_class(source, arg.value)
                    if found_base is not None:
                        out += self._init_assignments(found_base[0], found_base[1], depth + 1, scope, owner)
        return out

    @staticmethod
    def _nested(source: SourceFile, init: tuple[int, int], index: int) -> bool:
        """True when the line sits deeper than __init__'s own body (inside an if/try/with)."""
        first = next((i for i in range(init[0] + 1, init[1]) if _is_code(source.lines[i]) and not source.lines[i].lstrip().startswith(('"', "'", ")"))), None)
        return first is not None and _indent(source.lines[index]) > _indent(source.lines[first])

    def inner_models(self, source: SourceFile, name: str, protocol: Protocol) -> list[InnerModel]:
        """Attributes `__init__` fills with another model, and the class(es) each may hold.

        A construction that cannot be followed to a class is kept as an `Unresolved` record on
        its attribute, so the report can show it rather than lose it.
        """
        found: dict[str, InnerModel] = {}
        plausible: set[Unresolved] = set()
        for assignment in self._init_assignments(source, name):
            expr = _construction(assignment.value)
            built = self._built_by(expr, assignment.scope) if expr is not None else _Built()
            if not built.classes and not built.dead_ends:
                continue  # `self.x = None`, `self.x = config`: no model built here
            where = assignment.source
            inner = found.get(assignment.attribute)
            if inner is None:
                inner = InnerModel(assignment.attribute, [], assignment.index + 1, assignment.conditional, file=where.rel)
                found[assignment.attribute] = inner
            inner.conditional = inner.conditional or assignment.conditional
            for target in built.classes:
                info = self.class_info(*target)
                if info is not None and all(c.name != info.name for c in inner.classes):
                    inner.classes.append(info)
            construct = one_line(where.lines[assignment.index : assignment.end]) if built.dead_ends else ""
            for dead_end in built.dead_ends:
                record = Unresolved(construct, f"{where.rel}:{assignment.index + 1}", dead_end.why)
                if record not in inner.unresolved:
                    inner.unresolved.append(record)
                if dead_end.plausible and not _NOT_LANGUAGE.search(assignment.attribute):
                    plausible.add(record)
        return _language_models(list(found.values()), protocol, source.rel, plausible)

    # -- following a construction to the class(es) it builds ----------------------------------
    def _built_by(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> _Built:
        """The classes an expression builds an instance of: `Foo(...)`, `cls(...)`,
        `self._init_model(...)`, a local holding one, either side of `A(...) if c else B(...)`."""
        if depth > MAX_FOLLOW:
            return _Built.dead(f"{_code(expr)}: followed too many steps", False)
        if isinstance(expr, cst.IfExp):
            return self._built_by(expr.body, scope, depth + 1).merge(self._built_by(expr.orelse, scope, depth + 1))
        if isinstance(expr, cst.Name):
            built = _Built()
            for binding in scope.locals(expr.value):
                assert binding.expr is not None, "a local is bound to the value assigned"
                built.merge(self._built_by(binding.expr, binding.scope, depth + 1))
            return built  # a parameter or a global is handed in, not built here
        if isinstance(expr, cst.Call):
            return self._called(expr.func, scope, depth)
        return _Built()

    def _called(self, func: cst.BaseExpression, scope: Scope, depth: int) -> _Built:
        """What calling `func` builds: a class, or whatever the method or helper returns."""
        member = self._self_member(func, scope)
        if member is not None:
            if member.kind == "attribute":
                return self._attribute_class(member, scope, depth)
            function = signature_node(self.cache, member)
            if function is None:
                return _Built.dead(f"{_code(func)}: its definition could not be read", False)
            assert member.path is not None, "a definition that was read has its file"
            source = self.cache.read(member.path)
            return self._returned(function, FunctionScope(source, scope.owner, node=function), member.kind == "method", depth)
        if on_self(func):
            return _Built()  # `self.x.to(...)`, a method of an out-of-tree base: not a construction
        if isinstance(func, cst.Name) and not scope.bindings(func.value) and self.find_class(scope.source, func) is None:
            helper = self._helper_function(scope.source, func.value)
            if helper is not None:
                return self._built_by_helper(helper, scope.owner, depth)
        return self._class_named_by(func, scope, depth)

    def _class_named_by(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> _Built:
        """The class(es) an expression evaluates to: a class name, a parameter's default or what a
        subclass passes for it, a class attribute, a factory method's return."""
        if depth > MAX_FOLLOW:
            return _Built.dead(f"{_code(expr)}: followed too many steps", False)
        if isinstance(expr, cst.IfExp):
            return self._class_named_by(expr.body, scope, depth + 1).merge(self._class_named_by(expr.orelse, scope, depth + 1))
        if isinstance(expr, cst.Name) and expr.value == "None":
            return _Built()
        bindings = scope.bindings(expr.value) if isinstance(expr, cst.Name) else []
        if bindings:
            return self._bound_class(bindings, depth)
        member = self._self_member(expr, scope)
        if member is not None and member.kind == "attribute":
            return self._attribute_class(member, scope, depth)
        if isinstance(expr, cst.Call):
            return self._returned_class(expr, scope, depth)
        if isinstance(expr, (cst.Name, cst.Attribute)) and not on_self(expr):
            target = self.find_class(scope.source, expr)
            if target is not None:
                return _Built([target])
            name = _code(expr)
            root = _root_name(expr)  # `AutoModel` of `AutoModel.from_config`: what the name says it is
            looks_like_model = bool(_MODEL_WORD.search(name)) and not (root and _NOT_LANGUAGE.search(root.value))
            return _Built.dead(f"{name}: {self.why_not_found(scope.source, expr)}", looks_like_model)
        return _Built.dead(f"{_code(expr)}: chosen at run time", True)

    def _bound_class(self, bindings: list[Binding], depth: int) -> _Built:
        built = _Built()
        for binding in bindings:
            if binding.expr is None:
                built.merge(_Built.dead(f"{binding.name}: a parameter with no default, given at run time", True))
            else:
                found = self._class_named_by(binding.expr, binding.scope, depth + 1)
                built.merge(found.said_of(binding.expr, f"{binding.name} = "))
        return built

    def _returned_class(self, call: cst.Call, scope: Scope, depth: int) -> _Built:
        """`self.get_model_cls(config)`, `pick_class(config)`: the classes the function returns;
        a registry lookup (`REGISTRY.get(arch)`) is chosen at run time."""
        member = self._self_member(call.func, scope)
        if member is not None and member.kind != "attribute":
            function = signature_node(self.cache, member)
            if function is not None:
                assert member.path is not None, "a definition that was read has its file"
                source = self.cache.read(member.path)
                return self._returned(function, FunctionScope(source, scope.owner, node=function), False, depth)
        if isinstance(call.func, cst.Name) and not scope.bindings(call.func.value):
            helper = self._helper_function(scope.source, call.func.value)
            if helper is not None:
                return self._built_by_helper(helper, scope.owner, depth, instances=False)
        return _Built.dead(f"{_code(call)}: chosen at run time", True)

    def _returned(self, function: cst.FunctionDef, scope: FunctionScope, instances: bool, depth: int) -> _Built:
        """Every `return` of a method or helper: instances built (or classes returned) there."""
        built = _Built()
        follow = self._built_by if instances else self._class_named_by
        for value in _returns(function):
            built.merge(follow(value, scope, depth + 1).said_of(value, f"{function.name.value} returns "))
        if not built.classes and not built.dead_ends:
            return _Built.dead(f"{function.name.value}: returns no model class that can be read", False)
        return built

    def _built_by_helper(self, helper: tuple[SourceFile, int], owner, depth: int, instances: bool = True) -> _Built:
        """`self.language_model = build_lm(config)`: the classes a module-level helper returns
        (the same for every class that calls it: a module-level function has no `self`)."""
        key = (helper[0].path, helper[1], instances)
        if key not in self._helpers:
            self._helpers[key] = self._helper_returns(helper, owner, depth, instances)
        found = self._helpers[key]
        return _Built(list(found.classes), list(found.dead_ends))

    def _helper_returns(self, helper: tuple[SourceFile, int], owner, depth: int, instances: bool) -> _Built:
        source, header = helper
        parsed = self.cache.parse_block(source, header)
        function = next((f for f in parsed.module.body if isinstance(f, cst.FunctionDef)), None)
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

    def _self_member(self, expr: cst.BaseExpression, scope: Scope) -> Signature | None:
        """`self.name`: the member the most derived class has (methods resolve virtually)."""
        if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"):
            return None
        info = self.class_info(*scope.owner) if scope.owner is not None else None
        return info.members.get(expr.attr.value) if info is not None else None

    def _attribute_class(self, member: Signature, scope: Scope, depth: int) -> _Built:
        """`model_cls = Foo` at class level (or `self.model_cls = Foo` in __init__): the class."""
        source = self.cache.read(self.tree.srt / member.file)
        index = member.line - 1
        text = assigned_value(source.lines, index, member.name) or assigned_value(source.lines, index, f"self.{member.name}")
        value = parse_value(text or "")
        if value is None:
            return _Built.dead(f"self.{member.name}: its value could not be read", False)
        return self._class_named_by(value, Scope(source, scope.owner), depth + 1)

    def why_not_found(self, source: SourceFile, expr: cst.BaseExpression) -> str:
        """One clause saying why `find_class` found nothing, for the report and for errors."""
        name = cst.Module(body=[]).code_for_node(expr)
        table = ImportTable.of(self.cache, source, self.tree)
        origin = table.lookup_expr(expr)
        if origin is None and isinstance(expr, cst.Attribute):
            root = _root_name(expr)
            origin = table.lookup(root.value) if root is not None else None
            if root is not None and origin is not None and origin.name is not None and origin.path is None:
                return f"{root.value} is imported from {origin.module}, outside the SGLang tree"
            found = self.find_class(source, root) if root is not None else None
            if root is not None and found is not None:
                return f"a method of class {root.value} ({found[0].rel}), whose result is not followed"
            origin = None
        if origin is None:
            alias = self._module_alias(source, expr)
            if alias is not None:
                return f"{name} = {_code(alias)}, and {_code(alias)} is not a class in the tree"
            return f"neither defined nor imported in {source.rel}"
        if origin.path is None:
            if origin.module.startswith("sglang.srt"):
                return f"module {origin.module} is not in this tree (fix the import in {source.rel})"
            return f"imported from {origin.module}, outside the SGLang tree"
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError as exc:
            return str(exc)
        if self.cache.outline(other).find(origin.name or name, "class") is None:
            return f"{other.rel} has no class {origin.name or name}"
        return f"{other.rel}: class {origin.name or name} could not be read"

    def wrapper(self, source: SourceFile, name: str, protocol: Protocol) -> Wrapper:
        info = self.class_info(source, name)
        if info is None:
            raise EaglepatchError(f"class {name} not found", path=source.rel)
        inners = self.inner_models(source, name, protocol)
        dynamic = None
        if info.dynamic:
            getattr_sig = info.members["__getattr__"]
            dynamic = f"__getattr__ at {getattr_sig.at}"
        return Wrapper(cls=info, inners=inners, path=source.rel, forwards_dynamically=dynamic)

    def all_wrappers(self, protocol: Protocol, progress=None) -> list[Wrapper]:
        """Every class an `EntryClass` names under models/: each gets a verdict, none is left out,
        and none twice (a module symlinked under another name is one file)."""
        files = []
        for path in one_path_per_file(self.tree.models.rglob("*.py")):
            try:
                with open(path, "rb") as handle:
                    if b"EntryClass" in handle.read():
                        files.append(path)
            except OSError:
                continue
        found: list[Wrapper] = []
        for path in files:
            if progress is not None:
                progress(self.tree.rel(path), len(files))
            try:
                source = self.cache.read(path)
                for name in self.wrapper_candidates(source, entry_only=True):
                    found.append(self.wrapper(source, name, protocol))
            except EaglepatchError as exc:
                self.warnings.append(f"skipped {exc}")
        return found

def one_path_per_file(paths) -> list[Path]:
    """Sorted paths, one per real file: the file's own name rather than a symlink to it."""
    chosen: dict[Path, Path] = {}
    for path in sorted(paths):
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            continue
        if real not in chosen or not path.is_symlink() and chosen[real].is_symlink():
            chosen[real] = path
    return sorted(chosen.values())


def dotted_bases(header: str) -> list[cst.Arg] | None:
    """The bases of a class header read by CPython's parser, as the libcst nodes libcst would give,
    when every base is a dotted name spelled without spaces and there is no keyword (nearly every
    class); None otherwise, and libcst reads the header."""
    for text in (header + "\n    pass\n", header + "\n"):  # `class B(A): pass` carries its body
        try:
            node = ast.parse(text).body[0]
        except (SyntaxError, ValueError):
            continue
        break
    else:
        return None
    if not isinstance(node, ast.ClassDef) or node.keywords:
        return None
    out = []
    for base in node.bases:
        parts, expr = [], base
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        parts.append(expr.id)
        parts.reverse()
        if ast.get_source_segment(text, base) != ".".join(parts):
            return None  # spaces, comments or parentheses inside: libcst keeps them
        value: cst.BaseExpression = cst.Name(parts[0])
        for part in parts[1:]:
            value = cst.Attribute(value=value, attr=cst.Name(part))
        out.append(cst.Arg(value=value))
    return out


def signature_node(cache: SourceCache, signature: Signature) -> cst.FunctionDef | None:
    """The libcst tree of a member's definition, parsed only when its signature is copied."""
    if signature.node is None and signature.path is not None and signature.header is not None:
        source = cache.read(signature.path)
        parsed = cache.parse_block(source, signature.header)
        for node in _functions(parsed.module):
            if node.name.value == signature.name and parsed.line_of(node) == signature.line:
                signature.node, signature.parsed = node, parsed
                break
    return signature.node


def _decorators_above(lines: list[str], header: int) -> list[str]:
    names = []
    own = _indent(lines[header])
    i = header - 1
    while i >= 0 and _indent(lines[i]) == own and lines[i].lstrip().startswith("@"):
        match = _DECORATOR.match(lines[i])
        if match:
            names.append(match.group(1))
        i -= 1
    return names


def _functions(module: cst.Module) -> list[cst.FunctionDef]:
    found: list[cst.FunctionDef] = []

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def _returns(function: cst.FunctionDef) -> list[cst.BaseExpression]:
    """What a function's own `return X` statements return (not those of functions nested in it)."""
    return [s.value for s in small_statements(function) if isinstance(s, cst.Return) and s.value is not None]


def select_wrappers(tree: SourceTree, cache: SourceCache, resolver: Resolver, selector: str, protocol: Protocol) -> list[Wrapper]:
    """`--model kimi_k25` or `--model kimi_k25:KimiK25ForConditionalGeneration`."""
    module, _, class_name = selector.partition(":")
    module = module.removesuffix(".py").replace(".", "/")
    path = tree.models / f"{module}.py"
    rel = f"models/{module}.py"
    if not module or not path.is_file():
        raise EaglepatchError(
            f"no such model module; pass --model with a file name under {tree.rel(tree.models)}/ "
            "(e.g. kimi_k25 or kimi_k25:KimiK25ForConditionalGeneration)",
            path=rel,
        )
    source = cache.read(path)
    resolver.require_valid(source)
    if class_name:
        if cache.outline(source).find(class_name, "class") is None:
            classes = resolver.wrapper_candidates(source)
            raise EaglepatchError(f"has no class {class_name}; classes here: {', '.join(classes) or 'none'}", path=rel)
        names = [class_name]
    else:
        names = resolver.wrapper_candidates(source)
    if not names:
        raise EaglepatchError("defines no class; pass --model with a model module", path=rel)
    holding = [resolver.wrapper(source, name, protocol) for name in names]
    for wrapper in holding:
        for inner in wrapper.inners:
            broken = [u for u in inner.unresolved if any(sign in u.why for sign in _BROKEN_IMPORT)]
            if not inner.classes and broken:  # an import of a module the tree lacks: the tree is broken
                raise EaglepatchError(
                    f"self.{inner.attribute} = {broken[0].why}; fix the import, or pass --model module:Class",
                    path=inner.file or rel,
                    line=inner.line,
                )
            for cls in inner.classes:
                resolver.require_valid(cache.read(tree.srt / cls.file))
    return holding
