"""A simulated TensorRT-LLM 1.3.0rc6 backend serving Qwen3 to an agent — a TEST DOUBLE, not the engine.

What it does is written from ``docs/backend-quirks.md`` §3 (rows T-*) for one setup — trtllm-serve
1.3.0rc6, Qwen3-32B-NVFP4, ``--tool_parser`` on, no ``--reasoning_parser``, behind the OpenClaw agent,
where a JSONL logging proxy found six problems (P0 developer dropped, T-2; P1 ``<think>`` in content,
T-18; P2 a fresh id per chunk, T-11; P3 ``tool_calls: []``, T-15; P4 null extras, T-14; P5 history
``reasoning_content`` refused, T-2) — and the byte style of ``tests/fixtures/trtllm/``.
Nothing here was recorded from a real server; the engine integration tests run real engines.

:class:`TrtSim` is a ``responder`` for :class:`_servers.Replayer` (``Seen -> Canned``):

* It VALIDATES the request as 1.3.0rc6's pydantic models would and answers 400 with the flat error
  body (T-23) for: top-level fields its ``ChatCompletionRequest`` lacks (T-1 ``extra="forbid"``: the
  platform-only fields such as ``store``/``metadata``/``service_tier``, the legacy ``functions``,
  ``parallel_tool_calls`` and ``reasoning_effort``, as the ``trtllm@0`` profile describes that
  release); ``reasoning_content`` in an assistant history message (P5: ``ReasoningAssistantMessage``
  has only ``reasoning``); history tool calls missing a required TypedDict key; ``tool_choice``
  other than none/auto/named; ``stream_options`` without ``stream`` (T-9).
* It RENDERS the messages with Qwen3's chat template, which knows system/user/assistant/tool only:
  ``developer`` messages are silently dropped (P0) and counted in :attr:`TrtSim.developer_seen`.
* Its "model" is deterministic: as in that setup, the tool instructions live in the system prompt, so
  it calls a tool only when the rendered system prompt names it, tools were offered, the last
  message is a user message asking for weather (``get_weather``) or a search (``web_search``).
  After a tool result it answers with that result; otherwise it answers plainly (saying it cannot
  fetch live data when asked for it — the symptom the agent's users saw). Every answer starts with a
  ``<think>…</think>`` block.
* It ANSWERS in 1.3.0rc6's shape: no reasoning parser, so ``<think>`` stays in ``content`` and
  ``reasoning_content`` is ``""`` (P1); a fresh ``id`` (and ``created`` that moves on) per chunk
  (P2, T-11); ``tool_calls: []`` on messages without calls (P3, T-15); the null extras
  ``stop_reason``, ``mm_embedding_handle``, ``disaggregated_params``, ``avg_decoded_tokens_per_iter``,
  ``prompt_token_ids`` (P4, T-14); the first chunk role-only and written ``data: {...} \\n\\n`` with a
  trailing space (T-10); ``"content":""`` and ``"reasoning_content":""`` on every later chunk (T-12);
  ``finish_reason`` on the last delta (T-13); tool calls parsed by the hermes/qwen3 parser with
  ``chatcmpl-tool-`` ids and ``type`` repeated on every delta (T-17); a usage chunk whenever
  ``stream_options`` is present and does not say ``include_usage: false`` (T-19).

Ids are random (uuid hex, as TRT-LLM's); everything else is a function of the request.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from _servers import Canned, Seen

# ChatCompletionRequest of 1.3.0rc6 as the trtllm@0 profile describes it: the official fields minus
# the platform-only ones, the legacy functions, parallel_tool_calls and reasoning_effort; plus
# TRT-LLM's own sampling and template extras.
OFFICIAL_ACCEPTED = frozenset(
    {
        "messages",
        "model",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "user",
    }
)
TRT_EXTRAS = frozenset(
    {
        "best_of",
        "use_beam_search",
        "top_k",
        "top_p_min",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "early_stopping",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "echo",
        "add_generation_prompt",
        "add_special_tokens",
        "documents",
        "chat_template",
        "chat_template_kwargs",
        "lora_request",
        "disaggregated_params",
    }
)
ACCEPTED = OFFICIAL_ACCEPTED | TRT_EXTRAS
TEMPLATE_ROLES = ("system", "user", "assistant", "tool")  # Qwen3's chat template

NULL_CHOICE_EXTRAS = {
    "stop_reason": None,
    "mm_embedding_handle": None,
    "disaggregated_params": None,
    "avg_decoded_tokens_per_iter": None,
}
CREATED = 1772100000  # the days of that setup (2026-02); moves on one second every few chunks (T-11)
CHUNKS_PER_SECOND = 8

# What the simulated model thinks and says.
CITIES = ("北京", "上海", "广州", "深圳", "杭州", "成都", "Paris", "London", "Tokyo")
THINK_TOOL = "用户想{what}，我应该调用 {tool}。"
THINK_RESULT = "工具已经返回结果，我整理一下告诉用户。"
THINK_NO_TOOLS = "用户想查看实时信息。我无法访问实时数据，也没有可用的工具，只能建议用户自己查询。"
THINK_CHAT = "用户在和我打招呼，简单回应即可。"
ANSWER_NO_TOOLS = "抱歉，我无法获取实时信息。建议您查看相关网站或手机应用。"
ANSWER_CHAT = "你好！我是 Qwen，有什么可以帮你的吗？"
ANSWER_RESULT = "查询结果：{result}"


def _jdump(value: Any) -> str:
    """Starlette JSONResponse / pydantic model_dump_json: compact, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def tokens(text: str) -> list[str]:
    """Qwen3-ish tokens: the think and tool-call tags and newlines alone, other text two characters at a time."""
    return re.findall(r"</?think>|</?tool_call>|\n|[^\n<]{1,2}|<", text)


def think(reasoning: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\n"


@dataclass
class Reply:
    """What the model generated: its raw text (think block included) and the calls the parser found."""

    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"} (JSON text)
    prefix: str = ""  # the text before <tool_call> (what the parser leaves in content)


class Invalid(Exception):
    """A pydantic validation failure: ``errors`` are the dicts pydantic reports."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors


def _pydantic_message(errors: list[dict[str, Any]]) -> str:
    head = "1 validation error:" if len(errors) == 1 else f"{len(errors)} validation errors:"
    return head + "\n" + "".join(f"  {e!r}\n" for e in errors)


def error_body(message: str) -> bytes:
    """T-23: the flat error object, always 400 BadRequestError."""
    return _jdump(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    ).encode()


class TrtSim:
    """The simulated trtllm-serve 1.3.0rc6 (see the module docstring). Thread-safe; records what it saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every request body it was sent
        self.rejected: list[str] = []  # the message of every 400 it answered
        self.developer_seen = 0  # developer messages received (and dropped by the template)
        self.rendered: list[list[dict[str, str]]] = []  # the messages the template rendered, per request
        self.sent: list[bytes] = []  # every response body it sent, raw

    # -- the responder -----------------------------------------------------------------------
    def __call__(self, seen: Seen) -> Canned:
        with self.lock:
            canned = self._answer(seen)
            self.sent.append(canned.body)
            return canned

    def _answer(self, seen: Seen) -> Canned:
        if seen.method == "GET" and seen.path == "/version":
            return Canned(b'{"version":"1.3.0rc6"}')
        if seen.method != "POST" or seen.path != "/v1/chat/completions":
            return Canned(b'{"detail":"Not Found"}', 404)
        try:
            body = seen.json()
        except ValueError:
            return self._reject("Expecting value: line 1 column 1 (char 0)")
        self.requests.append(body)
        try:
            self.validate(body)
        except Invalid as exc:
            return self._reject(_pydantic_message(exc.errors))
        messages = self.render(body["messages"])
        reply = self.generate(body, messages)
        number = len(self.requests)
        if body.get("stream") is True:
            return Canned(self.stream(body, reply, number), content_type="text/event-stream; charset=utf-8", piece=64)
        return Canned(self.plain(body, reply, number).encode())

    def _reject(self, message: str) -> Canned:
        self.rejected.append(message)
        return Canned(error_body(message), 400)

    # -- request side --------------------------------------------------------------------------
    def validate(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise Invalid([{"type": "model_type", "loc": ("body",), "msg": "Input should be a valid dictionary"}])
        errors: list[dict[str, Any]] = []
        for name in ("model", "messages"):
            if name not in body:
                errors.append({"type": "missing", "loc": ("body", name), "msg": "Field required", "input": body})
        for name, value in body.items():
            if name not in ACCEPTED:
                errors.append(
                    {
                        "type": "extra_forbidden",
                        "loc": ("body", name),
                        "msg": "Extra inputs are not permitted",
                        "input": value,
                    }
                )
        for i, message in enumerate(body.get("messages") or []):
            errors += self._message_errors(i, message)
        choice = body.get("tool_choice")
        if choice is not None and choice not in ("none", "auto") and not isinstance(choice, dict):
            errors.append(
                {
                    "type": "literal_error",
                    "loc": ("body", "tool_choice"),
                    "msg": "Input should be 'none' or 'auto'",
                    "input": choice,
                }
            )
        if body.get("stream_options") is not None and body.get("stream") is not True:
            errors.append(
                {
                    "type": "value_error",
                    "loc": ("body",),
                    "msg": "Value error, Stream options can only be defined when `stream=True`.",
                    "input": body,
                }
            )
        if errors:
            raise Invalid(errors)

    def _message_errors(self, i: int, message: Any) -> list[dict[str, Any]]:
        loc = ("body", "messages", i, "typed-dict")
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return [{"type": "missing", "loc": (*loc, "role"), "msg": "Field required", "input": message}]
        errors: list[dict[str, Any]] = []
        if message["role"] == "assistant":
            if "reasoning_content" in message:
                # P5: the union's last member, ReasoningAssistantMessage, has only (and requires) reasoning.
                if "reasoning" not in message:
                    errors.append(
                        {"type": "missing", "loc": (*loc, "reasoning"), "msg": "Field required", "input": message}
                    )
                errors.append(
                    {
                        "type": "extra_forbidden",
                        "loc": (*loc, "reasoning_content"),
                        "msg": "Extra inputs are not permitted",
                        "input": message["reasoning_content"],
                    }
                )
            for j, call in enumerate(message.get("tool_calls") or []):
                where = (*loc, "tool_calls", j)
                function = call.get("function") if isinstance(call, dict) else None
                for key, ok in (
                    ("id", isinstance(call, dict) and isinstance(call.get("id"), str)),
                    ("type", isinstance(call, dict) and call.get("type") == "function"),
                    ("function", isinstance(function, dict)),
                ):
                    if not ok:
                        errors.append({"type": "missing", "loc": (*where, key), "msg": "Field required", "input": call})
                if isinstance(function, dict):
                    for key in ("name", "arguments"):
                        if not isinstance(function.get(key), str):
                            errors.append(
                                {
                                    "type": "string_type",
                                    "loc": (*where, "function", key),
                                    "msg": "Input should be a valid string",
                                    "input": function.get(key),
                                }
                            )
        if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
            errors.append({"type": "missing", "loc": (*loc, "tool_call_id"), "msg": "Field required", "input": message})
        return errors

    def render(self, messages: list[dict[str, Any]]) -> list[dict[str, str]]:
        """Qwen3's template: only the four roles it knows survive (P0: developer is dropped silently)."""
        out = []
        for message in messages:
            role = message["role"]
            if role == "developer":
                self.developer_seen += 1
            if role in TEMPLATE_ROLES:
                out.append({"role": role, "content": _text(message.get("content"))})
        self.rendered.append(out)
        return out

    # -- the model -----------------------------------------------------------------------------
    def generate(self, body: dict[str, Any], messages: list[dict[str, str]]) -> Reply:
        offered = [
            t["function"]["name"]
            for t in body.get("tools") or []
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        last = messages[-1] if messages else {"role": "user", "content": ""}
        if last["role"] == "tool":
            return Reply(think(THINK_RESULT) + ANSWER_RESULT.format(result=last["content"]))
        if last["role"] != "user":
            return Reply(think(THINK_CHAT) + ANSWER_CHAT)
        ask = last["content"]
        wanted = None
        if "天气" in ask or "weather" in ask.lower():
            city = next((c for c in CITIES if c in ask), "北京")
            wanted = ("get_weather", {"city": city}, f"查看{city}天气")
        elif "搜索" in ask or "search" in ask.lower():
            query = ask.replace("搜索", "").strip(" ：:")
            wanted = ("web_search", {"query": query}, f"搜索“{query}”")
        if wanted is None:
            return Reply(think(THINK_CHAT) + ANSWER_CHAT)
        name, arguments, what = wanted
        choice = body.get("tool_choice")
        usable = choice != "none" and name in offered and name in system  # it knows the tool: P0
        if isinstance(choice, dict):  # a named tool_choice forces that tool
            usable = name in offered and (choice.get("function") or {}).get("name") == name
        if not usable:
            return Reply(think(THINK_NO_TOOLS) + ANSWER_NO_TOOLS)
        args = json.dumps(arguments, ensure_ascii=False)  # the hermes parser's json.dumps
        prefix = think(THINK_TOOL.format(what=what, tool=name))
        call_text = f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
        return Reply(prefix + call_text, [{"name": name, "arguments": args}], prefix)

    # -- response side -------------------------------------------------------------------------
    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prompt = 12 + sum(len(_jdump(m)) for m in body.get("messages") or []) // 3 + 40 * len(body.get("tools") or [])
        completion = len(tokens(reply.text))
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    def plain(self, body: dict[str, Any], reply: Reply, number: int) -> str:
        """T-14: JSONResponse(content=response.model_dump()) — every None field is there."""
        calls = [
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in reply.calls
        ]
        message = {
            "role": "assistant",
            "content": reply.prefix if calls else reply.text,  # T-16: the parser's leftover text
            "reasoning_content": "",  # P1: no reasoning parser
            "reasoning": None,
            "tool_calls": calls,  # P3: [] without calls
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": "tool_calls" if calls else "stop",
            **NULL_CHOICE_EXTRAS,  # P4
        }
        return _jdump(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": CREATED + 10 * number,
                "model": body["model"],  # T-25: echoed, never checked
                "choices": [choice],
                "usage": self._usage(body, reply),
                "prompt_token_ids": None,  # P4
            }
        )

    def stream(self, body: dict[str, Any], reply: Reply, number: int) -> bytes:
        deltas: list[tuple[dict[str, Any], str | None]] = []  # (delta, finish_reason)
        text = reply.prefix if reply.calls else reply.text
        for token in tokens(text):
            deltas.append(({"content": token, "reasoning_content": ""}, None))
        for index, call in enumerate(reply.calls):
            empty = {"content": "", "reasoning_content": ""}
            deltas.append((empty, None))  # the <tool_call> token: nothing to show yet
            first = {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "type": "function",
                "index": index,
                "function": {"name": call["name"], "arguments": ""},
            }
            deltas.append(({**empty, "tool_calls": [first]}, None))
            arguments = call["arguments"]
            for start in range(0, len(arguments), 6):
                piece = {"type": "function", "index": index, "function": {"arguments": arguments[start : start + 6]}}
                deltas.append(({**empty, "tool_calls": [piece]}, None))
        if reply.calls:
            deltas.append(({"content": "", "reasoning_content": ""}, "tool_calls"))  # T-13
        else:
            last, _ = deltas[-1]
            deltas[-1] = (last, "stop")  # T-13: on the last content delta

        base = CREATED + 10 * number
        events: list[bytes] = []

        def chunk(position: int, choices: list[dict[str, Any]], **extra: Any) -> str:
            return _jdump(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",  # P2: a fresh id per chunk
                    "object": "chat.completion.chunk",
                    "created": base + position // CHUNKS_PER_SECOND,  # T-11: fresh created too
                    "model": body["model"],
                    "choices": choices,
                    **extra,
                }
            )

        first_chunk = chunk(0, [{"index": 0, "delta": {"role": "assistant"}}])
        events.append(f"data: {first_chunk} \n\n".encode())  # T-10: the trailing space
        for position, (delta, finish) in enumerate(deltas, start=1):
            choice: dict[str, Any] = {"index": 0, "delta": delta}
            if finish is not None:
                choice["finish_reason"] = finish
            events.append(f"data: {chunk(position, [choice])}\n\n".encode())
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage", True) is not False:  # T-19
            usage = chunk(len(deltas) + 1, [], usage=self._usage(body, reply))
            events.append(f"data: {usage}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        return b"".join(events)
