"""Runs one real Python client's cases against a Chat Completions server; run by test_live_python_clients.py
in the clients' own virtual environment (scripts/install-clients), never imported by pytest.

    python python_clients.py CLIENT BASE_URL   ->  one JSON object on stdout:
    {"versions": {...}, "cases": {CASE: {"ok": bool, "detail": str}}}

Each case is what an application does with the client; it fails (``ok: false``, the first broken
expectation or the client's own error as ``detail``) when the answer is not what an application needs.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

from _cases import Cases, expect, litellm_stream, main

MODEL = "qwen3"
KEY = "sk-test"
HELLO = "Hello! How can I help you today?"
WEATHER = "Sunny, 21 C in {city}"
ASK_WEATHER = "Use the get_weather tool for city=Tokyo."
calls: list[str] = []  # the cities the tool ran for


def get_weather_impl(city: str) -> str:
    calls.append(city)
    return WEATHER.format(city=city)


def plain_text(text: Any, want: str = HELLO) -> None:
    expect(isinstance(text, str), f"no text: {text!r}")
    expect("<think>" not in text, f"<think> markup in the text: {text[:60]!r}")
    expect(text == want, f"text {text[:80]!r}, wanted {want!r}")


def tool_answer(text: Any, city: str = "Tokyo") -> None:
    expect(calls == [city], f"the tool ran for {calls!r}, wanted [{city!r}]")
    plain_text(text, "The tool returned: " + WEATHER.format(city=city))


# -- langchain-openai -------------------------------------------------------------------------------
def langchain(base: str) -> dict[str, Callable[[], None]]:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    llm = ChatOpenAI(base_url=base, api_key=KEY, model=MODEL, max_retries=0, timeout=60)

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return get_weather_impl(city)

    class Forecast(BaseModel):
        city: str = Field(description="the city")
        celsius: int = Field(description="the temperature")

    def invoke() -> None:
        plain_text(llm.invoke("Hi there").content)

    def stream() -> None:
        plain_text("".join(str(chunk.content) for chunk in llm.stream("Hi there")))

    def bind_tools() -> None:
        message = llm.bind_tools([get_weather]).invoke(ASK_WEATHER)
        expect(message.tool_calls != [], f"no tool call; text {str(message.content)[:80]!r}")
        call = message.tool_calls[0]
        expect(call["name"] == "get_weather" and call["args"] == {"city": "Tokyo"}, f"tool call {call!r}")
        expect(str(message.content).strip() == "", f"text beside the call: {str(message.content)[:80]!r}")

    def structured(method: str) -> Callable[[], None]:
        def run() -> None:
            result = llm.with_structured_output(Forecast, method=method).invoke("Give me a forecast as data.")
            expect(isinstance(result, Forecast), f"not parsed: {result!r}")

        return run

    return {
        "invoke": invoke,
        "stream": stream,
        "bind_tools": bind_tools,
        "structured_json_schema": structured("json_schema"),
        "structured_function_calling": structured("function_calling"),
    }


# -- openai-agents ----------------------------------------------------------------------------------
def agents(base: str) -> dict[str, Callable[[], None]]:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return get_weather_impl(city)

    def agent() -> Agent[Any]:
        """One per event loop: the client's connections belong to the loop that opened them."""
        client = AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0)
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        return Agent(name="weather", instructions="You answer questions.", model=model, tools=[get_weather])

    def function_tool_run() -> None:
        async def go() -> Any:
            return (await Runner.run(agent(), ASK_WEATHER, max_turns=4)).final_output

        tool_answer(asyncio.run(go()))

    def streamed_run() -> None:
        async def go() -> Any:
            run = Runner.run_streamed(agent(), ASK_WEATHER, max_turns=4)
            async for _ in run.stream_events():
                pass
            return run.final_output

        tool_answer(asyncio.run(go()))

    return {"function_tool": function_tool_run, "function_tool_streamed": streamed_run}


# -- litellm ----------------------------------------------------------------------------------------
def litellm_cases(base: str) -> dict[str, Callable[[], None]]:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # offline: no fetch of the price list
    import litellm

    litellm.suppress_debug_info = True

    def stream(**extra: Any) -> Any:
        return litellm_stream(litellm, base, MODEL, KEY, **extra).message

    def stream_text() -> None:
        message = stream()
        plain_text(message.content)
        reasoning = getattr(message, "reasoning_content", None) or ""
        expect("greet them" in reasoning, f"reasoning not exposed: {reasoning!r}")

    def stream_tools() -> None:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The current weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                },
            }
        ]
        message = stream(messages=[{"role": "user", "content": ASK_WEATHER}], tools=tools)
        calls = message.tool_calls or []
        expect(len(calls) == 1, f"tool calls {calls!r}; text {str(message.content)[:80]!r}")
        expect(calls[0].function.name == "get_weather", f"tool call {calls[0]!r}")
        expect(
            json.loads(calls[0].function.arguments) == {"city": "Tokyo"}, f"arguments {calls[0].function.arguments!r}"
        )

    return {"stream_chunk_builder": stream_text, "stream_tool_call": stream_tools}


# -- LlamaIndex OpenAILike --------------------------------------------------------------------------
def llamaindex(base: str) -> dict[str, Callable[[], None]]:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        api_base=base,
        api_key=KEY,
        model=MODEL,
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=32768,
        max_retries=0,
        timeout=60,
    )
    tool = FunctionTool.from_defaults(
        fn=get_weather_impl, name="get_weather", description="The current weather in a city."
    )

    def chat() -> None:
        plain_text(llm.chat([ChatMessage(role="user", content="Hi there")]).message.content)

    def stream_chat() -> None:
        plain_text("".join(r.delta or "" for r in llm.stream_chat([ChatMessage(role="user", content="Hi there")])))

    def tool_call() -> None:
        response = llm.chat_with_tools([tool], user_msg=ASK_WEATHER)
        selections = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        expect(len(selections) == 1, f"tool calls {selections!r}; text {str(response.message.content)[:80]!r}")
        expect(selections[0].tool_name == "get_weather", f"tool {selections[0].tool_name!r}")
        expect(selections[0].tool_kwargs == {"city": "Tokyo"}, f"arguments {selections[0].tool_kwargs!r}")

    return {"chat": chat, "stream_chat": stream_chat, "chat_with_tools": tool_call}


CLIENTS: dict[str, tuple[Cases, tuple[str, ...]]] = {
    "langchain-openai": (langchain, ("langchain-openai", "langchain-core", "openai")),
    "openai-agents": (agents, ("openai-agents", "openai")),
    "litellm": (litellm_cases, ("litellm", "openai")),
    "llama-index-llms-openai-like": (llamaindex, ("llama-index-llms-openai-like", "llama-index-core", "openai")),
}


if __name__ == "__main__":
    main(CLIENTS, calls)
