"""The records passed between pipeline stages: every one frozen, with tuple and mapping fields, so a
stage derives a new record (dataclasses.replace) rather than changing one another stage holds."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# Which model a use is made on, and which part a model class plays when SGLang serves it.
UseRole = Literal["target", "draft", "unknown"]
ModelRole = Literal["target", "draft", "other"]
Status = Literal["compliant", "fixable", "needs_code", "dynamic", "unresolved"]
STATUSES: tuple[Status, ...] = ("compliant", "fixable", "needs_code", "dynamic", "unresolved")
MODEL_ROLES: tuple[ModelRole, ...] = ("target", "draft", "other")
UseKind = Literal["call", "attribute"]
EAGLE3 = "EAGLE3"  # the member of the tree's algorithm enum the EAGLE-3 protocol (analyze/protocol.py) is read for
SignatureKind = Literal["method", "property", "attribute"]
# "delegate": to an inner model's attribute; "inherit": written into a base class, "file:Class";
# "synthesize": a body learned from the class `to`, "file:Class"; "base": the interface `to` added to
# the class's bases, with its import (the vLLM profile: patcher/engines/vllm/plan.py).
FixKind = Literal["delegate", "inherit", "synthesize", "base"]
# What a gap is about: a `member` the class lacks, or a capture hook it has whose `plumbing` (the
# state its forward reads, the aux states handed on) is missing or broken (plumbing/gate.py).
GapKind = Literal["member", "plumbing"]


@dataclass(frozen=True)
class CallShape:
    """How one use calls a member: what a delegation's signature must accept."""

    positional: int  # positional arguments passed (not counting self)
    keywords: tuple[str, ...] = ()  # keyword arguments passed, sorted
    star: bool = False  # `*args` or `**kwargs` at the call: the shape cannot be checked

    def describe(self) -> str:
        parts = [f"{self.positional} positional"] if self.positional else []
        parts += [f"{k}=" for k in self.keywords]
        if self.star:
            parts.append("*args/**kwargs")
        return "(" + ", ".join(parts) + ")" if parts else "()"


@dataclass(frozen=True)
class Use:
    """One place EAGLE-3 code touches a member of a model."""

    name: str
    kind: UseKind
    role: UseRole
    required: bool
    at: str  # "path:line", relative to srt
    guard: str  # why this code counts as EAGLE-3
    shape: CallShape | None = None  # for calls: how the member is called


def call_sites(uses: Iterable[Use]) -> list[str]:
    """Where the uses are, each place once, in the order first seen."""
    return list(dict.fromkeys(use.at for use in uses))


@dataclass(frozen=True)
class ProtocolMember:
    name: str
    uses: tuple[Use, ...] = ()
    assigned_at: tuple[str, ...] = ()  # "path:line" where EAGLE-3 code assigns `model.name = ...`
    algorithms: tuple[str, ...] = ()  # the speculative algorithms whose code needs it; () : EAGLE-3's alone

    @property
    def needed_by(self) -> tuple[str, ...]:
        return self.algorithms or (EAGLE3,)

    @property
    def other_algorithms(self) -> tuple[str, ...]:
        """The algorithms needing it when EAGLE-3 does not: what a report names beside it."""
        return () if EAGLE3 in self.needed_by else self.needed_by

    @property
    def kind(self) -> UseKind:
        return "call" if any(u.kind == "call" for u in self.uses) else "attribute"

    @property
    def roles(self) -> list[UseRole]:
        return sorted({u.role for u in self.uses})

    @property
    def role(self) -> UseRole:
        roles = set(self.roles)
        role: UseRole
        for role in ("target", "unknown", "draft"):
            if role in roles:
                return role
        return "unknown"

    @property
    def required(self) -> bool:
        return any(u.required for u in self.uses)

    @property
    def called_at(self) -> list[str]:
        return call_sites(self.uses)


@dataclass(frozen=True)
class Protocol:
    """What EAGLE-3 code expects of a model, read off the consumer code."""

    members: Mapping[str, ProtocolMember]
    consumers: tuple[str, ...]  # files that contributed uses
    general_interface: Mapping[str, str]  # member -> where the runner uses it outside EAGLE-3
    warnings: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()  # members the user asked to leave out
    one_of: tuple[tuple[str, ...], ...] = ()  # groups of optional members of which a model needs one (a hasattr chain that raises)


@dataclass(frozen=True)
class Signature:
    """A member as the inner class defines it (its libcst def: class_index.signature_node)."""

    name: str
    kind: SignatureKind
    owner: str  # class that defines it
    file: str  # path relative to srt
    line: int
    path: Path | None = field(default=None, repr=False, compare=False)  # absolute Path of the file
    header: int | None = field(default=None, repr=False, compare=False)  # line index of the `def`

    @property
    def at(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class ClassInfo:
    """A resolved class: where it is, what it defines, what it inherits."""

    name: str
    file: str
    line: int
    members: Mapping[str, Signature]  # own and inherited, nearest definition wins
    bases: tuple[str, ...]  # resolved chain, nearest first, e.g. ["DeepseekV2ForCausalLM", ...]
    external_bases: tuple[str, ...]  # bases not found in the tree (nn.Module, ...)
    dynamic: bool = False  # __getattr__ forwards any name
    pending: Mapping[str, str] = field(default_factory=dict)  # member -> "file:Base" that this run's apply writes it into
    base_keys: tuple[str, ...] = ()  # `bases` as "file:Name": two files may define one name


@dataclass(frozen=True)
class Unresolved:
    """A construction that builds an inner model and could not be followed statically."""

    construct: str  # the code as written, e.g. "self.model = self._init_model(config)"
    at: str  # "path:line" relative to srt, where the construct is
    why: str  # one clause: what could not be resolved

    def __str__(self) -> str:
        return f"{self.construct} ({self.at}): {self.why}"


@dataclass(frozen=True)
class InnerModel:
    attribute: str
    classes: tuple[ClassInfo, ...]  # one per branch of __init__ that builds it
    line: int  # where __init__ assigns it
    conditional: bool = False
    file: str = ""  # the file whose __init__ assigns it (a base class's, when inherited)
    unresolved: tuple[Unresolved, ...] = ()  # constructions not followed


@dataclass(frozen=True)
class Wrapper:
    cls: ClassInfo
    inners: tuple[InnerModel, ...]
    path: str  # wrapper file, relative to srt
    forwards_dynamically: str | None = None  # "__getattr__ -> language_model" when it does


@dataclass(frozen=True)
class Fix:
    """What `apply` does for a gap: write a delegation to an inner model (`to` its attribute), write
    a body learned from a class of the tree that has the hook (`to` is that "file:Class"), or write
    one into a base class the class inherits it from (`to` is that "file:Class")."""

    kind: FixKind
    to: str

    def as_json(self) -> dict:
        if self.kind == "base":
            return {"kind": self.kind, "base": self.to}
        return {"kind": self.kind, "to": self.to} if self.kind == "delegate" else {"kind": self.kind, "from": self.to}

    @property
    def written_here(self) -> bool:
        """Apply writes it into the class itself (an inherited fix is written into a base)."""
        return self.kind in ("delegate", "synthesize", "base")


@dataclass(frozen=True)
class PlumbingGap:
    """One missing or broken piece of a capture hook's plumbing: what, why (one clause), and where it
    belongs ("file:line")."""

    piece: str  # plumbing/gate.py's Piece
    why: str
    at: str

    def describe(self) -> str:
        return f"{self.piece}: {self.why} ({self.at})"


# --------------------------------------------------------------------------- plumbing written (plumbing/planner.py)

# What a piece is, in the order the plumbing runs:
#   flag-default / selector-default: the `__init__` defaults of the class's flag and the backbone's list;
#   aux-init: the aux list bound before the layer loop; capture: the append in the loop;
#   tail: a `return <hidden>` of the backbone, returning the pair when something was captured;
#   unpack: the pair taken apart after the class forward's backbone call;
#   logits-aux: the aux states handed to `self.logits_processor`.
PieceKind = Literal["flag-default", "selector-default", "index", "aux-init", "capture", "tail", "unpack", "logits-aux", "hook"]
PIECE_KINDS: tuple[PieceKind, ...] = ("flag-default", "selector-default", "index", "aux-init", "capture", "tail", "unpack", "logits-aux", "hook")
# Where a piece goes in its method: at the `end` of its body; `before`/`after` the anchor statement;
# `replace` it; `argument`: added to the `self.logits_processor(...)` call of the anchor statement;
# `beside`: a def of its own, right after the method in the class body (a `hook` piece: the method,
# another algorithm's capture hook of the same class, copied under the name `code`'s def has);
# `header`: the anchor loop's target and iterable become `code`'s (an `index` piece: `for layer in
# self.layers:` -> `for i, layer in enumerate(self.layers):`), its body left as it is.
Where = Literal["end", "before", "after", "replace", "argument", "beside", "header"]


@dataclass(frozen=True)
class PlumbingPiece:
    """One statement group (or one argument) to write: into `method` of `cls` in `file` (its `def` at
    `method_line`), `where` the anchor statement starting at `line` is (its `statement_fingerprint` is
    `anchor`); `code` is the group at indentation 0, one logical line a statement line, INDENT a level."""

    kind: PieceKind
    file: str
    cls: str
    method: str
    method_line: int
    where: Where
    line: int  # 0 for `end`
    anchor: str  # "" for `end`
    code: str
    origin: str  # "file:Class" of the reference it is learned from

    @property
    def target(self) -> str:
        return f"{self.file}:{self.cls}.{self.method}"

    @property
    def defines(self) -> str:
        """The def a `hook` piece writes ("" for any other piece)."""
        found = re.match(r"(?:async\s+)?def\s+(\w+)", self.code) if self.kind == "hook" else None
        return found[1] if found else ""


@dataclass(frozen=True)
class PlumbingBlocker:
    """Why a piece (or the plan) cannot be written: a precondition that fails, and where ("file:line")."""

    piece: str
    why: str
    at: str


@dataclass(frozen=True)
class PlumbingPlan:
    """What to write so that `cls`'s capture hook works: `pieces`, learned from `reference` (and its backbone
    `reference_backbone`), or the `blockers` that stop it (then nothing is to be written)."""

    cls: str  # "file:Class"
    attribute: str  # the backbone, `self.<attribute>`
    reference: str = ""
    reference_backbone: str = ""
    shift: int | None = None  # the reference hook's layer-id shift: `[val + 1 for val in layer_ids]` -> 1
    needs_hook: bool = False  # the class has no hook: the synthesis writes it, learned from `reference`
    pieces: tuple[PlumbingPiece, ...] = ()
    blockers: tuple[PlumbingBlocker, ...] = ()
    caveats: tuple[PlumbingBlocker, ...] = ()  # what the written plumbing leaves as it is (a two-batch-overlap path)

    @property
    def ok(self) -> bool:
        """Something to write and nothing in the way."""
        return bool(self.pieces) and not self.blockers

    @property
    def complete(self) -> bool:
        """The plumbing is all there already."""
        return not self.pieces and not self.blockers

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.file for p in self.pieces))

    @property
    def hooks_written(self) -> frozenset[str]:
        """The hooks the plan writes into the backbone (a `hook` piece's def)."""
        return frozenset(p.defines for p in self.pieces if p.defines)

    def pieces_in(self, file: str) -> tuple[PlumbingPiece, ...]:
        return tuple(p for p in self.pieces if p.file == file)

    @property
    def why(self) -> str:
        """The blockers in one line each (what a `needs_code` verdict says)."""
        return "; ".join(f"{b.piece}: {b.why} ({b.at})" for b in self.blockers)


@dataclass(frozen=True)
class MemberPlan:
    """One protocol member as seen from one model class."""

    member: ProtocolMember
    defined: Signature | None  # where the inner class defines it
    inner_attribute: str | None
    providers: tuple[str, ...] = ()  # inner classes that provide it
    lacking: tuple[str, ...] = ()  # inner classes that do not
    required: bool = False  # EAGLE-3 code needs it on a model of this class's role
    fix: Fix | None = None  # what apply writes; None when it cannot
    blocker: str | None = None  # why there is no fix
    uses: tuple[Use, ...] = ()  # the uses made on this class's role
    synthesis: Synthesis | None = None  # when the fix is a learned body
    gap: GapKind = "member"
    plumbing: tuple[PlumbingGap, ...] = ()  # a plumbing gap's pieces, every one found
    writes_plumbing: PlumbingPlan | None = None  # a learned hook's plumbing, written with it (the plan proven)
    rides_on: PlumbingPlan | None = None  # another hook learned on the plumbing the EAGLE-3 hook's fix writes

    @property
    def called_at(self) -> list[str]:
        return call_sites(self.uses or self.member.uses)

    @property
    def label(self) -> str:
        """What the gap is called in baselines and annotations: the member, or its plumbing."""
        return self.member.name if self.gap == "member" else f"{self.member.name} (plumbing)"


@dataclass(frozen=True)
class ModelPlan:
    wrapper: Wrapper
    status: Status
    role: ModelRole = "target"
    role_reason: str = ""
    missing: tuple[MemberPlan, ...] = ()  # gaps: required, or written by apply
    forwarded: tuple[MemberPlan, ...] = ()  # present on the class (own, inherited or dynamic)
    reason: str = ""
    read: tuple[str, ...] = ()  # files beyond the class's own and its inner models' that the verdict read

    @property
    def fixes(self) -> tuple[MemberPlan, ...]:
        return tuple(m for m in self.missing if m.fix is not None)

    @property
    def writes(self) -> tuple[MemberPlan, ...]:
        """The fixes written into this class itself (not those it inherits from a fixed base)."""
        return tuple(m for m in self.missing if m.fix is not None and m.fix.written_here)

    @property
    def required_gaps(self) -> tuple[MemberPlan, ...]:
        return tuple(m for m in self.missing if m.required)


# --------------------------------------------------------------------------- learned hooks (analyze/synthesize.py)


@dataclass(frozen=True)
class SelfUse:
    """One `self.a.b.c` in a hook body: the chain after `self`, and how it is used."""

    chain: tuple[str, ...]
    store: bool  # assigned or deleted (not only read)


@dataclass(frozen=True)
class Reference:
    """A hook as a class of the tree implements it, with what its body needs."""

    member: str
    owner: ClassInfo
    signature: Signature
    backbone: InnerModel  # the bare backbone the body reaches through
    config_path: tuple[str, ...] | None  # from `self.config` to the backbone's config; None: not seen
    self_uses: tuple[SelfUse, ...]
    free_names: tuple[str, ...]  # module-level names the body reads (imports, globals, builtins)
    knows_pp: bool  # the class keeps `self.pp_group`
    ties: bool  # its __init__ handles tie_word_embeddings
    unportable: str = ""  # why this body cannot be taken anywhere else
    shared_by: int = 1  # classes of the tree with the same body

    @property
    def label(self) -> str:
        return f"{self.owner.file}:{self.owner.name}"

    @property
    def pp_in_body(self) -> bool:
        return any(u.chain[0] == "pp_group" for u in self.self_uses) or "get_pp_group" in self.free_names

    @property
    def model_imports(self) -> int:
        """Private names of its module the body reads: the fewer, the less it drags along."""
        return sum(1 for name in self.free_names if name.startswith("_"))


@dataclass(frozen=True)
class Synthesis:
    """How to write one learned hook into one class: the reference, and what its `self.` chains become."""

    reference: Reference
    backbone: str  # the attribute of the class fixed that holds its backbone
    config_path: tuple[str, ...]  # the class's path from `self.config` to its backbone's config
    pp_call: str = ""  # the class keeps no `self.pp_group`: the body reads this instead (the reference's __init__'s)

    def renames(self) -> dict[tuple[str, ...], tuple[str, ...]]:
        """Prefix of a `self.` chain in the reference -> what it is in the class fixed."""
        ref = self.reference
        out: dict[tuple[str, ...], tuple[str, ...]] = {(ref.backbone.attribute,): (self.backbone,)}
        if ref.config_path is not None:
            key = ("config", *ref.config_path)  # not `out[("config", *...)]`: a syntax error before 3.11
            out[key] = ("config", *self.config_path)
        return out


@dataclass(frozen=True)
class SynthesisFit:
    """What HookLibrary.fit found for one member of one class: the learned body to write, else why none."""

    synthesis: Synthesis | None = None
    why: str = ""
    plumbing: bool = False  # `why` is that the aux states cannot flow: the plumbing writer may answer it
    writes_plumbing: PlumbingPlan | None = None  # the plumbing written with the learned hook
    rides_on: PlumbingPlan | None = None  # judged on the plumbing written with the class's EAGLE-3 hook


# --------------------------------------------------------------------------- preflight (analyze/preflight.py)

Severity = Literal["fail", "warn", "info"]
When = Literal["arguments", "before-load", "after-target-load", "first-request", "silent"]


@dataclass(frozen=True)
class Finding:
    """One thing `preflight` predicts about a launch: how bad, which rule, what it saw, when it would
    bite, where the tree says so ("file:line", relative to srt, or a checkpoint's file), the fix."""

    severity: Severity
    check: str  # a stable kebab-case name
    message: str
    when: When
    where: str = ""
    fix: str = ""


# --------------------------------------------------------------------------- what the stages hand the CLI

Progress = Callable[[str, int], None]  # (the file being read, how many there are): a progress bar's callback


@dataclass(frozen=True)
class FileEdit:
    """One wrapper file: its bytes as planned against, and as they should become."""

    path: Path
    rel: str
    original: bytes
    updated: bytes
    added: dict[str, list[str]] = field(default_factory=dict)  # class -> members added
    imports: list[str] = field(default_factory=list)
    removed: dict[str, list[str]] = field(default_factory=dict)  # class -> members removed (revert)

    @property
    def changed(self) -> bool:
        return self.original != self.updated


@dataclass(frozen=True)
class PreflightReport:
    srt: str
    algorithm: str | None
    target_class: str | None  # "models/file.py:Class"
    draft_class: str | None
    findings: tuple[Finding, ...]

    @property
    def failed(self) -> bool:
        return any(f.severity == "fail" for f in self.findings)
