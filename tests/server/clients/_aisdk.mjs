// What aisdk.mjs and aisdk_embedded.mjs share: the Vercel AI SDK loaded from the install that
// OAISHIM_AISDK names (the folder holding node_modules), the expectation, and the runner that runs the
// cases and prints the one JSON line the test reads: {"versions": {...}, "cases": {CASE: {ok, detail}}}.
import { createRequire } from "node:module";
import path from "node:path";

const root = process.env.OAISHIM_AISDK;
const require = createRequire(path.join(root, "package.json"));
const load = (name) => import(require.resolve(name));
export const { generateText, streamText, tool, stepCountIs } = await load("ai");
export const { z } = await load("zod");
export const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
export const { createOpenAI } = await load("@ai-sdk/openai");

export function expect(ok, detail) {
  if (!ok) throw new Error(detail);
}

// Runs each case (`ran`, the tool's record, emptied before each) and prints the report; `provider` is
// the provider package whose version the report names beside ai's and zod's.
export async function report(cases, ran, provider) {
  const results = {};
  for (const [name, run] of Object.entries(cases)) {
    ran.length = 0;
    try {
      await run();
      results[name] = { ok: true, detail: "" };
    } catch (error) {
      const detail = `${error?.name ?? "Error"}: ${error?.message ?? error}`;
      results[name] = { ok: false, detail: detail.replace(/\s+/g, " ").slice(0, 300) };
    }
  }
  const version = (name) => require(`${name}/package.json`).version;
  const versions = { ai: version("ai"), zod: version("zod") };
  versions[provider] = version(provider);
  console.log(JSON.stringify({ versions, cases: results }));
}
