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
4. Responses API (``Response``, ``ResponseStreamEvent`` and what they reference). What the spec gets
   wrong, each fix named with the recording of the real API that needs it (the checker's test fixtures
   ``openai-live-responses/``), in :func:`_responses_overrides`:

   a. ``user`` is sent as ``null`` (``text.sse``, ``text.json`` and every other recording).
   b. ``usage`` is ``null`` until the terminal event (``response.created``/``in_progress`` of every stream).
   c. ``usage.input_tokens_details.cache_write_tokens`` is required by the spec but sent by none
      (``response.completed`` of every stream, ``text.json``).
   d. ``store`` is echoed on every response object; ``billing: {payer}`` on OpenAI's own
      (``reasoning-summary-then-text.json``); ``content_filters`` on Azure OpenAI's, the same service
      (``text.sse``, ``text.json``, ``reasoning-summary-text.sse``). The spec defines none of them.
   e. ``response.error.code`` takes codes the enum lacks (``insufficient_quota`` in
      ``error-insufficient-quota.sse``): any string.
   f. The ``error`` event nests ``{type, code, message, param}`` under ``error``
      (``error-insufficient-quota.sse``); the spec has them flat. Both shapes are accepted.
   g. ``function_call_arguments.done`` omits ``name`` (``reasoning-summary-then-function-call.sse``).
   h. Delta events carry an optional ``obfuscation`` string (``text.sse``, ``reasoning-summary-text.sse``),
      which ``stream_options.include_obfuscation`` documents only in prose.
   i. ``CompoundFilter`` nests itself with draft 2019-09's ``$recursiveRef``, which 2020-12
      validators refuse: it becomes a plain ``$ref`` (:func:`_recursive_refs`).

   The bundle also maps each event ``type`` to its schema (``events``), so an event is validated
   against its own schema, not the 58-way union.
5. Annotations that only make the file large (descriptions, examples, ``x-*`` vendor keys) are
   removed; ``discriminator`` is annotation-only in 2020-12 and removed too.

It also writes the gateway's request bundle (``transform/validate/request_schemas.json``): the three
request schemas the gateway validates against, with fix-ups of their own (:func:`_request_overrides`):

6. Every optional property also accepts ``null``, which means "the default". Clients send it (the
   SDKs' ``None``); the spec marks most, not all, optional fields nullable, and intersects some
   (``top_logprobs`` is nullable in one ``allOf`` part and not in the other, §0.3).
7. The roots allow unknown keys (``CreateEmbeddingRequest`` says ``additionalProperties: false``):
   fields the official API does not define are the backends' extensions.
8. What the spec says only in prose or ``format``: int64 bounds (``seed``; the spec's own bounds are
   floats rounded past int64) and function names (``^[a-zA-Z0-9_-]+$``, at most 64 characters).
9. ``stream_options`` takes only its documented keys, plus vLLM's documented
   ``continuous_usage_stats`` (a boolean), the one extension clients send inside it.
10. History tool calls may omit ``type`` and send ``arguments`` as an object: clients written against
   lenient backends do, and the gateway's request rewrite repairs both before any backend sees them.
11. A user message's content parts may also be the multimodal parts backends document beyond the
   official ones (vLLM's ``video_url``, ``audio_url`` and ``image_embeds``, SGLang's ``video_url``):
   clients of those servers send them, and refusing them would break what works without the gateway.
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
    "response": "Response",
    "response.event": "ResponseStreamEvent",
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


def _recursive_refs(node: Any, name: str) -> Any:
    """Fix 4i: draft 2019-09's ``$recursiveRef: "#"`` (2020-12 validators reject it) becomes a ``$ref``
    to the schema it sits in, and ``$recursiveAnchor`` goes (``CompoundFilter`` nests itself)."""
    if isinstance(node, list):
        return [_recursive_refs(v, name) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _recursive_refs(v, name) for k, v in node.items() if k != "$recursiveAnchor"}
    if out.pop("$recursiveRef", None) == "#":
        out["$ref"] = "#/$defs/" + name
    return out


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


def _responses_overrides(defs: dict[str, Any]) -> None:
    """Fixes 4a-h (see the module docstring for the recording behind each)."""
    model_props = defs["ModelResponseProperties"]["properties"]
    model_props["user"] = _make_nullable(model_props["user"])  # a
    own = next(part for part in defs["Response"]["allOf"] if "usage" in part.get("properties", {}))["properties"]
    own["usage"] = _make_nullable(own["usage"])  # b
    details = defs["ResponseUsage"]["properties"]["input_tokens_details"]
    details["required"] = [key for key in details["required"] if key != "cache_write_tokens"]  # c
    own["store"] = {"type": "boolean"}  # d
    own["billing"] = {"type": "object", "properties": {"payer": {"type": "string"}}, "required": ["payer"]}
    own["content_filters"] = {"type": ["array", "null"], "items": {"type": "object", "additionalProperties": True}}
    error = next(b for b in defs["ResponseError"]["anyOf"] if b.get("type") == "object")
    error["properties"]["code"] = {"type": "string"}  # e
    flat = defs["ResponseErrorEvent"]
    nested = {
        "type": "object",
        "properties": {
            "type": flat["properties"]["type"],
            "sequence_number": flat["properties"]["sequence_number"],
            "error": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    **{key: flat["properties"][key] for key in ("code", "message", "param")},
                },
                "required": ["type", "code", "message", "param"],
            },
        },
        "required": ["type", "sequence_number", "error"],
    }
    defs["ResponseErrorEvent"] = {"anyOf": [flat, nested]}  # f
    done = defs["ResponseFunctionCallArgumentsDoneEvent"]
    done["required"] = [key for key in done["required"] if key != "name"]  # g
    for name in _event_types(defs).values():
        props = defs[name].get("properties", {})
        if "delta" in props:
            props["obfuscation"] = {"type": "string"}  # h


def _event_types(defs: dict[str, Any]) -> dict[str, str]:
    """Event ``type`` -> the name of its schema, from the branches of ``ResponseStreamEvent``."""
    out: dict[str, str] = {}
    for branch in defs["ResponseStreamEvent"]["anyOf"]:
        name = branch["$ref"].removeprefix("#/$defs/")
        schema = defs[name]
        parts = schema.get("anyOf") or [schema]
        out[parts[0]["properties"]["type"]["enum"][0]] = name
    return dict(sorted(out.items()))


def _collect(schemas: dict[str, Any], roots: list[str], prepare: Any = None) -> dict[str, Any]:
    """The named schemas and every schema they reference, cleaned."""
    defs: dict[str, Any] = {}
    todo = [name for name in roots if name in schemas]
    while todo:
        name = todo.pop()
        if name in defs:
            continue
        raw = schemas[name] if prepare is None else prepare(schemas[name])
        defs[name] = _recursive_refs(_clean(raw), name)
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(sorted(found - defs.keys()))
    return defs


def _source(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(spec_bytes).hexdigest(), "version": spec["info"]["version"]}


def build(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, Any]:
    defs = _collect(spec["components"]["schemas"], list(ROOTS.values()))
    _legacy_overrides(defs)
    _responses_overrides(defs)
    return {
        "source": _source(spec, spec_bytes),
        "roots": ROOTS,
        "events": _event_types(defs),
        "$defs": dict(sorted(defs.items())),
    }


def _int64_bounds(node: Any) -> Any:
    """A copy of ``node`` where each int64 integer schema carries exact int64 bounds (fix 8)."""
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
    """Fix 6, in place: every property an object schema does not require also accepts null."""
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
        defs[root].pop("additionalProperties", None)  # fix 7
    name = defs["FunctionObject"]["properties"]["name"]
    name.update({"pattern": "^[a-zA-Z0-9_-]+$", "maxLength": 64})
    options = next(b for b in defs["ChatCompletionStreamOptions"]["anyOf"] if b.get("type") == "object")
    options["properties"]["continuous_usage_stats"] = {"type": "boolean"}
    options["additionalProperties"] = False
    call = defs["ChatCompletionMessageToolCall"]
    call["required"] = [key for key in call["required"] if key != "type"]
    call["properties"]["function"]["properties"]["arguments"] = {"type": ["string", "object"]}
    vendor_part = {"type": "object", "required": ["type"], "properties": {"type": {"enum": list(VENDOR_PARTS)}}}
    defs["ChatCompletionRequestUserMessageContentPart"]["oneOf"].append(vendor_part)  # fix 11
    _optional_nullable(defs)


VENDOR_PARTS = ("video_url", "audio_url", "image_embeds")


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
