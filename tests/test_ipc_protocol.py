"""Protocol faults on the real Unix socket: each gets a JSON-RPC error and the connection stays open.

One real daemon (``python -m ctxos.daemon.main``, no HTTP) serves the module; every
test opens its own connection, sends one hostile line, checks the reply is valid
JSON with the right code, then checks the *same* connection still answers.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import write_files
from ctxos.daemon.rpc import INVALID_REQUEST, PARSE_ERROR
from daemon_helpers import DaemonProcess, memory_text, short_runtime_dir, start_daemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    from ctxos.services.workspace import init_workspace

    root = tmp_path_factory.mktemp("ipc") / "ws"
    root.mkdir()
    init_workspace(root, seed_examples=False)
    write_files(root, {"04-skills/deploy.md": memory_text("deploy", "Deploy with the blue pipeline.", type="skill")})
    proc = start_daemon(root, runtime_dir=short_runtime_dir())
    yield proc
    proc.stop()


def _reply(sock: socket.socket) -> dict:
    buffer = b""
    while not buffer.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the daemon closed the connection instead of answering"
        buffer += chunk
    # Strict JSON: a reply holding Infinity/NaN would fail here.
    return json.loads(buffer, parse_constant=lambda name: pytest.fail(f"reply holds {name}"))


def _exchange_then_still_open(daemon: DaemonProcess, line: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.socket_path))
        sock.sendall(line)
        reply = _reply(sock)
        sock.sendall(b'{"jsonrpc":"2.0","id":"after","method":"get_skill","params":{"name":"deploy"}}\n')
        after = _reply(sock)
        assert after["id"] == "after" and after["result"]["id"] == "deploy", after
    return reply


def test_deep_nesting_is_a_parse_error(daemon: DaemonProcess) -> None:
    reply = _exchange_then_still_open(daemon, b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert reply["error"]["code"] == PARSE_ERROR and "nested too deeply" in reply["error"]["message"]
    assert reply["id"] is None


def test_deep_nesting_inside_params_is_a_parse_error(daemon: DaemonProcess) -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"status","params":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001 + b"\n"
    assert _exchange_then_still_open(daemon, line)["error"]["code"] == PARSE_ERROR


def test_invalid_utf8_is_a_parse_error(daemon: DaemonProcess) -> None:
    reply = _exchange_then_still_open(daemon, b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}\n')
    assert reply["error"]["code"] == PARSE_ERROR and "UTF-8" in reply["error"]["message"]


def test_nan_and_infinity_literals_are_a_parse_error(daemon: DaemonProcess) -> None:
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        line = b'{"jsonrpc":"2.0","id":' + literal + b',"method":"status"}\n'
        assert _exchange_then_still_open(daemon, line)["error"]["code"] == PARSE_ERROR


@pytest.mark.parametrize("raw_id", [b"1e999", b"-1e999"])
def test_non_finite_id_is_refused(daemon: DaemonProcess, raw_id: bytes) -> None:
    reply = _exchange_then_still_open(daemon, b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"status"}\n')
    assert reply["error"]["code"] == INVALID_REQUEST and reply["id"] is None


@pytest.mark.parametrize("raw_id", [b'{"a":1}', b"[1]", b"true"])
def test_non_scalar_id_is_refused(daemon: DaemonProcess, raw_id: bytes) -> None:
    reply = _exchange_then_still_open(daemon, b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"status"}\n')
    assert reply["error"]["code"] == INVALID_REQUEST and reply["id"] is None


def test_finite_ids_are_echoed(daemon: DaemonProcess) -> None:
    for raw_id, expected in ((b"1.5", 1.5), (b'"x"', "x"), (b"7", 7)):
        reply = _exchange_then_still_open(daemon, b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"status"}\n')
        assert reply["id"] == expected and "result" in reply
