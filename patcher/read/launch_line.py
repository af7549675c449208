"""Read stage: a launch command line, read the way the tree's own argument parser would read it.

The options are read from the tree, never listed here: every `parser.add_argument("--x", "--y", ...)`
of `server_args.py` gives an option's spellings, whether it takes a value (`action="store_true"` and
the like take none; `nargs="*"`/`"+"` take several) and its `dest`.  Then the command's words are
matched as argparse matches them: `--opt=value`, `--opt value`, a unique prefix of a long option when
the parser allows abbreviations (argparse's default), an error for an ambiguous or unknown one.
Environment assignments before the command (`VAR=1 python -m sglang.launch_server ...`) are kept.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EaglepatchError
from .launch_config import merge_config, read_merger
from .server_options import Option, Options, ServeFront
from .source_cache import SourceCache
from .statements import walk

SERVER_ARGS = "server_args.py"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NO_VALUE = {"store_true", "store_false", "store_const", "count", "help", "version", "append_const"}
# how people start SGLang's server: `python -m sglang.launch_server`, the `sglang serve` script
_ENTRY_MODULES = ("sglang.launch_server", "sglang.launch_server.py")
_SERVE_SCRIPT = re.compile(r"(?:.*/)?sglang")  # the console script: `sglang serve ...`


@dataclass(frozen=True)
class LaunchLine:
    """A launch command as the tree's parser reads it."""

    words: tuple[str, ...]
    environment: Mapping[str, str]  # the assignments on the line (`VAR=1 python -m ...`, `env VAR=1 ...`)
    values: Mapping[str, str | bool | tuple[str, ...]]  # dest -> value ("True" flags: True)
    spelled: Mapping[str, str]  # dest -> the word the user wrote (an abbreviation shows here)
    errors: tuple[str, ...] = ()  # what argparse would stop on
    missing_required: tuple[Option, ...] = ()
    options: Options = field(default_factory=lambda: Options({}, True, ""))
    config: str = ""  # the `--config` file whose options were merged in, as the line names it
    doubts: tuple[tuple[str, str], ...] = ()  # (invalid choice, where the tree can add to the list)
    shell: Mapping[str, str] = field(default_factory=dict)  # what the launch inherits from the shell it runs in

    def variable(self, name: str) -> tuple[str, str] | None:
        """(value, where it comes from: "on the line" or "from the shell") of an environment variable the
        server will see; an assignment on the line wins, as the shell gives it to the command."""
        if name in self.environment:
            return self.environment[name], "on the line"
        if name in self.shell:
            return self.shell[name], "from the shell"
        return None

    def get(self, dest: str) -> str | None:
        value = self.values.get(dest)
        return value if isinstance(value, str) else None


def _string_args(node: ast.Call) -> list[str]:
    return [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def literal_strings(node: ast.expr | None) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


_ARGPARSE_FLAGS = frozenset({  # argparse's own actions that take no value, as `argparse.X` names them
    "_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "_CountAction", "_HelpAction", "_VersionAction",
    "_AppendConstAction", "BooleanOptionalAction",
})
_UNKNOWN = object()  # an action class whose `nargs` the reading cannot tell


class _Definitions:
    """Module-level names of the parser's modules, followed to what binds them (in the module, or in the
    `sglang.srt` module it imports them from): the literal behind `choices=`, the class behind `action=`."""

    def __init__(self, cache: SourceCache):
        self.cache = cache

    def _module(self, path: Path) -> ast.Module | None:
        try:
            return self.cache.module_ast(path)
        except EaglepatchError:
            return None

    def find(self, name: str, path: Path, module: ast.Module, depth: int = 0) -> tuple[ast.stmt, Path, ast.Module] | None:
        """The statement that binds `name` at the top of `module` (an assignment or a class), imports followed."""
        for statement in module.body:
            if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
                return statement, path, module
            if isinstance(statement, ast.ClassDef) and statement.name == name:
                return statement, path, module
            if isinstance(statement, ast.ImportFrom) and statement.module and statement.module.startswith("sglang.srt.") and depth < 3:
                alias = next((a for a in statement.names if (a.asname or a.name) == name), None)
                if alias is None:
                    continue
                parts = statement.module.split(".")[2:]
                srt = self.cache.srt
                source = next((c for c in (srt.joinpath(*parts).with_suffix(".py"), srt.joinpath(*parts, "__init__.py")) if c.is_file()), None)
                other = self._module(source) if source is not None else None
                return self.find(alias.name, source, other, depth + 1) if source is not None and other is not None else None
        return None

    def _followed(self, node: ast.expr | None, path: Path, module: ast.Module) -> tuple[ast.expr | None, list[tuple[str, Path]]]:
        """The value `node` stands for once module-level names are followed (`B = A`, imports; three at
        most), with each (name, file binding it) passed, outermost first; None where a name binds no
        assignment."""
        passed: list[tuple[str, Path]] = []
        for _ in range(3):
            if not isinstance(node, ast.Name):
                break
            found = self.find(node.id, path, module)
            if found is None or not isinstance(found[0], ast.Assign):
                return None, passed
            statement, where, module = found
            assert isinstance(statement, ast.Assign)
            passed.append((node.id, where))
            node, path = statement.value, where
        return node, passed

    def choices(self, node: ast.expr | None, path: Path, module: ast.Module) -> tuple[str, ...]:
        """`choices=` read to its literal: a list written there, or a module-level name (`B = A` followed).
        () where it goes further (a call, a comprehension)."""
        return literal_strings(self._followed(node, path, module)[0]) or ()

    def allowed(self, node: ast.expr | None, typed: bool, path: Path, module: ast.Module) -> tuple[tuple[str, ...] | None, str]:
        """(every value `choices=` admits, where the tree can add to the list) when the whole list is read:
        a literal of strings only, or a module-level name bound to one (`B = A` followed); None when a
        part is not read (a starred item, a call) or a `type=` converts the value before argparse checks it."""
        if node is None or typed:
            return None, ""
        value, passed = self._followed(node, path, module)
        if not isinstance(value, (ast.List, ast.Tuple, ast.Set)) or not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
            return None, ""
        opened = next((at for at in (_extended_at(self.cache, where, name) for name, where in reversed(passed)) if at), "")
        return literal_strings(value), opened

    def action_nargs(self, action: ast.expr, path: Path, module: ast.Module, depth: int = 0) -> object:
        """The `nargs` an action class gives itself when the call passes none, as argparse builds it: the
        default of its `__init__`'s `nargs` parameter, or the constant that `__init__` hands up to
        argparse (a deprecated flag's `nargs=0`), else its base's.  `_UNKNOWN` where it cannot tell."""
        if isinstance(action, ast.Attribute) and isinstance(action.value, ast.Name) and action.value.id == "argparse":
            return 0 if action.attr in _ARGPARSE_FLAGS else None if action.attr == "Action" else _UNKNOWN
        if not isinstance(action, ast.Name) or depth > 4:
            return _UNKNOWN
        found = self.find(action.id, path, module)
        if found is None or not isinstance(found[0], ast.ClassDef):
            return _UNKNOWN
        cls, where, holder = found
        assert isinstance(cls, ast.ClassDef)
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            return _init_nargs(init)
        if len(cls.bases) != 1:
            return _UNKNOWN
        return self.action_nargs(cls.bases[0], where, holder, depth + 1)


def _extended_at(cache: SourceCache, path: Path, name: str) -> str:
    """Where the module binding list `name` adds to it (`name.extend`, `.append`, `.insert`, `+=`, or
    hands out `name.extend` as a registration function, 0.5.2x's `add_*_choices`), or ""."""
    try:
        text = cache.read(path).text
    except EaglepatchError:
        return ""
    found = re.search(rf"(?<![\w.]){re.escape(name)}\s*(?:\.(?:extend|append|insert)\b|\+=)", text)
    return f"{cache.rel(path)}:{text.count(chr(10), 0, found.start()) + 1}" if found else ""


def _converts(node: ast.Call) -> bool:
    """A `type=` other than `str`: argparse checks `choices` against the converted value."""
    kind = _keyword(node, "type")
    return kind is not None and not (isinstance(kind, ast.Name) and kind.id == "str")


def _init_nargs(init: ast.FunctionDef) -> object:
    """What an action's `__init__` makes `nargs` when the caller passes none."""
    arguments = init.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(arguments.defaults):], arguments.defaults))
    defaults |= {a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None}
    parameter = "nargs" in {a.arg for a in [*positional, *arguments.kwonlyargs]}
    for node in walk(init):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"):
            continue
        passed = _keyword(node, "nargs")
        if isinstance(passed, ast.Constant):
            return passed.value
        if isinstance(passed, ast.Name) and passed.id == "nargs" and parameter:
            value = defaults.get("nargs")
            return value.value if isinstance(value, ast.Constant) else None if value is None else _UNKNOWN
        if passed is None and not parameter:
            return None  # argparse's own default: one value (a `**kwargs` from the call may still say otherwise)
    return _UNKNOWN


def _takes(nargs: object, fallback: str) -> str:
    """"none" | "one" | "many" | "optional", as argparse consumes words for an `nargs`."""
    if nargs is _UNKNOWN:
        return fallback
    if nargs is None or nargs == 1:
        return "one"
    if nargs == 0:
        return "none"
    return {"*": "many", "+": "many", "?": "optional"}.get(str(nargs), "many")


def _parse(cache: SourceCache, path: Path) -> ast.Module:
    if not path.is_file():
        raise EaglepatchError("does not exist, so the server's options cannot be read; point PATH at an SGLang tree", path=str(path))
    try:
        return cache.module_ast(path)
    except EaglepatchError as exc:
        raise EaglepatchError(f"cannot read the server's options: the file {exc.message}", path=str(path)) from None


def read_options(cache: SourceCache) -> Options:
    """Every option of the tree's server argument parser: the `parser.add_argument` calls of
    server_args.py and, where it registers dataclass fields (`add_cli_args_from_dataclass`, 0.5.14 on),
    every `name: A[T, "help" | Arg(...)]` field of ServerArgs and of the namespaces under
    arg_groups/fields/."""
    path = cache.srt / SERVER_ARGS
    module = _parse(cache, path)
    definitions = _Definitions(cache)
    by_string: dict[str, Option] = {}
    allow_abbrev = True
    for node in walk(module):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""
        if name == "ArgumentParser":
            value = _keyword(node, "allow_abbrev")
            if isinstance(value, ast.Constant) and value.value is False:
                allow_abbrev = False
            continue
        if name == "add_cli_args_from_dataclass":
            for option in _field_options(cache, definitions):
                for string in option.strings:
                    by_string.setdefault(string, option)
            continue
        if name != "add_argument":
            continue
        strings = [s for s in _string_args(node) if s.startswith("-")]
        if not strings:
            continue
        action, nargs, dest = _keyword(node, "action"), _keyword(node, "nargs"), _keyword(node, "dest")
        takes = _option_takes(action, nargs, definitions, path, module)
        longs = [s for s in strings if s.startswith("--")]
        name = dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else (longs or strings)[0].lstrip("-").replace("-", "_")
        required = _keyword(node, "required")
        allowed, opened = definitions.allowed(_keyword(node, "choices"), _converts(node), path, module)
        option = Option(tuple(strings), name, takes, f"{SERVER_ARGS}:{node.lineno}", isinstance(required, ast.Constant) and required.value is True,
                        definitions.choices(_keyword(node, "choices"), path, module), _action_name(action), allowed, opened)
        for string in strings:
            by_string.setdefault(string, option)
    if not by_string:
        raise EaglepatchError("defines no server options (no parser.add_argument calls); is this an SGLang tree?", path=str(path))
    return Options(by_string, allow_abbrev, SERVER_ARGS, read_merger(cache, cache.read(path).text), _serve_at(cache), _serve_front(cache))


def _serve_at(cache: SourceCache) -> str:
    """Where the release's `sglang` console script (sglang/cli/main.py) adds its `serve` subcommand, or
    "" where the release has none (before 0.5.x the server started only as `python -m sglang.launch_server`)."""
    main = _cli_module(cache, "main.py")
    for node in walk(main[1]) if main is not None else ():
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "serve"):
            return f"../cli/main.py:{node.lineno}"
    return ""


def _action_name(action: ast.expr | None) -> str:
    """argparse's action by its name: "store" when none is given, "" for a class."""
    if action is None:
        return "store"
    return action.value if isinstance(action, ast.Constant) and isinstance(action.value, str) else ""


def _option_takes(action: ast.expr | None, nargs: ast.expr | None, definitions: _Definitions, path: Path, module: ast.Module) -> str:
    """How many words an `add_argument` (or `Arg(...)`) takes: its own `nargs`, else its action's."""
    if isinstance(nargs, ast.Constant):
        return _takes(nargs.value, "one")
    if nargs is not None:
        return "one"  # a computed nargs: read as argparse's default
    if action is None:
        return "one"
    if isinstance(action, ast.Constant):
        return "none" if action.value in _NO_VALUE else "one"
    spelled = ast.unparse(action)
    flag = any(word in spelled for word in ("Boolean", "store_true", "StoreTrue"))  # a class not found: its name says
    return _takes(definitions.action_nargs(action, path, module), "none" if flag else "one")


def _field_options(cache: SourceCache, definitions: _Definitions) -> list[Option]:
    """The options a dataclass field declares, as arg_utils' add_cli_args_from_dataclass registers
    them: `--field-name` (or `Arg(cli_name=...)`) and its `aliases`; a `bool` is `store_true`, a
    `List[...]` takes several values; `Arg(no_cli=True)` registers none."""
    out: list[Option] = []
    folder = cache.srt / "arg_groups" / "fields"
    # 0.5.14 - 0.5.19 declare them on ServerArgs itself; 0.5.20 on, in namespaces under arg_groups/fields/
    for path in [cache.srt / SERVER_ARGS, *(sorted(folder.glob("*.py")) if folder.is_dir() else [])]:
        rel = cache.rel(path)
        module = _parse(cache, path)
        for node in walk(module):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(node.annotation, ast.Subscript)):
                continue
            head = node.annotation.value
            if not (isinstance(head, ast.Name) and head.id in ("A", "Annotated")) or not isinstance(node.annotation.slice, ast.Tuple):
                continue
            kind, *meta = node.annotation.slice.elts
            arg = meta[0] if meta else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                arg_call = None
            elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "Arg":
                arg_call = arg
            else:
                continue
            if arg_call is not None and isinstance(_keyword(arg_call, "no_cli"), ast.Constant) and getattr(_keyword(arg_call, "no_cli"), "value", False):
                continue
            cli = _keyword(arg_call, "cli_name") if arg_call is not None else None
            names = [cli.value if isinstance(cli, ast.Constant) and isinstance(cli.value, str) else "--" + node.target.id.replace("_", "-")]
            aliases = _keyword(arg_call, "aliases") if arg_call is not None else None
            if isinstance(aliases, (ast.List, ast.Tuple)):
                names += [e.value for e in aliases.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            spelled = ast.unparse(kind)
            action = _keyword(arg_call, "action") if arg_call is not None else None
            nargs = _keyword(arg_call, "nargs") if arg_call is not None else None
            named = _action_name(action)
            if action is not None or isinstance(nargs, ast.Constant):
                takes = _option_takes(action, nargs, definitions, path, module)
            elif re.fullmatch(r"(Optional\[)?bool\]?", spelled):
                takes, named = "none", "store_true"  # add_cli_args_from_dataclass: a bool is store_true
            elif re.search(r"\b(List|list)\[", spelled):
                takes = "many"
            else:
                takes = "one"
            required = _keyword(arg_call, "required") if arg_call is not None else None
            needed = (isinstance(required, ast.Constant) and required.value is True) or (required is None and node.value is None and takes != "none")
            listed = definitions.choices(_keyword(arg_call, "choices"), path, module) if arg_call is not None else ()
            typed = not re.fullmatch(r"(Optional\[)?str\]?|str \| None|None \| str", spelled)  # the field's type converts the value
            whole, opened = definitions.allowed(_keyword(arg_call, "choices"), typed, path, module) if arg_call is not None else (None, "")
            out.append(Option(tuple(names), node.target.id, takes, f"{rel}:{node.lineno}", needed, listed, named, whole, opened))
    return out


def _cli_module(cache: SourceCache, name: str) -> tuple[Path, ast.Module] | None:
    path = cache.srt.parent / "cli" / name
    if not path.is_file():
        return None
    try:
        return path, cache.module_ast(path)
    except EaglepatchError:
        return None


def _calls(node: ast.AST, name: str) -> ast.Call | None:
    """The first call of the function `name` (`name(...)` or `x.name(...)`) under `node`."""
    for sub in walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called == name:
                return sub
    return None


def _serve_front(cache: SourceCache) -> ServeFront | None:
    """What the release's `sglang serve` (sglang/cli/serve.py) does to the words before `prepare_server_args`:
    whether it takes a first word that is no option for the model path (`["--model-path", argv[0], ...]`),
    and, where it calls `get_model_path` on the words, the spellings that function (sglang/cli/utils.py)
    finds the model path by: serve stops when none is on the line, whatever `--config` holds."""
    serve = _cli_module(cache, "serve.py")
    if serve is None:
        return None
    _, module = serve
    positional = any(
        isinstance(node, ast.List) and len(node.elts) >= 2 and isinstance(node.elts[0], ast.Constant)
        and node.elts[0].value == "--model-path" and isinstance(node.elts[1], ast.Subscript)
        for node in walk(module)
    )
    call = _calls(module, "get_model_path")
    utils = _cli_module(cache, "utils.py")
    if call is None or utils is None:
        return ServeFront("../cli/serve.py", positional, ())
    functions = {n.name: n for n in utils[1].body if isinstance(n, ast.FunctionDef)}
    finder = functions.get("get_model_path")
    spellings: set[str] = set()
    while finder is not None:
        spellings |= {word.rstrip("=") for word in _compared_words(finder) if re.fullmatch(r"--[\w-]+=?", word)}
        inner = next((functions[c.func.id] for c in walk(finder) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                      and c.func.id in functions and c.func.id != finder.name), None)
        finder = inner if inner is not None and inner.name != "get_model_path" else None
    return ServeFront(f"../cli/serve.py:{call.lineno}", positional, tuple(sorted(spellings)))


def _compared_words(function: ast.FunctionDef) -> set[str]:
    """The strings a word of the line is compared with in `function`: `arg == "--x"`, `arg in ("--x", "--y")`,
    `arg.startswith("--x=")` (not, say, a list of help flags looked for in the words)."""
    found: set[str] = set()
    for node in walk(function):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                    found.add(right.value)
                elif isinstance(op, ast.In):
                    found |= set(literal_strings(right) or ())
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
              and isinstance(node.func.value, ast.Name)):
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def _serve_words(args: list[str], front: ServeFront) -> tuple[list[str], list[str]]:
    """The words `sglang serve` hands the server's parser, and what it stops on first."""
    if front.positional_model and args and not args[0].startswith("-"):
        args = ["--model-path", args[0], *args[1:]]
    spellings = front.model_path_spellings
    if spellings and not any(w in spellings or w.startswith(tuple(f"{s}=" for s in spellings)) for w in args):
        return args, [f"sglang serve: --model-path is required: this release's serve looks for {' or '.join(spellings)} "
                      "on the line itself (not in --config) before the server's parser runs"]
    return args, []


def _entry_at(words: Sequence[str]) -> int:
    """The index of the first option word after the program: `python -m sglang.launch_server`,
    `sglang serve`, `python3 -m sglang.launch_server`, `.../launch_server.py`."""
    for i, word in enumerate(words):
        if word in _ENTRY_MODULES or word.endswith("/launch_server.py") or word.endswith("sglang/launch_server"):
            return i + 1
        if _SERVE_SCRIPT.fullmatch(word) and i + 1 < len(words) and words[i + 1] == "serve":
            return i + 2
    raise EaglepatchError(
        "the launch command starts no SGLang server: pass it after `--`, as you would type it "
        "(`python -m sglang.launch_server --model-path ...` or `sglang serve ...`)",
        path="LAUNCH",
    )


def split_environment(words: Sequence[str], shell: Mapping[str, str] | None) -> tuple[Sequence[str], dict[str, str], dict[str, str], list[str]]:
    """(the words, one string split as a POSIX shell would; the assignments before the command,
    `VAR=1 cmd` and `env [-i] VAR=1 cmd`; what it inherits from the shell; the command's own words)."""
    inherited = dict(shell or {})
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    environment: dict[str, str] = {}
    start = 0
    while start < len(words) and _ASSIGNMENT.match(words[start]):
        name, _, value = words[start].partition("=")
        environment[name] = value
        start += 1
    rest = list(words[start:])
    if rest and rest[0] == "env":  # `env VAR=1 python -m ...`
        rest = rest[1:]
        if rest and rest[0] in ("-i", "--ignore-environment", "-"):
            inherited = {}
            rest = rest[1:]
        while rest and _ASSIGNMENT.match(rest[0]):
            name, _, value = rest.pop(0).partition("=")
            environment[name] = value
    return words, environment, inherited, rest


def read_launch(words: Sequence[str], options: Options, shell: Mapping[str, str] | None = None) -> LaunchLine:
    """`words` as typed (one string is split as a POSIX shell would), run from a shell whose exported
    variables are `shell` (the launch inherits them unless it starts with `env -i`)."""
    words, environment, inherited, rest = split_environment(words, shell)
    begin = _entry_at(rest)
    serve = begin >= 2 and rest[begin - 1] == "serve" and _SERVE_SCRIPT.fullmatch(rest[begin - 2]) is not None
    values: dict[str, str | bool | tuple[str, ...]] = {}
    spelled: dict[str, str] = {}
    errors: list[str] = []
    doubts: list[tuple[str, str]] = []  # values outside a list of choices code of the tree can add to
    args = rest[begin:]
    config = ""
    if serve and options.serve_at == "":
        errors.append("this release has no `sglang serve` command (no sglang/cli/main.py adds it); start it with `python -m sglang.launch_server`")
    if serve and options.serve_front is not None:  # `sglang serve` rewrites and checks the words first
        args, refused = _serve_words(args, options.serve_front)
        errors += refused
    if options.merger is not None:  # the release merges `--config FILE` into the words before it parses them
        args, refused, config = merge_config(args, options, options.merger)
        errors += refused
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-") or word == "-":
            errors.append(f"unrecognized argument: {word}")
            continue
        head, eq, inline = word.partition("=")
        option, why = options.match(head)
        if option is None:
            errors.append(why)
            while i < len(args) and not args[i].startswith("-"):
                i += 1  # its value, if it had one: argparse stops at the first error anyway
            continue
        spelled[option.dest] = head
        if option.takes == "none":
            if eq:
                errors.append(f"argument {head}: ignored explicit argument {inline!r}")
                continue
            values[option.dest] = True
            continue
        if eq:
            values[option.dest] = inline
            doubts += _outside_choices(option, head, [inline], errors)
            continue
        taken: list[str] = []
        while i < len(args) and not (args[i].startswith("--") or (args[i].startswith("-") and len(args[i]) > 1 and not args[i][1].isdigit())):
            taken.append(args[i])
            i += 1
            if option.takes in ("one", "optional"):
                break
        if not taken and option.takes == "one":
            errors.append(f"argument {head}: expected one argument")
            continue
        values[option.dest] = taken[0] if option.takes != "many" and taken else tuple(taken) if taken else True
        doubts += _outside_choices(option, head, taken, errors)
    required = tuple(dict.fromkeys(o for o in options.by_string.values() if o.required and o.dest not in values))
    return LaunchLine(tuple(words), environment, values, spelled, tuple(errors), required, options, config, tuple(doubts), inherited)


def _outside_choices(option: Option, head: str, taken: Sequence[str], errors: list[str]) -> list[tuple[str, str]]:
    """argparse's `invalid choice` for each value outside the option's whole list of choices: an error,
    or, where the tree can add to that list, a doubt (message, where it adds)."""
    if option.allowed is None:
        return []
    doubts = []
    for value in taken:
        if value in option.allowed:
            continue
        message = f"argument {head}: invalid choice: {value!r} (choose from {', '.join(map(repr, option.allowed))})"
        if option.allowed_open:
            doubts.append((message, option.allowed_open))
        else:
            errors.append(message)
        break  # argparse stops at the first
    return doubts
