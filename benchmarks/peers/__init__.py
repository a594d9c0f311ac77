"""The systems compared by ``bench_peers.py``: one module per peer, one worker process each.

- ``ctxos_peer``: AI Context OS through its real ``Engine`` (this project's venv);
- ``ctxos_daemon_peer``: the same through the real daemon's Unix socket (edit-to-searchable latency);
- ``bm25_peer``: a plain BM25 baseline (Tantivy, own venv);
- ``bm25s_peer``: the other plain BM25 baseline (bm25s, in-memory sparse matrices, own venv);
- ``basic_memory_peer``: basic-memory from PyPI (own venv, Python >= 3.12).
``worker_loop`` is the stdlib-only worker side of the protocol, ``client`` the parent
side, ``venvs`` installs the peers, ``workloads`` and ``locomo`` build what they all get.
"""

from __future__ import annotations

from .client import Peer

SYSTEMS: tuple[str, ...] = ("ctxos", "ctxos-daemon", "bm25", "bm25s", "basic-memory")


def make_peer(name: str) -> Peer:
    """A fresh, not yet prepared, peer by its short name."""
    if name == "ctxos":
        from .ctxos_peer import CtxosPeer

        return CtxosPeer()
    if name == "ctxos-daemon":
        from .ctxos_daemon_peer import CtxosDaemonPeer

        return CtxosDaemonPeer()
    if name == "bm25":
        from .bm25_peer import Bm25Peer

        return Bm25Peer()
    if name == "bm25s":
        from .bm25s_peer import Bm25sPeer

        return Bm25sPeer()
    if name == "basic-memory":
        from .basic_memory_peer import BasicMemoryPeer

        return BasicMemoryPeer()
    raise ValueError(f"unknown system {name!r}; expected one of {', '.join(SYSTEMS)}")
