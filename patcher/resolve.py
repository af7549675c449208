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
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from patcher.errors import EaglepatchError
from patcher.imports import ImportTable
from patcher.locate import SourceTree
from patcher.records import ClassInfo, InnerModel, Protocol, Signature, Unresolved, Wrapper
from patcher.source import SourceCache, SourceFile, _indent, _is_code, _scan

_ENTRY = re.compile(r"^EntryClass\s*=\s*(.+)$", re.MULTILINE)
MAX_BASE_DEPTH = 12
# a class name that says "model" (for inner models that cannot be resolved, or live in the wrapper's file)
_MODEL_NAME = re.compile(r"(Model|ForCausalLM|ForConditionalGeneration|LMHeadModel)$")
_NOT_LANGUAGE = re.compile(r"Vision|ViT|Visual|Image|Audio|Speech|Projector|Tower|Encoder|Patch", re.IGNORECASE)
_CLASS_ATTR = re.compile(r"^[ \t]*(\w+)[ \t]*(?::[^=\n]*)?=(?!=)")
_SELF_ASSIGN = re.compile(r"^([ \t]*)self\.(\w+)[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*(.*)$")
_CALLEE = re.compile(r"^([A-Za-z_][\w.]*)[ \t]*\(")
_SUPER_INIT = re.compile(r"\bsuper\([^)]*\)\.__init__\(|\b\w+\.__init__\(\s*self\b")
_DECORATOR = re.compile(r"^[ \t]*@([\w.]+)")


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
    """A model class from another file under models/, or a language-model-named one from the same file."""
    if not cls.file.startswith("models/") or _NOT_LANGUAGE.search(cls.name):
        return False
    return cls.file != wrapper_file or bool(_MODEL_NAME.search(cls.name))


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
        """Where the class named by `expr` in `source` is defined, through imports and re-exports."""
        if depth > 4:
            return None
        if isinstance(expr, cst.Name) and self.cache.outline(source).find(expr.value, "class") is not None:
            return source, expr.value
        origin = ImportTable.of(self.cache, source, self.tree).lookup_expr(expr)
        if origin is None or origin.path is None or origin.name is None:
            return None
        try:
            other = self.cache.read(origin.path)
        except EaglepatchError:
            return None
        return self.find_class(other, cst.Name(origin.name), depth + 1)

    def bases_of(self, text: ClassText) -> list[cst.Arg]:
        """The class header, parsed on its own."""
        lines = text.source.lines
        outline_end = text.header
        depth, in_string = 0, None
        for i in range(text.header, text.end):
            depth, in_string = _scan(lines[i], depth, in_string)  # skips strings and comments
            outline_end = i
            if depth <= 0 and in_string is None:
                break
        header = "\n".join(line.strip() for line in lines[text.header : outline_end + 1])
        try:
            node = cst.parse_statement(header + "\n    pass\n")
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
            dynamic="__getattr__" in members,
        )
        self._classes[key] = info
        return info

    def _own_members(self, text: ClassText) -> dict[str, Signature]:
        source, outline = text.source, self.cache.outline(text.source)
        members: dict[str, Signature] = {}
        for index, name in text.methods(outline):
            decorators = _decorators_above(source.lines, index)
            if name in members and any(d.endswith((".setter", ".deleter")) for d in decorators):
                continue
            kind = "property" if {"property", "cached_property", "functools.cached_property"} & set(decorators) else "method"
            members[name] = Signature(name, kind, text.name, source.rel, index + 1, path=source.path, header=index)
        nested = {i for h, _, _, _ in outline.headers if text.header < h < text.end for i in range(h, outline.ends.get(h, h + 1))}
        for index in range(text.header + 1, text.end):
            line = source.lines[index]
            if index in nested or _indent(line) != text.body_indent:
                continue
            match = _CLASS_ATTR.match(line)
            if match:
                members.setdefault(match.group(1), Signature(match.group(1), "attribute", text.name, source.rel, index + 1))
        init = self._init_range(text)
        if init is not None:
            for index, _indent_, attribute, _value in self._self_assignments(source, *init):
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

    # -- wrappers ---------------------------------------------------------------------------
    def wrapper_candidates(self, source: SourceFile, entry_only: bool = False) -> list[str]:
        """EntryClass names when the file has them, else every top-level class."""
        outline = self.cache.outline(source)
        top = [name for _, indent, kind, name in outline.headers if kind == "class" and indent == 0]
        named: list[str] = []
        for match in _ENTRY.finditer(source.text):
            value = _balanced(source.text, match.start(1))
            named += [n for n in re.findall(r"\w+", value) if n in top and n not in named]
        if named or entry_only:
            return named
        return top

    def _init_assignments(self, source: SourceFile, name: str, depth: int = 0) -> list:
        """`self.X = Callee(...)` in __init__, the class's own first, then its in-tree bases' (via super())."""
        text = self.class_text(source, name)
        if text is None:
            return []
        init = self._init_range(text)
        out = []
        calls_super = init is None
        if init is not None:
            body_indent = None
            for index, indent, attribute, value in self._self_assignments(source, *init):
                body_indent = indent if body_indent is None else min(body_indent, indent)
                out.append((source, index, indent, attribute, value))
            calls_super = any(_SUPER_INIT.search(source.lines[i]) for i in range(init[0], init[1]))
            out = [(s, i, ind > (body_indent or ind) or self._nested(source, init, i), a, v) for s, i, ind, a, v in out]
        if calls_super and depth < MAX_BASE_DEPTH:
            for arg in self.bases_of(text):
                if arg.keyword is None:
                    found = self.find_class(source, arg.value)
                    if found is not None:
                        out += self._init_assignments(found[0], found[1], depth + 1)
        return out

    @staticmethod
    def _nested(source: SourceFile, init: tuple[int, int], index: int) -> bool:
        """True when the line sits deeper than __init__'s own body (inside an if/try/with)."""
        first = next((i for i in range(init[0] + 1, init[1]) if _is_code(source.lines[i]) and not source.lines[i].lstrip().startswith(('"', "'", ")"))), None)
        return first is not None and _indent(source.lines[index]) > _indent(source.lines[first])

    def inner_models(self, source: SourceFile, name: str, protocol: Protocol) -> list[InnerModel]:
        """Attributes `__init__` fills with another model, and the class(es) each may hold."""
        found: dict[str, InnerModel] = {}
        for where, index, conditional, attribute, value in self._init_assignments(source, name):
            callee = _CALLEE.match(value)
            if callee is None or callee.group(1).split(".")[0] == "self":
                continue  # `self.x = None`, `self.x = self.x.to(dtype)`: no model built here
            try:
                func = cst.parse_expression(callee.group(1))
            except cst.ParserSyntaxError:
                continue
            target = self.find_class(where, func) or self._built_by_helper(where, func)
            inner = found.get(attribute)
            if inner is None:
                inner = found[attribute] = InnerModel(attribute, [], index + 1, conditional, file=where.rel)
            inner.conditional = inner.conditional or conditional
            if target is None:
                construct = f"self.{attribute} = {value}"
                inner.unresolved.append(Unresolved(construct, f"{where.rel}:{index + 1}", f"{callee.group(1)}: {self.why_not_found(where, func)}"))
                continue
            info = self.class_info(*target)
            if info is not None and all(c.name != info.name for c in inner.classes):
                inner.classes.append(info)
        wanted = set(protocol.members)
        candidates = [i for i in found.values() if i.classes]
        providers = [i for i in candidates if any(wanted & set(c.members) for c in i.classes)]
        if providers:
            return providers
        # Nothing offers a protocol member: report the language model(s) it holds, if any, so the
        # verdict is "needs hand-written code"; towers, projectors and layers are not that.
        held = [i for i in candidates if any(_holds_language_model(c, source.rel) for c in i.classes)]
        if held:
            return held
        return [
            i for i in found.values() if not i.classes and any(_MODEL_NAME.search(u.why.split(":")[0]) for u in i.unresolved)
        ]

    def why_not_found(self, source: SourceFile, expr: cst.BaseExpression) -> str:
        """One clause saying why `find_class` found nothing, for the report and for errors."""
        name = cst.Module(body=[]).code_for_node(expr)
        origin = ImportTable.of(self.cache, source, self.tree).lookup_expr(expr)
        if origin is None:
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

    def _built_by_helper(self, source: SourceFile, func: cst.BaseExpression) -> tuple[SourceFile, str] | None:
        """`self.language_model = build_lm(config)`: the class the helper returns."""
        if not isinstance(func, cst.Name):
            return None
        header = self.cache.outline(source).find(func.value, "def")
        if header is None:
            return None
        parsed = self.cache.parse_block(source, header)
        for ret in _returns(parsed.module):
            if isinstance(ret.value, cst.Call):
                found = self.find_class(source, ret.value.func)
                if found:
                    return found
        return None

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
        """Every class an `EntryClass` names under models/: each gets a verdict, none is left out."""
        files = []
        for path in sorted(self.tree.models.rglob("*.py")):
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


def _returns(module: cst.Module) -> list[cst.Return]:
    found: list[cst.Return] = []

    class Collect(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            if node.value is not None:
                found.append(node)

    module.visit(Collect())
    return found


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
            if not inner.classes and inner.unresolved:
                raise EaglepatchError(
                    f"self.{inner.attribute} = {inner.unresolved[0].why}; fix the import, or pass --model module:Class",
                    path=inner.file or rel,
                    line=inner.line,
                )
            for cls in inner.classes:
                resolver.require_valid(cache.read(tree.srt / cls.file))
    return holding
