"""Rules a and b: validation against the official schema, and keys the schema does not define.

The bundle (``openai_schemas.json``, written by :mod:`oaishim.check.specgen`) is read and its
validators built once per process; both take about a millisecond.

JSON Schema cannot say "no other keys" here: the spec sets ``additionalProperties: false`` on none of
these objects (docs/wire-format.md §0.4), so vendor fields pass validation. :func:`unknown_keys`
walks the instance beside its schema and reports each key no applicable schema defines. For
``anyOf``/``oneOf`` it keeps the branches the instance can belong to (type, required keys and
``enum`` values of its properties agree), so a function tool call is not allowed a custom call's keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, Final

import jsonschema_rs
import orjson

from oaishim.check._findings import Sink, child
from oaishim.check.specgen import BUNDLE_PATH

Schema = dict[str, Any]

# Fields that self-hosted servers add on purpose. With ``extensions_as_notes`` they are notes, not
# errors (docs/backend-quirks.md §6 "Extra choice fields" and §8 "Remove non-standard fields").
VENDOR_EXTENSIONS: Final = frozenset(
    {
        "reasoning_content", "reasoning", "stop_reason", "matched_stop", "timings", "prompt_token_ids",
        "token_ids", "prompt_logprobs", "prompt_text", "kv_transfer_params", "metrics", "sglext",
        "avg_decoded_tokens_per_iter", "disaggregated_params", "mm_embedding_handle", "metadata",
        "reasoning_tokens", "continuous_usage_stats", "num_cached_tokens", "hidden_states",
    }
)  # fmt: skip


@cache
def _bundle() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(BUNDLE_PATH.read_bytes())
    return data


def defs() -> dict[str, Schema]:
    result: dict[str, Schema] = _bundle()["$defs"]
    return result


def root_name(kind: str) -> str:
    name: str = _bundle()["roots"][kind]
    return name


def event_root(event_type: str) -> str | None:
    """The schema of one Responses stream event type, or None for a type the API does not have."""
    name: str | None = _bundle()["events"].get(event_type)
    return name


@cache
def _validator(name: str) -> Any:
    schema = {"$ref": "#/$defs/" + name, "$defs": defs()}
    return jsonschema_rs.Draft202012Validator(schema)


def validate(kind: str, instance: Any, sink: Sink, *, chunk: int | None = None, base: str = "$") -> None:
    validate_def(root_name(kind), instance, sink, chunk=chunk, base=base)


def validate_def(name: str, instance: Any, sink: Sink, *, chunk: int | None = None, base: str = "$") -> None:
    """Validate against one named schema of the bundle (a root, or a Responses event's own schema)."""
    report_errors(errors_def(name, instance, base), sink, chunk)


def errors_def(name: str, instance: Any, base: str = "$") -> list[tuple[str, str, Any]]:
    """:func:`validate_def`'s findings as ``(path, message, the value they are about)``."""
    out: list[tuple[str, str, Any]] = []
    for error in _validator(name).iter_errors(instance):
        path = base
        for part in error.instance_path:
            path = child(path, part)
        out.append((path, error.message, error.instance))
    return out


def report_errors(errors: list[tuple[str, str, Any]], sink: Sink, chunk: int | None) -> None:
    """:func:`validate_def`'s findings for the errors :func:`errors_def` found."""
    for path, message, _ in errors:
        sink.add("schema", path, message, chunk=chunk)


def _resolve(schema: Schema) -> Schema:
    while "$ref" in schema:
        target = defs()[schema["$ref"].removeprefix("#/$defs/")]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **rest} if rest else target
    return schema


def _types(schema: Schema) -> set[str] | None:
    t = schema.get("type")
    if t is None:
        return None
    return set(t) if isinstance(t, list) else {t}


def _could_be(schema: Schema, instance: Any, *, strict: bool) -> bool:
    """Whether ``instance`` can belong to ``schema`` as far as the unknown-key walk is concerned.

    Loose: the type and the ``enum``/``const`` of present properties agree. Strict: also every
    required key is present, which tells apart union branches that differ only by their keys.
    """
    types = _types(schema)
    if isinstance(instance, dict):
        if types is not None and "object" not in types:
            return False
        if strict and any(key not in instance for key in schema.get("required", ())):
            return False
        for name, raw in schema.get("properties", {}).items():
            if name in instance:
                prop = _resolve(raw)
                if "enum" in prop and instance[name] not in prop["enum"]:
                    return False
                if "const" in prop and instance[name] != prop["const"]:
                    return False
        return True
    if isinstance(instance, list):
        return types is None or "array" in types
    return types is None or bool(types - {"object", "array"})


def _expand(schemas: list[Schema], instance: Any) -> Iterator[Schema]:
    """Every schema the instance must or may satisfy: $ref resolved, allOf flattened, unions filtered.

    A union keeps the branches the instance fits strictly, else those it fits loosely, so a body
    that lacks a required key (rule a reports it) still has its other keys judged.
    """
    for raw in schemas:
        schema = _resolve(raw)
        if not _could_be(schema, instance, strict=False):
            continue
        yield schema
        yield from _expand(schema.get("allOf", []), instance)
        for key in ("anyOf", "oneOf"):
            branches = [_resolve(b) for b in schema.get(key, [])]
            fitting = [b for b in branches if _could_be(b, instance, strict=True)]
            fitting = fitting or [b for b in branches if _could_be(b, instance, strict=False)]
            yield from _expand(fitting, instance)


# What the walk needs at one node of an instance: the schemas of each property, those of other keys
# (an open map), whether other keys are allowed, and the schemas of an array's items
_Plan = tuple[dict[str, list[Schema]], list[Schema], bool, list[Schema]]


class _Memo:
    """The plans of one list of schemas (the walk passes the same lists again: the property lists
    of earlier plans), keyed by what of an object they depend on, and the property names whose
    ``enum``/``const`` can decide a union anywhere in the expansion."""

    __slots__ = ("names", "plans", "schemas")

    def __init__(self, schemas: list[Schema]) -> None:
        self.schemas = schemas  # held, so its identity (the key in _PLANS) is not reused while this lives
        self.names = _find_discriminators(schemas)
        self.plans: dict[object, _Plan] = {}


# Memos keyed by the identity of a list of schemas, which each holds and compares on a hit: a list
# built for an earlier plan is never mistaken for another. Bounded by the plans held in all.
_PLANS: Final[dict[int, _Memo]] = {}
_MAX_PLANS = 8192  # past it the memo starts again (keys of open maps are the instance's own)
_held = [0]  # plans held in all the memos


@cache
def root(name: str) -> list[Schema]:
    """The one list of the one ``$ref`` schema of each named definition: the memo below is keyed
    by its identity."""
    return [{"$ref": "#/$defs/" + name}]


def _find_discriminators(schemas: list[Schema]) -> tuple[str, ...]:
    names: set[str] = set()
    todo = list(schemas)
    while todo:
        schema = _resolve(todo.pop())
        for name, raw in schema.get("properties", {}).items():
            prop = _resolve(raw)
            if "enum" in prop or "const" in prop:
                names.add(name)
        for key in ("allOf", "anyOf", "oneOf"):
            todo += schema.get(key, [])
    return tuple(sorted(names))


def _build_plan(schemas: list[Schema], instance: Any) -> _Plan:
    applicable = list(_expand(schemas, instance))
    props: dict[str, list[Schema]] = {}
    extra: list[Schema] = []
    open_map = False
    items: list[Schema] = []
    for schema in applicable:
        for name, prop in schema.get("properties", {}).items():
            props.setdefault(name, []).append(prop)
        additional = schema.get("additionalProperties")
        if additional is True or isinstance(additional, dict):
            open_map = True
            if isinstance(additional, dict):
                extra.append(additional)
        if isinstance(schema.get("items"), dict):
            items.append(schema["items"])
    return props, extra, open_map, items


def plans_held() -> int:
    """How many plans the memo holds now (at most ``_MAX_PLANS``)."""
    return sum(len(memo.plans) for memo in _PLANS.values())


def clear_plans() -> None:
    """Forget every plan (the memo starts again, as when it is full)."""
    _PLANS.clear()
    _held[0] = 0


def _plan(schemas: list[Schema], instance: dict[str, Any] | list[Any]) -> _Plan:
    """:func:`_build_plan`, memoised: an object is known by its keys (in their order) and the values
    of its discriminating properties, so chunks of one shape are expanded once (the expansion was
    two thirds of the checker's time). An array's plan depends on the schemas alone."""
    memo = _PLANS.get(id(schemas))
    if memo is None or memo.schemas is not schemas:
        memo = _PLANS[id(schemas)] = _Memo(schemas)
    key: object = None
    if isinstance(instance, dict):
        key = tuple(instance)
        if memo.names:
            values: list[object] = []
            for name in memo.names:
                if name in instance:
                    value = instance[name]
                    if value is not None and not isinstance(value, (str, int, float, bool)):
                        return _build_plan(schemas, instance)  # an odd value: not worth a key
                    values.append((name, type(value), value))
            if values:
                key = (key, tuple(values))
    plan = memo.plans.get(key)
    if plan is None:
        if _held[0] >= _MAX_PLANS:
            clear_plans()
            memo = _PLANS[id(schemas)] = _Memo(schemas)
        plan = memo.plans[key] = _build_plan(schemas, instance)
        _held[0] += 1
    return plan


# Where a key sits, as a chain ``(parent, part)`` from the root (``None``): a path string is built
# only for a key that is reported, not for every node walked
_Where = tuple[Any, str | int] | None


def _walk(schemas: list[Schema], instance: dict[str, Any] | list[Any], where: _Where, out: list[Any]) -> None:
    props, extra, open_map, items = _plan(schemas, instance)
    if isinstance(instance, dict):
        if not props and not open_map:
            return  # the schema does not expect an object here: rule a reports it
        for key, value in instance.items():
            sub = props.get(key)
            if sub is None:
                if not open_map:
                    out.append((where, key))
                    continue
                sub = extra
            if isinstance(value, (dict, list)):  # a scalar has no keys to judge
                _walk(sub, value, (where, key), out)
    elif items:
        for i, value in enumerate(instance):
            if isinstance(value, (dict, list)):
                _walk(items, value, (where, i), out)


def _path(base: str, where: _Where) -> str:
    parts: list[str | int] = []
    while where is not None:
        where, part = where
        parts.append(part)
    for part in reversed(parts):
        base = child(base, part)
    return base


def unknown_keys(schemas: list[Schema], instance: Any, path: str) -> list[tuple[str, str]]:
    """``(path, key)`` for each key in ``instance`` that no applicable schema defines, in the
    instance's order."""
    if not isinstance(instance, (dict, list)):
        return []
    out: list[tuple[_Where, str]] = []
    _walk(schemas, instance, None, out)
    return [(_path(path, where), key) for where, key in out]


def report_unknown_def(
    name: str,
    instance: Any,
    sink: Sink,
    *,
    chunk: int | None = None,
    base: str = "$",
    extensions_as_notes: bool = False,
    intended: frozenset[str] = frozenset(),
) -> None:
    """Each key nothing in the official schema defines: an error, or a note for a known vendor
    extension (``extensions_as_notes``) and for a field sent on purpose (``intended``: what a gateway
    was configured to emit, such as ``reasoning_content`` under ``--reasoning-field``)."""
    report_keys(unknown_keys(root(name), instance, base), sink, chunk, extensions_as_notes, intended)


def report_keys(
    keys: list[tuple[str, str]], sink: Sink, chunk: int | None, extensions_as_notes: bool, intended: frozenset[str]
) -> None:
    """:func:`report_unknown_def`'s findings for the keys :func:`unknown_keys` found."""
    for path, key in keys:
        if key in intended:
            why = " (sent on purpose, as configured)"
        elif extensions_as_notes and key in VENDOR_EXTENSIONS:
            why = " (known vendor extension)"
        else:
            why = ""
        sink.add(
            "unknown-field",
            child(path, key),
            f"{key!r} is not a field of the official API" + why,
            chunk=chunk,
            severity="note" if why else None,
        )
