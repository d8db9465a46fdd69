// Runs the Vercel AI SDK's cases against the embedded engine (`oaishim serve` with no upstream: llama.cpp on
// the tiny random-weight model); run by test_live_embedded_aisdk.py with OAISHIM_AISDK set to the install of
// scripts/install-clients.
//   node aisdk_embedded.mjs PROVIDER BASE_URL THINK_ID  ->  one JSON line: {"versions": {...}, "cases": {CASE: {ok, detail}}}
// PROVIDER: "openai-compatible" (createOpenAICompatible(...).chatModel), "openai-chat" (createOpenAI(...).chat)
// or "openai-responses" (createOpenAI(...)(model): the provider's default, the Responses API).
// The model's text is junk, so no case asserts text. The tool call is steered with official parameters only:
// a named tool choice on step 0 (prepareStep), `toolChoice: 'none'` on step 1, and a tool whose only argument
// is `city` with `enum: ["Tokyo"]` (a zod enum). Each case asserts what the client must do: the answer arrives
// with a finish reason (the random model's text may hold any token, tags included), the tool runs with the steered arguments and the step after it completes.
import {
  createOpenAI, createOpenAICompatible, expect, generateText, report, stepCountIs, streamText, tool, z,
} from "./_aisdk.mjs";

const [provider, baseURL, thinkId] = process.argv.slice(2);  // thinkId: the `<think>` token's id
const MODEL = "tiny";
const SHORT = 16;  // tokens for a text answer: junk either way, and quick
const LONG = 400;  // a call: the grammar allows free whitespace, which a random model loves
const ASK = "Use the get_weather tool for city=Tokyo.";
const openai = createOpenAI({ baseURL, apiKey: "sk-test" });
const model = {
  "openai-compatible": () => createOpenAICompatible({ baseURL, name: "local", apiKey: "sk-test" }).chatModel(MODEL),
  "openai-chat": () => openai.chat(MODEL),
  "openai-responses": () => openai(MODEL),
}[provider]();

// "length": the answer was cut at maxOutputTokens (Responses: `incomplete`), as OpenAI ends it
const ENDED = ["stop", "length"];
function arrived(text, finishReason) {
  expect(typeof text === "string", `no text: ${JSON.stringify(text)}`);
  expect(ENDED.includes(finishReason), `finish reason ${JSON.stringify(finishReason)}`);
}

const ran = [];
const tools = {
  get_weather: tool({
    description: "The current weather in a city.",
    inputSchema: z.object({ city: z.enum(["Tokyo"]) }),
    execute: async ({ city }) => { ran.push(city); return `Sunny, 21 C in ${city}`; },
  }),
};
const common = { model, maxRetries: 0, abortSignal: AbortSignal.timeout(120000) };
// the call forced on step 0, none on step 1: the loop ends after one tool round whatever the model writes
const loop = {
  ...common,
  prompt: ASK,
  tools,
  maxOutputTokens: LONG,
  stopWhen: stepCountIs(4),
  prepareStep: ({ stepNumber }) => ({
    toolChoice: stepNumber === 0 ? { type: "tool", toolName: "get_weather" } : "none",
  }),
};
function looped(steps, text, finishReason) {
  expect(JSON.stringify(ran) === '["Tokyo"]', `the tool ran for ${JSON.stringify(ran)}; step 0 text ${JSON.stringify(steps[0]?.text?.slice(0, 80))}`);
  expect(steps.length === 2, `${steps.length} steps`);
  const calls = steps[0].toolCalls;
  expect(calls.length === 1 && calls[0].toolName === "get_weather", `step 0 calls ${JSON.stringify(calls)}`);
  expect(JSON.stringify(calls[0].input) === '{"city":"Tokyo"}', `arguments ${JSON.stringify(calls[0].input)}`);
  // a named tool choice ends with "stop" at the official API (Chat Completions), "tool-calls" on Responses
  expect(["stop", "tool-calls"].includes(steps[0].finishReason), `step 0 finish reason ${JSON.stringify(steps[0].finishReason)}`);
  expect(steps[1].toolResults.length === 0, "a tool ran on step 1");
  arrived(text, finishReason);
}

const cases = {
  generateText: async () => {
    const result = await generateText({ ...common, prompt: "Hi there", maxOutputTokens: SHORT });
    arrived(result.text, result.finishReason);
  },
  streamText: async () => {
    const result = streamText({ ...common, prompt: "Hi there", maxOutputTokens: SHORT, onError: () => {} });
    let text = "";
    for await (const part of result.textStream) text += part;
    expect(text === (await result.text), "the streamed text differs from the result's");
    arrived(text, await result.finishReason);
  },
  tool_multi_step: async () => {
    const result = await generateText(loop);
    looped(result.steps, result.text, result.finishReason);
  },
  tool_multi_step_stream: async () => {
    const result = streamText({ ...loop, onError: () => {} });
    let text = "";
    for await (const part of result.textStream) text += part;
    looped(await result.steps, await result.text, await result.finishReason);
  },
};
if (provider === "openai-compatible") {
  // The one provider here that exposes reasoning: it reads `reasoning_content` (@ai-sdk/openai's chat model
  // reads no reasoning field, its Responses model only reasoning summaries). The model is made to think with
  // `logit_bias` (official; the provider passes its options through) on the `<think>` token, whose id the
  // test gives: what the answer carried as reasoning must reach reasoningText, no think markup the text.
  const thinking = { ...common, prompt: "Hi there", maxOutputTokens: SHORT, providerOptions: { local: { logit_bias: { [thinkId]: 100 } } } };
  cases.reasoning = async () => {
    const result = await generateText({ ...thinking, include: { responseBody: true } });
    const wire = result.response.body?.choices?.[0]?.message?.reasoning_content;
    expect(typeof wire === "string" && wire.length > 0, `the answer carried no reasoning_content: ${JSON.stringify(wire)}`);
    expect(result.reasoningText === wire, `reasoningText ${JSON.stringify(result.reasoningText)}, the answer's ${JSON.stringify(wire)}`);
    arrived(result.text, result.finishReason);
    expect(!result.text.includes("<think>"), `think markup in the text: ${JSON.stringify(result.text.slice(0, 80))}`);
  };
  cases.reasoning_stream = async () => {
    const result = streamText({ ...thinking, onError: () => {} });
    let text = "";
    for await (const part of result.textStream) text += part;
    const reasoning = await result.reasoningText;
    expect(typeof reasoning === "string" && reasoning.length > 0, `reasoningText ${JSON.stringify(reasoning)}`);
    arrived(text, await result.finishReason);
    expect(!text.includes("<think>"), `think markup in the text: ${JSON.stringify(text.slice(0, 80))}`);
  };
}

await report(cases, ran, provider === "openai-compatible" ? "@ai-sdk/openai-compatible" : "@ai-sdk/openai");
