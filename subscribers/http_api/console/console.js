// hookbus console: plain DOM, no library, no build step. Everything it shows comes from
// this server's API with the bearer token; text from the bus is only ever set as text.
"use strict";

const TOKEN_KEY = "hookbus-token";
const MAX_LIVE_ROWS = 500;
const $ = (id) => document.getElementById(id);

// -- the API

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(method, path, body) {
  const headers = { "Authorization": "Bearer " + token(), "X-Hookbus-Actor": "console" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 401) { logout("the token was refused"); throw new Error("not logged in"); }
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Error((data && data.error) || response.status + " " + response.statusText);
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

// A duration in milliseconds as people read it: 0.049 ms, 12.3 ms, 1,234 ms.
function milliseconds(value) {
  if (value === null || value === undefined || typeof value !== "number") return value;
  if (value < 1) return value.toFixed(3) + " ms";
  if (value < 100) return value.toFixed(1) + " ms";
  return Math.round(value).toLocaleString("en") + " ms";
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.appendChild(cell); else td.textContent = cell === null || cell === undefined ? "-" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}

function button(label, onClick, cls) {
  const b = el("button", label, cls);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function say(id, text, isError) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", Boolean(isError));
}

// -- pages

const pages = { live: showLive, journal: () => {}, middleware: startMiddleware, hooks: loadHooks, status: startStatus,
  asks: () => startAsks() };  // startAsks: asks.js
let current = null;

function show(name) {
  for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== "page-" + name;
  for (const tab of document.querySelectorAll("#tabs button[data-page]")) tab.classList.toggle("active", tab.dataset.page === name);
  if (current === "status" && name !== "status") stopStatus();
  if (current === "middleware" && name !== "middleware") stopMiddleware();
  if (current === "asks" && name !== "asks") stopAsks();
  current = name;
  if (pages[name]) pages[name]();
}

async function login(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  try {
    await api("GET", "/api/status");
  } catch (error) {
    say("login-error", "refused: " + error.message, true);
    return;
  }
  $("token").value = "";
  say("login-error", "");
  $("tabs").hidden = false;
  show("live");
}

function logout(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  stopLive();
  stopStatus();
  stopMiddleware();
  stopAsks();
  $("tabs").hidden = true;
  for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== "page-login";
  if (typeof why === "string") say("login-error", why, true);
}

// -- live: server-sent events read with fetch (EventSource cannot send the token)

let live = null;        // { controller }
let paused = false;
let missedWhilePaused = 0;
let shown = 0;
const byId = new Map();

function showLive() { if (!live) startLive(); }

function stopLive() { if (live) { live.controller.abort(); live = null; } }

function startLive() {
  stopLive();
  const params = new URLSearchParams();
  for (const [key, id] of [["pattern", "live-pattern"], ["session", "live-session"], ["agent", "live-agent"]]) {
    const value = $(id).value.trim();
    if (value) params.set(key, value);
  }
  const controller = new AbortController();
  live = { controller };
  say("live-state", "connecting…");
  readStream("/api/live?" + params, controller).catch((error) => {
    if (!controller.signal.aborted) say("live-state", "live stream ended: " + error.message, true);
  });
}

async function readStream(path, controller) {
  const response = await fetch(path, { headers: { "Authorization": "Bearer " + token() }, signal: controller.signal });
  if (response.status === 401) { logout("the token was refused"); return; }
  if (!response.ok) { const data = await response.json(); throw new Error(data.error || response.statusText); }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the server closed the stream");
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      onMessage(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
}

function onMessage(block) {
  let name = "message";
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return;
  const body = JSON.parse(data);
  if (name === "hello") {
    $("live-rate").textContent = body.rate;
    liveLine = liveWords(body.pattern);
    say("live-state", liveLine);
  } else if (name === "events") {
    addEvents(body);
  } else if (name === "sampled") {
    say("live-state", "sampled: " + body.skipped + " events not shown in the last window (display limited to "
      + $("live-rate").textContent + "/s)");
  }
}

// The live state line in words: never a bare subject pattern such as ">".
let liveLine = "live";

function liveWords(pattern) {
  if (!pattern || pattern === ">") return "live: every event";
  return "live: events matching " + pattern;
}

function addEvents(events) {
  if (paused) { missedWhilePaused += events.length; say("live-state", "paused: " + missedWhilePaused + " events not shown"); return; }
  const rows = $("live-rows");
  const fragment = document.createDocumentFragment();
  for (const event of events) {
    byId.set(event.id, event);
    const tr = row([event.timestamp, event.subject, event.session_id, event.depth, sourceWords(event)]);
    tr.dataset.id = event.id;
    tr.className = "live-event";
    tr.addEventListener("click", () => showEnvelope(event.id));
    fragment.prepend(tr);
    shown += 1;
  }
  rows.prepend(fragment);
  while (rows.children.length > MAX_LIVE_ROWS) {
    byId.delete(rows.lastElementChild.dataset.id);
    rows.lastElementChild.remove();
  }
}

// Who sent an event: the agent (the envelope's source) and the NATS user that vouched for it, where known.
function sourceWords(event) {
  if (event.source && event.publisher && event.publisher !== event.source) return event.source + " (as " + event.publisher + ")";
  return event.source || event.publisher || "unnamed";
}

let selected = null;

function showEnvelope(id) {
  const event = byId.get(id);
  if (!event) return;
  selected = id;
  $("live-envelope").textContent = JSON.stringify(event, null, 2);
  $("live-whole").hidden = !event.payload_whole_on_demand;
}

async function fetchWhole() {
  if (!selected) return;
  try {
    const data = await api("GET", "/api/live/" + encodeURIComponent(selected) + "/payload");
    const event = Object.assign({}, byId.get(selected), { payload: data.payload });
    delete event.payload_whole_on_demand;
    $("live-envelope").textContent = JSON.stringify(event, null, 2);
  } catch (error) {
    $("live-envelope").textContent += "\n\n(whole payload: " + error.message + ")";
  }
}

function togglePause() {
  paused = !paused;
  missedWhilePaused = 0;
  $("live-pause").textContent = paused ? "Resume" : "Pause";
  say("live-state", paused ? "paused: new events are counted, not shown" : liveLine);
}

// -- journal

function journalParams() {
  const params = new URLSearchParams();
  for (const [key, id] of [["kind", "j-kind"], ["point", "j-point"], ["decision", "j-decision"], ["who", "j-who"],
    ["session", "j-session"], ["since", "j-since"], ["until", "j-until"], ["limit", "j-limit"]]) {
    const value = $(id).value.trim();
    if (value) params.set(key, value);
  }
  return params;
}

async function searchJournal(event) {
  if (event) event.preventDefault();
  $("timeline").hidden = true;
  try {
    const data = await api("GET", "/api/journal?" + journalParams());
    const rows = $("j-rows");
    rows.replaceChildren(...data.entries.map((e) => {
      const tr = row([e.received, e.kind, e.point, e.who, e.decision, milliseconds(e.duration_ms), e.session, e.cause]);
      tr.className = "decision-" + e.decision;
      return tr;
    }));
    say("j-state", data.entries.length + " entries (newest first)");
  } catch (error) {
    say("j-state", error.message, true);
  }
}

async function showTimeline() {
  const session = $("j-session").value.trim();
  if (!session) { say("j-state", "give a session for its timeline", true); return; }
  try {
    const data = await api("GET", "/api/journal/timeline?session=" + encodeURIComponent(session));
    $("tl-session").textContent = data.session;
    $("tl-note").textContent = data.recorded ? "events from the recorded history, decisions from the journal"
      : "no recorded history (" + data.note + "): decisions only";
    $("tl-rows").replaceChildren(...data.lines.map((line) => line.type === "event"
      ? row([line.timestamp, line.event + " " + JSON.stringify(line.payload).slice(0, 160), ""])
      : row([line.time, "", line.kind + " " + line.point + " " + line.who + ": " + line.decision + (line.cause ? " (" + line.cause + ")" : "")])));
    $("timeline").hidden = false;
    say("j-state", data.lines.length + " lines");
  } catch (error) {
    say("j-state", error.message, true);
  }
}

// -- middleware

function ago(seconds) { return seconds === null || seconds === undefined ? "-" : seconds.toFixed(1) + "s ago"; }

let mwTimer = null;
let mwShown = null;

function startMiddleware() { stopMiddleware(); mwShown = null; loadMiddleware(); mwTimer = setInterval(loadMiddleware, 2000); }

function stopMiddleware() { if (mwTimer) { clearInterval(mwTimer); mwTimer = null; } }

// Re-drawn only when something but the "last seen" ages changed: buttons stay put between changes.
const withoutAges = (key, value) => (key === "last_seen_s" ? undefined : value);

async function loadMiddleware() {
  try {
    const data = await api("GET", "/api/middleware");
    const snapshot = JSON.stringify(data, withoutAges);
    if (snapshot === mwShown) return;
    mwShown = snapshot;
    const chains = $("mw-chains");
    chains.replaceChildren();
    if (!data.chains.length) chains.appendChild(el("p", "No middleware handler is declared on this bus.", "hint"));
    for (const chain of data.chains) {
      chains.appendChild(el("h3", chain.stage + (chain.broken ? "  BROKEN: " + chain.broken : "")));
      const table = el("table");
      table.appendChild(row(["#", "handler", "state", "fail mode", "timeout", "instances", "last seen", ""]));
      table.firstChild.className = "head";
      chain.links.forEach((l, i) => table.appendChild(linkRow(i + 1, l, button("Disable", () => act("disable", l.name), "disable"))));
      for (const l of chain.disabled) table.appendChild(linkRow("off", l, button("Enable", () => act("enable", l.name), "enable")));
      for (const l of chain.holds) table.appendChild(linkRow("!", l, button("Detach", () => act("detach", l.name), "danger")));
      for (const l of chain.elsewhere || []) table.appendChild(linkRow("·", l, null));
      for (const l of chain.waiting) table.appendChild(linkRow("-", l, null));
      for (const l of chain.rejected || []) table.appendChild(linkRow("x", l, null));
      chains.appendChild(table);
    }
    const approvals = $("mw-approvals");
    approvals.replaceChildren();
    if (!data.approvals.length) approvals.appendChild(el("p", "No handler is waiting for approval.", "hint"));
    for (const w of data.approvals) {
      const box = el("div", null, "approval");
      box.dataset.name = w.name;
      box.appendChild(el("strong", w.name));
      box.appendChild(el("span", "  " + w.state + " on " + w.stage + ", " + (w.fail_closed ? "fail-closed" : "fail-open")));
      box.appendChild(el("pre", w.diff.join("\n"), "diff"));
      box.appendChild(button("Approve", () => act("approve", w.name), "approve"));
      box.appendChild(button("Reject", () => act("reject", w.name), "reject danger"));
      approvals.appendChild(box);
    }
  } catch (error) {
    say("mw-state", error.message, true);
  }
}

// A handler's trust in words, as the kernel that runs it sees it: managed (by whom), approved (by whom),
// trust-new (approved on first sight), waiting (why), gone (why), disabled, rejected.
function trustWords(l) {
  const word = l.shown || l.state;
  if (l.hold) return word + ": " + l.hold;
  if (word === "managed" && l.by) {
    return "managed by " + l.by + (l.by.startsWith("this console") ? "" : " (runs there; other kernels wait for an approval)");
  }
  if (word === "waiting") return "waiting for approval: " + (l.by || l.trust);
  return l.by ? word + " (" + l.by + ")" : word;
}

function linkRow(position, l, action) {
  const state = trustWords(l) + (l.agents ? " (only for " + l.agents.join(", ") + ")" : "");
  const tr = row([position, l.name, state, l.fail_closed ? "fail-closed" : "fail-open",
    l.timeout + "s", l.instances, ago(l.last_seen_s), action || ""]);
  tr.dataset.name = l.name;
  tr.className = "link state-" + l.state;
  return tr;
}

async function act(what, name) {
  if (!window.confirm(what + " " + name + "?")) return;
  let outcome;
  try {
    await api("POST", "/api/middleware/" + what, { name });
    outcome = [what + " " + name + ": done", false];
  } catch (error) {
    outcome = [what + " " + name + ": " + error.message, true];
  }
  await loadMiddleware();
  say("mw-state", ...outcome);
}

// -- hooks

let editing = null;
const NEW_HOOK = { event: "tool_call", action: { command: "./hook.sh", args: [], timeout_ms: 5000 }, enabled: true };

async function loadHooks() {
  try {
    const [hooks, metrics, runs] = await Promise.all([api("GET", "/api/hooks"), api("GET", "/api/hooks/metrics"),
      api("GET", "/api/journal?kind=shell_hook&limit=20").catch(() => ({ entries: [] }))]);
    $("hooks-rows").replaceChildren(...hooks.hooks.map((h) => {
      const tr = row([h.id, h.event, h.command, h.enabled ? "on" : "off",
        el("span")]);
      const actions = tr.lastChild;
      actions.appendChild(button(h.enabled ? "Disable" : "Enable", () => toggleHook(h), "toggle"));
      actions.appendChild(button("Edit", () => editHook(h)));
      tr.dataset.id = h.id;
      tr.className = h.enabled ? "hook" : "hook off";
      return tr;
    }));
    $("hook-metrics").replaceChildren(...metrics.metrics.map((m) =>
      row([m.hook, m.point, m.calls, m.failures, m.timeouts, m.refusals, milliseconds(m.mean_ms), m.last_error])));
    $("hook-runs").replaceChildren(...runs.entries.map((e) => {
      const box = el("div", null, "run");
      box.appendChild(el("div", e.received + "  " + e.who + " on " + e.point + ": " + e.decision + (e.cause ? " (" + e.cause + ")" : "")));
      if (e.stdout) box.appendChild(el("pre", e.stdout, "stdout"));
      if (e.stderr) box.appendChild(el("pre", e.stderr, "stderr"));
      return box;
    }));
    if (!editing && !$("hook-json").value) newHook();
    await loadHandlers();
  } catch (error) {
    say("hooks-state", error.message, true);
  }
}

// Plugins and records, read-only: plugins change with their folders, records through hookbus records / approve.
async function loadHandlers() {
  const data = await api("GET", "/api/handlers");
  $("plugin-rows").replaceChildren(...data.plugins.map((p) => p.error
    ? row([p.name, "-", "refused: " + p.error, "-"])
    : row([p.name, p.version, p.events.join(", ") || "no events", p.memory_mb + " MiB, " + p.timeout_ms + " ms"])));
  $("record-rows").replaceChildren(...data.records.map((r) => {
    const tr = r.error ? row([r.name, "-", "malformed: " + r.error, "-"])
      : row([r.name, r.stage, r.state, r.enabled ? "on" : "off"]);
    tr.dataset.name = r.name;
    return tr;
  }));
  if (data.records_error) say("hooks-state", "records: " + data.records_error, true);
}

async function toggleHook(hook) {
  if (!window.confirm((hook.enabled ? "Disable " : "Enable ") + hook.id + "?")) return;
  try {
    const data = await api("PATCH", "/api/hooks/" + encodeURIComponent(hook.id) + "/toggle");
    say("hooks-state", hook.id + (data.enabled ? " enabled" : " disabled"));
  } catch (error) {
    say("hooks-state", error.message, true);
  }
  await loadHooks();
}

function editHook(hook) {
  editing = hook.id;
  $("hook-form-title").textContent = "Edit " + hook.id;
  $("hook-json").value = JSON.stringify({ event: hook.event, action: hook.action, enabled: hook.enabled }, null, 2);
}

function newHook() {
  editing = null;
  $("hook-form-title").textContent = "New hook";
  $("hook-json").value = JSON.stringify(NEW_HOOK, null, 2);
}

async function saveHook() {
  let body;
  try {
    body = JSON.parse($("hook-json").value);
  } catch (error) {
    say("hooks-state", "not JSON: " + error.message, true);
    return;
  }
  try {
    const saved = editing ? await api("PUT", "/api/hooks/" + encodeURIComponent(editing), body) : await api("POST", "/api/hooks", body);
    say("hooks-state", "saved " + saved.id);
    editing = saved.id;
    $("hook-form-title").textContent = "Edit " + saved.id;
  } catch (error) {
    say("hooks-state", error.message, true);
    return;
  }
  await loadHooks();
}

// -- status

let statusTimer = null;

function startStatus() { stopStatus(); loadStatus(); statusTimer = setInterval(loadStatus, 2000); }

function stopStatus() { if (statusTimer) { clearInterval(statusTimer); statusTimer = null; } }

const SECTIONS = { bus: "buses (hookbus up)", agent: "agents", worker: "workers", trigger_engine: "trigger engines", journal_sink: "journal sinks",
  kernel: "kernels' own trust (managed handlers, trust-new)" };

async function loadStatus() {
  try {
    const data = await api("GET", "/api/status");
    const body = $("status-body");
    body.replaceChildren(el("p", "on " + data.nats.join(", ")));
    for (const [kind, heading] of Object.entries(SECTIONS)) {
      body.appendChild(el("h3", heading));
      const table = el("table", null, "status-" + kind);
      for (const r of data[kind] || []) {
        table.appendChild(row([r.name, "hookbus " + r.version, r.process, r.where, ago(r.last_seen_s) + (r.silent ? " SILENT" : ""), r.detail]));
      }
      if (!(data[kind] || []).length) table.appendChild(row(["none"]));
      body.appendChild(table);
    }
    body.appendChild(el("h3", "modules"));
    const modules = el("table", null, "status-modules");
    for (const m of data.modules) {
      modules.appendChild(row([m.name, m.instances.length + " instance(s)", ""]));
      for (const h of m.handlers) modules.appendChild(row(["", h.name + " on " + h.stage, h.runs ? h.state : h.state + ": waiting for approval"]));
    }
    if (!data.modules.length) modules.appendChild(row(["none"]));
    body.appendChild(modules);
    for (const problem of data.problems) body.appendChild(el("p", "(ignored: " + problem + ")", "hint"));
    body.dataset.updated = String(Date.now());
  } catch (error) {
    $("status-body").replaceChildren(el("p", error.message, "error"));
  }
}

// -- start

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout());
  for (const tab of document.querySelectorAll("#tabs button[data-page]")) tab.addEventListener("click", () => show(tab.dataset.page));
  $("live-form").addEventListener("submit", (event) => { event.preventDefault(); startLive(); });
  $("live-pause").addEventListener("click", togglePause);
  $("live-whole").addEventListener("click", fetchWhole);
  $("journal-form").addEventListener("submit", searchJournal);
  $("j-timeline").addEventListener("click", showTimeline);
  $("hook-save").addEventListener("click", saveHook);
  $("hook-new").addEventListener("click", newHook);
  if (token()) {
    api("GET", "/api/status").then(() => { $("tabs").hidden = false; show("live"); }).catch(() => logout());
  }
});
