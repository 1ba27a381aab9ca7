// An agent that keeps its own tool loop, written against the official openai npm
// client, talking to luft's proxy. Usage: node ownloop.mjs BASE_URL stream|plain [RUN_ID]
// It prints one JSON line: the turns it took and the x-luft-run header of each.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const nodeDir = process.env.LUFT_NODE_DIR;
const require = createRequire(nodeDir + "/package.json");
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);

const [baseURL, mode, runID] = process.argv.slice(2);
// The fairness id names the caller to the fake engine: the proxy keeps x-luft-* to itself.
const headers = { "x-luft-caller": "agent", "x-gateway-inference-fairness-id": "agent" };
if (runID) headers["x-luft-run-id"] = runID;
const client = new OpenAI({ baseURL, apiKey: "sk-client-test", defaultHeaders: headers, maxRetries: 0 });

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time", description: "Local time in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
];
const run = { get_weather: (a) => `sunny in ${a.city}`, get_time: (a) => `12:00 in ${a.city}` };

const messages = [{ role: "user", content: "plan a trip to Oslo: check weather and time" }];
const runs = [];
let text = "";
for (let turn = 1; turn <= 10; turn++) {
  let msg;
  if (mode === "stream") {
    const { data: stream, response } = await client.chat.completions
      .create({ model: "m1", messages, tools, stream: true, max_tokens: 16 }).withResponse();
    runs.push(response.headers.get("x-luft-run"));
    msg = { role: "assistant", content: "", tool_calls: [] };
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      if (!d) continue;
      if (d.content) msg.content += d.content;
      for (const tc of d.tool_calls ?? []) {
        const slot = (msg.tool_calls[tc.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.function.name += tc.function.name;
        if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
      }
    }
    if (msg.tool_calls.length === 0) delete msg.tool_calls;
  } else {
    const { data, response } = await client.chat.completions
      .create({ model: "m1", messages, tools, max_tokens: 16 }).withResponse();
    runs.push(response.headers.get("x-luft-run"));
    msg = data.choices[0].message;
  }
  messages.push(msg);
  if (!msg.tool_calls || msg.tool_calls.length === 0) {
    text = msg.content;
    break;
  }
  for (const tc of msg.tool_calls) {
    const out = run[tc.function.name](JSON.parse(tc.function.arguments || "{}"));
    messages.push({ role: "tool", tool_call_id: tc.id, content: out });
  }
}
console.log(JSON.stringify({ turns: runs.length, runs, text }));
