"""Stage 5: compare what EAGLE-3 expects with what a wrapper and its inner model(s) have."""

from __future__ import annotations

from patcher.records import MemberPlan, ModelPlan, Protocol, Wrapper

# Roles a wrapper must serve itself: it is the target model, and some calls do not say.
TARGET_ROLES = ("target", "unknown")


def plan_wrapper(protocol: Protocol, wrapper: Wrapper) -> ModelPlan:
    plan = ModelPlan(wrapper=wrapper, status="compliant")
    own = wrapper.cls.members
    for name, member in protocol.members.items():
        providers: list[str] = []
        lacking: list[str] = []
        defined = None
        attribute = None
        for inner in wrapper.inners:
            for cls in inner.classes:
                signature = cls.members.get(name)
                if signature is not None:
                    providers.append(cls.name)
                    if defined is None:
                        defined, attribute = signature, inner.attribute
                else:
                    lacking.append(cls.name)
        entry = MemberPlan(member, defined, attribute, providers, lacking)
        if name in own or (wrapper.forwards_dynamically and providers):
            plan.forwarded.append(entry)
        elif providers:
            plan.missing.append(entry)
        else:
            plan.not_delegable.append(entry)
    if wrapper.forwards_dynamically:
        plan.status = "dynamic"
        plan.reason = f"forwards every attribute through {wrapper.forwards_dynamically}"
    elif not wrapper.inners:
        plan.status = "unresolved"
        plan.reason = "no inner model found in __init__"
    elif all(not inner.classes for inner in wrapper.inners):
        plan.status = "unresolved"
        plan.reason = "; ".join(f"self.{i.attribute} = {u.why}" for i in wrapper.inners for u in i.unresolved)
    elif plan.missing:
        plan.status = "delegable"
        plan.reason = f"{len(plan.missing)} member(s) can be forwarded to the inner model"
    elif any(m.member.required and m.member.role in TARGET_ROLES for m in plan.not_delegable):
        plan.status = "not_delegable"
        names = [m.member.name for m in plan.not_delegable if m.member.required and m.member.role in TARGET_ROLES]
        inner = ", ".join(f"{i.attribute}: {'/'.join(c.name for c in i.classes)}" for i in wrapper.inners)
        plan.reason = f"the inner model ({inner}) lacks {', '.join(names)}: needs hand-written code"
    return plan
