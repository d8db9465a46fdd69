"""vLLM (``vllm serve``): profiles by version.

Wire quirks (``docs/backend-quirks.md`` §1 row; source file; issue), request side first:
  * V-1 unknown fields: accepted and ignored (``extra="allow"``, ``protocol.py``@0052bed3); before
    PR #10463 (Nov 2024, ~v0.6.5) ``extra="forbid"`` → 400 ``extra_forbidden`` (issues
    #10093, #5797). Recorded 0.32: ``s1_unknown_field`` (``"foo": 1``) answers 200.
  * V-2 roles: any role reaches the HF chat template; templates without ``developer`` raise → 400
    "Unexpected message role" (#42407; still in v0.22.1 per ogx-ai/ogx #6069, 2026-06). PR #43590 maps
    developer→system; recorded 0.32 ``s3x_tokenize_dev`` renders it as ``system``.
  * V-4 reasoning in history: v0.10-era drops it (no field on the message TypedDict); PR #28531
    (Nov 2025) reads ``reasoning``. Recorded 0.32 ``s3x_tokenize_hist*``: ``reasoning`` is rendered
    as ``<think>…</think>``, ``reasoning_content`` is dropped.
  * V-5 tools without ``--enable-auto-tool-choice --tool-call-parser`` → 400 for ``tool_choice:auto``
    (langchain4j #3475; recorded 0.32 ``s1_tools_auto``; also when ``tool_choice`` is left out): the
    gateway resends with ``tool_choice: "none"`` and parses the calls itself (``auto_tools_refusal``).
    V-6 ``tools: []`` → 400 in 2026 (PR #39780); V-3 ``tool_calls: null`` in history → 500 in old
    versions (#16678). (Request transforms, not profile data.)
  * V-9/V-10 ``max_tokens``: chat default = rest of the context, completions default 16;
    ``max_completion_tokens`` preferred in 2026. V-11 sampling defaults come from the model's
    ``generation_config.json``, not OpenAI's 1.0.
  * V-25 ``stream_options``: ``include_usage`` defaults to True when the object is present
    (v0.10 / engine-split era) → ``{}`` turns usage on; the 2026 default is False (recorded
    0.32 ``s1_chat_stream_emptyopts`` has no usage chunk).
  * reasoning_effort (issue 15; V-24): v0.10 accepts only low/medium/high (``protocol.py``@0052bed3) and
    leaves the template's thinking alone, so the gateway sets ``chat_template_kwargs.enable_thinking``
    itself (false for none/minimal, true for the rest, which vLLM 2026 also does) and sends xhigh/max as
    high. 0.32 accepts none…max and sets ``enable_thinking = effort != "none"`` unless the request sets it
    (``entrypoints/openai/chat_completion/protocol.py`` ``build_chat_params``, read in the installed 0.32):
    ``minimal`` would keep thinking on, so the gateway sends ``enable_thinking: false`` for it.
    Before 0.6.5 the field is a 400 (``extra="forbid"``) and ``chat_template_kwargs`` is not described,
    so neither is sent: no switch; the gateway drops the reasoning from the answer instead.
  * tool_choice / parallel_tool_calls (issue 15): ``required`` and named choices are enforced by vLLM's
    guided decoding (V-22: a JSON-array grammar for ``required``), so both are sent as they are. 0.32
    without ``--tool-call-parser`` refuses both (400 "tool_choice=\"required\" requires --tool-call-parser
    to be set", ``renderers/online_renderer.py``; recorded ``s1_tools_required``, ``s1_tools_named``): the
    gateway resends with ``tool_choice: "none"`` and ``structured_outputs: {json}`` forcing one call
    (``refusal``/``guided``; older versions read ``guided_json`` and are not given the fallback).
    ``none``: the tools are not sent. ``parallel_tool_calls`` defaults to true, as OpenAI's.
  * v0.10 ``reasoning_effort`` accepts only low/medium/high (``protocol.py``@0052bed3); 2026 none…max.
  * response_format (issue 15; V-32): ``json_object`` and ``json_schema`` are read (2026:
    ``generate/base/protocol.py`` ``structured_outputs_from_response_format`` turns them into
    ``structured_outputs`` json / json_object); the native ``structured_outputs`` (2025+) or
    ``guided_json`` (older) fields are the grammar's own. The grammar applies only after the reasoning
    ends when a reasoning parser runs (unless ``--structured-outputs-config enable_in_reasoning``).
    From 0.6.5 the official object is sent. Its grammar lets whitespace run on between tokens: recorded
    0.32 ``s1_force_response_format`` is ``{"a"`` and 60 tokens of spaces, cut by the limit, and so is
    the live probe of the tiny model. ``StructuredOutputsParams.disable_any_whitespace`` exists per
    request, but 0.32's xgrammar and guidance backends read only the server's
    ``--structured-outputs-config '{"disable_any_whitespace": true}'`` (``v1/structured_output/backend_xgrammar.py``),
    so the gateway cannot ask for it; the answer is still checked (a cut one says ``length``). Live 0.32
    with ``--reasoning-parser qwen3`` and ``enable_in_reasoning`` (plus that flag): the tiny model's
    ``{"city":"Paris"}`` comes back as ``reasoning`` with ``content: ""``; the gateway moves it. Before
    0.6.5 the schema goes as ``guided_json`` (there since 0.4, while when ``response_format`` gained
    ``json_schema`` is not in the notes; unsure).
Response side (fixed by the generic normaliser whatever the profile): V-12 first chunk without
``refusal``; V-15 ``finish_reason`` on the last content chunk; V-17 ``stop_reason``; V-18 extra null
fields; V-19 ``tool_calls: []`` (#44104); V-21 ids ``chatcmpl-tool-…``; V-23 reasoning output
``reasoning_content`` (≤ Oct 2025) → ``reasoning`` (PR #27752, #33402; #27755, dify plugins #2740),
split only with ``--reasoning-parser``; V-26 usage without details; V-34 int error ``code``.

Detection: ``/version`` → ``{"version": "0.32.0"}``; ``/v1/models`` cards ``owned_by: "vllm"`` with
``root``, ``parent``, ``max_model_len``, ``permission`` (V-38); ``Server: uvicorn`` (not distinctive).

Version boundaries are conservative: the 2026 profile starts at 0.32, the first version recorded
with both the developer fix and ``include_usage`` defaulting to False (somewhere after 0.22.1); the
older profile is safe on newer versions too (it only merges ``developer`` and sends an explicit
``include_usage: false``). Where the notes are silent the safer value is chosen and marked "unsure".

n (several choices): V-30 ``n > 1`` is native (one chunk per choice index, one id; ``serving_completion.py``,
``serving_chat.py``) → ``n_choices = "native"`` (the default); checked live on 0.32 CPU (tests/engines).
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._fields import LEGACY_FUNCTIONS, PLATFORM_ONLY
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._response_format import StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

# vLLM's 400 for tool_choice "auto" (explicit, or the default with tools) without a tool-call parser
# (V-5): '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
# matched in the raw body, where the quotes are escaped.
AUTO_TOOLS_REFUSAL = "tool choice requires --enable-auto-tool-choice"

FORBID_ERA = Profile(
    name="vllm",
    version="<0.6.5",
    doc=(
        "vLLM before PR #10463: extra='forbid' rejects every field its request model lacks (V-1). "
        "Unsure which newer OpenAI fields each 0.5/0.6 release had: parallel_tool_calls, reasoning_effort "
        "and max_completion_tokens are treated as missing; reasoning in history is dropped (a key the "
        "message TypedDict lacks may 400 as well)."
    ),
    developer_to_system=True,
    reasoning_in="drop",
    max_tokens_in="max_tokens",
    rejects=PLATFORM_ONLY | LEGACY_FUNCTIONS | {"parallel_tool_calls"},
    usage_on_empty_stream_options=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content",),
    auto_tools_refusal=AUTO_TOOLS_REFUSAL,
    reasoning_effort_in=ReasoningEffortIn(efforts=None, native_off=False),  # a 400 here, no switch known
    tool_choice=ToolChoiceSupport(none_hides_tools=True),
    structured_output=StructuredOutput(via="guided_json", after_reasoning=True),
)

ALLOW_ERA = Profile(
    name="vllm",
    version=">=0.6.5,<0.32",
    doc=(
        "vLLM 0.6.5 up to the 2026 fixes: unknown fields ignored (V-1); developer needs merging (V-2, #42407); "
        "stream_options {} turns usage on (V-25). History reasoning is sent as 'reasoning': read since "
        "PR #28531, silently dropped before (V-4). max_completion_tokens is renamed to max_tokens because "
        "the notes do not say when 0.6/0.7 gained it (unsure; same meaning in vLLM)."
    ),
    developer_to_system=True,
    reasoning_in="reasoning",
    max_tokens_in="max_tokens",
    usage_on_empty_stream_options=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content", "reasoning"),
    auto_tools_refusal=AUTO_TOOLS_REFUSAL,
    reasoning_effort_in=ReasoningEffortIn(
        efforts=frozenset({"low", "medium", "high"}),
        nearest=(("xhigh", "high"), ("max", "high")),
        switch=("enable_thinking",),
        switch_on=True,
        native_off=False,
    ),
    tool_choice=ToolChoiceSupport(none_hides_tools=True),
    structured_output=StructuredOutput(after_reasoning=True),
)

LAYOUT_2026 = Profile(
    name="vllm",
    version=">=0.32",
    doc=(
        "vLLM 2026 layout, checked against the 0.32 recordings: developer mapped to system by vLLM (PR #43590), "
        "history reasoning read as 'reasoning', include_usage defaults to False, reasoning output only as "
        "'reasoning' (PR #33402). Splits <think> only with --reasoning-parser, so the gateway keeps its splitter."
    ),
    developer_to_system=False,
    reasoning_in="reasoning",
    max_tokens_in="both",
    usage_on_empty_stream_options=False,
    splits_reasoning=False,
    reasoning_out=("reasoning",),
    auto_tools_refusal=AUTO_TOOLS_REFUSAL,
    reasoning_effort_in=ReasoningEffortIn(switch=("enable_thinking",)),  # every value; minimal needs the switch
    tool_choice=ToolChoiceSupport(
        refusal="requires --tool-call-parser", guided="structured_outputs", none_hides_tools=True
    ),
    structured_output=StructuredOutput(after_reasoning=True),
)

FAMILY = Family(
    name="vllm",
    releases=(("0", FORBID_ERA), ("0.6.5", ALLOW_ERA), ("0.32", LAYOUT_2026)),
    unknown_version=ALLOW_ERA,
    owned_by=frozenset({"vllm"}),
    card_keys=frozenset({"permission"}),
)
