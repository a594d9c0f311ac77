"""The typed configuration: one pydantic model per ``_config.yaml`` section.

``services/config.py`` validates the merged file (the user's ``_config.yaml`` over
``default_config.yaml``) against :class:`Settings`; every value that cannot be used is a
problem with its field and a reason in user words, listed by ``ctxos doctor``. Code reads
``config.settings.query.candidate_k`` (a checked ``int``) instead of coercing a dotted
lookup at each use site.

Unknown keys are kept and ignored (an older or newer file still loads). Security settings
(``daemon.http_*``, ``http_limits``, ``router.write_to_workspace``) are checked strictly,
with their own messages: a wrong type must never turn into an open default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

# ------------------------------------------------------------------ value types


def _checked(predicate: Callable[[Any], bool], message: str) -> BeforeValidator:
    """A strict check with our own message (pydantic's lax coercion would accept "80" or true)."""

    def check(value: Any) -> Any:
        if not predicate(value):
            raise PydanticCustomError("ctxos", message)
        return value

    return BeforeValidator(check)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


Port = Annotated[int, _checked(lambda v: _is_whole(v) and 0 <= v <= 65535, "must be a whole number from 0 to 65535")]
PositiveSeconds = Annotated[float, _checked(lambda v: _is_number(v) and v > 0, "must be a positive number of seconds")]
StrictPositiveInt = Annotated[int, _checked(lambda v: _is_whole(v) and v > 0, "must be a positive whole number")]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
Share = Annotated[float, Field(ge=0, le=1)]


class Section(BaseModel):
    """A mapping of settings; keys this version does not know are kept and ignored."""

    model_config = ConfigDict(extra="allow")


# ------------------------------------------------------------------ sections


class QuerySettings(Section):
    default_budget: PositiveInt = 4000
    candidate_k: PositiveInt = 60
    candidate_k_max: PositiveInt = 150
    neighbour_limit: NonNegativeInt = 40
    importance_k: NonNegativeInt = 10
    l2_top_n: NonNegativeInt = 3
    min_score: NonNegativeFloat = 0.05
    catalog_max_entries: NonNegativeInt = 40
    catalog_budget_share: Annotated[float, Field(ge=0, le=0.9)] = 0.1


class SaveGuardSettings(Section):
    l1_share: Share = 0.25


class SemanticSettings(Section):
    model: str = "wordllama"


class LimitsSettings(Section):
    max_file_bytes: PositiveInt = 262144


class TokensSettings(Section):
    counter: str = "heuristic"


class RecencySettings(Section):
    half_life_days: dict[str, PositiveFloat] = Field(default_factory=dict)


class GraphSettings(Section):
    community_bonus: NonNegativeFloat = 0.08
    implicit_edge_min_shared_tags: NonNegativeInt = 2
    leiden_seed: int = 42
    leiden_resolution: PositiveFloat = 1.0


class AccessLogSettings(Section):
    frequency_window_days: PositiveFloat = 30


class DaemonSettings(Section):
    http_host: Annotated[
        str,
        _checked(lambda v: isinstance(v, str) and bool(v.strip()), "must be a host name (127.0.0.1, ::1 or localhost)"),
    ] = "127.0.0.1"
    http_port: Port = 3847
    http_auth: Annotated[
        Literal["token", "none"], _checked(lambda v: v in ("token", "none"), "must be token (the default) or none")
    ] = "token"
    http_token: Annotated[
        str | None,
        _checked(
            lambda v: v is None or (isinstance(v, str) and bool(v.strip())), "must be a non-empty string, or null"
        ),
    ] = None
    debounce_ms: NonNegativeFloat = 150
    log_max_bytes: PositiveInt = 1_048_576
    log_backups: NonNegativeInt = 3


class HttpLimitsSettings(Section):
    mcp_session_idle_s: PositiveSeconds = 600.0
    mcp_max_sessions: StrictPositiveInt = 64
    sse_max_streams: StrictPositiveInt = 16


class TraySettingsModel(Section):
    band_good_from: NonNegativeFloat = 75  # above 100: never green (tests move the bands around a score)
    band_fair_from: NonNegativeFloat = 50
    refresh_seconds: Annotated[float, Field(ge=5)] = 300
    min_refresh_gap_s: NonNegativeFloat = 30
    notifications: bool = True
    notify_min_interval_s: NonNegativeFloat = 300
    mode: Literal["auto", "thread", "process"] = "auto"


class DecaySettings(Section):
    days: PositiveFloat = 90
    max_loads: NonNegativeInt = 1
    exempt_types: list[str] = Field(default_factory=lambda: ["rule"])


class ConflictSettings(Section):
    min_text_overlap: Share = 0.5
    importance_gap: Share = 0.3
    contradiction_min_words: PositiveInt = 4
    contradiction_min_overlap: Share = 0.75
    contradiction_min_topic_overlap: Share = 0.2


class ConsolidationSettings(Section):
    min_overlap: Share = 0.7
    shingle_words: PositiveInt = 2


class GodNodeSettings(Section):
    min_centrality_ratio: PositiveFloat = 3.0
    min_degree: NonNegativeInt = 4
    max_importance: Share = 0.5


class GovernanceSettings(Section):
    scratch_ttl_days: NonNegativeFloat = 7
    scratch_auto_archive: bool = True
    max_posting: PositiveInt = 400
    decay: DecaySettings = Field(default_factory=DecaySettings)
    conflict: ConflictSettings = Field(default_factory=ConflictSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    god_nodes: GodNodeSettings = Field(default_factory=GodNodeSettings)


class HealthSettings(Section):
    coverage_days: PositiveFloat = 14
    freshness_days: PositiveFloat = 90
    freshness_exempt_types: list[str] = Field(default_factory=lambda: ["rule"])
    efficiency_ideal: tuple[Share, Share] = (0.5, 0.8)
    weights: dict[str, NonNegativeFloat] = Field(default_factory=dict)


class ScheduleSettings(Section):
    governance_interval: NonNegativeFloat = 3600
    communities_interval: NonNegativeFloat = 3600
    scratch_expiry_interval: NonNegativeFloat = 3600
    router_interval: NonNegativeFloat = 3600
    after_change_delay: NonNegativeFloat = 5
    wake_check_interval: PositiveFloat = 60


class HistorySettings(Section):
    # YAML reads a bare `off` as false: that is "off" here, as the history code always took it.
    mode: Annotated[Literal["auto", "git", "journal", "off"], BeforeValidator(lambda v: "off" if v is False else v)] = (
        "auto"
    )
    journal_versions: PositiveInt = 20
    git_sync: bool = False
    git_sync_interval: PositiveFloat = 900
    git_remote: str | None = None


class RouterSettings(Section):
    # writing generated files into a person's vault only when asked: a typo must not mean "yes"
    write_to_workspace: Annotated[
        bool | None, _checked(lambda v: v is None or isinstance(v, bool), "must be true, false or null")
    ] = None
    query: str = ""
    intent: str | None = None
    index_share: Share = 0.3
    adapters: list[str] = Field(default_factory=list)
    workspace_adapters: list[str] = Field(default_factory=list)
    projects: list[str | dict[str, Any]] = Field(default_factory=list)
    budgets: dict[str, PositiveInt] = Field(default_factory=dict)


def _federate_names(value: Any) -> Any:
    from .federation import check_federate

    problem = check_federate(value)
    if problem:
        raise PydanticCustomError("ctxos", problem)
    return value


class Settings(Section):
    """The whole effective configuration, typed (``config.settings``)."""

    query: QuerySettings = Field(default_factory=QuerySettings)
    save_guard: SaveGuardSettings = Field(default_factory=SaveGuardSettings)
    semantic: SemanticSettings = Field(default_factory=SemanticSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    tokens: TokensSettings = Field(default_factory=TokensSettings)
    recency: RecencySettings = Field(default_factory=RecencySettings)
    weights: dict[str, dict[str, NonNegativeFloat]] = Field(default_factory=dict)
    intent_triggers: dict[str, list[str]] = Field(default_factory=dict)
    synonyms: dict[str, list[str]] = Field(default_factory=dict)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    access_log: AccessLogSettings = Field(default_factory=AccessLogSettings)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    http_limits: HttpLimitsSettings = Field(default_factory=HttpLimitsSettings)
    tray: TraySettingsModel = Field(default_factory=TraySettingsModel)
    governance: GovernanceSettings = Field(default_factory=GovernanceSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    router: RouterSettings = Field(default_factory=RouterSettings)
    federate: Annotated[list[str] | None, BeforeValidator(_federate_names)] = None


# ------------------------------------------------------------------ messages

# pydantic's error types in the words ``ctxos doctor`` prints ("query.candidate_k must be a whole number").
_WORDS: dict[str, str] = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping of settings",
    "model_type": "must be a mapping of settings",
    "model_attributes_type": "must be a mapping of settings",
    "too_short": "has too few items",
    "too_long": "has too many items",
}


def describe(error: Any) -> str:
    """One pydantic error as a reason a person can act on."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "ctxos":
        return str(error["msg"])
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {"greater_than": "more than", "greater_than_equal": "at least", "less_than": "less than"}
        (limit,) = ctx.values()
        return f"must be {words.get(kind, 'at most')} {limit:g}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    return _WORDS.get(kind, str(error["msg"]).lower())
