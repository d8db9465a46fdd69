// The Vercel AI SDK on the Responses API (@ai-sdk/openai's `openai.responses(model)`), run by
// test_responses_clients.py with the packages scripts/install-clients puts in its own folder (run
// from that folder, so the bare imports resolve there). Config: JSON in OAISHIM_TEST_CONFIG
// {baseURL, apiKey, model, system, weather, hello}. Prints one JSON object of what the SDK returned.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const config = JSON.parse(process.env.OAISHIM_TEST_CONFIG);
const openai = createOpenAI({ baseURL: config.baseURL, apiKey: config.apiKey });
const model = openai.responses(config.model);
const seen = [];
const tools = {
  get_weather: tool({
    description: "查询城市天气",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      seen.push(city);
      return `${city}：晴，25°C`;
    },
  }),
};
const steps = (result) => result.steps.map((s) => ({ finish: s.finishReason, calls: s.toolCalls.map((c) => c.toolName) }));

const out = {};
const plain = await generateText({ model, prompt: config.hello });
out.plain = { text: plain.text, reasoning: plain.reasoningText ?? null, finish: plain.finishReason };

const withTool = await generateText({
  model,
  system: config.system,
  prompt: config.weather,
  tools,
  stopWhen: stepCountIs(3),
});
out.generate = { text: withTool.text, steps: steps(withTool), finish: withTool.finishReason };

const streamed = streamText({ model, system: config.system, prompt: config.weather, tools, stopWhen: stepCountIs(3) });
const parts = [];
let text = "";
for await (const part of streamed.fullStream) {
  parts.push(part.type);
  if (part.type === "text-delta") text += part.text;
  if (part.type === "error") throw part.error;
}
out.stream = {
  text,
  final: await streamed.text,
  steps: steps({ steps: await streamed.steps }),
  finish: await streamed.finishReason,
  parts: [...new Set(parts)],
};
out.tool_calls = seen;
console.log(JSON.stringify(out));
