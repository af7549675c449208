"""The class index: where a class of the tree is, what its text, bases and members are.

A class named in a file is found through the file's own imports (absolute, relative, aliased,
module aliases, star imports) and followed through in-tree inheritance; bases outside the tree
(`nn.Module`) are recorded, not guessed at.  Which members a class has is read off the file's
outline (the `def` headers, class-level assignments and `self.X = ...` lines of `__init__`);
a class header that is not plain dotted names is read by CPython's parser, and libcst parses only
the definitions whose code is copied (signature_node).
Everything is looked up once per run: every wrapper `--all` looks at shares one index.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..errors import EaglepatchError
from ..read.bindings import CHAINED, assigned_value, assignment_lines, forwards_any_name, may_bind_self, other_self_bindings
from ..read.expressions import code_of, dotted_node, dotted_parts, parse_statement, parse_value, remember, root_name, source_code
from ..read.imports import ImportTable
from ..read.outline import Outline
from ..read.source_cache import SourceCache
from ..read.text import SourceFile, bracket_scan, indent_width, is_code_line
from ..records import ClassInfo, Signature, SignatureKind
from .mro import c3_order

if TYPE_CHECKING:
    import libcst as cst

    from .context import RunContext

MAX_BASE_DEPTH = 12
# a class-body line opening a block whose assignments still bind class attributes: these words at the body's indent
_COMPOUND_WORDS = r"(?:if|elif|else|try|except|finally|with|async[ \t]+with|for|async[ \t]+for|while|match)\b"
# a class-body line assigning a class attribute, after its indent (`name = ...`, `name: T = ...`)
_CLASS_ATTR_TAIL = r"(\w+)[ \t]*(?::[^=\n]*)?=(?!=)"
_CLASS_ATTR = re.compile(r"^[ \t]*" + _CLASS_ATTR_TAIL)  # line by line (tests/test_speed_readings.py)
_AT_INDENT: dict[tuple[str, int], re.Pattern] = {}
_SELF_ASSIGN = re.compile(r"^([ \t]*)self\.(\w+)[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*(.*)$")
_DECORATOR = re.compile(r"^[ \t]*@([\w.]+)")
_EXCEPT_CLAUSE = re.compile(r"[ \t]*except\b[^\n]*:[ \t]*(?:#.*)?$")


class SelfAssignment(NamedTuple):
    """An attribute of `self` a method binds: where, at what indent, and the code it receives.  `value`
    is the first line's text of a plain `self.X = ...` (the rest is read when it is followed), and the
    whole expression (`whole`) of a tuple element or a `setattr` argument; `unpacked_from` is what it
    is one of the values of when which one cannot be read (`self.a, self.b = build(config)`)."""

    line: int  # its line index
    indent: int
    attribute: str
    value: str
    unpacked_from: str = ""
    whole: bool = False
    starred: bool = False  # a starred target: `value` is the list it receives
    position: tuple[int, int] | None = None  # its place among the targets `unpacked_from` is unpacked into


def _same_name(a: ast.expr, b: ast.expr) -> bool:
    return code_of(a) == code_of(b)


@dataclass
class ClassText:
    """Where a class is in its file, from the outline: no parsing needed."""

    source: SourceFile
    name: str
    header: int  # line index of `class`
    end: int  # one past its last line
    body_indent: int
    inline: bool = False  # the body is on the header's line (`class B(A): x = 1; y = 2`)

    def methods(self, outline: Outline) -> list[tuple[int, str]]:
        """The class's own `def`s: in its body, or in an `if`/`try`/`with` block of its body (a hook
        defined under `if _is_cuda:` is there), not inside a method or a nested class."""
        return [
            (index, name)
            for index, indent, kind, name in outline.headers
            if kind == "def" and self.header < index < self.end and self._directly_in_body(outline, index, indent)
        ]

    def _directly_in_body(self, outline: Outline, index: int, indent: int) -> bool:
        if indent <= self.body_indent:
            return indent == self.body_indent
        around = outline.enclosing(index)  # the def itself first, then the blocks around it
        return len(around) > 1 and around[1][0] == self.header

    def body_text(self) -> str:
        """The class's lines after its header, each led by its newline: what `_at_indent` patterns search."""
        return "\n" + "\n".join(self.source.lines[self.header + 1 : self.end])

    def block_attributes(self) -> list[tuple[int, str]]:
        """(line index, name) of the names the class body assigns inside an `if`/`try`/`with`/... block
        of its own (`if _is_cuda: get_embed_and_head = ...`): the class has them too.  Parsed (ast) only
        for a class whose body has such a block; the assignments at the body's own indent are not here."""
        lines = self.source.lines
        if not _at_indent(_COMPOUND_WORDS, self.body_indent).search(self.body_text()):
            return []
        indented = indent_width(lines[self.header]) > 0  # under a module-level `if`: parse it in one too
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


class ClassIndex:
    """Classes looked up by name, each read once per run."""

    def __init__(self, run: RunContext):
        self.tree = run.tree
        self.cache = run.cache
        self._classes: dict[tuple[Path, str], ClassInfo | None] = {}
        self._rels: dict[tuple[Path, str], str] = {}  # each class's file, relative to srt
        self._texts: dict[tuple[Path, str], ClassText | None] = {}
        self._named: dict[tuple[Path, str], tuple[SourceFile, str] | None] = {}
        self._module_assignments: dict[Path, dict[str, int]] = {}  # module-level `name = ...` lines
        self._bases: dict[tuple[Path, int], list[ast.expr]] = {}  # class headers, read once
        self._self_assignments: dict[tuple[Path, int, int], list[SelfAssignment]] = {}
        # what class_info merges in C3 order: each class's own members, in-tree direct bases, other bases
        self._own: dict[tuple[Path, str], dict[str, Signature]] = {}
        self._direct: dict[tuple[Path, str], list[tuple[Path, str]]] = {}
        self._external: dict[tuple[Path, str], list[str]] = {}

    def require_valid(self, source: SourceFile) -> None:
        error = self.cache.unreadable(source.path)
        if error is not None:
            raise error

    # -- finding a class ---------------------------------------------------------------
    def class_text(self, source: SourceFile, name: str) -> ClassText | None:
        key = (source.path, name)
        if key not in self._texts:
            outline = self.cache.outline(source)
            header = outline.find(name, "class")
            found = None
            if header is not None:
                end = outline.ends.get(header, header + 1)
                body = next((i for i in range(header + 1, end) if is_code_line(source.lines[i]) and indent_width(source.lines[i]) > indent_width(source.lines[header])), None)
                indent = indent_width(source.lines[body]) if body is not None else indent_width(source.lines[header]) + 4
                found = ClassText(source, name, header, end, indent, inline=body is None)
            self._texts[key] = found
        return self._texts[key]

    def find_class(self, source: SourceFile, expr: ast.expr, depth: int = 0) -> tuple[SourceFile, str] | None:
        """Where the class named by `expr` in `source` is defined, through imports, re-exports,
        star imports and module-level aliases (`B = A`)."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Name) and depth == 0:
            key = (source.path, expr.id)
            if key not in self._named:
                self._named[key] = self._find_class(source, expr, depth)
            return self._named[key]
        return self._find_class(source, expr, depth)

    def _find_class(self, source: SourceFile, expr: ast.expr, depth: int) -> tuple[SourceFile, str] | None:
        table = None
        if isinstance(expr, ast.Name):
            header = self.cache.outline(source).find(expr.id, "class")
            if header is not None:
                # a class defined under `except ImportError:` beside an import of the name in the `try:`
                # is the fallback: the import is what runs
                if not _in_except_clause(source.lines, header):
                    return source, expr.id
                table = ImportTable.of(self.cache, source, self.tree)
                if table.lookup(expr.id) is None:
                    return source, expr.id
        origin = (table or ImportTable.of(self.cache, source, self.tree)).lookup_expr(expr)
        if origin is None:
            alias = self._module_alias(source, expr)
            return self.find_class(source, alias, depth + 1) if alias is not None else None
        if origin.path is None or origin.name is None:
            return None
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError:
            return None
        return self.find_class(other, dotted_node([origin.name]), depth + 1)

    def _module_alias(self, source: SourceFile, expr: ast.expr) -> ast.expr | None:
        """`B = A` (or `B = module.A`) at module level: the expression `B` names."""
        if not isinstance(expr, ast.Name):
            return None
        if "\n" + expr.id not in source.text and not source.text.startswith(expr.id):
            return None
        if source.path not in self._module_assignments:
            found = assignment_lines(source.lines, 0, len(source.lines))
            at_top = {name: [i for i in lines if indent_width(source.lines[i]) == 0] for name, lines in found.items()}
            self._module_assignments[source.path] = {name: lines[-1] for name, lines in at_top.items() if lines}
        index = self._module_assignments[source.path].get(expr.id)
        if index is None:
            return None
        value = parse_value(assigned_value(source.lines, index, expr.id) or "")
        return value if isinstance(value, (ast.Name, ast.Attribute)) and not _same_name(value, expr) else None

    def bases_of(self, text: ClassText) -> list[ast.expr]:
        """The bases in the class header (not its keywords: `metaclass=...`), read on its own, once:
        every `__init__` that calls super() reads it.  `*bases` gives `bases`."""
        key = (text.source.path, text.header)
        if key not in self._bases:
            self._bases[key] = self._parse_bases(text)
        return list(self._bases[key])

    @staticmethod
    def _parse_bases(text: ClassText) -> list[ast.expr]:
        lines = text.source.lines
        outline_end = text.header
        depth, in_string = 0, None
        for i in range(text.header, text.end):
            depth, in_string = bracket_scan(lines[i], depth, in_string)  # skips strings and comments
            outline_end = i
            if depth <= 0 and in_string is None:
                break
        header = "\n".join(line.strip() for line in lines[text.header : outline_end + 1])
        simple = dotted_bases(header)
        if simple is not None:
            return simple
        node = parse_statement(header + "\n    pass\n")
        if node is None:  # `class B(A): pass` carries its body on the header line
            node = parse_statement(header + "\n")
        if not isinstance(node, ast.ClassDef):
            return []
        return [base.value if isinstance(base, ast.Starred) else base for base in node.bases]

    # -- class members -------------------------------------------------------------------
    def class_info(self, source: SourceFile, name: str, depth: int = 0) -> ClassInfo | None:
        """The class with what it inherits, in Python's method resolution order (C3): a member two
        bases define comes from the one Python would call (`class D(B, C)` with `C` overriding `A.f`
        that `B` inherits: `C.f`), the bases listed in that order."""
        key = (source.path, name)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None  # guards against cycles
        text = self.class_text(source, name)
        if text is None:
            return None
        own = dict(self._own_members(text))
        direct: list[tuple[Path, str]] = []
        external: list[str] = []
        for value in self.bases_of(text):
            label = source_code(value)
            found = self.find_class(source, value) if depth < MAX_BASE_DEPTH else None
            base = self.class_info(found[0], found[1], depth + 1) if found else None
            if base is None or found is None:
                external.append(label)
                continue
            direct.append((found[0].path, found[1]))
        self._own[key] = own
        self._rels[key] = source.rel
        self._direct[key] = direct
        self._external[key] = external
        order = c3_order(key, lambda k: self._direct.get(k, ()))
        members = dict(own)
        for later in order[1:]:
            for member, signature in self._own.get(later, {}).items():
                members.setdefault(member, signature)
        bases = tuple(dict.fromkeys(k[1] for k in order[1:]))
        base_keys = tuple(f"{self._rels[k]}:{k[1]}" for k in order[1:] if k[1] in bases)
        outside = tuple(dict.fromkeys(label for k in order for label in self._external.get(k, ())))
        info = ClassInfo(
            name=name,
            file=source.rel,
            line=text.header + 1,
            members=members,
            bases=bases,
            external_bases=outside,
            dynamic=self._forwards_any_name(members.get("__getattr__")),
            base_keys=base_keys if len(base_keys) == len(bases) else (),
        )
        self._classes[key] = info
        return info

    def _forwards_any_name(self, getattr_: Signature | None) -> bool:
        """A `__getattr__` that can hand any name on: one that forwards a few names is not dynamic."""
        node = definition_ast(self.cache, getattr_) if getattr_ is not None and getattr_.kind == "method" else None
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
        inner = [h for h, _, _, _ in outline.headers if text.header < h < text.end]
        for index, name in _class_attributes(text):
            # not a line of a nested def or class (a string's line at the body's indent): only the blocks
            # above it are asked where they end
            if any(outline.ends.get(h, h + 1) > index for h in inner if h <= index):
                continue
            members.setdefault(name, Signature(name, "attribute", text.name, source.rel, index + 1))
        for index, name in text.block_attributes():
            members.setdefault(name, Signature(name, "attribute", text.name, source.rel, index + 1))
        for name in _inline_attributes(text) if text.inline else ():
            members.setdefault(name, Signature(name, "attribute", text.name, source.rel, text.header + 1))
        init = self.init_range(text)
        if init is not None:
            for index, _column, attribute, *_rest in self.self_assignments(source, *init):
                members.setdefault(attribute, Signature(attribute, "attribute", text.name, source.rel, index + 1))
        return members

    def init_range(self, text: ClassText) -> tuple[int, int] | None:
        """The class's own `__init__`: its `def` line and one past its last line."""
        outline = self.cache.outline(text.source)
        for index, name in text.methods(outline):
            if name == "__init__":
                return index, outline.ends.get(index, index + 1)
        return None

    def self_assignments(self, source: SourceFile, start: int, end: int) -> list[SelfAssignment]:
        """`self.X = ...` lines in a method, and the other statements that bind an attribute of `self`
        (a tuple or starred target, `setattr(self, "X", ...)`, `self.add_module("X", ...)`): read once
        per run (a class's members and what its `__init__` builds both ask)."""
        key = (source.path, start, end)
        found = self._self_assignments.get(key)
        if found is None:
            found = self._self_assignments[key] = self._read_self_assignments(source, start, end)
        return list(found)

    @staticmethod
    def _read_self_assignments(source: SourceFile, start: int, end: int) -> list[SelfAssignment]:
        out = []
        for index, line in enumerate(source.lines[start + 1 : end], start + 1):
            match = _SELF_ASSIGN.match(line)
            if match and not CHAINED.match(match.group(3)):
                out.append(SelfAssignment(index, len(match.group(1)), match.group(2), match.group(3).strip()))
            elif match or may_bind_self(line):
                for binding in other_self_bindings(source.lines, index):
                    out.append(SelfAssignment(index, indent_width(line), binding.attribute, binding.value, binding.unpacked_from, True, binding.starred, binding.position))
        return out

    # -- the report's clause when a class is not found -----------------------------------------
    def why_not_found(self, source: SourceFile, expr: ast.expr) -> str:
        """One clause saying why `find_class` found nothing, for the report and for errors."""
        name = source_code(expr)
        table = ImportTable.of(self.cache, source, self.tree)
        origin = table.lookup_expr(expr)
        if origin is None and isinstance(expr, ast.Attribute):
            root = root_name(expr)
            origin = table.lookup(root.id) if root is not None else None
            if root is not None and origin is not None and origin.name is not None and origin.path is None:
                return f"{root.id} is imported from {origin.module}, outside the SGLang tree"
            found = self.find_class(source, root) if root is not None else None
            if root is not None and found is not None:
                return f"a method of class {root.id} ({found[0].rel}), whose result is not followed"
            origin = None
        if origin is None:
            alias = self._module_alias(source, expr)
            if alias is not None:
                return f"{name} = {code_of(alias)}, and {code_of(alias)} is not a class in the tree"
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


def dotted_bases(header: str) -> list[ast.expr] | None:
    """The bases of a class header when every base is a dotted name spelled without spaces and there
    is no keyword (nearly every class): read off the text when the header can mean nothing else, else
    by CPython's parser; None otherwise (the header is read whole, _parse_bases)."""
    names = _plain_bases(header)
    if names is None:
        names = _bases_read_by_ast(header)
    if names is None:
        return None
    return [dotted_node(name.split(".")) for name in names]


# `class Name(a.B, C):` and nothing after the colon: ASCII names and dots, commas, spaces, tabs, newlines
_PLAIN_HEADER = re.compile(r"class[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?:\(([A-Za-z0-9_., \t\n]*)\))?[ \t]*:[ \t]*")
_PLAIN_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _plain_bases(header: str) -> list[str] | None:
    """The dotted bases of a header that can only mean them, read off its text (no parser for the
    few hundred headers of a run); None whenever CPython's parser could read it otherwise."""
    match = _PLAIN_HEADER.fullmatch(header)
    if match is None or keyword.iskeyword(match.group(1)):
        return None
    if not match.group(2) or not match.group(2).strip(" \t\n"):
        return []
    parts = [part.strip(" \t\n") for part in match.group(2).split(",")]
    if parts[-1] == "":
        parts.pop()  # a trailing comma
    if not all(_PLAIN_DOTTED.fullmatch(part) for part in parts):
        return None  # an empty place (`A,,B`), spaces inside a name, ...
    if any(keyword.iskeyword(name) for part in parts for name in part.split(".")):
        return None  # `None`, `a.if`: not names to CPython
    return parts


def _bases_read_by_ast(header: str) -> list[str] | None:
    """The dotted bases CPython's parser reads in a header, spelled as written; None for anything else."""
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
        parts = dotted_parts(base)
        if parts is None:
            return None
        if ast.get_source_segment(text, base) != ".".join(parts):
            return None  # spaces, comments or parentheses inside: the label keeps them (read whole)
        out.append(".".join(parts))
    return out


def definition_ast(cache: SourceCache, signature: Signature) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """A member's definition read by CPython's parser, its nodes tagged with the text they were read
    from (read/expressions.py quotes them): what the analysis follows (a method's returns and locals,
    its parameters) without libcst."""
    if signature.path is None or signature.header is None:
        return None
    node = function_read(cache, cache.read(signature.path), signature.header)
    return node if node is not None and node.name == signature.name else None


def function_read(cache: SourceCache, source: SourceFile, header: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def at line index `header`, read by CPython's parser, its nodes tagged with their text."""
    node = cache.function_ast(source, header)
    if node is not None:
        remember(node, cache.function_text(source, header))
    return node


def signature_node(cache: SourceCache, signature: Signature) -> cst.FunctionDef | None:
    """The libcst tree of a member's definition, parsed only when its signature is copied, once per
    run: kept in the cache by where the definition is, never written into the record."""
    if signature.path is None or signature.header is None:
        return None
    key = (signature.path, signature.line, signature.name)
    if key not in cache.definitions:
        source = cache.read(signature.path)
        parsed = cache.parse_block(source, signature.header)
        cache.definitions[key] = next(
            (node for node in _functions(parsed.module) if node.name.value == signature.name and parsed.line_of(node) == signature.line),
            None,
        )
    return cache.definitions[key]


def _at_indent(pattern: str, indent: int) -> re.Pattern:
    """`pattern` at the start of a line indented exactly `indent` columns, searched from the newline before
    the line: one search over a block's text, not a match a line (a pattern led by a literal is searched
    for by skipping to it, a `^`-anchored one is tried at every character)."""
    compiled = _AT_INDENT.get((pattern, indent))
    if compiled is None:
        compiled = _AT_INDENT[(pattern, indent)] = re.compile(rf"\n[ \t]{{{indent}}}{pattern}")
    return compiled


def _class_attributes(text: ClassText) -> list[tuple[int, str]]:
    """(line index, name) of each line of the class (header excluded) at the body's indent that
    `_CLASS_ATTR` matches."""
    pattern = _at_indent(_CLASS_ATTR_TAIL, text.body_indent)
    body = text.body_text()
    found = []
    index, counted = text.header, 0
    for match in pattern.finditer(body):
        index += body.count("\n", counted, match.start() + 1)
        counted = match.start() + 1
        found.append((index, match.group(1)))
    return found


def _in_except_clause(lines: Sequence[str], header: int) -> bool:
    """The class at line `header` is defined in an `except ...:` clause (its nearest enclosing line)."""
    own = indent_width(lines[header])
    if own == 0:
        return False
    for index in range(header - 1, -1, -1):
        line = lines[index]
        if is_code_line(line) and indent_width(line) < own:
            return _EXCEPT_CLAUSE.match(line) is not None
    return False


def _inline_attributes(text: ClassText) -> list[str]:
    """The names a one-line class body assigns (`class B(A): x = 1; y = 2`): parsed, the header and its
    body being one statement (a compound statement cannot stand there, so no def is among them)."""
    node = parse_statement("\n".join(line.strip() for line in text.source.lines[text.header : text.end]) + "\n")
    if not isinstance(node, ast.ClassDef):
        return []
    names = []
    for statement in node.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(statement, ast.AnnAssign) else []
        for target in targets:
            for name in [target] if isinstance(target, ast.Name) else getattr(target, "elts", []):
                if isinstance(name, ast.Name):
                    names.append(name.id)
    return names


def _decorators_above(lines: Sequence[str], header: int) -> list[str]:
    names = []
    own = indent_width(lines[header])
    i = header - 1
    while i >= 0 and indent_width(lines[i]) == own and lines[i].lstrip().startswith("@"):
        match = _DECORATOR.match(lines[i])
        if match:
            names.append(match.group(1))
        i -= 1
    return names


def _functions(module: cst.Module) -> list[cst.FunctionDef]:
    """Every `def` in the module, in the order a visitor meets them.  A def stands only where a
    statement does, so the walk goes through statement bodies and never into an expression (a
    visitor over the whole tree spent most of its time in the signatures' and bodies' expressions)."""
    import libcst as cst  # only where code is copied: `check` reads with CPython's parser

    found: list[cst.FunctionDef] = []
    todo: list[cst.CSTNode] = list(reversed(module.body))
    while todo:
        node = todo.pop()
        if isinstance(node, cst.SimpleStatementLine):
            continue
        if isinstance(node, cst.FunctionDef):
            found.append(node)
        todo.extend(reversed(_statement_children(node)))
    return found


def _statement_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements and clauses directly under a compound statement or clause, in source order."""
    import libcst as cst
    out: list[cst.CSTNode] = []
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        out.extend(body.body)
    elif isinstance(node, cst.IndentedBlock):
        out.extend(node.body)
    for name in ("handlers", "cases"):
        out.extend(getattr(node, name, ()))
    for name in ("orelse", "finalbody"):
        clause = getattr(node, name, None)
        if clause is not None:
            out.append(clause)
    return out
