"""Analyze stage: what one run reads through, as one frozen record (libcst's CodemodContext, black's Mode).

The tree, its one SourceCache (each file read and each slice parsed once a run), the tree's own
formatting style, and the protocol read off the consumers.  The protocol is itself read through a
context that has none yet; the stages after it get the context derived with it (`with_protocol`),
so no stage takes a tree, a cache and a protocol as three arguments that could disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..read.locate import SourceTree
from ..read.source_cache import SourceCache
from ..read.style import DEFAULT_STYLE, FormatStyle
from ..records import Protocol


@dataclass(frozen=True)
class RunContext:
    tree: SourceTree
    cache: SourceCache
    style: FormatStyle = DEFAULT_STYLE
    protocol: Protocol | None = None  # None while the protocol itself is being read

    @classmethod
    def fresh(cls, tree: SourceTree, protocol: Protocol | None = None) -> RunContext:
        """A context with a reading of its own: for a tool or a test that runs one stage alone."""
        return cls(tree, SourceCache(tree.srt), protocol=protocol)

    def with_protocol(self, protocol: Protocol) -> RunContext:
        return replace(self, protocol=protocol)

    @property
    def protocol_read(self) -> Protocol:
        """The protocol, for the stages that run after it is read."""
        if self.protocol is None:
            raise RuntimeError("this run has not read its protocol yet: derive the context with with_protocol() first")
        return self.protocol
