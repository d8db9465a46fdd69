// Reads /v1/responses through the official openai Node SDK: plain, the raw event stream and the
// stream helper, each response retrieved back, then a function_call_output continued through
// previous_response_id. Input (stdin, JSON): {"baseURL", "apiKey", "request"}.
// Output (stdout, JSON): {plain|stream|helper: {status, calls, reasoning, retrieved, events?}, continued}.
import OpenAI from "openai";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (piece) => (data += piece));
  process.stdin.on("end", () => resolve(data));
}));
const client = new OpenAI({ baseURL: input.baseURL, apiKey: input.apiKey, maxRetries: 0 });

// The SDK adds output_text to what create and retrieve return (not to a stream event's response),
// and its stream helper output_parsed and parsed_arguments to function calls: none came from the server.
const bare = ({ output_text, output_parsed, output, ...rest }) =>
  JSON.stringify({ ...rest, output: output.map(({ parsed_arguments, ...item }) => item) });

async function summary(response) {
  const again = await client.responses.retrieve(response.id);
  return {
    status: response.status,
    calls: response.output.filter((i) => i.type === "function_call").map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments) })),
    reasoning: response.output.filter((i) => i.type === "reasoning").map((r) => (r.content ?? []).map((p) => p.text).join("")).join(""),
    retrieved: bare(again) === bare(response),
  };
}

const out = {};
out.plain = await summary(await client.responses.create(input.request));

const events = [];
let completed = null;
for await (const event of await client.responses.create({ ...input.request, stream: true })) {
  events.push(event.type);
  if (event.type === "response.completed") completed = event.response;
}
out.stream = { ...(await summary(completed)), events };

const runner = client.responses.stream(input.request);
const final = await runner.finalResponse();
out.helper = await summary(final);

const call = final.output.find((i) => i.type === "function_call");
const next = await client.responses.create({
  ...input.request,
  input: [{ type: "function_call_output", call_id: call.call_id, output: `${JSON.parse(call.arguments).city}：晴，25°C` }],
  previous_response_id: final.id,
});
out.continued = next.output_text;
process.stdout.write(JSON.stringify(out));
