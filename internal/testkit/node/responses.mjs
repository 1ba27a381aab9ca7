// Drives the test kit's fake engine through the official openai npm client's Responses
// API, the way an own-loop agent would, and prints what it saw as one JSON object on
// stdout for the Go test to check (internal/testkit's TestResponsesOpenAINodeClient).
// It fails (exit 1, the reason on stderr) when the client refuses a response.
//
//   node responses.mjs BASE_URL      BASE_URL ends in /v1
//
// Three turns: a non-streamed call that the engine answers with a function call, the
// tool's output sent back with previous_response_id, and a streamed call (both the raw
// event iterator and responses.stream's accumulated final response).
import OpenAI from "openai";

const [baseURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-fake", maxRetries: 0 });

const tools = [{
  type: "function", name: "get_weather", description: "Weather by city", strict: true,
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
}, { type: "web_search" }];

const first = await client.responses.create({
  model: "m", instructions: "Be brief.", input: "weather in Oslo?", tools, tool_choice: "auto",
  store: true, reasoning: { effort: "low" }, metadata: { trace: "t1" },
});
const call = first.output.find((o) => o.type === "function_call");
if (!call) throw new Error(`no function call in ${JSON.stringify(first.output)}`);

const second = await client.responses.create({
  model: "m", previous_response_id: first.id, tools,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "-3C" }],
});

const events = [];
const stream = await client.responses.create({ model: "m", input: "tell me a story", max_output_tokens: 8, stream: true });
let streamedText = "";
let completed;
for await (const ev of stream) {
  events.push(ev.type);
  if (ev.type === "response.output_text.delta") streamedText += ev.delta;
  if (ev.type === "response.completed") completed = ev.response;
}

const helper = client.responses.stream({ model: "m", input: "weather in Oslo?", tools });
const final = await helper.finalResponse();

console.log(JSON.stringify({
  first: { id: first.id, status: first.status, call, usage: first.usage },
  second: { id: second.id, text: second.output_text, previous: second.previous_response_id, usage: second.usage },
  stream: { events, text: streamedText, usage: completed?.usage, id: completed?.id, outputText: completed?.output_text },
  helper: { id: final.id, output: final.output, usage: final.usage },
}));
