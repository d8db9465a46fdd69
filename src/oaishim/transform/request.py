"""Turn a client's request into the one a given backend reads as the client meant it.

``prepare`` validates (``transform.validate``), then rewrites (``rewrite``) the body by reading the backend's
:class:`~oaishim.profiles._base.Profile`; it never asks which backend it talks to. The rewrites, each
with the quirk it undoes (docs/backend-quirks.md §8, request side):

* ``null`` on an optional official field means "the default" (docs/wire-format.md §1); the key is removed, so no
  backend can read it as something else (llama.cpp falls back per field, Go zero-values it).
* ``developer`` messages are merged into the leading system message where the backend's templates
  drop or reject them (V-2, S-2, L-5, O-6).
* Assistant history: reasoning goes under the name the backend reads (V-4, S-3, L-6, O-8) or is
  dropped; ``tool_calls: null``/``[]`` is removed (V-3 answered 500); ``type: "function"`` is added
  to history tool calls (L-4); ``arguments`` sent as an object become the JSON string every backend
  expects (S-4, L-4, O-8).
* The output limit goes under the name(s) the backend reads (O-3 ignores ``max_completion_tokens``);
  when both are given ``max_completion_tokens`` wins, as ``max_tokens`` is the deprecated one. A
  legacy completion without a limit gets the official default of 16 (V-10; llama.cpp and others
  would run to the end of the context).
* ``stream_options`` says exactly what the client meant: where ``{}`` turns usage on (V-25, T-19)
  an explicit ``include_usage: false`` is sent; ``include_obfuscation`` (OpenAI-only) is dropped.
* ``response_format`` goes where the backend's grammar reads it (``transform.params.response_format``).
* Fields the backend rejects are dropped and reported; the profile's hooks run last.

The caller's body is never changed: the top level is copied, and a message is copied only when it
is rewritten (requests may carry megabytes of history and images).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Final

from oaishim.profiles._base import Profile
from oaishim.transform.params import n as n_param
from oaishim.transform.params import reasoning_effort
from oaishim.transform.params.response_format import OutputFormat, translate_response_format
from oaishim.transform.params.tool_choice import plan_tools
from oaishim.transform.validate import Endpoint, validate

__all__ = ["COMPLETIONS_DEFAULT_MAX_TOKENS", "Endpoint", "PreparedRequest", "prepare", "rewrite"]

COMPLETIONS_DEFAULT_MAX_TOKENS: Final = (
    16  # spec/openapi.yaml CreateCompletionRequest.max_tokens default (docs/wire-format.md §2)
)

# Optional official fields whose null means "the default" (all nullable in the spec).
_NULL_IS_DEFAULT: Final = frozenset(
    {
        "n",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "stream",
        "stream_options",
        "logprobs",
        "top_logprobs",
        "seed",
        "logit_bias",
        "user",
        "tool_choice",
        "tools",
        "response_format",
        "suffix",
        "echo",
        "best_of",
        "dimensions",
        "encoding_format",
    }
)
_REASONING_KEYS: Final = ("reasoning_content", "reasoning")


@dataclass(slots=True, init=False)  # its own __init__, compiled (as transform.context.ResponseContext)
class PreparedRequest:
    """What goes upstream, plus what the response side must know about what the client asked.

    ``include_usage`` is the client's wish (``stream_options.include_usage is True``), whatever the
    upstream is told. ``logprobs`` is a bool for chat and ``int | None`` for legacy completions.
    ``tool_choice`` is the effective value: the client's, else ``"auto"`` with tools and ``"none"``
    without. ``max_tokens`` is the effective per-choice limit (``None``: up to the context).
    ``dropped`` lists the client's fields that were not sent (for ``x-oaishim-dropped``).
    """

    body: dict[str, Any]
    endpoint: Endpoint
    client_model: str
    stream: bool = False
    include_usage: bool = False
    dropped: list[str] = field(default_factory=list)
    n: int = 1
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    tools_offered: bool = False
    tool_choice: str | dict[str, Any] = "none"
    stop: list[str] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    max_tokens: int | float | None = None  # a whole number; JSON may spell it 1e3 (kept: it may pass 2**64)
    repairs: list[str] = field(default_factory=list)  # what the rewrite changed, by kind (for the operator)
    thinking: reasoning_effort.Thinking = reasoning_effort.THINKING_ON  # thinking off, and did it get through
    # tool_choice / parallel_tool_calls (issue 15): what the gateway checks in the answer itself
    # (transform.params.tool_choice.ToolPlan.check), and whether the client allows several calls
    tool_check: str | None = None
    parallel_tool_calls: bool = True
    fan_out: int = 1  # n > 1 on a backend that gives one choice: the copies the request goes out as
    output_format: OutputFormat | None = None  # response_format json_object/json_schema, to check the answer against
    # the offered functions' parameters, which a checked forced call's arguments must fit (ToolPlan.schemas)
    tool_schemas: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        *,
        body: dict[str, Any],
        endpoint: Endpoint,
        client_model: str,
        stream: bool = False,
        include_usage: bool = False,
        dropped: list[str] | None = None,
        n: int = 1,
        logprobs: bool | int | None = None,
        top_logprobs: int | None = None,
        tools_offered: bool = False,
        tool_choice: str | dict[str, Any] = "none",
        stop: list[str] | None = None,
        include_stop_str_in_output: bool = False,
        max_tokens: int | float | None = None,
        repairs: list[str] | None = None,
        thinking: reasoning_effort.Thinking = reasoning_effort.THINKING_ON,
        tool_check: str | None = None,
        parallel_tool_calls: bool = True,
        fan_out: int = 1,
        output_format: OutputFormat | None = None,
        tool_schemas: dict[str, Any] | None = None,
    ) -> None:
        self.body, self.endpoint, self.client_model, self.stream = body, endpoint, client_model, stream
        self.include_usage, self.dropped = include_usage, [] if dropped is None else dropped
        self.n, self.logprobs, self.top_logprobs, self.tools_offered = n, logprobs, top_logprobs, tools_offered
        self.tool_choice, self.stop = tool_choice, [] if stop is None else stop
        self.include_stop_str_in_output, self.max_tokens = include_stop_str_in_output, max_tokens
        self.repairs, self.thinking = [] if repairs is None else repairs, thinking
        self.tool_check, self.parallel_tool_calls, self.fan_out = tool_check, parallel_tool_calls, fan_out
        self.output_format, self.tool_schemas = output_format, {} if tool_schemas is None else tool_schemas


def _text(content: Any) -> str:
    """A message's content as text; a list of text parts is joined by newlines, as vLLM does."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _merge_developer(messages: list[Any]) -> list[Any]:
    """Fold developer messages into the leading system message (or a new one), in their order."""
    developer = [(i, m) for i, m in enumerate(messages) if m.get("role") == "developer"]
    if not developer:
        return messages
    rest = [(i, m) for i, m in enumerate(messages) if m.get("role") != "developer"]
    parts = list(developer)
    lead: dict[str, Any] = {"role": "system"}
    if rest and rest[0][1].get("role") == "system":
        lead = dict(rest[0][1])
        parts.append(rest[0])
        rest = rest[1:]
    lead["content"] = "\n\n".join(_text(m.get("content")) for _, m in sorted(parts, key=lambda p: p[0]))
    return [lead, *(m for _, m in rest)]


def _rewrite_tool_call(call: Any, profile: Profile) -> Any:
    if not isinstance(call, dict):
        return call
    out = call
    function = call.get("function")
    if isinstance(function, dict) and isinstance(function.get("arguments"), (dict, list)):
        # stdlib json: any JSON value the caller could hold (orjson refuses integers beyond 64 bits)
        arguments = json.dumps(function["arguments"], ensure_ascii=False, separators=(",", ":"))
        out = {**call, "function": {**function, "arguments": arguments}}
    if profile.tool_call_type_required and call.get("type") is None:
        out = {**out, "type": "function"}
    return out


def _rewrite_assistant(message: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """The message itself when nothing changes, else a rewritten copy."""
    present = [k for k in _REASONING_KEYS if k in message]
    if not present and "tool_calls" not in message:
        return message  # (the usual turn in a history: nothing below applies, and no copy is made)
    out = dict(message)
    if present:
        target = profile.reasoning_in
        order = [target, *_REASONING_KEYS] if target != "drop" else list(_REASONING_KEYS)
        value = next((message.get(k) for k in order if message.get(k) is not None), None)
        for key in present:
            del out[key]
        if target != "drop" and value is not None:
            out[target] = value
    calls = message.get("tool_calls", ...)
    if calls is None or calls == []:
        del out["tool_calls"]
    elif isinstance(calls, list):
        new_calls = [_rewrite_tool_call(c, profile) for c in calls]
        if any(a is not b for a, b in zip(new_calls, calls, strict=True)):
            out["tool_calls"] = new_calls
    return message if out == message else out


def _rewrite_messages(messages: list[Any], profile: Profile) -> tuple[list[Any], bool]:
    """``messages`` itself when nothing changes (one pass over them), else a rewritten list; and
    whether developer messages were merged."""
    out = messages
    developer = False
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            rewritten = _rewrite_assistant(message, profile)
            if rewritten is not message:
                if out is messages:
                    out = list(messages)
                out[i] = rewritten
        elif role == "developer":
            developer = True
    merged = developer and profile.developer_to_system
    return (_merge_developer(out) if merged else out), merged


def _whole(value: Any) -> Any:
    """A small integer field as an int: validation let through 2.0 for 2, as the official API does."""
    return int(value) if isinstance(value, float) else value


def _limit(client: dict[str, Any], endpoint: Endpoint) -> int | float | None:
    if endpoint == "chat":
        mct = client.get("max_completion_tokens")
        return mct if mct is not None else client.get("max_tokens")
    if endpoint == "completions":
        mt = client.get("max_tokens")
        return mt if mt is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
    return None


def _set_limit(body: dict[str, Any], limit: int | float | None, endpoint: Endpoint, profile: Profile) -> None:
    if endpoint == "completions":  # only max_tokens exists there, and every backend reads it
        body["max_tokens"] = limit
        return
    # The name the limit came under (max_completion_tokens wins when the client sent both).
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    body.pop("max_tokens", None)
    body.pop("max_completion_tokens", None)
    if limit is None:
        return
    # A backend that reads both names gets the client's own, so an error it raises about the limit
    # names the field the client sent (sending both made vLLM blame max_completion_tokens).
    body[name if profile.max_tokens_in == "both" else profile.max_tokens_in] = limit


def _set_stream_options(body: dict[str, Any], include_usage: bool, profile: Profile, dropped: list[str]) -> None:
    options = body.pop("stream_options", None)
    if body.get("stream") is not True:
        return
    out = dict(options) if isinstance(options, dict) else {}
    if out.pop("include_obfuscation", None) is not None:
        dropped.append("stream_options.include_obfuscation")
    out.pop("include_usage", None)
    if include_usage:
        out["include_usage"] = True
    elif profile.usage_on_empty_stream_options or (isinstance(options, dict) and "include_usage" in options):
        out["include_usage"] = False
    if out:
        body["stream_options"] = out


def _stops(stop: Any) -> list[str]:
    if isinstance(stop, str):
        return [stop]
    return list(stop) if isinstance(stop, list) else []


def prepare(
    endpoint: Endpoint,
    body: Any,
    profile: Profile,
    *,
    upstream_model: str | None = None,
) -> PreparedRequest:
    """Validate ``body`` for ``endpoint`` and rewrite it for ``profile``.

    Raises :class:`~oaishim.wire.errors.OpenAIError` (400, ``param`` set) for what the official API
    refuses. ``upstream_model`` replaces ``model`` when the backend knows the model by another name.
    """
    return rewrite(endpoint, validate(endpoint, body), profile, upstream_model=upstream_model)


def rewrite(
    endpoint: Endpoint,
    client: dict[str, Any],
    profile: Profile,
    *,
    upstream_model: str | None = None,
) -> PreparedRequest:
    """``prepare`` for a body that ``validate`` already passed (the gateway validates before it
    learns the backend's profile, which may take a request to the backend)."""
    out = {k: v for k, v in client.items() if not (v is None and k in _NULL_IS_DEFAULT)}
    dropped: list[str] = []
    repairs: list[str] = []
    stream = client.get("stream") is True
    options = client.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    tools_offered = bool(client.get("tools"))
    limit = _limit(client, endpoint)

    if endpoint == "chat":
        messages = client["messages"]
        rewritten, merged = _rewrite_messages(messages, profile)
        if rewritten is not messages:
            out["messages"] = rewritten
        if merged:
            repairs.append("developer_merged")
    if endpoint != "embeddings":
        _set_limit(out, limit, endpoint, profile)
        _set_stream_options(out, include_usage, profile, dropped)
    if upstream_model is not None:
        out["model"] = upstream_model
    for name in [k for k in out if k in profile.rejects]:
        del out[name]
        if name in client:
            dropped.append(name)
    thinking = reasoning_effort.translate(client, out, profile, dropped) if endpoint == "chat" else None
    tool_plan = plan_tools(out, client, profile) if endpoint == "chat" else None
    fan_out = n_param.plan(out, client, profile, endpoint)
    output_format = translate_response_format(out, profile) if endpoint == "chat" else None
    if profile.request_hooks:
        out = copy.deepcopy(out)  # hooks edit in place, at any depth; the caller's nested data is shared
        for _name, hook in profile.request_hooks:
            hook(out)

    logprobs = client.get("logprobs")
    choice = client.get("tool_choice")
    return PreparedRequest(
        body=out,
        endpoint=endpoint,
        client_model=client["model"],
        stream=stream,
        include_usage=include_usage,
        dropped=dropped,
        n=_whole(client.get("n") or 1),
        logprobs=(logprobs is True) if endpoint == "chat" else _whole(logprobs),
        top_logprobs=_whole(client.get("top_logprobs")) if endpoint == "chat" else None,
        tools_offered=tools_offered,
        tool_choice=choice if choice is not None else ("auto" if tools_offered else "none"),
        stop=_stops(client.get("stop")),
        include_stop_str_in_output=client.get("include_stop_str_in_output") is True,
        max_tokens=limit,
        repairs=[*repairs, *(tool_plan.repairs if tool_plan else ())],
        thinking=thinking or reasoning_effort.THINKING_ON,
        tool_check=tool_plan.check if tool_plan else None,
        parallel_tool_calls=tool_plan.parallel if tool_plan else True,
        fan_out=fan_out,
        output_format=output_format,
        tool_schemas=tool_plan.schemas if tool_plan else {},
    )
