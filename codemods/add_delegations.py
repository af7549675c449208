"""Add delegating methods to wrapper classes: the one job of this codemod.

Each generated member copies the inner definition's signature (positional-only, defaults,
`*args`, keyword-only, `**kwargs`, annotations, return annotation), forwards every argument
the way it was declared, returns the inner result, and raises a clear `AttributeError` when
the inner model is `None` or lacks the member.  Code is rendered in the file's own indent and
newline, and laid out the way black would lay it out, so formatting the file changes nothing.

Idempotent by construction: a member the class already defines is never written again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from .contract import VisitorCommand
from .names import LEARNED, LINE_LENGTH, MARKER, NOTE

_EMPTY = cst.Module(body=[])


@dataclass(frozen=True)
class Delegation:
    """One member to forward from a wrapper class to the model it holds."""

    name: str
    inner_attribute: str
    style: str = "method"  # "method" | "property" | "settable" (a property with a setter) | "setter" (that setter alone) | "learned"
    params: cst.Parameters | None = None
    returns: cst.Annotation | None = None
    is_async: bool = False
    binding: str = "instance"  # "instance" | "static" | "class": how the inner defines it
    imports: tuple[tuple[str, str | None, str | None], ...] = field(default=())  # (module, name, asname)
    note: str = ""  # one line under the marker: why the signature is not the inner's
    learned: cst.FunctionDef | None = None  # style "learned": the whole def, retargeted (codemods/retarget.py)
    origin: str = ""  # style "learned": "file:Class" it was learned from
    purpose: str = "EAGLE-3"  # the algorithms its docstring names: "EAGLE-3", or the tree's names ("DFLASH") of others


def _code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def _param_text(param: cst.Param, prefix: str = "") -> str:
    bare = param.with_changes(
        comma=cst.MaybeSentinel.DEFAULT,
        star=prefix if prefix else param.star,
        whitespace_after_star=cst.SimpleWhitespace(""),
        whitespace_after_param=cst.SimpleWhitespace(""),
    )
    text = _code(bare).strip()
    if "\n" in text or "#" in text:
        text = black_one_line(text)
    return text


_OPENERS, _CLOSERS = "([{", ")]}"


def black_one_line(code: str) -> str:
    """A parameter (or expression) written over several lines, on one line as black writes it: comments
    and line breaks dropped, no space inside brackets or before a comma, other spacing kept."""
    import io
    import tokenize

    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    out: list[str] = []
    previous = None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):  # pragma: no cover - the text is printed from a parsed node
        return " ".join(code.split())
    for token in tokens:
        if token.type in skip:
            continue
        if previous is not None:
            if previous.string in _OPENERS or token.string in _CLOSERS or token.string == ",":
                gap = ""
            elif previous.end[0] == token.start[0]:
                gap = token.line[previous.end[1] : token.start[1]]
            else:
                gap = " "
            out.append(gap)
        out.append(token.string)
        previous = token
    return "".join(out)


@dataclass
class RenderedSignature:
    params: list[str]  # as written in the def, the receiver first
    args: list[str]  # as passed on to the inner member
    names: set[str]

    @property
    def receiver(self) -> str:
        return self.params[0]


def render_signature(delegation: Delegation) -> RenderedSignature:
    params = delegation.params or cst.Parameters()
    positional = list(params.posonly_params) + list(params.params)
    if delegation.binding in ("instance", "class") and positional:
        receiver = positional[0]
        positional = positional[1:]
    else:
        receiver = None
    posonly = [p for p in params.posonly_params if p is not receiver]
    regular = [p for p in params.params if p is not receiver]
    every = [*posonly, *regular, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    taken = {p.name.value for p in every}
    # a staticmethod may call a parameter `self`; the wrapper's own receiver then needs another name
    me = next(n for n in ("self", "wrapper", "_self", "_eaglepatch_self") if n not in taken)
    out = [me]
    args: list[str] = []
    names = {me}
    for param in posonly:
        out.append(_param_text(param))
        args.append(param.name.value)
        names.add(param.name.value)
    if posonly:
        out.append("/")
    elif params.posonly_ind is not cst.MaybeSentinel.DEFAULT and receiver is not None and receiver in params.posonly_params:
        out.append("/")
    for param in regular:
        out.append(_param_text(param))
        args.append(param.name.value)
        names.add(param.name.value)
    star = params.star_arg
    if isinstance(star, cst.Param):
        out.append(_param_text(star, "*"))
        args.append(f"*{star.name.value}")
        names.add(star.name.value)
    elif isinstance(star, cst.ParamStar):
        out.append("*")
    for param in params.kwonly_params:
        out.append(_param_text(param))
        args.append(f"{param.name.value}={param.name.value}")
        names.add(param.name.value)
    if isinstance(params.star_kwarg, cst.Param):
        out.append(_param_text(params.star_kwarg, "**"))
        args.append(f"**{params.star_kwarg.name.value}")
        names.add(params.star_kwarg.name.value)
    return RenderedSignature(out, args, names)


def fit_call(indent: str, unit: str, head: str, items: list[str], tail: str, width: int = LINE_LENGTH) -> list[str]:
    """Lay out `head(items)tail` as black does at `width` columns: one line, then one hugged line, then one item per line."""
    columns = len(indent.expandtabs(4))
    one = f"{indent}{head}{', '.join(items)}{tail}"
    if columns + len(one) - len(indent) <= width or not items:
        return [one]
    inner = indent + unit
    body = f"{inner}{', '.join(items)}"
    if len(body.expandtabs(4)) <= width or len(items) == 1:
        return [f"{indent}{head}", body, f"{indent}{tail}"]
    exploded = [line for item in items for line in split_item(inner, unit, f"{item},", width)]
    return [f"{indent}{head}", *exploded, f"{indent}{tail}"]


def split_item(indent: str, unit: str, item: str, width: int) -> list[str]:
    """One item of an exploded call or signature, as black splits it when even its own line is too long
    (a long annotation at a narrow width): at its last bracket pair, head and tail on the item's line, the
    inside one level deeper (split again at its commas, one per line with a trailing comma, or at its own
    last bracket).  An item without brackets stays one line, too long, as black leaves it."""
    line = f"{indent}{item}"
    if len(line.expandtabs(4)) <= width:
        return [line]
    pair = _last_bracket_pair(item)
    if pair is None:
        return [line]
    start, end = pair
    head, body, tail = item[:start], item[start:end].strip(), item[end:]
    if not body or len(f"{indent}{head}".expandtabs(4)) > width:
        return [line]
    inner = indent + unit
    parts = _top_level_commas(body)
    if len(f"{inner}{body}".expandtabs(4)) <= width or len(parts) < 2:
        middle = split_item(inner, unit, body, width)
    else:
        middle = [line for part in parts for line in split_item(inner, unit, f"{part},", width)]
    return [f"{indent}{head}", *middle, f"{indent}{tail}"]


def _last_bracket_pair(text: str) -> tuple[int, int] | None:
    """(just after the opening bracket, at the closing one) of the last bracket pair of one line of code."""
    import io
    import tokenize

    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.OP]
    except (tokenize.TokenError, SyntaxError):
        return None
    closers = [i for i, t in enumerate(tokens) if t.string in _CLOSERS]
    if not closers:
        return None
    depth = 0
    for index in range(closers[-1], -1, -1):
        token = tokens[index].string
        depth += token in _CLOSERS
        depth -= token in _OPENERS
        if depth == 0:
            return tokens[index].end[1], tokens[closers[-1]].start[1]
    return None


def _top_level_commas(text: str) -> list[str]:
    """The parts of `text` between its commas outside brackets and strings (a trailing comma dropped)."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return [text]
    parts, depth, begin = [], 0, 0
    for token in tokens:
        if token.type != tokenize.OP:
            continue
        if token.string in _OPENERS:
            depth += 1
        elif token.string in _CLOSERS:
            depth -= 1
        elif token.string == "," and depth == 0:
            parts.append(text[begin : token.start[1]].strip())
            begin = token.end[1]
    last = text[begin:].strip()
    return parts + ([last] if last else [])


IMPORTED = "; imported "


def imported_names(delegation: Delegation) -> list[str]:
    """The local names this delegation's imports bind (what `revert` may take out again)."""
    names = []
    for module, obj, asname in delegation.imports:
        names.append(asname or obj or module.split(".")[0])
    return names


def marker_text(delegation: Delegation, unit: str = "    ", newline: str = "\n") -> str:
    """`# eaglepatch: forwards to self.language_model` (+ `; imported X, Y` when it added imports); for a
    learned body `# eaglepatch: learned from models/llama.py:LlamaForCausalLM (digest ...)`."""
    names = imported_names(delegation)
    if delegation.style == "learned":
        assert delegation.learned is not None, "a learned delegation carries its def"
        head = f"{LEARNED}{delegation.origin} (digest {learned_digest(delegation.learned, unit, newline)})"
    else:
        head = f"{MARKER}{delegation.inner_attribute}"
    return head + (f"{IMPORTED}{', '.join(names)}" if names else "")


def learned_digest(func: cst.FunctionDef, unit: str = "    ", newline: str = "\n") -> str:
    """What revert compares a learned body against: the def as written, without its marker."""
    printer = cst.Module(body=[], default_indent=unit, default_newline=newline)
    code = printer.code_for_node(func.with_changes(leading_lines=[]))
    return hashlib.sha256(code.encode("utf-8")).hexdigest()[:12]


def parse_marker(comment: str) -> tuple[str, list[str]] | None:
    """(inner attribute, imported names) from a marker comment, or None; for a learned body the
    "attribute" is `learned:<digest>`."""
    if comment.startswith(LEARNED):
        rest = comment[len(LEARNED) :].strip()
        head, _, imported = rest.partition(IMPORTED.strip())
        digest = head.rpartition("(digest ")[2].rstrip("); ").strip()
        return f"learned:{digest}", [n.strip() for n in imported.split(",") if n.strip()]
    if not comment.startswith(MARKER):
        return None
    rest = comment[len(MARKER) :].strip()
    attribute, _, imported = rest.partition(IMPORTED.strip())
    attribute = attribute.rstrip("; ").strip()
    return attribute, [n.strip() for n in imported.split(",") if n.strip()]


def _fits(line: str, width: int) -> bool:
    return len(line.expandtabs(4)) <= width


def _raise(indent: str, unit: str, me: str, attr: str, name: str, tail: str, width: int) -> list[str]:
    """`raise AttributeError(f"<class>.<attr> has no <name>")` as black lays it out; a message too long
    for its own line is two strings, split before the member's name (black keeps them as written, and
    ruff's line length holds)."""
    message = f'f"{{{me}.__class__.__name__}}.{attr} has no {name}"'
    inner = indent + unit
    if _fits(f"{inner}{message}", width):
        return fit_call(indent, unit, "raise AttributeError(", [message], tail, width)
    return [f"{indent}raise AttributeError(", f'{inner}f"{{{me}.__class__.__name__}}.{attr} has no "', f'{inner}"{name}"', f"{indent}{tail}"]


def render_delegation(delegation: Delegation, unit: str = "    ", newline: str = "\n", width: int = LINE_LENGTH) -> str:
    """The source text of one delegating member, at class-body indentation (a settable one: the property,
    a blank line, its setter), laid out for black at `width` columns."""
    if delegation.style == "settable":
        getter = render_delegation(replace(delegation, style="property"), unit, newline, width)
        return getter + newline + render_setter(replace(delegation, style="setter"), unit, newline, width)
    if delegation.style == "setter":
        return render_setter(delegation, unit, newline, width)
    if delegation.style == "learned":
        holder = cst.ClassDef(name=cst.Name("C"), body=cst.IndentedBlock(body=[learned_statement(delegation, unit, newline)]))
        code = cst.Module(body=[holder], default_indent=unit, default_newline=newline).code
        return code.split(newline, 1)[1]
    signature = render_signature(delegation)
    local = next(n for n in ("inner", "inner_model", "_inner", "_eaglepatch_inner") if n not in signature.names)
    attr, name = delegation.inner_attribute, delegation.name
    i1, i2, i3 = unit, unit * 2, unit * 3
    lines: list[str] = [f"{i1}{marker_text(delegation)}"]
    if delegation.note:
        lines.append(f"{i1}{NOTE}{delegation.note}")
    if delegation.style == "property":
        lines.append(f"{i1}@property")
    returns = f" -> {_code(delegation.returns.annotation)}" if delegation.returns is not None else ""
    keyword = "async def" if delegation.is_async else "def"
    params = ["self"] if delegation.style == "property" else signature.params
    lines += fit_call(i1, unit, f"{keyword} {name}(", params, f"){returns}:", width)
    lines.append(f'{i2}"""Forward to ``self.{attr}`` ({delegation.purpose} speculative decoding)."""')
    me = "self" if delegation.style == "property" else signature.receiver
    if "hasattr" not in signature.names:  # upstream's shape: look before you leap
        lines.append(f"{i2}{local} = {me}.{attr}")
        condition = f'{local} is None or not hasattr({local}, "{name}")'
        if _fits(f"{i2}if {condition}:", width):
            lines.append(f"{i2}if {condition}:")
        elif _fits(f"{i3}{condition}", width):
            lines += fit_call(i2, unit, "if (", [condition], "):", width)
        else:  # no room in parentheses either: black splits at hasattr's own
            lines += fit_call(i2, unit, f"if {local} is None or not hasattr(", [local, f'"{name}"'], "):", width)
        lines += _raise(i3, unit, me, attr, name, ")", width)
        target = f"{local}.{name}"
    else:  # a parameter shadows hasattr: ask forgiveness instead, with no builtin but AttributeError
        lines.append(f"{i2}try:")
        lines.append(f"{i3}{local} = {me}.{attr}.{name}")
        lines.append(f"{i2}except AttributeError:")
        lines += _raise(i3, unit, me, attr, name, ") from None", width)
        target = local
    if delegation.style == "property":
        lines.append(f"{i2}return {target}")
    else:
        awaited = "await " if delegation.is_async else ""
        lines += fit_call(i2, unit, f"return {awaited}{target}(", signature.args, ")", width)
    return newline.join(lines) + newline


def learned_statement(delegation: Delegation, unit: str = "    ", newline: str = "\n") -> cst.FunctionDef:
    """The learned def as it goes into the class: a blank line, the marker, the def."""
    marker = cst.EmptyLine(comment=cst.Comment(marker_text(delegation, unit, newline)))
    assert delegation.learned is not None, "a learned delegation carries its def"
    return delegation.learned.with_changes(leading_lines=[cst.EmptyLine(indent=False), marker])


def render_setter(delegation: Delegation, unit: str = "    ", newline: str = "\n", width: int = LINE_LENGTH) -> str:
    """The setter of a forwarding property: `model.x = value` on the wrapper sets it on the inner model."""
    attr, name = delegation.inner_attribute, delegation.name
    i1, i2, i3 = unit, unit * 2, unit * 3
    lines = [f"{i1}{marker_text(delegation)}", f"{i1}@{name}.setter", f"{i1}def {name}(self, value):"]
    lines.append(f'{i2}"""Forward to ``self.{attr}`` ({delegation.purpose} speculative decoding)."""')
    lines.append(f"{i2}inner = self.{attr}")
    lines.append(f"{i2}if inner is None:")
    lines += _raise(i3, unit, "self", attr, name, ")", width)
    lines.append(f"{i2}inner.{name} = value")
    return newline.join(lines) + newline


def _suites(statement: cst.CSTNode) -> list[cst.BaseSuite]:
    """The blocks of a compound statement in a class body: `if`/`else`, `try`/`except`/`finally`, `with`, loops."""
    suites: list[cst.BaseSuite] = []
    if isinstance(statement, (cst.If, cst.Try, cst.TryStar, cst.With, cst.For, cst.While)):
        suites.append(statement.body)
        orelse = getattr(statement, "orelse", None)
        if isinstance(orelse, cst.If):
            suites += _suites(orelse)
        elif orelse is not None:
            suites.append(orelse.body)
        suites += [handler.body for handler in getattr(statement, "handlers", ())]
        finalbody = getattr(statement, "finalbody", None)
        if finalbody is not None:
            suites.append(finalbody.body)
    return suites


def defined_names(body: cst.BaseSuite) -> set[str]:
    """Members a class body defines itself: methods, properties, class attributes, also those it
    defines only under a condition (`if _is_cuda:`), which count as present."""
    names: set[str] = set()
    statements = body.body if isinstance(body, cst.IndentedBlock) else []
    for stmt in statements:
        for suite in _suites(stmt):
            names |= defined_names(suite)
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign):
                    targets = [small.target]
                names.update(t.value for t in targets if isinstance(t, cst.Name))
    return names


class AddDelegations(VisitorCommand):
    """Append delegating members to the named top-level classes, after their last method."""

    DESCRIPTION = "Forward EAGLE-3 members from wrapper classes to the model they hold."

    def __init__(self, context: CodemodContext, delegations: dict[str, list[Delegation]], line_length: int = LINE_LENGTH):
        super().__init__(context)
        self.delegations = delegations
        self.line_length = line_length  # black's, in the target tree (patcher/read/style.py)
        self.added: dict[str, list[str]] = {}
        self._module: cst.Module | None = None

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    # Only module-level classes are patched (a class under a module-level `if` or `try` is one):
    # nothing inside a class, function or simple statement needs visiting, which keeps a
    # 3,000-line model file from being rebuilt node by node.
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        wanted = self.delegations.get(updated_node.name.value)
        if not wanted:
            return updated_node
        block = updated_node.body
        if isinstance(block, cst.SimpleStatementSuite):  # `class B(A): pass`, `class B(A): x = 1; y = 2`
            block = indented_block(block)
        assert isinstance(block, cst.IndentedBlock), "a class body is a block or a one-line suite"
        present = defined_names(block)
        todo = [d for d in wanted if d.name not in present]
        if not todo:
            return updated_node
        module = self._module
        assert module is not None, "visit_Module runs before any class is left"
        unit = block.indent if block.indent is not None else module.default_indent
        newline = module.default_newline
        new_statements: list[cst.BaseStatement] = []
        for delegation in todo:
            for module_name, obj, asname in delegation.imports:
                AddImportsVisitor.add_needed_import(self.context, module_name, obj, asname)
            if delegation.style == "learned":  # a node already: its strings and comments stay as they were
                new_statements.append(learned_statement(delegation, unit, newline))
                continue
            text = render_delegation(delegation, unit, newline, self.line_length)
            # a statement first, so the marker comment belongs to the def, not the module header
            parsed = cst.parse_module("pass" + newline + dedent_text(text, unit), config=module.config_for_parsing)
            blank = cst.EmptyLine(indent=False, newline=cst.Newline())
            for stmt in parsed.body[1:]:  # a settable member is two: the property and its setter
                leading = [line for line in stmt.leading_lines if line.comment is not None]
                new_statements.append(stmt.with_changes(leading_lines=[blank, *leading]))
        body = list(block.body)
        first = new_statements[0]
        if not body and isinstance(first, cst.FunctionDef):  # the one-line body was `pass`: no blank line under the header
            new_statements[0] = first.with_changes(leading_lines=[line for line in first.leading_lines if line.comment is not None])
        last_method = max((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef)), default=len(body) - 1)
        body[last_method + 1 : last_method + 1] = new_statements
        self.added[updated_node.name.value] = [d.name for d in todo]
        return updated_node.with_changes(body=block.with_changes(body=body))


def indented_block(suite: cst.SimpleStatementSuite) -> cst.IndentedBlock:
    """A one-line class body as the indented block black would lay it out as: each small statement
    on its own line, a `pass` (or a lone `...`) dropped, since the members written are the body now;
    a comment after the body stays on the header line."""
    smalls = [s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in suite.body]
    placeholder = len(smalls) == 1 and isinstance(smalls[0], cst.Expr) and isinstance(smalls[0].value, cst.Ellipsis)
    kept = [] if placeholder else [s for s in smalls if not isinstance(s, cst.Pass)]
    return cst.IndentedBlock(header=suite.trailing_whitespace, body=[cst.SimpleStatementLine(body=[s]) for s in kept])


def dedent_text(text: str, unit: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line[len(unit) :] if line.startswith(unit) else line for line in lines)
