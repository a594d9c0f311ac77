"""The history hook: every write the gate makes final becomes a git commit or a journal entry.

``install(root, config_of)`` registers one :class:`HistoryRecorder` per workspace
with ``write_gate.before_write`` / ``after_write`` (the Engine does it on load).

Mode (``history.mode``): ``auto`` uses git when the workspace is inside a git
repository and a ``git`` binary exists, else the journal; ``git``, ``journal`` and
``off`` force one.

Git mode commits only the paths the daemon wrote, with ``git commit --only`` (see
``gitrepo.py``), authored ``ctxos (<client>)``. Writes made inside one
:func:`scope` (one RPC call, one scheduled job) become one commit when the scope
ends: an archive move (old and new path) or a router regeneration (several files)
is one commit. Before the daemon overwrites a file that differs from ``HEAD``
(a person's uncommitted edit to *that* file), that version is committed first
under the person's own git identity, so reverting the agent's change gets the
person's text back; nothing else of theirs is ever committed.

Journal mode keeps the last ``history.journal_versions`` versions per memory
(``journal.py``); before the daemon overwrites a version the journal does not
hold (a person's edit), that version is recorded first.

A failure here is logged and counted (``status()``), never turned into a failed
write: the file is already final when the hook runs.
"""

from __future__ import annotations

import fcntl
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import write_gate
from ..memory_file import checksum_bytes
from ..workspace import is_memory_path, relative_path, state_dir
from . import gitrepo, journal
from .actor import Actor, acting, current_actor

log = logging.getLogger(__name__)

MODES = ("auto", "git", "journal", "off")
PERSON_EDIT_TOOL = "edit on disk"
PERSON_EDIT_WHO = "found on disk (not written by ctxos)"
_ID_RE = re.compile(r"(?m)^id:[ \t]*['\"]?([^'\"\n]+?)['\"]?[ \t]*$")
_VERSION_RE = re.compile(r"(?m)^version:[ \t]*(\d+)[ \t]*$")


@dataclass
class _Scope:
    actor: Actor
    pending: dict[Path, list[str]] = field(default_factory=dict)


_scope: ContextVar[_Scope | None] = ContextVar("ctxos_history_scope", default=None)
_recorders: dict[Path, HistoryRecorder] = {}
_registry_lock = threading.Lock()


def frontmatter_fields(text: str) -> tuple[str | None, int | None]:
    """``id`` and ``version`` from a file's frontmatter (a cheap look, no full parse)."""
    head = text[:8192].split("\n---", 1)[0] if text.startswith("---") else ""
    mid = _ID_RE.search(head)
    ver = _VERSION_RE.search(head)
    return (mid.group(1).strip() if mid else None), (int(ver.group(1)) if ver else None)


class HistoryRecorder:
    """History for one workspace: the hooks, the lock, the counters."""

    def __init__(self, root: Path, config_of: Callable[[], Any]) -> None:
        self.root = Path(root).resolve()
        self.config_of = config_of
        self.refs = 0
        self.commits = 0
        self.journal_entries = 0
        self.failures = 0
        self.last_error: str | None = None
        self._thread_lock = threading.RLock()
        # path -> git blob id of the bytes this recorder last committed there: a file still holding
        # them needs no `git status` before the next write, and no `ls-files` at commit (bounded).
        self._committed: dict[str, str] = {}
        # paths the daemon wrote whose commit failed (git busy with a person's merge or rebase, a
        # lock that did not clear): committed, still under the daemon's name, with the next commit.
        self._uncommitted: dict[str, Actor] = {}

    # --- settings ----------------------------------------------------------------------
    def setting(self, key: str, default: Any) -> Any:
        try:
            return self.config_of().get(f"history.{key}", default)
        except Exception:  # noqa: BLE001 - no config yet: defaults
            return default

    def mode(self) -> str:
        """``git``, ``journal`` or ``off`` for this workspace now."""
        raw = self.setting("mode", "auto")
        wanted = "off" if raw is False else str(raw or "auto").lower()  # YAML reads a bare `off` as false
        if wanted not in MODES:
            wanted = "auto"
        if wanted in ("off", "journal"):
            return wanted
        in_git = gitrepo.find_repo(self.root) is not None and gitrepo.git_binary() is not None
        if wanted == "git":
            return "git" if in_git else "journal"
        return "git" if in_git else "journal"

    def keep(self) -> int:
        try:
            return max(1, int(self.setting("journal_versions", journal.DEFAULT_KEEP)))
        except (TypeError, ValueError):
            return journal.DEFAULT_KEEP

    def status(self) -> dict[str, Any]:
        return {
            "mode": self.mode(),
            "commits": self.commits,
            "journal_entries": self.journal_entries,
            "failures": self.failures,
            "last_error": self.last_error,
            "waiting_to_commit": sorted(self._uncommitted),
        }

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One history writer at a time, across threads and processes (git's index, the journal files)."""
        with self._thread_lock:
            with open(state_dir(self.root) / "history.lock", "a+") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _tracked_path(self, rel: str) -> bool:
        """Files history follows: inside the workspace, not derived state, not a temp file."""
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            return False
        state = relative_path(self.root, state_dir(self.root))
        if state and (rel == state or rel.startswith(state + "/")):
            return False
        return not write_gate.TEMP_NAME_RE.match(rel.rsplit("/", 1)[-1])

    def _fail(self, what: str, exc: Exception) -> None:
        self.failures += 1
        self.last_error = f"{what}: {exc}"
        log.warning("history: %s failed: %s", what, exc)

    # --- hooks -------------------------------------------------------------------------
    def before_write(self, rel: str) -> None:
        """The file at ``rel`` is about to be replaced: keep a version nobody recorded yet."""
        if not self._tracked_path(rel):
            return
        scope = _scope.get()
        if scope is not None and rel in scope.pending.get(self.root, ()):
            return  # written earlier in this same call: the call's commit has it
        if rel in self._uncommitted:
            return  # the daemon's own text, waiting to be committed
        path = self.root / rel
        try:
            data = path.read_bytes()
        except OSError:
            return  # a new file: nothing to keep
        mode = self.mode()
        try:
            with self.locked():
                if mode == "git":
                    self._commit_person_edit(rel, data)
                elif mode == "journal" and _journaled(rel):
                    self._journal(rel, data, Actor(PERSON_EDIT_WHO, PERSON_EDIT_TOOL))
        except (OSError, gitrepo.GitError) as exc:
            self._fail(f"keeping the version of {rel} found on disk", exc)

    def after_write(self, rel: str) -> None:
        if not self._tracked_path(rel):
            return
        scope = _scope.get()
        if scope is not None:
            pending = scope.pending.setdefault(self.root, [])
            if rel not in pending:
                pending.append(rel)
            return
        self.record([rel], current_actor())

    def record(self, rels: list[str], actor: Actor) -> None:
        """Make the writes of ``rels`` history now (one commit, or one journal entry per file)."""
        mode = self.mode()
        if mode == "off" or not rels:
            return
        try:
            with self.locked():
                if mode == "git":
                    try:
                        self._commit(rels, actor)
                    except gitrepo.GitError:
                        for rel in rels:
                            self._uncommitted.setdefault(rel, actor)
                        raise
                else:
                    for rel in rels:
                        try:
                            data = (self.root / rel).read_bytes()
                        except FileNotFoundError:
                            continue  # moved away: the new path's entry tells the story
                        if _journaled(rel):
                            self._journal(rel, data, actor)
        except (OSError, gitrepo.GitError) as exc:
            self._fail(f"recording {', '.join(rels[:3])}", exc)

    # --- git -------------------------------------------------------------------------------
    def _commit(self, rels: list[str], actor: Actor) -> None:
        busy = gitrepo.busy_reason(self.root)
        if busy:
            raise gitrepo.GitError(f"{busy}; the write is kept and committed after it")
        earlier = [rel for rel in self._uncommitted if rel not in rels]
        rels = [*rels, *earlier]
        described = []
        contents: dict[str, bytes | None] = {}
        for rel in rels:
            try:
                data = (self.root / rel).read_bytes()
                contents[rel] = data
                mid, version = frontmatter_fields(data[:8192].decode("utf-8", "replace"))
            except OSError:
                contents[rel], mid, version = None, None, None
            described.append((rel, mid, version))
        known = frozenset(rel for rel in rels if rel in self._committed)
        message = commit_message(actor, described)
        if earlier:
            message += (
                "Also written earlier by ctxos for "
                + ", ".join(sorted({self._uncommitted[rel].client for rel in earlier}))
                + " (not committed then).\n"
            )
        if gitrepo.commit_paths(self.root, rels, message, actor.author_name, known_tracked=known):
            self.commits += 1
        for rel in rels:
            self._uncommitted.pop(rel, None)
        self._remember(contents)

    def _remember(self, contents: dict[str, bytes | None]) -> None:
        if len(self._committed) > 20_000:
            self._committed.clear()
        for rel, data in contents.items():
            if data is None:
                self._committed.pop(rel, None)
            else:
                self._committed[rel] = gitrepo.blob_id(data)

    def _commit_person_edit(self, rel: str, data: bytes) -> None:
        """Commit the on-disk version of ``rel`` when it differs from HEAD, under the person's identity."""
        if self._committed.get(rel) == gitrepo.blob_id(data):
            return  # still the bytes this recorder committed: already history
        if gitrepo.busy_reason(self.root) or not gitrepo.has_uncommitted_change(self.root, rel):
            self._remember({rel: data})
            return
        who = gitrepo.person_identity(self.root)
        message = (
            f"{PERSON_EDIT_TOOL}: {rel}\n\nThe version of {rel} found on disk before ctxos changed it "
            f"(kept so it can be restored).\n\nPath: {rel}\nTool: {PERSON_EDIT_TOOL}\n"
        )
        if gitrepo.commit_paths(self.root, [rel], message, who[0], email=who[1]):
            self.commits += 1
        self._remember({rel: data})

    # --- journal -------------------------------------------------------------------------
    def _journal(self, rel: str, data: bytes, actor: Actor) -> None:
        text = data.decode("utf-8", "replace")
        mid, version = frontmatter_fields(text)
        entry = journal.append(
            self.root,
            mid or Path(rel).stem,
            who=actor.client,
            tool=actor.tool,
            path=rel,
            version=version,
            checksum=checksum_bytes(data),
            text=text,
            keep=self.keep(),
        )
        if entry is not None:
            self.journal_entries += 1


def _journaled(rel: str) -> bool:
    """The journal keeps memories (served or archived), not router files or other generated files."""
    from ..ontology import ARCHIVE_FOLDER

    if rel.startswith(ARCHIVE_FOLDER + "/"):
        return is_memory_path(rel[len(ARCHIVE_FOLDER) + 1 :])
    return is_memory_path(rel)


def commit_message(actor: Actor, described: list[tuple[str, str | None, int | None]]) -> str:
    """Subject names the tool and the memory; trailers (``Memory:``, ``Tool:``, ``Client:``) for readers."""
    ids = list(dict.fromkeys(mid for _, mid, _ in described if mid))
    if len(ids) == 1:
        version = next((v for _, mid, v in described if mid == ids[0] and v is not None), None)
        subject = f"{actor.tool}: {ids[0]}" + (f" (v{version})" if version else "")
    elif ids:
        subject = f"{actor.tool}: {', '.join(ids[:3])}" + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    else:
        subject = f"{actor.tool}: {', '.join(rel for rel, _, _ in described[:3])}"
    lines = [subject, "", f"Written by ctxos for {actor.client}.", ""]
    lines += [f"Memory: {mid}" for mid in ids]
    lines += [f"Path: {rel}" for rel, _, _ in described]
    lines += [f"Tool: {actor.tool}", f"Client: {actor.client}"]
    return "\n".join(lines) + "\n"


# --- scopes: one commit per call -----------------------------------------------------------


@contextmanager
def scope(actor: Actor) -> Iterator[Actor]:
    """Attribute the block's writes to ``actor`` and make them one commit when it ends."""
    outer = _scope.get()
    if outer is not None:  # nested (a job calling a write): the outer scope commits
        with acting(actor):
            yield actor
        return
    current = _Scope(actor)
    token = _scope.set(current)
    try:
        with acting(actor):
            yield actor
    finally:
        _scope.reset(token)
        for root, rels in current.pending.items():
            recorder = _recorders.get(root)
            if recorder is not None:
                recorder.record(rels, actor)


# --- installation ---------------------------------------------------------------------------


def _before(root: Path, rel: str) -> None:
    recorder = _lookup(root)
    if recorder is not None:
        recorder.before_write(rel)


def _after(root: Path, rel: str) -> None:
    recorder = _lookup(root)
    if recorder is not None:
        recorder.after_write(rel)


def _lookup(root: Path) -> HistoryRecorder | None:
    recorder = _recorders.get(Path(root))
    if recorder is None:
        try:
            recorder = _recorders.get(Path(root).resolve())
        except OSError:
            return None
    return recorder


def install(root: Path, config_of: Callable[[], Any]) -> HistoryRecorder:
    """The workspace's recorder (created on first install; counted, so two engines share one)."""
    key = Path(root).resolve()
    with _registry_lock:
        recorder = _recorders.get(key)
        if recorder is None:
            recorder = HistoryRecorder(key, config_of)
            _recorders[key] = recorder
        recorder.refs += 1
        if _before not in write_gate.before_write:
            write_gate.before_write.append(_before)
        if _after not in write_gate.after_write:
            write_gate.after_write.append(_after)
    return recorder


def uninstall(recorder: HistoryRecorder) -> None:
    with _registry_lock:
        recorder.refs -= 1
        if recorder.refs <= 0 and _recorders.get(recorder.root) is recorder:
            del _recorders[recorder.root]


def recorder_for(root: Path) -> HistoryRecorder | None:
    return _lookup(root)
