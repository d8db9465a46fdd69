"""What the response side must produce for one prepared request: its :class:`ResponseContext`.

Decided once, when the request arrives, from what the client asked (``PreparedRequest``) and the
gateway's response settings (any object with the attributes of :class:`ResponseSettings`, as the
server's ``Settings`` has them).
"""

from __future__ import annotations

from typing import Protocol

from oaishim.transform.context import ReasoningField, ResponseContext, ToolChoiceMode
from oaishim.transform.params.tool_choice import forced_name
from oaishim.transform.repair import RepairPlan, plan_tool_names
from oaishim.transform.request import Endpoint, PreparedRequest
from oaishim.transform.special import SpecialTokens


class ResponseSettings(Protocol):
    @property
    def text_repair(self) -> bool: ...
    @property
    def thinking_open(self) -> bool: ...
    @property
    def special_tokens(self) -> SpecialTokens | None: ...
    @property
    def display_cleanup(self) -> bool: ...
    @property
    def reasoning_field(self) -> ReasoningField: ...
    @property
    def keep_extensions(self) -> bool: ...


def _tool_mode(prepared: PreparedRequest) -> ToolChoiceMode:
    choice = prepared.tool_choice
    if not prepared.tools_offered or choice == "none":
        return "none"
    if choice is None or choice == "auto":
        return "auto"
    return "required" if choice == "required" else "named"


def response_context(
    endpoint: Endpoint,
    prepared: PreparedRequest,
    settings: ResponseSettings,
    markup: frozenset[str] = frozenset(),
    unparsed: str | None = None,
    grammar_done: str | None = None,
    secrets: tuple[str, ...] = (),
) -> ResponseContext:
    """What the response side must produce for this request, under these settings (``markup``: what
    the profile names as display markup; ``unparsed``, ``grammar_done``: its phrases for a call its
    parser refused and for a token its completed grammar could not take; ``secrets``: what must
    never reach the client, masked in the text as it streams)."""
    chat = endpoint == "chat"
    repair = settings.text_repair
    structured = prepared.output_format is not None
    plan = RepairPlan(
        # Split <think> whatever the profile says: a server flag or a request parameter can turn a
        # backend's parser off, and users rarely know how their server was started.
        reasoning=repair and chat,
        # With thinking off and the switch sent, the template closed its <think>: the answer starts in
        # content. Where the switch may not have reached it, the answer may still open in reasoning.
        starts_in_reasoning=settings.thinking_open and not prepared.thinking.closed,
        tools=repair and chat and prepared.tools_offered and prepared.tool_choice != "none",
        tool_names=plan_tool_names(prepared.body.get("tools")),
        stops=tuple(prepared.stop) if repair and endpoint != "embeddings" else (),
        include_stop=prepared.include_stop_str_in_output,
        special=settings.special_tokens if repair else None,
        # Never inside structured output: JSON the client asked for reaches it byte for byte.
        cleanup=repair and settings.display_cleanup and not structured,
        markup=markup,
    )
    tool_mode = _tool_mode(prepared)
    return ResponseContext(
        model=prepared.client_model,
        chat=chat,
        include_usage=prepared.include_usage,
        logprobs=bool(prepared.logprobs) if chat else prepared.logprobs is not None,
        top_logprobs=(prepared.top_logprobs or 0) if chat else int(prepared.logprobs or 0),
        tool_mode=tool_mode,
        reasoning_field=settings.reasoning_field,
        keep_extensions=settings.keep_extensions,
        repair=plan,
        context_param={"chat": "messages", "completions": "prompt"}.get(endpoint, "input"),
        thinking_off=prepared.thinking.off,
        one_tool_call=chat and not prepared.parallel_tool_calls,
        output_format=prepared.output_format,
        forced_tool=forced_name(prepared.tool_choice) if chat and prepared.tools_offered else None,
        unparsed_call=unparsed if chat and tool_mode == "auto" else None,
        grammar_done=grammar_done if chat else None,
        secrets=secrets,
    )
