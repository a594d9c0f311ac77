"""``sources/`` served read-only and marked as sources; ``ctxos inbox`` and ``ctxos promote`` (issue 15).

Promote runs as a real ``ctxos`` subprocess, in-process (no daemon) and through a real
daemon's socket (its RPC, serialised with the daemon's other writes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import write_files
from ctxos.services.engine import Engine
from ctxos.services.inbox import list_inbox, promote
from ctxos.services.router import regenerate_router
from ctxos.services.write_gate import WriteRefused
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)

CTXOS = [sys.executable, "-m", "ctxos.client"]


def ctxos(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CTXOS, "-w", str(root), *args], capture_output=True, text=True, check=check, timeout=120)


def test_sources_are_served_marked_and_read_only(make_workspace):
    root = make_workspace(
        {
            "sources/rfc-9110.md": "# HTTP Semantics\n\nThe reference for status codes and caching headers.",
            "04-skills/http.md": "---\nid: http\nl0: How we call HTTP APIs\n---\nUse retries on 503.",
        }
    )
    engine = Engine(root)
    engine.load()
    source = engine.get_memory("rfc-9110")
    assert source is not None and source.is_source and source.type == "resource"
    assert source.to_dict()["source"] is True and engine.get_memory("http").to_dict()["source"] is False
    result = engine.execute_context_query("status codes caching headers", budget_tokens=1500)
    assert "### rfc-9110 (resource, source, " in result.rendered
    rendered_small = engine.execute_context_query("status codes caching headers", budget_tokens=60).rendered
    assert "rfc-9110 (resource, source" in rendered_small
    with pytest.raises(WriteRefused, match="sources/ is read-only to agents"):
        engine.save_memory(type="resource", id="rfc-9110", content="overwrite", l0="x", expected_version=1)
    regenerate_router(engine)
    index = yaml.safe_load((root / "_index.yaml").read_text())
    entry = next(e for e in index["memories"] if e["id"] == "rfc-9110")
    assert entry["source"] is True and entry["path"] == "sources/rfc-9110.md"
    engine.close()


def test_promote_fills_frontmatter_and_refusals_keep_the_inbox_file(make_workspace):
    root = make_workspace(
        {
            "inbox/Deploy Steps.md": "# Deploy steps\n\nRun make deploy. Then watch the canary.\n",
            "inbox/tagged.md": "---\ntags: [ops]\ncustom: kept\n---\nRotate keys monthly.\n",
            "inbox/broken.md": "---\ntags: [a\n---\nbody\n",
            "04-skills/taken.md": "---\nid: taken\n---\nalready here\n",
        }
    )
    engine = Engine(root)
    engine.load()
    items = {i.path: i for i in list_inbox(root, engine.config)}
    assert items["inbox/Deploy Steps.md"].l0 == "Deploy steps — Run make deploy."
    assert "broken YAML" in items["inbox/broken.md"].problem
    result = promote(root, engine.store, engine.config, "Deploy Steps.md", "skill")
    assert (result.id, result.path) == ("deploy-steps", "04-skills/deploy-steps.md")
    assert not (root / "inbox/Deploy Steps.md").exists()
    text = (root / "04-skills/deploy-steps.md").read_text()
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["id"] == "deploy-steps" and meta["type"] == "skill" and meta["version"] == 1
    assert meta["l0"] == "Deploy steps — Run make deploy." and meta["created"] and meta["modified"]
    assert text.endswith("# Deploy steps\n\nRun make deploy. Then watch the canary.\n")  # body byte for byte
    promote(root, engine.store, engine.config, "inbox/tagged.md", "rule")
    kept = (root / "08-rules/tagged.md").read_text()
    assert "tags: [ops]\ncustom: kept\n" in kept and "type: rule" in kept
    for name, kind, kwargs, reason in [
        ("broken.md", "rule", {}, "broken YAML"),
        ("missing.md", "rule", {}, "does not exist"),
        ("../04-skills/taken.md", "rule", {}, "only files in inbox/"),
        ("broken.md", "widget", {}, "unknown type"),
    ]:
        with pytest.raises(WriteRefused, match=reason):
            promote(root, engine.store, engine.config, name, kind, **kwargs)
    write_files(root, {"inbox/again.md": "Another note."})
    with pytest.raises(WriteRefused, match="taken"):
        promote(root, engine.store, engine.config, "again.md", "skill", memory_id="taken")
    assert (root / "inbox/again.md").read_text() == "Another note." and (root / "inbox/broken.md").exists()
    engine.close()


def test_promote_over_the_byte_cap_is_refused_and_nothing_moves(make_workspace):
    root = make_workspace(
        {"_config.yaml": "limits:\n  max_file_bytes: 200\n", "inbox/big.md": "# Big\n\n" + "word " * 36}
    )
    engine = Engine(root)
    engine.load()
    before = (root / "inbox/big.md").read_bytes()
    with pytest.raises(WriteRefused, match="would not be a valid memory"):
        promote(root, engine.store, engine.config, "big.md", "resource")
    assert (root / "inbox/big.md").read_bytes() == before and not (root / "05-resources/big.md").exists()
    engine.close()


@pytest.mark.slow
def test_cli_inbox_and_promote_in_process_and_through_the_daemon(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace({"inbox/one.md": "# One\n\nThe first idea.", "inbox/two.md": "# Two\n\nThe second idea."})
    listed = ctxos(root, "inbox", "--json")
    assert [i["path"] for i in json.loads(listed.stdout)["items"]] == ["inbox/one.md", "inbox/two.md"]
    done = ctxos(root, "promote", "inbox/one.md", "--type", "decision")
    assert "promoted inbox/one.md -> 06-decisions/one.md" in done.stdout and "in-process" in done.stderr
    daemon = daemon_factory(root)
    moved = json.loads(
        ctxos(root, "promote", str(root / "inbox/two.md"), "-t", "task", "--id", "second", "--json").stdout
    )
    assert moved["to"] == "07-tasks/second.md" and moved["warning"] == ""
    assert daemon.has_memory("second") and daemon.has_memory("one")  # indexed before the reply
    assert not (root / "inbox/two.md").exists()
    refused = ctxos(root, "promote", "gone.md", "--type", "task", check=False)
    assert refused.returncode == 1 and "inbox/gone.md does not exist" in refused.stderr
    assert "0 in inbox" in ctxos(root, "inbox").stdout


def test_sources_are_never_decay_candidates(make_workspace):
    from datetime import datetime, timedelta

    from ctxos.services.governance import GovernanceSettings, decay_findings

    old = "---\nmodified: 2020-01-01\n---\n# Old\n\nAn old reference."
    root = make_workspace({"sources/old-ref.md": old, "05-resources/old-note.md": old})
    engine = Engine(root)
    engine.load()
    found = decay_findings(engine.store.list(), {}, datetime.now() + timedelta(days=1), GovernanceSettings())
    assert [f.paths for f in found] == [["05-resources/old-note.md"]]
    engine.close()
