// The luft dashboard: plain JavaScript over the daemon's JSON API, no build step.
// The bearer token comes from the link's #token=… (never sent to the server as part
// of a URL) or the form, and is kept in sessionStorage for this tab only.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("luft-token") || "";
let timer = null;
let stream = null;

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

async function api(path, opts = {}) {
  const res = await fetch(path, { ...opts, headers: { Authorization: "Bearer " + token, ...(opts.headers || {}) } });
  if (res.status === 401) { showLogin("the token was refused"); throw new Error("unauthorized"); }
  const body = await res.text();
  if (!res.ok) {
    let msg = body;
    try { msg = JSON.parse(body).error; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return body ? JSON.parse(body) : null;
}

function show(id) {
  for (const s of ["login", "runs", "run"]) $(s).hidden = s !== id;
}

function showLogin(msg) {
  show("login");
  $("login-error").textContent = msg || "";
}

function cell(label, html, cls) {
  return `<td data-l="${esc(label)}"${cls ? ` class="${cls}"` : ""}>${html}</td>`;
}

// counts is a run's agent counts; cancelled calls are counted apart from failed ones.
function counts(a, sep = ", ") {
  return [`${a.ok} ok`, `${a.failed} failed`, `${a.cached} cached`].concat(a.cancelled ? [`${a.cancelled} cancelled`] : []).join(sep);
}
function when(ts) { return ts ? new Date(ts).toLocaleString() : ""; }
// owner is the node that drives a running run as luft status names it: "N", or "N, pid P"
// for a run its process holds rather than a lease (a CLI command's on SQLite).
function owner(r) {
  if (!r.node) return "";
  return !r.lease_until && r.pid ? `${r.node}, pid ${r.pid}` : r.node;
}

// ---- runs list ----
let cursor = "";
async function loadRuns(append) {
  const q = new URLSearchParams({ limit: "50" });
  if ($("f-status").value) q.set("status", $("f-status").value);
  if ($("f-workflow").value) q.set("workflow", $("f-workflow").value);
  if (append && cursor) q.set("cursor", cursor);
  const page = await api("/api/runs?" + q);
  const rows = page.runs.map((r) => "<tr>" +
    cell("run", `<a href="#/runs/${esc(r.id)}">${esc(r.id.slice(0, 13))}</a>`) +
    cell("status", esc(r.status), "status s-" + esc(r.status)) +
    cell("workflow", esc(r.workflow)) +
    cell("agents", counts(r.agents, " · ")) +
    cell("tokens", String(r.tokens)) +
    cell("cost", "$" + r.cost.toFixed(4)) +
    cell("node", esc(r.node || ""), "node") + // as luft list's NODE column
    cell("started", esc(when(r.created_at))) + "</tr>").join("");
  $("runs-body").innerHTML = append ? $("runs-body").innerHTML + rows : rows || `<tr><td colspan="8" class="muted">no runs</td></tr>`;
  cursor = page.next_cursor || "";
  $("more").hidden = !cursor;
}

async function loadDaemon() {
  const d = await api("/api/daemon");
  $("daemon").textContent = `daemon pid ${d.pid} · ${d.version} · up ${Math.round(d.uptime_s)}s · ${d.runs_live} running, ${d.runs_hosted} hosted`;
  const num = (v) => (v < 0 ? "?" : Math.round(v));
  $("lanes-body").innerHTML = d.lanes.map((l) => "<tr>" +
    cell("lane", esc(l.lane)) + cell("running", String(l.running)) +
    cell("queued", `${l.queued_interactive} + ${l.queued_batch}`) +
    cell("requests left", `${num(l.requests_left)} / ${num(l.request_limit)}`) +
    cell("tokens left", `${num(l.tokens_left)} / ${num(l.token_limit)}`) +
    cell("waits", String(l.waits)) + cell("429s", String(l.rate_limited)) + cell("circuit", esc(l.circuit)) + "</tr>").join("") ||
    `<tr><td colspan="8" class="muted">no lane used yet</td></tr>`;
}

async function listPage() {
  show("runs");
  await Promise.all([loadRuns(false), loadDaemon()]);
  timer = setInterval(() => { loadRuns(false).catch(() => {}); loadDaemon().catch(() => {}); }, 3000);
}

// ---- one run ----
let agents = new Map();
let current = ""; // the run the page shows: answers about any other are stale
let plan = [];    // meta.phases of the run's plan event: the phases it means to have
let phases = [];  // the phases it has started (GET /api/runs/{id})
let proxyIdle = null; // a proxy conversation's idle timeout (ms), from its run_started
let workflow = "";

function renderAgents() {
  $("agents-body").innerHTML = [...agents.values()].map((a) => "<tr>" +
    cell("call", esc(a.name ? `${a.key} (${a.name})` : a.key)) +
    cell("state", esc(a.state) + (a.why ? ` <span class="muted">${esc(a.why)}</span>` : ""), "status s-" + esc(a.state)) +
    cell("backend", esc([a.backend, a.model].filter(Boolean).join(" / "))) +
    cell("tokens", a.tokens == null ? "" : String(a.tokens)) +
    cell("latency", latency(a)) + "</tr>").join("") ||
    `<tr><td colspan="5" class="muted">no agents yet</td></tr>`;
}

// latency is an agent's own run time, with what it waited for (a slot, a person) apart.
function latency(a) {
  if (a.ms == null) return "";
  const waits = [];
  if (a.queued >= 100) waits.push(`queued ${a.queued} ms`);
  if (a.approval >= 100) waits.push(`approval ${a.approval} ms`);
  return esc(`${a.run} ms`) + (waits.length ? ` <span class="muted">(${esc(waits.join(", "))})</span>` : "");
}

function applyEvent(ev) {
  if (ev.run_id !== current) return;
  const key = ev.call_key;
  const a = key ? agents.get(key) || { key } : null;
  switch (ev.type) {
    case "agent_queued": a.state = "queued"; a.why = `lane ${ev.lane}, position ${ev.position}`; break;
    case "rate_limit": if (a) { a.state = "queued"; a.why = `${ev.action} ${ev.wait_ms} ms: ${ev.reason || "rate limit"}`; } break;
    case "agent_started": Object.assign(a, { state: "running", why: "", name: ev.name, backend: ev.backend, model: ev.model }); break;
    case "agent_retry": a.why = "retrying"; break;
    case "approval_requested": Object.assign(a, { state: "awaiting_approval", why: `${ev.tool} waits for allow or decline` }); break;
    case "approval_decided": if (a.state === "awaiting_approval") Object.assign(a, { state: "running", why: ev.allow ? "allowed" : "declined" }); break;
    case "agent_done": {
      // run_ms leaves out the waits for a slot and a person; a proxy turn has wait_ms.
      const queued = ev.queued_ms ?? ev.wait_ms ?? 0, approval = ev.approval_ms ?? 0;
      Object.assign(a, { state: ev.cached ? "cached" : ev.status, why: ev.error || "", tokens: ev.tokens, ms: ev.elapsed_ms,
        run: ev.run_ms ?? Math.max(ev.elapsed_ms - queued - approval, 0), queued, approval, model: ev.model || a.model });
      break;
    }
    case "plan": plan = Array.isArray(ev.phases) ? ev.phases : []; renderPhases(); break;
    case "run_started": proxyIdle = ev.args && typeof ev.args.idle_timeout_ms === "number" ? ev.args.idle_timeout_ms : null; renderProxy(); break;
  }
  if (a) { agents.set(key, a); renderAgents(); }
  const li = document.createElement("li");
  const { seq, type, ts, run_id, ...rest } = ev;
  li.innerHTML = `<span class="muted">${seq}</span> <span class="t">${esc(type)}</span> ${esc(JSON.stringify(rest))}`;
  $("events").appendChild(li);
  if (type === "run_done" || type === "phase_started" || type === "phase_done" || type === "approval_requested" ||
    type === "approval_decided") refreshRun(run_id).catch(() => {});
  else if (type === "agent_done") refreshSoon();
}

// refreshSoon brings the shown run's header (its live counts and tokens) up to date after
// a call ends, at most every half second however many calls end. It refreshes the run
// shown when it fires, which may be another than the one whose call ended.
let refreshTimer = null;
function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; if (current) refreshRun(current).catch(() => {}); }, 500);
}

// loadPlan reads the run's plan and run_started events once, whatever types the event
// list below is filtered to.
async function loadPlan(id) {
  const res = await fetch(`/api/runs/${id}/events?types=plan,run_started`, { headers: { Authorization: "Bearer " + token } });
  if (!res.ok || id !== current) return;
  for (const line of (await res.text()).split("\n")) {
    if (!line.trim()) continue;
    const ev = JSON.parse(line);
    if (ev.type === "plan") plan = Array.isArray(ev.phases) ? ev.phases : [];
    if (ev.type === "run_started") proxyIdle = ev.args && typeof ev.args.idle_timeout_ms === "number" ? ev.args.idle_timeout_ms : null;
  }
  if (id === current) { renderPhases(); renderProxy(); }
}

// follow reads the run's events as Server-Sent Events over fetch (EventSource cannot send
// the Authorization header), resuming after the last seq if the connection drops.
async function follow(id, types) {
  const ctl = new AbortController();
  stream = ctl;
  let last = 0;
  for (let tries = 0; tries < 20 && !ctl.signal.aborted; tries++) {
    const q = types ? "?types=" + encodeURIComponent(types) : "";
    let res;
    try {
      res = await fetch(`/api/runs/${id}/events${q}`, { signal: ctl.signal,
        headers: { Authorization: "Bearer " + token, Accept: "text/event-stream", ...(last ? { "Last-Event-ID": String(last) } : {}) } });
    } catch (_) { return; }
    if (!res.ok) return;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    let ended = false;
    for (;;) {
      let chunk;
      try { chunk = await reader.read(); } catch (_) { break; }
      if (chunk.done) { ended = true; break; }
      buf += dec.decode(chunk.value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i); buf = buf.slice(i + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (!data) continue;
        try { const ev = JSON.parse(data); last = ev.seq || last; applyEvent(ev); } catch (_) { /* an error line */ }
      }
    }
    if (ended) return; // the run's stream is over
  }
}

async function refreshRun(id) {
  const r = await api(`/api/runs/${id}`);
  if (id !== current && r.id !== current) return;
  current = id = r.id; // the address may hold an id prefix
  $("run-title").textContent = `run ${r.id.slice(0, 13)}`;
  $("run-status").textContent = r.status;
  $("run-status").className = "status s-" + r.status;
  $("run-meta").textContent = `${r.workflow} · attempt ${r.attempt} · ${counts(r.agents)} · ${r.tokens} tokens · $${r.cost.toFixed(4)} · started ${when(r.created_at)}` + (r.error ? ` · ${r.error}` : "");
  // The owner node: the one that drives it while it runs, else the one that drove it last.
  const by = owner(r);
  $("run-node").textContent = by ? (["running", "awaiting_approval", "idle"].includes(r.status) ? `node ${by}` : `last on node ${r.node}`) : "";
  $("run-node").hidden = !by;
  $("cancel").hidden = !["running", "awaiting_approval", "idle"].includes(r.status);
  renderApprovals(r.pending_approvals || []);
  phases = r.phases;
  workflow = r.workflow;
  renderPhases();
  renderProxy();
  if (r.has_report) {
    const res = await fetch(`/api/runs/${id}/report`, { headers: { Authorization: "Bearer " + token } });
    const report = await res.json();
    if (id === current) renderReport(report);
  }
}

// renderPhases shows the phases the run started and, after them, those its plan
// (meta.phases) names that have not started yet. planned says what was planned of each:
// its agents when phase() gave a number, else whether the plan named it.
function renderPhases() {
  const inPlan = new Map(plan.filter((p) => p && p.label).map((p) => [p.label, p]));
  const started = new Set(phases.map((p) => p.label));
  const planned = (p) => p.planned ? `${p.planned} agents` : inPlan.has(p.label) ? (inPlan.get(p.label).dynamic ? "in plan, repeats" : "in plan") : "not in plan";
  const rows = phases.map((p) => "<tr>" +
    cell("phase", esc(p.label) + (p.description ? ` <span class="muted">${esc(p.description)}</span>` : "")) +
    cell("status", esc(p.status), "status") + cell("planned", esc(planned(p))) +
    cell("done", String(p.ok)) + cell("failed", String(p.failed) + (p.cancelled ? ` <span class="muted">+${p.cancelled} cancelled</span>` : "")) + "</tr>");
  for (const p of plan) {
    if (!p || !p.label || started.has(p.label)) continue;
    const desc = p.description || p.detail || "";
    rows.push("<tr>" + cell("phase", esc(p.label) + (desc ? ` <span class="muted">${esc(desc)}</span>` : "")) +
      cell("status", "not started", "status muted") + cell("planned", esc(p.dynamic ? "in plan, repeats" : "in plan")) +
      cell("done", "") + cell("failed", "") + "</tr>");
  }
  $("phases-body").innerHTML = rows.join("") || `<tr><td colspan="5" class="muted">no phases</td></tr>`;
}

// renderProxy says what a proxy run is: a client's conversation through luft's proxy,
// one agent per turn, with no phases or report, that ends by itself once idle.
function renderProxy() {
  const isProxy = workflow.startsWith("proxy:");
  $("proxy-note").hidden = !isProxy;
  $("phases-section").hidden = isProxy;
  $("report-section").hidden = isProxy;
  if (!isProxy) return;
  const mins = proxyIdle ? Math.round(proxyIdle / 60000) : 15;
  $("proxy-note").textContent = `A conversation through luft's proxy: each turn the client sends is one agent below. ` +
    `It has no phases and no report, and ends by itself after ${mins} minute${mins === 1 ? "" : "s"} without a turn.`;
}

// renderApprovals lists the tool calls the run waits on, each with allow and decline.
function renderApprovals(pending) {
  $("approvals").hidden = pending.length === 0;
  $("approvals-list").innerHTML = pending.map((p) => `<li><code>${esc(p.tool)}</code> <span class="muted">${esc(p.call_key)} · ${esc(p.id)}</span>` +
    `<pre>${esc(p.arguments)}</pre><button data-a="${esc(p.id)}" data-allow="true">allow</button> ` +
    `<button class="danger" data-a="${esc(p.id)}" data-allow="false">decline</button></li>`).join("");
  for (const b of $("approvals-list").querySelectorAll("button")) {
    b.onclick = async () => {
      for (const x of $("approvals-list").querySelectorAll(`button[data-a="${CSS.escape(b.dataset.a)}"]`)) x.disabled = true;
      try {
        await api(`/api/runs/${current}/approve`, { method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ approval_id: b.dataset.a, allow: b.dataset.allow === "true" }) });
      } catch (e) { alert(e.message); }
      refreshRun(current).catch(() => {});
    };
  }
}

// renderReport shows a string or an object's markdown field as markdown, anything else
// as a JSON tree.
function renderReport(v) {
  const el = $("report");
  el.classList.remove("muted");
  if (typeof v === "string") { el.innerHTML = markdown(v); return; }
  if (v && typeof v === "object" && typeof v.markdown === "string") { el.innerHTML = markdown(v.markdown); return; }
  el.innerHTML = `<div class="tree">${tree(v)}</div>`;
}

function tree(v) {
  if (v === null || typeof v !== "object") return `<code>${esc(JSON.stringify(v))}</code>`;
  const entries = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
  const label = Array.isArray(v) ? `[${entries.length}]` : `{${entries.length}}`;
  return `<details open><summary>${label}</summary>` + entries.map(([k, x]) =>
    `<div><span class="muted">${esc(k)}:</span> ${tree(x)}</div>`).join("") + "</details>";
}

// markdown renders the common subset (headings, lists, tables, code, emphasis, links) with
// every piece of text escaped first, so a report cannot inject markup.
function markdown(src) {
  const out = [];
  let list = null;
  let code = null;
  const inline = (s) => esc(s)
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/\*([^*]+)\*/g, "<em>$1</em>")
    .replace(/\[([^\]]+)\]\((https?:\/\/[^)\s]+)\)/g, '<a href="$2" rel="noopener noreferrer">$1</a>');
  const close = () => { if (list) { out.push(`</${list}>`); list = null; } };
  // A table is a row of cells and a delimiter row (| --- | :-: |), then rows until a line
  // that is not one. Cells are escaped like any text.
  const cells = (l) => { let t = l.trim(); if (t.startsWith("|")) t = t.slice(1); if (t.endsWith("|") && !t.endsWith("\\|")) t = t.slice(0, -1);
    return t.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|")); };
  const isDelim = (l) => /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(l) && l.includes("-");
  const lines = src.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (code === null && line.includes("|") && i + 1 < lines.length && isDelim(lines[i + 1]) && cells(line).length === cells(lines[i + 1]).length) {
      close();
      const align = cells(lines[i + 1]).map((c) => c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : "");
      const td = (tag, c, k) => `<${tag}${align[k] ? ` class="a-${align[k]}"` : ""}>${inline(c)}</${tag}>`;
      const head = cells(line).map((c, k) => td("th", c, k)).join("");
      const body = [];
      for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim() !== ""; i++) {
        const row = cells(lines[i]);
        body.push("<tr>" + align.map((_, k) => td("td", row[k] ?? "", k)).join("") + "</tr>");
      }
      i--;
      out.push(`<table><thead><tr>${head}</tr></thead><tbody>${body.join("")}</tbody></table>`);
      continue;
    }
    if (code !== null) {
      if (line.startsWith("```")) { out.push(`<pre><code>${esc(code.join("\n"))}</code></pre>`); code = null; } else code.push(line);
      continue;
    }
    let m;
    if (line.startsWith("```")) { close(); code = []; }
    else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) { close(); out.push(`<h${m[1].length + 2}>${inline(m[2])}</h${m[1].length + 2}>`); }
    else if ((m = line.match(/^\s*[-*]\s+(.*)$/))) { if (list !== "ul") { close(); out.push("<ul>"); list = "ul"; } out.push(`<li>${inline(m[1])}</li>`); }
    else if ((m = line.match(/^\s*\d+[.)]\s+(.*)$/))) { if (list !== "ol") { close(); out.push("<ol>"); list = "ol"; } out.push(`<li>${inline(m[1])}</li>`); }
    else if (line.trim() === "") { close(); }
    else { close(); out.push(`<p>${inline(line)}</p>`); }
  }
  if (code !== null) out.push(`<pre><code>${esc(code.join("\n"))}</code></pre>`);
  close();
  return out.join("\n");
}

async function runPage(id) {
  current = id;
  show("run");
  agents = new Map();
  plan = []; phases = []; proxyIdle = null; workflow = "";
  renderAgents();
  $("events").innerHTML = "";
  $("report").innerHTML = "no report yet";
  $("report").classList.add("muted");
  $("cancel").onclick = async () => {
    $("cancel").disabled = true;
    try { await api(`/api/runs/${current}/cancel`, { method: "POST" }); } catch (e) { alert(e.message); }
    $("cancel").disabled = false;
  };
  $("f-types").onchange = () => { if (stream) stream.abort(); $("events").innerHTML = ""; follow(current, $("f-types").value.trim()); };
  await refreshRun(id);
  id = current;
  loadPlan(id).catch(() => {});
  follow(id, $("f-types").value.trim());
}

// ---- routing ----
async function route() {
  clearInterval(timer);
  current = "";
  if (stream) { stream.abort(); stream = null; }
  const h = location.hash;
  const m = h.match(/token=([^&]+)/);
  if (m) {
    token = decodeURIComponent(m[1]);
    sessionStorage.setItem("luft-token", token);
    history.replaceState(null, "", location.pathname + "#/");
  }
  if (!token) { showLogin(); return; }
  try {
    const run = location.hash.match(/^#\/runs\/([0-9a-f-]+)/);
    if (run) await runPage(run[1]); else await listPage();
  } catch (e) {
    if (e.message !== "unauthorized") $("daemon").textContent = "error: " + e.message;
  }
}

$("login-form").onsubmit = (e) => {
  e.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("luft-token", token);
  route();
};
$("f-status").onchange = () => loadRuns(false);
$("f-workflow").oninput = () => loadRuns(false);
$("more").onclick = () => loadRuns(true);
window.addEventListener("hashchange", route);
route();
