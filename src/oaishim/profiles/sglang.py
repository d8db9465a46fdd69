"""SGLang (``python -m sglang.launch_server``): one profile.

Wire quirks (``docs/backend-quirks.md`` §2 row; source file; issue), request side first:
  * S-1 unknown fields: plain pydantic ``BaseModel`` (``extra="ignore"``) → silently dropped
    (``python/sglang/srt/entrypoints/openai/protocol.py``@004c82e0). Nothing needs dropping for it.
  * S-2 roles: ``developer`` is accepted and handed to the chat template unchanged; templates that do
    not know it drop it silently (sgl-project/sglang #40082, 2026) → merge it into ``system``.
  * S-3 history reasoning: ``reasoning_content`` is a message field (interleaved thinking,
    ``wrap_reasoning_history`` in ``serving_chat.py``@002897c2); ``reasoning`` is dropped.
  * S-4 history tool calls: ``function.arguments`` must be a JSON object string, else 400 "Assistant
    tool call function.arguments must be valid JSON." (no profile field; a request check/hook).
  * S-5 tool schemas validated as JSON Schema 2020-12 (400 on invalid); S-6 a trailing assistant
    message becomes a user turn for DeepSeek-V3.2/V4 encoders.
  * S-7 ``max_new_tokens = max_completion_tokens or max_tokens`` (2025/2026 source); older releases
    are not described, so the profile sends ``max_tokens`` only (unsure; same meaning in SGLang).
  * S-8 sampling defaults from ``generation_config``; S-20 ``include_usage`` defaults to False
    (``--stream-response-default-include-usage`` turns it on for everyone; not detectable).
  * reasoning_effort (issue 15; S-19): older releases type it ``Literal["low", "medium", "high"]`` (a 400
    for none/minimal/xhigh/max) and read it for OpenAI models only; thinking is switched through
    ``chat_template_kwargs`` — ``thinking`` (DeepSeek-V3, Kimi-K2) or ``enable_thinking`` (Qwen3, GLM-4.5),
    the two keys SGLang's own ``reasoning: {enabled}`` sets (``protocol.py``
    ``normalize_reasoning_inputs``). Newer releases accept none…max and floats, but the release is not
    detectable, so the profile sends what every release reads: low/medium/high (xhigh/max as high) and
    both switch keys, false for none/minimal, true otherwise.
  * tool_choice / parallel_tool_calls (issue 15): named choices are enforced (only that tool reaches the
    template, S-5, ``serving_chat.py`` ``_process_messages``); ``required`` is sent as it is (SGLang
    constrains it like vLLM; inferred, the notes do not describe it). ``parallel_tool_calls`` defaults to
    true (S-5). ``none``: the tools are not sent.
  * response_format (issue 15; S-28, ``protocol.py`` ``set_json_schema``, ``to_sampling_params``):
    ``json_object`` is the grammar ``{"type": "object"}``; ``json_schema`` needs ``json_schema.schema``;
    ``strict: false`` may be left unconstrained when the renderer handles the format, so ``strict: true``
    is sent (the gateway still checks the answer, and reports a non-strict one as the client asked).
    Constraints with tools: the tool grammar is dropped (a warning, ``serving_chat.py``).
Response side (fixed by the generic normaliser): S-9 first chunk without ``refusal``; S-10 chunk ``id``
differs per choice for n>1 and ``created`` changes across seconds (#39864, PR #39887); S-11 ``model``
echoes the request (``"default"``, #4293); S-12 separate finish chunk; S-13 ``finish_reason:"abort"``;
S-14 ``matched_stop``, ``metadata``, ``sglext``; S-15 ``tool_calls: null``; S-16 ``content: ""`` with
tool calls; S-17 non-standard ``index``; S-18 tool-call chunks full of nulls; S-19 reasoning as
``reasoning_content`` only with ``--reasoning-parser``; S-21 ``usage.reasoning_tokens``; S-23
``text_offset`` −1; S-29 flat error body.

Detection: ``/v1/models`` cards ``owned_by: "sglang"`` with ``root``, ``parent``, ``max_model_len``
(S-31); the version is in ``/get_server_info`` (``"version"`` key, ``http_server.py``) — some
releases also answer ``/version``. ``Server: uvicorn`` (not distinctive).

n (several choices): S-26 ``n > 1`` is native (``serving_chat.py``); its per-choice chunk ids (S-10,
#39864) are the generic normaliser's to fix → ``n_choices = "native"`` (the default).
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._response_format import StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

SGLANG = Profile(
    name="sglang",
    version="any",
    doc=(
        "SGLang 2025/2026 (protocol.py@004c82e0): unknown fields ignored; developer silently dropped by templates "
        "(#40082); history reasoning read as 'reasoning_content'; include_usage defaults to False; <think> "
        "split only with --reasoning-parser."
    ),
    developer_to_system=True,
    reasoning_in="reasoning_content",
    max_tokens_in="max_tokens",
    usage_on_empty_stream_options=False,
    splits_reasoning=False,
    reasoning_out=("reasoning_content",),
    reasoning_effort_in=ReasoningEffortIn(
        efforts=frozenset({"low", "medium", "high"}),
        nearest=(("xhigh", "high"), ("max", "high")),
        switch=("enable_thinking", "thinking"),
        switch_on=True,
        native_off=False,
    ),
    tool_choice=ToolChoiceSupport(none_hides_tools=True),
    structured_output=StructuredOutput(force_strict=True),
)

FAMILY = Family(
    name="sglang",
    releases=(("0", SGLANG),),
    unknown_version=SGLANG,
    owned_by=frozenset({"sglang"}),
    version_paths=("/get_server_info", "/version"),
)
