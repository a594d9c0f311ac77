"""The use-case layer: every operation a transport offers, typed on its request model, in one table.

    transports (socket RPC, REST, MCP, CLI)  ->  services.api (this)  ->  engine  ->  files

:data:`OPERATIONS` maps an operation's name (the socket RPC method) to its
request model (``services/schemas.py``), the function that does it (typed by its
response model, ``services/responses.py``) and how it must be run (a write is serialised with every other write; some reads may
answer during a cold build). The daemon registers each one in its RPC registry
(``daemon/components.py``) and runs it on its threads; REST and the MCP tools
go through that registry; the CLI reaches it over the socket, or, with no
daemon, calls :func:`call` in its own process (``client/backend.py``). So every
transport validates with the same model and gets the same answer.

The use cases know nothing of sockets, threads or event loops: what the runner
provides (the engine, change notes, its own status) comes in as a
:class:`~ctxos.services.api.host.Host`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import schemas
from ..history import Actor, clean_client, scope
from ..jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from ..responses import Response
from . import agents, governance, history, intake, queries, writes
from .host import Host

R = TypeVar("R", bound=schemas.Request)


@dataclass(frozen=True)
class Operation(Generic[R]):
    """One use case: its name, request model, function, and how a host must run it."""

    name: str
    request: type[R]
    run: Callable[[Host, R], Response]  # typed by its response model (services/responses.py)
    write: bool = False  # serialised behind the host's single write lock
    partial_ok: bool = False  # a read that may answer from a cold build's first chunks
    wait_ready: bool = True  # False: answers while the engine loads (status)

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip()

    def __call__(self, host: Host, request: R) -> dict[str, Any]:
        """Run it and answer the JSON its response model describes."""
        return self.run(host, request).data()


def _op(
    name: str,
    request: type[R],
    run: Callable[[Host, R], Response],
    *,
    write: bool = False,
    partial_ok: bool = False,
    wait_ready: bool = True,
) -> tuple[str, Operation[Any]]:
    return name, Operation(name, request, run, write, partial_ok, wait_ready)


OPERATIONS: Mapping[str, Operation[Any]] = dict(
    [
        _op("status", schemas.NoParams, queries.status, wait_ready=False),
        # Reads answer during a cold build from the memories indexed so far (status says "indexing n of N").
        _op("get_context", schemas.GetContextRequest, queries.get_context, partial_ok=True),
        _op("agent_context", schemas.ContextRequest, queries.agent_context, partial_ok=True),
        _op("simulate", schemas.ContextRequest, queries.simulate, partial_ok=True),
        _op("get_memory", schemas.GetMemoryRequest, queries.get_memory, partial_ok=True),
        _op("list", schemas.ListRequest, queries.list_memories, partial_ok=True),
        _op("get_skill", schemas.GetSkillRequest, queries.get_skill, partial_ok=True),
        _op("doctor", schemas.NoParams, queries.doctor),
        _op("save_memory", schemas.SaveMemoryRequest, writes.save_memory, write=True),
        _op("log_session", schemas.LogSessionRequest, writes.log_session, write=True),
        _op("reindex", schemas.ReindexRequest, writes.reindex, write=True),
        _op("governance", schemas.GovernanceRequest, governance.governance),
        _op("health", schemas.NoParams, governance.health),
        _op("archive", schemas.MemoryRefRequest, governance.archive, write=True),
        _op("unarchive", schemas.MemoryRefRequest, governance.unarchive, write=True),
        _op("set_importance", schemas.SetImportanceRequest, governance.set_importance, write=True),
        _op("dismiss", schemas.DismissRequest, governance.dismiss),
        _op("regenerate_router", schemas.NoParams, governance.regenerate_router),
        _op("graph", schemas.GraphRequest, governance.graph, write=True),
        _op("review", schemas.ReviewRequest, agents.review),
        _op("flag", schemas.FlagRequest, agents.flag),
        _op("propose_merge", schemas.ProposeMergeRequest, agents.propose_merge),
        _op("proposals", schemas.ProposalsRequest, agents.proposals),
        _op("proposal", schemas.ProposalIdRequest, agents.proposal),
        _op("accept_proposal", schemas.ProposalIdRequest, agents.accept_proposal, write=True),
        _op("reject_proposal", schemas.RejectProposalRequest, agents.reject_proposal),
        _op("history", schemas.MemoryRefRequest, history.history),
        _op("history_version", schemas.HistoryVersionRequest, history.history_version),
        _op("revert", schemas.RevertRequest, history.revert, write=True),
        _op("inbox", schemas.NoParams, intake.inbox),
        _op("promote", schemas.PromoteRequest, intake.promote, write=True),
        _op("import", schemas.ImportRequest, intake.import_path, write=True),
    ]
)


def operation(name: str) -> Operation[Any]:
    """The operation called ``name``; METHOD_NOT_FOUND (listing the known ones) when there is none."""
    found = OPERATIONS.get(name)
    if found is None:
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {name}", {"available": sorted(OPERATIONS)})
    return found


def request_for(op: Operation[Any], params: Any) -> schemas.Request:
    """``params`` checked against the operation's model: INVALID_PARAMS with the contract's message."""
    try:
        return schemas.validate(op.request, params)
    except schemas.ContractError as exc:
        raise RpcError(INVALID_PARAMS, exc.message, {"allowed": exc.allowed}) from None


def call(host: Host, name: str, params: Any = None, *, client: str | None = None) -> dict[str, Any]:
    """Validate ``params`` and run operation ``name`` on ``host`` in this thread, its writes attributed to
    ``client`` in history. For a runner with no threads of its own (the CLI's in-process backend)."""
    op = operation(name)
    request = request_for(op, params)
    with scope(Actor(client=clean_client(client) or "unnamed client", tool=name)):
        return op(host, request)


__all__ = ["OPERATIONS", "Host", "Operation", "call", "operation", "request_for"]
