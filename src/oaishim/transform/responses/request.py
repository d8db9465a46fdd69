"""A Responses request (``POST /v1/responses``) as the Chat Completions request that answers it.

The gateway generates the Responses API from the backend's chat endpoint, so this is where the
request's meaning moves over:

* ``instructions`` -> a leading ``developer`` message (what the official API inserts; the chat
  request preparation merges it into the system prompt for backends whose templates drop
  developer messages);
* ``history`` (earlier turns, already chat messages: ``previous_response_id`` is resolved by the
  caller) -> before the input; ``input`` items -> messages (``_input``);
* tools, ``tool_choice``, ``text.format`` -> chat tools, ``tool_choice``, ``response_format``
  (``_tools``: namespaces flattened, hosted tools echoed but not offered); ``reasoning.effort`` -> ``reasoning_effort``; ``max_output_tokens`` ->
  ``max_completion_tokens``; ``top_logprobs`` or ``include: ["message.output_text.logprobs"]`` ->
  ``logprobs``/``top_logprobs``; ``safety_identifier`` (or the older ``user``) -> ``user``;
* streams always ask for usage (the terminal event carries it).

What chat has no field for (``store``, ``metadata``, ``include``, ``truncation``,
``previous_response_id``, cache hints) goes only into :class:`ResponsesRequestInfo`, which the
response echoes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from oaishim.transform.responses._check import check_request
from oaishim.transform.responses._info import ResponsesRequestInfo, new_id
from oaishim.transform.responses._input import InputMapper
from oaishim.transform.responses._tools import map_text_format, map_tool_choice, map_tools
from oaishim.transform.validate._errors import empty_array

__all__ = ["responses_to_chat"]


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def responses_to_chat(
    body: Any,
    *,
    key: bytes | None = None,
    history: Sequence[dict[str, Any]] = (),
    id_factory: Callable[[str], str] = new_id,
) -> tuple[dict[str, Any], ResponsesRequestInfo]:
    """Validate ``body`` as the official API does, then map it; raises :class:`OpenAIError` (400).

    ``key`` opens the ``encrypted_content`` of reasoning items this server sealed (see ``_seal``);
    ``history`` is prepended to the input's messages; ``id_factory(prefix)`` names input items that
    came without an id.
    """
    body = check_request(body)
    tools = map_tools(body.get("tools"))
    tool_choice, chat_tools = map_tool_choice(body.get("tool_choice"), tools)
    response_format, text_echo = map_text_format(body.get("text"))

    mapper = InputMapper(key, id_factory, tools.chat_name)
    source = body["input"]
    if isinstance(source, str):
        mapper.text(source)
    else:
        if not source and not history:
            raise empty_array("input")
        for i, item in enumerate(source):
            mapper.item(item, f"input[{i}]")
    mapper.end_turn()

    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        messages.append({"role": "developer", "content": instructions})
    messages += [dict(m) for m in history]
    messages += mapper.messages

    reasoning = body.get("reasoning") or {}
    include = list(dict.fromkeys(body.get("include") or []))
    top_logprobs = _or(body.get("top_logprobs"), 0)
    info = ResponsesRequestInfo(
        model=body["model"],
        instructions=instructions,
        tools=tools.echo,
        tool_choice=_echo_choice(body.get("tool_choice")),
        text=text_echo,
        reasoning={"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        temperature=_or(body.get("temperature"), 1.0),
        top_p=_or(body.get("top_p"), 1.0),
        top_logprobs=int(top_logprobs),
        max_output_tokens=_int_or_none(body.get("max_output_tokens")),
        max_tool_calls=_int_or_none(body.get("max_tool_calls")),
        parallel_tool_calls=_or(body.get("parallel_tool_calls"), True),
        previous_response_id=body.get("previous_response_id"),
        store=_or(body.get("store"), True),
        stream=_or(body.get("stream"), False),
        truncation=_or(body.get("truncation"), "disabled"),
        metadata=dict(body.get("metadata") or {}),
        user=body.get("user"),
        safety_identifier=body.get("safety_identifier"),
        prompt_cache_key=body.get("prompt_cache_key"),
        prompt_cache_retention=body.get("prompt_cache_retention"),
        service_tier="default",
        include=include,
        input_items=mapper.listed,
        custom_tools=tools.custom,
        namespaced=tools.namespaced,
    )

    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    if info.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if chat_tools:
        chat["tools"] = chat_tools
    if tool_choice is not None and chat_tools:
        chat["tool_choice"] = tool_choice
    if chat_tools and body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if response_format is not None:
        chat["response_format"] = response_format
    if reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if info.max_output_tokens is not None:
        chat["max_completion_tokens"] = info.max_output_tokens
    if info.logprobs:
        chat["logprobs"] = True
        if info.top_logprobs:
            chat["top_logprobs"] = info.top_logprobs
    user = body.get("safety_identifier") or body.get("user")
    if user is not None:
        chat["user"] = user
    return chat, info


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _echo_choice(choice: Any) -> Any:
    if choice is None:
        return "auto"
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        return {"type": choice["type"], "name": choice["name"]}
    return choice
