"""The response contracts: what each operation answers, one pydantic model per operation.

The use cases (``services/api``) return these, and every transport sends
``Response.data()``: the JSON the operation has always answered, key for key,
since a model is built from the data the engine produced and dumps only the
keys that were there (``exclude_unset``). The fields listed are the ones callers
rely on, typed; ``extra="allow"`` keeps the rest (engine diagnostics such as
``signals`` or ``weights``) without a second list to keep in step. The request
side is ``services/schemas.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class Response(BaseModel):
    """Base of every response model: the listed fields typed, anything else kept as it came."""

    model_config = ConfigDict(extra="allow")
    _built_from: dict[str, Any] | None = PrivateAttr(default=None)  # set by ``unchecked``

    def data(self) -> dict[str, Any]:
        """The JSON the operation answers: exactly the keys it was built from."""
        if self._built_from is not None:
            return self._built_from
        return self.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def unchecked(cls, data: dict[str, Any]) -> Self:
        """A response around ``data`` as it is, not validated, whose ``data()`` is ``data`` itself."""
        made = cls.model_construct(**data)
        made._built_from = data
        return made


class Item(Response):
    """A nested object of a response (same rules)."""


# ---------------------------------------------------------------- status and the one query path


class StatusResponse(Response):
    mode: str = Field(description="daemon or in-process")
    pid: int
    workspace: str
    state: str
    pending_events: int = 0
    index_lag_ms: float = 0.0
    jobs: dict[str, Any] = Field(default_factory=dict)
    indexing: dict[str, Any] | None = Field(None, description="a cold build's progress; null when none runs")
    memories: int | None = Field(None, description="once loaded")
    invalid_files: int | None = Field(None, description="once loaded")
    config_error: str | None = None


class SelectedOut(Item):
    id: str
    type: str
    path: str
    tier: Literal["L0", "L1", "L2"]
    tokens: int
    score: float = Field(description="composite relevance score, 0..1")
    reason: str = ""
    workspace: str | None = Field(None, description="the federated workspace it comes from; absent: this one")


class ContextResponse(Response):
    """``get_context`` and ``simulate`` (which adds ``community`` / ``community_name`` to each selected)."""

    query: str
    intent: str
    expanded_query: list[str]
    budget_tokens: int
    tokens_used: int
    selected: list[SelectedOut]
    catalog_ids: list[str]
    catalog_omitted: int
    rendered: str
    elapsed_ms: float
    token_counter: str


class AgentSelectedOut(Item):
    id: str
    type: str
    tier: Literal["L0", "L1", "L2"]
    tokens: int
    score: float
    workspace: str | None = Field(None, description="the federated workspace it comes from; absent: this one")


class AgentContextResponse(Response):
    """``agent_context``: ``get_context`` as agents are told it (the MCP tool's ``ContextOut``), no diagnostics."""

    rendered: str
    query: str
    intent: str
    expanded_query: list[str]
    budget_tokens: int
    tokens_used: int
    selected: list[AgentSelectedOut]
    catalog_ids: list[str]
    catalog_omitted: int
    elapsed_ms: float


# ---------------------------------------------------------------- memories


class MemoryMeta(Item):
    """A memory's metadata (``Memory.to_dict(include_text=False)``)."""

    id: str
    type: str
    path: str
    l0: str
    title: str | None = Field(None, description="the frontmatter's title, if any")
    display_title: str = Field(description="what a list shows: the title, else a readable id")
    importance: float
    tags: list[str]
    version: int
    checksum: str
    protected: bool
    always_load: bool


class MemoryResponse(MemoryMeta, Response):
    """``get_memory``: the metadata, both text tiers, and ``text`` at the asked tier."""

    l1: str
    l2: str
    text: str | None = Field(None, description="only when a tier was asked for")


class SkillResponse(MemoryResponse):
    matched: bool
    matched_by: Literal["id", "file name", "title"]


class ListResponse(Response):
    memories: list[MemoryMeta]
    total: int
    count: int
    invalid: int = Field(description="files skipped as invalid (doctor lists them)")


class InvalidFileOut(Item):
    path: str
    reason: str


class DoctorResponse(Response):
    invalid: list[InvalidFileOut]
    count: int
    config_error: str | None
    problems: list[str]
    memories: int
    l1_budget: dict[str, Any]
    never_load_at_l1: list[dict[str, Any]]


# ---------------------------------------------------------------- writes


class SaveWarningOut(Item):
    kind: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class SaveResponse(MemoryMeta, Response):
    created: bool = Field(description="whether this call created the memory")
    created_on: str | None = Field(description="the frontmatter's creation date")
    warnings: list[SaveWarningOut]


class LogSessionResponse(Response):
    path: str
    event: str
    id: str | None


class ReindexResponse(Response):
    full: bool
    updated: list[str]
    removed: list[str]
    unchanged: int
    indexed: int
    index: dict[str, Any]


# ---------------------------------------------------------------- governance


class FindingOut(Item):
    fingerprint: str
    kind: str
    severity: str
    ids: list[str]
    paths: list[str]
    reason: str
    action: dict[str, Any] | None
    command: str | None


class GovernanceResponse(Response):
    findings: list[FindingOut]


class HealthPartOut(Item):
    name: str
    score: float
    points: float
    max_points: float
    advice: str | None = None


class HealthResponse(Response):
    score: int
    parts: list[HealthPartOut]


class ActionResponse(Response):
    """``archive``, ``unarchive``, ``set_importance``, ``dismiss``, ``regenerate_router``: what was done."""


class GraphNode(Item):
    id: str
    title: str
    type: str
    l0: str
    importance: float
    community: int | None
    community_name: str | None
    authority: float
    degree: int


class GraphEdge(Item):
    source: str
    target: str
    kind: Literal["explicit", "implicit"]
    weight: float


class DanglingLink(Item):
    source: str
    target: str


class GraphResponse(Response):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    dangling: list[DanglingLink]
    communities: list[dict[str, Any]]
    community_stats: dict[str, Any]


class ReviewResponse(Response):
    topic: str | None
    matched_ids: list[str]
    total: int
    findings: list[FindingOut]
    proposals: list[dict[str, Any]]


class FlagResponse(Response):
    fingerprint: str


class ProposalResponse(Response):
    """One merge proposal (``describe``), or a decision on one."""


class ProposalsResponse(Response):
    proposals: list[dict[str, Any]]
    count: int
    pending: int


# ---------------------------------------------------------------- history and intake


class HistoryResponse(Response):
    id: str
    path: str
    mode: str
    versions: list[dict[str, Any]]
    count: int


class VersionResponse(Response):
    """``history_version``: one version's text and its diffs."""


class RevertResponse(Response):
    id: str
    path: str
    changed: bool


class InboxResponse(Response):
    items: list[dict[str, Any]]
    count: int


class IntakeResponse(Response):
    """``promote`` and ``import``: what was (or would be) written."""


R = TypeVar("R", bound=Response)
P = ParamSpec("P")


def answers(model: type[R], *, check: bool = True) -> Callable[[Callable[P, dict[str, Any]]], Callable[P, R]]:
    """Type a use case by its response model: the data it builds is checked into ``model``.

    ``model.model_validate(data)`` keeps every key the use case produced (``Response.data()``
    gives them back as they were) and fails loudly if a listed field is missing or of another
    type, so a response that drifts from its contract is a bug found, not a client surprised.

    ``check=False`` is for the query path, whose data is built from typed dataclasses
    (``ContextResult.to_dict``): checking ~130 selected entries and dumping them again was
    ~0.6 ms of every ``get_context`` on the daemon's one interpreter lock (issue 16). The
    data is answered as built; tests/test_responses.py checks it against the model instead.
    """

    def wrap(build: Callable[P, dict[str, Any]]) -> Callable[P, R]:
        @functools.wraps(build)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            data = build(*args, **kwargs)
            return model.model_validate(data) if check else model.unchecked(data)

        return run

    return wrap
