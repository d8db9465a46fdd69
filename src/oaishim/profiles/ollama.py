"""Ollama (the ``/v1`` compatibility layer): one profile.

Wire quirks (``docs/backend-quirks.md`` §5 row; source at ollama HEAD fb307609), request side first:
  * O-1 unknown fields are ignored by Go's JSON binding; also silently ignored although official:
    ``tool_choice``, ``parallel_tool_calls``, ``n``, ``logit_bias``, ``user``, ``max_completion_tokens``,
    ``metadata``, ``store``, ``service_tier``, ``response_format.json_schema.strict``
    (``openai/openai.go`` ``ChatCompletionRequest``; ``docs/api/openai-compatibility.mdx``). None of them
    is a 400 or a misreading, so ``rejects`` stays empty; ``tool_choice`` and ``n`` need emulation in
    the request transform (O-2, ollama #17921, #8421), not dropping.
  * O-3 ``max_completion_tokens`` is ignored, only ``max_tokens`` → ``num_predict`` (ollama #7125,
    nextcloud/integration_openai #426) → ``max_tokens_in = "max_tokens"``.
  * O-4 ``temperature``/``top_p`` forced to 1.0 when omitted (overrides Modelfile defaults).
  * O-5 context overflow is silently truncated (``num_ctx`` cannot be set over ``/v1``; #6286, #5902).
  * O-6 roles pass to the model template; only a few renderers (gemma4, functiongemma, qwen35) treat
    ``developer`` as ``system`` (``model/renderers/*.go``; ollama-python #453) → merge it.
  * O-7 content parts become separate messages; ``image_url`` must be a base64 data URI.
  * O-8 history: assistant ``reasoning`` → ``thinking``; ``reasoning_content`` is ignored; tool-call
    ``arguments`` must be valid JSON (400 "invalid tool call arguments").
  * reasoning_effort (issue 15; O-15): Ollama maps it to its own ``think`` itself (``openai/openai.go``
    ``thinkFromReasoningEffort``): none → think off, minimal → low, xhigh/ultra → max, others pass; invalid →
    400. Every official value is sent on, except ``minimal``, sent as ``none`` so that it turns thinking
    off as the gateway promises rather than to low.
  * O-16 usage only with ``include_usage``; ``stream_options: {}`` does not turn it on (§6).
  * tool_choice / parallel_tool_calls (issue 15): both ignored (O-1): a forced choice is sent as ``auto``
    (a named one offers only that function) and the gateway checks the answer, asks once more, then
    answers an error (``retry``); under ``parallel_tool_calls: false`` the gateway keeps one call.
    ``none``: the tools are not sent, the only way to stop a call there.
  * response_format (issue 15; O-19, ``openai/openai.go``): ``json_object`` → ``format: "json"``,
    ``json_schema`` → its ``schema`` as ``format``; ``name`` and ``strict`` are not read (O-1), so the
    official object is sent and the gateway checks the answer; other types are ignored.
Response side (fixed by the generic normaliser): O-9 ids ``chatcmpl-<0..998>`` (collide); O-10 completions
``created`` per chunk; O-11 first chunk carries content; O-12 old versions put tool calls with
``finish_reason: "stop"`` (#9092, PR #7963); O-13 whole tool call in one delta; O-14 ``index`` in
non-stream tool calls, ``content: ""``, ids ``call_<8>``; O-15 output field ``reasoning``; O-17
completions logprobs missing; O-21 ``not_found_error``; O-24 ``system_fingerprint: "fp_ollama"``.

``splits_reasoning``: thinking-capable models are parsed into ``reasoning`` by Ollama's own parsers, but
whether that happens without ``think``/``reasoning_effort`` depends on the model and version (not
described), so the gateway keeps its splitter (harmless when the text has no tags).

Detection: ``/api/version`` → ``{"version": "0.12.6"}`` (no ``/version``); ``/v1/models`` cards are plain
``{id, object, created, owned_by}`` with ``owned_by`` = the model's namespace, ``"library"`` for
official models (O-22, ``openai/openai.go`` ``ToListCompletion``); no ``Server`` header. A server
holding only user-namespace models cannot be told apart from a generic one by its model list.

n (several choices): O-1 ``n`` is silently ignored (one choice whatever was asked; fixture
``chat-nonstream-n-ignored.json``, from ``openai/openai.go`` ``ChatCompletionRequest``, which has no ``n``)
→ ``n_choices = "fan_out"``.
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._response_format import StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

OLLAMA = Profile(
    name="ollama",
    version="any",
    doc=(
        "Ollama /v1 (HEAD fb307609): unknown and several official fields ignored; max_completion_tokens ignored "
        "(renamed to max_tokens); developer ignored by most templates; history reasoning read as 'reasoning'; "
        "reasoning output as 'reasoning'."
    ),
    developer_to_system=True,
    reasoning_in="reasoning",
    max_tokens_in="max_tokens",
    usage_on_empty_stream_options=False,
    splits_reasoning=False,
    reasoning_out=("reasoning",),
    reasoning_effort_in=ReasoningEffortIn(nearest=(("minimal", "none"),)),
    tool_choice=ToolChoiceSupport(required="retry", named="retry", none_hides_tools=True),
    n_choices="fan_out",
    structured_output=StructuredOutput(strict_ignored=True),
)

FAMILY = Family(
    name="ollama",
    releases=(("0", OLLAMA),),
    unknown_version=OLLAMA,
    owned_by=frozenset({"library"}),
    version_paths=("/api/version",),
)
