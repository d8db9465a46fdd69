"""The fallback for a backend that detection does not recognise: every field at its safe value.

Each choice either costs nothing on a lenient server or prevents a 400 on a strict one
(``docs/backend-quirks.md`` §6, §8):
  * ``developer_to_system``: most chat templates do not know ``developer`` and drop it (SGLang #40082,
    T-2, S-2) or raise (vLLM #42407, V-2); merging it into the leading system message keeps it.
  * ``reasoning_in = "drop"``: the two names in use each break some server — ``reasoning_content`` is a
    400 on TensorRT-LLM 1.3.0rc6 (T-2), an extra message key is likely a 400 on ``extra="forbid"``
    servers (vLLM < 0.6.5; inferred), and a server that reads neither ignores both. Dropping loses at most the
    interleaved-thinking context of earlier turns, never the request.
  * ``max_tokens_in = "max_tokens"``: the one name every self-hosted server reads (Ollama ignores
    ``max_completion_tokens``, O-3).
  * ``rejects``: the OpenAI platform-only fields and the legacy ``functions``/``function_call``
    (``_fields``), which no self-hosted server acts on and strict ones reject (T-1, V-1).
    ``reasoning_effort`` and ``parallel_tool_calls`` are kept: lenient servers use them.
  * ``usage_on_empty_stream_options``: an explicit ``include_usage: false`` is harmless everywhere and
    stops vLLM-derived servers from turning ``{}`` into usage (V-25, T-19).
  * ``tool_call_type_required``: ``type: "function"`` is the official shape anyway (L-4).
  * reasoning_effort (issue 15): sent as the client gave it (lenient servers read it; a strict one's 400
    names it); no ``chat_template_kwargs`` switch, which a strict server might refuse. Whether "off"
    reaches the template is unknown, so with thinking off the gateway drops any reasoning from the answer.
  * ``splits_reasoning = False``: the gateway's ``<think>`` splitter is harmless on text without tags.
  * tool_choice / parallel_tool_calls (issue 15): whether an unknown server forces a call is unknown
    (Ollama ignores ``tool_choice``, O-1; TensorRT-LLM has no ``required``, T-5), so a forced choice is
    sent as ``auto`` and checked (``retry``): on a server that does force it the first answer passes.
    ``none``: the tools are not sent.
  * ``n_choices = "fan_out"`` (n): n requests of one choice give n choices on every server; ``n`` itself
    is ignored by some (O-1), refused by others (L-10, T-8) and miscounted in usage by llama.cpp.
  * response_format (issue 15): the official object, which every server in the notes reads (V-32, S-28,
    T-21, L-23, O-19); whatever the server does with it, the gateway checks the answer.
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._fields import LEGACY_FUNCTIONS, PLATFORM_ONLY
from oaishim.profiles._reasoning_effort import ReasoningEffortIn
from oaishim.profiles._tool_choice import ToolChoiceSupport

GENERIC = Profile(
    name="generic",
    version="any",
    doc="Unrecognised backend: the safe value of every field (see the module docstring for each choice).",
    developer_to_system=True,
    reasoning_in="drop",
    max_tokens_in="max_tokens",
    rejects=PLATFORM_ONLY | LEGACY_FUNCTIONS,
    usage_on_empty_stream_options=True,
    tool_call_type_required=True,
    splits_reasoning=False,
    reasoning_out=("reasoning_content", "reasoning"),
    reasoning_effort_in=ReasoningEffortIn(native_off=False),
    tool_choice=ToolChoiceSupport(required="retry", named="retry", none_hides_tools=True),
    n_choices="fan_out",
)
