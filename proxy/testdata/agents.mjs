// An agent of the OpenAI Agents SDK (@openai/agents) on its default model, which speaks
// the Responses API, with its client at luft's proxy. Usage:
//   node agents.mjs BASE_URL stream|plain
// It prints one JSON line: the final output and how many times its tool ran.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const nodeDir = process.env.LUFT_NODE_DIR;
const require = createRequire(nodeDir + "/package.json");
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const { default: OpenAI } = await load("openai");
const { Agent, run, tool, setDefaultOpenAIClient, setTracingDisabled } = await load("@openai/agents");

const [baseURL, mode] = process.argv.slice(2);
setTracingDisabled(true);
// The fairness id names the caller to the fake engine: the proxy keeps x-luft-* to itself.
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: "sk-agents-test", maxRetries: 0,
  defaultHeaders: { "x-luft-caller": "agents", "x-gateway-inference-fairness-id": "agents" } }));

let calls = 0;
const lookup = tool({
  name: "lookup",
  description: "Look up a fact",
  parameters: { type: "object", properties: { topic: { type: "string" } }, required: ["topic"], additionalProperties: false },
  strict: true,
  execute: async ({ topic }) => { calls++; return `the fact about ${topic}`; },
});
// The default model class (Responses); the name is the flood's, so that both share a lane.
const agent = new Agent({ name: "Researcher", model: "gpt-5.5", instructions: "Use lookup for facts, then answer.", tools: [lookup] });
const task = "Look up two facts twice, then answer.";
let finalOutput;
if (mode === "stream") {
  const res = await run(agent, task, { stream: true });
  for await (const _ of res) { /* drain the events */ }
  await res.completed;
  finalOutput = res.finalOutput;
} else {
  finalOutput = (await run(agent, task)).finalOutput;
}
console.log(JSON.stringify({ finalOutput, toolCalls: calls }));
