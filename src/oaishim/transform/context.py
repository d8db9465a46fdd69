"""What the response side needs to know about one exchange (decided once, when the request arrives)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from oaishim.transform.ids import random_id

if TYPE_CHECKING:
    from oaishim.transform.params.response_format import OutputFormat
    from oaishim.transform.repair import RepairPlan

ReasoningField = Literal["reasoning_content", "reasoning", "both", "drop"]
ToolChoiceMode = Literal["none", "auto", "required", "named"]
# What an answer broke that the gateway reports rather than repairs: (choice index, kind, detail).
# Kinds: tool_arguments_invalid (a tool call's final arguments are not JSON); not_json, not_object
# and schema (the content against the response_format asked for, transform.output_format).
Violation = tuple[int, str, str]


# Its own __init__: the one dataclasses generates is interpreted, compiled or not (15k instructions
# a request against 2k); the fields below stay the record of what the class holds.
@dataclass(slots=True, init=False)
class ResponseContext:
    """The client's side of one exchange: the ids and names it must see, and what it asked for."""

    model: str
    chat: bool = True
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    tool_mode: ToolChoiceMode = "none"
    reasoning_field: ReasoningField = "reasoning_content"
    keep_extensions: bool = False
    repair: RepairPlan | None = None
    context_param: str = "messages"  # what a context overflow blames: messages, prompt or input
    response_id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    repairs: set[str] = field(default_factory=set)  # the kinds of repair the answer needed (for the operator)
    # -- reasoning_effort (issue 15): thinking was turned off, so no reasoning reaches the client
    thinking_off: bool = False
    # tool_choice / parallel_tool_calls (issue 15): parallel_tool_calls false, so at most one call
    # reaches the client
    one_tool_call: bool = False
    # What the answer violated that the gateway reports but does not repair (invalid tool-call
    # arguments, a response_format broken): the server's one report of them (server.exchange) gives
    # the response headers of a plain answer, a log line naming the request, and the counters.
    violations: list[Violation] = field(default_factory=list)
    output_format: OutputFormat | None = None  # what the answer's content must be (response_format)
    # tool_choice naming a function (issue 15): the only function whose calls reach the client, as at
    # OpenAI; a backend that does not enforce the choice may call others too
    forced_tool: str | None = None
    # The backend's words for a call the model began under "auto" that its final parse refused
    # (llama.cpp, L-31/L-32): in a stream that has already carried the text as content, that error
    # ends the choices as a finish instead (the profile's ``tool_choice.unparsed``)
    unparsed_call: str | None = None
    # The backend's words for a token its completed grammar could not take (llama.cpp, L-33): the
    # constrained answer already streamed is whole, so that error ends it as a finish too
    grammar_done: str | None = None
    # The gateway's secrets (its keys, the upstream keys), masked in each text field as it streams:
    # a model that writes one over several tokens (transform.secrets)
    secrets: tuple[str, ...] = ()

    def __init__(
        self,
        model: str,
        *,
        chat: bool = True,
        include_usage: bool = False,
        logprobs: bool = False,
        top_logprobs: int = 0,
        tool_mode: ToolChoiceMode = "none",
        reasoning_field: ReasoningField = "reasoning_content",
        keep_extensions: bool = False,
        repair: RepairPlan | None = None,
        context_param: str = "messages",
        response_id: str = "",
        created: int | None = None,
        repairs: set[str] | None = None,
        thinking_off: bool = False,
        one_tool_call: bool = False,
        violations: list[Violation] | None = None,
        output_format: OutputFormat | None = None,
        forced_tool: str | None = None,
        unparsed_call: str | None = None,
        grammar_done: str | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.model, self.chat, self.include_usage, self.logprobs = model, chat, include_usage, logprobs
        self.top_logprobs, self.tool_mode, self.reasoning_field = top_logprobs, tool_mode, reasoning_field
        self.keep_extensions, self.repair, self.context_param = keep_extensions, repair, context_param
        self.response_id = response_id or random_id("chatcmpl-" if chat else "cmpl-")
        self.created = int(time.time()) if created is None else created
        self.repairs = set() if repairs is None else repairs
        self.thinking_off, self.one_tool_call = thinking_off, one_tool_call
        self.violations = [] if violations is None else violations
        self.output_format, self.forced_tool = output_format, forced_tool
        self.unparsed_call, self.grammar_done, self.secrets = unparsed_call, grammar_done, secrets
