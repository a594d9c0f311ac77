"""REST API under /api/: every endpoint and its errors, against a real daemon process.

One daemon (real process, real HTTP on a free 127.0.0.1 port, real watcher)
serves the module's workspace from ``web_helpers.WORKSPACE_FILES``. Tests
that write use their own memories or run in an order that keeps the others'
expectations (the graph and governance tests read before the archive test moves
files away).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DaemonProcess, auth_headers, free_port, short_runtime_dir, start_daemon
from web_helpers import INVALID_FILE, MEMORY_IDS, build_workspace, http, http_daemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with http_daemon(tmp_path_factory.mktemp("rest")) as proc:
        yield proc


@pytest.fixture(scope="module")
def url(daemon: DaemonProcess) -> str:
    return daemon.http_url


def get(url: str, path: str, **kw: Any):
    return http("GET", url + path, **kw)


def post(url: str, path: str, body: Any = None, **kw: Any):
    return http("POST", url + path, body if body is not None else {}, **kw)


def put(url: str, path: str, body: Any, **kw: Any):
    return http("PUT", url + path, body, **kw)


def error_of(result) -> dict[str, Any]:
    """The JSON error body every /api/ error has."""
    assert result.headers.get("Content-Type", "").startswith("application/json"), result.body[:200]
    error = result.json()["error"]
    assert error["status"] == result.status and error["message"]
    return error


# ---------------------------------------------------------------- status, simulate


def test_api_root_lists_every_endpoint(url: str) -> None:
    result = get(url, "/api/")
    assert result.status == 200
    listed = {(e["method"], e["path"]) for e in result.json()["endpoints"]}
    for expected in [
        ("GET", "/api/status"),
        ("POST", "/api/simulate"),
        ("GET", "/api/memories"),
        ("PUT", "/api/memories/{id}"),
        ("GET", "/api/events"),
    ]:
        assert expected in listed
    assert all(e["about"] for e in result.json()["endpoints"]), "each endpoint says what it does"


def test_status_has_what_the_page_needs(url: str, daemon: DaemonProcess) -> None:
    r = get(url, "/api/status")
    assert r.status == 200
    data = r.json()
    assert data["workspace"] == str(daemon.root)
    assert data["state"] == "ready" and data["memories"] == len(MEMORY_IDS)
    assert data["default_budget"] == 4000
    assert {"default", "debug", "brainstorm"} <= set(data["intents"])
    assert "skill" in data["types"] and data["signals"][0] == "semantic"


def test_simulate_is_the_one_query_path(url: str, daemon: DaemonProcess) -> None:
    body = {"query": "rust error handling with anyhow", "budget_tokens": 1500}
    r = post(url, "/api/simulate", body)
    assert r.status == 200, r.body
    data = r.json()
    tiers = {s["id"]: s["tier"] for s in data["selected"]}
    assert tiers["rust-error-handling"] == "L2"
    assert data["selected"][0]["id"] == "no-secrets" and data["selected"][0]["reason"] == "rule"
    top = next(s for s in data["selected"] if s["id"] == "rust-error-handling")
    assert abs(sum(top["shares"].values()) - top["score"]) < 1e-3
    assert data["tokens_used"] <= 1500 and "anyhow::Context" in data["rendered"]
    # Same selection as get_context over the socket (the same engine call).
    socket_result = daemon.call("simulate", **body)
    assert [(s["id"], s["tier"], s["tokens"]) for s in socket_result["selected"]] == [
        (s["id"], s["tier"], s["tokens"]) for s in data["selected"]
    ]
    assert socket_result["rendered"] == data["rendered"]


def test_simulate_does_not_count_as_a_load(url: str, daemon: DaemonProcess) -> None:
    def loaded() -> int:
        parts = {p["name"]: p for p in get(url, "/api/health").json()["parts"]}
        return parts["coverage"]["data"]["loaded"]

    before = loaded()
    for _ in range(3):
        assert post(url, "/api/simulate", {"query": "oven temperatures for bread"}).status == 200
    assert loaded() == before
    daemon.call("get_context", query="oven temperatures for bread")  # a real agent load
    assert loaded() > before


def test_simulate_intent_and_errors(url: str) -> None:
    r = post(url, "/api/simulate", {"query": "sourdough ideas", "intent": "brainstorm"})
    assert r.status == 200 and r.json()["intent"] == "brainstorm"
    cases = [
        ({}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "x", "budget_tokens": -5}, "budget_tokens"),
        ({"query": "x", "budget_tokens": "many"}, "budget_tokens"),
        ({"query": "x", "colour": "red"}, "colour: unknown parameter"),
        ({"query": "x", "intent": "telepathy"}, "unknown intent"),
    ]
    for body, words in cases:
        r = post(url, "/api/simulate", body)
        assert r.status == 400, (body, r.body)
        assert words in error_of(r)["message"]
    assert post(url, "/api/simulate", raw=b"{not json").status == 400
    assert "JSON object" in error_of(http("POST", url + "/api/simulate", raw=b"[1, 2]"))["message"]


# ---------------------------------------------------------------- memories


def test_list_memories_with_filters(url: str) -> None:
    r = get(url, "/api/memories")
    assert r.status == 200
    data = r.json()
    assert {m["id"] for m in data["memories"]} >= set(MEMORY_IDS) - {"todo-scratch"}
    assert all("l2" not in m for m in data["memories"])
    skills = get(url, "/api/memories?type=skill").json()["memories"]
    assert {m["id"] for m in skills} == {"rust-error-handling", "rust-async", "rust-testing"}
    baking = get(url, "/api/memories?q=BAKING").json()["memories"]
    assert {m["id"] for m in baking} == {"sourdough", "oven-temps", "flour-choice"}
    page = get(url, "/api/memories?limit=2&offset=1").json()
    assert page["count"] == 2 and page["total"] >= 9
    assert "type: must be one of" in error_of(get(url, "/api/memories?type=poem"))["message"]
    assert get(url, "/api/memories?limit=lots").status == 400


def test_get_memory_and_not_found(url: str) -> None:
    r = get(url, "/api/memories/rust-error-handling")
    assert r.status == 200
    m = r.json()
    assert m["type"] == "skill" and m["version"] == 1 and "thiserror" in m["l1"] and "anyhow::Context" in m["l2"]
    assert m["path"] == "04-skills/rust-error-handling.md" and len(m["checksum"]) == 64
    r = get(url, "/api/memories/no-such-memory")
    assert r.status == 404 and "no-such-memory" in error_of(r)["message"]


def test_create_memory_writes_a_file(url: str, daemon: DaemonProcess) -> None:
    body = {
        "type": "decision",
        "id": "use-postgres",
        "l0": "We use Postgres for the main database.",
        "l1": "Postgres: one database for everything.",
        "content": "Chosen for JSONB and the tooling.",
        "tags": ["db", "postgres"],
        "importance": 0.7,
    }
    r = post(url, "/api/memories", body)
    assert r.status == 201, r.body
    m = r.json()
    assert m["id"] == "use-postgres" and m["version"] == 1 and m["path"] == "06-decisions/use-postgres.md"
    text = (daemon.root / m["path"]).read_text()
    assert "l0: We use Postgres for the main database." in text and "JSONB" in text
    # It is searchable at once (the write indexes before it returns).
    assert "use-postgres" in daemon.context_ids("postgres database")
    # A second create with the same id is a conflict, not an overwrite.
    r = post(url, "/api/memories", body)
    assert r.status == 409 and error_of(r)["data"]["current_version"] == 1
    # Refusals by the write rules and bad input.
    r = post(url, "/api/memories", {**body, "id": "../../escape"})
    assert r.status == 403 and "not allowed" in error_of(r)["message"]
    assert not (daemon.root.parent / "escape.md").exists()
    r = post(url, "/api/memories", {"type": "poem", "l0": "x", "content": "y"})
    assert r.status == 400 and "type: must be one of" in error_of(r)["message"]
    r = post(url, "/api/memories", {"type": "task", "content": "no summary"})
    assert r.status == 400 and "l0" in error_of(r)["message"]
    r = post(url, "/api/memories", {"type": "task", "l0": "x", "content": "y", "importance": "high"})
    assert r.status == 400


def test_update_memory_is_version_checked(url: str, daemon: DaemonProcess) -> None:
    created = post(
        url,
        "/api/memories",
        {"type": "task", "id": "ship-release", "l0": "Ship the 1.0 release.", "content": "Tag, build, publish."},
    ).json()
    path = daemon.root / created["path"]
    r = put(
        url,
        "/api/memories/ship-release",
        {
            "version": 1,
            "checksum": created["checksum"],
            "l0": "Ship the 1.1 release.",
            "content": "Tag, build, publish, announce.",
            "tags": ["release"],
        },
    )
    assert r.status == 200, r.body
    updated = r.json()
    assert updated["version"] == 2 and updated["l0"] == "Ship the 1.1 release." and updated["tags"] == ["release"]
    text = path.read_text()
    assert "version: 2" in text and "announce" in text
    # The version read is now stale: refused with 409, file untouched.
    before = path.read_bytes()
    r = put(url, "/api/memories/ship-release", {"version": 1, "l0": "stale write"})
    assert r.status == 409 and error_of(r)["data"]["current_version"] == 2
    assert path.read_bytes() == before
    # An edit on disk that does not bump the version is caught by the checksum.
    path.write_text(text.replace("announce", "announce on the blog"))
    daemon.wait_for(
        lambda: get(url, "/api/memories/ship-release").json()["checksum"] != updated["checksum"],
        message="the external edit to be indexed",
    )
    r = put(url, "/api/memories/ship-release", {"version": 2, "checksum": updated["checksum"], "l0": "overwrite"})
    assert r.status == 409
    assert "on the blog" in path.read_text()
    # Errors.
    assert "version" in error_of(put(url, "/api/memories/ship-release", {"l0": "x"}))["message"]
    assert put(url, "/api/memories/ship-release", {"version": 2, "colour": "red"}).status == 400
    assert put(url, "/api/memories/nothing-here", {"version": 1, "l0": "x"}).status == 404


def test_update_keeps_a_marker_free_file_marker_free(url: str, daemon: DaemonProcess) -> None:
    m = get(url, "/api/memories/oven-temps").json()
    assert m["l2"] == "" and "250 C" in m["l1"]  # no markers: everything is L1
    r = put(
        url,
        "/api/memories/oven-temps",
        {
            "version": m["version"],
            "checksum": m["checksum"],
            "l0": m["l0"],
            "l1": m["l1"] + " Rolls at 220 C.",
            "content": "",
        },
    )
    assert r.status == 200, r.body
    text = (daemon.root / m["path"]).read_text()
    assert "Rolls at 220 C." in text and "<!-- L1 -->" not in text


# ---------------------------------------------------------------- graph, health, governance


def test_graph_nodes_edges_and_communities(url: str) -> None:
    r = get(url, "/api/graph")
    assert r.status == 200
    data = r.json()
    nodes = {n["id"]: n for n in data["nodes"]}
    listed = {m["id"] for m in get(url, "/api/memories").json()["memories"]}
    assert set(nodes) == listed
    assert all(n["type"] and isinstance(n["community"], int) for n in nodes.values())
    edges = {(e["source"], e["target"], e["kind"]) for e in data["edges"]}
    assert ("rust-error-handling", "rust-async", "explicit") in edges
    assert ("cli-tool", "rust-testing", "explicit") in edges
    rust = {nodes[i]["community"] for i in ("rust-error-handling", "rust-async", "rust-testing", "cli-tool")}
    baking = {nodes[i]["community"] for i in ("sourdough", "oven-temps", "flour-choice")}
    assert len(rust) == 1 and len(baking) == 1 and rust != baking


def test_health(url: str) -> None:
    r = get(url, "/api/health")
    assert r.status == 200
    data = r.json()
    assert isinstance(data["score"], int) and 0 <= data["score"] <= 100
    parts = {p["name"]: p for p in data["parts"]}
    assert set(parts) == {"coverage", "efficiency", "freshness", "balance", "cleanliness"}
    assert abs(sum(p["points"] for p in parts.values()) - data["score"]) <= 1
    assert [f["path"] for f in data["invalid"]] == [INVALID_FILE]


def test_governance_findings_and_actions(url: str, daemon: DaemonProcess) -> None:
    r = get(url, "/api/governance")
    assert r.status == 200
    findings = r.json()["findings"]
    by_kind = {f["kind"]: f for f in findings}
    assert by_kind["decay"]["memory_ids"] == ["old-laptop-setup"]
    assert by_kind["decay"]["actions"] == ["archive", "dismiss"]
    assert by_kind["scratch_expired"]["archive_ids"] == ["todo-scratch"]
    assert by_kind["invalid_file"]["paths"] == [INVALID_FILE] and by_kind["invalid_file"]["actions"] == ["dismiss"]

    # Dismiss: gone from the list until its file changes.
    r = post(url, "/api/governance/actions", {"action": "dismiss", "finding_id": by_kind["decay"]["id"]})
    assert r.status == 200 and r.json()["result"]["dismissed"] == by_kind["decay"]["id"]
    assert "decay" not in {f["kind"] for f in get(url, "/api/governance").json()["findings"]}

    # Set importance rewrites the frontmatter.
    r = post(
        url, "/api/governance/actions", {"action": "set_importance", "memory_id": "flour-choice", "importance": 0.65}
    )
    assert r.status == 200, r.body
    assert "importance: 0.65" in (daemon.root / "06-decisions/flour-choice.md").read_text()

    errors = [
        ({"action": "explode"}, 400),
        ({}, 400),
        ({"action": "dismiss"}, 400),
        ({"action": "dismiss", "finding_id": "000000000000"}, 404),
        ({"action": "set_importance", "memory_id": "flour-choice", "importance": 3}, 400),
        ({"action": "set_importance", "memory_id": "flour-choice", "importance": "high"}, 400),
        ({"action": "set_importance", "memory_id": "nope", "importance": 0.5}, 404),
        ({"action": "archive"}, 400),
        ({"action": "archive", "memory_id": "nope"}, 404),
    ]
    for body, status in errors:
        r = post(url, "/api/governance/actions", body)
        assert r.status == status, (body, r.body)
        error_of(r)


def test_archive_moves_the_file(url: str, daemon: DaemonProcess) -> None:
    r = post(url, "/api/governance/actions", {"action": "archive", "memory_id": "todo-scratch"})
    assert r.status == 200, r.body
    assert not (daemon.root / "09-scratch/todo-scratch.md").exists()
    assert (daemon.root / "_archive/09-scratch/todo-scratch.md").exists()
    assert get(url, "/api/memories/todo-scratch").status == 404
    created = post(url, "/api/memories", {"type": "scratch", "id": "tmp-note", "l0": "A note.", "content": "x"})
    assert created.status == 201
    r = post(url, "/api/memories/tmp-note/archive")
    assert r.status == 200 and r.json()["to"] == "_archive/09-scratch/tmp-note.md"
    assert post(url, "/api/memories/tmp-note/archive").status == 404


# ---------------------------------------------------------------- events


def read_event(resp: HTTPResponse, deadline: float) -> tuple[str, dict[str, Any]]:
    """Read one server-sent event (skipping comments); the socket timeout bounds each read."""
    event, data = "message", []
    while time.monotonic() < deadline:
        line = resp.fp.readline().decode("utf-8")
        if line == "":
            raise AssertionError("event stream closed")
        line = line.rstrip("\n")
        if not line:
            if data:
                return event, json.loads("\n".join(data))
            continue
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    raise AssertionError("no event before the deadline")


def test_events_report_changes_on_disk(url: str, daemon: DaemonProcess) -> None:
    parsed = urllib.parse.urlsplit(url)
    conn = HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        conn.request("GET", "/api/events", headers={"Accept": "text/event-stream", **auth_headers()})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
        deadline = time.monotonic() + 10
        assert read_event(resp, deadline)[0] == "hello"
        path = daemon.root / "04-skills/rust-async.md"
        path.write_text(path.read_text().replace("spawn_blocking", "tokio::task::spawn_blocking"))
        while True:
            event, data = read_event(resp, deadline)
            if event == "change" and "rust-async" in data["updated"]:
                assert "04-skills/rust-async.md" in data["paths"]
                break
    finally:
        conn.close()


# ---------------------------------------------------------------- HTTP-level errors and security


def test_http_level_errors_are_json(url: str) -> None:
    r = http("PUT", url + "/api/status", {})
    assert r.status == 405
    error_of(r)
    r = get(url, "/api/no-such-endpoint")
    assert r.status == 404
    error_of(r)
    r = http("POST", url + "/api/simulate", raw=b'{"query": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert r.status == 413
    error_of(r)


def test_same_host_and_origin_checks_as_mcp(url: str) -> None:
    port = urllib.parse.urlsplit(url).port
    assert get(url, "/api/status", headers={"Origin": "http://evil.example"}).status == 403
    assert get(url, "/api/status", headers={"Origin": "null"}).status == 403
    assert get(url, "/api/status", headers={"Host": f"evil.example:{port}"}).status == 421
    assert get(url, "/api/status", headers={"Origin": f"http://127.0.0.1:{port}"}).status == 200
    assert get(url, "/api/status", headers={"Origin": f"http://localhost:{port}"}).status == 200


def test_token_is_required_when_configured(tmp_path: Path) -> None:
    root = build_workspace(tmp_path / "ws", extra_config="daemon:\n  http_token: s3cret-token\n")
    with_token = {"Authorization": "Bearer s3cret-token"}
    proc = start_daemon(root, runtime_dir=short_runtime_dir(), http=True, http_port=free_port())
    try:
        base = proc.http_url
        assert get(base, "/api/status").status == 401
        assert get(base, "/api/status", headers={"Authorization": "Bearer wrong"}).status == 401
        assert get(base, "/api/status", headers=with_token).status == 200
        assert post(base, "/api/simulate", {"query": "rust"}, headers=with_token).status == 200
        assert get(base, "/").status == 200  # the page itself loads; it asks for the token
    finally:
        proc.stop()


def test_event_streams_are_capped(url: str) -> None:
    from ctxos.daemon.rest.events import MAX_EVENT_CLIENTS

    parsed = urllib.parse.urlsplit(url)
    conns = []
    try:
        for _ in range(MAX_EVENT_CLIENTS):
            conn = HTTPConnection(parsed.hostname, parsed.port, timeout=10)
            conn.request("GET", "/api/events", headers=auth_headers())
            resp = conn.getresponse()
            assert resp.status == 200
            assert read_event(resp, time.monotonic() + 10)[0] == "hello"
            conns.append(conn)
        r = get(url, "/api/events")
        assert r.status == 503 and "too many" in error_of(r)["message"]
    finally:
        for conn in conns:
            conn.close()
    # Streams whose page went away free their slots at once: a new one is accepted.
    conn = HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        deadline = time.monotonic() + 10
        while True:
            conn.request("GET", "/api/events", headers=auth_headers())
            resp = conn.getresponse()
            if resp.status == 200 or time.monotonic() > deadline:
                break
            resp.read()  # the server may not have seen every close yet
            time.sleep(0.05)
        assert resp.status == 200 and read_event(resp, time.monotonic() + 10)[0] == "hello"
    finally:
        conn.close()
