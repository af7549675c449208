"""`revert` on a vLLM tree: take out what `apply` wrote, and only that.

* The forwarding hooks: each carries `# eaglepatch: forwards to self.<attribute>` and goes while it
  reads exactly as eaglepatch renders it (codemods/remove_delegations.py, at vLLM's line length).
* The base: `SupportsEagle3` goes from a class's bases only when the class carries
  `# eaglepatch: added SupportsEagle3 to the bases` (codemods/add_base.py writes it with the base; a base
  someone wrote by hand has no such line) and the header with the base taken out, in the layout the
  marker names (`(before: header on one line)`, `bases on a line of their own`, else the present one),
  is one from which `apply` writes the very header the file has now. Otherwise the class is kept, and named.
* The import: the name goes from the file's import of interfaces when nothing outside the file's
  import lines names it any more, again only as an import `apply` turns into the present one
  (the name dropped; on one line when a marker says `import on one line`; or the whole
  `from ... import SupportsEagle3` line).

So a file `apply` changed and nobody edited since gets its bytes back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext

from ...codemods.add_base import BASES_ON_THEIR_LINE, HEADER_ON_ONE_LINE, IMPORT_ON_ONE_LINE, AddBase, header_layout
from ...codemods.contract import run_command
from ...codemods.names import MARKER
from ...codemods.remove_delegations import RemoveDelegations
from ...errors import EaglepatchError
from ...read.locate import SourceTree
from ...read.slices import parse_module
from ...read.source_cache import SourceCache
from ...read.text import SourceFile
from ...records import FileEdit
from ...selection import model_stem
from .edits import LINE_LENGTH, equivalents, spelling_in

_MARKED = re.compile(rb"# eaglepatch: (added \w+ to the bases|forwards to self\.)")
_BASE_MARKER = re.compile(r"# eaglepatch: added (\w+) to the bases(?: \(before: ([^)]*)\))?")  # notes inline: as earlier versions wrote them
_NOTES = re.compile(r"# \(before: ([^)]*)\)")  # the marker's second line
_EMPTY = cst.Module(body=[])


def revert_vllm_edits(
    tree: SourceTree, models: list[str] | None
) -> tuple[list[FileEdit], list[EaglepatchError], list[tuple[str, list[str]]]]:
    """Edits taking eaglepatch's bases, hooks and imports out of the marked files (all of them, or the
    modules `models` names: `qwen3_asr` or `models.dots3_note.nvidia.multimodal`)."""
    cache = SourceCache(tree.srt)
    roots = [tree.srt / "model_executor" / "models", tree.srt / "models"]
    files = sorted(p for root in roots if root.is_dir() for p in root.rglob("*.py"))
    if models:
        picked: list[Path] = []
        for selector in models:
            stem = model_stem(selector).removeprefix("vllm/models/").removeprefix("vllm/model_executor/models/")
            # a module, or a package the registry names (a folder per platform: every module in it)
            found = [p for p in files if p.with_suffix("").as_posix().endswith("/" + stem) or f"/models/{stem}/" in p.as_posix()]
            if not found:
                raise EaglepatchError(f"--model {selector}: no such model module or package under model_executor/models or models/")
            picked.extend(p for p in found if p not in picked)
        files = picked
    edits: list[FileEdit] = []
    errors: list[EaglepatchError] = []
    kept: list[tuple[str, list[str]]] = []
    for path in files:
        data = path.read_bytes()
        if not _MARKED.search(data):
            continue
        try:
            source = cache.read(path)
            edit, kept_here = _revert(source)
        except EaglepatchError as exc:
            errors.append(exc)
            continue
        kept.extend(kept_here)
        if edit is not None:
            edits.append(edit)
    return edits, errors, kept


def _revert(source: SourceFile) -> tuple[FileEdit | None, list[tuple[str, list[str]]]]:
    rel = source.rel
    module = parse_module(source)
    updated, removed, kept = reverted(module, rel)
    data = source.rewrite(module, updated)
    kept_list = [(f"{rel}:{cls}", names) for cls, names in kept.items()]
    if data == source.data:
        return None, kept_list
    return FileEdit(source.path, source.rel, source.data, data, removed=removed), kept_list


def reverted(module: cst.Module, rel: str) -> tuple[cst.Module, dict[str, list[str]], dict[str, list[str]]]:
    """The module without what apply wrote in it; what went and what was kept, per class (the import
    kept as class "(import)")."""
    removed: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    updated = module
    if MARKER in module.code:
        command = RemoveDelegations(CodemodContext(filename=rel), frozenset(), (LINE_LENGTH,))
        updated = run_command(command, updated)
        for cls, names in command.removed.items():
            removed.setdefault(cls, []).extend(names)
        for cls, names in command.kept.items():
            kept.setdefault(cls, []).extend(names)
    unit = module.default_indent
    body = list(updated.body)
    bases_removed: set[str] = set()
    import_notes: set[str] = set()
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.ClassDef):
            continue
        for base, notes, comment in _marked_bases(stmt):
            plain = _unmarked(stmt, comment)
            layout = "line" if HEADER_ON_ONE_LINE in notes else "hug" if BASES_ON_THEIR_LINE in notes else header_layout(plain)
            candidates = [c for c in _headers_without(plain, base) if header_layout(c) == layout]
            original = next((c for c in candidates if _header(_with_base(c, base, unit)) == _header(plain)), None)
            if original is None:
                kept.setdefault(stmt.name.value, []).append(base)
                continue
            stmt = original
            removed.setdefault(stmt.name.value, []).insert(0, base)
            bases_removed.add(base)
            import_notes.update(notes)
        body[index] = stmt
    updated = updated.with_changes(body=body)
    for base in sorted(bases_removed):
        if _named_outside_imports(updated, base):
            continue
        modules = _modules_without(updated, base, IMPORT_ON_ONE_LINE in import_notes)
        before = next((m for m in modules if _same_module(_with_import(m, base, rel), updated)), None)
        if before is None:
            kept.setdefault("(import)", []).append(base)
        else:
            updated = before
    return updated, removed, kept


# -- the base ----------------------------------------------------------------------------------------


def _marked_bases(node: cst.ClassDef) -> list[tuple[str, set[str], tuple[str, ...]]]:
    """(base, the marker's notes, the marker's comment lines) for each base the class's markers say
    apply added (its notes on the next comment line, or inline as older versions wrote them)."""
    if not isinstance(node.body, cst.IndentedBlock):
        return []
    listed = {_code(arg.value) for arg in node.bases}
    found: list[tuple[str, set[str], tuple[str, ...]]] = []
    for stmt in node.body.body:
        leading = _leading(stmt)
        for index, line in enumerate(leading):
            if line.comment is None:
                continue
            match = _BASE_MARKER.fullmatch(line.comment.value)
            if not match or match.group(1) not in listed or any(match.group(1) == f[0] for f in found):
                continue
            texts: tuple[str, ...] = (line.comment.value,)
            inline = match.group(2)
            after = leading[index + 1].comment if index + 1 < len(leading) else None
            noted = _NOTES.fullmatch(after.value) if after is not None and inline is None else None
            if noted is not None and after is not None:
                texts, inline = (*texts, after.value), noted.group(1)
            notes = {n.strip() for n in (inline or "").split(";") if n.strip()}
            found.append((match.group(1), notes, texts))
    return found


def _unmarked(node: cst.ClassDef, texts: tuple[str, ...]) -> cst.ClassDef:
    assert isinstance(node.body, cst.IndentedBlock)
    statements = [
        s.with_changes(leading_lines=[line for line in _leading(s) if line.comment is None or line.comment.value not in texts])
        for s in node.body.body
    ]
    return node.with_changes(body=node.body.with_changes(body=statements))


def _leading(statement: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    assert isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    return statement.leading_lines


def _with_base(node: cst.ClassDef, base: str, unit: str) -> cst.ClassDef:
    return AddBase({node.name.value: base}, ".interfaces", LINE_LENGTH, unit)._with_base(node, base)


def _headers_without(node: cst.ClassDef, base: str) -> list[cst.ClassDef]:
    """The headers `apply` may have started from: the base dropped (its comma and spacing passed on), the
    header on one line, the bases on one line of their own."""
    args = list(node.bases)
    at = next((i for i, a in enumerate(args) if _code(a.value) == base), None)
    if at is None or at != len(args) - 1:
        return []
    gone = args[at]
    rest = args[:at]
    candidates: list[cst.ClassDef] = []
    if rest:
        last = rest[-1].with_changes(comma=gone.comma, whitespace_after_arg=gone.whitespace_after_arg)
        candidates.append(node.with_changes(bases=[*rest[:-1], last]))
    else:
        candidates.append(node.with_changes(bases=[]))
        if not node.keywords:
            candidates.append(node.with_changes(bases=[], lpar=cst.MaybeSentinel.DEFAULT, rpar=cst.MaybeSentinel.DEFAULT))
    items = [*rest, *node.keywords]
    if items:
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        flat = [i.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace("")) for i in items[:-1]]
        flat.append(items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace("")))
        one_line = {"bases": flat[: len(rest)], "keywords": flat[len(rest) :], "whitespace_before_colon": cst.SimpleWhitespace("")}
        candidates.append(node.with_changes(lpar=cst.LeftParen(), rpar=cst.RightParen(), **one_line))
        hug = cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=cst.SimpleWhitespace(_indent_of(node))
        )
        close = cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=cst.SimpleWhitespace(""))
        candidates.append(node.with_changes(lpar=cst.LeftParen(whitespace_after=hug), rpar=cst.RightParen(whitespace_before=close), **one_line))
    return candidates


def _indent_of(node: cst.ClassDef) -> str:
    body = node.body
    return body.indent if isinstance(body, cst.IndentedBlock) and body.indent is not None else "    "


# -- the import --------------------------------------------------------------------------------------


def _named_outside_imports(module: cst.Module, name: str) -> bool:
    rest = module.with_changes(body=[s for s in module.body if not _is_import_line(s)]).code
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", rest) is not None


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)


def _with_import(module: cst.Module, base: str, rel: str) -> cst.Module:
    spelling = spelling_in(module.code, rel)
    transformer = AddBase({}, spelling, LINE_LENGTH, module.default_indent, equivalents=equivalents(rel))
    transformer.needed.add(base)
    return transformer.leave_Module(module, module)


def _modules_without(module: cst.Module, name: str, one_line: bool) -> list[cst.Module]:
    """The modules `apply` may have started from: the name dropped from the import that holds it (with
    `one_line`, that import on one line), or the whole import line gone (its leading lines kept or
    handed down to the next statement)."""
    body = list(module.body)
    candidates: list[cst.Module] = []
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.ImportFrom):
            continue
        node = stmt.body[0]
        if isinstance(node.names, cst.ImportStar):
            continue
        aliases = list(node.names)
        at = next((i for i, a in enumerate(aliases) if a.asname is None and _code(a.name) == name), None)
        if at is None:
            continue
        if len(aliases) == 1:
            dropped = [*body[:index], *body[index + 1 :]]
            candidates.append(module.with_changes(body=dropped))
            if index + 1 < len(body) and stmt.leading_lines:
                handed = [*body[:index], body[index + 1].with_changes(leading_lines=stmt.leading_lines), *body[index + 2 :]]
                candidates.append(module.with_changes(body=handed))
            continue
        left = [*aliases[:at], *aliases[at + 1 :]]
        if at == len(aliases) - 1:
            left[-1] = left[-1].with_changes(comma=aliases[at].comma)
        if not one_line:
            candidates.append(_replace(module, body, index, stmt, node.with_changes(names=left)))
            continue
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        flat = [a.with_changes(comma=space) for a in left[:-1]] + [left[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
        candidates.append(_replace(module, body, index, stmt, node.with_changes(names=flat, lpar=None, rpar=None)))
    return candidates


def _replace(module: cst.Module, body: list, index: int, stmt: cst.SimpleStatementLine, node: cst.ImportFrom) -> cst.Module:
    return module.with_changes(body=[*body[:index], stmt.with_changes(body=[node]), *body[index + 1 :]])


def _code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


_STUB_BODY = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])


def _header(node: cst.ClassDef) -> str:
    """The class's code up to its body: the candidates compared differ in their header alone (their body
    is the one node), so a model class of thousands of lines is not printed once per candidate."""
    return _code(node.with_changes(body=_STUB_BODY))


def _same_module(a: cst.Module, b: cst.Module) -> bool:
    """`a.code == b.code`, printing only the statements that are not the very same node in both (an
    import re-laid; the classes and functions around it are shared)."""
    if len(a.body) != len(b.body) or _code(a.with_changes(body=[])) != _code(b.with_changes(body=[])):
        return False
    return all(x is y or _code(x) == _code(y) for x, y in zip(a.body, b.body))

