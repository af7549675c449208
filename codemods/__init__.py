"""libcst transformers used by eaglepatch: one transformer per job."""

from codemods.add_delegations import AddDelegations, Delegation, render_delegation

__all__ = ["AddDelegations", "Delegation", "render_delegation"]
