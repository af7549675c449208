"""What a name in a copied signature stands for in the inner file, and what it is bound to in the wrapper.

Defaults and annotations of a method are evaluated in its class body when the `def` runs: a
name there is first a class attribute (bound earlier in the same class body), then a module
global, then a builtin.  An annotation that stays a string (quoted, or under `from __future__
import annotations`) is evaluated later, by `typing.get_type_hints`, in the module's globals only.

`inner_meaning` says what a name meant to the inner method (leniently: whatever the inner module
holds under a name it binds conditionally is still that name); `wrapper_binding` says what the
wrapper binds a name to when its class body runs, strictly: one unconditional module-level binding
before the class (all runtime bindings agreeing), nothing in the class body before the member,
or the builtin.  Both answers are canonical qualified names, so they can be compared.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import libcst as cst

from .scopes import BUILTINS, CONDITIONAL, CONSTANTS, TOP, TYPE_CHECKING, Binding, Exports, ModuleScope

CONSTANT = "constant"  # None, True, False
BUILTIN = "builtin"
GLOBAL = "global"  # a module-level binding of the inner module (or what it imports)
CLASS_ATTRIBUTE = "class_attribute"  # bound in the owner's class body before the method
TYPE_ONLY = "type_only"  # imported only under `if TYPE_CHECKING:`
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Meaning:
    """What a name in the inner signature stands for, and what the wrapper may use to spell it."""

    kind: str
    qualified: str = ""  # "typing.Optional", "builtins.int", "sglang.srt.models.inner.Inner.X"
    spec: tuple[str, str | None] | None = None  # (module, object or None): an import binding it
    literal: cst.BaseExpression | None = None  # its value, when that is an immutable literal
    owner: tuple[str, str] | None = None  # (module, class) whose attribute it is, when `Owner.X` says it
    why: str = ""


@dataclass(frozen=True)
class Resolution:
    """What the wrapper binds a name to where the generated code uses it."""

    qualified: str | None  # canonical; None when nothing provably binds it
    problem: str = ""  # why not, one clause
    type_only: bool = False  # bound, but only for type checkers
    culprit: tuple[str | None, int, str] | None = None  # (class or None, statement, name) of the binding at fault
    via_star: bool = False  # bound only through a star import (of a module in the tree)


# --------------------------------------------------------------------------- literals


_LITERAL_NODES = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis)


def immutable_literal(node: cst.CSTNode | None) -> bool:
    """An expression that always makes an equal, immutable value: numbers, strings, bytes, None, True,
    False, `...`, signs, and tuples of those (a list would be a fresh object, not the inner's)."""
    if isinstance(node, _LITERAL_NODES):
        return not _has_fstring(node)
    if isinstance(node, cst.Name):
        return node.value in CONSTANTS
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        return isinstance(node.expression, (cst.Integer, cst.Float, cst.Imaginary))
    if isinstance(node, cst.Tuple):
        return all(isinstance(e, cst.Element) and immutable_literal(e.value) for e in node.elements)
    return False


def _has_fstring(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.ConcatenatedString):
        return _has_fstring(node.left) or _has_fstring(node.right)
    return isinstance(node, cst.FormattedString)


def literal_value(node: cst.BaseExpression) -> Any:  # whatever Python literal the expression spells
    return ast.literal_eval(cst.Module(body=[]).code_for_node(node).strip())


def same_literal(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Equal values of the same types, all the way down (1 == 1.0 == True are not the same default)."""
    try:
        return _typed(literal_value(a)) == _typed(literal_value(b))
    except (ValueError, SyntaxError, TypeError):
        return False


def _typed(value: object) -> tuple[object, object]:
    if isinstance(value, tuple):
        return (tuple, tuple(_typed(v) for v in value))
    return (type(value), value)


# --------------------------------------------------------------------------- the inner side


def inner_meaning(scope: ModuleScope, exports: Exports, name: str, cls: str | None, before: int | None, lazy: bool) -> Meaning:
    """What `name` meant where the inner method's signature uses it (`cls` body, before statement
    `before`; `lazy`: in a string annotation, evaluated in the module's globals only)."""
    if name in CONSTANTS:
        return Meaning(CONSTANT, f"builtins.{name}")
    if not lazy and cls is not None:
        inside = [b for b in scope.class_bindings(cls, name) if before is None or b.statement < before]
        if inside:
            return _class_attribute(scope, name, cls, inside, before)
    bindings = scope.module_bindings(name)
    runtime = [b for b in bindings if b.context != TYPE_CHECKING]
    if name in scope.rebound_by_functions:
        return _whatever_the_module_holds(scope, name, runtime)
    if len(runtime) == 1 and runtime[0].context == TOP:
        only = runtime[0]
        qualified = exports.canonical(only.qualified)
        if _star_meanings(scope, exports, name) - {qualified}:  # a star import may rebind it
            return _whatever_the_module_holds(scope, name, runtime)
        return Meaning(GLOBAL, qualified, only.spec, _literal_of(only))
    if runtime:
        return _whatever_the_module_holds(scope, name, runtime)
    if bindings:
        return Meaning(TYPE_ONLY, exports.canonical(bindings[0].qualified), bindings[0].spec, why=f"{name} is imported only under TYPE_CHECKING")
    stars = [module for module, context in scope.star_imports if context != TYPE_CHECKING]
    for module in reversed(stars):
        found = exports.star_provides(module, name)
        if found is not None:
            return Meaning(GLOBAL, exports.canonical(found), (module, name))
    if name in BUILTINS:
        return Meaning(BUILTIN, f"builtins.{name}", ("builtins", name))
    if stars:  # a star import the analysis cannot read (outside the tree): the inner module holds it
        return Meaning(GLOBAL, f"{scope.dotted}.{name}", (scope.dotted, name))
    return Meaning(UNKNOWN, why=f"{name} is not bound in {scope.dotted}")


def _star_meanings(scope: ModuleScope, exports: Exports, name: str) -> set[str]:
    """What the module's runtime star imports of in-tree modules bind `name` to (they may rebind it)."""
    found = set()
    for module, context in scope.star_imports:
        if context != TYPE_CHECKING and (provided := exports.star_provides(module, name)) is not None:
            found.add(exports.canonical(provided))
    return found


def _class_attribute(scope: ModuleScope, name: str, cls: str, inside: list[Binding], before: int | None) -> Meaning:
    """A class-body name: `Owner.name` says it when the body binds it once, unconditionally, and never
    again; its literal value says it when every binding before the method is unconditional."""
    every = scope.class_bindings(cls, name)
    literal = inside[-1].value if all(b.context == TOP for b in inside) and immutable_literal(inside[-1].value) else None
    qualified = f"{scope.dotted}.{cls}.{name}"
    if len(every) == 1 and every[0].context == TOP:
        return Meaning(CLASS_ATTRIBUTE, qualified, owner=(scope.dotted, cls), literal=literal)
    if literal is not None:
        return Meaning(CLASS_ATTRIBUTE, qualified, literal=literal)
    how = "conditionally" if any(b.context != TOP for b in inside) else f"{len(every)} times"
    return Meaning(UNKNOWN, why=f"{cls}.{name} is bound {how} in the class body")


def _whatever_the_module_holds(scope: ModuleScope, name: str, runtime: list[Binding]) -> Meaning:
    """Bound more than once or conditionally: the object the inner module holds under that name."""
    literals = [b.value for b in runtime if b.value is not None and immutable_literal(b.value)]
    literal = literals[0] if literals and len(literals) == len(runtime) and all(same_literal(literals[0], v) for v in literals) else None
    return Meaning(GLOBAL, f"{scope.dotted}.{name}", (scope.dotted, name), literal)


def _literal_of(binding: Binding) -> cst.BaseExpression | None:
    return binding.value if binding.own and immutable_literal(binding.value) else None


# --------------------------------------------------------------------------- the wrapper side


def wrapper_binding(
    scope: ModuleScope,
    exports: Exports,
    name: str,
    cls: str,
    class_names: set[str] | None,
    before: int | None,
    lazy: bool,
) -> Resolution:
    """What the wrapper binds `name` to when the body of class `cls` runs, or why that is not proven.

    The class body shadows a name it binds before the member (`before`; every name in `class_names`
    when the member's place is not known yet).  A lazy name (in a string, or under `from __future__
    import annotations`) is looked up in the module only, whenever it is bound."""
    if name in CONSTANTS:
        return Resolution(f"builtins.{name}")
    if not lazy:
        shadows = [b for b in scope.class_bindings(cls, name) if before is None or b.statement < before]
        if shadows:
            return Resolution(None, f"{cls}.{name} in the class body shadows it", culprit=(cls, shadows[0].statement, name))
        if class_names is not None and name in class_names:
            return Resolution(None, f"{cls}.{name} in the class body shadows it", culprit=(cls, -1, name))
    if name in scope.rebound_by_functions:
        return Resolution(None, "a function rebinds it with `global`")
    bindings = scope.module_bindings(name)
    runtime = [b for b in bindings if b.context != TYPE_CHECKING]
    own_imports = [b for b in runtime if b.spec is not None and not b.own and b.spec[0] == scope.dotted]
    if own_imports:
        return Resolution(None, "it is imported from the wrapper's own module", culprit=(None, own_imports[0].statement, name))
    if runtime:
        meanings = {exports.canonical(b.qualified) for b in runtime} | _star_meanings(scope, exports, name)
        if len(meanings) > 1:
            return Resolution(None, "the module binds it to different objects", culprit=(None, runtime[-1].statement, name))
        limit = scope.class_statement(cls)
        if not any(b.context == TOP and (lazy or limit is None or b.statement < limit) for b in runtime):
            where = "only under a module-level if/try" if all(b.context == CONDITIONAL for b in runtime) else "only after the class"
            return Resolution(None, f"it is bound {where}", culprit=(None, runtime[0].statement, name))
        return Resolution(meanings.pop())
    if bindings:
        qualified = exports.canonical(bindings[0].qualified)
        return Resolution(
            qualified if lazy else None,
            "it is imported only under TYPE_CHECKING",
            type_only=True,
            culprit=(None, bindings[0].statement, name),
        )
    stars = [module for module, context in scope.star_imports if context != TYPE_CHECKING]
    for module in reversed(stars):
        found = exports.star_provides(module, name)
        if found is not None:
            return Resolution(exports.canonical(found), via_star=True)
    if stars and any(exports.table(module) is None for module in stars):
        return Resolution(None, "a star import the analysis cannot read may bind it")
    if name in BUILTINS:
        return Resolution(f"builtins.{name}")
    return Resolution(None, "nothing binds it at module level (NameError when the class body runs)")
