"""Runs one real Python client's cases against the embedded engine (``oaishim serve`` with no upstream:
llama.cpp on the tiny random-weight model); run by test_live_embedded_clients.py in the clients' own
virtual environment, never imported by pytest.

    python embedded_clients.py CLIENT BASE_URL   ->  one JSON object on stdout:
    {"versions": {...}, "cases": {CASE: {"ok": bool, "detail": str}}}

The model's text is junk, so nothing here asserts text. Tool calls and structured output are steered
with official request parameters only: a named ``tool_choice`` (or ``required``) and a tool whose only
argument is ``city: "Tokyo"`` (an ``enum``), and ``response_format`` ``json_schema``. Each case asserts
what the client must do: the answer arrives (text and a finish reason), the tool runs with the steered
arguments and the turn after it completes, the structured output parses.
"""

# no ``from __future__ import annotations``: LlamaIndex reads the tool's type hints at run time

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any, Literal

from _cases import Cases, expect, litellm_stream, main

MODEL = "tiny"
KEY = "sk-test"
SHORT = 16  # tokens for a text answer: junk either way, and quick
LONG = 400  # a call or a JSON object: the grammar allows free whitespace, which a random model loves
ASK = "Use the get_weather tool for city=Tokyo."
calls: list[str] = []  # the cities the tool ran for
City = Literal["Tokyo"]
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Tokyo"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The current weather in a city.", "parameters": PARAMETERS},
}


def get_weather_impl(city: City) -> str:
    """The current weather in a city."""
    calls.append(city)
    return f"Sunny, 21 C in {city}"


def text_arrived(text: Any, finish: Any = "stop") -> None:
    """The answer arrived: text (empty when the model spent every token thinking) and how it ended."""
    expect(text is None or isinstance(text, str), f"no text: {text!r}")
    # "incomplete": a Responses answer cut at max_output_tokens, as OpenAI ends it
    expect(finish in ("stop", "length", "incomplete"), f"finish reason {finish!r}")


def tool_ran() -> None:
    expect(calls == ["Tokyo"], f"the tool ran for {calls!r}, wanted ['Tokyo']")


# -- langchain-openai -------------------------------------------------------------------------------
def langchain(base: str, responses: bool = False) -> dict[str, Callable[[], None]]:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    def llm(tokens: int, **extra: Any) -> ChatOpenAI:
        return ChatOpenAI(
            base_url=base,
            api_key=KEY,  # type: ignore[arg-type]
            model=MODEL,
            max_retries=0,
            timeout=120,
            max_tokens=tokens,  # type: ignore[call-arg]
            use_responses_api=responses,
            **extra,
        )

    @tool
    def get_weather(city: City) -> str:
        """The current weather in a city."""
        return get_weather_impl(city)

    class Forecast(BaseModel):
        city: City = Field(description="the city")
        celsius: int = Field(description="the temperature", ge=-50, le=50)

    def finish(message: Any) -> Any:
        meta = message.response_metadata
        return meta.get("finish_reason") or ("stop" if meta.get("status") == "completed" else meta.get("status"))

    def invoke() -> None:
        message = llm(SHORT).invoke("Hi there")
        text_arrived(message.text, finish(message))

    def stream() -> None:
        total: Any = None
        for chunk in llm(SHORT).stream("Hi there"):
            total = chunk if total is None else total + chunk
        expect(total is not None, "no chunk")
        text_arrived(total.text, finish(total))

    def bind_tools() -> None:
        ask = [HumanMessage(ASK)]
        message = llm(LONG).bind_tools([get_weather], tool_choice="get_weather").invoke(ask)
        expect(len(message.tool_calls) >= 1, f"no tool call; text {message.text[:80]!r}")
        call = message.tool_calls[0]
        expect(call["name"] == "get_weather" and call["args"] == {"city": "Tokyo"}, f"tool call {call!r}")
        result = get_weather.invoke(call["args"])
        tool_ran()
        answer = (
            llm(SHORT).bind_tools([get_weather]).invoke([*ask, message, ToolMessage(result, tool_call_id=call["id"])])
        )
        text_arrived(answer.text, finish(answer))

    def structured(method: Literal["json_schema", "function_calling"]) -> Callable[[], None]:
        def run() -> None:
            # thinking off (reasoning_effort "none"): the grammar waits for the reasoning to end (L-23)
            model = llm(LONG, reasoning_effort="none").with_structured_output(Forecast, method=method)
            result = model.invoke("Give me a forecast as data.")
            expect(isinstance(result, Forecast) and result.city == "Tokyo", f"not parsed: {result!r}")

        return run

    cases = {"invoke": invoke, "stream": stream, "bind_tools": bind_tools}
    cases["structured_json_schema"] = structured("json_schema")
    if not responses:
        cases["structured_function_calling"] = structured("function_calling")
    return cases


def langchain_responses(base: str) -> dict[str, Callable[[], None]]:
    return langchain(base, responses=True)


# -- openai-agents ----------------------------------------------------------------------------------
def agents(base: str, responses: bool = False) -> dict[str, Callable[[], None]]:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning
    from pydantic import BaseModel

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: City) -> str:
        """The current weather in a city."""
        return get_weather_impl(city)

    class Report(BaseModel):
        city: City

    def agent() -> Agent[Any]:
        """One per event loop. The named tool_choice forces the call; the SDK resets it after the tool
        ran (``reset_tool_choice``), so the next turn is the final answer. On Responses the SDK takes
        an answer cut at max_output_tokens (``incomplete``) for an error, so there the final answer
        is structured (``output_type``: ``text.format`` json_schema, thinking off) and ends on its own."""
        client = AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0)
        if not responses:
            model: Any = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
            settings = ModelSettings(tool_choice="get_weather", max_tokens=LONG)
            return Agent(name="weather", instructions="You answer questions.", model=model, tools=[get_weather],
                         model_settings=settings)  # fmt: skip
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        settings = ModelSettings(tool_choice="get_weather", max_tokens=LONG, reasoning=Reasoning(effort="none"))
        return Agent(name="weather", instructions="You answer questions.", model=model, tools=[get_weather],
                     model_settings=settings, output_type=Report)  # fmt: skip

    def check(result: Any) -> None:
        tool_ran()
        want = Report if responses else str
        expect(isinstance(result.final_output, want), f"final output {result.final_output!r}")

    def run() -> None:
        async def go() -> Any:
            return await Runner.run(agent(), ASK, max_turns=4)

        check(asyncio.run(go()))

    def streamed() -> None:
        async def go() -> Any:
            result = Runner.run_streamed(agent(), ASK, max_turns=4)
            async for _ in result.stream_events():
                pass
            return result

        check(asyncio.run(go()))

    return {"function_tool": run, "function_tool_streamed": streamed}


def agents_responses(base: str) -> dict[str, Callable[[], None]]:
    return agents(base, responses=True)


# -- litellm ----------------------------------------------------------------------------------------
def litellm_cases(base: str) -> dict[str, Callable[[], None]]:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # offline: no fetch of the price list
    import litellm

    litellm.suppress_debug_info = True

    def stream(**extra: Any) -> Any:
        return litellm_stream(litellm, base, MODEL, KEY, **extra)

    def stream_text() -> None:
        choice = stream(max_tokens=SHORT)
        text_arrived(choice.message.content, choice.finish_reason)

    def stream_tools() -> None:
        named = {"type": "function", "function": {"name": "get_weather"}}
        ask = [{"role": "user", "content": ASK}]
        choice = stream(messages=ask, tools=[TOOL], tool_choice=named, max_tokens=LONG)
        found = choice.message.tool_calls or []
        expect(len(found) == 1, f"tool calls {found!r}; text {str(choice.message.content)[:80]!r}")
        expect(found[0].function.name == "get_weather", f"tool call {found[0]!r}")
        arguments = json.loads(found[0].function.arguments)
        expect(arguments == {"city": "Tokyo"}, f"arguments {found[0].function.arguments!r}")
        result = get_weather_impl(arguments["city"])
        tool_ran()
        call = {"id": found[0].id, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        call["function"]["arguments"] = found[0].function.arguments
        history = [*ask, {"role": "assistant", "content": None, "tool_calls": [call]}]
        history.append({"role": "tool", "tool_call_id": found[0].id, "content": result})
        answer = stream(messages=history, tools=[TOOL], max_tokens=SHORT)
        text_arrived(answer.message.content, answer.finish_reason)

    return {"stream_chunk_builder": stream_text, "stream_tool_call": stream_tools}


# -- LlamaIndex OpenAILike --------------------------------------------------------------------------
def llamaindex(base: str) -> dict[str, Callable[[], None]]:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    def llm(tokens: int) -> Any:
        return OpenAILike(
            api_base=base,
            api_key=KEY,
            model=MODEL,
            is_chat_model=True,
            is_function_calling_model=True,
            context_window=65536,
            max_tokens=tokens,
            max_retries=0,
            timeout=120,
        )

    tool = FunctionTool.from_defaults(fn=get_weather_impl, name="get_weather")

    def chat() -> None:
        response = llm(SHORT).chat([ChatMessage(role="user", content="Hi there")])
        text_arrived(response.message.content, response.raw.choices[0].finish_reason)

    def stream_chat() -> None:
        chunks = list(llm(SHORT).stream_chat([ChatMessage(role="user", content="Hi there")]))
        last: Any = chunks[-1] if chunks else None
        expect(last is not None, "no chunk")
        text_arrived(last.message.content or "", last.raw.choices[0].finish_reason)

    def tool_call() -> None:
        model = llm(LONG)
        response = model.chat_with_tools([tool], user_msg=ASK, tool_required=True)
        selections = model.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        expect(len(selections) >= 1, f"tool calls {selections!r}; text {str(response.message.content)[:80]!r}")
        expect(selections[0].tool_name == "get_weather", f"tool {selections[0].tool_name!r}")
        expect(selections[0].tool_kwargs == {"city": "Tokyo"}, f"arguments {selections[0].tool_kwargs!r}")
        tool.call(**selections[0].tool_kwargs)
        tool_ran()

    return {"chat": chat, "stream_chat": stream_chat, "chat_with_tools": tool_call}


CLIENTS: dict[str, tuple[Cases, tuple[str, ...]]] = {
    "langchain-openai": (langchain, ("langchain-openai", "langchain-core", "openai")),
    "langchain-openai (Responses)": (langchain_responses, ("langchain-openai", "langchain-core", "openai")),
    "openai-agents": (agents, ("openai-agents", "openai")),
    "openai-agents (Responses)": (agents_responses, ("openai-agents", "openai")),
    "litellm": (litellm_cases, ("litellm", "openai")),
    "llama-index-llms-openai-like": (llamaindex, ("llama-index-llms-openai-like", "llama-index-core", "openai")),
}


if __name__ == "__main__":
    main(CLIENTS, calls)
