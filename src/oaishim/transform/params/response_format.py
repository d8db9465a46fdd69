"""``response_format`` (chat) and ``text.format`` (Responses, mapped to it): what the backend is sent, and
what the gateway will check the answer against.

The official request says ``{type: json_object}`` or ``{type: json_schema, json_schema: {name, schema,
strict}}``. The backend's :class:`~oaishim.profiles._response_format.StructuredOutput` says where its
grammar reads the schema from (old vLLM ``guided_json``, llama.cpp's
native ``json_schema``), what it misreads (llama.cpp takes ``json_object`` as any JSON value, SGLang may
leave ``strict: false`` unconstrained) and what a violation costs. Whatever is sent, the result is an
:class:`OutputFormat`: the schema compiled once (jsonschema-rs), for the response side to validate the
final answer (``transform.output_format``).

A schema that cannot be compiled is refused here with a 400 naming ``response_format``, as the official
API refuses an invalid schema; ``$ref`` to anything outside the schema is never fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

import jsonschema_rs

from oaishim.profiles._base import Profile
from oaishim.profiles._response_format import ViolationPolicy
from oaishim.wire.errors import bad_request

FormatKind = Literal["json_object", "json_schema"]
OBJECT_SCHEMA: Final[dict[str, Any]] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """What the client asked the answer to be. ``strict``: a ``json_schema`` with ``strict: true``
    (``json_object`` counts as strict: the official API guarantees a JSON object)."""

    kind: FormatKind
    name: str = ""
    schema: dict[str, Any] | None = None
    strict: bool = True
    policy: ViolationPolicy = "header"
    validator: Any = field(default=None, compare=False, repr=False)  # jsonschema-rs, for the schema


def _no_remote(uri: str) -> Any:
    raise ValueError(f"the gateway does not fetch {uri}")


def local_validator(schema: dict[str, Any]) -> Any:
    """A client's JSON Schema compiled (jsonschema-rs); a ``$ref`` outside it is never fetched.
    Raises ValueError for what is not a valid JSON Schema."""
    return jsonschema_rs.validator_for(dict(schema), retriever=_no_remote)


def _compile(schema: dict[str, Any]) -> Any:
    try:
        return local_validator(schema)
    except ValueError as exc:  # jsonschema_rs.ValidationError: the schema is not a valid JSON Schema
        first = str(exc).split("\n", 1)[0]
        raise bad_request(
            f"Invalid schema for response_format: {first}", param="response_format", code="invalid_json_schema"
        ) from None


def _wanted(response_format: Any, policy: ViolationPolicy) -> OutputFormat | None:
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return OutputFormat("json_object", schema=None, strict=True, policy=policy)
    if kind != "json_schema":
        return None
    spec = response_format.get("json_schema")
    spec = spec if isinstance(spec, dict) else {}
    schema = spec.get("schema")
    schema = schema if isinstance(schema, dict) else {}
    name = spec.get("name")
    return OutputFormat(
        "json_schema",
        name=name if isinstance(name, str) else "",
        schema=schema,
        strict=spec.get("strict") is True,
        policy=policy,
        validator=_compile(schema),
    )


def translate_response_format(body: dict[str, Any], profile: Profile) -> OutputFormat | None:
    """Rewrite ``body`` (the upstream's, a fresh top-level copy) for the backend; the format to check."""
    how = profile.structured_output
    wanted = _wanted(body.get("response_format"), how.violation)
    if wanted is None:
        return None
    schema: dict[str, Any] = wanted.schema if wanted.schema is not None else OBJECT_SCHEMA
    if how.via == "guided_json":
        if wanted.kind == "json_schema":  # json_object stays official: those versions read it
            del body["response_format"]
            body["guided_json"] = dict(schema)
    elif how.via == "native_json_schema":
        del body["response_format"]
        body["json_schema"] = dict(schema)
    elif wanted.kind == "json_object" and how.object_schema:
        body["response_format"] = {"type": "json_object", "schema": OBJECT_SCHEMA}
    elif wanted.kind == "json_schema" and how.force_strict and not wanted.strict:
        spec = dict(body["response_format"].get("json_schema") or {})
        body["response_format"] = {"type": "json_schema", "json_schema": {**spec, "strict": True}}
    return wanted
