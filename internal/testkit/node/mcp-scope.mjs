// Drives luft's MCP door with the official MCP TypeScript SDK client to check what a
// session may reach (cmd/luft's TestMCPTypeScriptSDKScope): paths confined to the
// client's MCP roots (asked with roots/list, changed with notifications/roots/list_changed),
// a 40 MiB argument answered with a JSON-RPC error on a session that goes on, and another
// session's run that this one may read but not cancel. Prints one JSON object on stdout.
//
//   node mcp-scope.mjs stdio LUFT_BINARY ARG...   spawns `LUFT_BINARY ARG...` (luft mcp serve), twice
//   node mcp-scope.mjs http URL                   streamable HTTP; the bearer token in LUFT_TOKEN
//
// Inputs from the environment: E2E_ROOT (the folder declared as the only root), E2E_INSIDE
// (a .lua file in it), E2E_OUTSIDE (a .lua file outside it), E2E_ENV (a .env file in it),
// E2E_HELD (a workflow that runs for a while).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { pathToFileURL } from "node:url";

const [mode, target, ...rest] = process.argv.slice(2);
const env = process.env;

function transportFor() {
  if (mode === "stdio") {
    return new StdioClientTransport({ command: target, args: rest, env: { ...env }, stderr: "inherit" });
  }
  const headers = { Authorization: `Bearer ${env.LUFT_TOKEN ?? ""}` };
  return new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
}

function step(what) {
  process.stderr.write(`mcp-scope (${mode}): ${what}\n`);
}

async function connect(name, roots) {
  const client = new Client({ name, version: "1.0.0" }, { capabilities: roots ? { roots: { listChanged: true } } : {} });
  const state = { roots, asked: 0 };
  if (roots) {
    client.setRequestHandler(ListRootsRequestSchema, async () => {
      state.asked++;
      return { roots: state.roots.map((d) => ({ uri: pathToFileURL(d).href, name: d })) };
    });
  }
  await client.connect(transportFor());
  return { client, state };
}

// call answers {isError, text, structured} or {rpcError} for a JSON-RPC error.
async function call(client, name, args) {
  step(`call ${name} ${JSON.stringify(args).slice(0, 100)}`);
  try {
    const res = await client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: 60_000 });
    const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
    return { isError: Boolean(res.isError), text, structured: res.structuredContent ?? null };
  } catch (err) {
    return { rpcError: { code: err?.code ?? null, message: String(err?.message ?? err) } };
  }
}

async function main() {
  const out = { mode };
  const a = await connect("luft-scope-a", [env.E2E_ROOT]);
  out.list = await call(a.client, "workflow_list_files", {});
  out.listSlash = await call(a.client, "workflow_list_files", { dir: "/" });
  out.inside = await call(a.client, "workflow_execute", { path: env.E2E_INSIDE });
  if (out.inside.structured) {
    out.insideAwait = await call(a.client, "workflow_await", { run_id: out.inside.structured.run_id, timeout_s: 60 });
  }
  out.outside = await call(a.client, "workflow_execute", { path: env.E2E_OUTSIDE });
  out.dotenv = await call(a.client, "workflow_execute", { path: env.E2E_ENV });
  out.validateEnv = await call(a.client, "workflow_validate", { path: env.E2E_ENV });

  // The roots change: the client says so, and the next call sees the new ones.
  a.state.roots = [env.E2E_OTHER_ROOT];
  await a.client.sendRootsListChanged();
  out.afterChange = await call(a.client, "workflow_execute", { path: env.E2E_INSIDE });
  out.rootsAsked = a.state.asked;

  // 40 MiB in one argument: a JSON-RPC error, and the session goes on.
  out.huge = await call(a.client, "workflow_validate", { script: "-".repeat(40 << 20) });
  out.afterHuge = await call(a.client, "workflow_list_runs", { limit: 1 });

  // Another session (another luft mcp serve over stdio) reads a's run but may not cancel it.
  const held = await call(a.client, "workflow_execute", { script: env.E2E_HELD });
  const b = await connect("luft-scope-b", null);
  out.otherStatus = await call(b.client, "workflow_status", { run_id: held.structured.run_id });
  out.otherCancel = await call(b.client, "workflow_cancel", { run_id: held.structured.run_id });
  out.ownCancel = await call(a.client, "workflow_cancel", { run_id: held.structured.run_id });

  await b.client.close();
  await a.client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stderr.write(`mcp-scope (${mode}): ${err?.stack ?? err}\n`);
  process.exit(1);
});
