"""Analyze stage: the EAGLE-3 hook a class that *is* the causal LM lacks, learned from a class of the same tree that has it.

A class that holds a bare backbone (`self.model = FooModel(...)`, no `lm_head` of its own) beside
its own `lm_head` cannot forward a hook: the hook reads both.  Upstream writes such hooks by hand,
and the tree already holds many (`LlamaForCausalLM.get_embed_and_head`, ...).  This stage finds
them, reads what each one touches on `self` and which module-level names it uses, and decides,
for a class that lacks the hook, whether the same body means the same thing there:

* every `self.<backbone>.<x>` it reads or sets exists on the class's own backbone (through its
  bases), and `self.<backbone>.layers_to_capture` is read by that backbone's `forward`;
* `self.capture_aux_hidden_states = True` is only set where the class's own `forward` unpacks
  `hidden_states, aux_hidden_states` when it is set;
* `self.config...` is the backbone's config on both sides (the config each class builds its
  backbone from, `config` or `config.text_config`); `self.pp_group` exists on both, and a class that
  knows pipeline parallelism only takes a body from a class that knows it too; tied embeddings are
  handled on both sides or on neither;
* nothing else of `self` is used, and no name is only a type checker's.

When one fits, the plan says `synthesize` from that class (the best fit: the same backbone lineage,
then the most common body); when none does, the gap stays `needs_code` with the reason, naming the
method and line that lack the plumbing and the reference to compare with.  Nothing is guessed.
"""

from __future__ import annotations

import ast
import re
import symtable
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EaglepatchError
from ..read.bindings import module_bound_names
from ..read.expressions import capture_flag_read, dotted_name, dotted_parts, parse_value
from ..read.source_cache import MemoKey, SourceCache
from ..read.statements import statement_walk, walk
from ..read.text import SourceFile, block_text
from ..records import ClassInfo, InnerModel, MemberPlan, Reference, SelfUse, Signature, Synthesis, SynthesisFit, Wrapper
from .class_index import definition_ast, signature_node
from .plan import ShapeCheck, backbones
from .resolve import Resolver

if TYPE_CHECKING:
    import libcst as cst

_MODULE_NAMES: MemoKey[dict[Path, frozenset[str]]] = MemoKey("module -> the names its own scope binds (read/bindings.py)")
CAPTURE_FLAG = "capture_aux_hidden_states"  # the class's switch its forward reads
CAPTURE_LAYERS = "layers_to_capture"  # the backbone's list its forward collects
# `self.<x>` a learned body may use besides the backbone: what each one requires of the class fixed
_OWN_STATE = ("lm_head", "config", "pp_group", CAPTURE_FLAG)


# `def <name>(` in a file's bytes, any identifier's UTF-8 bytes: a member's `def <member>(` is in the bytes
# iff its bytes are among the names found (no match hides another: a name holds no space)
_DEF_NAME = re.compile(rb"def ([\w\x80-\xff]+)\(")


def indented_def(text: str, name: str) -> bool:
    """Some line of `text` is `def name(` indented (a method): what `^[ \\t]+def name\\(` (multiline)
    finds, from the literal (str.find skips to it; a `^`-anchored pattern is tried at every character)."""
    needle = f"def {name}("
    at = text.find(needle)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        if start < at and not text[start:at].strip(" \t"):
            return True
        at = text.find(needle, at + 1)
    return False


def learned_synthesis(entry: MemberPlan) -> Synthesis:
    """The learned body a `synthesize` fix writes: plan.py sets `entry.synthesis` with every such fix."""
    synthesis = entry.synthesis
    assert isinstance(synthesis, Synthesis), "a synthesize fix is planned only with its Synthesis (plan.py)"
    return synthesis


def _node_of(cache: SourceCache, signature: Signature) -> cst.FunctionDef:
    """A reference's libcst def: `_learn` keeps only signatures whose node signature_node has parsed."""
    node = signature_node(cache, signature)
    assert node is not None, "a reference's def is parsed when it is learned"
    return node


@dataclass
class HookLibrary:
    """The tree's own hook implementations on the bare-backbone shape, read once per member per run."""

    resolver: Resolver  # the run's: its context holds the protocol and the tree's style
    _references: dict[str, list[Reference]] = field(default_factory=dict)
    _forwards: dict[tuple[Path, int], _ForwardFacts] = field(default_factory=dict)
    _examples: dict[str, Reference | None] = field(default_factory=dict)
    _orders: dict[tuple[str, bool], list[Reference]] = field(default_factory=dict)
    _near: dict[str, dict[str, list[Reference]]] = field(default_factory=dict)
    _ties_of: dict[tuple[str, str], bool] = field(default_factory=dict)
    _configs: dict[tuple[str, str, str], tuple[str, ...] | None] = field(default_factory=dict)
    _built: dict[tuple[str, str, str], list[tuple[str, ...]]] = field(default_factory=dict)
    _requirements_of: dict[int, int] = field(default_factory=dict)  # id(reference) -> its requirements' number
    _requirement_ids: dict[tuple, int] = field(default_factory=dict)
    _captures: dict[str, bool] = field(default_factory=dict)  # member -> member_needs_capture
    _pp_built: dict[int, str] = field(default_factory=dict)  # id(reference) -> _pp_group_built
    _names: list[tuple[Path, frozenset[bytes]]] | None = None  # _defined_names

    @property
    def line_length(self) -> int:
        """black's width in the tree (patcher/read/style.py): a learned body must fit it."""
        return self.resolver.run.style.line_length

    # -- learning -----------------------------------------------------------------------------
    def references(self, member: str) -> list[Reference]:
        if member not in self._references:
            self._references[member] = self._learn(member)
        return self._references[member]

    def _learn(self, member: str) -> list[Reference]:
        resolver = self.resolver
        found: list[Reference] = []
        spelled = member.encode()
        for path, names in self._defined_names():
            if spelled not in names:  # no `def <member>(` in the file's bytes
                continue
            try:
                source = resolver.cache.read(path)
            except EaglepatchError:
                continue
            if not indented_def(source.text, member):
                continue
            outline = resolver.cache.outline(source)
            owners = {  # the classes whose text holds a `def <member>`: only they can define it
                block[3]
                for index, _indent, kind, name in outline.headers
                if kind == "def" and name == member
                for block in outline.enclosing(index)
                if block[2] == "class"
            }
            for name in outline.module_level("class"):
                if name not in owners:
                    continue
                try:
                    info = resolver.class_info(source, name)
                except EaglepatchError:
                    continue
                if info is None:
                    continue
                signature = info.members.get(member)
                if signature is None or signature.owner != name or signature.file != info.file or signature.kind != "method":
                    continue
                if _written_by_eaglepatch(source, signature.line):
                    continue  # learned from the tree, not upstream's: what apply writes never teaches the next check
                if "lm_head" not in info.members:
                    continue  # not the shape: the head lives elsewhere
                if not self._holds_a_bare_model(source, info):
                    continue  # nor is a class that holds no bare backbone (`_reference`): its def is not read
                body = self._read_reference_body(source, signature)
                if body is None:
                    continue
                reference = self._reference(source, info, signature, body)
                if reference is not None:
                    found.append(reference)
        keys = [_body_key(resolver.cache, reference) for reference in found]  # each printed once
        bodies: dict[str, int] = {}
        for key in keys:
            bodies[key] = bodies.get(key, 0) + 1
        return [replace(reference, shared_by=bodies[key]) for reference, key in zip(found, keys)]

    def _read_reference_body(self, source: SourceFile, signature: Signature) -> tuple[list[SelfUse], list[str], str] | None:
        """read_body of a hook's def: by CPython's parser when the def reads alone and holds nothing
        unusual (libcst's parse and visit cost several times more), else by libcst; None when the def
        cannot be read."""
        cache = self.resolver.cache
        assert signature.header is not None, "a method's signature carries its `def` line (class_index.py)"
        lines = source.lines[slice(*cache.block_span(source, signature.header))]
        free = module_names_in(lines)
        function = cache.function_ast(source, signature.header) if free is not None else None
        if free is not None and function is not None and function.name == signature.name:
            body = read_body_ast(function, free)
            if body is not None:
                return body
        node = signature_node(cache, signature)
        if node is None:
            return None
        from .body_reader import read_body  # libcst's reading, for the bodies CPython's leaves to it

        return read_body(node, free)

    def _holds_a_bare_model(self, source: SourceFile, info: ClassInfo) -> bool:
        """Some model the class holds is a bare backbone: else `_reference` finds no backbone in any body."""
        try:
            inners = self.resolver.inner_models(source, info.name)
        except EaglepatchError:
            return False
        return any(i.classes and _bare(i) for i in inners)

    def _defined_names(self) -> list[tuple[Path, frozenset[bytes]]]:
        """Each model file (that can be read) with every `name` that `def name(` spells in its bytes: each
        file is read once for all the hooks learned, and only the names are kept, not the bytes."""
        if self._names is None:
            self._names = []
            for path in self.resolver.model_files():
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                self._names.append((path, frozenset(_DEF_NAME.findall(data))))
        return self._names

    def _reference(self, source: SourceFile, info: ClassInfo, signature: Signature, body: tuple[list[SelfUse], list[str], str]) -> Reference | None:
        uses, free, unportable = body
        heads = {u.chain[0] for u in uses}
        try:
            inners = self.resolver.inner_models(source, info.name)
        except EaglepatchError:
            return None
        backbones = [i for i in inners if i.attribute in heads and i.classes and _bare(i)]
        if len(backbones) != 1:
            return None  # not the shape: a wrapper of a whole causal LM, or nothing held
        backbone = backbones[0]
        others = heads - {backbone.attribute} - set(_OWN_STATE)
        if not unportable and others:
            unportable = f"it uses self.{sorted(others)[0]}, which is particular to {info.name}"
        for use in uses:  # a body that does not run on its own class teaches nothing
            if not unportable and use.chain[0] == backbone.attribute and len(use.chain) >= 2:
                lacking = [c.name for c in backbone.classes if use.chain[1] not in c.members]
                if lacking:
                    unportable = f"its own backbone {lacking[0]} has no {use.chain[1]}"
        return Reference(
            member=signature.name,
            owner=info,
            signature=signature,
            backbone=backbone,
            config_path=self._config_path(source, info, backbone),
            self_uses=tuple(uses),
            free_names=tuple(free),
            knows_pp="pp_group" in info.members,
            ties=self._ties(info),
            unportable=unportable,
        )

    # -- what a class is built from ------------------------------------------------------------
    def _config_path(self, source: SourceFile, info: ClassInfo, backbone: InnerModel) -> tuple[str, ...] | None:
        """The attributes from `self.config` to the config the backbone is built from, or None."""
        key = (info.file, info.name, backbone.attribute)
        if key not in self._configs:
            self._configs[key] = self._read_config_path(source, info, backbone)
        return self._configs[key]

    def _read_config_path(self, source: SourceFile, info: ClassInfo, backbone: InnerModel) -> tuple[str, ...] | None:
        kept = built = None
        for assignment in self.resolver.init_assignments(source, info.name):
            if assignment.attribute == "config" and kept is None:
                kept = _dotted_tuple(parse_value(assignment.value))
            elif assignment.attribute == backbone.attribute and built is None:
                built = _config_argument(parse_value(assignment.value))
        if not kept or not built:
            return None
        if built == ("self", "config") or built[:2] == ("self", "config"):
            return built[2:]
        if built[: len(kept)] == kept:
            return built[len(kept) :]
        return None

    def _ties(self, info: ClassInfo) -> bool:
        key = (info.file, info.name)
        if key not in self._ties_of:
            init = info.members.get("__init__")
            ties = False
            if init is not None and isinstance(init.path, Path) and init.header is not None:
                source = self.resolver.cache.read(init.path)
                end = self.resolver.cache.outline(source).ends.get(init.header, init.header + 1)
                ties = any("tie_word_embeddings" in line for line in source.lines[init.header : end])
            self._ties_of[key] = ties
        return self._ties_of[key]

    # -- fitting -------------------------------------------------------------------------------
    def fit(
        self,
        entry: MemberPlan,
        wrapper: Wrapper,
        shape_misfit: ShapeCheck | None = None,
        plumbed_by: str | None = None,
        plumbed: bool = False,
        judge: Callable[[Synthesis], str] | None = None,
        backbone_gains: frozenset[str] = frozenset(),
    ) -> SynthesisFit:
        """The best reference whose body means the same in `wrapper`'s class, or why there is none.
        `plumbed_by` ("file:Class"): the plumbing is written with the hook, learned from that class, so
        the hook is learned from that class only and the plumbing as it is now is not asked about.
        `plumbed`: this run writes the plumbing for another hook (the caller judges the result on it):
        any reference, and the plumbing as it is now not asked about.  `judge`: why a reference that
        fits would still not work in the class ("" when it would): the next one is tried then.
        `backbone_gains`: the hooks the plumbing writes into the backbone (plumbing/planner.sibling_hook),
        which a body may call there."""
        member = entry.member.name
        references = self.references(member)
        if not references:
            return SynthesisFit(why=f"no class of this tree implements {member} on a bare backbone to learn it from")
        if member not in self._captures:
            self._captures[member] = member_needs_capture(references)
        held = backbones(wrapper)  # once for every reference tried
        plumbing = self.plumbing(wrapper, references, held) if plumbed_by is None and not plumbed else ""
        if plumbing and self._captures[member]:
            return SynthesisFit(why=plumbing, plumbing=True)
        # tried best first: the first that fits is the answer, and when none does the first
        # rejection is the one to report
        first: tuple[Reference, str] | None = None
        rejected = 0
        failed: set[int] = set()  # the requirements of the references rejected here
        cls = wrapper.cls
        for reference in self._ranked(member, wrapper):
            if plumbed_by is not None and reference.label != plumbed_by:
                continue
            rejected += 1
            itself = (cls.name, cls.file) == (reference.owner.name, reference.owner.file)
            requirements = None if itself else self._requirements(reference)
            if requirements in failed:
                continue  # fails as the one with the same requirements did
            synthesis, why = self._try(reference, wrapper, entry, shape_misfit, held, plumbed=plumbed_by is not None or plumbed, gains=backbone_gains)
            judged = synthesis is not None and judge is not None
            if synthesis is not None and judge is not None:
                why = judge(synthesis)
                synthesis = None if why else synthesis
            if synthesis is not None:
                return SynthesisFit(synthesis=synthesis)
            first = first or (reference, why)
            if requirements is not None and not judged:  # the judge reads more than the requirements
                failed.add(requirements)
        if first is None:
            assert plumbed_by is not None, "references were found, so one was tried"
            return SynthesisFit(why=f"{plumbed_by} has no {member} on a bare backbone to learn it from")
        best, why = first
        more = f" (and {rejected - 1} other reference(s) do not fit either)" if rejected > 1 else ""
        return SynthesisFit(why=f"{best.label}.{member} ({best.signature.at}) does not fit: {why}{more}")

    def _requirements(self, reference: Reference) -> int:
        """Everything that decides whether `_try` takes a reference, as a number: two references with the
        same requirements fit a class or fail it alike (with other words), so a class none fits is not
        tried against every copy of one body (the tree's many `get_embed_and_head` on
        `self.model.embed_tokens`). The class a reference belongs to is not in it: `fit` asks that
        ("it is the class itself") of each."""
        key = id(reference)
        if key not in self._requirements_of:
            cache = self.resolver.cache
            signature = reference.signature
            assert isinstance(signature.path, Path) and signature.header is not None, "a reference is a method of the tree"
            source = cache.read(signature.path)
            text = "".join(source.lines[slice(*cache.block_span(source, signature.header))])  # decorators, params, body
            backbone = reference.backbone.attribute
            layers: list[tuple] = []  # how the layers _layers_misfit compares are built, one class of a name
            for chain in (u.chain for u in reference.self_uses if "weight" in u.chain):
                if chain[0] == backbone and len(chain) >= 2:
                    built = {c.name: tuple(self._built_as(c, chain[1])) for c in reversed(reference.backbone.classes)}
                    layers.append((chain[1], tuple(built[c.name] for c in reference.backbone.classes)))
                elif chain[0] == "lm_head":
                    layers.append(("lm_head", tuple(self._built_as(reference.owner, "lm_head"))))
            requirements = (
                bool(reference.unportable),
                backbone,
                tuple(reference.self_uses),
                tuple(layers),
                reference.config_path,
                reference.knows_pp,
                reference.ties,
                text,
            )
            self._requirements_of[key] = self._requirement_ids.setdefault(requirements, len(self._requirement_ids))
        return self._requirements_of[key]

    def _try(
        self,
        reference: Reference,
        wrapper: Wrapper,
        entry: MemberPlan,
        shape_misfit: ShapeCheck | None,
        held: list[InnerModel] | None = None,
        plumbed: bool = False,
        gains: frozenset[str] = frozenset(),
    ) -> tuple[Synthesis | None, str]:
        if reference.unportable:
            return None, reference.unportable
        cls = wrapper.cls
        if cls.name == reference.owner.name and cls.file == reference.owner.file:
            return None, "it is the class itself"
        candidates = list(backbones(wrapper) if held is None else held)
        candidates.sort(key=lambda i: i.attribute != reference.backbone.attribute)
        if not candidates:
            return None, f"{cls.name} holds no bare backbone"
        why = ""
        for backbone in candidates:
            why = self._backbone_misfit(reference, backbone, plumbed, gains) or self._layers_misfit(reference, wrapper, backbone)
            if not why:
                break
        else:
            return None, why
        config_path: tuple[str, ...] = ()
        if any(u.chain[0] == "config" for u in reference.self_uses):
            if reference.config_path is None:
                return None, f"which config {reference.owner.name} builds its backbone from is not visible"
            source = self.resolver.cache.read(self.resolver.tree.srt / wrapper.path)
            mine = self._config_path(source, cls, backbone)
            if mine is None:
                return None, f"which config {cls.name} builds its backbone ({backbone.attribute}) from is not visible"
            prefix = ("config", *reference.config_path)
            for use in reference.self_uses:
                if use.chain[0] == "config" and use.chain[: len(prefix)] != prefix:
                    return None, f"it reads self.{'.'.join(use.chain)}, not its backbone's config"
            config_path = mine
        heads = {u.chain[0] for u in reference.self_uses}
        pp_call = ""
        if "pp_group" in heads and "pp_group" not in cls.members:
            pp_call = self._pp_group_built(reference)
            if not pp_call:
                return None, f"it uses self.pp_group, which {cls.name} does not keep, and how {reference.owner.name}'s __init__ builds it is not one call of its module's names"
        if "pp_group" in cls.members and not reference.knows_pp:
            return None, f"{cls.name} keeps self.pp_group (pipeline parallelism) and {reference.owner.name} knows none"
        if "lm_head" in heads and "lm_head" not in cls.members:
            return None, f"{cls.name} has no lm_head"
        swaps_weights = any(u.store and (u.chain[0] == "lm_head" or "weight" in u.chain) for u in reference.self_uses)
        if swaps_weights and reference.ties != self._ties(cls):
            return None, "tied embeddings are handled in one class's __init__ and not in the other's"
        if shape_misfit is not None:
            for call in entry.uses or entry.member.uses:
                if call.shape is not None:
                    misfit = shape_misfit(reference.signature, call.shape)
                    if misfit:
                        return None, f"it cannot take the call at {call.at} {call.shape.describe()}: {misfit}"
        synthesis = Synthesis(reference, backbone.attribute, config_path, pp_call)
        too_long = self._overlong(synthesis)
        if too_long:
            return None, f"retargeted, its line `{too_long.strip()}` would not fit {self.line_length} columns and black would re-wrap it"
        return synthesis, ""

    def _pp_group_built(self, reference: Reference) -> str:
        """How the reference's `__init__` builds `self.pp_group` (`get_pp_group()`, `get_parallel().pp_group`),
        when that is calls and attributes of names its module binds and nothing of `self`: the same
        expression, read in the hook instead, is the same group.  "" otherwise.  Read once a reference."""
        key = id(reference)
        if key not in self._pp_built:
            self._pp_built[key] = self._read_pp_group_built(reference)
        return self._pp_built[key]

    def _read_pp_group_built(self, reference: Reference) -> str:
        init = reference.owner.members.get("__init__")
        if init is None or not isinstance(init.path, Path) or init.header is None:
            return ""
        cache = self.resolver.cache
        source = cache.read(init.path)
        node = cache.function_ast(source, init.header)
        if node is None:
            return ""
        built = [
            stmt.value
            for stmt in walk(node)
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == "pp_group" and isinstance(t.value, ast.Name) and t.value.id == "self" for t in stmt.targets)
        ]
        if len(built) != 1:
            return ""
        value = built[0]
        names = {n.id for n in walk(value) if isinstance(n, ast.Name)}
        plain = all(isinstance(n, (ast.Call, ast.Attribute, ast.Name, ast.Load)) for n in walk(value))
        if not plain or not names or "self" in names or any(isinstance(n, ast.Call) and (n.args or n.keywords) for n in walk(value)):
            return ""
        path = self.resolver.tree.srt / reference.signature.file
        table = cache.memo(_MODULE_NAMES, dict)
        if path not in table:
            try:
                table[path] = frozenset(module_bound_names(ast.parse(cache.read(path).text)))
            except (SyntaxError, ValueError):
                table[path] = frozenset()
        return ast.unparse(value) if names <= table[path] else ""

    def _overlong(self, synthesis: Synthesis) -> str:
        renames = synthesis.renames()
        if all(old == new for old, new in renames.items()) and not synthesis.pp_call:
            return ""  # nothing changes length: the reference's own layout stands
        if self._surely_fits(synthesis):
            return ""  # `check` reads with CPython's parser: libcst lays the body out only when it may not fit
        import libcst as cst

        from ..codemods.retarget import ExplodeLongLiterals, Retarget, overlong_lines, pp_respelled
        from .body_reader import receiver_of

        node = _node_of(self.resolver.cache, synthesis.reference.signature)
        receiver = receiver_of(node)
        assert receiver is not None, "a reference is a method (read_body refuses anything else)"
        moved = cst.Module(body=[pp_respelled(node, receiver, synthesis.pp_call)]).visit(Retarget(receiver, renames)).visit(ExplodeLongLiterals("    ", self.line_length))
        func = moved.body[0]
        assert isinstance(func, cst.FunctionDef), "retargeting a def keeps it a def"
        lines = overlong_lines(func, "    ", self.line_length)
        return lines[0] if lines else ""

    def _surely_fits(self, synthesis: Synthesis) -> bool:
        """Every line of the reference's def, at class-body indentation, fits the line length however
        many of its `self.` chains are renamed, each by the most any rename lengthens one: an upper
        bound, so a True never hides a line `_overlong` would find (laying a literal out one element a
        line only shortens lines).  False when the def's indentation is not 4 spaces a level, where
        libcst's layout may lengthen lines."""
        signature = synthesis.reference.signature
        cache = self.resolver.cache
        node = definition_ast(cache, signature)
        if node is None or signature.path is None or signature.header is None or not node.args.args:
            return False
        lines = cache.function_text(cache.read(signature.path), signature.header).splitlines()  # node's positions are in it
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        indent = len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip(" "))
        body = lines[node.body[0].lineno - 1]
        if len(body) - len(body.lstrip(" ")) != indent + 4:
            return False
        shift = max(0, 4 - indent)  # the def is laid out at class-body indentation; a string's own lines are not moved
        receiver = node.args.args[0].arg
        # each renamed chain, and how much longer its new spelling is
        grows = {(receiver, *old): len(".".join(new)) - len(".".join(old)) for old, new in synthesis.renames().items()}
        if synthesis.pp_call:
            grows[receiver, "pp_group"] = len(synthesis.pp_call) - len(f"{receiver}.pp_group")
        patterns = [(re.compile(r"\b" + r"\s*\.\s*".join(map(re.escape, chain)) + r"\b"), grow) for chain, grow in grows.items() if grow > 0]

        def longest(line: str) -> int:  # each renamed chain may appear anywhere in the line
            return len(line.expandtabs(4)) + shift + sum(grow * len(pattern.findall(line)) for pattern, grow in patterns)

        end = node.end_lineno or node.lineno
        return all(longest(line) <= self.line_length for line in lines[first - 1 : end])

    def _backbone_misfit(self, reference: Reference, backbone: InnerModel, plumbed: bool = False, gains: frozenset[str] = frozenset()) -> str:
        """Why the body's `self.<backbone>.X` would not mean the same on `backbone`; the layer list it
        sets is not asked about when the plumbing is written with it (`plumbed`), nor a hook the
        plumbing writes into the backbone (`gains`)."""
        for use in reference.self_uses:
            if use.chain[0] != reference.backbone.attribute or len(use.chain) < 2:
                continue
            attribute = use.chain[1]
            if plumbed and (attribute == CAPTURE_LAYERS or attribute in gains):
                continue
            for cls in backbone.classes:
                if attribute not in cls.members:
                    return f"it uses self.{reference.backbone.attribute}.{attribute}, and {cls.name} has no {attribute}"
                if attribute == CAPTURE_LAYERS and use.store and not self._forward_reads(cls, CAPTURE_LAYERS):
                    forward = cls.members.get("forward")
                    where = f" ({forward.at})" if forward is not None else ""
                    return f"{cls.name}.forward{where} does not collect aux hidden states for {CAPTURE_LAYERS}"
        return ""

    def _layers_misfit(self, reference: Reference, wrapper: Wrapper, backbone: InnerModel) -> str:
        """The layers the body reaches (`embed_tokens`, `lm_head`) are built from the same classes on
        both sides: a hook written for a vocab-parallel embedding means something else on a plain
        one (Gemma3's `nn.Embedding` needs its weights sharded)."""
        pairs: list[tuple[ClassInfo, ClassInfo, str]] = []
        for use in reference.self_uses:
            if "weight" not in use.chain:
                continue  # only a layer's weights depend on what class the layer is
            if use.chain[0] == reference.backbone.attribute and len(use.chain) >= 2:
                pairs += [(c, r, use.chain[1]) for c in backbone.classes for r in reference.backbone.classes]
            elif use.chain[0] == "lm_head":
                pairs.append((wrapper.cls, reference.owner, "lm_head"))
        seen: set[tuple[str, str, str]] = set()
        for mine, theirs, attribute in pairs:
            if (mine.name, theirs.name, attribute) in seen:
                continue
            seen.add((mine.name, theirs.name, attribute))
            built, known = self._built_as(mine, attribute), self._built_as(theirs, attribute)
            if not built and not known:
                continue  # a plain value on both sides (`[]`, a tied head): nothing to compare
            if not built or not known:
                return f"{theirs.name if not known else mine.name}.{attribute} is not built by a call to compare with the other's"
            wanted = {lineage[0] for lineage in known}
            for lineage in built:
                if not set(lineage) & wanted:
                    return f"{mine.name}.{attribute} is built as {lineage[0]}, {theirs.name}.{attribute} as {' or '.join(sorted(wanted))}"
        return ""

    def _built_as(self, info: ClassInfo, attribute: str) -> list[tuple[str, ...]]:
        """For each `self.<attribute> = Callee(...)` the class's __init__ runs: (Callee, its bases...)."""
        key = (info.file, info.name, attribute)
        if key in self._built:
            return self._built[key]
        resolver = self.resolver
        out: list[tuple[str, ...]] = []
        try:
            source = resolver.cache.read(resolver.tree.srt / info.file)
            assignments = resolver.init_assignments(source, info.name)
        except EaglepatchError:
            assignments = []
        for assignment in assignments:
            if assignment.attribute != attribute:
                continue
            for value in _branches(parse_value(assignment.value)):
                name = dotted_name(value.func)
                if not name:
                    continue
                lineage = [name.rsplit(".", 1)[-1]]
                found = resolver.find_class(assignment.source, value.func)
                base = resolver.class_info(*found) if found is not None else None
                if base is not None:
                    lineage += [*base.bases, *(e.rsplit(".", 1)[-1] for e in base.external_bases)]
                out.append(tuple(lineage))
        self._built[key] = out
        return out

    def plumbing(self, wrapper: Wrapper, references: list[Reference], held: list[InnerModel] | None = None) -> str:
        """Why EAGLE-3's aux hidden states cannot flow through this class ("" when they can): its
        backbone's forward must collect them, its own forward must unpack them."""
        def against() -> str:
            compare = self._working_example(references)
            return f"; compare {compare.owner.name}.forward ({_forward_at(compare.owner)})" if compare else ""

        for backbone in backbones(wrapper) if held is None else held:
            for cls in backbone.classes:
                if CAPTURE_LAYERS in cls.members and not self._forward_reads(cls, CAPTURE_LAYERS):
                    flag = self._forward(cls).layer_flag
                    if flag:  # it captures, on layers it marks itself (Qwen3.5's): the hook must mark them
                        return f"{cls.name}.forward ({_forward_at(cls)}) selects its layers by the per-layer flag {flag}, not by {CAPTURE_LAYERS}"
                    return f"{cls.name}.forward ({_forward_at(cls)}) does not collect aux hidden states for {CAPTURE_LAYERS}{against()}"
                if CAPTURE_LAYERS not in cls.members and "set_eagle3_layers_to_capture" not in cls.members:
                    return f"{cls.name} ({cls.file}:{cls.line}) has no {CAPTURE_LAYERS}: its forward collects no aux hidden states{against()}"
        if not self._forward_unpacks(wrapper.cls):
            return (
                f"{wrapper.cls.name}.forward ({_forward_at(wrapper.cls)}) does not unpack aux hidden states when "
                f"{CAPTURE_FLAG} is set{against()}"
            )
        return ""

    def _working_example(self, references: list[Reference]) -> Reference | None:
        """The reference to compare plumbing with: one whose own forward and backbone have it, the most common."""

        def works(reference: Reference) -> bool:
            collects = all(self._forward_reads(c, CAPTURE_LAYERS) for c in reference.backbone.classes)
            return collects and self._forward_unpacks(reference.owner)

        member = references[0].member if references else ""
        if member not in self._examples:
            self._examples[member] = max(references, key=lambda r: (works(r), not r.unportable, r.shared_by, r.label), default=None)
        return self._examples[member]

    def _forward_reads(self, cls: ClassInfo, attribute: str) -> bool:
        return any(chain[0] == attribute for chain in self._forward(cls).reads)

    def _forward_unpacks(self, cls: ClassInfo) -> bool:
        facts = self._forward(cls)
        return (CAPTURE_FLAG,) in facts.reads and facts.unpacks

    def _forward(self, cls: ClassInfo) -> _ForwardFacts:
        """What a class's `forward` (its own or inherited) reads of `self`, read once per definition."""
        forward = cls.members.get("forward")
        if forward is None or forward.kind != "method" or not isinstance(forward.path, Path) or forward.header is None:
            return _NO_FORWARD
        key = (forward.path, forward.header)
        if key not in self._forwards:
            cache = self.resolver.cache
            node = cache.function_ast(cache.read(forward.path), forward.header)
            self._forwards[key] = forward_facts(node) if node is not None else _NO_FORWARD
        return self._forwards[key]

    def _rank(self, reference: Reference, wrapper: Wrapper, held: set[str]) -> tuple:
        """Which reference a class takes its body from, smallest first."""
        lineage = not ({c.name for c in reference.backbone.classes} & held)
        related = reference.owner.name not in wrapper.cls.bases and reference.owner.file != wrapper.path
        pp = ("pp_group" in wrapper.cls.members) != reference.pp_in_body
        return (lineage, related, -reference.shared_by, pp, reference.model_imports, reference.label)

    def _ranked(self, member: str, wrapper: Wrapper) -> Iterator[Reference]:
        """The references in `_rank` order, without ranking them all for every class: the few on the
        class's lineage or in its file or bases come first; the rest share one order per PP style."""
        references = self.references(member)
        pp = "pp_group" in wrapper.cls.members
        if (member, pp) not in self._orders:
            self._orders[member, pp] = sorted(references, key=lambda r: (-r.shared_by, pp != r.pp_in_body, r.model_imports, r.label))
        if member not in self._near:
            near: dict[str, list[Reference]] = {}
            for reference in references:
                for name in {c.name for c in reference.backbone.classes} | {reference.owner.name, reference.owner.file}:
                    near.setdefault(name, []).append(reference)
            self._near[member] = near
        held = _held(wrapper)
        near = self._near[member]
        close = {id(r): r for key in (held | set(wrapper.cls.bases) | {wrapper.path}) for r in near.get(key, ())}
        ranked = sorted((self._rank(r, wrapper, held), i, r) for i, r in enumerate(close.values()))
        first = [r for rank, _, r in ranked if rank[:2] != (True, True)]  # only lineage, file or bases bring one forward
        yield from first
        chosen = {id(r) for r in first}
        yield from (r for r in self._orders[member, pp] if id(r) not in chosen)


def _held(wrapper: Wrapper) -> set[str]:
    """The classes a wrapper holds, and their bases: a reference on the same lineage ranks first."""
    return {c.name for i in wrapper.inners for c in i.classes} | {b for i in wrapper.inners for c in i.classes for b in c.bases}


def member_needs_capture(references: list[Reference]) -> bool:
    """The hook turns aux-hidden-state capture on (what `set_eagle3_layers_to_capture` does)."""
    return any(any(u.chain == (CAPTURE_FLAG,) and u.store for u in r.self_uses) for r in references)




def _forward_at(cls: ClassInfo) -> str:
    forward = cls.members.get("forward")
    return forward.at if forward is not None else f"{cls.file}:{cls.line}"


def _bare(inner: InnerModel) -> bool:
    return all("lm_head" not in c.members for c in inner.classes)


def _dotted_tuple(node: ast.expr | None) -> tuple[str, ...] | None:
    text = dotted_name(node) if node is not None else ""
    return tuple(text.split(".")) if text else None


def _branches(value: ast.expr | None) -> list[ast.Call]:
    """The calls an assigned value may be: `A(...)`, either side of `A(...) if c else B(...)`."""
    if isinstance(value, ast.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value] if isinstance(value, ast.Call) else []


def _config_argument(node: ast.expr | None) -> tuple[str, ...] | None:
    """The config a backbone construction passes: `Foo(config.text_config, ...)` or `Foo(config=...)`."""
    if not isinstance(node, ast.Call):
        return None
    for keyword in node.keywords:
        if keyword.arg == "config":
            return _dotted_tuple(keyword.value)
    positional = [a for a in node.args if not isinstance(a, ast.Starred)]
    return _dotted_tuple(positional[0]) if positional else None


def _body_key(cache: SourceCache, reference: Reference) -> str:
    """The def's code, whitespace collapsed: equal for classes that share a body.  A def that parses on
    its own is its slice's text, decorator first, so the text itself is that code (no code generator);
    otherwise libcst writes the node out."""
    signature = reference.signature
    if signature.path is not None and signature.header is not None:
        text = cache.block_read_alone(cache.read(signature.path), signature.header)
        if text is not None and text.lstrip().startswith(("@", "def ", "async ")):
            return " ".join(text.split())
    return _generated_body_key(cache, reference)


def _generated_body_key(cache: SourceCache, reference: Reference) -> str:
    import libcst as cst

    node = signature_node(cache, reference.signature)
    code = cst.Module(body=[]).code_for_node(node.with_changes(leading_lines=[])) if isinstance(node, cst.FunctionDef) else ""
    return " ".join(code.split())


@dataclass(frozen=True)
class _ForwardFacts:
    """What a `forward` does with `self`, as the plumbing check needs it."""

    reads: frozenset[tuple[str, ...]]  # `self.a.b` chains read (not only assigned or deleted)
    unpacks: bool  # `a, b = x` somewhere: the shape of `hidden_states, aux_hidden_states = hidden_states`
    layer_flag: str = ""  # `getattr(layer, "_is_layer_to_capture", False)`: the flag it selects layers by


_NO_FORWARD = _ForwardFacts(frozenset(), False)


def forward_facts(node: ast.FunctionDef | ast.AsyncFunctionDef) -> _ForwardFacts:
    """The `self.` chains a method reads, by CPython's parser (a long `forward` costs libcst ~20x
    more), with the same reading as `_SelfReader`: a chain is stored only when it is a whole target,
    and a nested function is not read."""
    positional = [*node.args.posonlyargs, *node.args.args]
    if not positional:
        return _NO_FORWARD
    receiver = positional[0].arg
    stored: set[int] = set()
    reads: set[tuple[str, ...]] = set()
    unpacks = False
    layer_flag = ""
    for statement in statement_walk(node):  # the targets are statements': no expression holds one
        stored.update(id(target) for target in _whole_targets(statement))
        if isinstance(statement, ast.Assign):
            unpacks = unpacks or any(isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == 2 for t in statement.targets)
    pending: list[ast.AST] = list(node.body)
    while pending:
        sub = pending.pop()
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(sub, ast.Attribute):
            chain = dotted_parts(sub)
            if chain is not None and chain[0] == receiver:
                if id(sub) not in stored:
                    reads.add(tuple(chain[1:]))
                continue
        layer_flag = layer_flag or capture_flag_read(sub) or ""
        pending.extend(ast.iter_child_nodes(sub))
    return _ForwardFacts(frozenset(reads), unpacks, layer_flag)


# --------------------------------------------------------------------------- reading one body


def module_names_in(lines: Sequence[str]) -> set[str] | None:
    """The module-level names and builtins a `def` (its lines, as SourceFile.lines holds them) reads, signature and decorators
    included, by CPython's symbol table: what libcst's ScopeProvider answers for it (`None`, `True`
    and `False` count as reads; names inside string annotations do not), at a fraction of the cost.
    None when the lines do not compile on their own."""
    text = block_text(lines)
    try:
        top = symtable.symtable(text, "<hook>", "exec")
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    names = {sym.get_name() for sym in top.get_symbols() if sym.is_referenced()}
    pending = list(top.get_children())
    while pending:
        table = pending.pop()
        names |= {sym.get_name() for sym in table.get_symbols() if sym.is_referenced() and sym.is_global()}
        pending += table.get_children()
    names.discard("__class__")  # the cell `super()` implies, not a name the code spells
    for node in walk(tree):
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, bool)):
            names.add(repr(node.value))
    return names


# what a hook body may hold for the CPython reading below; anything else (a lambda, a nested class, an
# import, `global`, `match`, ...) binds or spells names in ways left to libcst's reading
_UNUSUAL: tuple[type[ast.AST], ...] = (
    ast.Lambda, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Match,
) + tuple(getattr(ast, name) for name in ("TypeAlias",) if hasattr(ast, name))  # `type X = ...` (3.12)


def read_body_ast(node: ast.FunctionDef | ast.AsyncFunctionDef, free: set[str]) -> tuple[list[SelfUse], list[str], str] | None:
    """`read_body` by CPython's parser: the same uses in the same order (libcst's, which is the source's),
    the same first reason it cannot move.  None for a body holding anything `_UNUSUAL`: libcst reads it."""
    positional = [*node.args.posonlyargs, *node.args.args]
    if not positional or node.decorator_list:
        return [], [], "it is not a plain method" if node.decorator_list else "it takes no self"
    receiver = positional[0].arg
    if any(isinstance(sub, _UNUSUAL) for statement in node.body for sub in walk(statement)):
        return None
    stores: set[int] = set()
    uses: list[SelfUse] = []
    why = [""]

    def unportable(reason: str) -> None:
        why[0] = why[0] or reason

    def visit(sub: ast.AST) -> None:
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            unportable("it defines a function of its own")
            return
        stores.update(id(target) for target in _whole_targets(sub))
        if isinstance(sub, ast.Attribute):
            chain = dotted_parts(sub)
            if chain is not None and chain[0] == receiver:
                uses.append(SelfUse(tuple(chain[1:]), id(sub) in stores))
                return
            visit(sub.value)
            if sub.attr == receiver:  # libcst visits the attribute's name as a Name
                unportable(f"it passes {receiver} on")
            return
        if isinstance(sub, ast.Name):
            if sub.id == receiver:  # `self` handed on whole: what it needs cannot be read here
                unportable(f"it passes {receiver} on")
            return
        if isinstance(sub, ast.keyword):
            if sub.arg == receiver:
                unportable(f"it passes {receiver} on")
            visit(sub.value)
            return
        if isinstance(sub, ast.ExceptHandler):
            if sub.type is not None:
                visit(sub.type)
            if sub.name == receiver:
                unportable(f"it passes {receiver} on")
            for statement in sub.body:
                visit(statement)
            return
        for child in _source_order(sub):
            visit(child)

    for statement in node.body:
        visit(statement)
    return uses, sorted(free - {receiver}), why[0] or ("it calls super()" if "super" in free else "")


def _whole_targets(statement: ast.AST) -> list[ast.expr]:
    """What a statement stores into as a whole, as `_SelfReader` counts stores: each target of an
    assignment, an augmented or annotated one's, a `del`'s one (`del a, b` is one tuple to libcst)."""
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        return [statement.target]
    if isinstance(statement, ast.Delete) and len(statement.targets) == 1:
        return statement.targets
    return []


def _source_order(node: ast.AST) -> list[ast.AST]:
    """A node's children as the source spells them (libcst's visiting order): ast keeps a call's
    keywords apart from its positional arguments, a dict's keys apart from its values, and the test of
    `a if test else b` first."""
    if isinstance(node, ast.Call):
        arguments: list[ast.expr | ast.keyword] = [*node.args, *node.keywords]
        return [node.func, *sorted(arguments, key=lambda a: (a.lineno, a.col_offset))]
    if isinstance(node, ast.Dict):
        return [part for key, value in zip(node.keys, node.values) for part in (key, value) if part is not None]
    if isinstance(node, ast.IfExp):
        return [node.body, node.test, node.orelse]
    return list(ast.iter_child_nodes(node))


def _written_by_eaglepatch(source: SourceFile, line: int) -> bool:
    """A def eaglepatch wrote: its marker comment right above it (above its decorators)."""
    lines = source.lines
    index = line - 2  # the line above the def, 0-based
    while index >= 0 and lines[index].lstrip().startswith("@"):
        index -= 1
    return index >= 0 and lines[index].lstrip().startswith("# eaglepatch:")
