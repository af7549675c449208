"""Small helpers on libcst name nodes, shared by the codemods and the analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the constants below are read by `check`, which does not load libcst
    import libcst as cst

# What the written code looks like; here rather than in add_delegations so that reading a tree
# never imports libcst.codemod (a third of a second of start-up, for matchers it does not use).
MARKER = "# eaglepatch: forwards to self."
LEARNED = "# eaglepatch: learned from "  # a hook body taken from another class of the tree (patcher/analyze/synthesize.py)
PLUMBING = "# eaglepatch: plumbing learned from "  # a statement group (or an argument) of capture plumbing (codemods/add_plumbing.py)
NOTE = "# eaglepatch: "  # the prefix of the line under the marker saying why a signature is not the inner's
LINE_LENGTH = 88  # black's default width; the target tree's own (patcher/read/style.py) is passed to each codemod


def cst_dotted_name(node: cst.CSTNode | None) -> str:
    """`a.b.c` for a Name/Attribute chain; "" for anything else."""
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{cst_dotted_name(node.value)}.{node.attr.value}"
    return ""
