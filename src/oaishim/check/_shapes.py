"""Rules a and b judged once per shape: what an instance of a shape seen before gets is what its
shape got then.

A stream's chunks are one shape over and over: the same keys, the same ``object`` and ``role``, an
``id``, ``created`` and ``model`` that do not change, and a ``content`` that does. Validating each
against the schema and walking it for unknown keys was nearly half the checker's work on a chunk
(the capture process checks every record it can within its budget; both sides of a stream). Here
an instance is known by its *shape*: its keys in order, its lists' lengths, and every value except
those of properties that the official schema never judges by value: a string, an integer within
the validator's 64 bits, a finite number with a fraction (each stays what it was: the type is part
of the shape).

A property name is *free* under a schema when no occurrence of it anywhere beneath says anything
about a scalar's value: no ``enum``, ``const``, ``pattern``, ``format``, length or range, nor a
``not``/``if`` that could (:func:`free_names`). Validation, and the unknown-key walk (which tells
union branches apart by ``enum``/``const`` only), then give the same answer for any two instances
of one shape. What could still tell two such instances apart seals the property that holds it
(nothing under it is masked): an open map whose values are judged by value (any key can land
there), or an array with ``uniqueItems`` (two items that differ only in a masked value would look
alike); at the root itself, nothing is masked.

Remembered: the last few shapes of each schema, each with rule a's findings and the unknown keys
rule b found, which a later instance of the shape reports again under its own options (a note or
an error). A schema finding's message names the value it is about; rule a's findings are kept only
where none of those values holds a string or a number (:func:`fixed`: ``null is not of type
"array"``, as a backend that sends ``null`` for an absent list gets on every answer), since such a
value is the same in every instance of the shape. Where one does (a masked value could be in it),
rule a runs again for each instance. Seeing a shape costs a walk of the instance beside it, with
nothing allocated.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from functools import cache
from typing import Any, Final

from oaishim.check import _schema
from oaishim.check._findings import Sink

Schema = dict[str, Any]

# Keywords that judge a scalar by its value (a string's or an integer's); a property with one of
# these anywhere in its schema (its $ref, its allOf/anyOf/oneOf branches) is not free
VALUE_KEYWORDS: Final = frozenset(
    {
        "enum", "const", "pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "not", "if", "then", "else", "contentEncoding", "contentMediaType",
        "contentSchema", "$dynamicRef", "$recursiveRef",
    }
)  # fmt: skip
_ONE: Final = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema")  # fmt: skip
_EACH: Final = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAPS: Final = ("patternProperties", "dependentSchemas")  # (``properties`` is walked apart: it names)
RECENT: Final = 8  # the shapes remembered for each root
# the integers a masked value may be: the validator holds JSON numbers as 64-bit ones, so a larger
# integer keeps its value in the shape
_LOW: Final = -(1 << 63)
_HIGH: Final = 1 << 64


class _Mark:
    """A placeholder in a shape (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_OBJ: Final = _Mark("{}")
_ARR: Final = _Mark("[]")
_TEXT: Final = _Mark("str")
_INT: Final = _Mark("int")
_TRUE: Final = _Mark("true")  # (True == 1 in Python: a boolean is kept apart from an integer)
_FALSE: Final = _Mark("false")
_FLOAT: Final = _Mark("float")
_FRACTION: Final = _Mark("fraction")


def _value_free(schema: Any, defs: dict[str, Schema], seen: set[str]) -> bool:
    """Whether ``schema`` says nothing about a scalar's value (its type aside)."""
    if not isinstance(schema, dict):
        return True
    if not VALUE_KEYWORDS.isdisjoint(schema):
        return False
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name not in seen:
            seen.add(name)
            if not _value_free(defs.get(name), defs, seen):
                return False
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key) or ():
            if not _value_free(branch, defs, seen):
                return False
    return True


def free_names(root: str, defs: dict[str, Schema]) -> dict[str, bool] | None:
    """What each property name under ``root`` is to a shape (see the module): True, free (its
    string and integer values masked); False, sealed (it holds an open map whose values are judged
    by value, or an array with ``uniqueItems``: nothing under it is masked); absent, its values kept.
    None where such a map or array is the root's own: nothing can be masked."""
    verdict: dict[str, bool] = {}
    sealed: set[str] = set()
    # (a schema, the nearest property name above it: None at the root)
    todo: list[tuple[Any, str | None]] = [({"$ref": "#/$defs/" + root}, None)]
    visited: set[tuple[str, str | None]] = set()
    while todo:
        schema, via = todo.pop()
        if not isinstance(schema, dict):
            continue
        judged = schema.get("uniqueItems") is True
        for key in ("additionalProperties", "patternProperties"):
            sub = schema.get(key)
            subs = sub.values() if key == "patternProperties" and isinstance(sub, dict) else (sub,)
            judged = judged or any(isinstance(s, dict) and not _value_free(s, defs, set()) for s in subs)
        if judged:
            if via is None:
                return None
            sealed.add(via)
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if (name, via) not in visited:
                visited.add((name, via))
                todo.append((defs.get(name), via))
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                verdict[name] = verdict.get(name, True) and _value_free(sub, defs, set())
                todo.append((sub, name))
        for key in _MAPS:
            mapped = schema.get(key)
            if isinstance(mapped, dict):
                todo.extend((sub, via) for sub in mapped.values())
        for key in _ONE:
            sub = schema.get(key)
            todo.extend((item, via) for item in (sub if isinstance(sub, list) else [sub]))  # (a list: older drafts)
        for key in _EACH:
            todo.extend((sub, via) for sub in schema.get(key) or ())
    names = {name: True for name, free in verdict.items() if free}
    names.update(dict.fromkeys(sealed, False))
    return names


_KEPT: Final[dict[str, bool]] = {}  # no name free: every value kept


@cache
def _names(root: str) -> dict[str, bool]:
    return free_names(root, _schema.defs()) or _KEPT


def _fraction(value: float) -> bool:
    """A finite number that is not an integer (1.0 is one to the validator: its value is kept)."""
    return math.isfinite(value) and not value.is_integer()


def shape(value: Any, names: dict[str, bool]) -> object:
    """``value`` as a hashable shape: the values of free names masked (a string, an integer of the
    validator's range, a finite number with a fraction), nothing under a sealed one (``names``, from
    :func:`free_names`)."""
    if isinstance(value, dict):
        parts: list[object] = [_OBJ]
        for key, item in value.items():
            parts.append(key)
            free = names.get(key)
            if free is None:
                parts.append(shape(item, names))
            elif not free:
                parts.append(shape(item, _KEPT))
            elif type(item) is str:
                parts.append(_TEXT)
            elif type(item) is int and _LOW <= item < _HIGH:
                parts.append(_INT)
            elif type(item) is float and _fraction(item):
                parts.append(_FRACTION)
            else:
                parts.append(shape(item, names))
        return tuple(parts)
    if isinstance(value, list):
        return (_ARR, *[shape(item, names) for item in value])
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, float):
        return (_FLOAT, value)
    return value


def matches(value: Any, form: object, names: dict[str, bool]) -> bool:
    """``shape(value, names) == form``, without building the shape (a chunk is compared with the
    one before it: nothing allocated)."""
    if isinstance(value, dict):
        if not isinstance(form, tuple) or len(form) != 2 * len(value) + 1 or form[0] is not _OBJ:
            return False
        i = 1
        for key, item in value.items():
            known = form[i]
            if known is not key and known != key:
                return False
            expected = form[i + 1]
            i += 2
            free = names.get(key)
            if free is None:
                if not matches(item, expected, names):
                    return False
            elif not free:
                if not matches(item, expected, _KEPT):
                    return False
            elif expected is _TEXT:
                if type(item) is not str:
                    return False
            elif expected is _INT:
                if type(item) is not int or not _LOW <= item < _HIGH:
                    return False
            elif expected is _FRACTION:
                if type(item) is not float or not _fraction(item):
                    return False
            elif type(item) is str or not matches(item, expected, names):
                return False  # (a free name's value that shape() keeps: a large integer, a boolean, an object)
        return True
    if isinstance(value, list):
        if not isinstance(form, tuple) or len(form) != len(value) + 1 or form[0] is not _ARR:
            return False
        n = 1
        for item in value:
            if not matches(item, form[n], names):
                return False
            n += 1
        return True
    if value is None:
        return form is None
    if value is True:
        return form is _TRUE
    if value is False:
        return form is _FALSE
    if isinstance(value, float):
        return isinstance(form, tuple) and len(form) == 2 and form[0] is _FLOAT and form[1] == value
    return type(form) is type(value) and form == value


def fixed(value: Any) -> bool:
    """Whether ``value`` holds no string and no number (keys aside): all of it is in any shape
    that holds it, so every instance of that shape has the same value there."""
    if isinstance(value, dict):
        return all(fixed(item) for item in value.values())
    if isinstance(value, list):
        return all(fixed(item) for item in value)
    return value is None or value is True or value is False


# A shape seen: rule a's findings (``_schema.errors_def``'s; None where they are about a value that
# could differ in another instance of the shape, and are made again for each), and what rule b found
# in it (the unknown keys' path and key, reported again with the options of the check at hand)
_Known = tuple[object, list[tuple[str, str, Any]] | None, list[tuple[str, str]]]


class ShapeMemo:
    """The last ``limit`` shapes of each root, most recently seen first, each with rule a's
    findings (where they hold for every instance of it) and what rule b found in it; and what it
    saved: ``hits`` instances whose shape was known (rule b not run again; nor rule a, but for
    ``revalidated`` of them, where its findings were not kept), ``misses`` checked in full.
    ``names`` gives a root's free and sealed names (:func:`free_names`)."""

    __slots__ = ("hits", "limit", "misses", "names", "recent", "revalidated")

    def __init__(self, names: Callable[[str], dict[str, bool]] | None = None, limit: int = RECENT) -> None:
        self.names = names or _names
        self.limit = limit
        self.recent: dict[str, list[_Known]] = {}
        self.hits = 0
        self.misses = 0
        self.revalidated = 0

    def clear(self) -> None:
        """Forget every shape."""
        self.recent.clear()
        self.hits = self.misses = self.revalidated = 0

    def validate_def(
        self,
        name: str,
        instance: Any,
        sink: Sink,
        *,
        chunk: int | None = None,
        extensions_as_notes: bool = False,
        intended: frozenset[str] = frozenset(),
    ) -> None:
        """Rules a and b for one instance of the named schema (``_schema.validate_def`` and
        ``_schema.report_unknown_def``). Where its shape was seen, what the rules found then is
        reported again; rule a runs again only where its findings then were about a value that
        could be masked (their messages name it)."""
        names = self.names(name)
        recent = self.recent.get(name)
        if recent is None:
            recent = self.recent[name] = []
        whole = isinstance(instance, (dict, list))
        if whole:
            for n, known in enumerate(recent):
                form, errors, keys = known
                if matches(instance, form, names):
                    if n:  # to the front, by value: a thread checking beside this one may be moving
                        # it too (a pop by index failed there: the list is one short in between)
                        with contextlib.suppress(ValueError):
                            recent.remove(known)
                        recent.insert(0, known)
                    self.hits += 1
                    if errors is None:
                        self.revalidated += 1
                        _schema.validate_def(name, instance, sink, chunk=chunk)
                    else:
                        _schema.report_errors(errors, sink, chunk)
                    _schema.report_keys(keys, sink, chunk, extensions_as_notes, intended)
                    return
            self.misses += 1
        found = _schema.errors_def(name, instance)
        _schema.report_errors(found, sink, chunk)
        keys = _schema.unknown_keys(_schema.root(name), instance, "$")
        if whole:
            kept = found if all(fixed(value) for _, _, value in found) else None
            recent.insert(0, (shape(instance, names), kept, keys))
            del recent[self.limit :]
        _schema.report_keys(keys, sink, chunk, extensions_as_notes, intended)


MEMO: Final = ShapeMemo()  # the process's
