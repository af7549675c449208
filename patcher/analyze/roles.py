"""Analyze stage: which part each model class plays when SGLang serves it (target, draft or other).

A requirement holds for a class only when EAGLE-3 code makes that call on a model of the
class's role, so the role decides what is reported.  It is learned from SGLang's own code
where SGLang says it:

* **draft**: the architectures `configs/` maps a checkpoint to when it is loaded as the draft
  (`if is_draft_model and ...: hf_config.architectures[0] = "DeepseekV3ForCausalLMNextN"`);
* **other**: the architectures SGLang's `is_generation_model` answers False for (reward,
  classification, embedding models): they never serve generation, so never EAGLE-3; and the vision
  and audio encoders another model class holds (`self.vision_tower = PixtralVisionModel(...)`),
  though their module names them in its EntryClass: they run inside the model that holds them.

Classes the configuration does not name fall back on the naming SGLang uses for the same
kinds (`...Eagle3`, `...NextN`, `...MTP`; `...ForSequenceClassification`, `...Embedding...`),
and a subclass takes its in-tree base's role.  Everything else is a target.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import EaglepatchError
from ..read.source_cache import SourceCache
from ..read.statements import statement_walk, walk
from ..records import ClassInfo, ModelRole

if TYPE_CHECKING:
    from .context import RunContext

# How SGLang names draft heads and non-generation models when the configuration is silent.
_DRAFT_NAME = re.compile(r"Eagle|NextN|MTP|Mtp|Medusa|DFlash|DSpark|Draft")
_DRAFT_FILE = re.compile(r"(?:^|_)(?:eagle\d*|nextn|mtp|medusa|dflash|dspark|draft)(?:_|\.py$)")
# What an encoder is called, itself or through a base; a class so named counts as one only when another holds it.
_ENCODER_NAME = re.compile(r"Vision(?:Model|Transformer|Encoder|Tower)|Audio(?:Model|Encoder|Tower)|VisionTransformer|ViT(?:Model)?$|Encoder$")
_HOLDS_ENCODER = re.compile(
    r"self\.\w+\s*(?::[^=\n]*)?=\s*(?:\w+\.)*(\w*(?:Vision|Audio|Encoder|ViT)\w*)\s*\(", re.MULTILINE
)
_OTHER_NAME = re.compile(
    r"ForSequenceClassification|ForTokenClassification|ForRewardModel|RewardModel|Embedding|"
    r"ForEmbedding|Pooling|Classification|Reranker|ForScoring"
)


@dataclass
class RoleBook:
    """Architectures SGLang's configuration names as drafts or as non-generation models."""

    draft: dict[str, str] = field(default_factory=dict)  # architecture -> where the config says so
    other: dict[str, str] = field(default_factory=dict)
    cache: SourceCache | None = None  # the run's reading: where encoders are found held, when asked
    _held: dict[str, str] | None = field(default=None, repr=False)  # encoder-named class -> where another class builds it

    def role_of(self, cls: ClassInfo) -> tuple[ModelRole, str]:
        """The class's role and one clause saying why."""
        for name in [cls.name, *cls.bases]:
            inherited = "" if name == cls.name else f" (through its base {name})"
            if name in self.draft:
                return "draft", f"loaded as a draft model: {self.draft[name]}{inherited}"
            if name in self.other:
                return "other", f"not a generation model: {self.other[name]}{inherited}"
        encoder = self._encoder(cls)
        if encoder:
            return "other", encoder
        # names say it only of the class itself: a base called `...EagleMixin` makes no draft
        if _DRAFT_NAME.search(cls.name):
            return "draft", "named as a draft model"
        if _OTHER_NAME.search(cls.name):
            return "other", "named as a non-generation model"
        file_name = os.path.basename(cls.file)
        if _DRAFT_FILE.search(file_name):
            return "draft", f"defined in a draft-model module ({cls.file})"
        return "target", "a generation model: served as the target"


    def _encoder(self, cls: ClassInfo) -> str:
        """Why `cls` is a vision or audio encoder ("" when it is not): named so (itself or a base) and
        producing no logits (no `lm_head`, no `logits_processor`), or built by another class as a part."""
        if not any(_ENCODER_NAME.search(n) for n in (cls.name, *cls.bases)) or {"lm_head", "logits_processor"} & set(cls.members):
            return ""
        holder = self._holder(cls.name)
        if holder:
            return f"an encoder another model holds ({holder}): it runs inside that model, never as the target"
        return "named as a vision or audio encoder, with no lm_head: it produces no logits, so it is never the target"

    def _holder(self, name: str) -> str:
        """Where another class builds the class `name` as one of its parts (`self.tower = Name(...)`)."""
        if self.cache is None:
            return ""
        if self._held is None:
            self._held = {}
            models = self.cache.srt / "models"
            for path in sorted(models.rglob("*.py")) if models.is_dir() else ():
                try:
                    text = self.cache.read(path).text
                except EaglepatchError:
                    continue
                for match in _HOLDS_ENCODER.finditer(text):
                    self._held.setdefault(match.group(1), f"{self.cache.rel(path)}:{text.count(chr(10), 0, match.start()) + 1}")
        return self._held.get(name, "")


def learn_roles(run: RunContext) -> RoleBook:
    """Read the configuration modules once (CPython's ast: they are only searched, never edited); the
    run's reading is where encoders are found held by other classes."""
    tree = run.tree
    book = RoleBook(cache=run.cache)
    configs = tree.srt / "configs"
    if not configs.is_dir():
        return book
    for path in sorted(configs.glob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        wants_draft = b"draft" in data and b"architectures" in data
        wants_other = b"is_generation_model" in data
        if not (wants_draft or wants_other):
            continue
        try:
            module = ast.parse(data)
        except (SyntaxError, ValueError):
            continue
        rel = f"{tree.rel(path)}"
        if wants_draft:
            _learn_drafts(module, rel, book.draft)
        if wants_other:
            _learn_non_generation(module, rel, book.other)
    return book


def _mentions_word(node: ast.AST, word: str) -> bool:
    for sub in walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else ""
        if word in name.lower():
            return True
    return False


def _assigns_architectures(target: ast.AST) -> bool:
    if isinstance(target, ast.Subscript):
        target = target.value
    return isinstance(target, ast.Attribute) and target.attr == "architectures"


def _strings(node: ast.AST) -> list[str]:
    return [sub.value for sub in walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)]


def _learn_drafts(module: ast.Module, rel: str, out: dict[str, str]) -> None:
    """`if <draft condition>: ....architectures[0] = "X"` names X as a draft architecture."""
    for node in statement_walk(module):
        if not isinstance(node, ast.If) or not _mentions_word(node.test, "draft"):
            continue
        for stmt in node.body:
            for sub in statement_walk(stmt):
                if isinstance(sub, ast.Assign) and any(_assigns_architectures(t) for t in sub.targets):
                    for name in _strings(sub.value):
                        if name.isidentifier():
                            out.setdefault(name, f"{rel}:{sub.lineno} maps the checkpoint to it when is_draft_model")


def _learn_non_generation(module: ast.Module, rel: str, out: dict[str, str]) -> None:
    """`def is_generation_model(...)`: the architectures tested with `in` in a branch that returns False."""
    for func in statement_walk(module):
        if not isinstance(func, ast.FunctionDef) or "generation" not in func.name:
            continue
        for node in statement_walk(func):
            if not isinstance(node, ast.If) or not _returns_false(node.body):
                continue
            for compare in walk(node.test):
                if isinstance(compare, ast.Compare) and any(isinstance(op, ast.In) for op in compare.ops):
                    for name in _strings(compare.left):
                        if name.isidentifier():
                            out.setdefault(name, f"{rel}:{compare.lineno} ({func.name} answers False)")


def _returns_false(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Constant) and stmt.value.value is False
        for stmt in body
    )
