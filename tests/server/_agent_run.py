"""Runs one OpenAI Agents SDK agent to completion against a gateway (run by test_responses_agents.py
with the clients' own Python, ``scripts/install-clients``; it imports nothing of oaishim's).

Input (stdin, JSON): {"base_url", "api_key", "model", "instructions", "question", "stream"}.
Output (stdout, JSON): {"final_output", "tool_calls": [arguments, ...], "items": [item types]}.
"""

import asyncio
import json
import sys

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)
config = json.load(sys.stdin)
seen: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """查询城市天气"""
    seen.append(city)
    return f"{city}：晴，25°C"


async def main() -> None:
    client = AsyncOpenAI(base_url=config["base_url"], api_key=config["api_key"], max_retries=0)
    model = OpenAIResponsesModel(model=config["model"], openai_client=client)  # the SDK's default model kind
    agent = Agent(name="weather", instructions=config["instructions"], tools=[get_weather], model=model)
    if config["stream"]:
        result = Runner.run_streamed(agent, config["question"])
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, config["question"])
    out = {"final_output": result.final_output, "tool_calls": seen, "items": [item.type for item in result.new_items]}
    sys.stdout.write(json.dumps(out, ensure_ascii=False))
    await client.close()


asyncio.run(main())
