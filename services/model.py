"""The data shapes every part of the engine shares.

Kept free of I/O so the daemon, the MCP server, the web view and the
benchmarks can pass these around (and serialise them with ``to_dict``)
without pulling in the index or the file parser.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol

from .rounding import round6

TIERS: tuple[str, ...] = ("L0", "L1", "L2")
SIGNALS: tuple[str, ...] = ("semantic", "bm25", "graph", "recency", "importance", "frequency")


COLD_FIELDS: tuple[str, ...] = ("l1", "l2", "metadata")
BOTH_TIERS = "tiers"  # what a text source is asked for to give (l1, l2) at once (``Memory.tier_texts``)
LINK_LISTS: tuple[str, ...] = ("tags", "related", "requires", "optional", "wikilinks")


class _NoItems(list[str]):
    """The one empty list every memory without tags or links shares (issue 16).

    At 100,000 memories ~360,000 of the five link lists are empty, 56 bytes each as
    separate lists (~19 MiB). Still a ``list`` (equal to ``[]``, JSON- and
    YAML-safe through ``list(...)``), but one that refuses to change, since all share it.
    """

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a memory's empty tag/link list is shared: assign a new list instead")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_no_items, ())  # pickles (parse cache, builder processes) read back as the shared one

    def __copy__(self) -> _NoItems:
        return self

    def __deepcopy__(self, _memo: Any) -> _NoItems:
        return self


NO_ITEMS = _NoItems()


def _no_items() -> _NoItems:
    return NO_ITEMS


SHARED_FIELDS: tuple[str, ...] = ("importance", "created", "modified", "size")
_SHARED_MAX = 8_192
_shared: dict[tuple[type, Any], Any] = {}  # (type, value) -> the one object memories hold for it


def _share(value: Any) -> Any:
    """One object per distinct importance, date, timestamp and file size (issue 16).

    At 100,000 generated memories there were 6 importances, ~900 created dates
    and ~900 modified times, as ~300,000 separate objects (~10 MiB), and 5,300
    file sizes as 87,000 ints (2.3 MiB). All are
    immutable, so memories can share them. Capped: a vault where every time
    differs stops adding at ``_SHARED_MAX`` (the table would cost more than it saves).
    """
    if value is None:
        return value
    key = (type(value), value)
    held = _shared.get(key)
    if held is not None:
        return held
    if len(_shared) < _SHARED_MAX:
        _shared[key] = value
    return value


# Lists whose texts repeat across memories: at 100,000 generated memories 218,000 tags were
# 4,800 distinct texts and 48,000 wikilinks 2,300 (~4.5 MiB of copies, issue 16). ``related``
# (mostly distinct ids) is left out: the interpreter's table of shared texts would cost more.
SHARED_TEXT_LISTS: tuple[str, ...] = ("tags", "wikilinks")


def _share_texts(items: list[Any]) -> list[Any]:
    """The same list with each text the interpreter's one shared copy (``sys.intern``).

    Interned texts are freed with their last user, so the table holds only what memories hold.
    """
    return [sys.intern(item) if type(item) is str else item for item in items]


def _shared_list(name: str, value: list[Any]) -> list[Any]:
    """A tag/link list (``LINK_LISTS``) as memories hold it: empty as ``NO_ITEMS``, repeated texts shared."""
    if not value:
        return NO_ITEMS
    return _share_texts(value) if name in SHARED_TEXT_LISTS else value


HotValues = tuple[bool, str | None, bool, str]  # has L2, display title (None: the title), explicit id, fm title
_PLAIN_HOT: dict[HotValues, HotValues] = {}  # at most 4: the two flags, no title of their own


def _plain_hot(hot: HotValues, title: str) -> HotValues:
    """A released memory's hot values, shared when they hold nothing but the two flags.

    Most memories' display title is their title and they have no frontmatter title: their
    hot values are then one of four tuples every such memory holds, instead of a 4-tuple
    each (72 bytes; ~6 MiB at 100,000 memories, issue 16).
    """
    has_l2, display, explicit_id, fm_title = hot
    if display is None or display == title:
        if not fm_title:
            plain = (bool(has_l2), None, bool(explicit_id), "")
            return _PLAIN_HOT.setdefault(plain, plain)
        return (has_l2, None, explicit_id, fm_title)
    return hot


_ROOTS: dict[str, Path] = {}  # workspace root text -> one shared Path (see ``Memory.release_text``)


def _shared_root(path: Path, rel_path: str) -> Path | None:
    """The workspace root ``path`` is ``rel_path`` under, as one Path object shared by its memories."""
    text = path.as_posix()
    if not rel_path or not text.endswith("/" + rel_path):
        return None
    key = text[: -len(rel_path) - 1]
    root = _ROOTS.get(key)
    if root is None:
        root = _ROOTS.setdefault(key, Path(key))
    return root


class TextSource(Protocol):
    """Reads a released memory's cold fields back from its file (a module-level function, so it pickles)."""

    def __call__(self, memory: Memory, name: str) -> Any: ...


@dataclass(slots=True)
class Memory:
    """One valid memory file, parsed.

    ``l1`` is the paragraph tier (text before the first marker plus the
    ``<!-- L1 -->`` section); ``l2`` is the ``<!-- L2 -->`` section. Rendering
    a memory at L2 gives everything (L1 then L2), see ``tier_text``.

    Don't hold what can be read (issue 16): once indexed, the store calls
    ``release_text`` and the *cold* fields (``l1``, ``l2``, the frontmatter
    dict ``metadata``: ~21 of the store's ~38 MiB at 10,000) leave the object;
    reading one then goes through ``__getattr__`` to the memory's text source,
    which reads the file back (checksum-guarded, with a small LRU). What the
    catalog, ranking and link resolution read for every memory stays hot:
    ``has_l2``, ``display_title``, ``explicit_id``, ``frontmatter_title``
    are kept as small values at release.
    """

    id: str
    type: str
    rel_path: str  # POSIX path relative to the workspace root
    path: Path  # absolute path
    l0: str
    l1: str
    l2: str
    importance: float = 0.5
    tags: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    wikilinks: list[str] = field(default_factory=list)
    created: date | None = None
    modified: datetime | None = None  # naive UTC; default: file mtime
    version: int = 1
    always_load: bool = False
    protected: bool = False
    title: str = ""  # first heading, if any (used by get_skill)
    checksum: str = ""  # sha256 hex of the raw file bytes
    mtime: float = 0.0
    size: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)  # frontmatter as written
    # Set by ``release_text`` (not constructor arguments, not compared): the hot values derived from
    # the cold fields, and where the cold fields are read back from.
    _hot: HotValues | None = field(default=None, init=False, repr=False, compare=False)
    _text_source: TextSource | None = field(default=None, init=False, repr=False, compare=False)
    # The workspace root, shared by every memory of it, once ``path`` is computed on demand (``_root / rel_path``):
    # an absolute ``Path`` per memory, with its parts, held ~350 bytes (35 MiB at 100,000).
    _root: Path | None = field(default=None, init=False, repr=False, compare=False)
    # The analysed tokens of the heading (summary line, title, id words, tags), set once per parse by
    # ``index.heading_tokens`` (``index_build.keep_query_values``, before the text is released): hot fields only.
    # One space-separated text, not a tuple of token strings: 16.6 -> ~9 MiB at 100,000 (issue 16).
    heading_tokens: str | None = field(default=None, init=False, repr=False, compare=False)
    # Tokens of the L1 block and of the catalog line under the default (heuristic) counter, set once per
    # parse by ``render.keep_counts`` (before the text is released, as the heading tokens; -1: not yet): the tier
    # planner costs every candidate without reading its file back. Two small ints (issue 16, h18q).
    l1_tokens: int = field(default=-1, init=False, repr=False, compare=False)
    catalog_tokens: int = field(default=-1, init=False, repr=False, compare=False)

    def __getattr__(self, name: str) -> Any:
        """Only called when normal lookup fails: a released cold field is read back from the file.

        Slots (issue 16): a released field is an *unset* slot, so reading it fails the normal
        lookup and lands here. ~1 KB less per memory than an instance dict (10 MiB at 10,000).
        ``path`` is unset too once ``_root`` is known: joined again at each read (nothing on
        the query path reads it; a file read does).
        """
        if name == "path":
            root = self._root
            if root is not None:
                return root / self.rel_path
        elif name in COLD_FIELDS:
            source = self._text_source
            if source is not None:
                return source(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _holds(self, name: str) -> bool:
        """True when the slot ``name`` is set (no read-back through ``__getattr__``)."""
        try:
            object.__getattribute__(self, name)
        except AttributeError:
            return False
        return True

    def __getstate__(self) -> dict[str, Any]:
        """The set slots only: pickling a released memory (the parse cache) must not read its file back."""
        state: dict[str, Any] = {}
        for name in Memory.__slots__:
            try:
                state[name] = object.__getattribute__(self, name)
            except AttributeError:
                continue
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Every field as pickled, then the few that are shared are replaced by name: one branch per
        # shared field, not a test of every field (100,000 memories are read back at a warm start).
        setattr_ = object.__setattr__
        for name, value in state.items():
            setattr_(self, name, value)
        for name in LINK_LISTS:
            value = state.get(name)
            if type(value) is list:  # not NO_ITEMS, which pickles as itself
                setattr_(self, name, _shared_list(name, value))
        for name in SHARED_FIELDS:
            if name in state:
                setattr_(self, name, _share(state[name]))
        hot = state.get("_hot")
        if hot is not None:
            setattr_(self, "_hot", _plain_hot(hot, state.get("title", "")))

    def _share_small_values(self) -> None:
        """Tag/link lists and small values shared (``_shared_list``, ``_share``); ``path`` dropped for the shared root."""
        for name in LINK_LISTS:
            value = object.__getattribute__(self, name)
            if type(value) is list:  # not NO_ITEMS already
                object.__setattr__(self, name, _shared_list(name, value))
        for name in SHARED_FIELDS:
            object.__setattr__(self, name, _share(object.__getattribute__(self, name)))
        if self._root is None and self._holds("path"):
            root = _shared_root(self.path, self.rel_path)
            if root is not None and root / self.rel_path == self.path:
                self._root = root
                object.__delattr__(self, "path")

    def release_text(self, source: TextSource) -> bool:
        """Drop the cold fields (read back through ``source`` when asked for); False if nothing to drop.

        Only a memory read from a file (a checksum to guard the read-back) is
        released; the hot values derived from the cold fields are kept first.
        """
        if not self.checksum or not self._holds("l1"):
            return False
        meta = self.metadata if self._holds("metadata") else {}
        meta = meta if isinstance(meta, dict) else {}
        title = meta.get("title")
        hot: HotValues = (
            bool(self.l2.strip()) if self._holds("l2") else False,
            self.display_title,
            meta.get("id") is not None,
            title if isinstance(title, str) else "",
        )
        hot = _plain_hot(hot, self.title)
        # The hot values and the source first, then the fields go: a query thread reading this
        # memory meanwhile (the store serves it while a writer releases it) finds either the
        # slot or the source, never neither ("no attribute 'l1'" at 100,000 under load).
        self._hot = hot
        self._text_source = source
        for name in COLD_FIELDS:
            if self._holds(name):
                object.__delattr__(self, name)
        # The few values thousands of memories repeat become one object each (``__setstate__`` shares
        # them again when the parse cache is read): the type, tag and link texts, a display title equal
        # to the title.
        self.type = sys.intern(self.type)
        self._share_small_values()
        return True

    @property
    def file_name(self) -> str:
        """The absolute path as text, without building a ``Path`` (file reads of released memories)."""
        root = self._root
        if root is not None and not self._holds("path"):
            return f"{root}/{self.rel_path}"
        return str(self.path)

    @property
    def released(self) -> bool:
        return self._hot is not None and not self._holds("l1")

    @property
    def has_l2(self) -> bool:
        """True when the memory has an L2 section with text (kept hot: tier planning asks for every candidate)."""
        hot = self._hot
        return bool(hot[0]) if hot is not None else bool(self.l2.strip())

    @property
    def explicit_id(self) -> bool:
        """True when the frontmatter has an ``id`` key (else the id comes from the path)."""
        hot = self._hot
        if hot is not None:
            return bool(hot[2])
        return isinstance(self.metadata, dict) and self.metadata.get("id") is not None

    @property
    def frontmatter_title(self) -> str:
        """The frontmatter's ``title`` when it is a string, else ``""``."""
        hot = self._hot
        if hot is not None:
            return str(hot[3])
        meta = self.metadata.get("title") if isinstance(self.metadata, dict) else None
        return meta if isinstance(meta, str) else ""

    @property
    def is_source(self) -> bool:
        """A file under ``sources/``: an accepted reference agents quote, read-only to them."""
        return self.rel_path.startswith("sources/")

    @property
    def label(self) -> str:
        """What a rendering shows beside the id: the type, and ``source`` for a source."""
        return f"{self.type}, source" if self.is_source else self.type

    @property
    def last_modified(self) -> datetime:
        """When the memory last changed, naive UTC: ``modified`` from the frontmatter, else the file's mtime."""
        if self.modified is not None:
            return self.modified
        return datetime.fromtimestamp(self.mtime, UTC).replace(tzinfo=None)

    @property
    def links(self) -> list[str]:
        """All explicit outgoing links: related, requires, optional, wikilinks (deduplicated, in order)."""
        seen: dict[str, None] = {}
        for target in (*self.related, *self.requires, *self.optional, *self.wikilinks):
            if target and target != self.id:
                seen.setdefault(target, None)
        return list(seen)

    @property
    def display_title(self) -> str:
        """What a person calls this memory: a frontmatter ``title``, else a leading ``# H1``, else its file name.

        ``title`` (the first heading of any level) is not that: in a vault whose notes
        are named by their file (Obsidian), the first heading is often a section such as
        "Settings", and the file name ("Cards view") is the real title.
        """
        hot = self._hot
        if hot is not None:
            return self.title if hot[1] is None else str(hot[1])
        meta = self.frontmatter_title
        if meta.strip():
            return meta.strip()
        first = (self.l1 or self.l2 or "").lstrip().split("\n", 1)[0]
        if first.startswith("# ") and first[2:].strip():
            return first[2:].strip().strip("#").strip()
        stem = self.rel_path.rsplit("/", 1)[-1]
        return stem[:-3] if stem.endswith(".md") else stem or self.id

    def tier_texts(self) -> tuple[str, str]:
        """``(l1, l2)``; a released memory's from one read-back (one lookup, not one per field)."""
        source = self._text_source
        if source is None or self._holds("l1"):
            return self.l1, self.l2
        texts: tuple[str, str] = source(self, BOTH_TIERS)
        return texts

    def tier_text(self, tier: str) -> str:
        """Text of the memory at a tier: L0 the line, L1 the paragraph, L2 everything."""
        if tier == "L0":
            return self.l0
        if tier == "L1":
            return self.l1 or self.l0
        if tier == "L2":
            parts = [p for p in self.tier_texts() if p]
            return "\n\n".join(parts) if parts else self.l0
        raise ValueError(f"unknown tier {tier!r}; expected one of {TIERS}")

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        """JSON-safe view (dates as ISO strings)."""
        data: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "path": self.rel_path,
            "l0": self.l0,
            "importance": self.importance,
            "tags": list(self.tags),
            "related": list(self.related),
            "requires": list(self.requires),
            "optional": list(self.optional),
            "wikilinks": list(self.wikilinks),
            "created": self.created.isoformat() if self.created else None,
            "modified": self.modified.isoformat() if self.modified else None,
            "version": self.version,
            "always_load": self.always_load,
            "protected": self.protected,
            "title": self.title,
            "display_title": self.display_title,
            "checksum": self.checksum,
            "source": self.is_source,
        }
        if include_text:
            data["l1"] = self.l1
            data["l2"] = self.l2
        return data


@dataclass(frozen=True)
class InvalidFile:
    """A file that was skipped, with the reason a person can act on."""

    rel_path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.rel_path, "reason": self.reason}


@dataclass
class SelectedMemory:
    """One memory chosen by a context query, with why it was chosen."""

    id: str
    type: str
    path: str
    tier: str  # "L0" | "L1" | "L2"
    tokens: int  # tokens of its rendered block
    score: float  # composite score, 0..1
    signals: dict[str, float]  # raw signal values, each 0..1
    shares: dict[str, float]  # weight * signal, summing to score
    reason: str = ""  # e.g. "always_load", "rule", "scored"
    workspace: str | None = None  # a federated workspace's name; None: the asking workspace
    sources: list[str] = field(default_factory=list)  # how it became a candidate: bm25, vector, graph, ...

    @classmethod
    def deferred(
        cls,
        explain: Callable[[], tuple[dict[str, float], dict[str, float], list[str]]],
        plain: dict[str, Any],
    ) -> SelectedMemory:
        """An item whose ``signals``, ``shares`` and ``sources`` are made by ``explain()`` when first read.

        The query path selects ~130 memories a query at 10,000; copying each one's signals,
        composing its shares and sorting its sources was ~1 ms of a query's CPU that the
        socket's ``get_context`` (no ``detail``) and the MCP answer (``agent_dict``) never
        read. ``plain`` gives every other field and becomes the item's own ``__dict__`` (no
        keyword arguments to unpack and copy: ~125 a query). Equality, ``repr``, copies and
        pickles read the three fields, so they see the same values as an item built whole.
        """
        item = cls.__new__(cls)
        plain["_explain"] = explain
        item.__dict__ = plain
        return item

    def __getattr__(self, name: str) -> Any:
        """Only called for a missing attribute: a ``deferred`` item's explanation, made once."""
        if name in _EXPLAINED:
            explain = self.__dict__.get("_explain")
            if explain is not None:
                signals, shares, sources = explain()
                self.__dict__.update(signals=signals, shares=shares, sources=sources)
                self.__dict__.pop("_explain", None)
                return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        """The fields only: a deferred explanation is made first (its callable does not pickle)."""
        if "_explain" in self.__dict__:
            self.__getattr__("signals")
        return self.__dict__

    def to_dict(self) -> dict[str, Any]:
        return selected_dicts([self])[0]

    def agent_dict(self) -> dict[str, Any]:
        """What an agent is told of it (``agent_context``): no signals, shares, sources, path or reason."""
        data: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "tier": self.tier,
            "tokens": self.tokens,
            "score": round(self.score, 6),
        }
        if self.workspace:
            data["workspace"] = self.workspace
        return data


_EXPLAINED = frozenset(("signals", "shares", "sources"))  # a ``SelectedMemory.deferred`` item's lazy fields


def selected_dicts(selected: list[SelectedMemory], detail: bool = True) -> list[dict[str, Any]]:
    """Each memory's ``to_dict``, with every score, signal and share of the list rounded in one pass.

    The answer's ~1,500 numbers (~125 memories) rounded one ``round(v, 6)`` at a time were
    ~3.5 ms of every ``get_context``; ``round6`` gives the same values ~10x faster. Without
    ``detail``: no signals, shares or sources (``get_context``'s default, see ``GetContextRequest``).
    """
    flat: list[float] = []
    for item in selected:
        flat.append(item.score)
        if detail:
            flat.extend(item.signals.values())
            flat.extend(item.shares.values())
    rounded = iter(round6(flat))
    out: list[dict[str, Any]] = []
    for item in selected:
        data: dict[str, Any] = {
            "id": item.id,
            "type": item.type,
            "path": item.path,
            "tier": item.tier,
            "tokens": item.tokens,
            "score": next(rounded),
        }
        if detail:
            # zip stops at the end of the keys without taking a value more: the next dict's start.
            data["signals"] = dict(zip(item.signals, rounded))
            data["shares"] = dict(zip(item.shares, rounded))
        data["reason"] = item.reason
        if detail:
            data["sources"] = list(item.sources)
        if item.workspace:
            data["workspace"] = item.workspace
        out.append(data)
    return out


@dataclass
class ContextResult:
    """What ``execute_context_query`` returns: the selection and the rendered text."""

    query: str
    intent: str
    expanded_query: list[str]
    budget_tokens: int
    tokens_used: int
    selected: list[SelectedMemory]
    catalog_ids: list[str]  # memories listed only by their L0 line
    catalog_omitted: int  # catalog entries left out for budget
    rendered: str
    weights: dict[str, float] = field(default_factory=dict)
    elapsed_ms: float = 0.0
    intent_reason: str = ""  # why this intent ("matched 'crash' → debug")
    semantic_model: str = ""  # what computed the semantic signal (model name or keyword-overlap)

    def to_dict(self, detail: bool = True) -> dict[str, Any]:
        """The whole answer; without ``detail`` each selected memory has no signals, shares or sources."""
        return {
            "query": self.query,
            "intent": self.intent,
            "expanded_query": list(self.expanded_query),
            "budget_tokens": self.budget_tokens,
            "tokens_used": self.tokens_used,
            "selected": selected_dicts(self.selected, detail),
            "catalog_ids": list(self.catalog_ids),
            "catalog_omitted": self.catalog_omitted,
            "weights": {
                k: round(v, 6) for k, v in self.weights.items()
            },  # normalised rows: 0.3, not 0.30000000000000004
            "intent_reason": self.intent_reason,
            "semantic_model": self.semantic_model,
            "rendered": self.rendered,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }

    def agent_dict(self) -> dict[str, Any]:
        """The answer as agents are told it (``agent_context``; the MCP tool's ``ContextOut``, key for key).

        Built without the engine's diagnostics (each selected memory's signals, shares and
        sources, the weights): about half of ``to_dict``'s work and a ~26 KB answer instead of
        ~62 KB for what ``ctxos mcp`` sends on (issue 16, docs/engine.md).
        """
        return {
            "rendered": self.rendered,
            "query": self.query,
            "intent": self.intent,
            "expanded_query": list(self.expanded_query),
            "budget_tokens": self.budget_tokens,
            "tokens_used": self.tokens_used,
            "selected": [s.agent_dict() for s in self.selected],
            "catalog_ids": list(self.catalog_ids),
            "catalog_omitted": self.catalog_omitted,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }
