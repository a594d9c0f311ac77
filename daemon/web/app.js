/* AI Context OS web view.
 *
 * Vanilla JS on purpose: no framework and no build step, so the page served by
 * the daemon is exactly the files in this folder. Everything it shows comes
 * from the REST API under /api/ (the same engine calls the CLI and MCP use);
 * live refresh comes from /api/events (server-sent events read with fetch).
 * The daemon wants its credential: a browser has it as an HttpOnly session
 * cookie, set by the one-time link `ctxos open` prints; same-origin fetches send
 * it by themselves, and no token ever sits in the page, its URL or storage.
 */
"use strict";

const SIGNALS = ["semantic", "bm25", "graph", "recency", "importance", "frequency"];
const SIGNAL_COLOURS = {
  semantic: "#6366f1", bm25: "#0ea5e9", graph: "#10b981",
  recency: "#f59e0b", importance: "#ef4444", frequency: "#a855f7",
};
const TYPE_COLOURS = {
  rule: "#c93b3b", context: "#2f6fed", daily: "#8a94a6", project: "#1f9d55", skill: "#d98e04",
  resource: "#0ea5e9", decision: "#7c3aed", task: "#db2777", scratch: "#94a3b8",
};
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#17becf"];
const LOGIN_HINT = "Not logged in to this daemon: run `ctxos open` in a terminal (or use the tray's " +
  "\"Open web view\") to open the page with a one-time link.";

const state = {
  status: null,
  memories: [],
  graph: null,
  cy: null,
  graphColour: "community",
  editing: null,        // the memory as loaded from the server (null for a new one)
  dirty: false,
  lastSim: null,
  view: "simulate",
};

/* ---------- small helpers ---------- */

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "style") node.setAttribute("style", v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmt(n, digits = 3) {
  return typeof n === "number" ? n.toFixed(digits) : "–";
}

// "1 memory", "2 memories": every count the page prints goes through here.
function count(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

function communityColour(c) {
  if (c === null || c === undefined || c < 0) return "#cbd2dc";
  if (c < PALETTE.length) return PALETTE[c];
  return `hsl(${(c * 137.508) % 360}, 55%, 55%)`;
}

function csv(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean);
}

function showBanner(message, kind = "error") {
  const b = $("#banner");
  if (!message) { b.hidden = true; return; }
  b.className = "banner" + (kind === "info" ? " info" : "");
  b.textContent = message;
  b.hidden = false;
}

/* ---------- API ---------- */

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/* The per-user daemon serves each workspace's page at /w/<name>/ and its API under /w/<name>/api/. */
const WORKSPACE_BASE = (location.pathname.match(/^\/w\/[^/]+/) || [""])[0];

function loggedOut() {
  state.loggedOut = true;
  document.body.dataset.auth = "none";
  showBanner(LOGIN_HINT);
}

async function api(method, path, body) {
  const opts = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(WORKSPACE_BASE + path, opts);
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  if (res.status === 401) loggedOut();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/* ---------- routing ---------- */

const VIEWS = ["simulate", "graph", "governance", "memories", "health"];

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [view, ...rest] = hash.split("/");
  const name = VIEWS.includes(view) ? view : "simulate";
  state.view = name;
  for (const v of VIEWS) $(`#view-${v}`).hidden = v !== name;
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === name);
  if (name === "graph") loadGraph();
  if (name === "governance") loadGovernance();
  if (name === "health") loadHealth();
  if (name === "memories") {
    const id = rest.length ? decodeURIComponent(rest.join("/")) : null;
    loadMemories().then(() => { if (id && (!state.editing || state.editing.id !== id)) openMemory(id); });
  }
}

function goToMemory(id) {
  location.hash = `#/memories/${encodeURIComponent(id)}`;
}

/* ---------- status and health badge ---------- */

/* The workspace switcher: shown when the daemon serves more than one workspace. */
function renderWorkspaceSwitch(s) {
  const items = (s.workspaces && s.workspaces.items) || [];
  const sel = $("#workspace-switch");
  sel.hidden = items.length < 2;
  if (sel.hidden || sel.options.length) return;
  for (const w of items) {
    sel.append(el("option", { value: w.name, text: w.name + (w.default ? " (default)" : "") }));
  }
  sel.value = s.name || "";
  sel.addEventListener("change", () => {
    location.href = `/w/${encodeURIComponent(sel.value)}/${location.hash}`;
  });
}

async function loadStatus() {
  try {
    const s = await api("GET", "/api/status");
    state.status = s;
    $("#workspace-path").textContent = s.workspace || "";
    $("#workspace-path").title = s.workspace || "";
    renderWorkspaceSwitch(s);
    const intents = $("#sim-intent");
    if (intents.options.length <= 1) {
      for (const name of s.intents || []) intents.append(el("option", { value: name, text: name }));
    }
    if (s.default_budget && !$("#sim-budget").dataset.touched) $("#sim-budget").value = s.default_budget;
    showIndexing(s.indexing);
    const typeSel = $("#ed-type");
    const typeFilter = $("#mem-type-filter");
    if (typeSel.options.length === 0) {
      for (const t of s.types || []) {
        typeSel.append(el("option", { value: t, text: t }));
        typeFilter.append(el("option", { value: t, text: t }));
      }
    }
    const config = $("#config-error");
    config.hidden = !s.config_error;
    config.textContent = s.config_error ? `Configuration error, the daemon keeps its last good settings: ${s.config_error}` : "";
  } catch (e) {
    if (!state.loggedOut) showBanner(`Cannot reach the daemon: ${e.message}`);
  }
}

/* "indexing 2,000 of 10,000" while the daemon builds its index: re-read every second until done. */
let indexingTimer = null;
function showIndexing(progress) {
  const line = $("#index-progress");
  line.hidden = !progress;
  line.textContent = progress ? progress.text : "";
  if (progress && !indexingTimer) {
    indexingTimer = setInterval(async () => {
      try {
        const s = await api("GET", "/api/status");
        showIndexing(s.indexing);
        if (!s.indexing) { clearInterval(indexingTimer); indexingTimer = null; }
      } catch (e) { /* the live indicator reports a lost daemon */ }
    }, 1000);
  }
}

function grade(score) {
  if (typeof score !== "number") return "none";
  return score >= 75 ? "good" : score >= 50 ? "fair" : "poor";
}

async function loadHealthBadge() {
  try {
    const h = await api("GET", "/api/health");
    const badge = $("#health-badge");
    badge.textContent = `health ${Math.round(h.score)}`;
    badge.dataset.grade = grade(h.score);
    return h;
  } catch (e) {
    $("#health-badge").textContent = "health ?";
    return null;
  }
}

async function loadHealth() {
  const h = await loadHealthBadge();
  if (!h) return;
  const score = $("#health-score");
  score.replaceChildren(String(Math.round(h.score)), el("small", { text: "of 100" }));
  score.style.color = { good: "var(--ok)", fair: "var(--warn)", poor: "var(--bad)" }[grade(h.score)] || "";
  const parts = $("#health-parts");
  parts.replaceChildren();
  for (const p of h.parts || []) {
    // Part scores are 0..1; the overall score is 0..100.
    const value = Math.max(0, Math.min(100, 100 * (p.score || 0)));
    const hint = [p.detail, p.advice].filter(Boolean).join(" — ");
    parts.append(el("div", { class: "part", dataset: { part: p.name } },
      el("span", { class: "name", text: p.name }),
      el("span", { class: "meter" }, el("i", { class: grade(value), style: `width:${value}%` })),
      el("span", { class: "num", title: `${p.points} of ${p.max_points} points`, text: `${fmt(p.points, 1)} / ${fmt(p.max_points, 0)}` }),
      hint ? el("span", { class: "hint", text: hint }) : null));
  }
  const inv = $("#health-invalid");
  inv.replaceChildren();
  const invalid = h.invalid || [];
  if (!invalid.length) inv.append(el("p", { class: "muted", text: "None: every file is served." }));
  else {
    const t = el("table", { class: "data" }, el("thead", {}, el("tr", {}, el("th", { text: "file" }), el("th", { text: "reason" }))));
    const tb = el("tbody");
    for (const f of invalid) tb.append(el("tr", {}, el("td", { class: "mem-id", text: f.path }), el("td", { text: f.reason })));
    t.append(tb);
    inv.append(t);
  }
}

/* ---------- simulation ---------- */

function signalLegend() {
  const lg = $("#signal-legend");
  lg.replaceChildren(...SIGNALS.map((s) =>
    el("span", {}, el("span", { class: "sw", style: `background:${SIGNAL_COLOURS[s]}` }), s)));
}

function stackBar(shares, scale) {
  // Each segment is one signal's share (weight x signal); segments add up to the composite
  // score, and the whole bar is drawn relative to the best score in the table.
  const bar = el("div", { class: "stack", title: SIGNALS.map((s) => `${s}: ${fmt(shares[s] || 0)}`).join("\n") });
  for (const s of SIGNALS) {
    const v = shares[s] || 0;
    if (v <= 0 || scale <= 0) continue;
    bar.append(el("i", { style: `width:${(100 * v) / scale}%;background:${SIGNAL_COLOURS[s]}`, dataset: { signal: s } }));
  }
  return bar;
}

async function runSimulation(ev) {
  if (ev) ev.preventDefault();
  const query = $("#sim-query").value.trim();
  if (!query) return;
  const body = { query };
  const budget = parseInt($("#sim-budget").value, 10);
  if (budget > 0) body.budget_tokens = budget;
  const intent = $("#sim-intent").value;
  if (intent) body.intent = intent;
  $("#sim-run").disabled = true;
  try {
    const r = await api("POST", "/api/simulate", body);
    state.lastSim = r;
    renderSimulation(r);
    showBanner(null);
  } catch (e) {
    showBanner(`Simulation failed: ${e.message}`);
  } finally {
    $("#sim-run").disabled = false;
  }
}

function renderSimulation(r) {
  $("#sim-empty").hidden = true;
  $("#sim-result").hidden = false;
  const pct = r.budget_tokens ? Math.min(100, (100 * r.tokens_used) / r.budget_tokens) : 0;
  $("#sim-summary").replaceChildren(
    el("span", { class: "pill", title: r.intent_reason || "" }, "intent ", el("b", { id: "sim-intent-detected", text: r.intent })),
    el("span", { class: "muted", id: "sim-intent-reason", text: r.intent_reason || "" }),
    el("span", { class: "pill", id: "sim-semantic-model" }, "semantic ", el("b", { text: r.semantic_model || "?" })),
    el("span", { class: "pill" }, el("b", { text: `${r.tokens_used}` }), ` / ${count(r.budget_tokens, "token", "tokens")} `,
      el("span", { class: "meter" }, el("i", { style: `width:${pct}%` }))),
    el("span", { class: "pill" }, el("b", { text: String(r.selected.length) }), r.selected.length === 1 ? " memory" : " memories"),
    el("span", { class: "muted", text: `expanded: ${(r.expanded_query || []).join(" ")}` }),
    el("span", { class: "muted", text: `${fmt(r.elapsed_ms, 1)} ms` }));
  const tbody = $("#sim-table tbody");
  tbody.replaceChildren();
  const scale = Math.max(1e-9, ...r.selected.map((m) => SIGNALS.reduce((a, s) => a + ((m.shares || {})[s] || 0), 0)));
  r.selected.forEach((m, i) => {
    tbody.append(el("tr", { dataset: { id: m.id, tier: m.tier } },
      el("td", { class: "num muted", text: String(i + 1) }),
      el("td", {},
        el("a", { class: "mem-id", href: `#/memories/${encodeURIComponent(m.id)}`, text: m.id }),
        el("span", { class: "type-chip", text: m.type }),
        m.community_name ? el("span", { class: "community-chip", title: "the memory's community in the graph", text: m.community_name }) : null),
      el("td", {}, el("span", { class: `tier tier-${m.tier}`, text: m.tier })),
      el("td", { class: "num", text: String(m.tokens) }),
      el("td", { class: "num", text: fmt(m.score) }),
      el("td", {}, stackBar(m.shares || {}, scale)),
      el("td", { class: "muted", text: m.reason || "" },
        (m.sources || []).length ? el("span", { class: "sim-sources", text: ` · ${m.sources.join(", ")}` }) : "")));
  });
  if (!r.selected.length) tbody.append(el("tr", {}, el("td", { colspan: 7, class: "muted", text: "No memory matched this query." })));
  const catalog = r.catalog_ids || [];
  $("#sim-catalog").textContent = catalog.length || r.catalog_omitted
    ? `L0 catalog: ${count(catalog.length, "one-line entry", "one-line entries")}` +
      (r.catalog_omitted ? `; ${count(r.catalog_omitted, "other memory", "other memories")} not listed` : "")
    : "";
  $("#sim-rendered").textContent = r.rendered;
}

function toggleRendered() {
  const pre = $("#sim-rendered");
  pre.hidden = !pre.hidden;
  $("#sim-show-rendered").textContent = pre.hidden ? "Show rendered context" : "Hide rendered context";
}

/* ---------- graph ---------- */

/* One load at a time: the start-up route and a hash change can both ask for the graph, and a
   second drawing would throw away the zoom and pan the person has set meanwhile. */
let graphRequest = null;

async function loadGraph(force = false) {
  if (!force && graphRequest) { await graphRequest.catch(() => {}); return; }  // the load under way draws
  if (force || !state.graph) {
    const request = (graphRequest = api("GET", "/api/graph"));
    try {
      const graph = await request;
      if (graphRequest !== request) return;  // a newer load started meanwhile; it draws
      state.graph = graph;
    } catch (e) {
      if (graphRequest === request) showBanner(`Graph failed: ${e.message}`);
      return;
    } finally {
      if (graphRequest === request) graphRequest = null;
    }
  }
  if (state.cy && state.drawnGraph === state.graph) { state.cy.resize(); return; }  // already drawn: keep the view
  renderGraph();
}

function nodeColour(n) {
  return state.graphColour === "type" ? (TYPE_COLOURS[n.type] || "#888") : communityColour(n.community);
}

const LABEL_ALL_UP_TO = 60;      // up to this many memories every label shows; past it, on zoom or hover
const LABEL_ZOOM = 1.15;         // zoom level from which labels show on a large graph
const COMPOUND_MIN = 3;          // communities with at least this many members get a named frame

function communityName(c) {
  const named = (state.graph.communities || []).find((x) => x.id === c);
  return named ? named.name : (c === null || c === undefined ? "no community" : `community ${c}`);
}

function renderGraph() {
  const g = state.graph;
  if (!g) return;
  // A redraw after a change keeps where the person was looking; a first drawing fits the graph.
  const keptView = state.cy && state.drawnGraph ? { zoom: state.cy.zoom(), pan: { ...state.cy.pan() } } : null;
  const container = $("#graph-canvas");
  if (typeof window.cytoscape !== "function") { showBanner("graph library missing"); return; }
  const sizes = {};
  for (const n of g.nodes) sizes[n.community] = (sizes[n.community] || 0) + 1;
  const framed = (c) => c !== null && c !== undefined && sizes[c] >= COMPOUND_MIN;
  const positioned = g.nodes.every((n) => typeof n.x === "number");
  const fallback = positioned ? null : communityPacking(g.nodes);
  const elements = [
    // One frame per community, named by its distinctive terms (server-side c-TF-IDF).
    ...Object.keys(sizes).filter((c) => framed(c === "null" ? null : Number(c))).map((c) => ({
      group: "nodes", classes: "community",
      data: { id: `community:${c}`, label: communityName(Number(c)), community: Number(c), colour: communityColour(Number(c)) } })),
    ...g.nodes.map((n) => ({
      group: "nodes", classes: "memory",
      position: positioned ? { x: n.x, y: n.y } : fallback[n.id],
      data: { id: n.id, label: n.title || n.id, colour: nodeColour(n), size: 14 + 26 * (n.importance ?? 0.5),
        type: n.type, community: n.community, ...(framed(n.community) ? { parent: `community:${n.community}` } : {}) } })),
    ...g.edges.map((e, i) => ({ group: "edges", data: { id: `e${i}`, source: e.source, target: e.target, kind: e.kind || "link" } })),
  ];
  if (state.cy) state.cy.destroy();
  const few = g.nodes.length <= LABEL_ALL_UP_TO;
  state.cy = window.cytoscape({
    container,
    elements,
    maxZoom: 3,
    minZoom: 0.05,
    style: [
      { selector: "node.memory", style: {
        "background-color": "data(colour)", width: "data(size)", height: "data(size)",
        label: few ? "data(label)" : "", "font-size": 10, color: "#3d4653", "text-valign": "bottom", "text-margin-y": 3,
        "text-background-color": "#fcfcfd", "text-background-opacity": 0.8, "text-background-padding": 1,
        "border-width": 1, "border-color": "#ffffff" } },
      { selector: "node.memory.labelled, node.memory.hover, node.memory:selected", style: { label: "data(label)", "z-index": 20 } },
      { selector: "node.community", style: {
        "background-color": "data(colour)", "background-opacity": 0.07, "border-width": 1, "border-color": "data(colour)",
        "border-opacity": 0.5, shape: "round-rectangle", label: "data(label)", "text-valign": "top", "text-halign": "center",
        "font-size": 30, "font-weight": 700, color: "data(colour)", padding: 18, "text-margin-y": -4,
        "text-background-color": "#fcfcfd", "text-background-opacity": 0.85, "text-background-padding": 2 } },
      { selector: "node.memory:selected", style: { "border-width": 3, "border-color": "#1d2430" } },
      { selector: "edge", style: { width: 1, "line-color": "#c9d0da", "curve-style": "haystack", opacity: 0.7 } },
      { selector: "edge[kind = 'implicit']", style: { "line-style": "dashed", opacity: 0.45 } },
      { selector: ".filtered", style: { display: "none" } },
    ],
    layout: { name: "preset", fit: true, padding: 30 },
  });
  state.cy.on("tap", "node.memory", (evt) => showNode(evt.target.id()));
  state.cy.on("tap", "node.community", (evt) => setGraphFilter("community", String(evt.target.data("community"))));
  state.cy.on("dbltap", "node.memory", (evt) => goToMemory(evt.target.id()));
  state.cy.on("mouseover", "node.memory", (evt) => evt.target.addClass("hover"));
  state.cy.on("mouseout", "node.memory", (evt) => evt.target.removeClass("hover"));
  if (!few) state.cy.on("zoom", updateZoomLabels);
  updateZoomLabels();
  const communities = new Set(g.nodes.map((n) => n.community).filter((c) => c !== null && c !== undefined && c >= 0));
  $("#graph-stats").textContent = [count(g.nodes.length, "memory", "memories"), count(g.edges.length, "link", "links"), count(communities.size, "community", "communities")].join(" · ");
  $("#graph-canvas").dataset.nodes = String(state.cy.nodes(".memory").length);
  $("#graph-canvas").dataset.edges = String(state.cy.edges().length);
  state.drawnGraph = g;
  fillGraphFilters();
  applyGraphFilter({ fit: !keptView });
  if (keptView) state.cy.viewport(keptView);
  renderGraphLegend(communities);
}

function updateZoomLabels() {
  // Past LABEL_ALL_UP_TO memories, labels appear once zoomed in far enough to read them.
  if (!state.cy || state.graph.nodes.length <= LABEL_ALL_UP_TO) return;
  const on = state.cy.zoom() >= LABEL_ZOOM;
  $("#graph-canvas").dataset.labels = on ? "zoom" : "hover";
  state.cy.batch(() => state.cy.nodes(".memory").toggleClass("labelled", on));
}

function fillGraphFilters() {
  const g = state.graph;
  const cSel = $("#graph-filter-community");
  const tSel = $("#graph-filter-type");
  const keepC = cSel.value, keepT = tSel.value;
  cSel.replaceChildren(el("option", { value: "", text: "all communities" }),
    ...(g.communities || []).filter((c) => c.size > 1).map((c) =>
      el("option", { value: String(c.id), text: `${c.name} (${c.size})` })));
  const types = [...new Set(g.nodes.map((n) => n.type))].sort();
  tSel.replaceChildren(el("option", { value: "", text: "all types" }), ...types.map((t) => el("option", { value: t, text: t })));
  if ([...cSel.options].some((o) => o.value === keepC)) cSel.value = keepC;
  if ([...tSel.options].some((o) => o.value === keepT)) tSel.value = keepT;
}

function setGraphFilter(kind, value) {
  $(kind === "community" ? "#graph-filter-community" : "#graph-filter-type").value = value;
  applyGraphFilter();
}

function applyGraphFilter({ fit = true } = {}) {
  if (!state.cy) return;
  const community = $("#graph-filter-community").value;
  const type = $("#graph-filter-type").value;
  state.cy.batch(() => {
    state.cy.nodes(".memory").forEach((node) => {
      const hide = (community !== "" && String(node.data("community")) !== community) || (type !== "" && node.data("type") !== type);
      node.toggleClass("filtered", hide);
    });
    state.cy.nodes(".community").forEach((frame) => {
      frame.toggleClass("filtered", frame.children().not(".filtered").length === 0);
    });
  });
  const shown = state.cy.nodes(".memory").not(".filtered");
  $("#graph-canvas").dataset.shown = String(shown.length);
  if (fit && shown.length) {
    state.cy.fit(shown.union(shown.parents()), 30);
    if (state.cy.zoom() > 1.3) state.cy.zoom({ level: 1.3, renderedPosition: { x: containerMid("x"), y: containerMid("y") } });
  }
}

function containerMid(axis) {
  const box = $("#graph-canvas").getBoundingClientRect();
  return axis === "x" ? box.width / 2 : box.height / 2;
}

function communityPacking(nodes) {
  // Fallback when the server sent no positions: each community a sunflower-spiral disc, discs in rows.
  const spacing = 30;
  const groups = new Map();
  for (const n of nodes) {
    const key = n.community ?? -1;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(n.id);
  }
  const sorted = [...groups.values()].sort((a, b) => b.length - a.length || (a[0] < b[0] ? -1 : 1));
  const diameter = (k) => spacing * (Math.sqrt(k) + 1);
  const area = sorted.reduce((acc, ids) => acc + diameter(ids.length) ** 2, 0);
  const rowWidth = Math.max(diameter(sorted[0] ? sorted[0].length : 1), Math.sqrt(area) * 1.3);
  const positions = {};
  let x = 0, y = 0, rowHeight = 0;
  for (const ids of sorted) {
    const d = diameter(ids.length);
    if (x > 0 && x + d > rowWidth) { x = 0; y += rowHeight; rowHeight = 0; }
    const cx = x + d / 2, cy = y + d / 2;
    ids.sort().forEach((id, i) => {
      const angle = i * 2.399963, radius = (spacing / 2) * Math.sqrt(i);
      positions[id] = { x: cx + radius * Math.cos(angle), y: cy + radius * Math.sin(angle) };
    });
    x += d;
    rowHeight = Math.max(rowHeight, d);
  }
  return positions;
}

const LEGEND_MAX = 16;

function renderGraphLegend(communities) {
  const lg = $("#graph-legend");
  lg.replaceChildren();
  if (state.graphColour === "type") {
    const present = new Set(state.graph.nodes.map((n) => n.type));
    for (const [t, c] of Object.entries(TYPE_COLOURS)) {
      if (present.has(t)) lg.append(el("a", { href: "#/graph", class: "legend-item", dataset: { type: t },
        onclick: (ev) => { ev.preventDefault(); setGraphFilter("type", t); } },
        el("span", { class: "sw", style: `background:${c}` }), t));
    }
    return;
  }
  const named = (state.graph.communities || []).filter((c) => communities.has(c.id));
  const shown = named.slice(0, LEGEND_MAX);
  for (const c of shown) {
    lg.append(el("a", { href: "#/graph", class: "legend-item", dataset: { community: String(c.id) }, title: `most central: ${c.top_members.join(", ")}`,
      onclick: (ev) => { ev.preventDefault(); setGraphFilter("community", String(c.id)); } },
      el("span", { class: "sw", style: `background:${communityColour(c.id)}` }),
      el("span", { class: "legend-name", text: c.name }), el("span", { class: "muted", text: ` ${c.size}` })));
  }
  if (named.length > shown.length) lg.append(el("span", { class: "muted", text: `… ${named.length - shown.length} more (filter by community above)` }));
}

function showNode(id) {
  const n = state.graph.nodes.find((x) => x.id === id);
  if (!n) return;
  const card = $("#graph-node");
  card.hidden = false;
  card.replaceChildren(
    el("h4", { text: n.title || n.id }),
    n.title && n.title !== n.id ? el("div", { class: "mem-id muted", text: n.id }) : null,
    el("div", {}, el("span", { class: "type-chip", style: "margin-left:0", text: n.type }),
      " ", el("span", { class: "muted", text: `importance ${fmt(n.importance, 2)}` })),
    el("div", { class: "node-community" }, el("span", { class: "sw", style: `background:${communityColour(n.community)}` }),
      communityName(n.community)),
    el("p", { text: n.l0 || "" }),
    el("button", { type: "button", class: "primary small", id: "graph-open", onclick: () => goToMemory(n.id), text: "Open memory" }));
}

function setGraphColour(mode) {
  state.graphColour = mode;
  for (const b of document.querySelectorAll("#graph-colour button")) b.classList.toggle("on", b.dataset.colour === mode);
  if (!state.cy || !state.graph) return;
  const byId = new Map(state.graph.nodes.map((n) => [n.id, n]));
  state.cy.nodes(".memory").forEach((node) => node.data("colour", nodeColour(byId.get(node.id()))));
  const communities = new Set(state.graph.nodes.map((n) => n.community).filter((c) => c !== null && c !== undefined && c >= 0));
  renderGraphLegend(communities);
}

/* ---------- governance ---------- */

const EVIDENCE_LABELS = {
  age_days: "age (days)", modified: "last modified", loads: "loads in the window", window_days: "window (days)",
  importance: "importance", ttl_days: "TTL (days)", centrality_ratio: "centrality (x average)", degree: "links",
  reason: "reason", text_overlap: "text overlap", shared_tags: "shared tags", keep: "keep",
};

function memLink(id) {
  return el("a", { class: "mem-id", href: `#/memories/${encodeURIComponent(id)}`, text: id });
}

function plainValue(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : fmt(v, 2);
  if (Array.isArray(v)) return v.map(plainValue).join(", ") || "–";
  if (typeof v === "object") return Object.entries(v).map(([k, x]) => `${k}: ${plainValue(x)}`).join("; ");
  return String(v);
}

function kvTable(pairs) {
  const tb = el("tbody");
  for (const [k, v] of pairs) tb.append(el("tr", {}, el("th", { text: EVIDENCE_LABELS[k] || k.replace(/_/g, " ") }), el("td", { text: plainValue(v) })));
  return el("table", { class: "evidence-kv" }, tb);
}

function overlapBar(value) {
  const pct = Math.max(0, Math.min(100, 100 * (value || 0)));
  return el("span", { class: "overlap" }, el("span", { class: "meter" }, el("i", { style: `width:${pct}%` })), ` ${fmt(value, 2)}`);
}

function similarityTable(rows, keep) {
  // Near-duplicates: which pairs overlap, and by how much (word-bigram Jaccard).
  const t = el("table", { class: "data evidence-sim" },
    el("thead", {}, el("tr", {}, el("th", { text: "memory" }), el("th", { text: "memory" }), el("th", { text: "overlap" }))));
  const tb = el("tbody");
  for (const r of rows) {
    tb.append(el("tr", {}, el("td", {}, memLink(r.a), r.a === keep ? el("span", { class: "keep", text: "keep" }) : null),
      el("td", {}, memLink(r.b), r.b === keep ? el("span", { class: "keep", text: "keep" }) : null), el("td", {}, overlapBar(r.overlap))));
  }
  t.append(tb);
  return t;
}

function sideBySide(ids, ev) {
  // Conflicts: the two memories in two columns: type, importance, and the sentences that disagree.
  const wrap = el("div", { class: "evidence-conflict" });
  const head = el("div", { class: "sbs" }, ...ids.map((id) => el("div", { class: "sbs-col" },
    el("div", { class: "sbs-head" }, memLink(id)),
    el("div", { class: "muted" }, `${(ev.types || {})[id] || ""}`, (ev.importance || {})[id] !== undefined ? ` · importance ${plainValue(ev.importance[id])}` : ""))));
  wrap.append(head);
  for (const pair of ev.contradictions || []) {
    wrap.append(el("div", { class: "sbs contradiction" }, ...ids.map((id) =>
      el("blockquote", { class: "sbs-col", text: pair[id] || "" }))));
  }
  const facts = [];
  if (ev.text_overlap !== undefined) facts.push(["text_overlap", ev.text_overlap]);
  if (ev.shared_tags && ev.shared_tags.length) facts.push(["shared_tags", ev.shared_tags]);
  if (facts.length) wrap.append(kvTable(facts));
  return wrap;
}

function flagList(flags) {
  return el("ul", { class: "flag-list" }, ...flags.map((f) =>
    el("li", {}, el("b", { text: f.by }), el("span", { class: "muted", text: ` ${String(f.at || "").slice(0, 16).replace("T", " ")}: ` }), f.reason)));
}

function evidenceView(f) {
  const ev = f.evidence || {};
  const ids = f.memory_ids || [];
  if (f.kind === "consolidation" && Array.isArray(ev.similarity)) return similarityTable(ev.similarity, ev.keep);
  if (f.kind === "conflict" && ids.length === 2) return sideBySide(ids, ev);
  if (f.kind === "flag" && Array.isArray(ev.flags)) return flagList(ev.flags);
  const pairs = Object.entries(ev).filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length));
  return pairs.length ? kvTable(pairs) : null;
}

async function loadGovernance() {
  let data, proposals;
  try {
    [data, proposals] = await Promise.all([api("GET", "/api/governance"), api("GET", "/api/proposals")]);
  } catch (e) {
    showBanner(`Governance failed: ${e.message}`);
    return;
  }
  const findings = data.findings || [];
  const pending = proposals.proposals || [];
  const waiting = findings.length + pending.length;
  $("#gov-count").textContent = waiting ? String(waiting) : "";
  $("#gov-summary").textContent = waiting
    ? count(findings.length, "finding", "findings") +
      (pending.length ? ` and ${count(pending.length, "merge proposal", "merge proposals")}` : "") + " waiting for your judgment"
    : "Nothing needs your judgment.";
  const props = $("#gov-proposals");
  props.replaceChildren(...pending.map(proposalCard));
  props.hidden = !pending.length;
  const list = $("#gov-list");
  list.replaceChildren();
  for (const f of findings) list.append(findingCard(f));
}

function diffView(text) {
  const pre = el("pre", { class: "diff" });
  for (const line of (text || "").split("\n")) {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("@@") ? "hunk"
      : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx";
    pre.append(el("span", { class: `d-${kind}`, text: line }));
  }
  return pre;
}

function proposalCard(p) {
  const decide = async (decision) => {
    try {
      const r = await api("POST", `/api/proposals/${encodeURIComponent(p.id)}/${decision}`, {});
      showBanner(decision === "accept" ? `Accepted: ${r.saved} is now version ${r.version}` +
        (r.archived && r.archived.length ? `; archived ${r.archived.map((a) => a.id).join(", ")}` : "") : `Rejected ${p.id}`, "info");
      await Promise.all([loadGovernance(), loadHealthBadge()]);
    } catch (e) {
      showBanner(`${decision} failed: ${e.message}`);
      if (e.status === 409) loadGovernance();
    }
  };
  const by = [p.by, p.origin === "sampling" ? (p.note || "drafted by the client's model") : null, (p.created_at || "").slice(0, 16).replace("T", " ")]
    .filter(Boolean).join(" · ");
  return el("div", { class: "card proposal" + (p.stale ? " stale" : ""), dataset: { proposal: p.id, kind: "proposal" } },
    el("div", { class: "body" },
      el("span", { class: "kind", dataset: { kind: "proposal" }, text: p.origin === "sampling" ? "merge draft" : "merge proposal" }),
      p.stale ? el("span", { class: "stale-tag", text: " stale" }) : null,
      el("div", { class: "title" }, "Merge ", ...p.ids.slice(1).map((id, i) => [i ? ", " : "", memLink(id)]), " into ", memLink(p.into),
        el("span", { class: "muted", text: ` (keeps its id; ${p.ids.slice(1).join(", ")} would be archived)` })),
      el("div", {}, el("b", { text: "New summary: " }), p.l0),
      el("div", { class: "muted small-note", text: by }),
      p.stale ? el("div", { class: "editor-note conflict", text: `Stale: ${(p.stale_reasons || []).join("; ")}. Accepting is refused; reject it and ask for a fresh proposal.` }) : null,
      ...(p.diffs || []).map((d) => el("details", { class: "diff-box", open: true },
        el("summary", {}, "Changes to ", el("span", { class: "mem-id", text: d.path })), diffView(d.diff)))),
    el("div", { class: "acts" },
      el("button", { type: "button", class: "small primary", dataset: { action: "accept" }, disabled: p.stale, onclick: () => decide("accept"), text: "Accept" }),
      el("button", { type: "button", class: "small", dataset: { action: "reject" }, onclick: () => decide("reject"), text: "Reject" })));
}

function findingCard(f) {
  const ids = f.memory_ids || [];
  const acts = el("div", { class: "acts" });
  const act = async (action, extra = {}) => {
    try {
      await api("POST", "/api/governance/actions", { action, finding_id: f.id, ...extra });
      showBanner(`${action.replace("_", " ")} done`, "info");
      await Promise.all([loadGovernance(), loadHealthBadge()]);
    } catch (e) {
      showBanner(`${action.replace("_", " ")} failed: ${e.message}`);
    }
  };
  const actions = f.actions || [];
  if (actions.includes("archive")) {
    for (const id of f.archive_ids || []) {
      acts.append(el("button", { type: "button", class: "small danger", dataset: { action: "archive", id },
        onclick: () => act("archive", { memory_id: id }), text: (f.archive_ids.length > 1 ? `Archive ${id}` : "Archive") }));
    }
  }
  if (actions.includes("set_importance") && ids.length) {
    const input = el("input", { type: "number", min: 0, max: 1, step: 0.05, value: f.suggested_importance ?? 0.5, "aria-label": "new importance" });
    acts.append(input, el("button", { type: "button", class: "small", dataset: { action: "set_importance" },
      onclick: () => act("set_importance", { memory_id: ids[0], importance: parseFloat(input.value) }), text: "Set importance" }));
  }
  if (actions.includes("dismiss")) {
    acts.append(el("button", { type: "button", class: "small", dataset: { action: "dismiss" }, onclick: () => act("dismiss"), text: "Dismiss" }));
  }
  const subjects = ids.length
    ? el("div", {}, ...ids.map((id, i) => [i ? ", " : "", memLink(id)]))
    : (f.paths && f.paths.length ? el("div", { class: "mem-id", text: f.paths.join(", ") }) : null);
  const evidence = evidenceView(f);
  return el("div", { class: "card", dataset: { finding: f.id, kind: f.kind } },
    el("div", { class: "body" },
      el("span", { class: "kind", dataset: { kind: f.kind }, text: f.kind === "flag" ? `flagged ${(f.evidence || {}).flag_kind || ""}` : f.kind.replace(/_/g, " ") }),
      f.severity && f.severity !== "info" ? el("span", { class: "muted", text: `  ${f.severity}` }) : null,
      el("div", { class: "title", text: f.reason || f.title || "" }),
      subjects,
      evidence ? el("div", { class: "evidence" }, evidence) : null,
      f.suggestion ? el("div", { class: "suggest" }, el("b", { text: "Suggested: " }), f.suggestion) : null),
    acts);
}

/* ---------- memories and editor ---------- */

async function loadMemories() {
  try {
    const data = await api("GET", "/api/memories");
    state.memories = data.memories || [];
    renderMemoryList();
  } catch (e) {
    showBanner(`Listing memories failed: ${e.message}`);
  }
}

function listSummary(m) {
  // The l0 under the title, unless it only repeats a section heading (a note whose first heading is "Settings").
  // A derived l0 that starts with the title ("Cards view — Cards is a type of ...") drops the repeat.
  let l0 = (m.l0 || "").trim();
  const title = m.display_title || m.id;
  for (const sep of [" — ", " - ", ": "]) if (l0.startsWith(title + sep)) l0 = l0.slice(title.length + sep.length).trim();
  if (!l0 || l0 === title || (l0 === m.title && m.title !== title)) return "";
  return l0;
}

function renderMemoryList() {
  const q = $("#mem-filter").value.trim().toLowerCase();
  const type = $("#mem-type-filter").value;
  const list = $("#mem-list");
  list.replaceChildren();
  const shown = state.memories.filter((m) => (!type || m.type === type) &&
    (!q || m.id.toLowerCase().includes(q) || (m.display_title || "").toLowerCase().includes(q) ||
      (m.l0 || "").toLowerCase().includes(q) || (m.tags || []).some((t) => t.toLowerCase().includes(q))));
  for (const m of shown.slice(0, 500)) {
    list.append(el("li", { dataset: { id: m.id }, class: state.editing && state.editing.id === m.id ? "active" : null, onclick: () => goToMemory(m.id) },
      el("span", { class: "mem-title", text: m.display_title || m.id }), el("span", { class: "type-chip", text: m.type }),
      listSummary(m) ? el("span", { class: "l0", text: listSummary(m) }) : null,
      (m.display_title || m.id) !== m.id ? el("span", { class: "mem-id small-id", text: m.id }) : null));
  }
  if (shown.length > 500) list.append(el("li", { class: "muted", text: `… ${shown.length - 500} more: narrow the filter` }));
}

function editorNote(message, kind) {
  const note = $("#ed-note");
  if (!message) { note.hidden = true; return; }
  note.className = "editor-note" + (kind === "conflict" ? " conflict" : "");
  note.replaceChildren(message);
  note.hidden = false;
}

function fillEditor(m) {
  state.editing = m;
  state.dirty = false;
  $("#editor-empty").hidden = true;
  const form = $("#editor");
  form.hidden = false;
  const isNew = !m.id;
  $("#ed-title").textContent = isNew ? "New memory" : m.id;
  $("#ed-meta").textContent = isNew ? "" : `${m.path} · version ${m.version} · modified ${m.modified || "–"}${m.protected ? " · protected" : ""}`;
  $("#ed-id").value = m.id || "";
  $("#ed-id").readOnly = !isNew;
  $("#ed-type").value = m.type || "context";
  $("#ed-type").disabled = !isNew;
  $("#ed-l0").value = m.l0 || "";
  $("#ed-importance").value = m.importance ?? 0.5;
  $("#ed-tags").value = (m.tags || []).join(", ");
  $("#ed-related").value = (m.related || []).join(", ");
  $("#ed-l1").value = m.l1 || "";
  $("#ed-l2").value = m.l2 || "";
  $("#ed-archive").hidden = isNew;
  // Protected memories refuse every write through the engine's write rules (agents and this page
  // alike); a person edits them in the file itself.
  $("#ed-save").disabled = Boolean(m.protected);
  if (m.protected) editorNote(`${m.id} is protected: saving here is refused. To change it, run \`ctxos unlock ${m.id}\` in a terminal (a person's explicit unlock), then reload.`);
  $("#ed-revert").hidden = isNew;
  $("#ed-status").textContent = "";
  for (const li of document.querySelectorAll("#mem-list li")) li.classList.toggle("active", li.dataset.id === m.id);
  document.dispatchEvent(new CustomEvent("ctxos:editor", { detail: m }));   // history.js follows the editor
}

async function openMemory(id) {
  try {
    const m = await api("GET", `/api/memories/${encodeURIComponent(id)}`);
    editorNote(null);
    fillEditor(m);
  } catch (e) {
    showBanner(e.status === 404 ? `No memory with id ${id}` : `Opening ${id} failed: ${e.message}`);
  }
}

function editorPayload() {
  return {
    l0: $("#ed-l0").value.trim(),
    importance: parseFloat($("#ed-importance").value),
    tags: csv($("#ed-tags").value),
    related: csv($("#ed-related").value),
    l1: $("#ed-l1").value,
    content: $("#ed-l2").value,
  };
}

async function saveMemory(ev) {
  ev.preventDefault();
  const m = state.editing;
  const body = editorPayload();
  $("#ed-save").disabled = true;
  try {
    let saved;
    if (m && m.id) {
      saved = await api("PUT", `/api/memories/${encodeURIComponent(m.id)}`, { ...body, version: m.version, checksum: m.checksum });
    } else {
      const id = $("#ed-id").value.trim();
      saved = await api("POST", "/api/memories", { ...body, type: $("#ed-type").value, ...(id ? { id } : {}) });
      location.hash = `#/memories/${encodeURIComponent(saved.id)}`;
    }
    fillEditor(saved);
    const warnings = (saved.warnings || []).map((w) => w.message);   // the budget guard (docs/engine.md)
    editorNote(`Saved: version ${saved.version}, written to ${saved.path}.` +
      (warnings.length ? ` Warning: ${warnings.join(" ")}` : ""), warnings.length ? "conflict" : undefined);
    $("#ed-status").textContent = "saved";
    loadMemories();
  } catch (e) {
    if (e.status === 409) {
      editorNote(el("span", {}, `Not saved: ${e.message} `,
        el("button", { type: "button", class: "small", onclick: () => openMemory(m.id), text: "Load the version on disk" })), "conflict");
    } else {
      editorNote(`Not saved: ${e.message}`, "conflict");
    }
  } finally {
    $("#ed-save").disabled = false;
  }
}

async function archiveCurrent() {
  const m = state.editing;
  if (!m || !m.id) return;
  if (!window.confirm(`Archive ${m.id}? It moves to the archive folder and stops being served; it can be restored.`)) return;
  try {
    await api("POST", `/api/memories/${encodeURIComponent(m.id)}/archive`, {});
    state.editing = null;
    $("#editor").hidden = true;
    $("#editor-empty").hidden = false;
    showBanner(`${m.id} archived`, "info");
    loadMemories();
  } catch (e) {
    showBanner(`Archive failed: ${e.message}`);
  }
}

function newMemory() {
  location.hash = "#/memories";
  editorNote(null);
  fillEditor({ type: "context", importance: 0.5, tags: [], related: [] });
  $("#ed-l0").focus();
}

/* ---------- live updates ---------- */

let refreshTimer = null;

async function refreshOpenMemory(m) {
  // The file of the memory in the editor changed: our own save (same checksum: nothing to do),
  // or an edit from elsewhere (reload it, unless the person has unsaved changes).
  let fresh;
  try {
    fresh = await api("GET", `/api/memories/${encodeURIComponent(m.id)}`);
  } catch (e) {
    if (e.status === 404) editorNote(`${m.id} is gone from disk (deleted, renamed or archived).`, "conflict");
    return;
  }
  if (!state.editing || state.editing.id !== m.id || fresh.checksum === state.editing.checksum) return;
  if (state.dirty) {
    editorNote(el("span", {}, "The file changed on disk while you were editing; saving now would be refused. ",
      el("button", { type: "button", class: "small", onclick: () => openMemory(m.id), text: "Load the version on disk" })), "conflict");
    return;
  }
  editorNote(null);
  fillEditor(fresh);
  editorNote(`Reloaded: ${fresh.path} changed on disk (now version ${fresh.version}).`);
  const form = $("#editor");
  form.classList.remove("flash");
  void form.offsetWidth;
  form.classList.add("flash");
}

function onChange(change) {
  const touched = new Set([...(change.updated || []), ...(change.removed || []), ...(change.paths || [])]);
  const m = state.editing;
  if (m && m.id && (touched.has(m.id) || touched.has(m.path))) refreshOpenMemory(m);
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => {
    state.graph = null;
    if (state.view === "memories") loadMemories();
    if (state.view === "graph") loadGraph(true);
    if (state.view === "governance") loadGovernance();
    if (state.view === "health") loadHealth(); else loadHealthBadge();
    if (state.view === "simulate" && state.lastSim) runSimulation();
  }, 300);
}

async function listenForChanges() {
  const indicator = $("#live-indicator");
  for (;;) {
    try {
      const res = await fetch(WORKSPACE_BASE + "/api/events", { headers: { Accept: "text/event-stream" } });
      if (res.status === 401) { loggedOut(); indicator.dataset.state = "error"; return; }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      indicator.dataset.state = "on";
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let event = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
          }
          if (event === "change" && data.length) onChange(JSON.parse(data.join("\n")));
        }
      }
    } catch (e) {
      indicator.dataset.state = "error";
    }
    indicator.dataset.state = "error";
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/* ---------- start ---------- */

function init() {
  signalLegend();
  $("#sim-form").addEventListener("submit", runSimulation);
  $("#sim-budget").addEventListener("input", () => { $("#sim-budget").dataset.touched = "1"; });
  $("#sim-show-rendered").addEventListener("click", toggleRendered);
  $("#sim-copy-rendered").addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText($("#sim-rendered").textContent));
  for (const b of document.querySelectorAll("#graph-colour button")) b.addEventListener("click", () => setGraphColour(b.dataset.colour));
  $("#graph-fit").addEventListener("click", () => { $("#graph-filter-community").value = ""; $("#graph-filter-type").value = ""; applyGraphFilter(); });
  $("#graph-filter-community").addEventListener("change", applyGraphFilter);
  $("#graph-filter-type").addEventListener("change", applyGraphFilter);
  $("#gov-refresh").addEventListener("click", loadGovernance);
  $("#mem-filter").addEventListener("input", renderMemoryList);
  $("#mem-type-filter").addEventListener("change", renderMemoryList);
  $("#mem-new").addEventListener("click", newMemory);
  $("#editor").addEventListener("submit", saveMemory);
  $("#editor").addEventListener("input", () => { state.dirty = true; $("#ed-status").textContent = "unsaved changes"; });
  $("#ed-revert").addEventListener("click", () => state.editing && openMemory(state.editing.id));
  $("#ed-archive").addEventListener("click", archiveCurrent);
  window.addEventListener("hashchange", route);
  loadStatus().then(route);
  loadHealthBadge();
  Promise.all([api("GET", "/api/governance"), api("GET", "/api/proposals")])
    .then(([d, p]) => { $("#gov-count").textContent = (d.findings || []).length + (p.proposals || []).length || ""; })
    .catch(() => {});
  listenForChanges();
}

document.addEventListener("DOMContentLoaded", init);
