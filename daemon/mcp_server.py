"""The MCP surface: four tools (plus governance tools, ``mcp_governance.py``), memory resources and two prompts.

``build_mcp_server(backend)`` returns an ``MCPServer`` whose tools call
``await backend.call(method, params)``. In the daemon the backend is the RPC
registry in-process (:class:`RegistryBackend`); in ``ctxos mcp`` it is the
daemon's Unix socket (``daemon/mcp_stdio.py`` over the client's ``SocketBackend``). Either way the RPC methods
(the use cases, ``services/api``) do the work: the engine's one query path and its
write rules. This module only shapes inputs and outputs for agents and turns a
refused or failed call into an MCP tool error (``is_error``) with the message
the engine gave, so the agent can correct itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from ctxos.services import schemas
from ctxos.services.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND, BackendError, RpcError, json_default
from ctxos.services.responses import SkillResponse
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from .mcp_contracts import bind_contract

if TYPE_CHECKING:  # pragma: no cover
    from .context import DaemonContext

log = logging.getLogger("ctxos.mcp")

SERVER_NAME = "ctxos"
INSTRUCTIONS = (
    "AI Context OS: the user's long-term memory as markdown files. Call get_context with the task "
    "at hand before starting work; it returns the rules, the most relevant memories (within a token "
    "budget) and a one-line catalog of the rest. Save durable knowledge (decisions, how-tos, "
    "project facts) with save_memory; to update a memory pass the version you read as "
    "expected_version. Fetch full procedures with get_skill. Log notable events with log_session. "
    "If a memory looks stale, wrong or duplicated, flag_memory it or propose_merge a fix: a person decides."
)
# Each tool's input is a request contract (services/schemas.py): schema, limits and messages.
TOOL_CONTRACTS: dict[str, type[schemas.Request]] = {
    "get_context": schemas.ContextRequest,
    "save_memory": schemas.SaveMemoryToolRequest,
    "get_skill": schemas.GetSkillRequest,
    "log_session": schemas.LogSessionRequest,
    "review_memories": schemas.ReviewRequest,
    "flag_memory": schemas.FlagToolRequest,
    "propose_merge": schemas.ProposeMergeToolRequest,
}


class Backend(Protocol):
    """Where the tools' work happens: the daemon's RPC methods, reached one way or another."""

    async def call(self, method: str, params: dict[str, Any]) -> Any: ...


class RegistryBackend:
    """The daemon's own RPC registry, called in-process (no socket hop)."""

    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        try:
            result = await self.ctx.rpc.call(self.ctx, method, params)
        except RpcError as exc:
            raise BackendError(exc.message, exc.code, exc.data) from exc
        except Exception as exc:  # noqa: BLE001 - same reply the socket gives (rpc._handle_one)
            log.exception("RPC %s failed", method)
            raise BackendError(f"internal error: {type(exc).__name__}: {exc}", INTERNAL_ERROR) from exc
        return _jsonable(result, json_default)


def _jsonable(value: Any, default: Any) -> Any:
    """Results as plain JSON data, the same shape the socket delivers."""
    if isinstance(value, (dict, list, str, int, float, bool)) or value is None:
        if isinstance(value, dict):
            return {k: _jsonable(v, default) for k, v in value.items()}
        if isinstance(value, list):
            return [_jsonable(v, default) for v in value]
        return value
    return _jsonable(default(value), default)


# ---------------------------------------------------------------- outputs
# What agents are told a tool returns: a view of the operation's response (services/responses.py),
# built from its data by these models' own fields (anything else in the answer is left out).


# One memory in the answer as agents are told it (no docstring: it would be the schema's description).
# Its file ``path`` and the engine's ``reason`` are left out (``ctxos simulate`` and the socket answer
# keep them; ``memory://{id}`` gives the path): the SDK's client checks every entry of every result
# against this schema in pure Python, ~2.3 us per field and entry, and ``get_context`` has ~125
# entries (issue 16, docs/engine.md).
class SelectedMemoryOut(BaseModel):
    id: str
    type: str
    tier: Literal["L0", "L1", "L2"] = Field(description="L0 line, L1 paragraph or L2 full text")
    tokens: int
    score: float = Field(description="composite relevance score, 0..1")
    # Absent, not null, for this workspace (as the socket answer): fewer keys for the client to validate.
    workspace: str | None = Field(
        None,
        description="the federated workspace it comes from; absent: this workspace",
        exclude_if=lambda v: v is None,
    )


class ContextOut(BaseModel):
    rendered: str = Field(description="the context to read: rules, selected memories, then the L0 catalog")
    query: str
    intent: str
    expanded_query: list[str]
    budget_tokens: int
    tokens_used: int
    selected: list[SelectedMemoryOut]
    catalog_ids: list[str] = Field(
        description="memories listed only by their one-line summary; "
        "read one with the memory://{id} resource or ask a narrower query"
    )
    catalog_omitted: int
    elapsed_ms: float = Field(0.0, description="time the engine spent on the query")


class SaveWarningOut(BaseModel):
    kind: Literal["l1_never_fits", "l1_over_share", "no_usable_l0", "near_duplicate"]
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class SaveOut(BaseModel):
    id: str
    path: str
    version: int = Field(description="pass this as expected_version to update the memory again")
    created: bool
    warnings: list[SaveWarningOut] = Field(
        default_factory=list,
        description="saved, but it will not load as intended (too long an L1, no usable "
        "l0, a near-duplicate of another memory): fix and save again",
    )


class SkillOut(BaseModel):
    matched: bool = Field(
        True,
        description="true: the name matched this skill exactly (id, file name or "
        "title); get_skill never returns a near miss",
    )
    matched_by: Literal["id", "file name", "title"]
    id: str
    type: Literal["skill"] = "skill"
    title: str
    l0: str
    path: str
    version: int
    tags: list[str]
    text: str = Field(description="the full skill text (L1 and L2)")
    workspace: str | None = Field(None, description="the federated workspace it comes from; absent: this one")


class LogOut(BaseModel):
    path: str
    event: str


class MemoryOut(BaseModel):
    id: str
    type: str
    path: str
    l0: str
    version: int
    protected: bool
    text: str


# ---------------------------------------------------------------- helpers


async def _call(backend: Backend, method: str, params: dict[str, Any], *, older: str | None = None) -> Any:
    """Call the backend; refusals and failures become a ToolError the agent can read.

    ``older``: the method to call instead when the daemon does not know ``method`` (a ``ctxos mcp``
    of a newer install reaching a daemon that still runs the old one).
    """
    clean = {k: v for k, v in params.items() if v is not None}
    try:
        return await backend.call(method, clean)
    except BackendError as exc:
        if older is not None and exc.code == METHOD_NOT_FOUND:
            return await _call(backend, older, clean)
        # The SDK prefixes "Error executing tool NAME: "; the engine's message says what to do.
        raise ToolError(str(exc)) from exc
    except (ConnectionError, OSError) as exc:
        raise ToolError(f"the ctxos daemon is not reachable ({exc})") from exc


def client_label(ctx: Context | None) -> str:
    """Who is calling, for history (the git author ``ctxos (<this>)``): the MCP client's own name."""
    name = ""
    try:
        params = ctx.session.client_params if ctx is not None else None
        if params is not None:
            name = str(params.client_info.name or "").strip()
    except Exception:  # noqa: BLE001 - no session or no client info: say so
        name = ""
    return f"{name or 'unnamed client'} via MCP"


def _tool_result(text: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured.model_dump(mode="json")
    )


def _memory_text(memory: dict[str, Any]) -> str:
    parts = [p for p in (memory.get("l1") or "", memory.get("l2") or "") if p.strip()]
    return "\n\n".join(parts) if parts else str(memory.get("l0", ""))


def _render_memory(memory: dict[str, Any]) -> str:
    head = (
        f"# {memory.get('title') or memory['id']}\n\n"
        f"id: {memory['id']} | type: {memory.get('type')} | version: {memory.get('version')} | "
        f"path: {memory.get('path')} | checksum: {memory.get('checksum')}\n\n> {memory.get('l0', '')}\n\n"
    )
    return head + _memory_text(memory) + "\n"


# ---------------------------------------------------------------- server


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-context-os")
    except Exception:  # noqa: BLE001 - not installed as a distribution (source checkout)
        return "0"


def build_mcp_server(backend: Backend, *, name: str = SERVER_NAME) -> MCPServer:
    """An MCPServer whose tools, resources and prompts all go through ``backend``."""
    mcp: MCPServer = MCPServer(
        name, title="AI Context OS", instructions=INSTRUCTIONS, version=_package_version(), log_level="WARNING"
    )

    @mcp.tool(
        title="Get context",
        description="The context for a task: rules first, the most relevant memories (full text, "
        "paragraph or one line, chosen by score) and a catalog of the rest, within "
        "budget_tokens. The selection (ids, tiers, tokens, scores) comes with it so you "
        "can ask for more, e.g. a memory://{id} resource.",
    )
    async def get_context(
        query: str, budget_tokens: int | None = None, intent: str | None = None
    ) -> Annotated[CallToolResult, ContextOut]:
        params = {"query": query, "budget_tokens": budget_tokens, "intent": intent}
        result = await _call(backend, "agent_context", params, older="get_context")
        out = ContextOut.model_validate(result)  # the agent view, as the daemon built it (agent_context)
        return _tool_result(out.rendered, out)

    @mcp.tool(
        title="Save memory",
        description="Write a memory file (markdown with frontmatter) into the type's folder; indexed at "
        "once. A new memory needs no id (one is made from l0). To update an existing memory "
        "pass its id and the version you read as expected_version; protected memories, "
        "sources/ and files changed on disk since you read them are refused.",
    )
    async def save_memory(
        type: str,
        content: str,
        l0: str,
        id: str | None = None,
        tags: list[str] | None = None,
        related: list[str] | None = None,
        importance: float | None = None,
        l1: str | None = None,
        expected_version: int | None = None,
        expected_checksum: str | None = None,
        always_load: bool | None = None,
        workspace: str | None = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, SaveOut]:
        params = {
            "type": type,
            "content": content,
            "l0": l0,
            "id": id,
            "tags": tags,
            "related": related,
            "importance": importance,
            "l1": l1,
            "expected_version": expected_version,
            "expected_checksum": expected_checksum,
            "always_load": always_load,
            "_client": client_label(ctx),
        }
        if workspace:
            params["workspace"] = workspace
        result = await _call(backend, "save_memory", params)
        out = SaveOut.model_validate(result)
        verb = "Created" if out.created else "Updated"
        text = f"{verb} memory {out.id} (version {out.version}) at {out.path}"
        if out.warnings:
            text += "\n\nWarnings (saved, but it will not load as intended):\n" + "\n".join(
                f"- [{w.kind}] {w.message}" for w in out.warnings
            )
        return _tool_result(text, out)

    @mcp.tool(
        title="Get skill",
        description="A skill (how-to, type skill) in full, by its exact name: its id, file name or title, "
        "ignoring case. Only an exact match is returned, never a similar skill. A name that "
        "matches nothing is an error listing the closest skills by name (ask again with one "
        "of those); a name that is a rule or another non-skill memory is refused and says what "
        "it is (read it with memory://{id}). Use get_context to find a skill by topic.",
    )
    async def get_skill(name: str) -> Annotated[CallToolResult, SkillOut]:
        result = await _call(backend, "get_skill", {"name": name})
        skill = SkillResponse.model_validate(result)  # the get_skill use case's answer
        memory = skill.data()
        out = SkillOut.model_validate({**memory, "title": skill.title or skill.id, "text": _memory_text(memory)})
        return _tool_result(_render_memory(memory), out)

    @mcp.tool(
        title="Log session",
        description="Append a timestamped entry to today's session log (02-daily/YYYY-MM-DD.md).",
    )
    async def log_session(
        event: str, details: str | None = None, ctx: Context | None = None
    ) -> Annotated[CallToolResult, LogOut]:
        result = await _call(backend, "log_session", {"event": event, "details": details, "_client": client_label(ctx)})
        out = LogOut.model_validate(result)
        return _tool_result(f"Logged to {out.path}", out)

    @mcp.resource(
        "memory://{id}",
        name="memory",
        title="Memory",
        mime_type="text/markdown",
        description="One memory's full text with its id, type, version and path.",
    )
    async def memory_resource(id: str) -> str:
        try:
            result = await backend.call("get_memory", {"id": id})
        except BackendError as exc:
            raise ResourceNotFoundError(f"no memory {id!r}: {exc}") from exc
        memory = result.get("memory", result) if isinstance(result, dict) else result
        if not memory:
            raise ResourceNotFoundError(f"no memory {id!r}")
        return _render_memory(memory)

    @mcp.resource(
        "ctxos://catalog",
        name="catalog",
        title="Memory catalog (L0)",
        mime_type="text/markdown",
        description="Every memory as one line: id, type and summary. Read one with memory://{id}.",
    )
    async def catalog_resource() -> str:
        try:
            result = await backend.call("list", {})
        except BackendError as exc:
            raise ResourceError(f"catalog unavailable: {exc}") from exc
        items = result.get("memories", result) if isinstance(result, dict) else result
        lines = [f"- {m['id']} ({m.get('type')}): {m.get('l0', '')}" for m in items]
        return "# Memory catalog\n\n" + ("\n".join(lines) if lines else "(no memories yet)") + "\n"

    @mcp.prompt(
        name="context_for_task",
        title="Start a task with context",
        description="The workspace context for a task, followed by the task itself.",
    )
    async def context_for_task(task: str, budget_tokens: int | None = None) -> str:
        result = await _call(backend, "get_context", {"query": task, "budget_tokens": budget_tokens})
        return (
            f"Context from my memory (AI Context OS, {result['tokens_used']} tokens):\n\n"
            f"{result['rendered']}\n\n---\nTask: {task}"
        )

    @mcp.prompt(
        name="wrap_up_session",
        title="Wrap up a session",
        description="Ask the agent to log the session and save what is worth keeping.",
    )
    def wrap_up_session(summary_hint: str | None = None) -> str:
        hint = f" Focus on: {summary_hint}." if summary_hint else ""
        return (
            "Before we finish: call log_session with a one-line event and short details of what was "
            "done. Then, for each durable fact, decision or reusable procedure from this session, call "
            "save_memory (decision, project or skill type) with a precise l0 line; to update an existing "
            "memory pass the version you read as expected_version." + hint
        )

    from .mcp_governance import register_governance_tools  # review, flag, propose/draft a merge

    register_governance_tools(mcp, backend, _call, _tool_result)
    for tool_name, request in TOOL_CONTRACTS.items():
        bind_contract(mcp, tool_name, request)
    return mcp
