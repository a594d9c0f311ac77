"""The web view in real headless Chromium, against a real daemon process.

Playwright for Python drives Debian's ``/usr/bin/chromium`` (``executable_path``;
no browser download). Why Playwright rather than Selenium: its auto-waiting
locators and ``wait_for_function`` make the checks on a live page (events
arriving, the graph laying out) deterministic without sleeps, and it needs no
separate driver binary matching the browser version (Selenium would need
Debian's ``chromium-driver`` too).

Every page logs in as a person does: a one-time link from RPC ``web_login``
(what ``ctxos open`` prints) sets the session cookie, then the page loads.

Each view is screenshotted to ``test-artifacts/web/`` (or ``$CTXOS_TEST_ARTIFACTS/web``);
the path is printed. The module is skipped, with the reason, where Chromium or
Playwright is not installed (``.ci/run`` installs both).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import browser, log_in, open_page  # noqa: F401  (browser is a fixture; skips without Chromium)
from daemon_helpers import DaemonProcess, short_runtime_dir, start_daemon
from web_helpers import api, artifacts_dir, build_workspace, http_daemon

pytestmark = pytest.mark.slow

TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with http_daemon(tmp_path_factory.mktemp("web")) as proc:
        yield proc


@pytest.fixture(scope="module")
def url(daemon: DaemonProcess) -> str:
    return daemon.http_url


@pytest.fixture
def page(browser: Any, daemon: DaemonProcess) -> Iterator[Any]:
    with open_page(browser, width=1360, height=900, timeout_ms=TIMEOUT_MS) as pg:
        log_in(pg, daemon)
        yield pg


def screenshot(pg: Any, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def test_simulate_view_shows_memories_with_tiers(page: Any, url: str) -> None:
    query = "rust error handling with anyhow"
    page.goto(url + "/#/simulate")
    page.wait_for_function("document.querySelector('#sim-intent').options.length > 1")
    page.fill("#sim-query", query)
    page.fill("#sim-budget", "1500")
    page.click("#sim-run")
    page.wait_for_selector("#sim-table tr[data-id='rust-error-handling']")
    expected = api(url, "POST", "/api/simulate", {"query": query, "budget_tokens": 1500})
    rows = page.locator("#sim-table tbody tr[data-id]")
    assert rows.count() == len(expected["selected"])
    shown = [
        (rows.nth(i).get_attribute("data-id"), rows.nth(i).locator(".tier").inner_text()) for i in range(rows.count())
    ]
    assert shown == [(s["id"], s["tier"]) for s in expected["selected"]]
    assert ("rust-error-handling", "L2") in shown and shown[0][0] == "no-secrets"
    top = page.locator("#sim-table tr[data-id='rust-error-handling']")
    assert top.locator("td").nth(3).inner_text() == str(
        next(s["tokens"] for s in expected["selected"] if s["id"] == "rust-error-handling")
    )
    assert top.locator(".stack i").count() >= 3  # several signals contribute
    assert page.locator("#sim-intent-detected").inner_text() == expected["intent"]
    # Explainability (issue 13): why this intent, which model, where each memory came from.
    assert page.locator("#sim-intent-reason").inner_text() == expected["intent_reason"]
    assert expected["semantic_model"] in page.locator("#sim-semantic-model").inner_text()
    top_sources = next(s["sources"] for s in expected["selected"] if s["id"] == "rust-error-handling")
    assert ", ".join(top_sources) in top.locator(".sim-sources").inner_text()
    # The rendered context, one click away.
    assert not page.is_visible("#sim-rendered")
    page.click("#sim-show-rendered")
    assert page.is_visible("#sim-rendered")
    assert page.locator("#sim-rendered").inner_text().strip() == expected["rendered"].strip()
    screenshot(page, "1-simulate")


def test_graph_renders_every_memory(page: Any, url: str) -> None:
    graph = api(url, "GET", "/api/graph")
    memories = api(url, "GET", "/api/memories")["memories"]
    page.goto(url + "/#/graph")
    page.wait_for_function("document.querySelector('#graph-canvas').dataset.nodes !== undefined")
    assert page.evaluate("state.cy.nodes('.memory').length") == len(graph["nodes"]) == len(memories)
    assert page.evaluate("state.cy.edges().length") == len(graph["edges"])
    communities = {n["community"] for n in graph["nodes"]}
    assert page.locator("#graph-legend .legend-item").count() == len(communities)
    names = [page.locator("#graph-legend .legend-name").nth(i).inner_text() for i in range(len(communities))]
    # Counts read as words: "1 community", never "1 communities".
    assert page.evaluate("[count(1, 'memory', 'memories'), count(2, 'memory', 'memories')]") == [
        "1 memory",
        "2 memories",
    ]
    known = {n["community"] for n in graph["nodes"] if n["community"] is not None and n["community"] >= 0}
    stats = page.locator("#graph-stats").inner_text()
    assert stats.startswith(f"{len(memories)} memories · {len(graph['edges'])} links · ")
    assert stats.endswith(f"{len(known)} community" if len(known) == 1 else f"{len(known)} communities")
    assert names == [c["name"] for c in graph["communities"]] and not any(n.startswith("community ") for n in names)
    # Coloured by community: the Rust cluster shares one colour, the baking one another.
    colour = "(id) => state.cy.$id(id).data('colour')"
    assert page.evaluate(colour, "rust-async") == page.evaluate(colour, "rust-testing")
    assert page.evaluate(colour, "rust-async") != page.evaluate(colour, "sourdough")
    screenshot(page, "2-graph-by-community")
    page.click("#graph-colour button[data-colour='type']")
    assert page.evaluate(colour, "rust-async") == page.evaluate(colour, "rust-testing")  # both skills
    assert page.evaluate(colour, "sourdough") != page.evaluate(colour, "flour-choice")  # resource vs decision
    screenshot(page, "3-graph-by-type")
    # Click a node on the canvas, then through to the memory.
    box = page.locator("#graph-canvas").bounding_box()
    pos = page.evaluate("state.cy.$id('sourdough').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_selector("#graph-node h4:has-text('sourdough')")
    page.click("#graph-open")
    page.wait_for_function("document.querySelector('#ed-id').value === 'sourdough'")
    assert page.url.endswith("#/memories/sourdough")
    assert "Sourdough bread" in page.input_value("#ed-l0")


def test_governance_action_changes_the_files(page: Any, url: str, daemon: DaemonProcess) -> None:
    page.goto(url + "/#/governance")
    decay = page.locator(".card[data-kind='decay']")
    decay.wait_for()
    assert "old-laptop-setup" in decay.inner_text()
    assert page.locator(".card").count() == len(api(url, "GET", "/api/governance")["findings"])
    screenshot(page, "4-governance")
    # Archive the decayed memory: the file moves to _archive/ and the finding goes away.
    decay.locator("button[data-action='archive']").click()
    decay.wait_for(state="detached")
    assert not (daemon.root / "01-context/old-laptop-setup.md").exists()
    assert (daemon.root / "_archive/01-context/old-laptop-setup.md").is_file()
    # Dismiss the expired scratch finding: it stays dismissed (recorded in .ctxos/).
    scratch = page.locator(".card[data-kind='scratch_expired']")
    fingerprint = scratch.get_attribute("data-finding")
    scratch.locator("button[data-action='dismiss']").click()
    scratch.wait_for(state="detached")
    assert fingerprint in json.loads((daemon.root / ".ctxos/dismissed.json").read_text())
    assert (daemon.root / "09-scratch/todo-scratch.md").is_file()  # dismissing keeps the file
    assert page.locator("#gov-count").inner_text() == str(page.locator(".card").count())


def test_health_badge_and_parts(page: Any, url: str) -> None:
    health = api(url, "GET", "/api/health")
    page.goto(url + "/#/health")
    page.wait_for_selector(".part[data-part='cleanliness']")
    assert page.locator("#health-badge").inner_text() == f"health {health['score']}"
    assert page.locator("#health-score").inner_text().startswith(str(health["score"]))
    names = [page.locator(".part").nth(i).get_attribute("data-part") for i in range(page.locator(".part").count())]
    assert names == [p["name"] for p in health["parts"]]
    assert "05-resources/broken.md" in page.locator("#health-invalid").inner_text()
    screenshot(page, "5-health")


def test_editor_saves_and_follows_the_file_on_disk(page: Any, url: str, daemon: DaemonProcess) -> None:
    path = daemon.root / "04-skills/rust-testing.md"
    page.goto(url + "/#/memories/rust-testing")
    page.wait_for_function("document.querySelector('#ed-id').value === 'rust-testing'")
    assert page.locator("#mem-list li").count() == len(api(url, "GET", "/api/memories")["memories"])

    # Edit in the page: the file on disk changes, version-checked.
    page.fill("#ed-l0", "Testing Rust crates: unit, integration and doc tests.")
    page.fill("#ed-tags", "rust, testing, doctest")
    page.click("#ed-save")
    page.wait_for_selector("#ed-note:has-text('Saved')")
    text = path.read_text()
    assert (
        "l0: 'Testing Rust crates: unit, integration and doc tests.'" in text
        or "l0: \"Testing Rust crates: unit, integration and doc tests.\"" in text
        or "l0: Testing Rust crates: unit, integration and doc tests." in text
    )
    assert "version: 2" in text and "doctest" in text
    assert "version 2" in page.inner_text("#ed-meta")

    # Someone edits the file elsewhere: the page reloads it by itself.
    path.write_text(text.replace("cargo test runs both kinds.", "cargo test runs unit, integration and doc tests."))
    page.wait_for_function("document.querySelector('#ed-l1').value.includes('unit, integration and doc tests')")
    assert "changed on disk" in page.inner_text("#ed-note")
    screenshot(page, "6-editor-reloaded")

    # Unsaved changes in the page + another edit on disk: the page warns, and saving is refused.
    page.fill("#ed-l0", "My unsaved summary")
    on_disk = path.read_text().replace("Put unit tests", "Always put unit tests")
    path.write_text(on_disk)
    page.wait_for_selector("#ed-note.conflict")
    page.click("#ed-save")
    page.wait_for_selector("#ed-note:has-text('Not saved')")
    assert path.read_text() == on_disk
    assert re.search(r"changed since you read it", page.inner_text("#ed-note"))
    screenshot(page, "7-editor-conflict")
    page.click("#ed-note button")  # load the version on disk
    page.wait_for_function("document.querySelector('#ed-l1').value.includes('Always put unit tests')")


def test_new_memory_from_the_page(page: Any, url: str, daemon: DaemonProcess) -> None:
    page.goto(url + "/#/memories")
    page.wait_for_selector("#mem-list li")
    page.click("#mem-new")
    page.select_option("#ed-type", "decision")
    page.fill("#ed-id", "bake-on-sundays")
    page.fill("#ed-l0", "We bake bread on Sundays.")
    page.fill("#ed-l2", "The oven is free and the starter is fed on Saturday night.")
    page.click("#ed-save")
    page.wait_for_selector("#ed-note:has-text('Saved')")
    target = daemon.root / "06-decisions/bake-on-sundays.md"
    assert target.is_file() and "starter is fed" in target.read_text()
    page.wait_for_selector("#mem-list li[data-id='bake-on-sundays']")
    assert page.url.endswith("#/memories/bake-on-sundays")


def test_page_needs_the_one_time_link_and_then_works(browser: Any, tmp_path: Path) -> None:
    """No cookie: the page says to run `ctxos open` and shows no data. The link sets an HttpOnly,
    SameSite=Strict cookie, works once, and then fetches and the event stream work with the cookie.
    A config broken while the page is open is named (file and line) on the page."""
    root = build_workspace(tmp_path / "ws")
    proc = start_daemon(root, runtime_dir=short_runtime_dir(), http=True, debounce_ms=50)
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(proc.http_url + "/#/simulate")  # the shell loads, the data does not
        pg.wait_for_selector("#banner:has-text('ctxos open')")
        assert pg.locator("#workspace-path").inner_text() == ""
        assert pg.evaluate("document.body.dataset.auth") == "none"

        link = proc.call("web_login")["url"]
        pg.goto(link)
        assert pg.url == proc.http_url + "/"
        (cookie,) = context.cookies()
        assert cookie["name"] == f"ctxos_session_{proc.http_port}" and cookie["httpOnly"]
        assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
        assert pg.evaluate("document.cookie") == ""  # page scripts cannot read it
        pg.wait_for_function("document.querySelector('#workspace-path').textContent.length > 0")
        assert pg.locator("#workspace-path").inner_text() == str(root.resolve())
        pg.wait_for_selector("#live-indicator[data-state='on']")  # /api/events accepted the cookie
        pg.fill("#sim-query", "sourdough starter")
        pg.click("#sim-run")
        pg.wait_for_selector("#sim-table tr[data-id='sourdough']")

        # The same link a second time: refused, and it says what to do.
        other = browser.new_context()
        try:
            again = other.new_page()
            response = again.goto(link)
            assert response.status == 401 and "ctxos open" in again.content()
            assert other.cookies() == []
        finally:
            other.close()

        # A typo in _config.yaml: the daemon keeps its settings and the page names the file and line.
        (root / "_config.yaml").write_text("daemon:\n  debounce_ms: 50\nquery: [oops\n", encoding="utf-8")
        proc.wait_for(lambda: proc.status().get("config_error"), message="the config error")
        pg.reload()
        pg.wait_for_selector("#config-error:has-text('_config.yaml line 3')")
    finally:
        context.close()
        proc.stop()


def test_history_panel_shows_diffs_and_restores(page: Any, url: str, daemon: DaemonProcess) -> None:
    """The editor's History panel (journal mode here: the workspace is no git repository)."""
    path = daemon.root / "05-resources/oven-temps.md"
    first = api(url, "GET", "/api/memories/oven-temps")
    api(
        url,
        "PUT",
        "/api/memories/oven-temps",
        {"version": first["version"], "l0": first["l0"], "content": "Bake at 250C for the first 20 minutes."},
    )
    page.goto(url + "/#/memories/oven-temps")
    page.wait_for_function("document.querySelector('#ed-id').value === 'oven-temps'")
    page.click("#history-panel > summary")
    page.wait_for_selector("#history-table tbody tr[data-n]")
    rows = page.locator("#history-table tbody tr[data-n]")
    assert rows.count() == 2  # the file as found on disk, then the page's save
    assert "web page via REST" in rows.nth(0).inner_text()
    rows.nth(0).locator(".history-diff-btn").click()
    page.wait_for_selector("#history-diff pre.diff .d-add")
    assert "Bake at 250C" in page.inner_text(
        "#history-diff pre.diff .d-add >> nth=-1"
    ) or "Bake at 250C" in page.inner_text("#history-diff")
    shot = screenshot(page, "8-editor-history")
    if os.environ.get("CTXOS_DOCS_SCREENSHOTS"):  # refresh docs/screenshot-history.png on request only
        shutil.copy(shot, Path(__file__).resolve().parents[1] / "docs" / "screenshot-history.png")
    rows.nth(1).locator(".history-restore").click()  # back to the version found on disk
    page.wait_for_selector("#history-note:has-text('Restored version 1')")
    assert "Bake at 250C" not in path.read_text()
    assert f"version: {first['version'] + 2}" in path.read_text()
    page.wait_for_function("document.querySelectorAll('#history-table tbody tr[data-n]').length === 3")
    assert page.locator("#history-table tbody tr[data-n]").nth(0).locator("td").nth(3).inner_text() == "revert"
    screenshot(page, "9-editor-history-restored")


def test_top_bar_shows_indexing_while_the_daemon_builds(browser: Any, tmp_path: Path) -> None:
    """Issue 16: during a cold build the top bar says "indexing n of N" (the page answers meanwhile),
    and the line goes away once the build is done."""
    from daemon_helpers import memory_text

    root = build_workspace(tmp_path / "ws")
    for i in range(8000):
        (root / "05-resources" / f"note-{i:05d}.md").write_text(memory_text(f"note-{i:05d}", f"Note {i}."))
    daemon = start_daemon(root, http=True, wait_ready=False, runtime_dir=short_runtime_dir())
    try:
        daemon.wait_for(
            lambda: bool(daemon.status().get("http")) and daemon.status()["state"] == "indexing",
            300,
            message="HTTP and a partial index",
        )
        with open_page(browser, width=1200, height=700, timeout_ms=TIMEOUT_MS) as pg:
            log_in(pg, daemon)
            pg.wait_for_selector("#index-progress", state="visible")
            assert re.fullmatch(
                r"indexing [\d,]+ of [\d,]+|embedding \([\d,]+ memories\)", pg.locator("#index-progress").inner_text()
            )
            screenshot(pg, "0-indexing")
            pg.wait_for_selector("#index-progress", state="hidden", timeout=300_000)
            assert daemon.status()["state"] == "ready"
    finally:
        daemon.stop()
