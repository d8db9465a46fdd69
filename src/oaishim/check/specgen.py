"""Build the checker's schema bundle from the official ``openapi.yaml``.

Run ``python -m oaishim.check.specgen [PATH/openapi.yaml]`` after updating the spec; without a path it reads
the copy vendored in the repository (``spec/openapi.yaml``, provenance in ``spec/SOURCE.md``). Parsing the 3 MB
YAML takes about a second, so the checker never does it at run time: it loads the small JSON bundle
this module writes (``openai_schemas.json`` beside it), which holds only the schemas the checker uses
and those they reference, already fixed up for a JSON Schema 2020-12 validator:

1. ``nullable: true`` (OpenAPI 3.0, ignored by 2020-12 validators) becomes a union with ``null``:
   ``type: [T, "null"]``, ``null`` added to an ``enum``, and a ``$ref``/``anyOf``/``oneOf``/``allOf``
   wrapped in ``anyOf: [..., {type: "null"}]``. Without it, the 12 live OpenAI streams give over a
   thousand spurious errors (docs/wire-format.md §0.1).
2. Legacy completion *chunks* share ``CreateCompletionResponse`` with plain responses, but the live API
   sends ``finish_reason: null`` on every chunk but the last (§0.6): the bundle adds a
   ``CreateCompletionStreamResponse`` whose ``finish_reason`` is nullable.
3. With ``echo: true`` the first prompt token has no logprob, sent as ``null`` (§4): the legacy
   ``token_logprobs`` and ``top_logprobs`` items are made nullable.
4. Annotations that only make the file large (descriptions, examples, ``x-*`` vendor keys) are
   removed; ``discriminator`` is annotation-only in 2020-12 and removed too.

It also writes the gateway's request bundle (``transform/validate/request_schemas.json``): the three
request schemas the gateway validates against, with fix-ups of their own (:func:`_request_overrides`):

5. Every optional property also accepts ``null``, which means "the default". Clients send it (the
   SDKs' ``None``); the spec marks most, not all, optional fields nullable, and intersects some
   (``top_logprobs`` is nullable in one ``allOf`` part and not in the other, §0.3).
6. The roots allow unknown keys (``CreateEmbeddingRequest`` says ``additionalProperties: false``):
   fields the official API does not define are the backends' extensions.
7. What the spec says only in prose or ``format``: int64 bounds (``seed``; the spec's own bounds are
   floats rounded past int64) and function names (``^[a-zA-Z0-9_-]+$``, at most 64 characters).
8. ``stream_options`` takes only its documented keys, plus vLLM's documented
   ``continuous_usage_stats`` (a boolean), the one extension clients send inside it.
9. History tool calls may omit ``type`` and send ``arguments`` as an object: clients written against
   lenient backends do, and the gateway's request rewrite repairs both before any backend sees them.
"""

from __future__ import annotations

import copy
import hashlib
import sys
from pathlib import Path
from typing import Any

import orjson

ROOTS = {
    "chat.completion": "CreateChatCompletionResponse",
    "chat.completion.chunk": "CreateChatCompletionStreamResponse",
    "text_completion": "CreateCompletionResponse",
    "text_completion.chunk": "CreateCompletionStreamResponse",
    "embeddings": "CreateEmbeddingResponse",
    "models": "ListModelsResponse",
    "model": "Model",
    "error": "ErrorResponse",
}
REQUEST_ROOTS = {
    "chat": "CreateChatCompletionRequest",
    "completions": "CreateCompletionRequest",
    "embeddings": "CreateEmbeddingRequest",
}
BUNDLE_PATH = Path(__file__).with_name("openai_schemas.json")
REQUEST_BUNDLE_PATH = Path(__file__).parents[1] / "transform" / "validate" / "request_schemas.json"
# The official spec vendored at the repository root (a source checkout; not part of the installed package).
VENDORED_SPEC = Path(__file__).resolve().parents[3] / "spec" / "openapi.yaml"
INT64 = (-(2**63), 2**63 - 1)
_INT64_ROUNDED = 9223372036854776000  # how the spec writes seed's bounds: 2**63 rounded as a float
_REF_PREFIX = "#/components/schemas/"
_DROP = {"description", "example", "examples", "title", "discriminator", "deprecated", "default", "format"}
# Keys whose value is a schema, a list of schemas, or a map of name -> schema.
_SCHEMA_VALUED = {"items", "additionalProperties", "not", "contains", "propertyNames"}
_SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs"}


def _clean(node: Any) -> Any:
    """Strip annotations and apply the ``nullable`` fix to one schema node, recursively."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key.startswith("x-") or key == "nullable":
            continue
        if key in _SCHEMA_VALUED:
            out[key] = _clean(value)
        elif key in _SCHEMA_LISTS:
            out[key] = [_clean(v) for v in value]
        elif key in _SCHEMA_MAPS:
            out[key] = {name: _clean(v) for name, v in value.items()}
        elif key == "$ref":
            out[key] = "#/$defs/" + value.removeprefix(_REF_PREFIX)
        else:
            out[key] = value
    if node.get("nullable") is True:
        out = _make_nullable(out)
    return out


def _make_nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "type" in schema and not any(k in schema for k in ("$ref", "anyOf", "oneOf", "allOf")):
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema = {**schema, "type": [*types, "null"] if "null" not in types else types}
        if "enum" in schema and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found.add(ref.removeprefix("#/$defs/"))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _legacy_overrides(defs: dict[str, Any]) -> None:
    plain = defs["CreateCompletionResponse"]
    choice = plain["properties"]["choices"]["items"]
    logprobs = next(b for b in choice["properties"]["logprobs"]["anyOf"] if b.get("type") == "object")
    logprobs["properties"]["token_logprobs"]["items"] = {"type": ["number", "null"]}
    logprobs["properties"]["top_logprobs"]["items"] = _make_nullable(logprobs["properties"]["top_logprobs"]["items"])
    stream = copy.deepcopy(plain)
    finish = stream["properties"]["choices"]["items"]["properties"]["finish_reason"]
    stream["properties"]["choices"]["items"]["properties"]["finish_reason"] = _make_nullable(finish)
    defs["CreateCompletionStreamResponse"] = stream


def _collect(schemas: dict[str, Any], roots: list[str], prepare: Any = None) -> dict[str, Any]:
    """The named schemas and every schema they reference, cleaned."""
    defs: dict[str, Any] = {}
    todo = [name for name in roots if name in schemas]
    while todo:
        name = todo.pop()
        if name in defs:
            continue
        raw = schemas[name] if prepare is None else prepare(schemas[name])
        defs[name] = _clean(raw)
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(sorted(found - defs.keys()))
    return defs


def _source(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(spec_bytes).hexdigest(), "version": spec["info"]["version"]}


def build(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, Any]:
    defs = _collect(spec["components"]["schemas"], list(ROOTS.values()))
    _legacy_overrides(defs)
    return {"source": _source(spec, spec_bytes), "roots": ROOTS, "$defs": dict(sorted(defs.items()))}


def _int64_bounds(node: Any) -> Any:
    """A copy of ``node`` where each int64 integer schema carries exact int64 bounds (fix 7)."""
    if isinstance(node, list):
        return [_int64_bounds(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {key: _int64_bounds(value) for key, value in node.items()}
    if out.get("type") == "integer":
        rounded = abs(out.get("minimum", 0)) == _INT64_ROUNDED or abs(out.get("maximum", 0)) == _INT64_ROUNDED
        if out.get("format") == "int64" or rounded:
            out["minimum"], out["maximum"] = INT64
    return out


def _accepts_null(schema: dict[str, Any]) -> bool:
    types = schema.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    return any(_accepts_null(b) for key in ("anyOf", "oneOf") for b in schema.get(key, ()) if isinstance(b, dict))


def _optional_nullable(node: Any) -> None:
    """Fix 5, in place: every property an object schema does not require also accepts null."""
    if isinstance(node, list):
        for value in node:
            _optional_nullable(value)
        return
    if not isinstance(node, dict):
        return
    for value in node.values():
        _optional_nullable(value)
    props = node.get("properties")
    if isinstance(props, dict) and not isinstance(props.get("type"), str):  # a schema, not a map named "properties"
        required = set(node.get("required", ()))
        for name, prop in props.items():
            if name not in required and isinstance(prop, dict) and not _accepts_null(prop):
                props[name] = _make_nullable(prop)


def _request_overrides(defs: dict[str, Any]) -> None:
    for root in REQUEST_ROOTS.values():
        defs[root].pop("additionalProperties", None)  # fix 6
    name = defs["FunctionObject"]["properties"]["name"]
    name.update({"pattern": "^[a-zA-Z0-9_-]+$", "maxLength": 64})
    options = next(b for b in defs["ChatCompletionStreamOptions"]["anyOf"] if b.get("type") == "object")
    options["properties"]["continuous_usage_stats"] = {"type": "boolean"}
    options["additionalProperties"] = False
    call = defs["ChatCompletionMessageToolCall"]
    call["required"] = [key for key in call["required"] if key != "type"]
    call["properties"]["function"]["properties"]["arguments"] = {"type": ["string", "object"]}
    _optional_nullable(defs)


def build_requests(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, Any]:
    defs = _collect(spec["components"]["schemas"], list(REQUEST_ROOTS.values()), _int64_bounds)
    _request_overrides(defs)
    return {"source": _source(spec, spec_bytes), "roots": REQUEST_ROOTS, "$defs": dict(sorted(defs.items()))}


def render(bundle: dict[str, Any]) -> bytes:
    return orjson.dumps(bundle, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def main(argv: list[str] | None = None) -> int:
    import yaml  # only needed here: the run-time checker reads the JSON bundle

    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m oaishim.check.specgen [PATH/openapi.yaml]", file=sys.stderr)
        return 2
    raw = Path(args[0] if args else VENDORED_SPEC).read_bytes()
    spec = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for path, bundle in ((BUNDLE_PATH, build(spec, raw)), (REQUEST_BUNDLE_PATH, build_requests(spec, raw))):
        path.write_bytes(render(bundle))
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
