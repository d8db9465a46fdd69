"""Build the checker's schema bundle from the official ``openapi.yaml``.

Run ``python -m oaishim.check.specgen PATH/openapi.yaml`` after updating the spec. Parsing the 3 MB
YAML takes about a second, so the checker never does it at run time: it loads the small JSON bundle
this module writes (``openai_schemas.json`` beside it), which holds only the schemas the checker uses
and those they reference, already fixed up for a JSON Schema 2020-12 validator:

1. ``nullable: true`` (OpenAPI 3.0, ignored by 2020-12 validators) becomes a union with ``null``:
   ``type: [T, "null"]``, ``null`` added to an ``enum``, and a ``$ref``/``anyOf``/``oneOf``/``allOf``
   wrapped in ``anyOf: [..., {type: "null"}]``. Without it, the 12 live OpenAI streams give over a
   thousand spurious errors (openai-wire-format.md §0.1).
2. Legacy completion *chunks* share ``CreateCompletionResponse`` with plain responses, but the live API
   sends ``finish_reason: null`` on every chunk but the last (§0.6): the bundle adds a
   ``CreateCompletionStreamResponse`` whose ``finish_reason`` is nullable.
3. With ``echo: true`` the first prompt token has no logprob, sent as ``null`` (§4): the legacy
   ``token_logprobs`` and ``top_logprobs`` items are made nullable.
4. Annotations that only make the file large (descriptions, examples, ``x-*`` vendor keys) are
   removed; ``discriminator`` is annotation-only in 2020-12 and removed too.
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
BUNDLE_PATH = Path(__file__).with_name("openai_schemas.json")
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


def build(spec: dict[str, Any], spec_bytes: bytes) -> dict[str, Any]:
    schemas = spec["components"]["schemas"]
    defs: dict[str, Any] = {}
    todo = [name for name in ROOTS.values() if name in schemas]
    while todo:
        name = todo.pop()
        if name in defs:
            continue
        defs[name] = _clean(schemas[name])
        found: set[str] = set()
        _refs(defs[name], found)
        todo.extend(sorted(found - defs.keys()))
    _legacy_overrides(defs)
    return {
        "source": {"sha256": hashlib.sha256(spec_bytes).hexdigest(), "version": spec["info"]["version"]},
        "roots": ROOTS,
        "$defs": dict(sorted(defs.items())),
    }


def render(bundle: dict[str, Any]) -> bytes:
    return orjson.dumps(bundle, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def main(argv: list[str] | None = None) -> int:
    import yaml  # only needed here: the run-time checker reads the JSON bundle

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m oaishim.check.specgen PATH/openapi.yaml", file=sys.stderr)
        return 2
    raw = Path(args[0]).read_bytes()
    spec = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    BUNDLE_PATH.write_bytes(render(build(spec, raw)))
    print(f"wrote {BUNDLE_PATH} ({BUNDLE_PATH.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
