"""The request contracts: one pydantic model per operation, with its limits written once.

Every transport validates a call with the model here before any work is done:
the socket RPC registry (``RpcRegistry.register(name, handler, schema=...)``),
REST (which calls the same RPC methods), the MCP tools (whose input JSON
schema is the model's own) and the CLI (through the RPC). So a bad parameter
gets the same message whichever way it arrives, in user words and naming the
parameter, e.g. ``budget_tokens: must be between 1 and 200000 (got -5)``.

Models are strict: JSON ``true`` is not a number, ``"5"`` is not an integer
(an integer is accepted where a number is expected), and an unknown
parameter is refused, so a typo fails loudly instead of being ignored.
``null`` for a known parameter means "not given" (its default applies).
The limits below are the only place these numbers live; docs point here.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .flags import FLAG_KINDS, MAX_REASON_CHARS
from .model import TIERS
from .ontology import MEMORY_TYPES
from .proposals import MAX_L0_CHARS, MAX_SOURCES, MAX_TEXT_CHARS, MIN_SOURCES

# ---------------------------------------------------------------- limits (the one place they live)

MAX_QUERY_CHARS = 10_000  # a query longer than this is a document, not a question
MAX_BUDGET_TOKENS = 200_000  # the largest context a model reads today; one limit for every transport
MAX_TOPIC_CHARS = 2_000  # review_memories' topic
MAX_REVIEW_LIMIT = 500  # findings one review returns

MemoryType = Literal["context", "daily", "project", "skill", "resource", "decision", "task", "rule", "scratch"]
Tier = Literal["L0", "L1", "L2"]
FlagKind = Literal["stale", "wrong", "duplicate", "conflict"]
if (
    set(get_args(MemoryType)) != set(MEMORY_TYPES)
    or set(get_args(Tier)) != set(TIERS)
    or set(get_args(FlagKind)) != set(FLAG_KINDS)
):  # pragma: no cover
    raise ImportError("schemas' Literal types are out of date with MEMORY_TYPES / TIERS / FLAG_KINDS")


class ContractError(ValueError):
    """A request that breaks its contract; ``message`` names each bad parameter and why."""

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.allowed = allowed


class Request(BaseModel):
    """Base of every request model: strict types, unknown parameters refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    def params(self) -> dict[str, Any]:
        """The validated parameters as the handler reads them (absent optional ones left out)."""
        return self.model_dump(exclude_none=True)


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be empty")
    return value


# ---------------------------------------------------------------- the one query path


class ContextRequest(Request):
    """``get_context`` and ``simulate``: what an agent would load for a query within a token budget."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="what you are working on, in plain words")
    budget_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_BUDGET_TOKENS,
        description="token budget for the rendered context; default from the workspace config",
    )
    intent: str | None = Field(
        None,
        description="debug, brainstorm, recall or default (or a row of the workspace's weights:); "
        "detected from the query when omitted",
    )

    _query_not_blank = field_validator("query")(_not_blank)


class GetContextRequest(ContextRequest):
    """``get_context`` over the socket: the query, and whether to explain each selected memory.

    Without ``detail`` the answer leaves out each selected memory's signals, shares and
    sources (~1,500 numbers, over half of a ~62 KB answer) that no caller of
    ``get_context`` reads: the page and ``ctxos simulate`` show them through ``simulate``
    (issue 16: the daemon's cost per query beside the engine, docs/engine.md).
    """

    detail: bool = Field(
        False, description="also each selected memory's signals, shares and sources (what simulate shows)"
    )


# ---------------------------------------------------------------- memories


class GetMemoryRequest(Request):
    """``get_memory``: one memory with its text."""

    id: str = Field(min_length=1, description="the memory's id")
    tier: Tier | None = Field(None, description="also render the text at this tier (L0, L1 or L2)")


class ListRequest(Request):
    """``list``: every memory's metadata, optionally of one type, a page at a time."""

    type: MemoryType | None = Field(None, description="only memories of this type")
    limit: int | None = Field(None, ge=0, description="at most this many (default: all)")
    offset: int = Field(0, ge=0, description="skip this many first")

    @field_validator("type", mode="before")
    @classmethod
    def _empty_type_is_all(cls, value: Any) -> Any:
        return None if value == "" else value


class GetSkillRequest(Request):
    """``get_skill``: a skill by its exact id, file name or title."""

    name: str = Field(min_length=1, description="the skill's exact id, file name or title (any case)")

    _name_not_blank = field_validator("name")(_not_blank)


# ---------------------------------------------------------------- writes


class SaveMemoryRequest(Request):
    """``save_memory``: create or update a memory through the write rules."""

    type: MemoryType = Field(description="memory type; decides the folder")
    content: str = Field(description="the full text (L2), markdown")
    l0: str = Field(min_length=1, description="one-line summary shown in the catalog")
    id: str | None = Field(None, description="id to create or update (letters, digits, . _ -)")
    tags: list[str] | None = Field(None, description="tags; omitted keeps an existing memory's tags")
    related: list[str] | None = Field(None, description="ids of related memories")
    importance: float | None = Field(None, ge=0.0, le=1.0, description="0..1, default 0.5")
    l1: str | None = Field(None, description="a paragraph-length summary (L1 tier)")
    expected_version: int | None = Field(
        None, ge=1, description="the version you read; required to update an existing memory"
    )
    expected_checksum: str | None = Field(
        None,
        description="the checksum of the memory you read (memory:// gives it); optional: "
        "the server remembers what it served, so expected_version alone "
        "already refuses a save over a person's edit",
    )
    always_load: bool | None = Field(None, description="load it with every context, like a rule")

    _l0_not_blank = field_validator("l0")(_not_blank)


class SaveMemoryToolRequest(SaveMemoryRequest):
    """The MCP ``save_memory`` tool: ``save_memory`` plus the workspace to write to (routed by the daemon)."""

    workspace: str | None = Field(
        None, description="another registered workspace to write to (e.g. a federated 'global' one); default: this one"
    )


class LogSessionRequest(Request):
    """``log_session``: append a timestamped line to today's session log."""

    event: str = Field(min_length=1, description="what happened, one line")
    details: str | None = Field(None, description="optional detail, may span lines")

    _event_not_blank = field_validator("event")(_not_blank)


class MemoryRefRequest(Request):
    """``archive``, ``unarchive`` and ``history``: one memory by id (unarchive: or its ``_archive/`` path)."""

    id: str = Field(min_length=1, description="the memory's id")

    _id_not_blank = field_validator("id")(_not_blank)


class SetImportanceRequest(MemoryRefRequest):
    """``set_importance``: a memory's importance in its frontmatter."""

    value: float = Field(ge=0.0, le=1.0, description="importance, 0.0 to 1.0")


class HistoryVersionRequest(MemoryRefRequest):
    """``history_version``: one version's text and diffs."""

    n: int = Field(ge=1, description="the version number (1 or more)")


class RevertRequest(MemoryRefRequest):
    """``revert``: restore a version of a memory as a new version."""

    to: int = Field(ge=1, description="the version to restore (1 or more)")
    expected_version: int | None = Field(None, ge=1, description="the version you read")
    expected_checksum: str | None = Field(None, description="the checksum of the version you read")


# ---------------------------------------------------------------- agents' governance


class ReviewRequest(Request):
    """``review`` (MCP ``review_memories``): findings that need a judgment, optionally about a topic."""

    topic: str | None = Field(None, max_length=MAX_TOPIC_CHARS, description="only findings about this topic")
    limit: int = Field(50, ge=1, le=MAX_REVIEW_LIMIT, description="at most this many findings")


class FlagToolRequest(Request):
    """The MCP ``flag_memory`` tool: what an agent says about a memory (who it is comes from the session)."""

    id: str = Field(min_length=1, description="the memory's id")
    reason: str = Field(
        min_length=1,
        max_length=MAX_REASON_CHARS,
        description="what is wrong, in one or two sentences a person can act on",
    )
    kind: FlagKind = Field(
        "stale",
        description="stale (out of date), wrong (incorrect), duplicate (of another memory: name it in the "
        "reason), conflict (contradicts another memory: name it)",
    )

    _reason_not_blank = field_validator("reason")(_not_blank)


class FlagRequest(FlagToolRequest):
    """``flag``: put a memory in the person's governance queue."""

    by: str = Field("agent", description="who flags it")


class ProposeMergeToolRequest(Request):
    """The MCP ``propose_merge`` tool: the memories and the merged text (who and how come from the session)."""

    ids: list[str] = Field(
        min_length=MIN_SOURCES,
        max_length=MAX_SOURCES,
        description="the memories to merge; the first is kept, the rest archived on accept",
    )
    merged_text: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="the full text of the merged memory, markdown"
    )
    l0: str = Field(min_length=1, max_length=MAX_L0_CHARS, description="one-line summary of the merged memory")


class ProposeMergeRequest(ProposeMergeToolRequest):
    """``propose_merge``: a merged text for several memories, for a person to accept or reject."""

    by: str = Field("agent", description="who proposes it")
    origin: Literal["agent", "sampling"] = Field("agent", description="written by the agent, or by MCP sampling")
    finding: str | None = Field(None, description="the finding (fingerprint) this answers")
    note: str = Field("", description="a note for the person deciding")


class ProposalIdRequest(Request):
    """``proposal`` and ``accept_proposal``: one merge proposal by id."""

    id: str = Field(min_length=1, description="the proposal's id")


class RejectProposalRequest(ProposalIdRequest):
    """``reject_proposal``: a person says no, optionally why."""

    reason: str = Field("", description="why, for the agent that proposed it")


class ProposalsRequest(Request):
    """``proposals``: the merge proposals waiting for a person (``all``: decided ones too)."""

    all: bool = Field(False, description="include accepted and rejected proposals")
    diffs: bool = Field(False, description="add a diff from each source to the merged text")


# ---------------------------------------------------------------- the person's governance and upkeep


class NoParams(Request):
    """``status``, ``doctor``, ``health``, ``regenerate_router``: no parameters."""


class ReindexRequest(Request):
    """``reindex``: compare files with the index (``full``: rebuild it from scratch)."""

    full: bool = Field(False, description="rebuild the index from scratch")


class GovernanceRequest(Request):
    """``governance``: findings that need a person's judgment."""

    kind: str | None = Field(None, description="only findings of this kind")
    include_dismissed: bool = Field(False, description="also findings a person dismissed")


class DismissRequest(Request):
    """``dismiss``: hide a finding until one of its files changes."""

    fingerprint: str = Field(min_length=1, description="the finding's fingerprint")


class GraphRequest(Request):
    """``graph``: the link graph and its communities."""

    recompute: bool = Field(False, description="recompute the communities now")
    layout: bool = Field(False, description="add positions for the graph view")


class PromoteRequest(Request):
    """``promote``: an inbox file into the ontology folder of ``type``."""

    path: str = Field(min_length=1, description="the file's name in inbox/")
    type: MemoryType = Field(description="memory type; decides the folder")
    id: str | None = Field(None, description="the id to give it (default: from the file name)")


class ImportRequest(Request):
    """``import``: bring another tool's memory files in (``dry_run``: the plan only)."""

    path: str = Field(min_length=1, description="the file or folder to import")
    format: str | None = Field(None, description="the source format (default: detected)")
    dry_run: bool = Field(False, description="only say what would happen")


# ---------------------------------------------------------------- REST's own shapes (daemon/rest/)
# The web page's routes put some parameters in the URL and name others its own way; these
# models are those shapes, with the same limits and messages as the operations behind them.


class MemoryListQuery(ListRequest):
    """``GET /api/memories``: ``list``'s parameters plus ``q``, a filter on id, summary and tags."""

    q: str | None = Field(None, max_length=MAX_QUERY_CHARS, description="only memories whose id, l0 or tags hold this")


class UpdateMemoryBody(Request):
    """``PUT /api/memories/{id}``: the version read (and its checksum) and the fields to change."""

    version: int = Field(ge=1, description="the version you read; a newer one on disk is a 409")
    checksum: str | None = Field(None, description="the checksum you read; another one on disk is a 409")
    type: MemoryType | None = Field(None, description="memory type; decides the folder")
    content: str | None = Field(None, description="the full text (L2), markdown")
    l0: str | None = Field(None, min_length=1, description="one-line summary shown in the catalog")
    l1: str | None = Field(None, description="a paragraph-length summary (L1 tier)")
    tags: list[str] | None = Field(None, description="tags")
    related: list[str] | None = Field(None, description="ids of related memories")
    importance: float | None = Field(None, ge=0.0, le=1.0, description="0..1")
    always_load: bool | None = Field(None, description="load it with every context, like a rule")

    _l0_not_blank = field_validator("l0")(_not_blank)


class GovernanceActionBody(Request):
    """``POST /api/governance/actions``: what a person does about a finding."""

    action: Literal["archive", "set_importance", "dismiss"] = Field(description="what to do")
    memory_id: str | None = Field(None, min_length=1, description="the memory (archive, set_importance)")
    finding_id: str | None = Field(None, min_length=1, description="the finding's fingerprint (dismiss)")
    importance: float | None = Field(None, ge=0.0, le=1.0, description="the new importance (set_importance)")


# ---------------------------------------------------------------- validation

_TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "string": "a string",
    "bool": "true or false",
    "list": "a list",
    "dict": "an object",
    "model": "an object",
}


def _got(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bounds(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    field = model.model_fields.get(name)
    lo = hi = None
    for item in field.metadata if field is not None else []:
        lo = getattr(item, "ge", None) if getattr(item, "ge", None) is not None else lo
        hi = getattr(item, "le", None) if getattr(item, "le", None) is not None else hi
    return lo, hi


def _describe(model: type[BaseModel], error: Any) -> str:
    """One pydantic error in user words: ``name: what is wrong (got value)``."""
    loc = ".".join(str(part) for part in error["loc"]) or "params"
    name = str(error["loc"][0]) if error["loc"] else ""
    kind, got, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "missing":
        return f"{loc}: is required"
    if kind == "extra_forbidden":
        return f"{loc}: unknown parameter"  # the known ones: ContractError.allowed, the JSON schema
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        lo, hi = _bounds(model, name)
        if lo is not None and hi is not None:
            return f"{loc}: must be between {lo} and {hi} (got {_got(got)})"
        return (
            f"{loc}: must be at least {lo} (got {_got(got)})"
            if lo is not None
            else f"{loc}: must be at most {hi} (got {_got(got)})"
        )
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return f"{loc}: must not be empty"
    if kind == "too_short":
        return f"{loc}: must have at least {ctx.get('min_length')} items (got {ctx.get('actual_length')})"
    if kind == "too_long":
        return f"{loc}: must have at most {ctx.get('max_length')} items (got {ctx.get('actual_length')})"
    if kind == "string_too_long":
        return f"{loc}: must be at most {ctx.get('max_length')} characters (got {len(got)})"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace(" or ", ", ").replace("'", "")
        return f"{loc}: must be one of: {expected} (got {_got(got)})"
    if kind == "value_error":
        return f"{loc}: {ctx.get('error', error['msg'])}"
    base = kind.split("_")[0]
    if kind.endswith("_type") or kind.endswith("_parsing") or kind == "int_from_float":
        return f"{loc}: must be {_TYPE_WORDS.get(base, base)} (got {_got(got)})"
    return f"{loc}: {error['msg'].lower()} (got {_got(got)})"


def validate(model: type[Request], params: Any, *, strict: bool = True) -> Request:
    """``params`` checked against ``model``; a :class:`ContractError` names every bad parameter.

    ``params`` must be an object of named parameters (``None`` means none); a known parameter given
    as ``null`` counts as absent. ``strict=False`` is for text sources (a URL's query string or
    path), where ``"5"`` is the only way to say 5; limits and messages are the same.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ContractError("params must be an object of named parameters", list(model.model_fields))
    # null is the same as leaving a known parameter out (its default applies), as JSON clients expect
    params = {k: v for k, v in params.items() if v is not None or k not in model.model_fields}
    try:
        return model.model_validate(params, strict=strict)
    except ValidationError as exc:
        messages = [_describe(model, error) for error in exc.errors(include_url=False)]
        raise ContractError("; ".join(messages), list(model.model_fields)) from None


def _takes_text(annotation: Any) -> bool:
    """Whether a field's type accepts a string as it is (``str``, a ``Literal`` of strings, or a union with one)."""
    if annotation is str:
        return True
    args = get_args(annotation)
    return any(isinstance(a, str) or _takes_text(a) for a in args)


def from_text(model: type[Request], raw: dict[str, str]) -> dict[str, Any]:
    """Params that arrived as text (a URL's query string or path) as the JSON values they spell.

    For a field that does not take a string (a number, a boolean), a value that reads as a JSON
    number or boolean becomes one (``"-1"`` -> ``-1``, ``"true"`` -> ``True``), so the contract
    judges the value itself and says ``(got -1)`` exactly as it does over the socket; anything else
    stays text and is refused in the same words. Text fields are left alone (an id ``"123"`` stays text).
    """
    out: dict[str, Any] = dict(raw)
    for name, value in raw.items():
        field = model.model_fields.get(name)
        if field is not None and not _takes_text(field.annotation):
            try:
                decoded = json.loads(value)
            except ValueError:
                continue
            if isinstance(decoded, (bool, int, float)):
                out[name] = decoded
    return out


def input_schema(model: type[Request]) -> dict[str, Any]:
    """The JSON schema of a request (an MCP tool's ``inputSchema``, the REST docs)."""
    return model.model_json_schema()
