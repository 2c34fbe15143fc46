// Arbor's web view: one tree, drawn from GET /v1/trees/{tree} and kept
// live over the SSE watch stream (read with fetch: EventSource cannot send
// the bearer token). Only the rows in view are in the DOM.

const ROW = 24;              // px, as --row in style.css
const OVERSCAN = 10;         // rows drawn beyond the viewport
const TOKEN_KEY = "arbor.token";

const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  treeID: "",
  nodes: new Map(),          // id -> api.Node
  root: "",
  usage: null,
  budget: null,
  rows: [],                  // [{n, depth}] in draw order
  collapsed: new Set(),
  selected: "",
  watch: null,               // AbortController of the watch stream
  refreshing: false,
  dirty: false,
  pending: null,             // the action awaiting confirmation
  diff: { key: "", box: null }, // the selected node's changes, as last fetched
  detailKey: "", detailActs: null, // the detail's action buttons, kept while they apply (drawDetail)
};

// For tests and the benchmarks: when the first tree was drawn, and when
// each node was first drawn or last changed state (epoch ms).
const probe = { firstDrawAt: 0, draws: 0, seen: {}, states: {} };
window.__arbor = probe;

function now() { return performance.timeOrigin + performance.now(); }

// ---- HTTP

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + state.token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok || data.status === "error") {
    const err = new Error(data.message || res.statusText);
    err.code = data.code || String(res.status);
    throw err;
  }
  return data;
}

const enc = encodeURIComponent;

// ---- token

function askToken(message) {
  $("main").hidden = true;
  $("token-form").hidden = false;
  $("token-error").textContent = message || "";
  $("token-input").focus();
}

$("token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  state.token = $("token-input").value.trim();
  $("token-input").value = "";
  await start();
});

async function start() {
  if (!state.token) return askToken();
  let trees;
  try {
    trees = (await api("GET", "/v1/trees")).trees || [];
  } catch (err) {
    sessionStorage.removeItem(TOKEN_KEY);
    return askToken(err.code === "unauthorized" ? "That token was refused." : err.message);
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token-form").hidden = true;
  $("main").hidden = false;
  fillTrees(trees);
  const want = hashTree() || (trees[0] && trees[0].tree_id) || "";
  if (want) openTree(want);
  else setStatus("No tree yet: create one (arbor tree create --base DIR).");
}

// ---- trees

function hashTree() {
  const m = location.hash.match(/tree=([^&]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function fillTrees(trees) {
  const sel = $("tree-select");
  const ids = trees.map((t) => t.tree_id);
  const cur = hashTree();
  if (cur && !ids.includes(cur)) ids.push(cur);
  if (ids.join("\n") === [...sel.options].map((o) => o.value).join("\n")) return; // unchanged: leave an open list alone
  sel.replaceChildren(...ids.map((id) => new Option(id, id)));
  sel.value = state.treeID;
}

$("tree-select").addEventListener("change", (ev) => { location.hash = "tree=" + enc(ev.target.value); });
// Trees made since the page loaded show up when the list is opened.
for (const evName of ["focus", "mousedown"]) {
  $("tree-select").addEventListener(evName, async () => {
    try {
      const trees = (await api("GET", "/v1/trees")).trees || [];
      fillTrees(trees);
      if (!state.treeID && trees.length) location.hash = "tree=" + enc(trees[0].tree_id);
    } catch (err) { setStatus(err.code + ": " + err.message, true); }
  });
}
window.addEventListener("hashchange", () => { const t = hashTree(); if (t && t !== state.treeID) openTree(t); });

function openTree(id) {
  state.treeID = id;
  state.selected = "";
  state.nodes = new Map();
  $("tree-select").value = id;
  if (state.watch) state.watch.abort();
  watch(id);
}

// ---- the watch stream

async function watch(id) {
  const ctl = new AbortController();
  state.watch = ctl;
  const conn = $("conn");
  try {
    const res = await fetch("/v1/trees/" + enc(id) + "/watch", {
      headers: { Authorization: "Bearer " + state.token, Accept: "text/event-stream" },
      signal: ctl.signal,
    });
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      if (res.status === 401) { sessionStorage.removeItem(TOKEN_KEY); return askToken("The token was refused."); }
      conn.textContent = "not watching";
      conn.className = "conn";
      return setStatus((data.code || res.status) + ": " + (data.message || res.statusText), true);
    }
    conn.textContent = "live";
    conn.className = "conn live";
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        onSSE(buf.slice(0, cut));
        buf = buf.slice(cut + 2);
      }
    }
  } catch (err) {
    if (ctl.signal.aborted) return;
  }
  if (state.watch !== ctl) return;
  conn.textContent = "reconnecting";
  conn.className = "conn";
  setTimeout(() => { if (state.watch === ctl) watch(id); }, 1000);
}

function onSSE(block) {
  let event = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return; // a keepalive comment
  const msg = JSON.parse(data);
  if (event === "tree_watching") apply(msg);
  else if (event === "tree_event") refresh();
}

// refresh refetches the tree once per burst of events: a fork_batch of 50
// is one or two fetches, not fifty.
async function refresh() {
  if (state.refreshing) { state.dirty = true; return; }
  state.refreshing = true;
  try {
    do {
      state.dirty = false;
      const id = state.treeID;
      try {
        const r = await api("GET", "/v1/trees/" + enc(id));
        if (id === state.treeID) apply(r);
      } catch (err) {
        if (err.code === "not_found") { state.nodes = new Map(); draw(); setStatus("tree " + id + " is gone", true); }
        else setStatus(err.code + ": " + err.message, true);
      }
    } while (state.dirty);
  } finally {
    state.refreshing = false;
  }
}

function apply(r) {
  const nodes = new Map();
  for (const n of r.nodes || []) nodes.set(n.id, n);
  state.nodes = nodes;
  state.root = r.root || "";
  if (r.usage) state.usage = r.usage;
  if (r.budget) state.budget = r.budget;
  if (state.selected && !nodes.has(state.selected)) state.selected = "";
  draw();
}

// ---- drawing

function flatten() {
  const rows = [];
  const roots = [];
  if (state.nodes.has(state.root)) roots.push(state.root);
  for (const n of state.nodes.values()) if (!n.parent && n.id !== state.root) roots.push(n.id);
  // Iterative DFS: parents above children, a child under its parent.
  const stack = roots.reverse().map((id) => [id, 0, true]);
  while (stack.length) {
    const [id, depth, last] = stack.pop();
    const n = state.nodes.get(id);
    if (!n) continue;
    rows.push({ n, depth, last });
    if (state.collapsed.has(id)) continue;
    const kids = n.children || [];
    for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], depth + 1, i === kids.length - 1]);
  }
  return rows;
}

function draw() {
  state.rows = flatten();
  $("spacer").style.height = state.rows.length * ROW + "px";
  drawRows();
  drawBudget();
  drawDetail();
  const t = now();
  for (const n of state.nodes.values()) {
    if (!(n.id in probe.seen)) probe.seen[n.id] = t;
    const st = stateOf(n);
    if (probe.states[n.id] === undefined || probe.states[n.id].state !== st) probe.states[n.id] = { state: st, at: t };
  }
  for (const id of Object.keys(probe.states)) if (!state.nodes.has(id)) delete probe.states[id];
  if (!probe.firstDrawAt && state.rows.length) probe.firstDrawAt = t;
  probe.draws++;
}

function stateOf(n) { return n.state + (n.protected ? "+protected" : ""); }

function drawRows() {
  const vp = $("viewport");
  const first = Math.max(0, Math.floor(vp.scrollTop / ROW) - OVERSCAN);
  const last = Math.min(state.rows.length, Math.ceil((vp.scrollTop + vp.clientHeight) / ROW) + OVERSCAN);
  const box = $("rows");
  box.style.top = first * ROW + "px";
  const t = Date.now();
  const out = [];
  for (let i = first; i < last; i++) out.push(rowEl(state.rows[i], t));
  box.replaceChildren(...out);
}

$("viewport").addEventListener("scroll", () => requestAnimationFrame(drawRows), { passive: true });
window.addEventListener("resize", () => requestAnimationFrame(drawRows));

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function rowEl({ n, depth, last }, t) {
  const row = el("div", "row node" + (n.id === state.selected ? " selected" : ""));
  row.dataset.nodeId = n.id;
  row.dataset.state = n.state;
  row.dataset.protected = n.protected ? "true" : "false";
  const name = el("span", "name");
  name.style.paddingLeft = Math.max(0, depth - 1) * 16 + "px";
  if (depth > 0) name.append(el("span", "tee", last ? "└" : "├"));
  const kids = (n.children || []).length;
  const tog = el("span", "toggle", kids ? (state.collapsed.has(n.id) ? "▸" : "▾") : "");
  if (kids) {
    tog.title = state.collapsed.has(n.id) ? "expand " + kids + " children" : "collapse";
    tog.addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (state.collapsed.has(n.id)) state.collapsed.delete(n.id); else state.collapsed.add(n.id);
      draw();
    });
  }
  name.append(tog, el("span", "label", n.label || (n.id === state.root ? "root" : "")), el("span", "id", n.id));
  if (kids && state.collapsed.has(n.id)) name.append(el("span", "hint", " (" + kids + ")"));
  const st = el("span", "states");
  st.append(el("span", "badge " + n.state, n.state));
  if (n.protected) st.append(el("span", "badge protected", "protected"));
  row.append(name, st, el("span", "", age(t, n.created_at_unix_ns)), el("span", "", age(t, n.last_active_at_unix_ns)),
    el("span", "", n.state === "live" ? bytes(n.ram_bytes) : "–"), el("span", "", bytes(n.disk_bytes)));
  row.addEventListener("click", () => { state.selected = n.id; state.diff.key = ""; drawRows(); drawDetail(); });
  return row;
}

function age(t, ns) {
  if (!ns) return "";
  const s = Math.max(0, (t - ns / 1e6) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function bytes(b) {
  if (!b) return "0";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}

function drawBudget() {
  const box = $("budget");
  const u = state.usage, b = state.budget;
  if (!u || !b) { box.replaceChildren(); return; }
  box.replaceChildren(
    meter("live nodes", u.live_nodes, b.max_live_nodes, String),
    meter("RAM", u.live_ram_bytes, b.max_live_ram_bytes, bytes),
    meter("disk", u.disk_bytes, b.max_disk_bytes, bytes),
    el("div", "meter", u.total_nodes + " nodes"));
}

function meter(name, used, max, fmt) {
  const m = el("div", "meter");
  m.dataset.meter = name;
  const pct = max ? Math.min(100, (100 * used) / max) : 0;
  m.append(el("div", "", name + ": " + fmt(used) + " of " + fmt(max)));
  const bar = el("div", "bar"), fill = el("div", "fill" + (pct >= 100 ? " full" : pct >= 85 ? " warn" : ""));
  fill.style.width = pct + "%";
  bar.append(fill);
  m.append(bar);
  return m;
}

// ---- the selected node

const ACTIONS = [
  // [label, when it applies, method, path suffix, question]
  ["fork", (n) => n.state !== "stale", "POST", "/fork", (n) => "Fork " + name(n) + " into a new child?"],
  ["commit", (n) => n.parent && n.state !== "stale", "POST", "/commit", (n) => "Commit " + name(n) + " into its parent " + n.parent + "? Its siblings from the same fork point become stale."],
  ["protect", (n) => !n.protected, "POST", "/protect", (n) => "Protect " + name(n) + " from eviction and pruning?"],
  ["unprotect", (n) => n.protected, "POST", "/unprotect", (n) => "Remove " + name(n) + "'s protection?"],
  ["suspend", (n) => n.state === "live", "POST", "/suspend", (n) => "Suspend " + name(n) + "?"],
  ["resume", (n) => n.state === "suspended", "POST", "/resume", (n) => "Resume " + name(n) + "?"],
  ["abort", (n) => n.parent, "DELETE", "", (n) => "Abort " + name(n) + " and its subtree? Their changes are lost."],
  ["prune", (n) => n.parent, "POST", "/prune", (n) => "Prune " + name(n) + " and its whole subtree?"],
];

function name(n) { return n.label ? n.label + " (" + n.id + ")" : n.id; }

function drawDetail() {
  const box = $("detail");
  const n = state.nodes.get(state.selected);
  if (!n) { box.replaceChildren(el("p", "hint", "Select a node.")); return; }
  const t = Date.now();
  const dl = el("dl");
  const add = (k, v) => dl.append(el("dt", "", k), el("dd", "", v));
  add("node", n.id);
  add("label", n.label || "");
  add("parent", n.parent || "(root)");
  add("children", String((n.children || []).length));
  add("state", n.state + (n.protected ? ", protected" : ""));
  add("age", age(t, n.created_at_unix_ns));
  add("last activity", age(t, n.last_active_at_unix_ns) + " ago");
  add("RAM", bytes(n.ram_bytes));
  add("disk", bytes(n.disk_bytes));
  if (n.path) add("path", n.path);
  // The action buttons are kept while the node and the actions that apply
  // stay the same: a refresh (any event of the tree) must not replace a
  // button under the pointer. A click acts on the node as it is then.
  const actKey = state.treeID + "/" + n.id + "/" + ACTIONS.filter(([, when]) => when(n)).map(([label]) => label).join(",");
  let acts = state.detailActs;
  if (state.detailKey !== actKey || !acts) {
    acts = el("div", "actions");
    for (const [label, when, method, suffix, question] of ACTIONS) {
      if (!when(n)) continue;
      const b = el("button", "", label);
      b.dataset.action = label;
      b.addEventListener("click", () => {
        const cur = state.nodes.get(n.id) || n;
        ask(question(cur), label === "fork", (lbl) => act(cur, label, method, suffix, lbl));
      });
      acts.append(b);
    }
    state.detailKey = actKey;
    state.detailActs = acts;
  }
  box.replaceChildren(el("h2", "", name(n)), dl, acts,
    el("h3", "", "Changes against the fork point"),
    diffBox(n),
    el("h3", "", "Recent exec output"),
    el("p", "hint", "Needs a sandbox backend (jail or vm); this tree's nodes are files only."));
}

// diffBox is the node's changes (GET .../diff), fetched again when it is
// selected anew or its state or activity changes, else kept as drawn.
// Text only (textContent): the page's CSP allows no inline markup.
const KINDS = { added: "A", modified: "M", deleted: "D" };

function diffBox(n) {
  const key = state.treeID + "/" + n.id + "/" + n.state + "/" + n.last_active_at_unix_ns;
  if (state.diff.key === key && state.diff.box) return state.diff.box;
  const box = el("div", "diff");
  state.diff = { key, box };
  if (!n.parent) {
    box.append(el("p", "hint", "The root has no fork point: its changes are the base directory's."));
    return box;
  }
  box.append(el("p", "hint", "Loading…"));
  const path = "/v1/trees/" + enc(state.treeID) + "/nodes/" + enc(n.id) + "/diff";
  api("GET", path).then((r) => {
    const changes = r.changes || [];
    const parts = [];
    if (!changes.length) parts.push(el("p", "hint", "No changes."));
    for (const c of changes) {
      const p = el("div", "change");
      p.dataset.path = c.path;
      p.append(el("code", "", (KINDS[c.kind] || c.kind) + " " + c.path));
      if (c.note) p.append(el("span", "hint", " (" + c.note + ")"));
      if (c.diff) p.append(el("pre", "", c.diff));
      parts.push(p);
    }
    box.replaceChildren(...parts);
  }, (err) => {
    box.replaceChildren(el("p", "hint error", "diff: " + err.code + ": " + err.message));
  });
  return box;
}

function ask(text, withLabel, run) {
  state.pending = run;
  $("confirm-text").textContent = text;
  $("confirm-label").hidden = !withLabel;
  $("confirm-label").value = "";
  $("confirm").hidden = false;
  $("confirm-ok").focus();
}

$("confirm-cancel").addEventListener("click", () => { state.pending = null; $("confirm").hidden = true; });
$("confirm-ok").addEventListener("click", () => {
  const run = state.pending;
  state.pending = null;
  $("confirm").hidden = true;
  if (run) run($("confirm-label").value.trim());
});

async function act(n, label, method, suffix, lbl) {
  const path = "/v1/trees/" + enc(state.treeID) + "/nodes/" + enc(n.id) + suffix;
  try {
    const r = await api(method, path, label === "fork" ? { label: lbl } : undefined);
    let msg = label + " " + n.id + ": done";
    if (label === "fork" && r.node_id) msg = "forked " + r.node_id;
    if (label === "commit" && r.stale && r.stale.length) msg += "; stale: " + r.stale.join(", ");
    setStatus(msg);
  } catch (err) {
    setStatus(label + " " + n.id + ": " + err.code + ": " + err.message, true);
  }
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = "status" + (isError ? " error" : "");
}

start();
