"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai-compatible`` and ``@ai-sdk/openai``'s chat model) against a
reasoning model on TensorRT-LLM 1.3 without parsers (``_reasoner.Reasoner``, a test double): generateText,
streamText, a zod-schema tool executed over several steps (plain and streamed), and the reasoning where the
provider exposes it (``reasoningText``, openai-compatible). Through the gateway (profile ``trtllm``) each case
must pass; straight at the backend each must fail. The cases are in aisdk.mjs, run on Node 24.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _clients import HERE, NODE_BIN, installed, node_env, run_cases

pytestmark = pytest.mark.live

COMMON = ("generateText", "streamText", "tool_multi_step", "tool_multi_step_stream")
CASES = {"openai-compatible": (*COMMON, "reasoning"), "openai": COMMON}
PARAMS = [(provider, case) for provider, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def report(base_url: Callable[[str], str]) -> Callable[[str, str], dict[str, Any]]:
    done: dict[tuple[str, str], dict[str, Any]] = {}

    def get(provider: str, via: str) -> dict[str, Any]:
        if (provider, via) not in done:
            installed("node24")
            env = node_env(OAISHIM_AISDK=str(installed("aisdk")))
            argv = [str(NODE_BIN / "node"), str(HERE / "aisdk.mjs"), provider, base_url(via)]
            done[provider, via] = run_cases(argv, CASES[provider], f"ai-sdk ({provider})", via, env)
        return done[provider, via]

    return get


@pytest.mark.parametrize(("provider", "case"), PARAMS)
def test_through_the_gateway(report: Callable[[str, str], dict[str, Any]], provider: str, case: str) -> None:
    result = report(provider, "gateway-trtllm")["cases"][case]
    assert result["ok"], result["detail"]


@pytest.mark.parametrize(("provider", "case"), PARAMS)
def test_straight_at_the_backend_breaks(report: Callable[[str, str], dict[str, Any]], provider: str, case: str) -> None:
    result = report(provider, "direct")["cases"][case]
    assert not result["ok"], "passed without the gateway: this case does not measure it"
