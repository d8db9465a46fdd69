"""How a backend takes ``response_format`` (structured output): profile data for issue 15, item 2.

Every official client says ``response_format: {type: json_object}`` or ``{type: json_schema,
json_schema: {name, schema, strict}}``. Backends read that, a native spelling, or a subset of it; the
request side (``transform.params.response_format``) writes what this profile names. Whatever the
backend does, the gateway checks the final answer itself (``transform.output_format``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where the JSON Schema goes:
#   response_format     the official object, as the client sent it;
#   guided_json         vLLM's older extension (``guided_json: schema``);
#   native_json_schema  llama.cpp's top-level ``json_schema`` key (read by every build, L-1).
SchemaVia = Literal["response_format", "guided_json", "native_json_schema"]
ViolationPolicy = Literal["header", "error"]


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """One backend's structured output. Defaults: the backend reads the official object as OpenAI does.

    via: where the schema (and ``json_object``) is sent (see ``SchemaVia``).
    object_schema: the backend reads ``json_object`` as "any JSON value"; an explicit ``{"type": "object"}``
      schema is sent with it (llama.cpp's non-standard ``response_format.schema``, or the native key).
    force_strict: the backend may leave ``strict: false`` unconstrained; ``strict: true`` is sent.
    strict_ignored: the backend does not read ``strict`` (it constrains either way). Informational.
    after_reasoning: the backend applies the grammar only once the model's reasoning has ended, so a
      model that never ends it gives no JSON (or the backend's parser files the JSON as reasoning).
      Informational: the gateway moves JSON it finds in the reasoning whatever the profile says.
    violation: what the client gets when the final answer breaks the format the backend was asked for:
      ``header`` (the answer as the model gave it, plus ``x-oaishim-format-violation``) or ``error``
      (a 502 ``response_format_violation`` instead of the answer; a stream ends with that error in place
      of its finish). Either way the gateway logs it with the request id and counts it.
    """

    via: SchemaVia = "response_format"
    object_schema: bool = False
    force_strict: bool = False
    strict_ignored: bool = False
    after_reasoning: bool = False
    violation: ViolationPolicy = "header"


OPENAI_LIKE = StructuredOutput()
