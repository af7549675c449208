"""analyze/overlay.py on hand-built records: what a class looks like through one round's writes.

Each case: a class's resolved bases and own members, what the round writes ((file, class) -> members),
and what the derived class must show (member -> the "file:Base" it is pending from).  The records given
are never changed: the derived class is a new one, and a class whose bases get nothing is returned as is.
"""

from __future__ import annotations

import dataclasses

import pytest

from eaglepatch.analyze.overlay import WrittenOverlay
from eaglepatch.records import ClassInfo, InnerModel, Signature, Wrapper

GET, SET = "get_embed_and_head", "set_eagle3_layers_to_capture"


def sig(name: str, owner: str, file: str = "models/m.py", line: int = 1) -> Signature:
    return Signature(name, "method", owner, file, line)


def cls(name: str, bases: tuple[str, ...] = (), *own: str) -> ClassInfo:
    return ClassInfo(name, "models/m.py", 1, {m: sig(m, name) for m in own}, bases, ("nn.Module",))


CASES = [
    ("nothing written", cls("Sub", ("Base",)), {}, {}),
    ("the base written", cls("Sub", ("Base",)), {("models/b.py", "Base"): {GET: sig(GET, "Inner")}}, {GET: "models/b.py:Base"}),
    ("an own member is never shadowed", cls("Sub", ("Base",), GET), {("models/b.py", "Base"): {GET: sig(GET, "Inner")}}, {}),
    (
        "the nearest written base wins",
        cls("Sub", ("Mid", "Base")),
        {("models/b.py", "Base"): {GET: sig(GET, "A")}, ("models/m.py", "Mid"): {GET: sig(GET, "B")}},
        {GET: "models/m.py:Mid"},
    ),
    (
        "each member from its nearest writer",
        cls("Sub", ("Mid", "Base")),
        {("models/b.py", "Base"): {GET: sig(GET, "A"), SET: sig(SET, "A")}, ("models/m.py", "Mid"): {GET: sig(GET, "B")}},
        {GET: "models/m.py:Mid", SET: "models/b.py:Base"},
    ),
    ("a class written into itself gets nothing", cls("Base"), {("models/m.py", "Base"): {GET: sig(GET, "Inner")}}, {}),
    ("not a base: nothing", cls("Other", ("Unrelated",)), {("models/b.py", "Base"): {GET: sig(GET, "Inner")}}, {}),
    (
        # Qwen3.5: qwen3_5_text.py and qwen3_5.py each define Qwen3_5ForCausalLM; the backbone's base is the latter
        "another file's class of the base's name is not the base",
        dataclasses.replace(cls("Sub", ("Base",)), base_keys=("models/m.py:Base",)),
        {("models/b.py", "Base"): {SET: sig(SET, "Inner")}},
        {},
    ),
    (
        "the base's own file is",
        dataclasses.replace(cls("Sub", ("Base",)), base_keys=("models/b.py:Base",)),
        {("models/m.py", "Base"): {GET: sig(GET, "A")}, ("models/b.py", "Base"): {SET: sig(SET, "Inner")}},
        {SET: "models/b.py:Base"},
    ),
]


@pytest.mark.parametrize(("case", "info", "written", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_class_through_one_round_s_writes(case, info, written, expected):
    before = dataclasses.replace(info, members=dict(info.members))
    seen = WrittenOverlay(written).cls(info)
    assert dict(seen.pending) == expected
    for member, origin in expected.items():
        file, base = origin.split(":")
        assert seen.members[member] == written[(file, base)][member]
    assert set(seen.members) == set(info.members) | set(expected)
    assert info == before  # the record given is as it was
    assert (seen is info) == (not expected)


def test_a_wrapper_is_derived_with_its_inner_classes():
    base = {("models/b.py", "Base"): {GET: sig(GET, "Inner")}}
    inner = InnerModel("model", (cls("Sub", ("Base",)), cls("Plain")), 3)
    wrapper = Wrapper(cls("Outer", ("Base",)), (inner,), "models/m.py")
    seen = WrittenOverlay(base).wrapper(wrapper)
    assert seen is not wrapper and wrapper.cls.pending == {} and wrapper.inners[0].classes[0].pending == {}
    assert seen.cls.pending == {GET: "models/b.py:Base"}
    assert [dict(c.pending) for c in seen.inners[0].classes] == [{GET: "models/b.py:Base"}, {}]
    assert seen.inners[0].classes[1] is inner.classes[1]  # untouched classes are shared, not copied
    assert WrittenOverlay({}).wrapper(wrapper) is wrapper
