"""Stage table for codemods/add_base.py: (source, expected) pairs, as test_codemod_tables.py writes them.

Expected texts are written by hand from the rules in the module's docstring; an output in black's
layout is also checked to be a fixed point of black (independent of eaglepatch's layout code), and
applying twice is applying once."""

from __future__ import annotations

import ast

import black
import libcst as cst
import pytest

from eaglepatch.codemods.add_base import AddBase

ABSOLUTE = "vllm.model_executor.models.interfaces"
WRAPPERS = {"Wrapper": "SupportsEagle3", "AVeryLongWrapperNameForConditionalGeneration": "SupportsEagle3"}


def add(source: str, classes: dict[str, str] | None = None, module: str = ".interfaces", line_length: int = 88) -> str:
    transformer = AddBase(classes or WRAPPERS, module, line_length, equivalents=(ABSOLUTE,))
    return cst.parse_module(source).visit(transformer).code


CASES = [
    pytest.param(
        "from .interfaces import SupportsMultiModal, SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsMultiModal, SupportsPP):\n    pass\n",
        "from .interfaces import SupportsEagle3, SupportsMultiModal, SupportsPP\n\n\n"
        "class Wrapper(nn.Module, SupportsMultiModal, SupportsPP, SupportsEagle3):\n    pass\n",
        True,
        id="one line that still fits; the name sorted into the import",
    ),
    pytest.param(
        "from .interfaces import SupportsMultiModal, SupportsPP\n\n\n"
        "class AVeryLongWrapperNameForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsPP):\n    pass\n",
        "from .interfaces import SupportsEagle3, SupportsMultiModal, SupportsPP\n\n\n"
        "class AVeryLongWrapperNameForConditionalGeneration(\n    nn.Module, SupportsMultiModal, SupportsPP, SupportsEagle3\n):\n    pass\n",
        True,
        id="a header that no longer fits: the bases on a line of their own",
    ),
    pytest.param(
        "from .interfaces import SupportsA, SupportsB\n\n\n"
        "class AVeryLongWrapperNameForConditionalGeneration(\n    nn.Module, SupportsMultiModal, SupportsLoRA, SupportsPP, SupportsMRoPE\n):\n    pass\n",
        "from .interfaces import SupportsA, SupportsB, SupportsEagle3\n\n\n"
        "class AVeryLongWrapperNameForConditionalGeneration(\n    nn.Module,\n    SupportsMultiModal,\n    SupportsLoRA,\n"
        "    SupportsPP,\n    SupportsMRoPE,\n    SupportsEagle3,\n):\n    pass\n",
        True,
        id="bases on their own line that no longer fits: one a line, trailing comma",
    ),
    pytest.param(
        "from .interfaces import (\n    MultiModalEmbeddings,\n    SupportsMRoPE,\n    SupportsPP,\n)\n\n\n"
        "class Wrapper(\n    nn.Module,\n    SupportsPP,\n):\n    pass\n",
        "from .interfaces import (\n    MultiModalEmbeddings,\n    SupportsEagle3,\n    SupportsMRoPE,\n    SupportsPP,\n)\n\n\n"
        "class Wrapper(\n    nn.Module,\n    SupportsPP,\n    SupportsEagle3,\n):\n    pass\n",
        True,
        id="one a line (magic trailing comma): one more line each",
    ),
    pytest.param(
        "from .interfaces import MultiModalEmbeddings, SupportsMultiModal, SupportsPP, SupportsLoRA, SupportsQuant\n\n\n"
        "class Wrapper(nn.Module):\n    pass\n",
        "from .interfaces import (\n    MultiModalEmbeddings,\n    SupportsMultiModal,\n    SupportsPP,\n    SupportsLoRA,\n"
        "    SupportsQuant,\n    SupportsEagle3,\n)\n\n\nclass Wrapper(nn.Module, SupportsEagle3):\n    pass\n",
        True,
        id="an unsorted import: appended; too long for a line: one a line",
    ),
    pytest.param(
        "from vllm.model_executor.models.interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP):\n    pass\n",
        "from vllm.model_executor.models.interfaces import SupportsEagle3, SupportsPP\n\n\n"
        "class Wrapper(nn.Module, SupportsPP, SupportsEagle3):\n    pass\n",
        True,
        id="the absolute spelling, when the file uses it",
    ),
    pytest.param(
        '"""Doc."""\n\nimport torch\n\nfrom .llama import Llama\nfrom .utils import maybe_prefix\n\n\nclass Wrapper(nn.Module):\n    pass\n',
        '"""Doc."""\n\nimport torch\n\nfrom .interfaces import SupportsEagle3\nfrom .llama import Llama\nfrom .utils import maybe_prefix\n\n\n'
        "class Wrapper(nn.Module, SupportsEagle3):\n    pass\n",
        True,
        id="no import of interfaces: a new one, in module order among the relative imports",
    ),
    pytest.param(
        "from .interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP, metaclass=Meta):\n    pass\n",
        "from .interfaces import SupportsEagle3, SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP, SupportsEagle3, metaclass=Meta):\n    pass\n",
        True,
        id="before a keyword",
    ),
    pytest.param(
        "from .interfaces import SupportsEagle3, SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP, SupportsEagle3):\n    pass\n",
        "from .interfaces import SupportsEagle3, SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP, SupportsEagle3):\n    pass\n",
        True,
        id="already declared and imported: unchanged",
    ),
    pytest.param(
        "from .interfaces import SupportsPP\n\n\nclass Other(nn.Module):\n    class Wrapper(nn.Module):\n        pass\n",
        "from .interfaces import SupportsPP\n\n\nclass Other(nn.Module):\n    class Wrapper(nn.Module):\n        pass\n",
        True,
        id="a nested class of the same name is not the module's class",
    ),
]


@pytest.mark.parametrize(("source", "expected", "black_layout"), CASES)
def test_add_base(source, expected, black_layout):
    out = add(source)
    assert out == expected
    assert add(out) == out  # idempotent
    ast.parse(out)
    if black_layout:
        assert black.format_str(out, mode=black.Mode()) == out


def test_yapf_layout_keeps_the_base_on_the_last_line_when_it_fits():
    source = "from .interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsMultiModal,\n              SupportsPP):\n    pass\n"
    out = add(source)
    assert out.endswith("class Wrapper(nn.Module, SupportsMultiModal,\n              SupportsPP, SupportsEagle3):\n    pass\n")
    narrow = add(source, line_length=40)
    assert "              SupportsPP,\n              SupportsEagle3):" in narrow
    assert add(out) == out and add(narrow, line_length=40) == narrow


def test_only_the_named_classes_change():
    source = "from .interfaces import SupportsPP\n\n\nclass A(nn.Module):\n    pass\n\n\nclass B(nn.Module):\n    pass\n"
    out = add(source, {"B": "SupportsEagle3"})
    assert "class A(nn.Module):" in out and "class B(nn.Module, SupportsEagle3):" in out


# --------------------------------------------------------------------------- revert (patcher/engines/vllm/revert.py)

REL = "model_executor/models/wrapper.py"  # inside models/: `.interfaces` is the spelling of a new import


def marked(source: str, classes: dict[str, str] | None = None) -> str:
    transformer = AddBase(classes or WRAPPERS, ".interfaces", 88, equivalents=(ABSOLUTE,), mark=True)
    return cst.parse_module(source).visit(transformer).code


def revert(source: str) -> tuple[str, dict, dict]:
    from eaglepatch.engines.vllm.revert import reverted

    module, removed, kept = reverted(cst.parse_module(source), REL)
    return module.code, removed, kept


@pytest.mark.parametrize(("source", "expected", "black_layout"), CASES)
def test_revert_gives_back_what_apply_started_from(source, expected, black_layout):
    patched = marked(source)
    assert "# eaglepatch: added" in patched or patched == source
    assert ast.dump(ast.parse(patched)) == ast.dump(ast.parse(expected))  # the marker is a comment, nothing else
    back, removed, kept = revert(patched)
    assert back == source and not kept
    assert removed == ({} if patched == source else {"Wrapper" if "class Wrapper(" in source else "AVeryLongWrapperNameForConditionalGeneration": ["SupportsEagle3"]})
    assert revert(back)[0] == back  # idempotent


def test_revert_gives_back_the_yapf_layout():
    source = "from .interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsMultiModal,\n              SupportsPP):\n    pass\n"
    assert revert(marked(source))[0] == source


def test_the_marker_says_what_the_change_relaid():
    one_line = "from .interfaces import SupportsMultiModal, SupportsPP\n\n\nclass AVeryLongWrapperNameForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsPP):\n    pass\n"
    assert "    # eaglepatch: added SupportsEagle3 to the bases\n    # (before: header on one line)\n    pass\n" in marked(one_line)
    long_import = CASES[4].values[0]
    assert "# eaglepatch: added SupportsEagle3 to the bases\n    # (before: import on one line)\n" in marked(long_import)
    both = "from .interfaces import SupportsMultiModal, SupportsPP, SupportsTranscriptionAndMoreNamesHere\n\n\n" + one_line.split("\n\n\n", 1)[1]
    assert all(len(line) <= 88 for line in marked(both).splitlines())  # the notes on a line of their own: ruff's width holds
    documented = 'class Wrapper(nn.Module):\n    """Doc."""\n\n    x = 1\n'
    assert marked(documented).endswith('    """Doc."""\n\n    # eaglepatch: added SupportsEagle3 to the bases\n    x = 1\n')


def test_revert_leaves_a_base_without_marker_an_edited_header_and_a_name_still_used():
    by_hand = "from .interfaces import SupportsEagle3\n\n\nclass Wrapper(nn.Module, SupportsEagle3):\n    pass\n"
    assert revert(by_hand) == (by_hand, {}, {})
    edited = marked("from .interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP):\n    pass\n").replace(
        "SupportsPP, SupportsEagle3", "SupportsEagle3, SupportsPP"
    )  # moved by hand: not what apply wrote
    back, removed, kept = revert(edited)
    assert back == edited and kept == {"Wrapper": ["SupportsEagle3"]} and not removed
    used = marked("from .interfaces import SupportsPP\n\n\nclass Wrapper(nn.Module, SupportsPP):\n    pass\n") + "\n\nassert issubclass(Other, SupportsEagle3)\n"
    back, removed, kept = revert(used)
    assert "class Wrapper(nn.Module, SupportsPP):\n    pass\n" in back and "import SupportsEagle3, SupportsPP" in back
    assert removed == {"Wrapper": ["SupportsEagle3"]}


def test_a_marker_with_its_notes_inline_as_older_versions_wrote_it_still_reverts():
    one_line = "from .interfaces import SupportsMultiModal, SupportsPP\n\n\nclass AVeryLongWrapperNameForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsPP):\n    pass\n"
    two_lines = marked(one_line)
    inline = two_lines.replace("to the bases\n    # (before: header on one line)", "to the bases (before: header on one line)")
    assert inline != two_lines
    for text in (two_lines, inline):
        back, removed, kept = revert(text)
        assert (back, removed, kept) == (one_line, {"AVeryLongWrapperNameForConditionalGeneration": ["SupportsEagle3"]}, {})
