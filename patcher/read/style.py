"""The target tree's own formatter settings: how wide black and isort lay out the code apply writes.

What is read, walking up from the tree's `srt/models` folder to the root of its checkout (the folder
holding `.git`; without one, the folder the user named), the way the tools themselves look:

* black: `line-length` and `skip-magic-trailing-comma` from `[tool.black]` in the nearest
  pyproject.toml that has that table (black's project root);
* isort: the first of `.isort.cfg` (`[settings]`/`[isort]`), pyproject.toml (`[tool.isort]`),
  setup.cfg and tox.ini (`[isort]`/`[tool:isort]`) holding isort settings, in the nearest folder that
  has one (isort stops at the checkout root too).  A profile's values come first, the file's keys
  override them: `profile`, `line_length`, `force_sort_within_sections`, `order_by_type` are
  followed, as are black's and isort's own defaults;
* the args of the `black`/`black-jupyter` and `isort` hooks in the root's `.pre-commit-config.yaml`
  (`--line-length=100`, `-l 100`, `--profile black`, `--fss`, ...), which override the files, as
  command-line flags do.  The YAML is read by a small line-based reader (no YAML dependency): block
  mappings as pre-commit's own files write them, with `args:` as a flow list (`[--profile, black]`,
  also over several lines) or a block list (`- --profile`).  Flow-style hook mappings
  (`- {id: black, args: [...]}`) and a local hook's `entry:` are not read.

An installed tree (below `site-packages`) has no formatter configuration: black's default width (88)
and isort's black profile, which is what eaglepatch writes without one.  Nor is there when nothing
above names isort settings: isort is then taken to run with `--profile black`, as SGLang runs it.

Imports wrap at the narrower of the two widths (past isort's, isort wraps them; past black's, black
does: both one name per line with a trailing comma, which the other then keeps).  Not reproduced, and
listed in `FormatStyle.not_followed` (apply warns; run the hooks after it): isort's wrap modes other
than black's (`multi_line_output` 3 with a trailing comma), `force_single_line`, `force_grid_wrap`,
`lexicographical`, `force_alphabetical_sort`, `group_by_package`, `lines_after_imports`, black's
`preview`; isort's `.editorconfig`, `--settings-path` and per-folder configs below the root.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]  # a 3.10 dependency (pyproject.toml)

BLACK_LINE_LENGTH = 88

# what a profile sets that changes what eaglepatch writes (isort's profiles.py); no profile: isort's defaults
_ISORT_DEFAULTS: dict[str, bool | int] = {
    "line_length": 79,
    "multi_line_output": 0,
    "include_trailing_comma": False,
    "force_sort_within_sections": False,
    "order_by_type": True,
    "force_single_line": False,
    "force_grid_wrap": 0,
    "lexicographical": False,
    "force_alphabetical_sort": False,
    "group_by_package": False,
    "lines_after_imports": -1,
}
_BLACK: dict[str, object] = {"multi_line_output": 3, "include_trailing_comma": True, "line_length": 88}
PROFILES: dict[str, dict[str, object]] = {
    "black": _BLACK,
    "django": {"include_trailing_comma": True, "multi_line_output": 5, "line_length": 79},
    "pycharm": {"multi_line_output": 3, "force_grid_wrap": 2, "lines_after_imports": 2},
    "google": {
        "force_single_line": True,
        "force_sort_within_sections": True,
        "lexicographical": True,
        "line_length": 1000,
        "order_by_type": False,
        "group_by_package": True,
    },
    "open_stack": {"force_single_line": True, "force_sort_within_sections": True, "lexicographical": True},
    "plone": {**_BLACK, "force_alphabetical_sort": True, "force_single_line": True},
    "attrs": {"force_grid_wrap": 0, "include_trailing_comma": True, "lines_after_imports": 2, "multi_line_output": 3},
    "hug": {"multi_line_output": 3, "include_trailing_comma": True, "line_length": 100},
    "wemake": {"multi_line_output": 3, "include_trailing_comma": True, "line_length": 80},
    "appnexus": {**_BLACK, "force_sort_within_sections": True, "order_by_type": False},
}
_MODES = {  # multi_line_output by name, as isort also accepts it
    "GRID": 0, "VERTICAL": 1, "HANGING_INDENT": 2, "VERTICAL_HANGING_INDENT": 3, "VERTICAL_GRID": 4,
    "VERTICAL_GRID_GROUPED": 5, "VERTICAL_GRID_GROUPED_NO_COMMA": 6, "NOQA": 7,
    "VERTICAL_HANGING_INDENT_BRACKET": 8, "VERTICAL_PREFIX_FROM_MODULE_IMPORT": 9,
    "HANGING_INDENT_WITH_PARENTHESES": 10, "BACKSLASH_GRID": 11,
}  # fmt: skip
_NOT_FOLLOWED = ("force_single_line", "force_grid_wrap", "lexicographical", "force_alphabetical_sort", "group_by_package", "lines_after_imports")
ISORT_SECTIONS = {
    ".isort.cfg": ("settings", "isort"),
    "pyproject.toml": ("tool.isort",),
    "setup.cfg": ("isort", "tool:isort"),
    "tox.ini": ("isort", "tool:isort"),
}
PRE_COMMIT = ".pre-commit-config.yaml"
BLACK_HOOKS = ("black", "black-jupyter")
ISORT_HOOKS = ("isort",)


@dataclass(frozen=True)
class FormatStyle:
    """How black and isort lay out the target tree's code, as far as it changes what eaglepatch writes."""

    line_length: int = BLACK_LINE_LENGTH  # black's: calls and signatures wrap past it
    skip_magic_trailing_comma: bool = False  # read for the record: eaglepatch writes no trailing comma black -C would take out
    isort_profile: str = "black"
    isort_line_length: int = BLACK_LINE_LENGTH
    force_sort_within_sections: bool = False  # `import m` and `from m import` lines sorted together by module
    order_by_type: bool = True  # CONSTANTS, Classes, functions; else names in case-insensitive order
    sources: tuple[str, ...] = ()  # the files the settings were read from
    not_followed: tuple[str, ...] = ()  # settings read whose layout eaglepatch does not reproduce

    @property
    def import_line_length(self) -> int:
        """Where an import wraps (one name per line): past isort's width isort wraps it, past black's black does."""
        return min(self.line_length, self.isort_line_length)

    def describe(self) -> str:
        """One line for reports: the widths and where they came from."""
        where = ", ".join(self.sources) if self.sources else "defaults"
        return f"black line length {self.line_length}, isort profile {self.isort_profile or 'none'} line length {self.isort_line_length} ({where})"


DEFAULT_STYLE = FormatStyle()


def config_root(models: Path, given: Path | None = None) -> list[Path] | None:
    """The folders whose configuration counts, from the models folder up to the checkout root (the folder
    holding `.git`, else the folder the user named, else the file system's root); None for an installed
    tree (a `site-packages` folder on the way)."""
    folders: list[Path] = []
    folder = models
    inside_git = any((p / ".git").exists() for p in (models, *models.parents))
    while True:
        if folder.name == "site-packages":
            return None
        folders.append(folder)
        if (folder / ".git").exists() or folder.parent == folder:
            return folders
        if given is not None and folder == given and not inside_git:
            return folders
        folder = folder.parent


def style_files(models: Path, given: Path | None = None) -> list[Path]:
    """Every path whose presence or content may change the style (for the result cache of `check`)."""
    folders = config_root(models, given)
    if folders is None:
        return []
    out = [folder / name for folder in folders for name in ISORT_SECTIONS]
    return out + [folders[-1] / PRE_COMMIT]


def load_style(models: Path, given: Path | None = None) -> FormatStyle:
    """The formatter settings of the tree whose `srt/models` folder is `models` (see the module docstring)."""
    folders = config_root(models, given)
    if folders is None:
        return DEFAULT_STYLE
    sources: list[str] = []
    black: dict[str, object] = {}
    for folder in folders:
        table = _toml_table(folder / "pyproject.toml", ("tool", "black"))
        if table is not None:
            black = {key.replace("-", "_"): value for key, value in table.items()}
            sources.append(str(folder / "pyproject.toml"))
            break
    isort: dict[str, object] | None = None
    for folder in folders:
        for name, sections in ISORT_SECTIONS.items():
            found = _isort_settings(folder / name, sections)
            if found:
                isort = found
                sources.append(str(folder / name))
                break
        if isort is not None:
            break
    hooks = hook_args(folders[-1] / PRE_COMMIT)
    black_args = [a for hook in BLACK_HOOKS for a in hooks.get(hook, [])]
    isort_args = [a for hook in ISORT_HOOKS for a in hooks.get(hook, [])]
    if black_args or isort_args:
        sources.append(str(folders[-1] / PRE_COMMIT))
    black.update(black_cli(black_args))
    overrides = isort_cli(isort_args)
    if isort is None and not overrides:
        isort = {"profile": "black"}  # no isort settings anywhere: SGLang's `--profile black`
    settings = {**(isort or {}), **overrides}
    profile = str(settings.get("profile", "") or "")
    combined = {**_ISORT_DEFAULTS, **PROFILES.get(profile, {}), **settings}
    notes = [f"isort profile {profile!r} is not one isort knows"] if profile and profile not in PROFILES else []
    mode = combined["multi_line_output"]
    mode = _MODES.get(str(mode).upper(), mode) if not isinstance(mode, int) else mode
    if _int(mode, -1) != 3 or not _bool(combined["include_trailing_comma"]):
        notes.append(f"isort multi_line_output = {combined['multi_line_output']} (include_trailing_comma = {combined['include_trailing_comma']})")
    notes += [f"isort {key} = {combined[key]}" for key in _NOT_FOLLOWED if _differs(combined[key], _ISORT_DEFAULTS[key])]
    notes += [f"black {key} = true" for key in ("preview", "unstable") if _bool(black.get(key, False))]
    return FormatStyle(
        line_length=_int(black.get("line_length"), BLACK_LINE_LENGTH),
        skip_magic_trailing_comma=_bool(black.get("skip_magic_trailing_comma", False)),
        isort_profile=profile,
        isort_line_length=_int(combined["line_length"], 79),
        force_sort_within_sections=_bool(combined["force_sort_within_sections"]),
        order_by_type=_bool(combined["order_by_type"]),
        sources=tuple(sources),
        not_followed=tuple(notes),
    )


def _differs(value: object, default: bool | int) -> bool:
    if isinstance(default, bool):
        return _bool(value) != default
    return _int(value, default) != default


def _int(value: object, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _toml_table(path: Path, keys: tuple[str, ...]) -> dict | None:
    """The table at `keys` of a TOML file, or None (no file, no table, not valid TOML: as the tools do, a
    file they cannot read configures nothing)."""
    if not path.is_file():
        return None
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return None
    for key in keys:
        table = table.get(key) if isinstance(table, dict) else None
    return table if isinstance(table, dict) else None


def _isort_settings(path: Path, sections: tuple[str, ...]) -> dict[str, object]:
    """isort's keys in one config file (dashes read as underscores), {} when it has none."""
    if not path.is_file():
        return {}
    if path.name == "pyproject.toml":
        table = _toml_table(path, ("tool", "isort")) or {}
        return {key.replace("-", "_"): value for key, value in table.items()}
    import configparser  # here: `check` answered from its result cache imports this module, not the parsers

    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
    except (configparser.Error, UnicodeDecodeError, OSError):
        return {}
    for section in sections:
        if parser.has_section(section):
            return {key.replace("-", "_"): value.strip() for key, value in parser.items(section)}
    return {}


def black_cli(args: list[str]) -> dict[str, object]:
    """black's flags among a hook's args that change the layout: the line length and `-C`."""
    out: dict[str, object] = {}
    for flag, value in _flags(args, {"-l", "--line-length"}):
        if flag in ("-l", "--line-length"):
            out["line_length"] = value
        elif flag in ("-C", "--skip-magic-trailing-comma"):
            out["skip_magic_trailing_comma"] = True
        elif flag == "--preview":
            out["preview"] = True
    return out


_ISORT_VALUED = {"-l", "-w", "--line-length", "--line-width", "--profile", "-m", "--multi-line", "--lai", "--lines-after-imports"}
_ISORT_SWITCHES = {
    "--fss": ("force_sort_within_sections", True),
    "--force-sort-within-sections": ("force_sort_within_sections", True),
    "--ot": ("order_by_type", True),
    "--order-by-type": ("order_by_type", True),
    "--dt": ("order_by_type", False),
    "--dont-order-by-type": ("order_by_type", False),
    "--sl": ("force_single_line", True),
    "--force-single-line-imports": ("force_single_line", True),
    "--tc": ("include_trailing_comma", True),
    "--trailing-comma": ("include_trailing_comma", True),
    "--lexicographical": ("lexicographical", True),
    "--fass": ("force_alphabetical_sort", True),
    "--force-alphabetical-sort": ("force_alphabetical_sort", True),
}
_ISORT_KEYS = {
    "-l": "line_length", "-w": "line_length", "--line-length": "line_length", "--line-width": "line_length",
    "--profile": "profile", "-m": "multi_line_output", "--multi-line": "multi_line_output",
    "--lai": "lines_after_imports", "--lines-after-imports": "lines_after_imports",
}  # fmt: skip


def isort_cli(args: list[str]) -> dict[str, object]:
    """isort's flags among a hook's args that change what eaglepatch must write."""
    out: dict[str, object] = {}
    for flag, value in _flags(args, _ISORT_VALUED):
        if flag in _ISORT_KEYS:
            out[_ISORT_KEYS[flag]] = value
        elif flag in _ISORT_SWITCHES:
            key, switch = _ISORT_SWITCHES[flag]
            out[key] = switch
    return out


def _flags(args: list[str], valued: set[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs: `--x=v`, `--x v`, `-xv` and `-x v` for the flags that take a value, ("--y", "") for the others."""
    import shlex

    words = [word for arg in args for word in (shlex.split(arg) if " " in arg.strip() else [arg.strip()])]
    out: list[tuple[str, str]] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        flag, eq, value = word.partition("=")
        if flag in valued:
            if not eq:
                value = words[index] if index < len(words) else ""
                index += 1
            out.append((flag, value))
        elif not flag.startswith("--") and flag[:2] in valued and len(flag) > 2:
            out.append((flag[:2], word[2:]))  # -l100
        elif word.startswith("-"):
            out.append((word, ""))
    return out


# -- .pre-commit-config.yaml --------------------------------------------------------------------------

_ID = re.compile(r"^(?P<indent>\s*)-\s+id:\s*(?P<id>[^\s#]+)")
_KEY = re.compile(r"^(?P<indent>\s*)(?:-\s+)?(?P<key>[\w-]+):(?:\s+(?P<rest>.*))?$")
_ITEM = re.compile(r"^(?P<indent>\s*)-\s+(?P<value>.*)$")


def hook_args(path: Path) -> dict[str, list[str]]:
    """hook id -> its `args` in a pre-commit config (every hook with args; the first of each id wins)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return read_hook_args(text)


def read_hook_args(text: str) -> dict[str, list[str]]:
    """The line-based reading of `hook_args` (see the module docstring for the YAML it understands)."""
    lines = [_uncomment(line) for line in text.splitlines()]
    out: dict[str, list[str]] = {}
    index = 0
    while index < len(lines):
        match = _ID.match(lines[index])
        index += 1
        if match is None:
            continue
        hook, column = _scalar(match["id"]), len(match["indent"]) + 2  # the hook's keys line up after "- "
        while index < len(lines):
            line = lines[index]
            if not line.strip():
                index += 1
                continue
            indent = len(line) - len(line.lstrip())
            if indent < column:
                break
            key = _KEY.match(line)
            index += 1
            if key is None or indent != column or key["key"] != "args":
                continue
            rest = (key["rest"] or "").strip()
            if rest.startswith("["):
                while "]" not in rest and index < len(lines):
                    rest += " " + lines[index].strip()
                    index += 1
                args = [_scalar(part) for part in _split_flow(rest.strip()[1:].rsplit("]", 1)[0])]
            else:
                args = []
                while index < len(lines):
                    item = _ITEM.match(lines[index])
                    if not lines[index].strip():
                        index += 1
                        continue
                    if item is None or len(item["indent"]) < column:
                        break
                    args.append(_scalar(item["value"]))
                    index += 1
            out.setdefault(hook, [a for a in args if a != ""])
    return out


def _uncomment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` inside quotes, or not after a space, stays)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _split_flow(text: str) -> list[str]:
    """The items of a flow sequence's inside, split at commas outside quotes."""
    items, current, quote = [], "", ""
    for char in text:
        if quote:
            current += char
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            current += char
        elif char == ",":
            items.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        items.append(current)
    return [item.strip() for item in items]


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].encode("utf-8").decode("unicode_escape") if "\\" in text else text[1:-1]
    return text
