"""The readable map and the governance queue in real headless Chromium, against real daemon processes.

- The graph of the Obsidian help vault (a copy in a temp folder: the daemon
  writes router files into its workspace, and the shared corpus must stay
  untouched): communities laid out apart in named frames, a legend of names,
  filters by community and type, labels on zoom.
- The governance view: a near-duplicate finding as a similarity table, a
  conflict as its contradicting sentences side by side, an agent's flag with its
  reason, and a merge proposal with its diff, accepted from the page.
- The Memories list shows titles.

Screenshots of these views go to the test artifacts folder; with
``CTXOS_UPDATE_SCREENSHOTS=1`` they also replace ``docs/screenshots/`` (palette
PNGs, kept small), so an ordinary test run leaves the checkout clean. Playwright drives Debian's
``/usr/bin/chromium``, as in ``test_web_browser.py``.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import browser, log_in, open_page  # noqa: F401  (browser is a fixture; skips without Chromium)
from conftest import shared_data
from daemon_helpers import DaemonProcess, memory_text, short_runtime_dir, start_daemon
from mcp_helpers import APOLLO_BODY, apollo_files
from web_helpers import api, artifacts_dir

pytestmark = pytest.mark.slow

TIMEOUT_MS = 45_000  # generous: a loaded 2-core machine renders slowly
DOCS_SHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"

BODY = APOLLO_BODY
GOVERNANCE_FILES = {
    **apollo_files(),
    "08-rules/go-style.md": memory_text(
        "go-style",
        "Go code style for the team. Always use tabs for indentation in Go source files. Run gofmt before each commit.",
        type="rule",
        tags=["go", "style"],
    ),
    "04-skills/go-format.md": memory_text(
        "go-format",
        "How we format Go code. Never use tabs for indentation in Go source files. Run gofmt before each commit.",
        type="skill",
        tags=["go", "style"],
    ),
    "04-skills/deploy.md": memory_text("deploy", "Deploy with the release checklist.", type="skill"),
}


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with open_page(browser, width=1280, height=820, timeout_ms=TIMEOUT_MS) as pg:
        yield pg


@pytest.fixture
def daemon_on(tmp_path: Path) -> Iterator[Any]:
    """Start daemons on demand; stopped after the test (ask for it before ``page``, so the page closes first)."""
    started: list[DaemonProcess] = []

    def start(root: Path) -> DaemonProcess:
        proc = start_daemon(root, runtime_dir=short_runtime_dir(), http=True, debounce_ms=50)
        started.append(proc)
        assert proc.http_url, proc.output()[-3000:]
        return proc

    yield start
    for proc in started:
        proc.stop()


def shot(pg: Any, name: str, *, full_page: bool = False) -> Path:
    """Screenshot to the artifacts folder and, with CTXOS_UPDATE_SCREENSHOTS=1, as a small PNG to docs/screenshots/."""
    from PIL import Image

    raw = pg.screenshot(full_page=full_page)
    (artifacts_dir() / f"{name}.png").write_bytes(raw)
    if os.environ.get("CTXOS_UPDATE_SCREENSHOTS") != "1":
        return artifacts_dir() / f"{name}.png"
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    target = DOCS_SHOTS / f"{name}.png"
    Image.open(io.BytesIO(raw)).convert("RGB").quantize(colors=128).save(target, optimize=True)
    print(f"screenshot: {target} ({target.stat().st_size // 1024} KiB)")
    return target


def test_obsidian_graph_is_a_named_map_with_filters(tmp_path: Path, daemon_on: Any, page: Any) -> None:
    vault = tmp_path / "obsidian-help"
    shutil.copytree(shared_data("obsidian-help"), vault)
    for folder in [vault, *vault.rglob("*")]:
        if folder.is_dir():
            folder.chmod(0o755)  # the copy keeps the corpus's read-only bits
    daemon = daemon_on(vault)
    url = daemon.http_url
    graph = api(url, "GET", "/api/graph")
    assert all(isinstance(n["x"], float) for n in graph["nodes"])  # positions come from the server
    named = [c for c in graph["communities"] if c["size"] > 1]
    log_in(page, daemon)
    page.goto(url + "/#/graph")
    page.wait_for_function(f"document.querySelector('#graph-canvas').dataset.nodes === String({len(graph['nodes'])})")
    # The legend names communities by their terms, largest first; never "community 3".
    legend = page.locator("#graph-legend .legend-item .legend-name")
    shown = [legend.nth(i).inner_text() for i in range(legend.count())]
    assert shown == [c["name"] for c in graph["communities"]][:16]
    node_community = {n["id"]: n["community"] for n in graph["nodes"]}
    sync = next(c for c in graph["communities"] if c["id"] == node_community["Introduction to Obsidian Sync"])
    assert not any(s.startswith("community ") for s in shown) and "sync" in sync["terms"] and sync["name"] in shown
    # Each community of 3+ memories is a frame labelled with its name.
    frames = page.evaluate("state.cy.nodes('.community').map((n) => n.data('label'))")
    assert sorted(frames) == sorted(c["name"] for c in named if c["size"] >= 3)
    # 172 memories: labels on hover, all of them once zoomed in.
    assert page.evaluate("document.querySelector('#graph-canvas').dataset.labels") == "hover"
    shot(page, "graph-obsidian")
    # (void: returning the cytoscape object would make Playwright serialise the whole graph)
    page.evaluate("void state.cy.zoom({level: 1.6, renderedPosition: {x: 400, y: 300}})")
    page.wait_for_function("document.querySelector('#graph-canvas').dataset.labels === 'zoom'")
    assert page.evaluate("state.cy.nodes('.memory.labelled').length") == len(graph["nodes"])
    # The start-up route can land after a hash change (CI saw it redraw the graph and drop the zoom):
    # asking for the same graph again keeps the drawing, and a redraw after a change keeps the view.
    drawn = "(window.drawnBefore = state.cy, true)"
    assert page.evaluate(
        f"{drawn} && Promise.all([loadGraph(), loadGraph()]).then(() => state.cy === window.drawnBefore)"
    )
    assert page.evaluate("state.graph = null, loadGraph(true).then(() => state.cy.zoom())") == pytest.approx(1.6)
    assert page.evaluate("state.cy !== window.drawnBefore")  # redrawn from the fresh graph, same view
    assert page.evaluate("state.cy.nodes('.memory.labelled').length") == len(graph["nodes"])
    # Filter by community (from the legend) and by type.
    page.locator(f"#graph-legend .legend-item[data-community='{sync['id']}']").click()
    page.wait_for_function(f"document.querySelector('#graph-canvas').dataset.shown === '{sync['size']}'")
    assert page.input_value("#graph-filter-community") == str(sync["id"])
    visible = page.evaluate("state.cy.nodes('.memory').not('.filtered').map((n) => n.id())")
    assert set(visible) == {n["id"] for n in graph["nodes"] if n["community"] == sync["id"]}
    shot(page, "graph-obsidian-one-community")
    page.select_option("#graph-filter-community", "")
    page.select_option("#graph-filter-type", "resource")
    resources = sum(1 for n in graph["nodes"] if n["type"] == "resource")
    page.wait_for_function(f"document.querySelector('#graph-canvas').dataset.shown === '{resources}'")
    # A memory's card names its community.
    page.select_option("#graph-filter-type", "")
    page.evaluate("void state.cy.$id('Introduction to Obsidian Sync').emit('tap')")
    assert sync["name"] in page.inner_text("#graph-node")

    # Simulate names the community of each memory it would load.
    page.goto(url + "/#/simulate")
    page.fill("#sim-query", "set up obsidian sync on a new device")
    page.click("#sim-run")
    row = page.locator("#sim-table tr[data-id='Set up Obsidian Sync']")
    row.wait_for()
    assert row.locator(".community-chip").inner_text() == sync["name"]

    # The Memories list shows titles: "Cards view", not "Cards view — Settings".
    page.goto(url + "/#/memories")
    item = page.locator("#mem-list li[data-id='Cards view']")
    item.wait_for()
    assert item.locator(".mem-title").inner_text() == "Cards view"
    assert "Settings" not in item.inner_text() and item.inner_text().count("Cards view") == 1
    intro = page.locator("#mem-list li[data-id='Introduction to Bases']")
    assert intro.locator(".mem-title").inner_text() == "Introduction to Bases"
    assert intro.locator(".l0").inner_text().startswith("Create database-like views")  # no title repeated
    shot(page, "memories-titles")


def test_governance_cards_render_evidence_and_a_proposal_is_accepted(
    make_workspace: Any, daemon_on: Any, page: Any
) -> None:
    root = make_workspace(GOVERNANCE_FILES)
    daemon = daemon_on(root)
    url = daemon.http_url
    daemon.call(
        "flag", id="deploy", kind="stale", reason="the release checklist moved to the wiki", by="claude-code via MCP"
    )
    proposal = daemon.call(
        "propose_merge",
        ids=["apollo-storage", "apollo-db"],
        l0="Apollo billing database",
        merged_text=BODY + " Restores are tested monthly; the bucket is versioned.",
        by="claude-code via MCP",
    )
    # A proposal whose source a person edits afterwards: shown stale, and the page offers no Accept.
    stale = daemon.call(
        "propose_merge",
        ids=["go-style", "go-format"],
        l0="Go formatting",
        merged_text="Use gofmt; it indents with tabs.",
        by="claude-code via MCP",
    )
    go_format = root / "04-skills/go-format.md"
    go_format.write_text(go_format.read_text().replace("How we format Go code.", "How we format Go code today."))
    daemon.wait_for(lambda: daemon.call("proposal", id=stale["id"])["stale"], message="the edit to be indexed")
    log_in(page, daemon)
    page.goto(url + "/#/governance")
    # Near-duplicates: a similarity table, not {"a": ..., "overlap": ...}.
    dup = page.locator(".card[data-kind='consolidation']")
    dup.wait_for()
    rows = dup.locator("table.evidence-sim tbody tr")
    assert rows.count() == 1 and "apollo-db" in rows.nth(0).inner_text() and "0.86" in rows.nth(0).inner_text()
    # A conflict: the contradicting sentences side by side, under each memory's id.
    conflict = page.locator(".card[data-kind='conflict']")
    quotes = conflict.locator(".contradiction blockquote")
    assert quotes.count() == 2
    heads = conflict.locator(".sbs-head")
    said = {heads.nth(i).inner_text(): quotes.nth(i).inner_text() for i in range(2)}
    assert said == {
        "go-format": "Never use tabs for indentation in Go source files.",
        "go-style": "Always use tabs for indentation in Go source files.",
    }
    # The agent's flag, with who said what.
    flag = page.locator(".card[data-kind='flag']")
    assert "claude-code via MCP" in flag.inner_text() and "the release checklist moved to the wiki" in flag.inner_text()
    for card in (dup, conflict, flag):
        text = card.locator(".evidence").inner_text()
        assert "{" not in text and '"' not in text, text  # no raw JSON anywhere
    stale_card = page.locator(f".card.proposal.stale[data-proposal='{stale['id']}']")
    assert "go-format changed since the proposal" in stale_card.inner_text()
    assert stale_card.locator("button[data-action='accept']").is_disabled()
    # The proposal, with a diff against each source.
    card = page.locator(f".card[data-proposal='{proposal['id']}']")
    assert card.locator("details.diff-box").count() == 2
    assert (
        "+" + BODY + " Restores are tested monthly; the bucket is versioned."
        in card.locator(".d-add").first.inner_text()
    )
    assert page.locator("#gov-count").inner_text() == str(page.locator(".card").count())
    shot(page, "governance", full_page=True)
    # Accept from the page: written through the write gate, the other source archived.
    card.locator("button[data-action='accept']").click()
    card.wait_for(state="detached")
    assert "the bucket is versioned" in (root / "03-projects/apollo-storage.md").read_text()
    assert (root / "_archive/03-projects/apollo-db.md").is_file()
    assert daemon.call("proposal", id=proposal["id"])["status"] == "accepted"
