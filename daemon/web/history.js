/* The memory editor's History panel (docs/history.md).
 *
 * A separate file so the editor code in app.js stays as it is: app.js announces
 * each memory it shows with a "ctxos:editor" event; this panel lists that
 * memory's versions (git commits, or the journal in .ctxos/), shows what each
 * changed as a diff (or how it differs from the file now), and restores one
 * through POST /api/memories/{id}/revert: a new version, written by the same
 * write gate as every save (a protected memory or a newer edit on disk is
 * refused, and said so). Uses app.js's helpers: $, el, api, state, openMemory, count.
 */
"use strict";

(function () {
  let shownFor = null;        // the memory id the panel is showing
  let versions = [];

  function panel() {
    let node = document.getElementById("history-panel");
    if (!node) {
      node = el("details", { id: "history-panel", class: "history-panel" },
        el("summary", {}, "History ", el("span", { class: "muted", id: "history-count" })),
        el("div", { id: "history-note", class: "editor-note", hidden: true }),
        el("table", { class: "data history-table", id: "history-table" },
          el("thead", {}, el("tr", {},
            el("th", { class: "num", text: "#" }), el("th", { text: "When" }), el("th", { text: "Who" }),
            el("th", { text: "Tool" }), el("th", { text: "Change" }), el("th", { text: "" }))),
          el("tbody")),
        el("div", { id: "history-diff", class: "history-diff", hidden: true }));
      $("#editor").after(node);
      node.addEventListener("toggle", () => { if (node.open) load(); });
    }
    return node;
  }

  function note(message, kind) {
    const box = $("#history-note");
    box.hidden = !message;
    box.className = "editor-note" + (kind === "conflict" ? " conflict" : "");
    box.textContent = message || "";
  }

  function memoryPath(id, rest) {
    return `/api/memories/${encodeURIComponent(id)}/${rest}`;
  }

  async function load() {
    const m = state.editing;
    if (!m || !m.id) return;
    shownFor = m.id;
    try {
      const data = await api("GET", memoryPath(m.id, "history"));
      if (shownFor !== m.id) return;
      versions = data.versions || [];
      render(data);
    } catch (e) {
      note(`History unavailable: ${e.message}`, "conflict");
    }
  }

  function render(data) {
    const where = { git: "git commits", journal: "journal in .ctxos/", off: "history is off" }[data.mode] || data.mode;
    $("#history-count").textContent = `${count(versions.length, "version", "versions")} · ${where}`;
    const tbody = $("#history-table tbody");
    tbody.replaceChildren();
    const newest = versions.length ? versions[0].n : null;
    for (const v of versions) {
      tbody.append(el("tr", { dataset: { n: String(v.n) } },
        el("td", { class: "num", text: String(v.n) }),
        el("td", { text: (v.at || "").replace("T", " ").slice(0, 19) }),
        el("td", { text: v.who }),
        el("td", { text: v.tool }),
        el("td", { class: "history-summary", text: v.summary }),
        el("td", { class: "history-actions" },
          el("button", { type: "button", class: "small history-diff-btn", onclick: () => showDiff(v, "diff"), text: "Diff" }),
          el("button", { type: "button", class: "small", onclick: () => showDiff(v, "diff_to_current"), text: "vs now" }),
          v.n === newest ? null :
            el("button", { type: "button", class: "small primary history-restore", onclick: () => restore(v), text: "Restore" }))));
    }
    if (!versions.length) tbody.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No versions recorded yet: the next save starts the history." })));
  }

  function diffView(text) {
    const pre = el("pre", { class: "diff" });
    for (const line of (text || "").split("\n")) {
      let kind = "";
      if (line.startsWith("+++") || line.startsWith("---")) kind = "head";
      else if (line.startsWith("@@")) kind = "hunk";
      else if (line.startsWith("+")) kind = "add";
      else if (line.startsWith("-")) kind = "del";
      pre.append(el("span", { class: kind ? `d-${kind}` : null, text: line + "\n" }));
    }
    return pre;
  }

  async function showDiff(v, which) {
    const box = $("#history-diff");
    try {
      const data = await api("GET", memoryPath(shownFor, `history/${v.n}`));
      const title = which === "diff" ? `What version ${v.n} changed` : `Version ${v.n} compared with the file now`;
      box.replaceChildren(el("h4", { text: title }),
        data[which] ? diffView(data[which]) : el("p", { class: "muted", text: "No difference." }));
      box.hidden = false;
    } catch (e) {
      note(`Could not load version ${v.n}: ${e.message}`, "conflict");
    }
  }

  async function restore(v) {
    const m = state.editing;
    if (!m || m.id !== shownFor) return;
    if (state.dirty) {
      note("You have unsaved edits in the editor: save or revert them before restoring a version.", "conflict");
      return;
    }
    try {
      const result = await api("POST", memoryPath(m.id, "revert"), { to: v.n, expected_version: m.version, expected_checksum: m.checksum });
      note(result.changed ? `Restored version ${v.n}: ${m.id} is now version ${result.version}.`
                          : `${m.id} already has the text of version ${v.n}; nothing was written.`);
      await openMemory(m.id);
      await load();
    } catch (e) {
      note(`Not restored: ${e.message}`, "conflict");
    }
  }

  document.addEventListener("ctxos:editor", (ev) => {
    const m = ev.detail || {};
    const node = panel();
    node.hidden = !m.id;
    if (m.id !== shownFor) {
      $("#history-diff").hidden = true;
      note(null);
    }
    if (m.id && node.open) load();
  });
})();
