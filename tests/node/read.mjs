// Reads responses through the official openai Node SDK and prints what a Node client would hold.
// Input (stdin, JSON): {"baseURL": "...", "cases": [{"name", "kind", "request"}]} where kind is
// chat | chat_stream | chat_helper | completions | completions_stream.
// Output (stdout, JSON): [{"name", "ok", "error", "text", "reasoning", "tool_calls", "finish_reason"}]
import OpenAI from "openai";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (piece) => (data += piece));
  process.stdin.on("end", () => resolve(data));
}));
const client = new OpenAI({ baseURL: input.baseURL, apiKey: input.apiKey ?? "x", maxRetries: 0 });

function fromMessage(message, finish) {
  return {
    text: message?.content ?? "",
    reasoning: message?.reasoning_content ?? message?.reasoning ?? "",
    tool_calls: (message?.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    finish_reason: finish ?? null,
  };
}

async function run(kind, request) {
  if (kind === "chat") {
    const r = await client.chat.completions.create({ ...request, stream: false });
    return fromMessage(r.choices[0].message, r.choices[0].finish_reason);
  }
  if (kind === "chat_stream") {
    const stream = await client.chat.completions.create({ ...request, stream: true });
    let text = "", reasoning = "", finish = null;
    const calls = [];
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.index !== 0) continue;
        const d = choice.delta ?? {};
        text += d.content ?? "";
        reasoning += d.reasoning_content ?? d.reasoning ?? "";
        for (const c of d.tool_calls ?? []) {
          calls[c.index] ??= { id: c.id, name: "", arguments: "" };
          calls[c.index].name += c.function?.name ?? "";
          calls[c.index].arguments += c.function?.arguments ?? "";
        }
        finish = choice.finish_reason ?? finish;
      }
    }
    return { text, reasoning, tool_calls: calls, finish_reason: finish };
  }
  if (kind === "chat_helper") {
    // The helper's snapshot Object.assign()s delta fields it does not know (reasoning_content), so it
    // keeps only the last piece of the reasoning: a Node client reads it from the chunk events.
    const runner = client.chat.completions.stream({ ...request, stream: true });
    let reasoning = "";
    runner.on("chunk", (chunk) => {
      for (const choice of chunk.choices) {
        if (choice.index === 0) reasoning += choice.delta?.reasoning_content ?? choice.delta?.reasoning ?? "";
      }
    });
    const final = await runner.finalChatCompletion();
    return { ...fromMessage(final.choices[0].message, final.choices[0].finish_reason), reasoning };
  }
  if (kind === "completions") {
    const r = await client.completions.create({ ...request, stream: false });
    return { text: r.choices[0].text, reasoning: "", tool_calls: [], finish_reason: r.choices[0].finish_reason };
  }
  if (kind === "completions_stream") {
    const stream = await client.completions.create({ ...request, stream: true });
    let text = "", finish = null;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.index === 0) { text += choice.text ?? ""; finish = choice.finish_reason ?? finish; }
      }
    }
    return { text, reasoning: "", tool_calls: [], finish_reason: finish };
  }
  throw new Error(`unknown kind ${kind}`);
}

const results = [];
for (const { name, kind, request } of input.cases) {
  try {
    results.push({ name, ok: true, error: null, ...(await run(kind, request)) });
  } catch (error) {
    results.push({ name, ok: false, error: `${error.constructor.name}: ${error.message}`, status: error.status ?? null });
  }
}
process.stdout.write(JSON.stringify(results));
