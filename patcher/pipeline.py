"""The stages wired together: locate -> protocol -> resolve -> plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from patcher.locate import SourceTree, locate_tree
from patcher.plan import plan_wrapper
from patcher.protocol import extract_protocol
from patcher.records import ModelPlan, Protocol
from patcher.resolve import Resolver, select_wrappers
from patcher.source import SourceCache

DEFAULT_MODEL = "kimi_k25"


@dataclass
class Analysis:
    tree: SourceTree
    cache: SourceCache
    protocol: Protocol
    plans: list[ModelPlan]
    warnings: list[str] = field(default_factory=list)

    @property
    def missing_count(self) -> int:
        return sum(len(p.missing) for p in self.plans)


def analyze(
    path: Path | str | None,
    models: list[str] | None = None,
    extra_consumers: list[Path] | None = None,
    all_models: bool = False,
    progress=None,
) -> Analysis:
    """The protocol is extracted once and shared by every wrapper looked at."""
    tree = locate_tree(path)
    cache = SourceCache(tree.srt)
    protocol = extract_protocol(tree, cache, extra_consumers)
    resolver = Resolver(tree, cache)
    if all_models:
        wrappers = resolver.all_wrappers(protocol, progress)
    else:
        wrappers = [w for selector in models or [DEFAULT_MODEL] for w in select_wrappers(tree, cache, resolver, selector, protocol)]
    plans: list[ModelPlan] = [plan_wrapper(protocol, w) for w in wrappers]
    return Analysis(tree, cache, protocol, plans, list(protocol.warnings) + resolver.warnings)
