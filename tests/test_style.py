"""Stage table for patcher/read/style.py: which formatter settings of the target tree are read, from where, and
which wins; the line-based reader of `.pre-commit-config.yaml` checked against a real YAML parser."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eaglepatch.read.style import DEFAULT_STYLE, FormatStyle, black_cli, isort_cli, load_style, read_hook_args, style_files

MODELS = Path("python", "sglang", "srt", "models")


def _tree(root: Path, files: dict[str, str], git: bool = True) -> Path:
    """A checkout-shaped tree under root with `files` (relative path -> text); its models folder."""
    (root / MODELS).mkdir(parents=True)
    if git:
        (root / ".git").mkdir()
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / MODELS


BLACK_100 = "[tool.black]\nline-length = 100\n"
ISORT_CFG = "[settings]\nprofile=black\nknown_first_party=sglang\n"
PRE_COMMIT = """\
repos:
  - repo: https://example.invalid/pycqa/isort
    rev: 5.13.2
    hooks:
      - id: isort
        args: [--profile, black, --line-length, "79"]
  - repo: https://example.invalid/psf/black
    rev: 24.10.0
    hooks:
      - id: black-jupyter
        args: [--line-length=79]   # as wide as isort's
"""

# files -> (black line length, isort profile, isort line length, force_sort_within_sections, order_by_type, sources)
CASES = [
    pytest.param({}, (88, "black", 88, False, True, ()), id="nothing-black-defaults-isort-black-profile"),
    pytest.param({"pyproject.toml": BLACK_100}, (100, "black", 88, False, True, ("pyproject.toml",)), id="tool-black-root"),
    pytest.param(
        {"python/pyproject.toml": "[tool.black]\nline-length = 99\n", "pyproject.toml": BLACK_100},
        (99, "black", 88, False, True, ("python/pyproject.toml",)),
        id="nearest-tool-black-wins",
    ),
    pytest.param(
        {"python/pyproject.toml": "[project]\nname = 'sglang'\n", "pyproject.toml": BLACK_100},
        (100, "black", 88, False, True, ("pyproject.toml",)),
        id="pyproject-without-tool-black-is-passed",
    ),
    pytest.param(
        {"pyproject.toml": '[tool.isort]\nprofile = "black"\nline-length = 100\n'},
        (88, "black", 100, False, True, ("pyproject.toml",)),
        id="tool-isort-dashed-key",
    ),
    pytest.param({".isort.cfg": ISORT_CFG}, (88, "black", 88, False, True, (".isort.cfg",)), id="isort-cfg-sglang"),
    pytest.param(
        {"setup.cfg": "[metadata]\nname = x\n\n[isort]\nprofile = black\nline_length = 79\n"},
        (88, "black", 79, False, True, ("setup.cfg",)),
        id="setup-cfg-isort",
    ),
    pytest.param(
        {"setup.cfg": "[tool:isort]\nprofile = black\nforce_sort_within_sections = true\n"},
        (88, "black", 88, True, True, ("setup.cfg",)),
        id="setup-cfg-tool-isort",
    ),
    pytest.param(
        {"tox.ini": "[isort]\nprofile = black\norder_by_type = false\n"},
        (88, "black", 88, False, False, ("tox.ini",)),
        id="tox-ini",
    ),
    pytest.param(
        {".isort.cfg": "[settings]\nprofile=black\nline_length=100\n", "pyproject.toml": '[tool.isort]\nprofile = "black"\n'},
        (88, "black", 100, False, True, (".isort.cfg",)),
        id="isort-cfg-before-pyproject-in-one-folder",
    ),
    pytest.param(
        {"python/setup.cfg": "[isort]\nprofile = black\nline_length = 120\n", ".isort.cfg": ISORT_CFG},
        (88, "black", 120, False, True, ("python/setup.cfg",)),
        id="nearest-isort-folder-wins",
    ),
    pytest.param(
        {"pyproject.toml": "[tool.black]\nline-length = 100\n[tool.isort]\nprofile = 'google'\n"},
        (100, "google", 1000, True, False, ("pyproject.toml", "pyproject.toml")),
        id="google-profile-values",
    ),
    pytest.param(
        {".isort.cfg": ISORT_CFG, ".pre-commit-config.yaml": PRE_COMMIT},
        (79, "black", 79, False, True, (".isort.cfg", ".pre-commit-config.yaml")),
        id="hook-args-override-files",
    ),
    pytest.param(
        {"pyproject.toml": "[tool.black\nline-length = 100\n"},
        (88, "black", 88, False, True, ()),
        id="invalid-toml-configures-nothing",
    ),
]


@pytest.mark.parametrize("files, expected", CASES)
def test_settings_and_where_they_came_from(tmp_path, files, expected):
    root = tmp_path / "repo"
    style = load_style(_tree(root, files), root)
    black, profile, isort, fss, obt, sources = expected
    assert (style.line_length, style.isort_profile, style.isort_line_length) == (black, profile, isort)
    assert (style.force_sort_within_sections, style.order_by_type) == (fss, obt)
    assert style.sources == tuple(str(root / s) for s in sources)
    assert style.import_line_length == min(black, isort)


def test_an_installed_tree_has_no_configuration(tmp_path):
    """A pyproject.toml above site-packages is not the tree's: black's width and isort's black profile."""
    (tmp_path / "pyproject.toml").write_text(BLACK_100)
    models = tmp_path / "lib" / "python3.11" / "site-packages" / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    assert load_style(models, tmp_path) == DEFAULT_STYLE == FormatStyle()
    assert style_files(models, tmp_path) == []


def test_the_search_ends_at_the_git_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text(BLACK_100)
    (tmp_path / ".isort.cfg").write_text("[settings]\nline_length=50\n")
    root = tmp_path / "repo"
    assert load_style(_tree(root, {}), root) == DEFAULT_STYLE


def test_without_git_the_search_ends_at_the_folder_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text(BLACK_100)
    root = tmp_path / "plain"
    models = _tree(root, {"pyproject.toml": "[tool.black]\nline-length = 90\n"}, git=False)
    assert load_style(models, root).line_length == 90
    (root / "pyproject.toml").unlink()
    assert load_style(models, root).line_length == 88
    assert load_style(models, tmp_path).line_length == 100  # named the folder above: its pyproject counts


def test_isort_without_a_profile_is_isorts_defaults_and_said_so(tmp_path):
    root = tmp_path / "repo"
    style = load_style(_tree(root, {".isort.cfg": "[settings]\nknown_first_party=sglang\nforce_single_line=True\n"}), root)
    assert (style.isort_profile, style.isort_line_length, style.import_line_length) == ("", 79, 79)
    assert any("multi_line_output = 0" in note for note in style.not_followed)
    assert "isort force_single_line = True" in style.not_followed
    assert load_style(_tree(tmp_path / "sg", {".isort.cfg": ISORT_CFG}), tmp_path / "sg").not_followed == ()


def test_style_files_name_every_candidate(tmp_path):
    root = tmp_path / "repo"
    files = style_files(_tree(root, {}), root)
    assert root / ".pre-commit-config.yaml" in files and root / "python" / "setup.cfg" in files
    assert root / MODELS / ".isort.cfg" in files and all(root in f.parents for f in files)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--line-length=100"], {"line_length": "100"}),
        (["--line-length", "100"], {"line_length": "100"}),
        (["-l", "79"], {"line_length": "79"}),
        (["-l79", "-C"], {"line_length": "79", "skip_magic_trailing_comma": True}),
        (["--line-length 120"], {"line_length": "120"}),
        (["--skip-magic-trailing-comma", "--check"], {"skip_magic_trailing_comma": True}),
        ([], {}),
    ],
)
def test_black_hook_args(args, expected):
    assert black_cli(args) == expected


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--profile", "black"], {"profile": "black"}),
        (["--profile=black", "--filter-files"], {"profile": "black"}),
        (["-l", "100", "--fss"], {"line_length": "100", "force_sort_within_sections": True}),
        (["--line-width=90", "--dt"], {"line_length": "90", "order_by_type": False}),
        (["-w", "79", "--force-single-line-imports"], {"line_length": "79", "force_single_line": True}),
    ],
)
def test_isort_hook_args(args, expected):
    assert isort_cli(args) == expected


PRE_COMMIT_SHAPES = [
    PRE_COMMIT,
    # SGLang's shape: isort without args (its .isort.cfg configures it), black-jupyter, other hooks' args
    """\
default_stages: [pre-commit, pre-push, manual]
exclude: ^python/sglang/srt/grpc/

repos:
  - repo: https://example.invalid/pre-commit-hooks
    rev: v5.0.0
    hooks:
      - id: check-yaml
        args: [--allow-multiple-documents]
      - id: check-toml
  - repo: https://example.invalid/isort
    rev: 5.13.2
    hooks:
      - id: isort
        exclude: '^python/sglang/srt/grpc/.*_pb2\\.py$|^x#y'
  - repo: https://example.invalid/black
    rev: 24.10.0
    hooks:
      - id: black-jupyter
        exclude: '^python/sglang/srt/grpc/.*_pb2\\.py$'
  - repo: https://example.invalid/codespell
    rev: v2.4.1
    hooks:
      - id: codespell
        additional_dependencies: ['tomli']
        args: ['--toml', 'python/pyproject.toml', '-L', 'cann,thi']
        exclude: |
          (?x)^(
            test/srt/x\\.py|
            docs/y\\.ipynb
          )$
  - repo: https://example.invalid/nbstripout
    rev: 0.8.1
    hooks:
      - id: nbstripout
        args:
          - '--keep-output'
          - '--extra-keys=metadata.kernelspec metadata.language_info.version'
""",
    # block lists, a flow list over lines, comments, unindented hook lists
    """\
repos:
- repo: local-mirror
  rev: "1"
  hooks:
  - id: black
    name: black (python)
    args:
    - --line-length
    - "100"   # wide
    - '--skip-magic-trailing-comma'
  - id: isort
    args: [
      "--profile", "black",
      "--line-length=100",
    ]
    types: [python]
""",
]


@pytest.mark.parametrize("text", PRE_COMMIT_SHAPES)
def test_hook_args_reader_agrees_with_a_yaml_parser(text):
    parsed = yaml.safe_load(text)
    expected: dict[str, list[str]] = {}
    for repo in parsed["repos"]:
        for hook in repo["hooks"]:
            if "args" in hook:
                expected.setdefault(hook["id"], [str(a) for a in hook["args"]])
    assert read_hook_args(text) == expected


def test_hook_args_in_a_checkout(tmp_path):
    root = tmp_path / "repo"
    style = load_style(_tree(root, {".pre-commit-config.yaml": PRE_COMMIT_SHAPES[2]}), root)
    assert (style.line_length, style.skip_magic_trailing_comma, style.isort_line_length) == (100, True, 100)
    assert style.sources == (str(root / ".pre-commit-config.yaml"),)
