"""Small helpers on libcst name nodes, shared by the codemods and the analysis."""

from __future__ import annotations

import libcst as cst


def dotted_name(node: cst.CSTNode | None) -> str:
    """`a.b.c` for a Name/Attribute chain; "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{dotted_name(node.value)}.{node.attr.value}"
    return ""
