// The page of `mam serve`: the fleet as `mam top` shows it, kept live by the server's event stream, with top's
// verbs (peek, send, answer, stop, restore) as buttons. Plain script, no framework, no build step.
// Every string that comes from an agent or a multiplexer is hostile: it only ever reaches the page as
// textContent or an attribute's value, never as markup.
"use strict";

const FIRST = ["blocked", "done"]; // mam.live.topmodel.FIRST_STATES: the agents that need a person come first
const LOG_MAX = 50; // changes kept in the log

let session = { csrf: null, read_only: true, user: "" };
let fleet = { rows: [], servers: [], at: 0 };
let skew = 0; // the server's clock less ours, in seconds, from each fleet document's `at`
let stream = null;
const trs = new Map(); // an agent's key -> its table row, kept between updates so focus and clicks survive them

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "title" || k === "type" || k === "colspan" || k === "scope") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) node.append(child);
  return node;
}

// A short age as `mam top` says it (topmodel.ago): 5s, 3m, 2h, 4d; "-" when unknown.
function ago(then, now) {
  if (then === null || then === undefined) return "-";
  const seconds = Math.max(0, Math.floor(now - then));
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)}${unit}`;
  }
  return `${seconds}s`;
}

const now = () => Date.now() / 1000 + skew;
const keyOf = (r) => [r.backend, r.server, r.host || "", r.name].join("\u001f");
const ended = (r) => r.end !== null && r.end !== undefined && r.end !== false;

// blocked first, then done, then the rest, then the ended ones; by name within each (topmodel.rank).
function rank(r) {
  if (ended(r)) return FIRST.length + 1;
  const i = FIRST.indexOf(r.state);
  return i >= 0 ? i : FIRST.length;
}

function ordered(rows) {
  return [...rows].sort((a, b) => rank(a) - rank(b) || cmp(a.name, b.name) || cmp(a.backend, b.backend)
    || cmp(a.server, b.server) || cmp(a.host || "", b.host || ""));
}

const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function where(r) {
  return `${r.backend} · ${r.server} · ${r.host || "local"}`;
}

// ---- talking to the server ----

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 401) {
    location.assign("/login");
    throw new Error("log in first");
  }
  let doc = null;
  try { doc = await response.json(); } catch { doc = null; }
  if (!response.ok) throw new Error((doc && doc.error) || `${response.status} ${response.statusText}`);
  return doc;
}

async function post(url, body) {
  const response = await fetch(url, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": session.csrf || "", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  let doc = null;
  try { doc = await response.json(); } catch { doc = null; }
  if (response.status === 401) location.assign("/login");
  if (!response.ok) throw new Error((doc && doc.error) || `${response.status} ${response.statusText}`);
  return doc;
}

function agentUrl(r, verb) {
  const q = new URLSearchParams({ server: r.server, backend: r.backend });
  if (r.host) q.set("host", r.host);
  return `/api/agents/${encodeURIComponent(r.name)}/${verb}?${q}`;
}

// ---- the bottom line: what the last action said ----

let saidTimer = 0;
function say(text, bad = false) {
  const p = $("said");
  p.textContent = text;
  p.classList.toggle("bad", bad);
  p.hidden = false;
  clearTimeout(saidTimer);
  saidTimer = setTimeout(() => { p.hidden = true; }, bad ? 20000 : 8000);
}

// ---- drawing ----

function button(label, name, run, cls = "") {
  const b = el("button", { type: "button", text: label, class: cls, "aria-label": `${label} ${name}` });
  b.addEventListener("click", run);
  return b;
}

function actionsFor(tr) {
  const r = tr.agent;
  const box = el("div", { class: "acts" });
  const act = (label, run, cls = "") => button(label, r.name, () => run(tr.agent), cls); // its row as it is now
  box.append(act("Peek", openPeek));
  if (session.read_only) return box; // the views only: no control that changes anything
  const gone = ended(r) || r.live === "absent";
  if (r.state === "blocked" && !gone) box.append(act("Answer", (a) => openAsk(a, true), "primary"));
  if (!gone) box.append(act("Send", (a) => openAsk(a, false)));
  if (!gone) box.append(act("Stop", openStop, "danger"));
  if (gone) box.append(act("Restore", restore));
  return box;
}

function cell(label, cls, ...content) {
  return el("td", { class: cls, "data-label": label }, ...content);
}

// A row's cells are made once and then only their text changes: a document that only moves the clock (or an
// ended agent's "stopped 3s ago") leaves its buttons alone, so that a click in progress or the keyboard's focus
// survives it. The buttons are made again only when what they offer changes.
function actionsSignature(r) {
  return JSON.stringify([r.state, r.live, ended(r), !!session.read_only]);
}

function fill(tr, r) {
  tr.agent = r;
  tr.className = ["agent", `state-${r.state}`, ended(r) ? "ended" : "", r.stale ? "stale" : ""].join(" ").trim();
  tr.dataset.name = r.name;
  tr.dataset.state = r.state;
  if (!tr.cellsOf) {
    const c = {
      name: el("th", { scope: "row", class: "name", "data-label": "Name" }),
      state: cell("State", "state"), source: cell("Source", "source"), age: cell("Age", "age"),
      held: cell("For", "for"), where: cell("Where", "where"), why: cell("Why", "why"),
      acts: cell("Actions", "acts-cell"),
    };
    tr.cellsOf = c;
    tr.replaceChildren(c.name, c.state, c.source, c.age, c.held, c.where, c.why, c.acts);
  }
  const c = tr.cellsOf;
  same(c.name, [r.name, r.work], () => {
    const name = [el("span", { text: r.name })];
    if (r.work) name.push(el("span", { class: "work", text: r.work }));
    return name;
  });
  same(c.state, [r.state, r.status, ended(r), r.stale], () => {
    const badge = el("span", { class: `badge ${r.state}`, text: ended(r) && r.status ? r.status : r.state });
    if (r.stale) badge.title = "its server did not answer this time: the last state known";
    return [badge];
  });
  c.source.textContent = r.source || "-";
  c.age.dataset.then = r.said_at ?? "";
  c.age.textContent = ago(r.said_at, now());
  c.held.dataset.then = r.since ?? "";
  c.held.textContent = ago(r.since, now());
  c.where.textContent = where(r);
  const line = r.state === "blocked" && r.evidence ? r.evidence.line : null;
  same(c.why, [r.why, line], () => {
    const why = [document.createTextNode(r.why || "")];
    if (line) why.push(el("q", { class: "asks", text: line }));
    return why;
  });
  const sig = actionsSignature(r);
  if (c.acts.sig !== sig) {
    c.acts.sig = sig;
    c.acts.replaceChildren(actionsFor(tr));
  }
}

// Makes a cell's content again only when what it shows changed (`key`): no flicker, no lost selection.
function same(td, key, make) {
  const sig = JSON.stringify(key);
  if (td.sig === sig) return;
  td.sig = sig;
  td.replaceChildren(...make());
}

function draw() {
  const rows = ordered(fleet.rows || []);
  const live = rows.filter((r) => !ended(r));
  const gone = rows.filter(ended);
  const seen = new Set();
  const place = (body, list, head) => {
    const wanted = [];
    if (head && list.length) wanted.push(head);
    for (const r of list) {
      const k = keyOf(r);
      seen.add(k);
      let tr = trs.get(k);
      if (!tr) { tr = el("tr"); trs.set(k, tr); }
      fill(tr, r);
      wanted.push(tr);
    }
    const same = body.children.length === wanted.length && wanted.every((n, i) => body.children[i] === n);
    if (!same) body.replaceChildren(...wanted);
  };
  place($("live"), live, null);
  place($("ended"), gone, endedHead());
  for (const k of [...trs.keys()]) if (!seen.has(k)) trs.delete(k);

  const blocked = live.filter((r) => r.state === "blocked").length;
  const parts = [`${rows.length} agent${rows.length === 1 ? "" : "s"}`];
  if (blocked) parts.push(`${blocked} blocked`);
  if (gone.length) parts.push(`${gone.length} ended`);
  $("counts").textContent = parts.join(" · ");
  $("counts").classList.toggle("alarm", blocked > 0);
  document.title = blocked ? `(${blocked} blocked) mam` : "mam";
  $("empty").hidden = rows.length > 0;
  $("fleet").hidden = rows.length === 0;
  drawServers();
}

let endedRow = null;
function endedHead() {
  if (!endedRow) {
    endedRow = el("tr", { class: "group" }, el("th", { colspan: "8", scope: "rowgroup", text: "Ended" }));
  }
  return endedRow;
}

function drawServers() {
  const list = fleet.servers || [];
  $("servers-box").hidden = list.length === 0;
  $("servers").replaceChildren(...list.map((s) => {
    if (typeof s === "string") return el("li", { text: s });
    const on = s.host ? ` on ${s.host}` : "";
    const seen = s.last_seen === null || s.last_seen === undefined ? "never seen" : `last seen ${ago(s.last_seen, now())} ago`;
    return el("li", {},
      el("strong", { text: `${s.backend} server ${s.server}${on}` }),
      el("span", { class: `badge ${s.state}`, text: s.state }),
      el("span", { text: s.reason || "" }),
      el("span", { class: "seen", text: seen }));
  }));
}

// The ages change with time alone: redrawn each second from the times the last document gave.
function tick() {
  const t = now();
  for (const td of document.querySelectorAll("td.age, td.for")) {
    const then = td.dataset.then;
    td.textContent = ago(then === "" ? null : Number(then), t);
  }
  if ((fleet.servers || []).length) drawServers();
}

function apply(doc) {
  if (!doc || !Array.isArray(doc.rows)) return;
  fleet = doc;
  if (typeof doc.at === "number") skew = doc.at - Date.now() / 1000;
  draw();
}

function logChange(change) {
  const at = change.at ? String(change.at).replace(/^.*T/, "").replace(/Z$/, "") : "";
  const from = change.from ?? "new";
  const li = el("li", {}, el("time", { text: at }), ` ${change.name}: ${from} → ${change.to}`);
  const log = $("log");
  log.prepend(li);
  while (log.children.length > LOG_MAX) log.lastElementChild.remove();
}

// ---- the live stream (EventSource reconnects by itself; when the server refused it, we start it again) ----

function link(state, text) {
  const p = $("link");
  p.dataset.state = state;
  p.textContent = text;
}

function connect() {
  if (stream) stream.close();
  stream = new EventSource("/api/events");
  stream.addEventListener("open", async () => {
    // A server started again has forgotten our session: a new one (its CSRF token), and what changed meanwhile;
    // "live" once the page may act again.
    try { useSession(await getJSON("/api/session")); } catch { /* said by the next action's refusal */ }
    link("live", "live");
    getJSON("/api/fleet").then(apply, () => {});
  });
  stream.addEventListener("fleet", (e) => { try { apply(JSON.parse(e.data)); } catch { /* a torn event: the next one */ } });
  stream.addEventListener("change", (e) => { try { logChange(JSON.parse(e.data)); } catch { /* ignored */ } });
  stream.addEventListener("error", () => {
    if (stream.readyState === EventSource.CLOSED) {
      link("down", "disconnected: retrying…");
      setTimeout(() => getJSON("/api/session").then(connect, () => setTimeout(connect, 5000)), 3000);
    } else {
      link("down", "reconnecting…");
    }
  });
}

// ---- the verbs ----

// The question of a blocked agent as `mam top` shows it (topmodel.question): its evidence line and the lines
// around its last appearance on the screen, the line itself marked ">". More lines before it than top shows:
// the evidence is often the menu's last line ("Press enter to confirm"), the question itself well above it.
function question(line, screen, before = 10, after = 3) {
  const wanted = (line || "").trim();
  let at = -1;
  for (let i = screen.length - 1; i >= 0; i--) if (wanted && screen[i].includes(wanted)) { at = i; break; }
  if (at < 0) {
    return wanted ? [`> ${line}`] : screen.slice(-before - 1).filter((t) => t.trim()).map((t) => `  ${t}`);
  }
  const out = [];
  for (let i = Math.max(0, at - before); i < Math.min(screen.length, at + after + 1); i++) {
    out.push((i === at ? "> " : "  ") + screen[i]);
  }
  return out;
}

let peeking = null;
async function openPeek(r) {
  peeking = r;
  $("peek-title").textContent = `Peek: ${r.name}`;
  $("peek-text").textContent = "reading…";
  if (!$("peek").open) $("peek").showModal();
  try {
    const doc = await getJSON(agentUrl(r, "peek") + "&lines=60");
    if (peeking !== r) return;
    const pre = $("peek-text");
    pre.textContent = (doc.lines || []).join("\n") || "(an empty screen)";
    pre.scrollTop = pre.scrollHeight;
  } catch (err) {
    if (peeking === r) $("peek-text").textContent = `cannot peek: ${err.message}`;
  }
}

let asking = null; // { row, answer }
async function openAsk(r, answer) {
  asking = { row: r, answer };
  $("ask-title").textContent = answer ? `Answer ${r.name}` : `Send a prompt to ${r.name}`;
  $("ask-label").textContent = answer ? "Your answer (Enter is pressed after it)" : "Prompt (Enter is pressed after it)";
  $("ask-ok").textContent = answer ? "Answer" : "Send";
  $("ask-error").hidden = true;
  $("ask-text").value = "";
  const q = $("ask-question");
  const line = r.evidence && r.evidence.line;
  q.hidden = !answer;
  q.textContent = line ? `> ${line}` : "";
  $("ask").showModal();
  $("ask-text").focus();
  if (!answer) return;
  try {
    const doc = await getJSON(agentUrl(r, "peek") + "&lines=40");
    if (asking && asking.row === r) q.textContent = question(line || "", doc.lines || []).join("\n");
  } catch { /* the evidence line alone, as already shown */ }
}

async function submitAsk(e) {
  e.preventDefault();
  if (!asking) return;
  const { row, answer } = asking;
  const text = $("ask-text").value;
  const ok = $("ask-ok");
  ok.disabled = true;
  try {
    await post(agentUrl(row, answer ? "answer" : "send"), answer ? { text } : { text, enter: true });
    $("ask").close("done");
    say(answer ? `answered ${row.name}` : `sent to ${row.name}`);
  } catch (err) {
    $("ask-error").textContent = err.message;
    $("ask-error").hidden = false;
  } finally {
    ok.disabled = false;
  }
}

let stopping = null;
function openStop(r) {
  stopping = r;
  $("confirm-title").textContent = `Stop ${r.name}?`;
  $("confirm-text").textContent = `This ends the agent ${r.name} (${where(r)}) and closes its pane, as mam stop does.`;
  $("confirm-ok").textContent = `Stop ${r.name}`;
  $("confirm").showModal();
}

async function closedStop() {
  const r = stopping;
  stopping = null;
  if (!r || $("confirm").returnValue !== "ok") return;
  try {
    await post(agentUrl(r, "stop"), { confirm: true });
    say(`stopped ${r.name}`);
  } catch (err) {
    say(`${r.name}: ${err.message}`, true);
  }
}

async function restore(r) {
  say(`restoring ${r.name}…`);
  try {
    await post(agentUrl(r, "restore"), {});
    say(`restored ${r.name}`);
  } catch (err) {
    say(`${r.name}: ${err.message}`, true);
  }
}

// By script, as every POST of the page: a plain form's POST says `Origin: null` under `Referrer-Policy:
// no-referrer`, which the server refuses as cross-origin.
async function logOut(event) {
  event.preventDefault();
  try {
    await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": session.csrf || "" } });
  } finally {
    location.assign("/login");
  }
}

function useSession(doc) {
  const changed = !!doc.read_only !== !!session.read_only;
  session = doc;
  document.body.classList.toggle("read-only", !!session.read_only);
  $("who").textContent = [session.user, session.read_only ? "read-only" : ""].filter(Boolean).join(" · ");
  $("logout").hidden = !session.token_required;
  if (changed) draw(); // the controls follow what this server allows (the actions' signature has read_only)
}

// ---- start ----

async function start() {
  $("ask-form").addEventListener("submit", submitAsk);
  // Not a submit button: Enter in the field submits with the form's first one, which must be the Send.
  $("ask-cancel").addEventListener("click", () => $("ask").close("cancel"));
  $("confirm").addEventListener("close", closedStop);
  $("peek-again").addEventListener("click", () => peeking && openPeek(peeking));
  $("peek").addEventListener("close", () => { peeking = null; });
  $("ask").addEventListener("close", () => { asking = null; });
  $("logout").addEventListener("submit", logOut);
  try {
    useSession(await getJSON("/api/session"));
  } catch (err) {
    say(`cannot reach mam serve: ${err.message}`, true);
    return;
  }
  try { apply(await getJSON("/api/fleet")); } catch (err) { say(err.message, true); }
  connect();
  setInterval(tick, 1000);
}

document.addEventListener("DOMContentLoaded", start);
