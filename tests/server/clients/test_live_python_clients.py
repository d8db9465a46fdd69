"""Real Python clients (langchain-openai, openai-agents, litellm, LlamaIndex OpenAILike) against a reasoning model on
TensorRT-LLM 1.3 without parsers (``_reasoner.Reasoner``, a test double): each case through the gateway
(profile ``trtllm``) must pass, and the same case straight at the backend must fail — the backend's
``<think>`` in content, tool calls left as text and ``extra="forbid"`` break it — so the gateway's effect is
measured. The cases themselves are in python_clients.py, run in the clients' own virtual environments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _clients import HERE, installed, run_cases

pytestmark = pytest.mark.live

CASES = {
    "langchain-openai": ("invoke", "stream", "bind_tools", "structured_json_schema", "structured_function_calling"),
    "openai-agents": ("function_tool", "function_tool_streamed"),
    "litellm": ("stream_chunk_builder", "stream_tool_call"),
    "llama-index-llms-openai-like": ("chat", "stream_chat", "chat_with_tools"),
}
VENV = {"llama-index-llms-openai-like": "llamaindex"}  # it pins an older openai: a venv of its own
PARAMS = [(client, case) for client, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def report(base_url: Callable[[str], str]) -> Callable[[str, str], dict[str, Any]]:
    """Each client runs all its cases in one process per route (imports take seconds); results are kept."""
    done: dict[tuple[str, str], dict[str, Any]] = {}

    def get(client: str, via: str) -> dict[str, Any]:
        if (client, via) not in done:
            python = installed(VENV.get(client, "py")) / "bin" / "python"
            argv = [str(python), str(HERE / "python_clients.py"), client, base_url(via)]
            done[client, via] = run_cases(argv, CASES[client], client, via)
        return done[client, via]

    return get


@pytest.mark.parametrize(("client", "case"), PARAMS)
def test_through_the_gateway(report: Callable[[str, str], dict[str, Any]], client: str, case: str) -> None:
    result = report(client, "gateway-trtllm")["cases"][case]
    assert result["ok"], result["detail"] + "\n" + result.get("trace", "")


@pytest.mark.parametrize(("client", "case"), PARAMS)
def test_straight_at_the_backend_breaks(report: Callable[[str, str], dict[str, Any]], client: str, case: str) -> None:
    result = report(client, "direct")["cases"][case]
    assert not result["ok"], "passed without the gateway: this case does not measure it"
