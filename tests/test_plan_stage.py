"""The analyze stage's plan on its own: patcher/analyze/plan.py on hand-built records (patcher/records.py), no tree.

Each test builds the smallest Protocol and Wrapper that shows one rule of `plan_wrapper` /
`_decide_fix` / `_set_status` and asserts on the plan records (status, gaps, fixes, blockers).
`call_misfit` is checked against Python itself: `inspect.Signature.bind` says whether a call
of each shape binds.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from types import SimpleNamespace

import pytest

from eaglepatch.analyze.plan import call_misfit, plan_wrapper, uses_for_role
from eaglepatch.records import (
    CallShape,
    ClassInfo,
    Fix,
    InnerModel,
    Protocol,
    ProtocolMember,
    Signature,
    Unresolved,
    Use,
    Wrapper,
)

GET = "get_embed_and_head"
SET = "set_embed_and_head"
CAPTURE = "set_eagle3_layers_to_capture"


def use(name: str, role: str = "target", required: bool = True, shape: CallShape | None = CallShape(0), at: str = "speculative/w.py:1") -> Use:
    return Use(name, "call" if shape is not None else "attribute", role, required, at, "if eagle3", shape)


def protocol(*uses: Use) -> Protocol:
    by_name: dict[str, list[Use]] = {}
    for u in uses:
        by_name.setdefault(u.name, []).append(u)
    members = {name: ProtocolMember(name, tuple(found)) for name, found in by_name.items()}
    return Protocol(members=members, consumers=("speculative/w.py",), general_interface={})


def sig(name: str, owner: str, kind: str = "method", file: str = "models/inner.py", line: int = 10) -> Signature:
    return Signature(name, kind, owner, file, line)


def cls(name: str, *members: str | Signature, file: str = "models/m.py", pending: dict | None = None) -> ClassInfo:
    table = {m.name if isinstance(m, Signature) else m: m if isinstance(m, Signature) else sig(m, name, file=file) for m in members}
    return ClassInfo(name, file, 1, table, (), ("nn.Module",), pending=pending or {})


def wrapper(outer: ClassInfo, *inners: InnerModel, dynamic: str | None = None) -> Wrapper:
    return Wrapper(outer, inners, outer.file, dynamic)


def inner(attribute: str, *classes: ClassInfo, unresolved: tuple = ()) -> InnerModel:
    return InnerModel(attribute, list(classes), 5, file="models/m.py", unresolved=list(unresolved))


def gaps(plan) -> dict[str, tuple]:
    return {m.member.name: (m.required, m.fix, m.blocker) for m in plan.missing}


INNER = cls("InnerModel", GET, SET, CAPTURE, file="models/inner.py")


# --------------------------------------------------------------------------- roles


def test_uses_for_role_counts_unknown_against_the_target():
    uses = [use(GET, "target"), use(GET, "unknown"), use(GET, "draft")]
    assert [u.role for u in uses_for_role(uses, "target")] == ["target", "unknown"]
    assert [u.role for u in uses_for_role(uses, "draft")] == ["draft"]
    assert uses_for_role(uses, "other") == []


def test_other_role_is_never_planned():
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("Vision"), inner("model", INNER)), role="other", role_reason="an encoder")
    assert (plan.status, plan.reason, plan.missing, plan.forwarded) == ("compliant", "an encoder", (), ())
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("Vision")), role="other")
    assert plan.reason == "not a generation model: EAGLE-3 never loads it"


@pytest.mark.parametrize(
    "use_role, plan_role, required",
    [("target", "target", True), ("unknown", "target", True), ("draft", "draft", True), ("unknown", "draft", None), ("target", "draft", None)],
)
def test_a_use_counts_only_for_its_role(use_role, plan_role, required):
    plan = plan_wrapper(protocol(use(CAPTURE, use_role)), wrapper(cls("W"), inner("model", INNER)), role=plan_role)
    if required is None:  # another role's concern: not a gap, and on a draft no companion either
        assert plan.missing == () and plan.status == "compliant"
        assert plan.reason == f"has every EAGLE-3 member a {plan_role} model needs"
    else:
        assert gaps(plan) == {CAPTURE: (True, Fix("delegate", "model"), None)}
        assert plan.status == "fixable"


def test_an_optional_use_is_not_a_gap():
    plan = plan_wrapper(protocol(use(GET, required=False)), wrapper(cls("W"), inner("model", INNER)))
    assert plan.missing == () and plan.status == "compliant"


# --------------------------------------------------------------------------- fixes


def test_delegation_to_the_inner_model():
    plan = plan_wrapper(protocol(use(GET), use(SET, shape=CallShape(2))), wrapper(cls("W"), inner("model", INNER)))
    assert gaps(plan) == {GET: (True, Fix("delegate", "model"), None), SET: (True, Fix("delegate", "model"), None)}
    assert plan.status == "fixable"
    assert plan.reason == "2 member(s) can be forwarded to the inner model"
    entry = plan.missing[0]
    assert (entry.defined.owner, entry.inner_attribute, entry.providers, entry.lacking) == ("InnerModel", "model", ("InnerModel",), ())
    assert plan.writes == plan.fixes == plan.missing


def test_own_member_is_forwarded_not_missing():
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("W", GET), inner("model", INNER)))
    assert plan.missing == ()
    assert [m.member.name for m in plan.forwarded] == [GET]
    assert plan.status == "compliant"


def test_companion_of_a_target_wrapper():
    """A draft-side hook (required of drafts) goes with a target wrapper's fixes, but never fails it."""
    has = plan_wrapper(protocol(use(SET, "draft", shape=CallShape(2))), wrapper(cls("W"), inner("model", INNER)))
    assert gaps(has) == {SET: (False, Fix("delegate", "model"), None)}
    assert has.status == "fixable" and has.required_gaps == ()
    lacks = plan_wrapper(protocol(use(SET, "draft", shape=CallShape(2))), wrapper(cls("W"), inner("model", cls("Bare", file="models/inner.py"))))
    assert lacks.missing == () and lacks.status == "compliant"  # not listed when it cannot be written
    draft = plan_wrapper(protocol(use(GET, "target")), wrapper(cls("W"), inner("model", INNER)), role="draft")
    assert draft.missing == ()  # companions are a target's


def test_first_inner_that_defines_it_is_the_one_delegated_to():
    bare = cls("Bare", file="models/bare.py")
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("vision", bare), inner("language_model", INNER, bare)))
    (entry,) = plan.missing
    assert entry.fix == Fix("delegate", "language_model")
    assert entry.providers == ("InnerModel",)
    assert entry.lacking == ("Bare", "Bare")  # one per class looked at


def test_what_this_run_writes_into_the_inner_class_counts():
    bare = cls("Bare", file="models/bare.py")
    written = {("models/bare.py", "Bare"): {GET: sig(GET, "Bare", file="models/bare.py")}}
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", bare)), written=written)
    assert gaps(plan) == {GET: (True, Fix("delegate", "model"), None)}
    assert plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", bare))).status == "needs_code"


def test_pending_base_fix_is_inherited_not_written():
    outer = cls("W", pending={GET: "models/base.py:Base"})
    plan = plan_wrapper(protocol(use(GET)), wrapper(outer, inner("model", INNER)))
    assert gaps(plan) == {GET: (True, Fix("inherit", "models/base.py:Base"), None)}
    assert plan.fixes and not plan.writes
    assert plan.status == "fixable"
    assert plan.reason == "0 member(s) can be forwarded to the inner model, 1 come with a fix apply writes into a base class"
    assert not Fix("inherit", "x").written_here and Fix("delegate", "x").written_here


def test_dynamic_forwarding():
    dynamic = "__getattr__ -> model"
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("W", "__getattr__"), inner("model", INNER), dynamic=dynamic))
    assert plan.missing == () and [m.member.name for m in plan.forwarded] == [GET]
    assert (plan.status, plan.reason) == ("dynamic", f"forwards every attribute through {dynamic}")
    # forwarding to a model that lacks the member forwards nothing: it is a gap
    bare = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", cls("Bare")), dynamic=dynamic))
    assert bare.status == "needs_code" and bare.forwarded == ()


# --------------------------------------------------------------------------- blockers


def test_blockers_when_nothing_can_be_written():
    missing = "the inner model (model: Bare) lacks it: needs hand-written code"
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", cls("Bare"))))
    assert gaps(plan) == {GET: (True, None, missing)}
    assert (plan.status, plan.reason) == ("needs_code", f"lacks {GET}: {missing}")

    nothing = plan_wrapper(protocol(use(GET)), wrapper(cls("W")))
    assert nothing.missing[0].blocker == "the class neither defines it nor holds a model that does: needs hand-written code"
    assert nothing.status == "needs_code"

    why = Unresolved("self.model = self._init(config)", "models/m.py:7", "a method returns it")
    unresolved = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", unresolved=(why,))))
    assert unresolved.missing[0].blocker == "the inner model could not be resolved: self.model = self._init(config) (models/m.py:7): a method returns it"
    assert unresolved.status == "unresolved"
    # resolved classes next to an unresolved construction: the class is known to lack it
    mixed = plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", cls("Bare"), unresolved=(why,))))
    assert mixed.status == "needs_code"


def test_two_gaps_one_blocked_names_both():
    plan = plan_wrapper(protocol(use(GET), use(CAPTURE)), wrapper(cls("W"), inner("model", cls("Half", GET, file="models/inner.py"))))
    assert gaps(plan)[GET][1] == Fix("delegate", "model")
    assert gaps(plan)[CAPTURE][1] is None
    assert plan.status == "needs_code"  # one blocked required gap fails the class
    assert plan.reason.startswith(f"lacks {CAPTURE}: the inner model (model: Half) lacks it")


def test_shape_misfit_blocks_a_delegation():
    shape = CallShape(1, ("layer_ids",))
    calls = []

    def misfit(signature, call_shape):
        calls.append((signature.owner, call_shape))
        return "layer_ids given twice"

    plan = plan_wrapper(protocol(use(CAPTURE, shape=shape, at="model_runner.py:9")), wrapper(cls("W"), inner("model", INNER)), shape_misfit=misfit)
    assert calls == [("InnerModel", shape)]
    assert gaps(plan)[CAPTURE] == (
        True,
        None,
        f"InnerModel.{CAPTURE} (models/inner.py:10) cannot take the call at model_runner.py:9 (1 positional, layer_ids=): layer_ids given twice",
    )
    assert plan.status == "needs_code"


def test_shape_is_not_checked_on_a_property_or_a_shapeless_use():
    prop = cls("Inner", sig(GET, "Inner", kind="property"))
    refuse = lambda s, c: "never"  # noqa: E731
    assert plan_wrapper(protocol(use(GET)), wrapper(cls("W"), inner("model", prop)), shape_misfit=refuse).status == "fixable"
    attribute = protocol(use(GET, shape=None))
    assert plan_wrapper(attribute, wrapper(cls("W"), inner("model", INNER)), shape_misfit=refuse).status == "fixable"


# --------------------------------------------------------------------------- a class that holds a bare backbone

BACKBONE = cls("Backbone", CAPTURE, file="models/backbone.py")


def fit(label: str | None, why: str = ""):
    synthesis = SimpleNamespace(reference=SimpleNamespace(label=label)) if label else None
    return SimpleNamespace(synthesis=synthesis, why=why, writes_plumbing=None, rides_on=None)


def test_bare_backbone_gets_a_learned_body():
    asked = []

    def synthesize(entry, w, decided):
        asked.append(entry.member.name)
        return fit("models/ref.py:RefForCausalLM")

    outer = cls("CausalLM", "lm_head")
    plan = plan_wrapper(protocol(use(GET), use(SET, "draft", shape=CallShape(2))), wrapper(outer, inner("model", BACKBONE)), synthesize=synthesize)
    assert asked == [GET]  # only what the role requires: the companion is not learned
    assert gaps(plan)[GET][1] == Fix("synthesize", "models/ref.py:RefForCausalLM")
    assert SET not in gaps(plan)  # a companion that cannot be written is not listed
    assert plan.status == "fixable"
    assert plan.reason == "1 member(s) can be written (1 learned from models/ref.py:RefForCausalLM)"


def test_bare_backbone_without_a_reference_is_blocked_even_if_the_backbone_has_it():
    outer = cls("CausalLM", "lm_head")
    plan = plan_wrapper(protocol(use(CAPTURE)), wrapper(outer, inner("model", BACKBONE)), synthesize=lambda e, w, d: fit(None, "no class of the tree has it"))
    assert gaps(plan)[CAPTURE][2] == (
        "holds a bare backbone (model: Backbone) beside its own lm_head: forwarding to the backbone's "
        f"{CAPTURE} (models/backbone.py:10) would skip the class's own part; no class of the tree has it"
    )
    assert plan.status == "needs_code"
    without = plan_wrapper(protocol(use(GET)), wrapper(outer, inner("model", BACKBONE)))
    assert gaps(without)[GET][2] == "holds a bare backbone (model: Backbone) beside its own lm_head: the hook needs a body written on the class"


TEXT_MODEL = cls("TextModel", "layers", "embed_tokens", file="models/text.py")
TEXT_BACKBONE = "holds a bare backbone (model: TextModel) beside its own lm_head"
HEADS_ONLY = "has its own lm_head and holds no backbone (markov_head: MarkovHead; confidence_head: ConfidenceHead: none has decoder layers)"

# (the models a causal LM holds beside its own lm_head, as the wrapper finder lists them; what the blocker says it holds)
BACKBONE_CASES = [
    pytest.param([inner("aligner", cls("Aligner", file="models/vit.py")), inner("model", TEXT_MODEL)], TEXT_BACKBONE, id="an-aligner-built-first"),
    pytest.param([inner("model", TEXT_MODEL), inner("logits_processor", cls("MuseLogitsProcessor"))], TEXT_BACKBONE, id="a-logits-processor"),
    pytest.param([inner("model", TEXT_MODEL), inner("embed_vision", cls("MultimodalEmbedder", "embed_tokens"))], TEXT_BACKBONE, id="a-vision-embedder"),
    pytest.param([inner("model", TEXT_MODEL), inner("resampler_model", cls("ResamplerModel"))], TEXT_BACKBONE, id="a-resampler"),
    pytest.param([inner("visual", cls("VisionModel", "layers")), inner("model", cls("TextModel"))], TEXT_BACKBONE, id="a-tower-with-layers"),
    pytest.param([inner("transformer", cls("GPTModel", "h"))], "holds a bare backbone (transformer: GPTModel) beside its own lm_head", id="one-model-whose-layers-are-not-named-so"),
    pytest.param([inner("markov_head", cls("MarkovHead")), inner("confidence_head", cls("ConfidenceHead"))], HEADS_ONLY, id="heads-only"),
]


@pytest.mark.parametrize("inners, holds", BACKBONE_CASES)
def test_the_blocker_names_the_attribute_that_is_the_backbone(inners, holds):
    plan = plan_wrapper(protocol(use(GET)), wrapper(cls("CausalLM", "lm_head"), *inners))
    assert gaps(plan)[GET][2] == f"{holds}: the hook needs a body written on the class"
    assert plan.status == "needs_code"


def test_an_inner_with_its_own_lm_head_is_not_a_bare_backbone():
    outer = cls("Wrapper", "lm_head")
    plan = plan_wrapper(protocol(use(GET)), wrapper(outer, inner("language_model", cls("CausalLM", "lm_head", GET))))
    assert gaps(plan)[GET][1] == Fix("delegate", "language_model")


# --------------------------------------------------------------------------- call_misfit against Python


SIGNATURES = [
    "(self)",
    "(self, a)",
    "(self, a, b=1)",
    "(self, a, /, b)",
    "(self, /, a)",
    "(self, *args)",
    "(self, **kwargs)",
    "(self, a, *, k)",
    "(self, a, *, k=1)",
    "(self, *, k)",
    "(self, a=None, *rest, k=2, **kw)",
]
SHAPES = [CallShape(0), CallShape(1), CallShape(2), CallShape(3), CallShape(0, ("a",)), CallShape(1, ("a",)),
          CallShape(0, ("k",)), CallShape(1, ("k",)), CallShape(1, ("b",)), CallShape(0, ("a", "b")), CallShape(0, ("z",))]


def _params(code: str) -> ast.arguments:
    node = ast.parse(code).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node.args


def binds(signature: str, shape: CallShape) -> bool:
    namespace: dict = {}
    exec(f"def f{signature}: pass", namespace)
    try:
        inspect.signature(namespace["f"]).bind(object(), *range(shape.positional), **{k: 0 for k in shape.keywords})
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("signature, shape", list(itertools.product(SIGNATURES, SHAPES)), ids=lambda v: str(v))
def test_call_misfit_is_pythons_binding(signature, shape):
    params = _params(f"def f{signature}: pass\n")
    why = call_misfit(params, shape)
    assert (why is None) == binds(signature, shape), why


def test_call_misfit_reasons_and_star_calls():
    params = _params("def f(self, a, *, k): pass\n")
    assert call_misfit(params, CallShape(2)) == "it takes 1 positional argument(s)"
    assert call_misfit(params, CallShape(1, ("a",))) == "a given twice"
    assert call_misfit(params, CallShape(1, ("z",))) == "it has no parameter z"
    assert call_misfit(params, CallShape(1)) == "its parameter k has no default"
    assert call_misfit(params, CallShape(9, ("z",), star=True)) is None  # *args at the call: cannot be checked
    static = _params("def f(a): pass\n")
    assert call_misfit(static, CallShape(1), is_method=False) is None
    assert call_misfit(static, CallShape(1)) == "it takes 0 positional argument(s)"


# --------------------------------------------------------------------------- a hook that rides on another's plumbing

DFLASH_HOOK = "set_dflash_layers_to_capture"


def test_a_hook_is_judged_with_the_plumbing_decided_before_it_in_the_same_plan():
    """The synthesizer sees the members of the class decided before (EAGLE-3's hook first), and what a
    hook is judged on is a field of its plan: nothing is kept between calls."""
    from eaglepatch.records import PlumbingPlan

    carried = PlumbingPlan("models/m.py:CausalLM", "model", reference="models/ref.py:Ref")
    seen: list[tuple[str, tuple[str, ...]]] = []

    def synthesize(entry, w, decided):
        seen.append((entry.member.name, tuple(m.member.name for m in decided)))
        found = fit("models/ref.py:Ref")
        if entry.member.name == CAPTURE:
            return SimpleNamespace(**{**vars(found), "writes_plumbing": carried})
        below = next((m.writes_plumbing for m in decided if m.member.name == CAPTURE), None)
        return SimpleNamespace(**{**vars(found), "rides_on": below})

    outer = cls("CausalLM", "lm_head")
    planned = plan_wrapper(protocol(use(CAPTURE), use(DFLASH_HOOK)), wrapper(outer, inner("model", BACKBONE)), synthesize=synthesize)
    assert seen == [(CAPTURE, ()), (DFLASH_HOOK, (CAPTURE,))]
    by_name = {m.member.name: m for m in planned.missing}
    assert by_name[CAPTURE].writes_plumbing == carried and by_name[CAPTURE].rides_on is None
    assert by_name[DFLASH_HOOK].rides_on == carried
    again = plan_wrapper(protocol(use(CAPTURE), use(DFLASH_HOOK)), wrapper(outer, inner("model", BACKBONE)), synthesize=synthesize)
    assert again == planned  # a second planning of the same class answers the same


@pytest.mark.parametrize("carrier_written, kept", [(True, True), (False, False)])
def test_a_riding_hook_is_taken_back_when_the_plumbing_it_rides_on_is_not_written(carrier_written, kept):
    from dataclasses import replace

    from eaglepatch.plumbing.judge import judge_riding
    from eaglepatch.records import PlumbingPlan

    carried = PlumbingPlan("models/m.py:CausalLM", "model", reference="models/ref.py:Ref")

    def synthesize(entry, w, decided):
        found = fit("models/ref.py:Ref")
        return SimpleNamespace(**{**vars(found), "writes_plumbing": carried if entry.member.name == CAPTURE else None,
                                  "rides_on": carried if entry.member.name == DFLASH_HOOK else None})

    outer = cls("CausalLM", "lm_head")
    planned = plan_wrapper(protocol(use(CAPTURE), use(DFLASH_HOOK)), wrapper(outer, inner("model", BACKBONE)), synthesize=synthesize)
    if not carrier_written:  # a later judgement took EAGLE-3's fix back, and its plumbing with it
        planned = replace(planned, missing=tuple(replace(m, fix=None, writes_plumbing=None) if m.member.name == CAPTURE else m for m in planned.missing))
    judged = {m.member.name: m for m in judge_riding([planned])[0].missing}
    assert (judged[DFLASH_HOOK].fix is not None) is kept
    if not kept:
        assert "plumbing written with set_eagle3_layers_to_capture" in judged[DFLASH_HOOK].blocker
