"""The tiny model's chat template, rendered the way transformers (and so vLLM) render it."""

from __future__ import annotations

import pytest
from _tiny import CONVERSATION, TOOLS

from oaishim.engine._template import render_chat

pytest.importorskip("jinja2")

EXPECTED = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>\n\n'
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nTwo cities, two calls.\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\nParis: sunny. Rome: rain.<|im_end|>\n"
    "<|im_start|>system\nAnswer in French.<|im_end|>\n"
    "<|im_start|>user\nMerci!<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_conversation_with_tools_calls_results_and_reasoning() -> None:
    assert render_chat(CONVERSATION, tools=TOOLS) == EXPECTED


def test_plain_chat_and_generation_prompt() -> None:
    messages = [{"role": "developer", "content": "Hi there."}, {"role": "user", "content": "hi"}]
    base = "<|im_start|>system\nHi there.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert render_chat(messages, add_generation_prompt=False) == base
    assert render_chat(messages) == base + "<|im_start|>assistant\n"
    assert render_chat(messages, enable_thinking=False) == base + "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_tools_without_system_message() -> None:
    text = render_chat([{"role": "user", "content": "x"}], tools=TOOLS)
    assert text.startswith("<|im_start|>system\n# Tools\n\n") and text.endswith(
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tool_call_next_to_content() -> None:
    message = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    text = render_chat([{"role": "user", "content": "x"}, message], add_generation_prompt=False)
    assert text.endswith(
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n'
    )
