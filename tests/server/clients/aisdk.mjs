// Runs the Vercel AI SDK's cases against a Chat Completions server; run by test_live_aisdk.py with
// NODE_PATH set to the install of scripts/install-clients.
//   node aisdk.mjs PROVIDER BASE_URL  ->  one JSON line: {"versions": {...}, "cases": {CASE: {ok, detail}}}
// PROVIDER: "openai-compatible" (createOpenAICompatible(...).chatModel) or "openai" (createOpenAI(...).chat).
import {
  createOpenAI, createOpenAICompatible, expect, generateText, report, stepCountIs, streamText, tool, z,
} from "./_aisdk.mjs";

const [provider, baseURL] = process.argv.slice(2);
const HELLO = "Hello! How can I help you today?";
const WEATHER = (city) => `Sunny, 21 C in ${city}`;
const ASK = "Use the get_weather tool for city=Tokyo.";
const model = provider === "openai"
  ? createOpenAI({ baseURL, apiKey: "sk-test" }).chat("qwen3")
  : createOpenAICompatible({ baseURL, name: "local", apiKey: "sk-test" }).chatModel("qwen3");

function plain(text, want = HELLO) {
  expect(!text.includes("<think>"), `<think> markup in the text: ${JSON.stringify(text.slice(0, 60))}`);
  expect(text === want, `text ${JSON.stringify(text.slice(0, 80))}, wanted ${JSON.stringify(want)}`);
}

const ran = [];
const tools = {
  get_weather: tool({
    description: "The current weather in a city.",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => { ran.push(city); return WEATHER(city); },
  }),
};
const common = { model, maxRetries: 0, abortSignal: AbortSignal.timeout(60000) };

const cases = {
  generateText: async () => plain((await generateText({ ...common, prompt: "Hi there" })).text),
  streamText: async () => {
    const result = streamText({ ...common, prompt: "Hi there", onError: () => {} });
    let text = "";
    for await (const part of result.textStream) text += part;
    plain(text);
  },
  tool_multi_step: async () => {
    const result = await generateText({ ...common, prompt: ASK, tools, stopWhen: stepCountIs(4) });
    expect(JSON.stringify(ran) === '["Tokyo"]', `the tool ran for ${JSON.stringify(ran)}; text ${JSON.stringify(result.text.slice(0, 80))}`);
    plain(result.text, "The tool returned: " + WEATHER("Tokyo"));
    expect(result.steps.length === 2, `${result.steps.length} steps`);
  },
  tool_multi_step_stream: async () => {
    const result = streamText({ ...common, prompt: ASK, tools, stopWhen: stepCountIs(4), onError: () => {} });
    let text = "";
    for await (const part of result.textStream) text += part;
    expect(JSON.stringify(ran) === '["Tokyo"]', `the tool ran for ${JSON.stringify(ran)}; text ${JSON.stringify(text.slice(0, 80))}`);
    plain(text, "The tool returned: " + WEATHER("Tokyo"));
  },
};
if (provider !== "openai") {
  // @ai-sdk/openai's chat model reads no reasoning field; the compatible provider exposes reasoning_content.
  cases.reasoning = async () => {
    const result = await generateText({ ...common, prompt: "Hi there" });
    expect((result.reasoningText || "").includes("greet them"), `reasoningText ${JSON.stringify(result.reasoningText)}`);
    plain(result.text);
  };
}

await report(cases, ran, provider === "openai" ? "@ai-sdk/openai" : "@ai-sdk/openai-compatible");
