"""Steering a model to known output, so a case can tell "honoured" from "accepted but ignored".

A parameter is judged by its effect: a stop string cuts the text, ``logit_bias`` makes the biased
token appear, ``tool_choice: "required"`` gives a call. That needs output the probe can predict,
which a random-weight test model (or any model) does not give on its own. A *dialect* is one way a
server lets a request force its output. Which one a server speaks is found out by effect, never by
its name (a gateway hides the backend's name): the runner asks for a known text in each dialect in
turn and keeps the first whose answer is that text (calibration; see ``_runner.calibrate``).

Text dialects, tried in this order:

* ``gbnf``: llama.cpp's native ``grammar`` field (GBNF), passed through by gateways;
* ``structured_outputs``: vLLM's ``structured_outputs: {regex}`` (2025 and later);
* ``guided_regex``: vLLM before that, and servers that copied it;
* ``prompt``: no dialect; the text is asked for in the prompt. A real model may comply; cases
  whose expectations need the exact text then report "cannot tell" instead of a failure.

Tool calls: a plain ``tool_choice: "required"`` where the server enforces it (a step under ``auto``
still gets the recipe, where it works); else the recipe the
recorded llama.cpp traffic uses for Qwen-style templates (``tests/fixtures/recorded/llamacpp-server``):
``logit_bias`` +100 on the ``<tool_call>`` and newline tokens, ``stop: ["</tool_call>"]``, one call.
Token ids come from the server's ``/tokenize`` (llama.cpp and vLLM shapes, also found by effect).

``thinking: false`` (structured output on a template that opens ``<think>``): the backends apply a
``response_format`` grammar only after the reasoning ends (vLLM V-32, llama.cpp L-23), and a random
test model never ends it; where the server reads extension fields (a text dialect works, or its own
``/tokenize`` answers) the step also gets ``chat_template_kwargs: {enable_thinking: false}``, which
vLLM and llama.cpp templates read.

The Responses API (``/v1/responses``) is calibrated on its own, the same way: a backend's own
endpoint may read ``grammar`` or ``structured_outputs`` beside the official fields, while a gateway
that refuses unknown parameters (as the official API does) can only be steered by what the API
defines: ``tool_choice: "required"`` where the backend enforces it. What cannot be forced there is
"cannot tell", as on chat.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BIAS_CANDIDATES",
    "CALIBRATION_TEXT",
    "TEXT_DIALECTS",
    "TOKENIZE_DIALECTS",
    "Steering",
    "gbnf_literal",
    "steer_body",
    "tool_call_recipe",
]

CALIBRATION_TEXT = "Probe says hello."
# Words tried for the logit_bias case: the first that is a single token is biased.
BIAS_CANDIDATES = (" the", " return", " hello", "the", "ok", " a")
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


def gbnf_literal(text: str) -> str:
    """A GBNF grammar whose only sentence is ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'root ::= "{escaped.replace(chr(9), chr(92) + "t")}"'


TEXT_DIALECTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "gbnf": lambda text: {"grammar": gbnf_literal(text)},
    "structured_outputs": lambda text: {"structured_outputs": {"regex": re.escape(text)}},
    "guided_regex": lambda text: {"guided_regex": re.escape(text)},
    "prompt": lambda text: {},
}


def _llamacpp_tokens(body: Any) -> list[int] | None:
    tokens = body.get("tokens") if isinstance(body, Mapping) else None
    if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
        return tokens
    return None


# name -> (request body for the text, how to read the ids from the answer)
TOKENIZE_DIALECTS: dict[str, tuple[Callable[[str, str], dict[str, Any]], Callable[[Any], list[int] | None]]] = {
    "llamacpp": (lambda text, model: {"content": text, "parse_special": True}, _llamacpp_tokens),
    "vllm": (lambda text, model: {"model": model, "prompt": text, "add_special_tokens": False}, _llamacpp_tokens),
}


def tool_call_recipe(open_id: int, newline_id: int) -> dict[str, Any]:
    return {
        "parallel_tool_calls": False,
        "stop": [TOOL_CALL_CLOSE],
        "logit_bias": {str(open_id): 100, str(newline_id): 100},
    }


@dataclass(frozen=True, slots=True)
class Steering:
    """What calibration found out about one endpoint."""

    text: str = "prompt"  # a key of TEXT_DIALECTS
    tokenize: str | None = None  # a key of TOKENIZE_DIALECTS
    tool_call: str = "unavailable"  # "plain", "recipe" or "unavailable"
    tool_overlay: Mapping[str, Any] = field(default_factory=dict)
    bias_token: tuple[int, str] | None = None  # (id, text) of a single-token word
    responses_text: str = "prompt"  # the same, found on /v1/responses
    responses_tool_call: str = "unavailable"

    @property
    def exact_text(self) -> bool:
        return self.text != "prompt"

    def for_responses(self) -> Steering:
        """The steering of ``/v1/responses`` requests, in the shape chat steering has."""
        tool_overlay = self.tool_overlay if self.responses_tool_call == "recipe" else {}
        return Steering(self.responses_text, self.tokenize, self.responses_tool_call, tool_overlay, self.bias_token)

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokenize": self.tokenize,
            "tool_call": self.tool_call,
            "tool_overlay": dict(self.tool_overlay),
            "bias_token": list(self.bias_token) if self.bias_token else None,
            "responses_text": self.responses_text,
            "responses_tool_call": self.responses_tool_call,
        }


def _ask_in_prompt(body: dict[str, Any], text: str) -> None:
    ask = f"Reply with exactly the following text and nothing else:\n{text}"
    messages = body.get("messages")
    if isinstance(messages, list):
        for i in range(len(messages) - 1, -1, -1):
            if isinstance(messages[i], Mapping) and messages[i].get("role") == "user":
                messages[i] = {**messages[i], "content": ask}
                return
        messages.append({"role": "user", "content": ask})
    elif isinstance(body.get("prompt"), str):
        body["prompt"] = ask + "\n"
    elif isinstance(body.get("input"), str):  # a Responses request
        body["input"] = ask


def steer_body(body: Mapping[str, Any], steer: Mapping[str, Any], steering: Steering) -> dict[str, Any]:
    """``body`` with the overlays ``steer`` asks for, in the dialects ``steering`` found."""
    out = dict(body)
    text = steer.get("text")
    if isinstance(text, str):
        out.update(TEXT_DIALECTS[steering.text](text))
        if steering.text == "prompt":
            if isinstance(out.get("messages"), list):
                out["messages"] = list(out["messages"])
            _ask_in_prompt(out, text)
    if steer.get("thinking") is False and (steering.exact_text or steering.tokenize is not None):
        kwargs = out.get("chat_template_kwargs")
        out["chat_template_kwargs"] = {**(kwargs if isinstance(kwargs, Mapping) else {}), "enable_thinking": False}
    forced = out.get("tool_choice") == "required" or isinstance(out.get("tool_choice"), Mapping)
    if steer.get("tool_call") and (steering.tool_call == "recipe" or not forced):
        for key, value in steering.tool_overlay.items():
            if key == "logit_bias" and isinstance(out.get(key), Mapping):
                out[key] = {**out[key], **value}
            elif key not in out:
                out[key] = value
    return out
