"""The whole request against the official request schema, and its first failure in the official words.

The bundle (``request_schemas.json``, written by ``oaishim.check.specgen`` from the official spec) is
read and compiled once per process. A valid body costs one ``is_valid`` call (about a microsecond);
only a refused one pays for reading the errors.

A failed ``anyOf``/``oneOf`` says only "not valid under any of the schemas"; :func:`_explain` goes
into its branches for the one the value was meant for: a branch is *off* when the value has another
type than it wants, or another discriminator (``role``, ``type``) than it names. Among the branches
not off, the one with the fewest type errors, then the fewest errors, is followed. When every branch
is off, the value is of none of the union's types (``invalid_type``, listing them) or names none of
its discriminators (``invalid_value``, listing them).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final

import jsonschema_rs
import orjson

from oaishim.transform.validate._errors import (
    bad_length,
    invalid_type,
    invalid_value,
    missing,
    no_match,
    one_of,
    out_of_range,
    param_path,
    unknown_parameter,
)
from oaishim.wire.errors import OpenAIError, bad_request

BUNDLE_PATH: Final = Path(__file__).with_name("request_schemas.json")
_K: Final = jsonschema_rs.ValidationErrorKind
_UNIONS: Final = (_K.AnyOf, _K.OneOfNotValid)
_DISCRIMINATORS: Final = frozenset({"role", "type"})
_NOUNS: Final = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean", "object": "object"}


@cache
def _bundle() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(BUNDLE_PATH.read_bytes())
    return data


@cache
def _validator(endpoint: str) -> Any:
    bundle = _bundle()
    schema = {"$ref": "#/$defs/" + bundle["roots"][endpoint], "$defs": bundle["$defs"]}
    return jsonschema_rs.Draft202012Validator(schema)


def check_schema(endpoint: str, body: Any) -> None:
    """Raise :class:`OpenAIError` (400) for the first place ``body`` breaks the official schema."""
    validator = _validator(endpoint)
    if validator.is_valid(body):
        return
    error = next(iter(validator.iter_errors(body)))
    raise _explain(error, body)


def _param(body: Any, path: list[str | int], *more: str) -> str:
    """The ``param`` for an error path. jsonschema-rs gives an object key "1" as the integer 1, so the
    body says which parts are keys: ``logit_bias.1``, not ``logit_bias[1]``."""
    parts: list[str | int] = []
    node = body
    for part in path:
        if isinstance(node, dict):
            key = str(part)
            parts.append(key)
            node = node.get(key)
        else:
            parts.append(part)
            node = node[part] if isinstance(node, list) and isinstance(part, int) else None
    return param_path([*parts, *more])


# -- reading the schema an error points at -------------------------------------------------------


def _schema_at(path: list[str | int]) -> dict[str, Any]:
    node: Any = {"$defs": _bundle()["$defs"]}
    for part in path:
        node = node[part]
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        node = _schema_at(["$defs", node["$ref"].removeprefix("#/$defs/")])
    return node if isinstance(node, dict) else {}


def _noun(kind: str, schema: dict[str, Any]) -> str:
    """``array`` with object items -> ``array of objects``; ``string`` -> ``string``."""
    if kind != "array":
        return _NOUNS.get(kind, kind)
    items = schema.get("items")
    if not isinstance(items, dict):
        return "array"
    if "$ref" in items:
        items = _schema_at(["$defs", items["$ref"].removeprefix("#/$defs/")])
    kinds = _types(items)
    if len(kinds) == 1:
        return f"array of {_noun(kinds[0], items)}s"
    return "array"


def _types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a schema allows, looking through unions and ``$ref`` (no ``null``)."""
    own = schema.get("type")
    if own is not None:
        return [t for t in ([own] if isinstance(own, str) else own) if t != "null"]
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        for raw in schema.get(key, ()):
            branch = _schema_at(["$defs", raw["$ref"].removeprefix("#/$defs/")]) if "$ref" in raw else raw
            found += [t for t in _types(branch) if t not in found]
    return found


def _article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


# -- choosing the error to report ----------------------------------------------------------------


def _leaves(error: Any, here: list[str | int]) -> Iterator[list[Any]]:
    """The branches of a union at ``here`` as lists of errors, nested unions at ``here`` flattened."""
    for branch in error.kind.context:
        nested = next((e for e in branch if isinstance(e.kind, _UNIONS) and e.instance_path == here), None)
        if nested is None:
            yield branch
        else:
            rest = [e for e in branch if e is not nested]
            for sub in _leaves(nested, here):
                yield rest + sub


def _is_type_miss(error: Any, here: list[str | int]) -> bool:
    return isinstance(error.kind, _K.Type) and error.instance_path == here


def _is_tag_miss(error: Any, here: list[str | int]) -> bool:
    path = error.instance_path
    return (
        isinstance(error.kind, (_K.Enum, _K.Constant))
        and len(path) == len(here) + 1
        and path[:-1] == here
        and path[-1] in _DISCRIMINATORS
    )


def _options(error: Any) -> list[Any]:
    kind = error.kind
    values = kind.options if isinstance(kind, _K.Enum) else [kind.expected_value]
    return [v for v in values if v is not None]


def _explain_union(error: Any, body: Any) -> OpenAIError:
    here = error.instance_path
    branches = list(_leaves(error, here))
    fitting = [b for b in branches if not any(_is_type_miss(e, here) or _is_tag_miss(e, here) for e in b)]
    if fitting:
        # A type error inside a branch (prompt [[]] against "array of strings") says it is the wrong one.
        best = min(fitting, key=lambda b: (sum(isinstance(e.kind, _K.Type) for e in b), len(b)))
        return _explain(best[0], body)
    param = _param(body, here)
    tags = [e for b in branches for e in b if _is_tag_miss(e, here)]
    if tags and any(not any(_is_type_miss(e, here) for e in b) for b in branches):
        key = tags[0].instance_path[-1]
        if not isinstance(error.instance[key], str):
            return invalid_type(_param(body, here, key), "a string", error.instance[key])
        allowed = list(dict.fromkeys(v for e in tags if e.instance_path[-1] == key for v in _options(e)))
        return invalid_value(_param(body, here, key), error.instance[key], allowed)
    nouns: list[str] = []
    for branch in branches:
        for e in branch:
            if _is_type_miss(e, here):
                schema = _schema_at(list(e.schema_path[:-1]))
                nouns += [n for t in e.kind.types if t != "null" for n in [_noun(t, schema)] if n not in nouns]
    phrases = [_article(nouns[0]), *nouns[1:]] if nouns else ["another type"]
    return invalid_type(param, one_of(phrases), error.instance)


def _explain(error: Any, body: Any) -> OpenAIError:
    """The OpenAI error for one jsonschema-rs error."""
    kind = error.kind
    if isinstance(kind, _UNIONS):
        return _explain_union(error, body)
    path = error.instance_path
    param = _param(body, path)
    value = error.instance
    if isinstance(kind, _K.Type):
        schema = _schema_at(list(error.schema_path[:-1]))
        nouns = [_noun(t, schema) for t in kind.types if t != "null"] or ["null"]
        return invalid_type(param, one_of([_article(nouns[0]), *nouns[1:]]), value)
    if isinstance(kind, (_K.Enum, _K.Constant)):
        return invalid_value(param, value, _options(error))
    if isinstance(kind, _K.Required):
        return missing(_param(body, path, kind.property))
    if isinstance(kind, _K.AdditionalProperties):
        return unknown_parameter(_param(body, path, kind.unexpected[0]))
    if isinstance(kind, (_K.Minimum, _K.ExclusiveMinimum, _K.Maximum, _K.ExclusiveMaximum)):
        below = isinstance(kind, (_K.Minimum, _K.ExclusiveMinimum))
        limit: Any = kind.limit  # an int where the schema has one: int64 bounds do not survive a float
        integer = isinstance(value, int) or float(value).is_integer()
        return out_of_range(param, value, limit, below=below, integer=integer)
    if isinstance(kind, (_K.MinItems, _K.MaxItems)):
        return bad_length(param, "array", len(value), kind.limit, below=isinstance(kind, _K.MinItems))
    if isinstance(kind, (_K.MinLength, _K.MaxLength)):
        return bad_length(param, "string", len(value), kind.limit, below=isinstance(kind, _K.MinLength))
    if isinstance(kind, _K.Pattern):
        return no_match(param, kind.pattern)
    return bad_request(f"Invalid '{param}': {error.message}.", param or None, "invalid_value")
