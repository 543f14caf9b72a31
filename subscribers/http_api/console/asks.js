// hookbus console, the Asks page: calls held for a person's answer (GET /api/asks), answered through
// POST /api/asks/ID/allow|deny|edit with the payload hash shown. Uses api, el, button, row, say of console.js.
"use strict";

let asksTimer = null;
let tickTimer = null;
const asksShown = new Map();  // id -> { box, deadline (local ms) }

function startAsks() {
  stopAsks();
  loadAsks();
  asksTimer = setInterval(loadAsks, 1000);
  tickTimer = setInterval(tickAsks, 1000);
}

function stopAsks() {
  if (asksTimer) { clearInterval(asksTimer); asksTimer = null; }
  if (tickTimer) { clearInterval(tickTimer); tickTimer = null; }
}

function pretty(value) { return JSON.stringify(sortedKeys(value), null, 2); }

function sortedKeys(value) {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = sortedKeys(value[key]);
    return out;
  }
  return value;
}

// A line diff (longest common subsequence) of two texts: [["=", line] | ["-", line] | ["+", line]].
function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const n = a.length;
  const m = b.length;
  const common = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push(["=", a[i]]); i++; j++; }
    else if (common[i + 1][j] >= common[i][j + 1]) { out.push(["-", a[i]]); i++; }
    else { out.push(["+", b[j]]); j++; }
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}

function showDiff(node, original, edited) {
  const lines = lineDiff(original, edited).map(([sign, line]) => {
    const span = el("span", (sign === "=" ? "  " : sign + " ") + line + "\n", sign === "+" ? "add" : sign === "-" ? "del" : "");
    return span;
  });
  node.replaceChildren(...lines);
}

function timeLeft(seconds) {
  if (seconds <= 0) return "deadline passed";
  const s = Math.round(seconds);
  return (s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s") + " left";
}

function tickAsks() {
  for (const [, shown] of asksShown) {
    const left = (shown.deadline - Date.now()) / 1000;
    shown.box.querySelector(".ask-left").textContent = timeLeft(left) + " (then " + shown.onTimeout + ")";
  }
}

async function loadAsks() {
  let data;
  try {
    data = await api("GET", "/api/asks");
  } catch (error) {
    say("asks-state", error.message, true);
    return;
  }
  const list = $("asks-list");
  const now = new Set(data.asks.map((a) => a.id));
  for (const [id, shown] of asksShown) {
    if (!now.has(id)) { shown.box.remove(); asksShown.delete(id); }
  }
  for (const ask of data.asks) {
    if (asksShown.has(ask.id)) continue;  // drawn once: what an operator types in it stays
    const box = askBox(ask);
    asksShown.set(ask.id, { box, deadline: Date.now() + ask.left_s * 1000, onTimeout: ask.on_timeout });
    list.appendChild(box);
  }
  let empty = list.querySelector(".asks-empty");
  if (!data.asks.length && !empty) list.appendChild(el("p", "No call is waiting for an answer.", "hint asks-empty"));
  if (data.asks.length && empty) empty.remove();
  tickAsks();
  list.dataset.updated = String(Date.now());
}

function askBox(ask) {
  const box = el("div", null, "ask");
  box.dataset.id = ask.id;
  const head = el("div");
  head.appendChild(el("strong", ask.handler));
  head.appendChild(el("span", "  on " + ask.stage + ", agent " + (ask.agent || "-") + ", session "
    + (ask.session || "-") + ", user " + ask.user + "  "));
  head.appendChild(el("span", "", "ask-left"));
  box.appendChild(head);
  box.appendChild(el("p", ask.reason, "ask-reason-text"));
  const original = pretty(ask.payload);
  box.appendChild(el("pre", original, "ask-payload"));
  box.appendChild(el("div", "id " + ask.id + ", payload sha256 " + ask.payload_sha256, "hint"));

  const actions = el("div", null, "ask-actions");
  actions.appendChild(button("Allow", () => answerAsk(ask, "allow", {}), "allow"));
  const reason = el("input", null, "ask-deny-reason");
  reason.placeholder = "reason (the agent sees it)";
  reason.size = 32;
  actions.appendChild(reason);
  actions.appendChild(button("Deny", () => {
    if (!reason.value.trim()) { say("asks-state", "a deny says why: give a reason", true); return; }
    answerAsk(ask, "deny", { reason: reason.value.trim() });
  }, "deny danger"));
  actions.appendChild(button("Edit…", () => { editor.hidden = !editor.hidden; }, "edit-open"));
  box.appendChild(actions);

  const editor = el("div", null, "ask-editor");
  editor.hidden = true;
  const text = el("textarea", null, "ask-edit");
  text.rows = Math.min(20, original.split("\n").length + 2);
  text.spellcheck = false;
  text.value = original;
  const diff = el("pre", "", "ask-diff diff");
  const check = el("div", "", "hint ask-edit-state");
  text.addEventListener("input", () => {
    try {
      showDiff(diff, original, pretty(JSON.parse(text.value)));
      check.textContent = "";
    } catch (error) {
      check.textContent = "not JSON: " + error.message;
    }
  });
  editor.appendChild(text);
  editor.appendChild(el("div", "Diff against the asked payload:", "hint"));
  editor.appendChild(diff);
  editor.appendChild(check);
  editor.appendChild(button("Let it pass edited", () => {
    let payload;
    try {
      payload = JSON.parse(text.value);
    } catch (error) {
      say("asks-state", "the edit is not JSON: " + error.message, true);
      return;
    }
    if (!payload || typeof payload !== "object" || Array.isArray(payload)) {
      say("asks-state", "the edit is a JSON object (the payload the call goes on with)", true);
      return;
    }
    answerAsk(ask, "edit", { payload });
  }, "edit-send"));
  showDiff(diff, original, original);
  box.appendChild(editor);
  return box;
}

async function answerAsk(ask, kind, body) {
  if (!window.confirm(kind + " " + ask.handler + " on " + ask.stage + " (" + ask.id + ")?")) return;
  try {
    const done = await api("POST", "/api/asks/" + encodeURIComponent(ask.id) + "/" + kind,
      Object.assign({ sha256: ask.payload_sha256 }, body));
    say("asks-state", kind + " " + ask.id + ": done by " + done.by + " after " + done.waited_s + " s");
  } catch (error) {
    say("asks-state", kind + " " + ask.id + ": " + error.message, true);
  }
  await loadAsks();
}
