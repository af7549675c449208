"""Python's method resolution order (C3) over the classes a tree defines: the one order every
class question is answered in (the plumbing gate's TreeClasses, the vLLM engine's VllmTree)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def c3_order(key: K, bases: Callable[[K], Sequence[K]]) -> list[K]:
    """Python's method resolution order over the classes `bases` knows (its direct in-tree bases);
    depth-first, each once, where C3 has no answer (a tree Python itself would refuse)."""
    memo: dict[K, list[K]] = {}

    def linear(current: K, seen: frozenset[K]) -> list[K]:
        if current in memo:
            return memo[current]
        direct = [b for b in bases(current) if b not in seen and b != current]
        pending = [linear(b, seen | {current}) for b in direct] + [list(direct)]
        out = [current]
        pending = [list(p) for p in pending if p]
        while pending:
            for head in (p[0] for p in pending):
                if not any(head in p[1:] for p in pending):
                    break
            else:  # no consistent order: first come, first served
                rest = [k for p in pending for k in p]
                out += [k for k in dict.fromkeys(rest) if k not in out]
                break
            out.append(head)
            pending = [p[1:] if p[0] == head else p for p in pending]
            pending = [p for p in pending if p]
        memo[current] = out
        return out

    return linear(key, frozenset())
