"""A simulated TensorRT-LLM backend for the Codex CLI, started without a tool parser — a TEST DOUBLE.

:class:`CodexSim` is :class:`_trt.TrtSim` (the same request validation: unknown fields and history
``reasoning_content`` refused; the same 1.3.0rc6 answer bytes: ``<think>`` in content, a fresh id per
chunk, null extras) with a different deterministic "model", and no ``--tool_parser``: the tool call
stays in ``content`` as hermes/Qwen3 text (``<tool_call>{...}</tool_call>``), which the gateway must
turn into a function call.

The model: when the conversation has a tool result after the last user message, it answers once with
that result (``ANSWER``); otherwise, when a shell tool Codex offers is among the request's tools
(``exec_command``, ``shell_command`` or ``shell``), it calls it once with a harmless read-only command
(``COMMAND``) in that tool's argument shape; with none of them it answers plainly. Keying on "a tool
result after the last user message" (not on the last message's role) keeps an agent that repeats
context after a tool result from looping.
"""

from __future__ import annotations

import json
from typing import Any

from _trt import Reply, TrtSim, think

COMMAND = "echo oaishim-codex-ok"
ANSWER = "命令已运行，输出是：{output}"
ANSWER_PLAIN = "你好！有什么可以帮你的吗？"
THINK_CALL = "用户要我运行一个命令，我调用 {tool}。"
THINK_ANSWER = "命令的输出已经回来了，我告诉用户。"


def shell_arguments(name: str) -> dict[str, Any] | None:
    """The argument object each of Codex's shell tools takes for ``COMMAND``."""
    if name == "exec_command":
        return {"cmd": COMMAND}
    if name == "shell_command":
        return {"command": COMMAND}
    if name == "shell":
        return {"command": ["bash", "-lc", COMMAND]}
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class CodexSim(TrtSim):
    """TrtSim's validation and answer bytes; the model above; tool calls left as text (no tool parser)."""

    def __init__(self) -> None:
        super().__init__()
        self.called: list[tuple[str, dict[str, Any]]] = []  # the tool calls it wrote
        self.tool_results: list[str] = []  # the tool results it answered with

    def generate(self, body: dict[str, Any], messages: list[dict[str, str]]) -> Reply:
        raw = body.get("messages") or []
        last_user = max((i for i, m in enumerate(raw) if m.get("role") == "user"), default=-1)
        results = [m for m in raw[last_user + 1 :] if m.get("role") == "tool"]
        if results:
            output = _text(results[-1].get("content"))
            self.tool_results.append(output)
            return Reply(think(THINK_ANSWER) + ANSWER.format(output=output.strip()))
        offered = [
            t["function"]["name"]
            for t in body.get("tools") or []
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
        for name in ("exec_command", "shell_command", "shell"):
            arguments = shell_arguments(name)
            if name in offered and arguments is not None:
                self.called.append((name, arguments))
                args = json.dumps(arguments, ensure_ascii=False)
                text = (
                    think(THINK_CALL.format(tool=name))
                    + f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
                )
                return Reply(text)  # no parser: the call is text, calls=[]
        return Reply(think(THINK_ANSWER) + ANSWER_PLAIN)
