"""Add an interface to classes' bases, and import it: the one job of this codemod.

`AddBase({"Qwen3ASRForConditionalGeneration": "SupportsEagle3"}, ".interfaces")` appends
`SupportsEagle3` after the class's last base (before any `metaclass=`), in the layout the header
already has: one line when it fits, else one base a line with a trailing comma, as black and ruff
format lay it out.  The name is imported from `module` (".interfaces", or an absolute
"vllm.model_executor.models.interfaces"): merged into the file's import of that module when it has
one (an import spelled as one of `equivalents` counts too), in the sorted position when
its names are sorted, else as a new `from module import Name` after the file's last import of the
same kind (relative or absolute).

Idempotent: a class that already lists the base is left alone, and a name already imported from the
module is not imported again.

With `mark=True` the class also gets a comment line, `# eaglepatch: added SupportsEagle3 to the bases`
(`base_marker`), above its first statement after the docstring: what `revert` looks for.  Where the
change relaid what was there, the marker says how it was, so `revert` can give the bytes back:
`(before: header on one line)`, `(before: bases on a line of their own)`, `(before: import on one line)`.
"""

from __future__ import annotations

import libcst as cst

from .add_delegations import LINE_LENGTH

_EMPTY = cst.Module(body=[])


HEADER_ON_ONE_LINE = "header on one line"
BASES_ON_THEIR_LINE = "bases on a line of their own"
IMPORT_ON_ONE_LINE = "import on one line"


NOTES_PREFIX = "# (before: "  # the marker's second line, when it has notes: short lines, as ruff wants them


def base_marker(base: str, notes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The marker's comment lines: what apply added, then how the header and import were before."""
    text = f"# eaglepatch: added {base} to the bases"
    return (text, f"{NOTES_PREFIX}{'; '.join(notes)})") if notes else (text,)


def header_layout(node: cst.ClassDef) -> str:
    """How a class header lays out its bases: "lines" (one a line, or over several lines), "hug" (on a
    line of their own between the parentheses) or "line" (the header on one line)."""
    if _multiline([item.comma for item in [*node.bases, *node.keywords]]):
        return "lines"
    if isinstance(node.lpar, cst.LeftParen) and isinstance(node.lpar.whitespace_after, cst.ParenthesizedWhitespace):
        return "hug"
    return "line"


def _code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def _dotted(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _header_width(node: cst.ClassDef) -> int:
    """How long the last line of the class header (up to its colon) is."""
    header = _code(node.with_changes(body=cst.SimpleStatementSuite([cst.Pass()]), leading_lines=[], decorators=[]))
    return len(header.rstrip("\n").splitlines()[-1]) - len(" pass")


def _sort_key(name: str) -> tuple[int, str]:
    """isort's and ruff's order-by-type: CONSTANTS, then Classes, then functions, each case-sensitive."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def _newline_ws(indent: str) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=cst.SimpleWhitespace(indent)
    )


def _multiline(commas: list) -> bool:
    return any(isinstance(c, cst.Comma) and isinstance(c.whitespace_after, cst.ParenthesizedWhitespace) for c in commas)


class AddBase(cst.CSTTransformer):
    def __init__(
        self,
        bases: dict[str, str],
        module: str,
        line_length: int = LINE_LENGTH,
        indent: str = "    ",
        equivalents: tuple[str, ...] = (),
        mark: bool = False,
    ):
        super().__init__()
        self.mark = mark  # a marker comment in each class given the base (for revert)
        self.bases = bases  # class name -> base to add
        self.module = module  # ".interfaces" or an absolute dotted module: how a new import spells it
        self.spellings = (module, *equivalents)  # an existing import of any of these is merged into
        self.line_length = line_length
        self.indent = indent
        self.added: dict[str, list[str]] = {}
        self.needed: set[str] = set()  # names that must be imported
        self.depth = 0

    # -- the class headers ----------------------------------------------------------------------

    # Only module-level classes get a base (one under a module-level `if` or `try` is one) and only the
    # module's own imports are read: nothing inside a class, a function or a simple statement needs
    # visiting, which keeps a 3,000-line model file from being rebuilt node by node.
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.depth += 1
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.depth -= 1
        base = self.bases.get(updated.name.value)
        if base is None or self.depth:
            return updated
        if any(_dotted(arg.value).rsplit(".", 1)[-1] == base for arg in updated.bases):
            self.needed.add(base)
            return updated
        self.added.setdefault(updated.name.value, []).append(base)
        self.needed.add(base)
        based = self._with_base(updated, base)
        if not self.mark:
            return based
        before, after = header_layout(updated), header_layout(based)
        notes = () if before == after else ({"line": HEADER_ON_ONE_LINE, "hug": BASES_ON_THEIR_LINE}[before],)
        return _with_marker(based, base_marker(base, notes))

    def _with_base(self, node: cst.ClassDef, base: str) -> cst.ClassDef:
        args = list(node.bases)
        keywords = list(node.keywords)
        new = cst.Arg(cst.Name(base))
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if not args:
            return node.with_changes(
                bases=[new.with_changes(comma=space if keywords else cst.MaybeSentinel.DEFAULT)],
                lpar=node.lpar if isinstance(node.lpar, cst.LeftParen) else cst.LeftParen(),
                rpar=node.rpar if isinstance(node.rpar, cst.RightParen) else cst.RightParen(),
            )
        last = args[-1]
        separators = [a.comma for a in [*args, *keywords][:-1]]
        if _multiline(separators) and not isinstance(last.comma, cst.Comma):
            # bases over several lines, no trailing comma (yapf's layout): on the last line when it still fits
            args[-1] = last.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace(""))
            inline = node.with_changes(bases=[*args, new.with_changes(whitespace_after_arg=last.whitespace_after_arg)])
            if _header_width(inline) <= self.line_length:
                return inline
            args[-1] = last
        if _multiline(separators):  # one base a line (or several lines): one more line, after the last base
            separator = next(c for c in separators if isinstance(c, cst.Comma) and isinstance(c.whitespace_after, cst.ParenthesizedWhitespace))
            args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
            return node.with_changes(bases=[*args, new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)])
        args[-1] = last.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace(""))
        inline = node.with_changes(bases=[*args, new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)])
        hugging = isinstance(node.lpar, cst.LeftParen) and isinstance(node.lpar.whitespace_after, cst.ParenthesizedWhitespace)
        if hugging:  # `class X(\n    A, B\n):`: the bases on one line of their own
            line = self.indent + ", ".join(_code(a.value) for a in [*args, new]) + "".join(", " + _code(k).strip().rstrip(",") for k in keywords)
            fits = len(line) <= self.line_length
        else:
            fits = _header_width(inline) <= self.line_length
        if fits:
            return inline
        if not hugging:  # as black and ruff format split a header that does not fit: the bases on a line of their own
            line = self.indent + ", ".join(_code(a.value) for a in [*args, new])
            if not keywords and len(line) <= self.line_length:
                hug = [a.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace("")) for a in args]
                return node.with_changes(
                    bases=[*hug, new],
                    lpar=cst.LeftParen(whitespace_after=_newline_ws(self.indent)),
                    rpar=cst.RightParen(whitespace_before=_newline_ws("")),
                    whitespace_before_colon=cst.SimpleWhitespace(""),
                )
        # one base a line, a trailing comma (the layout black and ruff format give a header that does not fit)
        every = [*args, new, *keywords]
        laid = [item.with_changes(comma=cst.Comma(whitespace_after=_newline_ws(self.indent)), whitespace_after_arg=cst.SimpleWhitespace("")) for item in every[:-1]]
        laid.append(every[-1].with_changes(comma=cst.Comma(whitespace_after=_newline_ws("")), whitespace_after_arg=cst.SimpleWhitespace("")))
        return node.with_changes(
            bases=laid[: len(args) + 1],
            keywords=laid[len(args) + 1 :],
            lpar=cst.LeftParen(whitespace_after=_newline_ws(self.indent)),
            rpar=cst.RightParen(),
            whitespace_before_colon=cst.SimpleWhitespace(""),
        )

    # -- the import -----------------------------------------------------------------------------

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if not self.needed:
            return updated
        body = list(updated.body)
        wanted = sorted(self.needed, key=_sort_key)
        for index, statement in enumerate(body):
            found = self._import_of(statement)
            if found is None:
                continue
            have = {alias.evaluated_alias or alias.evaluated_name for alias in found.names} if not isinstance(found.names, cst.ImportStar) else set(wanted)
            missing = [n for n in wanted if n not in have]
            if not missing:
                return updated
            assert isinstance(statement, cst.SimpleStatementLine)
            merged = self._merge(found, missing)
            body[index] = statement.with_changes(body=[merged if s is found else s for s in statement.body])
            if self.mark and found.lpar is None and merged.lpar is not None:
                body = self._noted(body, IMPORT_ON_ONE_LINE)
            return updated.with_changes(body=body)
        return updated.with_changes(body=self._insert(body, wanted))

    def _noted(self, body: list, note: str) -> list:
        """The first class given a base here says `note` in its marker."""
        for index, statement in enumerate(body):
            if isinstance(statement, cst.ClassDef) and statement.name.value in self.added:
                body[index] = _renoted(statement, note)
                break
        return body

    def _import_of(self, statement: cst.CSTNode) -> cst.ImportFrom | None:
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and self._same_module(small):
                return small
        return None

    def _same_module(self, node: cst.ImportFrom) -> bool:
        spelled = "." * len(node.relative) + _dotted(node.module)
        return spelled in self.spellings

    def _merge(self, node: cst.ImportFrom, missing: list[str]) -> cst.ImportFrom:
        assert not isinstance(node.names, cst.ImportStar)
        aliases = list(node.names)
        names = [a.evaluated_name for a in aliases]
        ordered = names == sorted(names, key=_sort_key)
        for name in missing:
            position = len(aliases)
            if ordered:
                position = next((i for i, a in enumerate(aliases) if _sort_key(a.evaluated_name) > _sort_key(name)), len(aliases))
            aliases = self._insert_alias(aliases, position, cst.ImportAlias(cst.Name(name)), node.lpar is not None)
        merged = node.with_changes(names=aliases)
        if node.lpar is None and len(_code(merged)) > self.line_length:
            laid = [a.with_changes(comma=cst.Comma(whitespace_after=_newline_ws(self.indent))) for a in aliases[:-1]]
            laid.append(aliases[-1].with_changes(comma=cst.Comma(whitespace_after=_newline_ws(""))))
            merged = node.with_changes(
                names=laid,
                lpar=cst.LeftParen(whitespace_after=_newline_ws(self.indent)),
                rpar=cst.RightParen(),
            )
        return merged

    def _insert_alias(self, aliases: list[cst.ImportAlias], position: int, new: cst.ImportAlias, parenthesized: bool) -> list[cst.ImportAlias]:
        multiline = parenthesized and _multiline([a.comma for a in aliases])
        between = next(
            (a.comma for a in aliases[:-1] if isinstance(a.comma, cst.Comma)),
            cst.Comma(whitespace_after=_newline_ws(self.indent) if multiline else cst.SimpleWhitespace(" ")),
        )
        if position < len(aliases):
            return [*aliases[:position], new.with_changes(comma=between), *aliases[position:]]
        last = aliases[-1]
        return [*aliases[:-1], last.with_changes(comma=between), new.with_changes(comma=last.comma)]

    def _insert(self, body: list, wanted: list[str]) -> list:
        """A new `from module import ...` after the file's last top-level import of the same kind
        (relative or absolute), in module order among them, else after its last import, else after the docstring."""
        relative = self.module.startswith(".")
        statement = cst.SimpleStatementLine(
            [
                cst.ImportFrom(
                    module=cst.Name(self.module.lstrip(".")) if relative else _attribute(self.module),
                    names=[cst.ImportAlias(cst.Name(n), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for n in wanted[:-1]]
                    + [cst.ImportAlias(cst.Name(wanted[-1]))],
                    relative=[cst.Dot()] if relative else [],
                )
            ]
        )
        last_same = last_any = first_after = None
        for index, node in enumerate(body):
            if isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], (cst.Import, cst.ImportFrom)):
                last_any = index
                small = node.body[0]
                if isinstance(small, cst.ImportFrom) and bool(small.relative) == relative:
                    last_same = index
                    if first_after is None and _dotted(small.module) > self.module.lstrip("."):
                        first_after = index  # sorted by module, as isort keeps a block
        after = last_same if last_same is not None else last_any
        position = after + 1 if after is not None else (1 if body and _is_leading_expression(body[0]) else 0)
        if first_after is not None:
            position = first_after
            statement = statement.with_changes(leading_lines=body[first_after].leading_lines)
            body[first_after] = body[first_after].with_changes(leading_lines=[])
        return [*body[:position], statement, *body[position:]]


def _comment_line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(text))


def _renoted(node: cst.ClassDef, note: str) -> cst.ClassDef:
    """The class's marker with `note` added to its notes line (one written when it had none)."""
    assert isinstance(node.body, cst.IndentedBlock)
    statements = []
    for statement in node.body.body:
        assert isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        lines = list(statement.leading_lines)
        for index, line in enumerate(lines):
            if line.comment is None or not line.comment.value.startswith("# eaglepatch: added "):
                continue
            after = lines[index + 1] if index + 1 < len(lines) else None
            if after is not None and after.comment is not None and after.comment.value.startswith(NOTES_PREFIX):
                lines[index + 1] = after.with_changes(comment=cst.Comment(f"{after.comment.value[:-1]}; {note})"))
            else:
                lines.insert(index + 1, _comment_line(f"{NOTES_PREFIX}{note})"))
            break
        statements.append(statement.with_changes(leading_lines=lines))
    return node.with_changes(body=node.body.with_changes(body=statements))


def _with_marker(node: cst.ClassDef, marker: tuple[str, ...]) -> cst.ClassDef:
    """The marker comment above the class's first statement after its docstring (above the docstring
    when it is the only one); a one-line body (`class X(A): pass`) has no place for it."""
    body = node.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return node
    statements = list(body.body)
    at = 1 if len(statements) > 1 and _is_leading_expression(statements[0]) else 0
    first = statements[at]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    lines = [_comment_line(text) for text in marker]
    leading = list(first.leading_lines)
    blanks = 0
    while blanks < len(leading) and leading[blanks].comment is None:
        blanks += 1
    statements[at] = first.with_changes(leading_lines=[*leading[:blanks], *lines, *leading[blanks:]])
    return node.with_changes(body=body.with_changes(body=statements))


def _is_leading_expression(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], cst.Expr)


def _attribute(dotted: str) -> cst.Attribute | cst.Name:
    parts = dotted.split(".")
    node: cst.Attribute | cst.Name = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(node, cst.Name(part))
    return node
