"""What a backend profile is: data about a backend's quirks, plus at most a few small named hooks.

The generic request and response code reads these fields; it never asks which backend it talks to.
The response side is built to produce the exact official format from *any* input, so most profile
fields are about the request side: what the backend reads, rejects or misreads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from oaishim.profiles._reasoning_effort import OFFICIAL_WAY, ReasoningEffortIn
from oaishim.profiles._response_format import OPENAI_LIKE, StructuredOutput
from oaishim.profiles._tool_choice import ToolChoiceSupport

ReasoningIn = Literal["reasoning", "reasoning_content", "drop"]
MaxTokensIn = Literal["max_tokens", "max_completion_tokens", "both"]
OFFICIAL_TOOL_CHOICE = ToolChoiceSupport()  # frozen: one shared value is safe
NChoices = Literal["native", "fan_out"]
RequestHook = Callable[[dict[str, Any]], None]  # edits an upstream request body in place


@dataclass(frozen=True, slots=True)
class Profile:
    """One backend (and version range). Every field says what the *backend* does or needs.

    Request side:
      developer_to_system: the backend (or its chat template) drops or rejects ``developer``
        messages, so they are merged into the leading system message.
      reasoning_in: the name the backend reads for reasoning sent back in assistant history, or
        ``drop`` where it answers 400 or ignores it.
      max_tokens_in: which name(s) of the output limit the backend understands (``both``: it is
        sent under the client's own name, so the backend's errors name the field the client sent).
      rejects: request fields the backend rejects (400) or misreads; they are dropped and listed in
        the ``x-oaishim-dropped`` response header.
      usage_on_empty_stream_options: ``stream_options: {}`` (or one without ``include_usage``)
        turns usage on at this backend, so the gateway sends ``include_usage: false`` explicitly.
      tool_call_type_required: history tool calls need ``type: "function"``.
      request_hooks: small named edits that are not expressible as data.
      auto_tools_refusal: a phrase of the backend's 400 answer to ``tool_choice: "auto"`` when it
        was started without a tool-call parser (vLLM without ``--enable-auto-tool-choice``). With
        text repair on, the gateway then resends the request with ``tool_choice: "none"`` (the
        template still lists the tools) and parses the calls written as text itself.
    Response side:
      splits_reasoning: the backend's default start runs a reasoning parser (``<think>`` already
        split out). Informational (probe reports): the gateway's splitter runs regardless, since a
        server flag or a request parameter can turn a parser off, and on split text it is a no-op.
      reasoning_out: the field names the backend uses for reasoning in responses.
      display_markup: literal tags the backend's models leak into text (besides the tokenizer's
        special tokens), stripped from reasoning and content when the display cleanup is on.
      server_header: a substring of the ``Server`` header that identifies the backend (auto).

    reasoning_effort_in (issue 15): how the backend takes ``reasoning_effort`` (the Responses API's
      ``reasoning.effort`` arrives as it): the values its field accepts, the nearest stand-in for one it
      lacks, the ``chat_template_kwargs`` switch that turns a template's thinking off (and on), and
      whether "off" reaches every template (``profiles._reasoning_effort``). The default is the
      official API's: every value sent as it is. With thinking off the gateway drops any reasoning
      the backend still sends, whatever this says.
    tool_choice (issue 15): how the backend takes a forced ``tool_choice`` (``required``, a named
      function), ``none`` and ``parallel_tool_calls``, as a :class:`~oaishim.profiles._tool_choice.
      ToolChoiceSupport` (its docstring names the ways). The default is the official behaviour.
    ``n`` (several choices):
      n_choices: ``native`` when the backend answers ``n > 1`` itself with n choices; ``fan_out`` when
        it ignores ``n``, refuses it, or miscounts it: the gateway then sends n requests of one choice
        each and merges their answers (``transform.fanin``). A native backend that still answers fewer
        choices gets the missing ones fanned out (plain) or is reported (stream) and fanned out from then on.
      n_refusal: a phrase of the backend's error answer to ``n > 1`` on a ``native`` profile (a build or
        mode without it): the gateway then fans the request out instead of passing the error on.
    Structured output (issue 15): ``structured_output`` says how the backend takes ``response_format``
    ``json_object`` / ``json_schema`` (where the schema goes, what must be added, whether ``strict`` is
    read, whether the grammar waits for the reasoning to end) and what the client gets when the answer
    breaks the format (:class:`~oaishim.profiles._response_format.StructuredOutput`).
    """

    name: str
    version: str = "any"
    doc: str = ""
    developer_to_system: bool = False
    reasoning_in: ReasoningIn = "reasoning_content"
    max_tokens_in: MaxTokensIn = "max_tokens"
    rejects: frozenset[str] = frozenset()
    usage_on_empty_stream_options: bool = False
    tool_call_type_required: bool = False
    request_hooks: tuple[tuple[str, RequestHook], ...] = ()
    auto_tools_refusal: str | None = None
    splits_reasoning: bool = True
    reasoning_out: tuple[str, ...] = ("reasoning_content", "reasoning")
    display_markup: frozenset[str] = frozenset()
    server_header: str | None = None
    # -- reasoning_effort (issue 15)
    reasoning_effort_in: ReasoningEffortIn = OFFICIAL_WAY
    # -- tool_choice and parallel_tool_calls (issue 15)
    tool_choice: ToolChoiceSupport = OFFICIAL_TOOL_CHOICE
    # -- n (issue 15)
    n_choices: NChoices = "native"
    n_refusal: str | None = None
    # -- response_format (issue 15)
    structured_output: StructuredOutput = OPENAI_LIKE

    def __repr__(self) -> str:
        return f"<Profile {self.name} {self.version}>"
