"""Read stage, the cache: each file read once and each slice parsed once for a whole run.

The cache is what every stage of one run shares.  What a later stage derives from a file once per
run (import tables, scope analyses) is kept in the cache's memo, under a `MemoKey` that the stage
owns and keeps private: its type says what the slot holds, and no other module writes there.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import EaglepatchError
from .outline import Outline, block_start, mask, outline
from .slices import Bodiless, Parsed, import_texts, invalid_python, parse_cut, parse_module, syntax_error
from .statements import walk
from .text import SourceFile, block_text, decode_source

if TYPE_CHECKING:  # libcst is imported where code is parsed with it: `check` reads with CPython's parser
    import libcst as cst

V = TypeVar("V")

MAX_FILE_BYTES = 20 * 1024 * 1024
ASIDE_MINIMUM = 16  # files: fewer are compiled in this process, when asked (a fork costs more)


def compiled_by_this_python(path: Path, data: bytes) -> bool:
    """This interpreter's compiler already took these very bytes: `__pycache__` holds a bytecode file of
    this Python's own magic number whose header matches them (their hash, or the mtime and size Python's
    import trusts itself).  pip compiles every module it installs: an installed sglang is proven
    readable without compiling 700 files again; a checkout, or a file edited since, is compiled."""
    import importlib.util

    try:
        cached = importlib.util.cache_from_source(str(path))
        with open(cached, "rb") as handle:
            header = handle.read(16)
        if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags = int.from_bytes(header[4:8], "little")
        if flags & 0b1:  # a hash-based file: the source's own hash
            return header[8:16] == importlib.util.source_hash(data)
        if flags:
            return False
        stat = os.stat(path)
        return (
            int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == len(data) & 0xFFFFFFFF == stat.st_size & 0xFFFFFFFF
        )
    except (OSError, ValueError, NotImplementedError):
        return False


def _answer_line(error: EaglepatchError | None) -> bytes:
    """One answer of the forked compile, a line of JSON: null, or the error's message, path and line."""
    import json

    answer = None if error is None else [error.message, error.path, error.line]
    return json.dumps(answer).encode("utf-8", "surrogateescape") + b"\n"


class MemoKey(Generic[V]):
    """Names one value a stage keeps in `SourceCache.memo` for the run, and says its type.  Compared by
    identity: the stage that derives the value holds the key in a private module name (`_TABLES`), so
    no other module can write that slot (tests/test_architecture.py forbids importing `_x`)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"MemoKey({self.name!r})"


class SourceCache:
    """Reads each file once and parses each slice once for a whole run."""

    def __init__(self, srt: Path, excluded: frozenset[Path] = frozenset()):
        self.srt = srt
        self.excluded = excluded  # resolved paths the user left out (--exclude): read() refuses them
        self._files: dict[Path, SourceFile] = {}
        self._parsed: dict[tuple[Path, int, int], Parsed] = {}
        self._bodiless: dict[tuple[Path, frozenset[str] | None], Bodiless] = {}
        self._outlines: dict[Path, Outline] = {}
        self._ast_imports: dict[tuple[Path, int, int], list] = {}
        self._ast_functions: dict[tuple[Path, int], ast.FunctionDef | ast.AsyncFunctionDef | None] = {}
        self._ast_texts: dict[tuple[Path, int], str] = {}  # the text each function_ast was read from
        self._ast_alone: set[tuple[Path, int]] = set()  # the defs CPython parsed on their own (their _ast_texts are the slice)
        # a member's libcst def by (file, line, name): class_index.signature_node parses it once
        self.definitions: dict[tuple[Path, int, str], cst.FunctionDef | None] = {}
        # what later stages derive from a file once per run, each under its stage's own key (`memo`)
        self._memo: dict[MemoKey[Any], Any] = {}
        self._validity: dict[Path, EaglepatchError | None] = {}  # unreadable(): each file compiled once per run
        self._modules: dict[Path, ast.Module | EaglepatchError] = {}  # module_ast(): whole files, by CPython's parser
        self.bytes_read = 0
        self.lines_parsed = 0

    def memo(self, key: MemoKey[V], make: Callable[[], V]) -> V:
        """The value kept under `key` for this run, made by `make` when first asked for."""
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = make()
            return value

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.srt).as_posix()
        except ValueError:
            return path.as_posix()

    def read(self, path: Path) -> SourceFile:
        cached = self._files.get(path)
        if cached is not None:
            return cached
        rel = self.rel(path)
        if self.is_excluded(path):
            raise EaglepatchError("is left out by --exclude (or the exclude setting), so it is not read", path=rel)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise EaglepatchError(
                    f"is {size // (1024 * 1024)} MiB, larger than any Python source eaglepatch reads; "
                    "remove it or exclude it",
                    path=rel,
                )
            data = path.read_bytes()
        except OSError as exc:
            raise EaglepatchError(f"cannot be read ({exc.strerror}); check its permissions", path=rel) from None
        self.bytes_read += len(data)
        source = decode_source(path, rel, data)
        self._files[path] = source
        return source

    def is_excluded(self, path: Path) -> bool:
        """The user left `path` out (--exclude): no stage reads it, and the gate does not ask it to parse."""
        return bool(self.excluded) and path.resolve() in self.excluded

    def unreadable(self, path: Path) -> EaglepatchError | None:
        """Why `path` cannot be read as Python (not decodable, not compilable), or None; once per run.
        An answer that depends on a file is only as good as the whole file's reading, so the gate asks this
        of every file it reads, not just of the slices it parsed."""
        if path not in self._validity:
            try:
                source = self.read(path)
                self._validity[path] = None if compiled_by_this_python(path, source.data) else syntax_error(source)
            except EaglepatchError as exc:
                self._validity[path] = exc
        return self._validity[path]

    def validate_aside(self, paths: list[Path]) -> Callable[[], None]:
        """Compile `paths` in a forked child while this process goes on reading them (the gate's whole-file
        compile is a quarter of `check --all`, and a second core is idle).  The child answers file by file,
        from the first; the returned join takes the answers and, while some are still owed, compiles files
        here from the last, until the two meet (a join that only waited would leave this core idle while
        the child finishes).  Each answer is stored as `unreadable` would have found it.  Where forking is
        unsafe or not worth it (no fork, other threads running, a handful of files), nothing happens now
        and `unreadable` compiles each file when asked."""
        import threading

        todo = [path for path in dict.fromkeys(paths) if path not in self._validity]
        for path in todo:  # compiled by this Python already (an installed tree): nothing to do aside
            if path in self._files and compiled_by_this_python(path, self._files[path].data):
                self._validity[path] = None
        todo = [path for path in todo if path not in self._validity]
        if len(todo) < ASIDE_MINIMUM or not hasattr(os, "fork") or threading.active_count() > 1:
            return lambda: None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return lambda: None
        if pid == 0:  # the child: answer, then leave without running anything of the parent's
            code = 1
            try:
                os.close(read_end)
                for path in todo:
                    error = self.unreadable(path)
                    data = _answer_line(error)
                    while data:
                        data = data[os.write(write_end, data) :]
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return lambda: self._meet(pid, read_end, todo)

    def _meet(self, pid: int, read_end: int, todo: list[Path]) -> None:
        """The join of `validate_aside`: the child's answers in order, this process's from the end."""
        import json
        import select
        import signal

        answered = 0  # the child's answers so far cover todo[:answered]
        last = len(todo)  # this process has answered todo[last:]
        pending = b""
        child_done = False
        try:
            while answered < last and not child_done:
                ready = select.select([read_end], [], [], 0)[0]
                if ready or answered == last - 1:  # nothing left to take from the end: wait for the child
                    chunk = os.read(read_end, 65536)
                    if not chunk:
                        child_done = True
                        break
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if answered < len(todo):
                            error = json.loads(line.decode("utf-8", "surrogateescape"))
                            self._validity.setdefault(todo[answered], EaglepatchError(error[0], path=error[1], line=error[2]) if error else None)
                        answered += 1
                    continue
                last -= 1
                self.unreadable(todo[last])
        finally:
            os.close(read_end)
            if not child_done:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            os.waitpid(pid, 0)
        # a child that stopped early (it failed) leaves the rest to `unreadable`, each when asked

    def module_ast(self, path: Path) -> ast.Module:
        """The whole file by CPython's parser, once per run (server_args.py is 7,000 lines, and the
        server's options and preflight's rules both read it).  EaglepatchError when it cannot be read
        or does not parse, every time it is asked."""
        found = self._modules.get(path)
        if found is None:
            try:
                source = self.read(path)
                found = ast.parse(source.text)
            except EaglepatchError as exc:
                found = exc
            except SyntaxError as exc:
                found = invalid_python(source, exc)
            except ValueError as exc:  # a NUL byte
                found = EaglepatchError(f"is not valid Python ({exc}); fix the file", path=self.rel(path))
            self._modules[path] = found
        if isinstance(found, EaglepatchError):
            raise found
        return found

    def parse_whole(self, source: SourceFile) -> Parsed:
        key = (source.path, 0, -1)
        cached = self._parsed.get(key)
        if cached is None:
            module = parse_module(source)
            self.lines_parsed += len(source.lines)
            cached = self._parsed[key] = Parsed(source, module, 0, source.text)
        return cached

    def parse_bodiless(self, source: SourceFile, classes: frozenset[str] | None = None) -> Bodiless:
        """The file with its def bodies cut, and the bodies of the classes at module level not in `classes`
        (None: none): all the scope analysis of those classes and the codemod that adds to them need, for a
        fraction of a whole parse; whole when the cut text is not that simple."""
        key = (source.path, classes)
        found = self._bodiless.get(key)
        if found is None:
            parsed = parse_cut(source.text, classes=classes, mark=True)
            found = Bodiless(*parsed) if parsed is not None else Bodiless(self.parse_whole(source).module, None)
            self._bodiless[key] = found
        return found

    def parse_lines(self, source: SourceFile, start: int, end: int) -> Parsed:
        """Parse lines [start, end) on their own; fall back to the whole file."""
        import libcst as cst

        key = (source.path, start, end)
        cached = self._parsed.get(key)
        if cached is not None:
            return cached
        text = block_text(source.lines[start:end])
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError:
            return self.parse_whole(source)
        self.lines_parsed += end - start
        parsed = self._parsed[key] = Parsed(source, module, start, text)
        return parsed

    def outline(self, source: SourceFile) -> Outline:
        cached = self._outlines.get(source.path)
        if cached is None:
            cached = self._outlines[source.path] = outline(source.lines, source.text)
        return cached

    def block_span(self, source: SourceFile, header: int) -> tuple[int, int]:
        """Lines [start, end) of the def/class block whose header line index is `header`, decorators included."""
        return block_start(source.lines, header), self.outline(source).ends.get(header, header + 1)

    def block_read_alone(self, source: SourceFile, header: int) -> str | None:
        """The (dedented) text of the block whose header is line index `header`, when libcst or CPython
        parsed it on its own; None when neither has read it, or only as part of the whole file."""
        start, end = self.block_span(source, header)
        parsed = self._parsed.get((source.path, start, end))
        if parsed is not None and parsed.first_line == start:
            return parsed.text
        key = (source.path, header)
        return self._ast_texts[key] if key in self._ast_alone else None

    def parse_block(self, source: SourceFile, header: int) -> Parsed:
        """Parse the def/class block whose header line index is `header`."""
        return self.parse_lines(source, *self.block_span(source, header))

    def function_ast(self, source: SourceFile, header: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The `def` whose header is line index `header`, read by CPython's parser: for analyses that
        only read a body (a long `forward`), ast is exact and an order of magnitude cheaper than libcst."""
        key = (source.path, header)
        if key in self._ast_functions:
            return self._ast_functions[key]
        found = None
        try:
            text = block_text(source.lines[slice(*self.block_span(source, header))])
            body = ast.parse(text).body
            found = body[-1] if body and isinstance(body[-1], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if found is not None and len(body) == 1:
                self._ast_alone.add(key)
        except (SyntaxError, ValueError):
            try:  # a slice that does not stand alone: the whole file, then the def on that line
                whole = ast.parse(source.text)
            except (SyntaxError, ValueError):
                whole = None
            for node in walk(whole) if whole is not None else ():
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno - 1 == header:
                    found = node
                    break
            text = source.text
        self._ast_functions[key] = found
        self._ast_texts[key] = text
        return found

    def function_text(self, source: SourceFile, header: int) -> str:
        """The text function_ast read the def at `header` from (its positions are in it)."""
        if (source.path, header) not in self._ast_texts:
            self.function_ast(source, header)
        return self._ast_texts[(source.path, header)]

    def _import_lines(self, source: SourceFile) -> list[str]:
        """import_texts, for a file: with strings masked when it has a triple-quoted one."""
        known = self._outlines.get(source.path)
        joined = known.joined if known is not None else "\n".join(source.lines)
        masked = None
        if '"""' in source.text or "'''" in source.text:
            masked = known.masked() if known is not None else mask(joined)
        return import_texts(source.lines, joined, masked)

    def parse_imports_ast(self, source: SourceFile) -> list[ast.stmt]:
        """parse_imports, read by CPython's parser: what the import table needs is names, not nodes to
        edit, and ast reads import statements exactly as libcst does, several times faster."""
        key = (source.path, -2, -2)
        cached = self._ast_imports.get(key)
        if cached is None:
            statements = self._import_lines(source)
            try:
                cached = ast.parse("".join(statements)).body
            except (SyntaxError, ValueError):
                cached = []
                for text in statements:
                    try:
                        cached.extend(ast.parse(text).body)
                    except (SyntaxError, ValueError):
                        continue  # an "import" inside a docstring, not code
            self._ast_imports[key] = cached
        return list(cached)

    def parse_imports(self, source: SourceFile) -> list[cst.CSTNode]:
        """Every import statement in the file, wherever it stands (module, try, TYPE_CHECKING)."""
        import libcst as cst

        key = (source.path, -1, -1)
        cached = self._parsed.get(key)
        if cached is None:
            statements = self._import_lines(source)
            try:
                nodes = list(cst.parse_module("".join(statements)).body)
            except cst.ParserSyntaxError:
                nodes = []
                for text in statements:
                    try:
                        nodes.extend(cst.parse_module(text).body)
                    except cst.ParserSyntaxError:
                        continue  # an "import" inside a docstring, not code
            module = cst.Module(body=nodes)
            cached = self._parsed[key] = Parsed(source, module, 0)
        return list(cached.module.body)
