"""vLLM profile, analyze stage: the registered wrappers, the language model each holds, and a plan per wrapper.

A wrapper is a class registered in `_TEXT_GENERATION_MODELS` or `_MULTIMODAL_MODELS` whose own or
inherited `__init__` assigns a language model (`self.language_model`, `self.llm`, `self.decoder`,
`self.text_model`, or what its `get_language_model` returns).  The plan says what the runtime check
`isinstance(model, SupportsEagle3)` and the hook calls need of it, in records.ModelPlan terms, so
report.py, preview.py and write.py serve it unchanged."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...errors import EaglepatchError
from ...read.statements import walk
from ...records import ClassInfo, Fix, InnerModel, MemberPlan, ModelPlan, Protocol, Signature, Status, Unresolved, Wrapper
from ...selection import DEFAULT_MODEL, Analysis, EngineTraits
from .protocol import BASE, MIXIN, VllmProtocol
from .tree import INTERFACES, TARGET_DICTS, ClassRef, VllmTree, is_stub, methods, module_of

if TYPE_CHECKING:

    from ...engine import Resolved
    from ...records import Progress

LM_ATTRIBUTES = ("language_model", "llm", "decoder", "text_model")
_BUILDERS = ("init_vllm_registered_model", "initialize_model")


@dataclass(frozen=True)
class Held:
    """What one `self.<attr> = ...` in a wrapper's __init__ builds."""

    attribute: str
    line: int
    file: str  # the file of the class whose __init__ assigns it
    construct: str
    classes: tuple[ClassRef, ...] = ()
    dynamic: str = ""  # why the checkpoint's config decides the class
    unresolved: str = ""  # why it could not be followed


@dataclass(frozen=True)
class Decoder:
    """The language model's `self.model`, and whether the `forward` bound on it collects aux hidden states."""

    cls: ClassRef | None
    why: str = ""  # when cls is None
    forward: ClassRef | None = None  # the class whose forward is bound
    forward_line: int = 0
    collects: bool = False
    mixin: bool = False


class VllmPlanner:
    def __init__(self, tree: VllmTree, protocol: VllmProtocol, records: Protocol):
        self.tree = tree
        self.protocol = protocol
        self.records = records
        self.dicts = tree.registry()
        self.chains: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (file, class) -> its bases', nearest first
        self.every: dict[str, tuple[str, str]] = {}
        for entries in self.dicts.values():
            self.every.update(entries)

    # -- selection -----------------------------------------------------------------------------

    def registered(self, modules: set[str] | None = None) -> list[tuple[str, str, ClassRef]]:
        """(dict, architecture, class) for every target entry (whose registry module is one of `modules`,
        when given), each class once (first architecture)."""
        return [(name, arch, ref) for name, arch, _, ref in self._entries(modules)]

    def _entries(self, modules: set[str] | None = None) -> list[tuple[str, str, str, ClassRef]]:
        out: list[tuple[str, str, str, ClassRef]] = []
        seen: set[tuple[str, str]] = set()
        for name in TARGET_DICTS:
            for arch, (module, cls) in self.dicts.get(name, {}).items():
                if modules is not None and module_of(module) not in modules:
                    continue
                for ref in self.tree.resolve(module_of(module), cls):
                    key = (ref.module.name, ref.name)
                    if key not in seen:
                        seen.add(key)
                        out.append((name, arch, module_of(module), ref))
        return out

    def select(self, selectors: list[str] | None) -> list[tuple[str, str, ClassRef]]:
        if selectors is None:
            return self.registered()
        named = {self.registry_module(s.partition(":")[0]) for s in selectors}
        entries = self._entries(named)  # the module a registry entry names (the class may live elsewhere)
        out: list[tuple[str, str, ClassRef]] = []
        for selector in selectors:
            module, _, cls = selector.partition(":")
            name = self.registry_module(module)
            picked = [(g, a, r) for g, a, m, r in entries if m == name and (not cls or r.name == cls)]
            if not picked:
                where = name.replace(".", "/").removeprefix("vllm/") + ".py"
                registered = sorted({module_of(m) for m, _ in self.every.values()})
                if name not in registered:
                    short = sorted({m.rsplit(".", 1)[-1] for m in registered})
                    near = difflib.get_close_matches(module.rsplit(".", 1)[-1], short, n=1, cutoff=0.75)
                    hint = f"did you mean --model {near[0]}?" if near else "pass --model MODULE[:CLASS] with a model module the registry names"
                    raise EaglepatchError(f"--model {module}: the registry names no such model module; {hint}")
                raise EaglepatchError(
                    f"no class registered in {' or '.join(TARGET_DICTS)} is defined there"
                    + (f" under the name {cls}" if cls else "")
                    + "; pass --model MODULE[:CLASS] with a module under model_executor/models",
                    path=where,
                )
            out += [e for e in picked if e not in out]
        return out

    def registry_module(self, module: str) -> str:
        """The registry's module a `--model` selector names: `llama` (under model_executor/models), a
        dotted module, or a per-platform package's name (`dots3_note` for `vllm.models.dots3_note`)
        where exactly one module the registry names ends so."""
        name = module_of(module.removesuffix(".py").replace("/", "."))
        registered = {module_of(m) for m, _ in self.every.values()}
        if name in registered or "." in module:
            return name
        tails = [m for m in registered if m.endswith("." + module)]
        return tails[0] if len(tails) == 1 else name

    # -- plans ---------------------------------------------------------------------------------

    def plans(self, selectors: Sequence[str] | None, progress: Progress | None = None) -> list[ModelPlan]:
        entries = self.select(list(selectors) if selectors is not None else None)
        plans = []
        for group, arch, ref in entries:
            if progress is not None:
                progress(ref.module.rel, len(entries))
            plans.append(self.plan(group, arch, ref))
        return self.inherit(plans)

    def inherit(self, plans: list[ModelPlan]) -> list[ModelPlan]:
        """A wrapper whose base class gets the same fix in this run inherits it (one fix in the parent,
        as upstream writes it): its fix becomes `inherit` from the nearest such base listed first.  A
        parent planned earlier is seen as it was derived (what it still writes itself)."""
        writers = [(p.wrapper.path, p.wrapper.cls.name) for p in plans if p.writes]
        planned: dict[tuple[str, str], ModelPlan] = {}
        for p in plans:
            planned.setdefault((p.wrapper.path, p.wrapper.cls.name), p)  # the first of a key, as it was looked up
        derived: dict[tuple[str, str], ModelPlan] = {}
        out = []
        for plan in plans:
            key = (plan.wrapper.path, plan.wrapper.cls.name)
            chain = self.chains.get(key, []) if plan.writes else []
            missing = list(plan.missing)
            for parent_key in writers:
                if parent_key not in chain:
                    continue
                parent = derived.get(parent_key) or planned[parent_key]
                if parent is plan:
                    continue
                given = {(m.member.name, m.fix.kind) for m in parent.writes if m.fix is not None}
                inherit = Fix("inherit", f"{parent.wrapper.path}:{parent.wrapper.cls.name}")
                missing = [
                    replace(m, fix=inherit) if m.fix is not None and (m.member.name, m.fix.kind) in given else m for m in missing
                ]
            derived[key] = plan if missing == list(plan.missing) else replace(plan, missing=tuple(missing))
            out.append(derived[key])
        return out

    def plan(self, group: str, arch: str, ref: ClassRef) -> ModelPlan:
        held = self.held(ref)
        if not held:
            return self.plan_own(group, arch, ref)
        info = self.class_info(ref)
        inners = tuple(
            InnerModel(
                h.attribute,
                tuple(self.class_info(c) for c in h.classes),
                h.line,
                conditional=len(held) > 1 or len(h.classes) > 1,
                file=h.file,
                unresolved=(Unresolved(h.construct, f"{h.file}:{h.line}", h.unresolved),) if h.unresolved else (),
            )
            for h in held
        )
        wrapper = Wrapper(info, inners, ref.module.rel)
        registered = f"registered in {group} as {arch}"
        nominal = self.nominal(ref)
        setter = self.protocol.setter
        # hooks the class needs written: in stub releases every hook the MRO lacks a body for; with
        # defaults, the setter when the language model overrides it and its decoder is no EagleModelMixin
        needed = [h.name for h in self.protocol.hooks if self.protocol.stubs and self.concrete(ref, h.name) is None]
        if nominal and not needed:
            forwarded = self.base_forwarded()
            reason = self.compliant_reason()
            over = self.over_declared(held)
            if over is None:
                return ModelPlan(wrapper, "compliant", "target", registered, forwarded=forwarded, reason=reason)
            # the check passes, but the layers set reach a decoder that collects nothing
            holder, why = over
            setter_member = self.records.members[setter.name]
            reason = f"over-declared: {self.has_it()}, but {why}"
            gap = MemberPlan(setter_member, None, holder, required=True, blocker=reason, uses=setter_member.uses)
            return ModelPlan(wrapper, "needs_code", "target", registered, (gap,), forwarded, reason)
        status, why, attribute, lm, decoder = self.judge(held)
        new = methods(ref.node).get("__new__")
        if new is not None:  # a dispatcher: __new__ returns the class the checkpoint's version picks
            status, why, lm, decoder = "dynamic", f"{ref.name}.__new__ ({ref.module.rel}:{new.lineno}) picks the class to build from the checkpoint", None, None
        missing: list[MemberPlan] = []
        if status == "fixable":
            assert lm is not None and decoder is not None and attribute is not None
            overridden = self.concrete(lm, setter.name, outside_interfaces=True)
            if not self.protocol.stubs and overridden is not None and not decoder.mixin and self.concrete(ref, setter.name, outside_interfaces=True) is None:
                needed.append(setter.name)
            for name in needed:
                hook = self.records.members[name]
                defined = self.concrete(lm, name)
                if defined is None:
                    status, why = "needs_code", f"{lm.name} ({lm.at}) has no body for {name} to forward to"
                    break
                signature = Signature(name, "method", defined.name, defined.module.rel, methods(defined.node)[name].lineno)
                missing.append(MemberPlan(hook, signature, attribute, (lm.name,), (), True, Fix("delegate", attribute), uses=hook.uses))
        if status != "fixable":
            missing = []
        if not nominal:
            base = self.records.members[BASE]
            if status == "fixable":
                entry = MemberPlan(base, None, attribute, required=True, uses=base.uses, fix=Fix("base", BASE))
            else:
                entry = MemberPlan(base, None, attribute, required=True, uses=base.uses, blocker=why)
            missing.insert(0, entry)
        elif status != "fixable":
            for name in needed:
                hook = self.records.members[name]
                missing.append(MemberPlan(hook, None, attribute, required=True, blocker=why, uses=hook.uses))
        if status == "fixable":
            what = [f"add {BASE} to its bases"] if not nominal else []
            what += [f"forward {m.member.name} to self.{attribute}" for m in missing if m.fix is not None and m.fix.kind == "delegate"]
            reason = f"{' and '.join(what)}: its language model {lm.name if lm else ''} supports EAGLE-3 ({why})"
        else:
            reason = why
        return ModelPlan(wrapper, status, "target", registered, tuple(missing), reason=reason)

    def plan_own(self, group: str, arch: str, ref: ClassRef) -> ModelPlan:
        """A registered class that holds no language model is its own target: it needs SupportsEagle3 through its
        MRO (the runner's supports_eagle3 check) and a decoder, its `self.model`, whose forward collects the
        aux hidden states the hooks choose; the base alone fixes it only where the Protocol's defaults reach
        that decoder (an EagleModelMixin, or a setter of its own)."""
        wrapper = Wrapper(self.class_info(ref), (), ref.module.rel)
        registered = f"registered in {group} as {arch}"
        setter = self.records.members[self.protocol.setter.name]
        needed = [h.name for h in self.protocol.hooks if self.protocol.stubs and self.concrete(ref, h.name) is None]
        marked = self.marked_language_target(ref)
        decoder = self.decoder(ref) if marked is None else self.target_decoder(marked)
        which = "its decoder self.model" if marked is None else f"the language model it marks ({marked.name}, {marked.at})"
        forward = f"{decoder.forward.name}.forward ({decoder.forward.module.rel}:{decoder.forward_line})" if decoder.forward is not None else ""
        collects_nothing = f"{forward}, the forward of {which}, collects no aux hidden states (no _maybe_add_hidden_state call, no read of aux_hidden_state_layers)"
        no_body = f"{', '.join(needed)} {'has' if len(needed) == 1 else 'have'} no body in it: needs hand-written code"

        def hook_gaps(why: str) -> list[MemberPlan]:
            return [MemberPlan(self.records.members[n], None, None, required=True, blocker=why, uses=self.records.members[n].uses) for n in needed]

        if self.nominal(ref):
            forwarded = self.base_forwarded()
            if needed:
                why = f"{self.has_it()}, but {no_body}"
                return ModelPlan(wrapper, "needs_code", "target", registered, tuple(hook_gaps(why)), forwarded, why)
            if decoder.forward is not None and not decoder.collects:
                why = f"over-declared: {self.has_it()}, but {collects_nothing}: needs hand-written code" + ("" if self.protocol.duck else ", or the base removed")
                gap = MemberPlan(setter, None, "model", required=True, blocker=why, uses=setter.uses)
                return ModelPlan(wrapper, "needs_code", "target", registered, (gap,), forwarded, why)
            return ModelPlan(wrapper, "compliant", "target", registered, forwarded=forwarded, reason=self.compliant_reason())
        base = self.records.members[BASE]
        lacks = f"no {BASE} in its MRO"
        if decoder.cls is None:
            why = f"{lacks}, and its decoder could not be followed ({decoder.why}): the base alone is not shown to work"
        elif decoder.forward is None:
            why = f"{lacks}, and {decoder.cls.name} ({decoder.cls.at}), its decoder, has no forward in the tree"
        elif not decoder.collects:
            why = f"{lacks}, and {collects_nothing}: needs hand-written code"
        elif needed:
            why = f"{lacks}, and {no_body}"
        elif not decoder.mixin and self.concrete(ref, setter.name, outside_interfaces=True) is None:
            why = f"{lacks}, and {decoder.cls.name} ({decoder.cls.at}) is no {MIXIN} and {ref.name} does not override {setter.name}: the Protocol's default would assert"
        else:
            entry = MemberPlan(base, None, None, required=True, uses=base.uses, fix=Fix("base", BASE))
            return ModelPlan(wrapper, "fixable", "target", registered, (entry,), reason=f"add {BASE} to its bases: {forward} collects aux hidden states")
        missing = [MemberPlan(base, None, None, required=True, uses=base.uses, blocker=why), *hook_gaps(why)]
        return ModelPlan(wrapper, "needs_code", "target", registered, tuple(missing), reason=why)

    def marked_language_target(self, ref: ClassRef) -> ClassRef | None:
        """The class a multimodal model marks as its language model while it builds it (`with
        self._mark_composite_model(..., language_targets=X)` or `self._mark_language_model(...,
        targets=X)` in its `__init__` chain), when the class answers `get_language_model` (the
        Protocol's defaults ask it): that module, however deep it is built, is what the hooks reach."""
        if self.concrete(ref, "get_language_model") is None:
            return None
        for cls in self.tree.mro(ref):
            init = methods(cls.node).get("__init__")
            for node in walk(init) if init is not None else ():
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or not _is_self(node.func.value):
                    continue
                keyword = {"_mark_composite_model": "language_targets", "_mark_language_model": "targets"}.get(node.func.attr)
                value = next((k.value for k in node.keywords if k.arg == keyword), None) if keyword else None
                if value is not None:
                    found = self.tree.resolve(cls.module.name, ast.unparse(value))
                    return found[0] if len(found) == 1 else None
        return None

    def target_decoder(self, target: ClassRef) -> Decoder:
        """The Protocol's defaults hand the layers to the marked module's `model` when it has one, else
        to the module itself."""
        if self._init_assignment(self.tree.mro(target), "model") is not None:
            return self.decoder(target)
        if not self.protocol.unwraps_language_model:
            setter = self.protocol.setter
            return Decoder(None, f"{BASE}.{setter.name}'s default ({self.protocol.rel}:{setter.line}) needs the language model's .model, and {target.name} ({target.at}) has none")
        return self._decoder_of(target)

    def over_declared(self, held: list[Held]) -> tuple[str, str] | None:
        """(LM attribute, why) when a language model the wrapper holds has a decoder whose `forward`
        collects no aux hidden states: EAGLE-3 would get none from it. A dynamic or unresolved language
        model, or a decoder that could not be followed, says nothing."""
        for h in held:
            if h.dynamic or h.unresolved:
                continue
            for lm in h.classes:
                decoder = self.decoder(lm)
                if decoder.cls is None or decoder.forward is None or decoder.collects:
                    continue
                forward = f"{decoder.forward.name}.forward ({decoder.forward.module.rel}:{decoder.forward_line})"
                return h.attribute, (
                    f"{forward}, the forward of the decoder self.model of self.{h.attribute} ({lm.name}), collects no aux "
                    "hidden states (no _maybe_add_hidden_state call, no read of aux_hidden_state_layers): "
                    "needs hand-written code, or the base removed"
                )
        return None

    def judge(self, held: list[Held]) -> tuple[Status, str, str | None, ClassRef | None, Decoder | None]:
        """(status, why, LM attribute, LM class, its decoder) of the language model(s) a wrapper holds."""
        for h in held:
            if h.dynamic:
                return "dynamic", f"self.{h.attribute} ({h.file}:{h.line}): {h.dynamic}", h.attribute, None, None
        for h in held:
            if h.unresolved:
                return "unresolved", f"self.{h.attribute} = {h.construct} ({h.file}:{h.line}): {h.unresolved}", h.attribute, None, None
        verdict: tuple[Status, str, str | None, ClassRef | None, Decoder | None] | None = None
        for h in held:
            for lm in h.classes:
                result = self.judge_lm(h, lm)
                if verdict is None or result[0] != "fixable":
                    verdict = result
                if result[0] != "fixable":
                    return result
        assert verdict is not None, "a resolved Held has classes"
        return verdict

    def judge_lm(self, h: Held, lm: ClassRef) -> tuple[Status, str, str | None, ClassRef | None, Decoder | None]:
        if not self.nominal(lm):
            return "needs_code", f"its language model {lm.name} ({lm.at}) does not support EAGLE-3: no {BASE} in its MRO", h.attribute, lm, None
        decoder = self.decoder(lm)
        if decoder.cls is None:
            return "unresolved", f"the decoder of {lm.name} ({lm.at}) could not be followed: {decoder.why}", h.attribute, lm, decoder
        if decoder.forward is None:
            return "unresolved", f"{decoder.cls.name} ({decoder.cls.at}), the decoder of {lm.name}, has no forward in the tree", h.attribute, lm, decoder
        forward = f"{decoder.forward.name}.forward ({decoder.forward.module.rel}:{decoder.forward_line})"
        if not decoder.collects:
            return (
                "needs_code",
                f"{forward}, the forward of {lm.name}'s decoder self.model, collects no aux hidden states "
                "(no _maybe_add_hidden_state call, no read of aux_hidden_state_layers): needs hand-written code",
                h.attribute,
                lm,
                decoder,
            )
        if not self.protocol.stubs and not decoder.mixin and self.concrete(lm, self.protocol.setter.name, outside_interfaces=True) is None:
            return (
                "needs_code",
                f"{decoder.cls.name} ({decoder.cls.at}) is no {MIXIN} and {lm.name} does not override "
                f"{self.protocol.setter.name}: the Protocol's default would assert",
                h.attribute,
                lm,
                decoder,
            )
        return "fixable", f"{lm.name} has {BASE} in its MRO and {forward} collects aux hidden states", h.attribute, lm, decoder

    # -- facts ---------------------------------------------------------------------------------

    def nominal(self, ref: ClassRef) -> bool:
        """The base through the MRO; where the runner checks by duck typing (no Protocol), there is none to have."""
        return self.protocol.duck or any(c.module.name == INTERFACES and c.name == BASE for c in self.tree.mro(ref))

    def has_it(self) -> str:
        """What makes a class pass the runner's check, said in a reason."""
        if self.protocol.duck:
            return f"the runner checks no base in this release (it calls {self.protocol.setter.name} and {self.protocol.getter.name} by name)"
        return f"{BASE} is in its MRO"

    def compliant_reason(self) -> str:
        if self.protocol.duck:
            hooks = f"{self.protocol.setter.name} and {self.protocol.getter.name}"
            return f"it has both hooks the runner calls by name ({hooks}); this release checks no base"
        return f"{BASE} is in its MRO" + (" and both hooks have a body" if self.protocol.stubs else "")

    def base_forwarded(self) -> tuple[MemberPlan, ...]:
        """The base as a member a nominal class has, for the report (nothing where the runner checks no base)."""
        if self.protocol.duck:
            return ()
        base = self.records.members[BASE]
        return (MemberPlan(base, None, None, required=True, uses=base.uses),)

    def concrete(self, ref: ClassRef, name: str, outside_interfaces: bool = False) -> ClassRef | None:
        """The class of the MRO whose definition of `name` a call reaches, when it has a body."""
        for cls in self.tree.mro(ref):
            func = methods(cls.node).get(name)
            if func is None:
                continue
            if outside_interfaces and cls.module.name == INTERFACES:
                return None
            return None if is_stub(func) and cls.module.name == INTERFACES else cls
        return None

    def class_info(self, ref: ClassRef) -> ClassInfo:
        chain = self.tree.mro(ref)
        self.chains[(ref.module.rel, ref.name)] = [(c.module.rel, c.name) for c in chain[1:]]
        members: dict[str, Signature] = {}
        for hook in self.protocol.hooks:
            owner = self.concrete(ref, hook.name)
            if owner is not None:
                members[hook.name] = Signature(hook.name, "method", owner.name, owner.module.rel, methods(owner.node)[hook.name].lineno)
        external = [ast.unparse(b) for c in chain for b in c.node.bases if not self.tree.resolve(c.module.name, ast.unparse(b))]
        return ClassInfo(ref.name, ref.module.rel, ref.node.lineno, members, tuple(c.name for c in chain[1:]), tuple(dict.fromkeys(external)))

    def held(self, ref: ClassRef) -> list[Held]:
        """The language model(s) the nearest `__init__` of the MRO that assigns one builds."""
        for cls in self.tree.mro(ref):
            attributes = set(LM_ATTRIBUTES) | _getter_attributes(cls.node)
            init = methods(cls.node).get("__init__")
            if init is None:
                continue
            found = []
            for node in walk(init):
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and _is_self(target.value) and target.attr in attributes:
                        if _reads_self(node.value, target.attr):
                            continue  # `self.language_model = cast(X, self.language_model)`: the same model
                        found.append(self.follow(ref, cls, init, target.attr, node.value, node.lineno))
            if found:
                return found
        return []

    def follow(self, wrapper: ClassRef, owner: ClassRef, func: ast.AST, attribute: str, value: ast.expr, line: int) -> Held:
        held = Held(attribute, line, owner.module.rel, _short_code(value))
        if isinstance(value, ast.Name):  # `language_model = init_...(...)` just before
            local = [n.value for n in walk(func) if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)]
            if len(local) != 1:
                return replace(held, unresolved=f"the local {value.id} is assigned {len(local)} times in the method")
            value = local[0]
        if not isinstance(value, ast.Call):
            return replace(held, unresolved="not a call that builds a model")
        return self.built_by(held, wrapper, owner.module.name, value, 0)

    def built_by(self, held: Held, wrapper: ClassRef, module: str, call: ast.Call, depth: int) -> Held:
        """`held` with the classes `call` builds, or why the checkpoint decides them, or why they are not found."""
        name = ast.unparse(call.func)
        tail = name.rsplit(".", 1)[-1]
        if tail == "init_vllm_registered_model":
            archs = next((k.value for k in call.keywords if k.arg == "architectures"), None)
            if archs is None:
                return replace(held, dynamic="init_vllm_registered_model without architectures=: the checkpoint's config picks the model")
            return self.by_architecture(held, archs)
        if tail == "initialize_model":
            model_class = next((k.value for k in call.keywords if k.arg == "model_class"), None)
            if model_class is None:
                return replace(held, dynamic="initialize_model without model_class=: the checkpoint's config picks the model")
            classes = tuple(self.tree.resolve(module, ast.unparse(model_class)))
            if not classes:
                return replace(held, classes=classes, unresolved=f"model_class={ast.unparse(model_class)} is no class found in the tree")
            return replace(held, classes=classes)
        if isinstance(call.func, ast.Attribute) and _is_self(call.func.value) and depth < 3:
            for cls in self.tree.mro(wrapper):
                method = methods(cls.node).get(call.func.attr)
                if method is None:
                    continue
                returned = [r.value for r in walk(method) if isinstance(r, ast.Return) and isinstance(r.value, ast.Call)]
                if len(returned) == 1:
                    return self.built_by(held, wrapper, cls.module.name, returned[0], depth + 1)
                return replace(held, unresolved=f"{cls.name}.{call.func.attr} ({cls.module.rel}:{method.lineno}) does not return one model construction")
            return replace(held, unresolved=f"no method {call.func.attr} found on {wrapper.name}")
        classes = tuple(self.tree.resolve(module, name))
        if not classes:
            return replace(held, classes=classes, unresolved=f"{name} is no class found in the tree")
        return replace(held, classes=classes)

    def by_architecture(self, held: Held, archs: ast.expr) -> Held:
        try:
            names = ast.literal_eval(archs)
        except ValueError:
            return replace(held, dynamic=f"architectures={ast.unparse(archs)}: the checkpoint's config picks the model")
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
            return replace(held, unresolved=f"architectures={ast.unparse(archs)} is not a list of names")
        classes = held.classes
        for arch in names:
            entry = self.every.get(arch)
            if entry is None:
                return replace(held, classes=classes, unresolved=f"architecture {arch} is not in the registry")
            classes += tuple(self.tree.resolve(module_of(entry[0]), entry[1]))
        if not classes:
            return replace(held, classes=classes, unresolved=f"the registry's class for {', '.join(names)} is not found in the tree")
        return replace(held, classes=classes)

    def decoder(self, lm: ClassRef) -> Decoder:
        found = self._init_assignment(self.tree.mro(lm), "model")
        if found is None:
            return Decoder(None, f"no self.model assigned in the __init__ of {lm.name} or its bases")
        cls, node = found
        held = Held("model", node.lineno, cls.module.rel, _short_code(node.value))
        if isinstance(node.value, ast.Call):
            held = self.built_by_member(held, lm, cls.module.name, node.value)
        else:
            held = replace(held, unresolved="not a call that builds a model")
        if held.unresolved or held.dynamic or len(held.classes) != 1:
            why = held.unresolved or held.dynamic or f"{held.construct} names {len(held.classes)} classes"
            return Decoder(None, f"self.model = {held.construct} ({held.file}:{held.line}): {why}")
        return self._decoder_of(held.classes[0])

    def _decoder_of(self, cls: ClassRef) -> Decoder:
        """`cls` as the decoder the hooks reach: the forward bound on it, whether it collects, whether
        it is an EagleModelMixin."""
        chain = self.tree.mro(cls)
        mixin = any(c.module.name == INTERFACES and c.name == MIXIN for c in chain)
        for owner in chain:
            forward = methods(owner.node).get("forward")
            if forward is not None:
                return Decoder(cls, forward=owner, forward_line=forward.lineno, collects=self.collects(cls), mixin=mixin)
        return Decoder(cls, mixin=mixin)

    def _init_assignment(self, chain: Sequence[ClassRef], attribute: str) -> tuple[ClassRef, ast.Assign] | None:
        """The first `self.<attribute> = ...` of the nearest `__init__` of `chain` that assigns it."""
        for cls in chain:
            init = methods(cls.node).get("__init__")
            for node in walk(init) if init is not None else ():
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and _is_self(t.value) and t.attr == attribute for t in node.targets):
                    return cls, node
        return None

    def collects(self, cls: ClassRef, depth: int = 0) -> bool:
        """Whether the `forward` bound on `cls` collects aux hidden states: itself, through `super().forward`
        (Mistral's decoder hands its call to Llama's), or through a module of its own it calls
        (`self.layers(...)`, a decoder-stack class built in `__init__`: Plamo 3's)."""
        chain = self.tree.mro(cls)
        owners = [c for c in chain if "forward" in methods(c.node)]
        for index, owner in enumerate(owners):
            forward = methods(owner.node)["forward"]
            if self._method_collects(chain, forward, depth):
                return True
            if not _calls_super_forward(forward) or index + 1 == len(owners):
                return False
        return False

    def _method_collects(self, chain: Sequence[ClassRef], func: ast.FunctionDef | ast.AsyncFunctionDef, depth: int) -> bool:
        """`func` collects, or a method of the class it calls does (`self._stock_forward(...)`: Mistral
        Large 4's), or a module the class builds that it calls."""
        if _collects(func):
            return True
        if depth >= 2:
            return False
        for attribute in _called_modules(func):
            method = next((methods(c.node)[attribute] for c in chain if attribute in methods(c.node)), None)
            if method is not None:
                if method is not func and self._method_collects(chain, method, depth + 1):
                    return True
                continue
            built = self._built_in_init(chain, attribute)
            if built is not None and self.collects(built, depth + 1):
                return True
        return False

    def _built_in_init(self, chain: Sequence[ClassRef], attribute: str) -> ClassRef | None:
        """The one class the nearest `__init__` of `chain` builds for `self.<attribute> = X(...)`."""
        found = self._init_assignment(chain, attribute)
        if found is None or not isinstance(found[1].value, ast.Call):
            return None
        classes = self.tree.resolve(found[0].module.name, ast.unparse(found[1].value.func))
        return classes[0] if len(classes) == 1 else None

    def built_by_member(self, held: Held, lm: ClassRef, module: str, call: ast.Call) -> Held:
        """`self.model = X(...)`, `self._init_model(...)` (a method returning X(...)) or `self.model_cls(...)`
        (a class attribute `model_cls = X`)."""
        func = call.func
        if isinstance(func, ast.Attribute) and _is_self(func.value):
            for cls in self.tree.mro(lm):
                for node in cls.node.body:
                    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == func.attr for t in node.targets):
                        classes = tuple(self.tree.resolve(cls.module.name, ast.unparse(node.value)))
                        if not classes:
                            return replace(held, classes=classes, unresolved=f"{func.attr} = {ast.unparse(node.value)} is no class found in the tree")
                        return replace(held, classes=classes)
        return self.built_by(held, lm, module, call, 0)

def _collects(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in walk(func):
        if isinstance(node, ast.Attribute) and node.attr in ("_maybe_add_hidden_state", "aux_hidden_state_layers") and isinstance(node.ctx, ast.Load):
            return True
    return False


def _calls_super_forward(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`super().forward(...)` in the method."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "forward"
        and isinstance(n.func.value, ast.Call) and isinstance(n.func.value.func, ast.Name) and n.func.value.func.id == "super"
        for n in walk(func)
    )


def _called_modules(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The attributes `self.<name>(...)` the method calls as modules (in order, once each)."""
    called = [n.func.attr for n in walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_self(n.func.value)]
    return list(dict.fromkeys(called))


def _getter_attributes(node: ast.ClassDef) -> set[str]:
    getter = methods(node).get("get_language_model")
    if getter is None:
        return set()
    return {
        r.value.attr
        for r in walk(getter)
        if isinstance(r, ast.Return) and isinstance(r.value, ast.Attribute) and _is_self(r.value.value)
    }


def _reads_self(node: ast.expr, attribute: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attribute and _is_self(n.value) for n in walk(node))


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _short_code(node: ast.expr, limit: int = 100) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def analyze_vllm(engine: EngineTraits, request: Resolved, progress: Progress | None = None) -> Analysis:
    """The vLLM profile's pipeline: protocol -> wrappers -> plans, as a selection.Analysis.  A module the
    answer needed that could not be read stops it, every such module named (exit 2)."""
    from ...errors import UnreadableFiles
    from .protocol import read_protocol

    tree, cache, selection = request.tree, request.cache, request.selection
    models, all_models, excluded = selection.models, selection.all_models, request.excluded
    index = VllmTree.of(cache)
    protocol = read_protocol(index)
    records = protocol.as_protocol()
    planner = VllmPlanner(index, protocol, records)
    plans = planner.plans(None if all_models else (models or [DEFAULT_MODEL]), progress)
    if index.unread:
        raise UnreadableFiles(list(index.unread.values()), list(index.unread))
    warnings = list(records.warnings) + [f"{index.rel(p)}: left out by --exclude: not read, and not checked" for p in sorted(excluded)]
    return Analysis(engine, tree, cache, records, tuple(plans), tuple(warnings), all_models)
