"""``open_backend``: the daemon's socket when it runs, the same RPC handlers in-process when it does not."""

from __future__ import annotations

import pytest
from ctxos.client import DaemonNotRunning, RpcCallError
from ctxos.client.backend import open_backend
from ctxos.daemon.rpc import NOT_FOUND
from ctxos.services.daemon_lock import DaemonAlreadyRunning, is_locked
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (fixture)

FILES = {
    "08-rules/seed.md": memory_text("seed", "Keep notes short."),
    "04-skills/deploy.md": memory_text("deploy", "Deploy with the blue pipeline and check the canary.", type="skill"),
    "06-decisions/db.md": memory_text("db-choice", "We chose Postgres for the billing database."),
}


def test_reads_fall_back_to_in_process_with_a_note(make_workspace, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_workspace(FILES)
    backend = open_backend(root, read_only=True)
    try:
        assert backend.kind == "in-process"
        assert "no daemon running" in capsys.readouterr().err
        assert backend.call("list")["total"] == 3
        assert backend.call("get_skill", {"name": "deploy"})["id"] == "deploy"
        assert "db-choice" in {s["id"] for s in backend.call("simulate", {"query": "postgres billing"})["selected"]}
        with pytest.raises(RpcCallError) as err:
            backend.call("get_memory", {"id": "missing"})
        assert err.value.code == NOT_FOUND
    finally:
        backend.close()


def test_writes_need_a_daemon_unless_opted_in(make_workspace, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_workspace(FILES)
    with pytest.raises(DaemonNotRunning, match="ctxos start"):
        open_backend(root, read_only=False)
    backend = open_backend(root, read_only=False, in_process_writes=True, quiet=True)
    try:
        assert is_locked(root)  # no daemon can start underneath the writer
        with pytest.raises(DaemonAlreadyRunning):
            open_backend(root, read_only=False, in_process_writes=True, quiet=True)
        saved = backend.call("save_memory", {"type": "task", "content": "Rotate the keys.", "l0": "Rotate keys"})
        assert saved["created"] and backend.call("get_memory", {"id": saved["id"]})["version"] == 1
    finally:
        backend.close()
    assert not is_locked(root)
    assert capsys.readouterr().err == ""


def test_daemon_and_in_process_give_the_same_answers(make_workspace, daemon_factory) -> None:
    root = make_workspace(FILES)
    local = open_backend(root, read_only=True, quiet=True)
    try:
        local_answer = local.call("simulate", {"query": "deploy pipeline", "budget_tokens": 800})
        local_memory = local.call("get_memory", {"id": "deploy"})
        local_list = local.call("list")
    finally:
        local.close()
    daemon_factory(root)
    remote = open_backend(root, read_only=True)
    try:
        assert remote.kind == "daemon"
        remote_answer = remote.call("simulate", {"query": "deploy pipeline", "budget_tokens": 800})
        assert [(s["id"], s["tier"]) for s in remote_answer["selected"]] == [
            (s["id"], s["tier"]) for s in local_answer["selected"]
        ]
        assert remote_answer["rendered"] == local_answer["rendered"]
        assert remote.call("get_memory", {"id": "deploy"}) == local_memory
        assert remote.call("list") == local_list
    finally:
        remote.close()
