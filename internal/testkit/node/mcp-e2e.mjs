// Drives luft's MCP door with the official MCP TypeScript SDK client, as a coding agent
// would, and prints what it saw as one JSON object on stdout for the Go test to check
// (cmd/luft's TestMCPTypeScriptSDK). It fails (exit 1, the reason on stderr) when a call
// fails or a result does not match its tool's output schema (the SDK checks that).
//
//   node mcp-e2e.mjs stdio LUFT_BINARY ARG...   spawns `LUFT_BINARY ARG...` (luft mcp serve)
//   node mcp-e2e.mjs http URL                   streamable HTTP; the bearer token in LUFT_TOKEN
//
// Inputs from the environment: E2E_WORKFLOW (the Lua workflow to execute and await) and
// E2E_APPROVAL_BACKEND (the backend whose agent asked to "keep a note" calls write_file,
// which waits for approval; the elicitation this raises is accepted).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, target, ...rest] = process.argv.slice(2);
const callTimeout = 60_000;

function transportFor() {
  if (mode === "stdio") {
    return new StdioClientTransport({ command: target, args: rest, env: { ...process.env }, stderr: "inherit" });
  }
  if (mode === "http") {
    const headers = { Authorization: `Bearer ${process.env.LUFT_TOKEN ?? ""}` };
    return new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
  }
  throw new Error(`usage: node mcp-e2e.mjs stdio LUFT ARG... | http URL (got ${mode})`);
}

const started = Date.now();
// step logs to stderr what the client does, so a failure shows where it stopped.
function step(what) {
  process.stderr.write(`mcp-e2e (${mode}) +${Date.now() - started}ms: ${what}\n`);
}

// call calls a tool that must succeed and returns its structured content.
async function call(client, name, args, options = {}) {
  step(`call ${name} ${JSON.stringify(args).slice(0, 120)}`);
  const res = await client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: callTimeout, ...options });
  const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  if (res.isError) {
    throw new Error(`${name}: tool error: ${text}`);
  }
  if (!res.structuredContent) {
    throw new Error(`${name}: no structured content (text: ${text})`);
  }
  return { structured: res.structuredContent, text };
}

async function main() {
  const out = { mode };
  const elicitations = [];
  const client = new Client({ name: "luft-e2e", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    step(`elicitation: ${req.params.message}`);
    elicitations.push({ message: req.params.message, requestedSchema: req.params.requestedSchema });
    return { action: "accept", content: { allow: true } };
  });
  await client.connect(transportFor());
  out.server = client.getServerVersion();
  out.capabilities = client.getServerCapabilities();

  out.tools = (await client.listTools()).tools.map((t) => ({
    name: t.name,
    readOnly: t.annotations?.readOnlyHint ?? null,
    hasOutputSchema: Boolean(t.outputSchema),
  }));
  out.resources = (await client.listResources()).resources.map((r) => r.uri);
  out.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
  const examples = out.resources.find((u) => u.includes("example"));
  if (examples) {
    const r = await client.readResource({ uri: examples });
    out.examplesText = r.contents.map((c) => c.text ?? "").join("").slice(0, 2000);
  }

  // A workflow, awaited with progress notifications.
  const ex = await call(client, "workflow_execute", { script: process.env.E2E_WORKFLOW, args: { who: mode } });
  out.execute = ex.structured;
  const progress = [];
  const awaited = await call(client, "workflow_await", { run_id: ex.structured.run_id, timeout_s: 90 }, {
    onprogress: (p) => {
      step(`progress ${p.progress}: ${p.message}`);
      progress.push(p);
    },
    resetTimeoutOnProgress: true,
  });
  out.awaited = awaited.structured;
  out.progress = progress;

  // Three sub-agents, awaited together.
  const handles = [];
  for (const i of [1, 2, 3]) {
    const sp = await call(client, "spawn", { prompt: `sub-agent ${i}: say hello`, name: `sub ${i}` });
    handles.push(sp.structured.handle);
  }
  out.spawned = handles;
  out.awaitAll = (await call(client, "await", { handles, mode: "all", timeout_s: 90 })).structured;

  // A sub-agent whose write_file waits for approval: the await asks this client
  // (elicitation), which accepts.
  const note = await call(client, "spawn", {
    prompt: "keep a note",
    backend: process.env.E2E_APPROVAL_BACKEND,
    tools: ["write_file"],
    name: "note keeper",
  });
  out.approval = {
    handle: note.structured.handle,
    result: (await call(client, "await", { handles: [note.structured.handle], timeout_s: 90 })).structured,
    elicitations,
  };

  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stderr.write(`mcp-e2e (${mode}): ${err?.stack ?? err}\n`);
  process.exit(1);
});
