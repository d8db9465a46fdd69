"""TensorRT-LLM (``trtllm-serve``): profiles by version.

Wire quirks (``docs/backend-quirks.md`` §3 row; source file; issue), request side first:
  * T-1 unknown fields: ``OpenAIBaseModel`` has ``extra="forbid"`` → any field the request model lacks
    is a 400 ``extra_forbidden`` (``tensorrt_llm/serve/openai_protocol.py``@0076e939; TRT-LLM #9709,
    cherry-studio #12450). The 2026 ``ChatCompletionRequest`` lacks exactly ``_fields.PLATFORM_ONLY``
    and ``functions``/``function_call``; an older ``openai_protocol.py`` (its ReasoningAssistantMessage has
    only ``reasoning``, as T-2 describes for 1.3.0rc6) also lacks ``parallel_tool_calls`` and allows only
    ``tool_choice`` none/auto/named.
    ``parallel_tool_calls`` is dropped for every version: the 2026 source accepts it but does not
    enforce it (T-5), so nothing is lost.
  * reasoning_effort (issue 15; T-4, T-1): the 2026 request model types it harmony ``ReasoningEffort`` or
    ``Literal["low", "medium", "high", "max", "none"]``, default LOW (``openai_protocol.py``@0076e939): no
    ``minimal`` (sent as none) and no ``xhigh`` (sent as high). It is forwarded into the template kwargs
    as ``reasoning_effort`` (``serve/chat_tokenization.py`` ``apply_reasoning_effort_to_template_kwargs``),
    so only templates that read that name switch; a ``chat_template_kwargs`` key the active template does
    not read is a 400 (``inputs/chat_template_guard.py``, unless the server sets
    TRTLLM_ALLOW_UNUSED_CHAT_TEMPLATE_KWARGS=1), so no ``enable_thinking`` is sent: a model without that
    switch must keep answering. From 1.4 the gateway sends ``enable_thinking: false`` for thinking off
    anyway (a Qwen3-style template reads it) and, when the guard refuses it (400 "chat_template_kwargs
    ['enable_thinking'] are not referenced by the active chat template", ``chat_template_guard.py``@b4c348d6),
    sends the request again without it (``switch_refusal``); later guards accept ``enable_thinking`` and
    ``thinking`` whatever the template (``ALWAYS_ALLOWED_CHAT_TEMPLATE_KWARGS``, the reasoning parsers
    read them). Either way the gateway drops any reasoning from the answer. Before 1.4 the notes do not
    say which releases have the field: not sent (unsure), no switch.
  * T-2 (developer): ``developer`` is passed to the chat template, which drops it silently (Qwen3) →
    merge into ``system``. No fix is documented for any version.
  * T-2 (history reasoning): history ``reasoning_content`` → 400 on 1.3.0rc6 (the message union has only
    ``ReasoningAssistantMessage.reasoning``; the custom message type inherits ``extra="forbid"``,
    inferred); older ``chat_utils.py``@4c05a748 dropped history reasoning anyway. Newer ``chat_utils.py``@0c351902 reads
    ``reasoning``/``reasoning_content`` and the newest protocol accepts both. ``reasoning`` also passes
    the 1.3.0rc6 union, so it is the name sent from 1.4 on; before that history reasoning is dropped.
  * T-3 ``max_completion_tokens`` has ``validation_alias="max_tokens"``: the profile sends only
    ``max_tokens``, the one name every version reads (sending both keys could trip ``extra="forbid"``).
  * T-19 ``include_usage`` defaults to True when ``stream_options`` is present (2026 source too).
  * T-9 ``suffix`` and ``stream_options`` without ``stream`` → 400; T-8 older PyTorch backend rejects n>1.
  * tool_choice / parallel_tool_calls (issue 15): 1.3 has no ``required`` (T-5, ``openai_protocol.py``
    ``check_tool_choice``; older protocols allow only none/auto/named): it is sent as ``auto`` and the
    gateway checks the answer, asks once more, then answers an error (``retry``). Named choices are
    supported (§6 table). ``parallel_tool_calls`` is accepted but not enforced (T-5): dropped (above),
    and the gateway keeps at most one call under ``false``. ``none``: the tools are not sent.
  * response_format (issue 15; T-21, ``openai_protocol.py`` ``_response_format_to_guided_decoding_params``):
    ``json_object`` and ``json_schema`` (the wrapper or a bare schema) become its ``GuidedDecodingParams``;
    with a reasoning parser the constraint starts after the think block. The official object is sent
    as it is (it passes ``extra="forbid"``); older releases are not described (unsure). Guided decoding
    needs a backend in the server's LLM-API options; without one the gateway's check is what remains.
Response side (fixed by the generic normaliser): T-10 first chunk ``{"role"}`` only, SSE ``data: {...} \\n\\n``
with a trailing space; T-11 fresh chunk ``id``/``created`` per chunk before PR #14708 (2026-05-28), seen on 1.3.0rc6;
T-12 ``"content":""``/``"reasoning_content":""`` on every chunk; T-13 finish on the last delta; T-14
null extras in plain answers; T-15 ``tool_calls: []``; T-17 ids ``chatcmpl-tool-…``, named-tool deltas
without ``id``; T-18 reasoning as ``reasoning_content`` only with ``--reasoning_parser`` (without one, ``<think>`` stays in content), gpt-oss
uses ``reasoning``; T-23 flat errors, everything 400; T-24 a failing stream just breaks, no ``[DONE]``.

Version boundary: 1.4 is the first minor release after 1.3.0rc6 (docs/backend-quirks.md gives no release
number for PR #14708 or the newer ``chat_utils``). The newer profile's two differences (history reasoning
sent as ``reasoning``, ``reasoning_effort`` kept) already validate on the 1.3.0rc6-era source, so a wrong
guess near the boundary costs no 400.

Detection: ``/version`` → ``{"version": "…"}`` (docs ``commands/trtllm-serve.rst``); ``/v1/models`` one card
``owned_by: "tensorrt_llm"`` (T-26); ``Server: uvicorn`` (not distinctive).

n (several choices): T-8 the PyTorch backend of older releases answers ``n > 1`` with 400 "Multiple
response is not supported in PyTorch workflow" (``chat_utils.py``@4c05a748 ``check_multiple_response``;
fixture ``error-n-gt-1-pytorch.json``); the TensorRT backend and newer releases take ``n`` natively.
Both profiles send ``n`` (``native``) and fan out when that refusal comes back (``n_refusal``): one
round trip lost on the refusing builds, none elsewhere; no release boundary is documented.
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._fields import LEGACY_FUNCTIONS, PLATFORM_ONLY
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._response_format import StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

_STRUCTURED = StructuredOutput(after_reasoning=True)

# What the 2026 request model lacks, plus parallel_tool_calls (accepted there, never enforced, absent before).
_DROPPED = PLATFORM_ONLY | LEGACY_FUNCTIONS | {"parallel_tool_calls"}
_N_REFUSAL = "Multiple response is not supported"  # T-8

# TensorRT-LLM's template guard refusing a chat_template_kwargs key the template does not read (T-4 row's
# inputs/chat_template_guard.py@b4c348d6): the gateway's thinking switch is then sent again without it.
_SWITCH_REFUSAL = "are not referenced by the active chat template"

BEFORE_1_4 = Profile(
    name="trtllm",
    version="<1.4",
    doc=(
        "TensorRT-LLM up to and including 1.3.0rc6 (T-1, T-2): extra='forbid'; history reasoning dropped "
        "(reasoning_content is a 400 there); developer dropped by templates; stream_options {} "
        "turns usage on. reasoning_effort is not sent: unsure which releases have it."
    ),
    developer_to_system=True,
    reasoning_in="drop",
    max_tokens_in="max_tokens",
    rejects=_DROPPED,
    usage_on_empty_stream_options=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content", "reasoning"),
    reasoning_effort_in=ReasoningEffortIn(efforts=None, native_off=False),
    tool_choice=ToolChoiceSupport(required="retry", none_hides_tools=True),
    n_refusal=_N_REFUSAL,
    structured_output=_STRUCTURED,
)

FROM_1_4 = Profile(
    name="trtllm",
    version=">=1.4",
    doc=(
        "TensorRT-LLM 1.4 and later (boundary: the first minor after 1.3.0rc6; assumed to hold PR #14708 "
        "of 2026-05-28 and the newer chat_utils): still extra='forbid' (the 2026 request model lacks the "
        "platform-only and legacy function fields); history reasoning sent as 'reasoning'; developer still "
        "dropped by templates; <think> split only with --reasoning_parser."
    ),
    developer_to_system=True,
    reasoning_in="reasoning",
    max_tokens_in="max_tokens",
    rejects=_DROPPED,
    usage_on_empty_stream_options=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content", "reasoning"),
    reasoning_effort_in=ReasoningEffortIn(
        efforts=frozenset({"none", "low", "medium", "high", "max"}),
        nearest=(("minimal", "none"), ("xhigh", "high")),
        switch=("enable_thinking",),
        native_off=False,  # only templates reading reasoning_effort (or enable_thinking) switch
        switch_refusal=_SWITCH_REFUSAL,
    ),
    tool_choice=ToolChoiceSupport(required="retry", none_hides_tools=True),
    n_refusal=_N_REFUSAL,
    structured_output=_STRUCTURED,
)

FAMILY = Family(
    name="trtllm",
    releases=(("0", BEFORE_1_4), ("1.4", FROM_1_4)),
    unknown_version=BEFORE_1_4,
    owned_by=frozenset({"tensorrt_llm"}),
)
