"""The speculative algorithms a tree defines, and each one's protocol (patcher/analyze/algorithms.py).

(source, expected) tables on tiny ``sglang/srt`` trees written to ``tmp_path``, shaped like SGLang's
own code (an enum with ``is_x()`` predicates in ``speculative/spec_info.py``, a model runner, the
aux-hidden-state setup with its hasattr chain): the enum and its predicates; what a condition tells
about each algorithm; the flags derived from the guards; the protocol read under each algorithm's
guards.  The integration tests at the end read real releases (0.5.9: no DFlash; 0.5.23: DFlash and
DSpark with their capture hooks, and EAGLE-3's protocol as extract_protocol reads it).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from eaglepatch.analyze.algorithms import Algorithms, Flag, Guards, find_enum, read_algorithms
from eaglepatch.analyze.context import RunContext
from eaglepatch.analyze.protocol import OneOf, extract_protocol
from eaglepatch.engines import locate_tree
from eaglepatch.read.source_cache import SourceCache
from eaglepatch.records import CallShape

SPEC_INFO = "speculative/spec_info.py"
RUNNER = "model_executor/model_runner.py"
SETUP = "model_executor/model_runner_components/attention_backend_setup.py"

# An enum shaped like SGLang's SpeculativeAlgorithm: members, a classmethod that maps None to the member
# for no speculation, predicates written as membership (==, in, or) and as exclusion (!=, not).
ENUM = """
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    DFLASH = auto()
    DSPARK = auto()
    EAGLE = auto()
    EAGLE3 = auto()
    NGRAM = auto()
    NONE = auto()
{extra_members}
    @classmethod
    def from_string(cls, name):
        if name is None:
            return cls.NONE
        return cls[name.upper()]

    def is_none(self) -> bool:
        return self == SpeculativeAlgorithm.NONE

    def is_speculative(self) -> bool:
        return self != SpeculativeAlgorithm.NONE

    def is_eagle(self) -> bool:
        # EAGLE3 is a kind of EAGLE
        return self in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3)

    def is_eagle3(self) -> bool:
        return self == SpeculativeAlgorithm.EAGLE3

    def is_dflash(self) -> bool:
        return self == SpeculativeAlgorithm.DFLASH

    def is_dspark(self) -> bool:
        return self == SpeculativeAlgorithm.DSPARK

    def is_dflash_family(self) -> bool:
        return self.is_dflash() or self.is_dspark()

    def is_ngram(self) -> bool:
        return self == SpeculativeAlgorithm.NGRAM

    def has_draft_kv(self) -> bool:
        return not self.is_ngram()
{extra_predicates}"""

# An EAGLE worker, so that the EAGLE-3 reading of these trees is never empty.
EAGLE_WORKER = """
class EAGLEWorker:
    def __init__(self, target_worker, draft_model_runner):
        embed, head = target_worker.model_runner.model.get_embed_and_head()
        draft_model_runner.model.set_embed_and_head(embed, head)
"""


def enum_source(extra_members: str = "", extra_predicates: str = "") -> str:
    return ENUM.format(extra_members=extra_members, extra_predicates=extra_predicates)


def build_tree(root: Path, files: dict[str, str], enum: str | None = None) -> Path:
    srt = root / "sglang" / "srt"
    (srt / "models").mkdir(parents=True)
    base = {"speculative/eagle_worker.py": EAGLE_WORKER}
    if enum is not None or SPEC_INFO not in files:
        base[SPEC_INFO] = enum if enum is not None else enum_source()
    for rel, text in {**base, **files}.items():
        path = srt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def algorithms_of(root: Path, **kwargs) -> Algorithms:
    tree = locate_tree(root)
    return read_algorithms(RunContext.fresh(tree), **kwargs)


# --------------------------------------------------------------------------- 1. the enum


@dataclass(frozen=True)
class EnumRow:
    id: str
    files: dict[str, str]
    name: str | None  # None: no enum found
    members: tuple[str, ...] = ()
    inactive: str | None = None
    predicates: dict[str, tuple[frozenset[str], bool]] | None = None  # name -> (holds for, positive); None: not checked


EVERY = frozenset({"DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NGRAM", "NONE"})
ENUM_ROWS = [
    EnumRow(
        "sglang-shape",
        {SPEC_INFO: enum_source()},
        "SpeculativeAlgorithm",
        ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NGRAM", "NONE"),
        "NONE",
        {
            "is_none": (frozenset({"NONE"}), True),
            "is_speculative": (EVERY - {"NONE"}, False),
            "is_eagle": (frozenset({"EAGLE", "EAGLE3"}), True),
            "is_eagle3": (frozenset({"EAGLE3"}), True),
            "is_dflash": (frozenset({"DFLASH"}), True),
            "is_dspark": (frozenset({"DSPARK"}), True),
            "is_dflash_family": (frozenset({"DFLASH", "DSPARK"}), True),
            "is_ngram": (frozenset({"NGRAM"}), True),
            "has_draft_kv": (EVERY - {"NGRAM"}, False),
        },
    ),
    EnumRow(
        "what-is-no-predicate",
        {SPEC_INFO: """
            from enum import IntEnum

            class Algo(IntEnum):
                A = 1
                B = 2

                def is_a(self) -> bool:
                    return self == Algo.A

                def matches(self, other) -> bool:
                    return self == other

                @property
                def is_b(self) -> bool:
                    return self == Algo.B

                def is_big(self) -> bool:
                    if self == Algo.B:
                        return True
                    return False

                def is_external(self) -> bool:
                    return self.name == "A"

                def is_plugin(self) -> bool:
                    return self.registry.has(self)
            """},
        "Algo",
        ("A", "B"),
        None,
        {"is_a": (frozenset({"A"}), True)},
    ),
    EnumRow(
        "the-enum-with-most-predicates",
        {
            "speculative/spec_input.py": """
                from enum import IntEnum, auto

                class SpecInputType(IntEnum):
                    DRAFT = auto()
                    VERIFY = auto()

                    def is_draft(self):
                        return self == SpecInputType.DRAFT
                """,
        },
        "SpeculativeAlgorithm",
        ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NGRAM", "NONE"),
        "NONE",
    ),
    EnumRow(
        "only-under-speculative",
        {SPEC_INFO: "X = 1\n", "managers/modes.py": enum_source()},
        None,
    ),
]


@pytest.mark.parametrize("row", ENUM_ROWS, ids=lambda r: r.id)
def test_the_enum_is_found_by_its_shape(tmp_path, row):
    tree = locate_tree(build_tree(tmp_path, row.files))
    enum = find_enum(SourceCache(tree.srt))
    if row.name is None:
        assert enum is None
        return
    assert enum is not None
    assert (enum.name, enum.members, enum.inactive) == (row.name, row.members, row.inactive)
    assert enum.algorithms == tuple(m for m in row.members if m != row.inactive)
    if row.predicates is not None:
        assert {p.name: (p.holds_for, p.positive) for p in enum.predicates.values()} == row.predicates


# --------------------------------------------------------------------------- 2. what a condition tells


@pytest.fixture
def guards(tmp_path) -> Guards:
    tree = locate_tree(build_tree(tmp_path, {}))
    enum = find_enum(SourceCache(tree.srt))
    assert enum is not None
    flags = {
        "dflash_use_aux_hidden_state": Flag("dflash_use_aux_hidden_state", frozenset({"DFLASH", "DSPARK"}), frozenset({"DFLASH", "DSPARK"}), ""),
        "is_dspark": Flag("is_dspark", frozenset({"DSPARK"}), frozenset({"DSPARK"}), ""),
    }
    return Guards(enum, flags, ambiguous=frozenset({"is_none"}))


# (condition, the branch where it is `holds`, algorithm, the algorithm may take it, it is the algorithm's code)
CONDITIONS = [
    ("algo.is_dflash()", True, "DFLASH", True, True),
    ("algo.is_dflash()", True, "DSPARK", False, False),
    ("not algo.is_dflash()", True, "DFLASH", False, False),
    ("not algo.is_dflash()", False, "DFLASH", True, True),  # the else of `if not is_dflash():`
    ("algo.is_dflash_family()", True, "DSPARK", True, True),
    ("algo.is_speculative()", True, "DFLASH", True, False),  # an exclusion names no algorithm
    ("algo.has_draft_kv()", True, "NGRAM", False, False),
    ("ready and algo.is_dflash()", True, "DFLASH", True, True),
    ("ready and not algo.is_dflash()", True, "DFLASH", False, False),
    ("algo.is_dflash() or algo.is_eagle3()", True, "EAGLE3", True, True),
    ("algo.is_dflash() or algo.is_eagle3()", False, "DFLASH", False, False),
    ("algo == SpeculativeAlgorithm.DSPARK", True, "DSPARK", True, True),
    ("algo == SpeculativeAlgorithm.DSPARK", True, "DFLASH", False, False),
    ("algo != SpeculativeAlgorithm.DSPARK", False, "DSPARK", True, True),
    ("algo in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DSPARK)", True, "DSPARK", True, True),
    ("algo not in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DSPARK)", True, "DSPARK", False, False),
    ('server_args.speculative_algorithm == "DFLASH"', True, "DFLASH", True, True),
    ('server_args.speculative_algorithm == "dflash"', True, "DSPARK", True, False),  # not a member's name
    ("self.dflash_use_aux_hidden_state", True, "DSPARK", True, True),
    ("self.dflash_use_aux_hidden_state", True, "NGRAM", False, False),
    ("not self.dflash_use_aux_hidden_state", True, "DFLASH", True, False),  # a false flag tells nothing
    ('is_dspark and hasattr(model, "set_dspark_layers_to_capture")', True, "DFLASH", False, False),
    ('is_dspark and hasattr(model, "set_dspark_layers_to_capture")', False, "DFLASH", True, False),
    ("self.moe_backend.is_none()", True, "DFLASH", True, False),  # a name other classes define: not read there
    ("self.spec_algorithm.is_none()", True, "DFLASH", False, False),
]


@pytest.mark.parametrize(("condition", "holds", "algorithm", "possible", "selects"), CONDITIONS)
def test_what_a_condition_tells(guards, condition, holds, algorithm, possible, selects):
    test = ast.parse(condition, mode="eval").body
    assert guards.possible(test, holds, algorithm) is possible
    assert guards.selects(test, holds, algorithm) is selects


# --------------------------------------------------------------------------- 3. flags


@dataclass(frozen=True)
class FlagRow:
    id: str
    files: dict[str, str]
    flags: dict[str, tuple[frozenset[str], frozenset[str]]]  # the flags whose name has one of `watch`: (may, names)
    watch: tuple[str, ...]


FLAG_ROWS = [
    FlagRow(
        "set-true-under-a-guard",
        {RUNNER: """
            class ModelRunner:
                def __init__(self, spec_algorithm, is_draft_worker):
                    self.spec_algorithm = spec_algorithm
                    self.dflash_use_aux_hidden_state = False
                    if self.spec_algorithm.is_dflash_family() and not is_draft_worker:
                        self.dflash_use_aux_hidden_state = True
            """},
        {"dflash_use_aux_hidden_state": (frozenset({"DFLASH", "DSPARK"}), frozenset({"DFLASH", "DSPARK"}))},
        ("dflash_use_aux_hidden_state",),
    ),
    FlagRow(
        "set-from-a-predicate-and-passed-on",
        {
            RUNNER: """
                class ModelRunner:
                    def __init__(self, spec_algorithm):
                        self.config = AuxConfig(is_dspark=spec_algorithm.is_dspark())

                    def init_attention(self):
                        configure(model=self.model, is_dspark=self.config.is_dspark)
                """,
            "model_executor/aux_config.py": """
                class AuxConfig:
                    is_dspark: bool = False
                """,
        },
        {"is_dspark": (frozenset({"DSPARK"}), frozenset({"DSPARK"}))},
        ("is_dspark",),
    ),
    FlagRow(
        "set-elsewhere-from-anything-else-is-no-flag",
        {
            RUNNER: """
                class ModelRunner:
                    def init(self):
                        if self.spec_algorithm.is_dflash():
                            self.use_side_path = True
                """,
            "managers/scheduler.py": """
                def configure(runner, server_args):
                    runner.use_side_path = server_args.side_path
                """,
        },
        {},
        ("use_side_path",),
    ),
    FlagRow(
        "set-false-elsewhere-is-still-a-flag",
        {
            RUNNER: """
                class ModelRunner:
                    def init(self):
                        if self.spec_algorithm.is_dflash():
                            self.use_side_path = True
                """,
            "managers/scheduler.py": """
                def reset(runner):
                    runner.use_side_path = False
                """,
        },
        {"use_side_path": (frozenset({"DFLASH"}), frozenset({"DFLASH"}))},
        ("use_side_path",),
    ),
    FlagRow(
        "true-under-a-flag-is-not-derived",
        {RUNNER: """
            class ModelRunner:
                def init(self):
                    if self.spec_algorithm.is_dflash():
                        self.dflash_capture = True
                    if self.dflash_capture:
                        self.warmed_up = True
            """},
        {"dflash_capture": (frozenset({"DFLASH"}), frozenset({"DFLASH"}))},
        ("dflash_capture", "warmed_up"),
    ),
    FlagRow(
        "true-for-every-algorithm-is-no-flag",
        {RUNNER: """
            class ModelRunner:
                def init(self):
                    self.speculating = self.spec_algorithm.is_speculative()
            """},
        {},
        ("speculating",),
    ),
]


@pytest.mark.parametrize("row", FLAG_ROWS, ids=lambda r: r.id)
def test_flags_derived_from_the_guards(tmp_path, row):
    found = algorithms_of(build_tree(tmp_path, row.files), only=())
    got = {f.name: (f.may, f.names) for f in found.flags if f.name in row.watch}
    assert got == row.flags


# --------------------------------------------------------------------------- 4. the protocol of each algorithm


@dataclass(frozen=True)
class Expect:
    file: str
    kind: str
    role: str
    required: bool = True
    shape: CallShape | None = None


def call(file: str, role: str, positional: int = 0, *keywords: str, required: bool = True) -> Expect:
    return Expect(file, "call", role, required, CallShape(positional, tuple(sorted(keywords))))


@dataclass(frozen=True)
class ProtocolRow:
    id: str
    files: dict[str, str]
    member: str
    uses: dict[str, tuple[Expect, ...]]  # algorithm -> every use it must record; () : not in its protocol
    one_of: dict[str, tuple[OneOf, ...]] | None = None  # algorithm -> its groups; None: not checked
    enum: str | None = None


CHAIN_SETUP = """
def configure_aux_hidden_state_capture(*, model, dflash_use_aux_hidden_state, layer_ids, is_dspark):
    if dflash_use_aux_hidden_state:
        if is_dspark and hasattr(model, "set_dspark_layers_to_capture"):
            model.set_dspark_layers_to_capture(layer_ids)
        elif hasattr(model, "set_dflash_layers_to_capture"):
            model.set_dflash_layers_to_capture(layer_ids)
        else:
            raise ValueError("the model implements neither capture hook")
"""
CHAIN_RUNNER = """
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import configure_aux_hidden_state_capture


class ModelRunner:
    def __init__(self, spec_algorithm, is_draft_worker):
        self.spec_algorithm = spec_algorithm
        self.dflash_use_aux_hidden_state = False
        if spec_algorithm.is_dflash_family() and not is_draft_worker:
            self.dflash_use_aux_hidden_state = True

    def init_attention_backends(self):
        configure_aux_hidden_state_capture(
            model=self.model,
            dflash_use_aux_hidden_state=self.dflash_use_aux_hidden_state,
            layer_ids=self.layer_ids,
            is_dspark=self.spec_algorithm.is_dspark(),
        )
"""
DFLASH_RUNNER = """
class ModelRunner:
    def init_aux_hidden_state_capture(self):
        if self.spec_algorithm.is_dflash():
            self.model.set_dflash_layers_to_capture(self.layer_ids)
"""
LOOKAHEAD_RUNNER = """
class ModelRunner:
    def init_lookahead(self):
        if self.spec_algorithm.is_lookahead():
            self.model.set_lookahead_window(self.window, strict=True)
"""
LOOKAHEAD_ENUM = enum_source(
    "    LOOKAHEAD = auto()\n",
    "\n    def is_lookahead(self) -> bool:\n        return self == SpeculativeAlgorithm.LOOKAHEAD\n",
)
WIDTH_HELPER = """
from typing import Protocol, runtime_checkable


@runtime_checkable
class _SupportsPackedWidth(Protocol):
    def get_aux_hidden_states_width(self) -> int: ...


def resolve_width(*, model, spec_algorithm, is_draft_worker):
    if not spec_algorithm.is_dflash_family() or is_draft_worker:
        return 0
    if isinstance(model, _SupportsPackedWidth):
        return model.get_aux_hidden_states_width()
    return 0
"""
PROJECTOR_WORKER = """
from typing import Protocol


class _SupportsProjection(Protocol):
    def set_target_projector(self, projector) -> bool: ...


def configure_projection(*, target_model, draft_model):
    if not isinstance(target_model, _SupportsProjection):
        return False
    return target_model.set_target_projector(draft_model.project)
"""
WORKER = "speculative/dflash_worker.py"

PROTOCOL_ROWS = [
    ProtocolRow(
        "runner-guarded-by-a-predicate",
        {RUNNER: DFLASH_RUNNER},
        "set_dflash_layers_to_capture",
        {"DFLASH": (call(RUNNER, "unknown", 1),), "DSPARK": (), "EAGLE3": (), "NGRAM": ()},
    ),
    ProtocolRow(
        "runner-guarded-by-a-derived-aux-flag",  # an aux-hidden-state guard says: the target
        {RUNNER: """
            class ModelRunner:
                def __init__(self):
                    self.dflash_use_aux_hidden_state = False
                    if self.spec_algorithm.is_dflash() and not self.is_draft_worker:
                        self.dflash_use_aux_hidden_state = True

                def init_aux_hidden_state_capture(self):
                    if self.dflash_use_aux_hidden_state:
                        if not hasattr(self.model, "set_dflash_layers_to_capture"):
                            raise ValueError("DFLASH needs set_dflash_layers_to_capture")
                        self.model.set_dflash_layers_to_capture(self.layer_ids)
            """},
        "set_dflash_layers_to_capture",
        {"DFLASH": (call(RUNNER, "target", 1),), "DSPARK": ()},
    ),
    ProtocolRow(
        "hasattr-chain-that-raises-dflash",  # DFLASH never takes the DSPARK branch: one hook, required
        {SETUP: CHAIN_SETUP, RUNNER: CHAIN_RUNNER},
        "set_dflash_layers_to_capture",
        {"DFLASH": (call(SETUP, "target", 1),), "DSPARK": (call(SETUP, "target", 1, required=False),)},
        {"DFLASH": (), "DSPARK": (OneOf(("set_dspark_layers_to_capture", "set_dflash_layers_to_capture"), f"{SETUP}:3", "target"),)},
    ),
    ProtocolRow(
        "hasattr-chain-that-raises-dspark",
        {SETUP: CHAIN_SETUP, RUNNER: CHAIN_RUNNER},
        "set_dspark_layers_to_capture",
        {"DFLASH": (), "DSPARK": (call(SETUP, "target", 1, required=False),), "NGRAM": ()},
    ),
    ProtocolRow(
        "a-module-named-for-the-algorithm-counts-whole",
        {WORKER: """
            class DFlashWorker:
                def __init__(self, target_worker):
                    self.noise_scale = target_worker.model_runner.model.get_noise_scale()
            """},
        "get_noise_scale",
        {"DFLASH": (call(WORKER, "target", 0),), "DSPARK": (), "EAGLE": ()},
    ),
    ProtocolRow(
        "a-branch-the-algorithm-never-takes-is-not-read",
        {WORKER: """
            class DFlashWorker:
                def __init__(self, target_worker, spec_algorithm):
                    target_model = target_worker.model_runner.model
                    if spec_algorithm.is_eagle3():
                        target_model.set_eagle_only()
            """},
        "set_eagle_only",
        {"DFLASH": (), "EAGLE3": (call(WORKER, "target", 0),)},
    ),
    ProtocolRow(
        "a-typing-protocol-tested-with-isinstance-is-optional",
        {"model_executor/model_runner_components/misc_utils.py": WIDTH_HELPER},
        "get_aux_hidden_states_width",
        {
            "DFLASH": (call("model_executor/model_runner_components/misc_utils.py", "target", 0, required=False),),  # not is_draft_worker
            "EAGLE": (),
        },
    ),
    ProtocolRow(
        "after-if-not-isinstance-return-is-optional",
        {"speculative/dspark_worker.py": PROJECTOR_WORKER},
        "set_target_projector",
        {"DSPARK": (call("speculative/dspark_worker.py", "target", 1, required=False),), "DFLASH": ()},
    ),
    ProtocolRow(
        "a-new-algorithm-in-the-enum-is-read-too",
        {RUNNER: LOOKAHEAD_RUNNER},
        "set_lookahead_window",
        {"LOOKAHEAD": (call(RUNNER, "unknown", 1, "strict"),), "DFLASH": ()},
        enum=LOOKAHEAD_ENUM,
    ),
]


@pytest.mark.parametrize("row", PROTOCOL_ROWS, ids=lambda r: r.id)
def test_protocol_of_each_algorithm(tmp_path, row):
    found = algorithms_of(build_tree(tmp_path, row.files, row.enum))
    for name, expected in row.uses.items():
        algorithm = found.get(name)
        assert algorithm is not None, (name, found.names)
        member = algorithm.protocol.members.get(row.member)
        if not expected:
            assert member is None, (name, member)
            continue
        assert member is not None, (name, sorted(algorithm.protocol.members))
        got = sorted((u.at.split(":")[0], u.kind, u.role, u.required, u.shape) for u in member.uses)
        assert got == sorted((e.file, e.kind, e.role, e.required, e.shape) for e in expected), (name, member.uses)
    for name, groups in (row.one_of or {}).items():
        assert found.get(name).one_of == groups, name  # type: ignore[union-attr]


def test_a_new_algorithm_is_picked_up_without_a_code_change(tmp_path):
    """The same runner read with and without the member in the enum."""
    without = algorithms_of(build_tree(tmp_path / "before", {RUNNER: LOOKAHEAD_RUNNER}))
    with_it = algorithms_of(build_tree(tmp_path / "after", {RUNNER: LOOKAHEAD_RUNNER}, LOOKAHEAD_ENUM))
    assert "LOOKAHEAD" not in without.names
    assert all("set_lookahead_window" not in a.protocol.members for a in without.algorithms)
    lookahead = with_it.get("LOOKAHEAD")
    assert lookahead is not None and lookahead.calls_hooks
    assert [g.name for g in lookahead.guards] == ["is_lookahead", "SpeculativeAlgorithm.LOOKAHEAD"]


def test_an_algorithm_that_calls_no_hooks_is_listed_empty(tmp_path):
    found = algorithms_of(build_tree(tmp_path, {RUNNER: DFLASH_RUNNER}))
    assert found.names == ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "NGRAM")  # NONE: no speculation
    ngram = found.get("NGRAM")
    assert ngram is not None and not ngram.calls_hooks and not ngram.protocol.members


def test_guards_and_modules_of_an_algorithm(tmp_path):
    found = algorithms_of(build_tree(tmp_path, {SETUP: CHAIN_SETUP, RUNNER: CHAIN_RUNNER, WORKER: "X = 1\n"}))
    dspark = found.get("DSPARK")
    dflash = found.get("DFLASH")
    assert dspark is not None and dflash is not None
    assert [(g.kind, g.name, g.holds_for) for g in dspark.guards] == [
        ("predicate", "is_dspark", ("DSPARK",)),
        ("predicate", "is_dflash_family", ("DFLASH", "DSPARK")),
        ("member", "SpeculativeAlgorithm.DSPARK", ("DSPARK",)),
        ("flag", "dflash_use_aux_hidden_state", ("DFLASH", "DSPARK")),
        ("flag", "is_dspark", ("DSPARK",)),
    ]
    assert dflash.modules == (WORKER,) and dspark.modules == ()
    assert found.get("EAGLE3").modules == found.get("EAGLE").modules == ("speculative/eagle_worker.py",)  # type: ignore[union-attr]


def test_a_protocol_given_is_taken_as_it_is(tmp_path):
    root = build_tree(tmp_path, {RUNNER: DFLASH_RUNNER})
    tree = locate_tree(root)
    cache = SourceCache(tree.srt)
    run = RunContext(tree, cache)
    eagle3 = extract_protocol(run)
    found = read_algorithms(run, given={"EAGLE3": eagle3})
    assert found.get("EAGLE3").protocol is eagle3 and found.get("EAGLE3").read_from == "given"  # type: ignore[union-attr]
    assert found.get("DFLASH").read_from == "guards"  # type: ignore[union-attr]


def test_a_tree_without_the_enum_has_no_algorithms(tmp_path):
    found = algorithms_of(build_tree(tmp_path, {}, enum="NOTHING = None\n"))
    assert found.enum is None and found.algorithms == () and found.flags == ()


# --------------------------------------------------------------------------- 5. real releases


_READ: dict[str, tuple] = {}


def _read_release(version: str) -> tuple:
    """(Algorithms read by guards alone, extract_protocol's EAGLE-3 protocol) of a release, once."""
    if version not in _READ:
        import sglang_releases

        tree = locate_tree(sglang_releases.site_packages(version))
        cache = SourceCache(tree.srt)
        run = RunContext(tree, cache)
        _READ[version] = (read_algorithms(run), extract_protocol(run))
    return _READ[version]


def _summary(protocol) -> dict:
    return {name: (m.kind, tuple(m.roles), m.required) for name, m in protocol.members.items()}


@pytest.mark.integration
def test_release_0_5_9_has_no_dflash():
    algorithms, eagle3 = _read_release("0.5.9")
    assert algorithms.enum is not None and algorithms.enum.name == "SpeculativeAlgorithm"
    assert not {"DFLASH", "DSPARK"} & set(algorithms.names)
    assert "EAGLE3" in algorithms.names
    assert not any("dflash" in m or "dspark" in m for a in algorithms.algorithms for m in a.protocol.members)
    guarded = _summary(algorithms.get("EAGLE3").protocol)  # type: ignore[union-attr]
    assert {n: guarded.get(n) for n in _summary(eagle3)} == _summary(eagle3)  # the guards find what extract_protocol finds


@pytest.mark.integration
def test_release_0_5_23_dflash_and_dspark_capture_hooks():
    algorithms, eagle3 = _read_release("0.5.23")
    dflash, dspark = algorithms.get("DFLASH"), algorithms.get("DSPARK")
    assert dflash is not None and dspark is not None
    capture = dflash.protocol.members["set_dflash_layers_to_capture"]
    assert (capture.kind, capture.role, capture.required) == ("call", "target", True)
    assert capture.called_at == [f"{SETUP}:66"]
    assert "set_dspark_layers_to_capture" not in dflash.protocol.members  # DFLASH never takes that branch
    assert dflash.one_of == ()
    group = OneOf(("set_dspark_layers_to_capture", "set_dflash_layers_to_capture"), f"{SETUP}:63", "target")
    assert dspark.one_of == (group,)
    assert all(not dspark.protocol.members[name].required for name in group.members)  # one of the two: each optional
    for algorithm in (dflash, dspark):
        assert "is_dflash_family" in {g.name for g in algorithm.guards}
        assert "dflash_use_aux_hidden_state" in {g.name for g in algorithm.guards if g.kind == "flag"}
    # what the guards read of EAGLE-3 holds what extract_protocol reads, each member as it reads it
    guarded = _summary(algorithms.get("EAGLE3").protocol)  # type: ignore[union-attr]
    assert {n: guarded.get(n) for n in _summary(eagle3)} == _summary(eagle3)
    assert "set_eagle3_layers_to_capture" in eagle3.members
