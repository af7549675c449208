"""What a class looks like once this run's `apply` has written its fixes: derived records, never the
cached ones changed.

One `apply` does what several would: a member written into a base class serves its subclasses (they
inherit it) and the wrappers that hold one (they can forward to it).  The planner asks again with the
classes seen through what the last round writes, until what is written no longer changes; the class
index keeps the tree as it is, so every round reads the same classes and nothing is forgotten by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..records import ClassInfo, InnerModel, Signature, Wrapper

# (file, class) -> the members this run's apply writes into it, with the signature each is written with
Written = Mapping[tuple[str, str], Mapping[str, Signature]]


class WrittenOverlay:
    """The classes of a run seen through one round's writes (`members` gains what a base gets written,
    `pending` says which "file:Base" that is); a class whose bases get nothing is returned as it is."""

    def __init__(self, written: Written):
        self.written = written
        # by class name, as a class's resolved bases are named (a later file wins a name two files define)
        self._by_name = {name: (file, members) for (file, name), members in written.items()}

    def cls(self, info: ClassInfo) -> ClassInfo:
        added: dict[str, Signature] = {}
        pending: dict[str, str] = {}
        for index, base in enumerate(info.bases):  # nearest first: the nearest base written wins
            if info.base_keys:  # the base's own file: another file's class of the same name is not it
                file = info.base_keys[index].rpartition(":")[0]
                members = self.written.get((file, base), {})
            else:
                file, members = self._by_name.get(base, ("", {}))
            for member, signature in members.items():
                if member not in info.members and member not in added:
                    added[member] = signature
                    pending[member] = f"{file}:{base}"
        if not added:
            return info
        return replace(info, members={**info.members, **added}, pending={**info.pending, **pending})

    def inner(self, inner: InnerModel) -> InnerModel:
        classes = tuple(self.cls(c) for c in inner.classes)
        return inner if all(a is b for a, b in zip(classes, inner.classes)) else replace(inner, classes=classes)

    def wrapper(self, wrapper: Wrapper) -> Wrapper:
        cls = self.cls(wrapper.cls)
        inners = tuple(self.inner(i) for i in wrapper.inners)
        if cls is wrapper.cls and all(a is b for a, b in zip(inners, wrapper.inners)):
            return wrapper
        return replace(wrapper, cls=cls, inners=inners)
