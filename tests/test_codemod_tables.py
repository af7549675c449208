"""Stage tables for the codemods that had none: (source, expected) pairs, as libcst's
assertCodemod and pyupgrade write them.

* add_delegations (run through patcher/edits.apply_codemod, as `apply` runs it);
* remove_delegations (as patcher/edits.revert_edits runs it: module.visit, no metadata);
* respell (free_names, Respell), as patcher/analyze/forms.py runs them on copied defaults/annotations;
* retarget (Retarget, ExplodeLongLiterals, overlong_lines, body_reads), as patcher/edits.learned_for
  and patcher/analyze/synthesize.py run them.

Expected texts are written by hand from the rules in each module's docstring; every output
that lands in a file is also checked to compile and to be a fixed point of black, which is
independent of eaglepatch's own layout code.  Pairs: applying twice == applying once, and
revert(apply(x)) == x.
"""

from __future__ import annotations

import ast
from pathlib import Path

import black
import libcst as cst
import pytest
from libcst.codemod import CodemodContext

from eaglepatch.codemods.add_delegations import Delegation, render_delegation
from eaglepatch.codemods.remove_delegations import RemoveDelegations
from eaglepatch.codemods.respell import FreeName, Respell, free_names
from eaglepatch.codemods.retarget import ExplodeLongLiterals, Retarget, body_reads, overlong_lines
from eaglepatch.read.text import decode_source
from eaglepatch.rewrite.edits import apply_codemod


def _params(signature: str) -> cst.Parameters:
    return cst.parse_statement(f"def f{signature}: pass\n").params


def _returns(annotation: str) -> cst.Annotation:
    return cst.parse_statement(f"def f() -> {annotation}: pass\n").returns


def apply(text: str, delegations: dict[str, list[Delegation]]) -> str:
    source = decode_source(Path("models/m.py"), "models/m.py", text.encode())
    return apply_codemod(source, delegations).updated.decode()


def revert(text: str, bound_elsewhere: frozenset[str] = frozenset()) -> str:
    module = cst.parse_module(text)
    return module.visit(RemoveDelegations(CodemodContext(), bound_elsewhere)).code


def assert_black_stable(text: str) -> None:
    ast.parse(text)
    assert black.format_str(text, mode=black.Mode()) == text


# --------------------------------------------------------------------------- add_delegations

WRAPPER = '''\
from torch import nn


class Wrapper(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Inner(config)

    def forward(self, x):
        return self.model(x)

    hidden = 4
'''

GET = Delegation("get_embed_and_head", "model", params=_params("(self)"))
SET = Delegation("set_embed_and_head", "model", params=_params("(self, embed, head)"))

GET_TEXT = '''
    # eaglepatch: forwards to self.model
    def get_embed_and_head(self):
        """Forward to ``self.model`` (EAGLE-3 speculative decoding)."""
        inner = self.model
        if inner is None or not hasattr(inner, "get_embed_and_head"):
            raise AttributeError(
                f"{self.__class__.__name__}.model has no get_embed_and_head"
            )
        return inner.get_embed_and_head()
'''
SET_TEXT = '''
    # eaglepatch: forwards to self.model
    def set_embed_and_head(self, embed, head):
        """Forward to ``self.model`` (EAGLE-3 speculative decoding)."""
        inner = self.model
        if inner is None or not hasattr(inner, "set_embed_and_head"):
            raise AttributeError(
                f"{self.__class__.__name__}.model has no set_embed_and_head"
            )
        return inner.set_embed_and_head(embed, head)
'''
_AFTER_FORWARD = WRAPPER.index("\n    hidden = 4")
IMPORTS = "import logging\n\nfrom torch import nn\n\n\n"
CLASS = "class Wrapper:\n    def forward(self):\n        pass\n"
CAPTURE = Delegation(
    "capture",
    "language_model",
    params=_params("(self, layer_ids: Optional[List[int]] = None, *, strict=False)"),
    returns=_returns("None"),
    imports=(("typing", "List", None), ("typing", "Optional", None)),
)

ADD_CASES = [
    pytest.param(
        WRAPPER,
        {"Wrapper": [GET]},
        WRAPPER[:_AFTER_FORWARD] + GET_TEXT + WRAPPER[_AFTER_FORWARD:],
        id="after-the-last-method-not-at-the-end",
    ),
    pytest.param(
        WRAPPER,
        {"Wrapper": [GET, SET]},
        WRAPPER[:_AFTER_FORWARD] + GET_TEXT + SET_TEXT + WRAPPER[_AFTER_FORWARD:],
        id="two-in-the-order-given",
    ),
    pytest.param(
        "class Wrapper:\n    x = 1\n",
        {"Wrapper": [GET]},
        "class Wrapper:\n    x = 1\n" + GET_TEXT,
        id="no-method-appends-at-the-end",
    ),
    pytest.param(
        "class Wrapper:\n\tdef forward(self):\n\t\tpass\n",
        {"Wrapper": [Delegation("hot", "model", style="property")]},
        "class Wrapper:\n\tdef forward(self):\n\t\tpass\n"
        "\n"
        "\t# eaglepatch: forwards to self.model\n"
        "\t@property\n"
        "\tdef hot(self):\n"
        '\t\t"""Forward to ``self.model`` (EAGLE-3 speculative decoding)."""\n'
        "\t\tinner = self.model\n"
        '\t\tif inner is None or not hasattr(inner, "hot"):\n'
        '\t\t\traise AttributeError(f"{self.__class__.__name__}.model has no hot")\n'
        "\t\treturn inner.hot\n",
        id="property-in-the-files-tab-indent",
    ),
    pytest.param(
        "class Other:\n    pass\n\n\nclass Wrapper:\n    get_embed_and_head = None\n",
        {"Wrapper": [GET], "Missing": [GET]},
        "class Other:\n    pass\n\n\nclass Wrapper:\n    get_embed_and_head = None\n",
        id="a-member-the-class-binds-is-not-written",
    ),
    pytest.param(
        "class Wrapper:\n    if _is_cuda:\n        def get_embed_and_head(self):\n            pass\n",
        {"Wrapper": [GET]},
        "class Wrapper:\n    if _is_cuda:\n        def get_embed_and_head(self):\n            pass\n",
        id="defined-under-an-if-counts-as-present",
    ),
    pytest.param(
        IMPORTS + CLASS,
        {"Wrapper": [CAPTURE]},
        "import logging\nfrom typing import List, Optional\n\nfrom torch import nn\n\n\n"  # joins the stdlib block
        + CLASS
        + "\n"
        "    # eaglepatch: forwards to self.language_model; imported List, Optional\n"
        "    def capture(self, layer_ids: Optional[List[int]] = None, *, strict=False) -> None:\n"  # 84 columns: one line
        '        """Forward to ``self.language_model`` (EAGLE-3 speculative decoding)."""\n'
        "        inner = self.language_model\n"
        '        if inner is None or not hasattr(inner, "capture"):\n'
        "            raise AttributeError(\n"
        '                f"{self.__class__.__name__}.language_model has no capture"\n'
        "            )\n"
        "        return inner.capture(layer_ids, strict=strict)\n",
        id="signature-kwonly-return-and-imports",
    ),
]


@pytest.mark.parametrize("source, delegations, expected", ADD_CASES)
def test_add_delegations(source, delegations, expected):
    after = apply(source, delegations)
    assert after == expected
    if after != source and "\t" not in source:  # black would rewrite a tab-indented file whatever apply wrote
        assert_black_stable(after)
    assert apply(after, delegations) == after  # idempotent: nothing is written twice


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_add_delegations_keeps_the_files_newline(newline):
    source = WRAPPER.replace("\n", newline)
    expected = (WRAPPER[:_AFTER_FORWARD] + GET_TEXT + WRAPPER[_AFTER_FORWARD:]).replace("\n", newline)
    assert apply(source, {"Wrapper": [GET]}) == expected


def test_staticmethod_receiver_named_self_is_renamed():
    """A static inner method may call its first parameter `self`: the wrapper's receiver then needs another name."""
    text = render_delegation(Delegation("f", "model", params=_params("(self, x)"), binding="static"))
    assert "    def f(wrapper, self, x):\n" in text
    assert "inner = wrapper.model\n" in text
    assert "return inner.f(self, x)\n" in text


# --------------------------------------------------------------------------- remove_delegations

REVERT_SOURCES = [pytest.param(*case.values[:2], id=case.id) for case in ADD_CASES if case.values[0] != case.values[2]]


@pytest.mark.parametrize("source, delegations", REVERT_SOURCES)
def test_revert_of_apply_is_identity(source, delegations):
    after = apply(source, delegations)
    assert after != source
    assert revert(after) == source
    assert revert(source) == source  # nothing of eaglepatch's there: revert leaves the file alone


def test_revert_keeps_a_hand_edited_delegation():
    after = apply(WRAPPER, {"Wrapper": [GET, SET]})
    edited = after.replace("return inner.get_embed_and_head()", "return inner.get_embed_and_head()  # mine")
    module = cst.parse_module(edited)
    command = RemoveDelegations(CodemodContext())
    reverted = module.visit(command).code
    assert command.removed == {"Wrapper": ["set_embed_and_head"]}
    assert command.kept == {"Wrapper": ["get_embed_and_head"]}
    assert reverted == WRAPPER[:_AFTER_FORWARD] + GET_TEXT.replace("head()\n", "head()  # mine\n") + WRAPPER[_AFTER_FORWARD:]


def test_revert_keeps_a_delegation_without_its_blank_line():
    """The blank line above the marker is part of what apply wrote: without it, the member was moved by hand."""
    after = apply(WRAPPER, {"Wrapper": [GET]})
    moved = after.replace("        return self.model(x)\n\n    # eaglepatch", "        return self.model(x)\n    # eaglepatch")
    assert moved != after
    assert revert(moved) == moved


IMPORTING = ADD_CASES[-1].values


def test_revert_keeps_an_import_code_came_to_use():
    source, delegations, _ = IMPORTING
    after = apply(source, delegations) + "\n\nX: Optional[int] = None\n"
    reverted = revert(after)  # List goes, Optional stays: X reads it
    assert reverted == source.replace("import logging\n", "import logging\nfrom typing import Optional\n") + "\n\nX: Optional[int] = None\n"


def test_revert_drops_an_import_a_star_import_binds_anyway():
    """patcher/read/star_imports.py says what the file's star imports bind: such a name may go though code reads it."""
    source, delegations, _ = IMPORTING
    source = source.replace("from torch import nn\n", "from torch import nn\nfrom sglang.srt.layers import *\n")
    after = apply(source, delegations) + "\n\nX: Optional[int] = None\n"
    assert "from typing import List, Optional\n" in after
    assert revert(after, frozenset({"Optional"})) == source + "\n\nX: Optional[int] = None\n"
    # without that knowledge, Optional stays (List goes: nothing else reads it)
    kept = revert(after)
    assert kept == source.replace("import logging\n", "import logging\nfrom typing import Optional\n") + "\n\nX: Optional[int] = None\n"


def test_revert_of_an_import_that_opened_a_block():
    source = "from torch import nn\n\n\n" + CLASS
    after = apply(source, {"Wrapper": [CAPTURE]})
    assert after.startswith("from typing import List, Optional\n\nfrom torch import nn\n")
    assert revert(after) == source


def test_apply_to_a_file_without_imports_is_black_stable():
    after = apply(CLASS, {"Wrapper": [CAPTURE]})
    assert after.startswith("from typing import List, Optional\n")
    assert_black_stable(after)


# --------------------------------------------------------------------------- respell

FREE_NAMES = [
    ("torch.Tensor", False, [FreeName("torch", False)], True),
    ("f(x, key=DEFAULT)", False, [FreeName("f", False), FreeName("x", False), FreeName("DEFAULT", False)], True),
    ("Optional['LayerSpec']", True, [FreeName("Optional", False), FreeName("LayerSpec", True)], True),
    ("Literal['a', 'b']", True, [FreeName("Literal", False)], True),
    ("'List[' 'int]'", True, [], False),  # a concatenated string annotation is not read
    ("'not valid ('", True, [], False),
    ("lambda v: v + K", False, [], False),  # binds names inside: not read
    ("[i for i in R]", False, [], False),
    ("'plain string default'", False, [], True),  # not an annotation: a string is a value
]


@pytest.mark.parametrize("expression, annotation, names, readable", FREE_NAMES, ids=[c[0] for c in FREE_NAMES])
def test_free_names(expression, annotation, names, readable):
    assert free_names(cst.parse_expression(expression), annotation) == (names, readable)


def test_free_names_of_nothing():
    assert free_names(None) == ([], True)


RESPELL = [
    # (expression, annotation, eager, lazy, expected)
    ("Optional[Tensor]", True, {"Optional": "typing.Optional", "Tensor": "torch.Tensor"}, {}, "typing.Optional[torch.Tensor]"),
    ("torch.float16", False, {"torch": "th"}, {}, "th.float16"),  # the root, never the attribute
    ("Tensor.torch", False, {"torch": "th"}, {}, "Tensor.torch"),
    ("f(dtype=dtype)", False, {"dtype": "DT", "f": "g"}, {}, "g(dtype=DT)"),  # a keyword is not a name read
    ("Optional['Spec']", True, {"Spec": "Eager"}, {"Spec": "models.Spec"}, "Optional['models.Spec']"),
    ('Optional["Spec"]', True, {}, {"Other": "X"}, 'Optional["Spec"]'),  # nothing to change: the string stays as written
    ("Literal['Spec']", True, {}, {"Spec": "X"}, "Literal['Spec']"),  # a Literal's strings are values
    ("'Spec'", False, {}, {"Spec": "X"}, "'Spec'"),  # a default's string is a value
    ("Optional[r'Spec']", True, {}, {"Spec": "X"}, "Optional['X']"),  # a raw prefix cannot be kept: repr()
    ("MAX", False, {"MAX": "1024"}, {}, "1024"),  # a literal in place of a name
]


@pytest.mark.parametrize("expression, annotation, eager, lazy, expected", RESPELL, ids=[c[0] + "->" + c[4] for c in RESPELL])
def test_respell(expression, annotation, eager, lazy, expected):
    def parse(table):
        return {k: cst.parse_expression(v) for k, v in table.items()}

    node = cst.parse_expression(expression)
    out = node.visit(Respell(parse(eager), parse(lazy), annotation))
    assert cst.Module(body=[]).code_for_node(out) == expected
    assert node.visit(Respell({}, {}, annotation)).deep_equals(node)  # empty tables: a no-op


# --------------------------------------------------------------------------- retarget

def _retarget(body: str, renames, spelled=None) -> str:
    module = cst.parse_module(body)
    return module.visit(Retarget("self", renames, spelled)).code


RETARGET = [
    pytest.param(
        "def get_embed_and_head(self):\n    return self.model.embed_tokens.weight, self.lm_head.weight\n",
        {("model",): ("language_model",)},
        "def get_embed_and_head(self):\n    return self.language_model.embed_tokens.weight, self.lm_head.weight\n",
        id="backbone-prefix",
    ),
    pytest.param(
        "def f(self):\n    n = self.config.text_config.num_hidden_layers\n    return self.config.text_config\n",
        {("config", "text_config"): ("config",)},
        "def f(self):\n    n = self.config.num_hidden_layers\n    return self.config\n",
        id="config-path-shortened",
    ),
    pytest.param(
        "def f(self):\n    return (self.model).layers, other.model.layers, self.modelx\n",
        {("model",): ("backbone", "inner")},
        "def f(self):\n    return (self.backbone.inner).layers, other.model.layers, self.modelx\n",
        id="only-self-chains-parens-kept",
    ),
    pytest.param(
        "def f(self):\n    return self.model\n",
        {("model",): ("model",)},
        "def f(self):\n    return self.model\n",
        id="identity-rename-is-dropped",
    ),
]


@pytest.mark.parametrize("body, renames, expected", RETARGET)
def test_retarget(body, renames, expected):
    assert _retarget(body, renames) == expected
    inverse = {new: old for old, new in renames.items()}
    assert _retarget(expected, inverse) == body  # renaming back restores the reference's body


def test_retarget_twice_is_once_when_the_target_is_not_a_source():
    body, renames, expected = RETARGET[0].values
    assert _retarget(_retarget(body, renames), renames) == expected


def test_body_reads_and_spelled_names():
    func = cst.parse_statement(
        "def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = DEFAULT):\n"
        "    if not get_pp_group().is_last_rank:\n"
        "        return\n"
        "    n = len(self.model.layers)\n"
        "    helper = lambda k: k + OFFSET\n"
        "    self.model.layers_to_capture = [v + 1 for v in layer_ids or [2, n // 2, n - 3]]\n"
        "    return get_pp_group, helper\n"
    )
    module, reads = body_reads(func)
    # in the body only: not the signature's Optional/List/int/DEFAULT; not locals n, helper, k, v
    assert sorted(reads) == ["OFFSET", "get_pp_group", "len"]
    assert len(reads["get_pp_group"]) == 2  # both reads, each node once
    _, with_signature = body_reads(func, signature=True)
    assert sorted(with_signature) == ["DEFAULT", "List", "OFFSET", "Optional", "get_pp_group", "int", "len"]
    spelled = {node: cst.parse_expression("ps.get_pp_group") for node in reads["get_pp_group"]}
    out = module.visit(Retarget("self", {("model",): ("lm",)}, spelled)).code
    assert out.count("ps.get_pp_group") == 2 and "get_pp_group()" not in out.replace("ps.get_pp_group()", "")
    assert "self.lm.layers_to_capture" in out and "len(self.lm.layers)" in out
    assert "OFFSET" in out  # not in `spelled`: left as it reads


LONG = "x" * 30


def _explode(statement: str, depth: int = 1, limit: int = 88) -> str:
    func = cst.parse_statement(f"def f(self):\n    {statement}\n")
    once = cst.Module(body=[func]).visit(ExplodeLongLiterals("    ", limit, depth))
    twice = once.visit(ExplodeLongLiterals("    ", limit, depth))
    assert twice.code == once.code  # an exploded literal spans lines: never exploded again
    return once.code.split("\n", 1)[1]


EXPLODE = [
    # a list one element per line, trailing comma, closing bracket at the statement's indent
    (f"self.layers_to_capture = [{LONG}, {LONG}, {LONG}]",
     f"    self.layers_to_capture = [\n        {LONG},\n        {LONG},\n        {LONG},\n    ]\n"),
    (f"t = ({LONG}, {LONG}, {LONG})", f"    t = (\n        {LONG},\n        {LONG},\n        {LONG},\n    )\n"),
    (f"s = {{{LONG}, {LONG}, {LONG}}}", f"    s = {{\n        {LONG},\n        {LONG},\n        {LONG},\n    }}\n"),
    (f"t = {LONG}, {LONG}, {LONG}", f"    t = {LONG}, {LONG}, {LONG}\n"),  # a bare tuple: left alone
    (f"f({LONG}, {LONG}, {LONG})", f"    f({LONG}, {LONG}, {LONG})\n"),  # a call: left alone (overlong_lines reports it)
    ("x = [1, 2]", "    x = [1, 2]\n"),  # fits: left alone
]


@pytest.mark.parametrize("statement, expected", EXPLODE, ids=[e[0][:12] for e in EXPLODE])
def test_explode_long_literals(statement, expected):
    out = _explode(statement)
    assert out == expected
    # at class-body depth (depth=1: the def sits in a class) what black writes; twice == once
    holder = "class C:\n    def f(self):\n" + "".join("    " + line + "\n" for line in out.splitlines())
    if out != f"    {statement}\n":  # what it exploded is what black writes
        assert_black_stable(holder)


def test_explode_counts_the_class_indent():
    """depth=1 (the default) means the def sits in a class: its statements stand at 8 columns."""
    fits = "x = [" + ", ".join(["aaaaaaaaaa"] * 6) + ", bb]"  # 80 columns + 8 == 88: fits
    over = fits.replace("bb]", "bbb]")  # 89
    assert len(fits) == 80
    assert _explode(fits) == f"    {fits}\n"
    assert "\n        aaaaaaaaaa,\n" in _explode(over)
    assert _explode(over, depth=0) == f"    {over}\n"  # a module-level def: 4 + 81 fits


def test_overlong_lines():
    func = cst.parse_statement(f"def f(self):\n    return g({LONG}, {LONG})\n    return 1\n")
    line = f"        return g({LONG}, {LONG})"
    assert len(line) == 80
    assert overlong_lines(func, "    ", 79) == [line]
    assert overlong_lines(func, "    ", 80) == []
    assert overlong_lines(func, "\t", 79) == ["\t\t" + line.lstrip()]  # a tab counts 4 columns, as 4 spaces do


# --------------------------------------------------------------------------- the tree's line length (patcher/read/style.py)

WIDE = Delegation(
    "set_eagle3_layers_to_capture",
    "language_model",
    params=_params("(self, layer_ids: Optional[List[int]] = None, strict=False)"),
)
# the one-line signature is 96 columns: black wraps it at 88, keeps it at 100
WIDE_DEF = "    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None, strict=False):"


@pytest.mark.parametrize(
    "width, signature",
    [
        (100, [WIDE_DEF]),
        (88, ["    def set_eagle3_layers_to_capture(", "        self, layer_ids: Optional[List[int]] = None, strict=False", "    ):"]),
        (
            60,
            [
                "    def set_eagle3_layers_to_capture(",
                "        self,",
                "        layer_ids: Optional[List[int]] = None,",
                "        strict=False,",
                "    ):",
            ],
        ),
    ],
    ids=["fits-100", "hugged-at-88", "exploded-at-60"],
)
def test_delegations_are_laid_out_at_the_trees_line_length(width, signature):
    from eaglepatch.read.style import FormatStyle

    assert len(WIDE_DEF) == 96
    source = "from typing import List, Optional\n\n\nclass Wrapper:\n    def forward(self):\n        pass\n"
    text = decode_source(Path("models/m.py"), "models/m.py", source.encode())
    written = apply_codemod(text, {"Wrapper": [WIDE]}, style=FormatStyle(line_length=width)).updated.decode()
    lines = written.splitlines()
    start = lines.index(signature[0])
    assert lines[start : start + len(signature)] == signature
    assert black.format_str(written, mode=black.Mode(line_length=width)) == written
    module = cst.parse_module(written)
    assert module.visit(RemoveDelegations(CodemodContext(), widths=(width, 88))).code == source
    if width != 88:  # read at another width, what was written is not eaglepatch's untouched text
        assert module.visit(RemoveDelegations(CodemodContext())).code == written


_NARROW = [
    WIDE,
    Delegation("get_embed_and_head_for_draft", "language_model", params=_params("(self, /, *, scale: float = 1.0, **options)")),
    Delegation("hot_token_id", "model", style="property"),
    Delegation("set_embed_and_head", "language_model", style="settable"),
    Delegation("set_embed", "m", params=_params("(self, hasattr, *args, **kwargs)")),
    Delegation(
        "set_eagle3_layers_to_capture",
        "language_model",
        params=_params(
            "(self, layer_ids: Optional[Sequence[Union[int, LayerSpec]]] = DEFAULT_AUX_LAYERS, /, capture: bool = True,"
            " *more_ids: int, strict: bool = False, **extra: Dict[str, Any])"
        ),
    ),
    Delegation(
        "load_kv",
        "language_model",
        params=_params("(self, mapping: Dict[str, Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]] = None)"),
        returns=_returns("EmbedAndHead"),
    ),
]


def test_black_keeps_what_is_written_at_every_line_length_from_50_to_120():
    """Black's layout is width-dependent in more ways than fit_call's three (an `if` condition that does
    not fit its own parentheses splits at hasattr's): checked by black itself, width by width."""
    from eaglepatch.read.style import FormatStyle

    source = decode_source(Path("models/m.py"), "models/m.py", b"class Wrapper:\n    def forward(self):\n        pass\n")
    moved = []
    for width in range(50, 121):
        written = apply_codemod(source, {"Wrapper": _NARROW}, style=FormatStyle(line_length=width)).updated.decode()
        if black.format_str(written, mode=black.Mode(line_length=width)) != written:
            moved.append(width)
    assert not moved, f"black rewrites what was written at line lengths {moved}"
