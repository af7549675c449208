"""The analyze stage's protocol alone: (consumer snippet, expected uses) tables for `extract_protocol`.

Each row writes a tiny ``sglang/srt`` tree to ``tmp_path``: a base EAGLE worker (so the
protocol is never empty) plus the row's snippets, shaped like SGLang's own consumers
(``speculative/eagle_worker.py``, ``model_executor/model_runner.py``, ...).  A row then
states, for one member, every use the stage must record: file, kind, role, required, call
shape and a piece of the guard.  ``uses=()`` means the member must not be in the protocol.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.protocol import extract_protocol
from eaglepatch.engines import locate_tree
from eaglepatch.records import CallShape, Protocol

WORKER = "speculative/eagle_worker.py"
RUNNER = "model_executor/model_runner.py"
GRAPH_RUNNER = "model_executor/cuda_graph_runner.py"
SETUP = "model_executor/model_runner_components/attention_backend_setup.py"

BASE_WORKER = """
class EAGLEWorker:
    def __init__(self, target_worker, draft_model_runner):
        self.target_worker = target_worker
        self.draft_model_runner = draft_model_runner
        embed, head = self.target_worker.model_runner.model.get_embed_and_head()
        self.draft_model_runner.model.set_embed_and_head(embed, head)
"""


@dataclass(frozen=True)
class Expect:
    """One use the stage must record."""

    file: str
    kind: str
    role: str
    required: bool = True
    shape: CallShape | None = None
    guard: str = ""  # a piece of Use.guard
    line: int = 0  # when set, the line Use.at must name


@dataclass(frozen=True)
class Row:
    id: str
    files: dict[str, str]
    member: str
    uses: tuple[Expect, ...]


def call(
    file: str, role: str, positional: int = 0, *keywords: str, star: bool = False, guard: str = "", required: bool = True, line: int = 0
) -> Expect:
    return Expect(file, "call", role, required, CallShape(positional, tuple(sorted(keywords)), star), guard, line)


def build_tree(root: Path, files: dict[str, str]) -> Path:
    srt = root / "sglang" / "srt"
    (srt / "models").mkdir(parents=True)
    for rel, text in {WORKER: BASE_WORKER, **files}.items():
        path = srt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def protocol_of(root: Path) -> Protocol:
    tree = locate_tree(root)
    return extract_protocol(RunContext.fresh(tree))


def assert_uses(protocol: Protocol, member: str, expected: tuple[Expect, ...]) -> None:
    if not expected:
        assert member not in protocol.members, protocol.members.get(member)
        return
    assert member in protocol.members, f"{member} not in {sorted(protocol.members)} (set aside: {protocol.general_interface})"
    uses = sorted(protocol.members[member].uses, key=lambda u: u.at)
    got = [(u.at.split(":")[0], u.kind, u.role, u.required, u.shape) for u in uses]
    want = [(e.file, e.kind, e.role, e.required, e.shape) for e in sorted(expected, key=lambda e: e.file)]
    assert got == want, [f"{u.at} {u.kind} {u.role} guard={u.guard!r}" for u in uses]
    for use, expect in zip(uses, sorted(expected, key=lambda e: e.file)):
        assert expect.guard in use.guard, (use.at, use.guard)
        assert not expect.line or use.at == f"{expect.file}:{expect.line}", (use.at, expect.line)


def check(tmp_path: Path, row: Row) -> None:
    assert_uses(protocol_of(build_tree(tmp_path, row.files)), row.member, row.uses)


# --------------------------------------------------------------------------- 1. call shapes

SHAPES = [
    Row("no-arguments", {}, "get_embed_and_head", (call(WORKER, "target", 0),)),
    Row("positional", {}, "set_embed_and_head", (call(WORKER, "draft", 2),)),
    Row(
        "keywords-sorted",
        {"speculative/eagle_utils_eagle.py": """
            def share(draft_model, embed):
                draft_model.set_embed(embed, scale=2, dtype=None)
            """},
        "set_embed",
        (call("speculative/eagle_utils_eagle.py", "draft", 1, "dtype", "scale"),),
    ),
    Row(
        "star-args",
        {"speculative/eagle_utils_eagle.py": """
            def share(target_model, args, kwargs):
                target_model.prepare(*args)
                target_model.prepare(**kwargs)
            """},
        "prepare",
        (call("speculative/eagle_utils_eagle.py", "target", 0, star=True),
         call("speculative/eagle_utils_eagle.py", "target", 0, star=True)),
    ),
    Row(
        "attribute-read-has-no-shape",
        {"speculative/eagle_utils_eagle.py": """
            def hot(draft_model):
                return draft_model.hot_token_id
            """},
        "hot_token_id",
        (Expect("speculative/eagle_utils_eagle.py", "attribute", "draft"),),
    ),
]


@pytest.mark.parametrize("row", SHAPES, ids=lambda r: r.id)
def test_call_shapes(tmp_path, row):
    check(tmp_path, row)


# --------------------------------------------------------------------------- 2. the unknown role

RUNNER_AUX = """
class ModelRunner:
    def initialize(self):
        if self.eagle_use_aux_hidden_state:
            self.model.set_eagle3_layers_to_capture(
                self.eagle_aux_hidden_state_layer_ids
            )
"""

GRAPH_NOT_DRAFT = """
class CudaGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        if model_runner.spec_algorithm.is_eagle3() and not model_runner.is_draft_worker:
            self.model_runner.model.set_eagle3_layers_to_capture()
"""

RUNNER_CALLS_SETUP = """
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import configure_capture


class ModelRunner:
    def init_attention_backends(self):
        configure_capture(
            model=self.model,
            eagle_use_aux_hidden_state=self.eagle_use_aux_hidden_state,
            layer_ids=self.eagle_aux_hidden_state_layer_ids,
        )
"""

SETUP_HELPER = """
def configure_capture(*, model, eagle_use_aux_hidden_state, layer_ids):
    if eagle_use_aux_hidden_state:
        if not hasattr(model, "set_eagle3_layers_to_capture"):
            raise ValueError(f"{model.__class__.__name__} cannot capture")
        model.set_eagle3_layers_to_capture(layer_ids)
"""

RUNNER_DRAFT = """
class ModelRunner:
    def initialize(self):
        if self.spec_algorithm.is_eagle3() and self.is_draft_worker:
            self.model.set_draft_layers(3)
"""

RUNNER_DRAFT_EARLY_RETURN = """
class ModelRunner:
    def initialize(self):
        if self.is_draft_worker:
            return
        if self.spec_algorithm.is_eagle3():
            self.model.capture_for_draft()
"""

RUNNER_DRAFT_ELSE = """
class ModelRunner:
    def initialize(self):
        if self.spec_algorithm.is_eagle3():
            if self.is_draft_worker:
                pass
            else:
                self.model.capture_for_draft()
"""

RUNNER_SILENT = """
class ModelRunner:
    def initialize(self):
        if self.spec_algorithm.is_eagle3():
            self.model.prepare_eagle3()
"""

ROLES = [
    Row("aux-hidden-state-guard", {RUNNER: RUNNER_AUX}, "set_eagle3_layers_to_capture",
        (call(RUNNER, "target", 1, guard="if self.eagle_use_aux_hidden_state"),)),
    Row("negated-draft-check", {GRAPH_RUNNER: GRAPH_NOT_DRAFT}, "set_eagle3_layers_to_capture",
        (call(GRAPH_RUNNER, "target", 0, guard="and not model_runner.is_draft"),)),
    Row("aux-guard-inside-helper", {RUNNER: RUNNER_CALLS_SETUP, SETUP: SETUP_HELPER}, "set_eagle3_layers_to_capture",
        (call(SETUP, "target", 1, guard="if eagle_use_aux_hidden_state"),)),
    Row("positive-draft-check", {RUNNER: RUNNER_DRAFT}, "set_draft_layers", (call(RUNNER, "draft", 1),)),
    Row("early-return-on-draft", {RUNNER: RUNNER_DRAFT_EARLY_RETURN}, "capture_for_draft", (call(RUNNER, "target", 0),)),
    Row("else-of-draft-check", {RUNNER: RUNNER_DRAFT_ELSE}, "capture_for_draft", (call(RUNNER, "target", 0),)),
    Row("nothing-says", {RUNNER: RUNNER_SILENT}, "prepare_eagle3", (call(RUNNER, "unknown", 0),)),
]


@pytest.mark.parametrize("row", ROLES, ids=lambda r: r.id)
def test_unknown_role_is_resolved_from_guards(tmp_path, row):
    check(tmp_path, row)


# --------------------------------------------------------------------------- 3. guards as SGLang writes them

EARLY_RETURN = """
class ModelRunner:
    def init_eagle3(self):
        if not self.spec_algorithm.is_eagle3():
            return
        self.target_model.capture_aux(self.layer_ids)
"""

STRING_COMPARISON = """
class ModelRunner:
    def initialize(self, speculative_algorithm):
        if speculative_algorithm == "EAGLE3":
            self.target_model.capture_aux(self.layer_ids)
        if speculative_algorithm != "EAGLE3":
            self.target_model.plain_only()
"""

WALRUS = """
class ModelRunner:
    def initialize(self):
        if (m := self.target_model) and self.spec_algorithm.is_eagle3():
            m.capture_aux(self.layer_ids)
"""

NOT_IN_CONJUNCTION = """
class ModelRunner:
    def initialize(self, x):
        if x and not self.spec_algorithm.is_eagle3():
            self.target_model.plain_only()
        if not x and self.spec_algorithm.is_eagle3():
            self.target_model.capture_aux(self.layer_ids)
"""

DOCSTRING_AND_COMMENT = '''
class ModelRunner:
    def load(self):
        """Shares weights later: the EAGLE worker calls model.get_embed_and_head()."""
        self.loaded = True  # see target_model.get_embed_and_head() in the worker
'''

HASATTR_PROBE = """
class ModelRunner:
    def load(self, embed, head):
        if hasattr(self.model, "set_embed_and_head"):
            self.model.set_embed_and_head(embed, head)
        return hasattr(self.model, "get_embed_and_head") and self.model.get_embed_and_head()
"""

GUARDS = [
    Row("early-return", {RUNNER: EARLY_RETURN}, "capture_aux",
        (call(RUNNER, "target", 1, guard="after if not self.spec_algorithm.is_eagle3(): return"),)),
    Row("string-comparison", {RUNNER: STRING_COMPARISON}, "capture_aux",
        (call(RUNNER, "target", 1, guard='if speculative_algorithm == "EAGLE3"'),)),
    Row("string-comparison-negated", {RUNNER: STRING_COMPARISON}, "plain_only", ()),
    Row("walrus-alias", {RUNNER: WALRUS}, "capture_aux", (call(RUNNER, "target", 1),)),
    Row("not-inside-conjunction", {RUNNER: NOT_IN_CONJUNCTION}, "plain_only", ()),
    Row("negated-other-conjunct", {RUNNER: NOT_IN_CONJUNCTION}, "capture_aux",
        (call(RUNNER, "target", 1, guard="if not x and self.spec_algorithm.is_eagle3()"),)),
    Row("docstring-and-comment-are-not-uses", {RUNNER: DOCSTRING_AND_COMMENT}, "get_embed_and_head",
        (call(WORKER, "target", 0),)),
    Row("hasattr-probed-runner-use-keeps-member", {RUNNER: HASATTR_PROBE}, "set_embed_and_head",
        (call(WORKER, "draft", 2),)),
    Row("hasattr-and-chain-keeps-member", {RUNNER: HASATTR_PROBE}, "get_embed_and_head",
        (call(WORKER, "target", 0),)),
]


@pytest.mark.parametrize("row", GUARDS, ids=lambda r: r.id)
def test_guards_as_sglang_writes_them(tmp_path, row):
    check(tmp_path, row)


def test_unprobed_runner_use_is_still_general_interface(tmp_path):
    """The hasattr rule is narrow: a plain runner use still sets a member aside."""
    runner = """
    class ModelRunner:
        def load(self, embed, head):
            self.model.set_embed_and_head(embed, head)
    """
    protocol = protocol_of(build_tree(tmp_path, {RUNNER: runner}))
    assert "set_embed_and_head" not in protocol.members
    assert protocol.general_interface["set_embed_and_head"] == f"{RUNNER}:3"


# --------------------------------------------------------------------------- 4. conditions and lines as written

UTILS = "speculative/eagle_utils_eagle.py"

ELIF_PARENTHESIZED = """
class ModelRunner:
    def initialize(self, x):
        if x:
            pass
        elif (
            self.spec_algorithm.is_eagle3()  # EAGLE-3 only
        ):
            self.target_model.capture_aux(self.layer_ids)
"""

ELSE_THEN_IF = """
class ModelRunner:
    def initialize(self, x):
        if not self.spec_algorithm.is_eagle3():
            pass
        else:
            if x:
                self.target_model.capture_aux(self.layer_ids)
"""

ELIF_UNDER_ELSE = """
class ModelRunner:
    def initialize(self, x):
        if not self.spec_algorithm.is_eagle3():
            pass
        elif x:
            self.target_model.capture_aux(self.layer_ids)
"""

MULTI_LINE_CONDITION = """
class ModelRunner:
    def initialize(self, x):
        if (
            self.spec_algorithm.is_eagle3()
            and x
        ):
            self.target_model.capture_layers(self.layer_ids)
"""

MULTI_LINE_CHAINS = """
def share(target_model, draft_model, x):
    embed = (
        target_model
        .embed_tokens
    )
    draft_model.load(
        embed,
        target_model
            .lm_head,
    )
    if (
        x
        and target_model.ready
    ):
        return embed
"""

# A use in the header of a `for` is placed on the line it is written on (`layers`: line 6), not
# moved down by the comment and blank lines above the `for` as the libcst reading placed it (8).
FOR_HEADER = """
def count(target_model):
    total = 0
    # every layer

    for layer in (
        target_model.layers
    ):
        total += 1
    return total
"""

HASATTR_CHAIN = """
class ModelRunner:
    def load(self, x):
        if self.spec_algorithm.is_eagle3():
            if hasattr(self.target_model, "warm") and hasattr(self.target_model, "cool") and self.target_model.cool():
                pass
            if x and hasattr(self.target_model, "warm") and self.target_model.warm():
                pass
            if hasattr(self.target_model, "heat") or self.target_model.heat():
                pass
"""

FSTRING_CONDITION = """
class ModelRunner:
    def initialize(self, algorithm, n):
        if algorithm == f"EAGLE{n}":
            self.target_model.capture_aux(self.layer_ids)
        if algorithm != f"EAGLE{n}":
            self.target_model.plain_only()
"""

GETATTR_NAMES = """
def hot(draft_model):
    ids = getattr(draft_model, "hot_token_ids", None)
    return getattr(draft_model, "hot_" "map"), ids
"""

WRITTEN = [
    Row("elif-parenthesized-condition", {RUNNER: ELIF_PARENTHESIZED}, "capture_aux",
        (call(RUNNER, "target", 1, guard="if ( self.spec_algorithm.is_eagle3() # EAGLE-3 only )", line=8),)),
    Row("else-then-if", {RUNNER: ELSE_THEN_IF}, "capture_aux",
        (call(RUNNER, "target", 1, guard="else of: if not self.spec_algorithm.is_eagle3()", line=7),)),
    Row("elif-reads-as-else-then-if", {RUNNER: ELIF_UNDER_ELSE}, "capture_aux",
        (call(RUNNER, "target", 1, guard="else of: if not self.spec_algorithm.is_eagle3()", line=6),)),
    Row("multi-line-condition-guard", {RUNNER: MULTI_LINE_CONDITION}, "capture_layers",
        (call(RUNNER, "target", 1, guard="if ( self.spec_algorithm.is_eagle3() and x )", line=7),)),
    Row("chain-line-is-the-member-name", {UTILS: MULTI_LINE_CHAINS}, "embed_tokens",
        (Expect(UTILS, "attribute", "target", line=4),)),
    Row("chain-inside-call-arguments", {UTILS: MULTI_LINE_CHAINS}, "lm_head", (Expect(UTILS, "attribute", "target", line=9),)),
    Row("use-inside-multi-line-condition", {UTILS: MULTI_LINE_CHAINS}, "ready", (Expect(UTILS, "attribute", "target", line=13),)),
    Row("for-header-on-its-own-line", {UTILS: FOR_HEADER}, "layers", (Expect(UTILS, "attribute", "target", line=6),)),
    Row("hasattr-left-of-and-chain", {RUNNER: HASATTR_CHAIN}, "cool", (call(RUNNER, "target", 0, required=False, line=4),)),
    Row("hasattr-middle-of-and-chain", {RUNNER: HASATTR_CHAIN}, "warm", (call(RUNNER, "target", 0, required=False, line=6),)),
    Row("hasattr-in-or-proves-nothing", {RUNNER: HASATTR_CHAIN}, "heat", (call(RUNNER, "target", 0, line=8),)),
    Row("fstring-says-eagle", {RUNNER: FSTRING_CONDITION}, "capture_aux",
        (call(RUNNER, "target", 1, guard='if algorithm == f"EAGLE{n}"', line=4),)),
    Row("fstring-says-not-eagle", {RUNNER: FSTRING_CONDITION}, "plain_only", ()),
    Row("getattr-with-default-is-optional", {UTILS: GETATTR_NAMES}, "hot_token_ids",
        (Expect(UTILS, "attribute", "draft", required=False, line=2),)),
    Row("getattr-of-concatenated-strings-is-not-read", {UTILS: GETATTR_NAMES}, "hot_map", ()),
]


@pytest.mark.parametrize("row", WRITTEN, ids=lambda r: r.id)
def test_conditions_and_lines_as_written(tmp_path, row):
    check(tmp_path, row)


def test_protocol_stage_parses_nothing_with_libcst(tmp_path, monkeypatch):
    """The consumer code is read with CPython's parser: libcst's parser and positions are never asked."""
    import libcst
    import libcst.metadata

    def refuse(*args, **kwargs):
        raise AssertionError("the protocol stage called libcst")

    monkeypatch.setattr(libcst, "parse_module", refuse)
    monkeypatch.setattr(libcst.metadata, "MetadataWrapper", refuse)
    protocol = protocol_of(build_tree(tmp_path, {RUNNER: MULTI_LINE_CONDITION, UTILS: MULTI_LINE_CHAINS}))
    assert {"capture_layers", "embed_tokens", "get_embed_and_head"} <= set(protocol.members)



# --------------------------------------------------------------------------- real releases


@pytest.mark.integration
@pytest.mark.parametrize("release", ["sglang_059", "sglang_latest"])
def test_set_eagle3_layers_to_capture_on_real_releases(release, request):
    protocol = protocol_of(request.getfixturevalue(release))
    member = protocol.members["set_eagle3_layers_to_capture"]
    assert member.role == "target", [(u.at, u.role, u.guard) for u in member.uses]
    assert {u.role for u in member.uses} == {"target"}
    calls = [u for u in member.uses if u.kind == "call"]
    assert calls and all(u.shape is not None and not u.shape.star and u.shape.positional <= 1 for u in calls), calls
    assert any(u.shape.positional == 1 for u in calls), calls  # the runner passes the layer ids
