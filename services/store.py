"""The in-memory catalog of a workspace: valid memories by id and by path, and invalid files.

Ids and names are settled here so every consumer sees one answer:

- a file without an ``id`` key is named by its file stem; when several such files
  share a stem (``Plugins/Templates.md``, ``Obsidian Web Clipper/Templates.md``) each
  is named by the shortest folder suffix that tells it apart (``Plugins.Templates``,
  see ``links.qualified_ids``), and the names follow as such files come and go;
- an explicit ``id`` used twice is a duplicate: the file that held the id first
  keeps it (at a full scan: the first path in sorted order), the other is listed as
  invalid naming both files, and it takes the id over when the first goes away;
- ``resolve_link`` finds the memory a link names the way Obsidian does (exact id,
  path, file stem with the linking note's folder first, then loose forms of ids,
  stems and titles).
"""

from __future__ import annotations

import builtins
import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Iterable

from . import groups
from .links import normalise_target, path_key, pick_target, qualified_ids, stem_of, without_suffix
from .model import InvalidFile, Memory
from .tier_source import read_cold

_DASHES = re.compile(r"[\s_]+")


def _link_key(text: str) -> str:
    """Loose form of a link target: case-folded, spaces/underscores as dashes."""
    return _DASHES.sub("-", text.strip().casefold())  # compiled once: 30,000 calls per load at 10,000


def _loose_names(memory: Memory) -> tuple[str, ...]:
    """The loose keys (``_link_key``) of a memory's title, frontmatter title, file stem and id.

    A key equal to the id is the id's own string: most ids are already their loose form,
    and a separate equal key was ~60 bytes a memory in the store's maps (issue 16).
    """
    names = (memory.title, memory.frontmatter_title, stem_of(memory.rel_path), memory.id)
    return tuple(dict.fromkeys(_shared(_link_key(name), memory.id) for name in names if name))


def _shared(key: str, memory_id: str) -> str:
    """``key``, or the equal id string that the store holds anyway (one object instead of two)."""
    return memory_id if key == memory_id else key


def _side_stem(side: str, source: str | None) -> str:
    """The ``_by_stem`` key ``_resolve_side`` looks a link (one side of ``a|b``) up under."""
    text, _ = normalise_target(without_suffix(side), source)
    return path_key(text).rsplit("/", 1)[-1]


# Prefixes of MemoryStore.link_lookups / memory_lookups: an exact id, a file stem, a loose name.
_ID_KEY, _STEM_KEY, _LOOSE_KEY = "i:", "s:", "l:"


def _named_by_path(memory: Memory) -> bool:
    """True when the file has no ``id`` key: its id comes from its path (and may be qualified)."""
    return not memory.explicit_id


class MemoryStore:
    """Memories by id (``memories``) and by path (``by_path``), invalid files by path."""

    def __init__(self) -> None:
        self.memories: dict[str, Memory] = {}
        self.by_path: dict[str, Memory] = {}
        self.invalid: dict[str, InvalidFile] = {}
        self._shadowed: dict[str, Memory] = {}  # path -> memory whose id is taken
        self._parsed: dict[str, Memory] = {}  # path -> as parsed, for files named by their path
        self._stems: dict[str, set[str]] = defaultdict(set)  # stem -> paths named by it
        # Tuples, not sets: nearly every key names one memory, and at 10,000 memories the
        # ~27,000 one-element sets of these two maps held ~5.8 MiB (a set is 216 bytes, a
        # one-element tuple 48; issue 16). Lookups only iterate them, and ``pick_target`` orders.
        # A group past ``groups.TUPLE_MAX`` becomes a set (adding to a tuple copies it).
        # A group of one is the bare string (at 100,000 memories ~300,000 one-element tuples and
        # the id -> keys map held ~25 MiB); the keys a memory was added under are recomputed from
        # its hot fields (``_loose_names``) to remove it.
        self._by_stem: dict[str, groups.Group] = {}  # casefolded stem -> served paths
        self._loose: dict[str, groups.Group] = {}  # _link_key(id, stem, title) -> ids
        self._unreleased: set[str] = set()  # paths served with their text still held (see compact)

    # --- reading -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.memories)

    def get(self, memory_id: str) -> Memory | None:
        return self.memories.get(memory_id)

    def get_by_path(self, rel_path: str) -> Memory | None:
        return self.by_path.get(rel_path)

    def list(self, kind: str | None = None) -> list[Memory]:
        items = list(self.memories.values())  # one-step copy: a writer thread may change the dict
        return sorted((m for m in items if kind is None or m.type == kind), key=lambda m: m.rel_path)

    def invalid_files(self) -> builtins.list[InvalidFile]:
        return sorted(self.invalid.values(), key=lambda f: f.rel_path)

    def parsed_memories(self) -> builtins.list[Memory]:
        """Each file's memory as its file parsed (before a stem rename gave it a qualified id): what the parse cache keeps."""
        parsed, served, shadowed = dict(self._parsed), dict(self.by_path), dict(self._shadowed)
        return [parsed.get(path) or memory for path, memory in (*served.items(), *shadowed.items())]

    def known_paths(self) -> set[str]:
        return set(self.by_path) | set(self.invalid) | set(self._shadowed)

    def checksum_of(self, rel_path: str) -> str | None:
        memory = self.by_path.get(rel_path) or self._shadowed.get(rel_path)
        return memory.checksum if memory else None

    def resolve_link(self, target: str, source: str | None = None) -> str | None:
        """The id a link names, as Obsidian resolves it from the note at ``source`` (a path).

        In order: an explicit ``id``; a path (``[[Plugins/Templates]]``: from the root, else any
        file whose path ends with it); a file stem (``[[Templates]]``); then a loose match
        (case, spaces, underscores ignored) on ids, stems, first headings and frontmatter titles. Several candidates:
        the one in the linking note's folder, else the shortest path. ``a|b`` (a wikilink
        with an alias: Obsidian puts the note first, Dendron last) tries ``a`` then ``b``.
        """
        for side in target.split("|"):
            side = side.strip()
            if not side:
                continue
            exact = self.memories.get(side)
            if exact is not None and not _named_by_path(exact):
                return side  # an explicit id (Dendron's, an agent's) names one note
            found = self._resolve_side(side, source)
            if found is not None:
                return found
            if exact is not None:
                return side  # a qualified id (Plugins.Templates)
        return None

    def link_lookups(self, target: str, source: str | None = None) -> set[str]:
        """The catalog entries ``resolve_link(target, source)`` reads (see ``memory_lookups``).

        A link's answer can change only when a memory found under one of these
        entries comes, goes or changes: the incremental graph update
        (``services/graph_update.py``) re-resolves just those links.
        """
        keys = {_ID_KEY + target}
        for side in target.split("|"):
            side = side.strip()
            if side:
                keys.add(_ID_KEY + side)
                keys.add(_STEM_KEY + _side_stem(side, source))
                keys.add(_LOOSE_KEY + _link_key(side))
        return keys

    def memory_lookups(self, memory: Memory) -> set[str]:
        """The catalog entries a memory is found under: its id, its file stem and its loose names."""
        keys = {_ID_KEY + memory.id, _STEM_KEY + stem_of(memory.rel_path).casefold()}
        keys.update(_LOOSE_KEY + key for key in _loose_names(memory))
        return keys

    def _resolve_side(self, side: str, source: str | None) -> str | None:
        text, anchored = normalise_target(without_suffix(side), source)
        key = path_key(text)
        stem = key.rsplit("/", 1)[-1]  # as _side_stem
        paths = groups.members(self._by_stem.get(stem))
        if "/" in key or anchored:
            exact = [p for p in paths if path_key(without_suffix(p)) == key]
            if not exact and not anchored:
                exact = [p for p in paths if path_key(without_suffix(p)).endswith("/" + key)]
            chosen = pick_target(exact, source)
        else:
            chosen = pick_target(list(paths), source)
        if chosen is None:
            ids = [i for i in groups.members(self._loose.get(_link_key(side))) if i in self.memories]
            chosen = pick_target([self.memories[i].rel_path for i in ids], source)
        memory = self.by_path.get(chosen) if chosen else None
        return memory.id if memory is not None else None

    # --- changing ------------------------------------------------------------
    def put(self, memory: Memory) -> builtins.list[str]:
        """Add or replace the memory at ``memory.rel_path``; return the ids whose entry changed."""
        rel = memory.rel_path
        if self._replace_in_place(memory):
            return [self.by_path[rel].id]
        changed = self.remove_path(rel)
        self.invalid.pop(rel, None)
        if _named_by_path(memory):
            stem = stem_of(rel)
            self._parsed[rel] = memory
            self._stems[stem].add(rel)
            changed += self._rename_stem(stem)
        else:
            changed += self._place(memory)
        return sorted(set(changed))

    def _replace_in_place(self, memory: Memory) -> bool:
        """An edit that keeps the file's id: swap the served object in one step; False to take the long way.

        Queries and ``get_memory`` read the store on other threads while the write thread
        applies an edit. Removing the old entry and placing the new one (the general path,
        which may rename or promote) left the id absent in between, and a reader that
        landed there answered "no memory" or lost a candidate (a flaky REST test showed
        it; tests/test_store_concurrency.py). Each dict assignment here is atomic, so a
        reader sees the old memory or the new one, never neither.

        Only when nothing else moves: the same path keeps the same id (an explicit ``id``
        unchanged, or a path-named file, whose stem group does not change), it is served
        (not a shadowed duplicate), and no duplicate waits for the id (the long way would
        promote it).
        """
        rel = memory.rel_path
        old = self.by_path.get(rel)
        if old is None or self.memories.get(old.id) is not old or rel in self._shadowed:
            return False
        if memory.explicit_id != old.explicit_id or (memory.explicit_id and memory.id != old.id):
            return False
        if any(waiting.id == old.id for waiting in self._shadowed.values()):
            return False
        if not memory.explicit_id:
            self._parsed[rel] = memory  # the parse; the served object carries the stem group's name
            if memory.id != old.id:
                memory = dataclasses.replace(memory, id=old.id)
        self.invalid.pop(rel, None)
        if not memory.released:
            self._unreleased.add(rel)
        self.memories[memory.id] = memory
        self.by_path[rel] = memory
        old_keys, new_keys = _loose_names(old), _loose_names(memory)
        for key in new_keys:  # add before discarding: a link resolves throughout
            groups.add(self._loose, key, memory.id)
        for key in old_keys:
            if key not in new_keys:
                groups.discard(self._loose, key, memory.id)
        return True

    def put_invalid(self, invalid: InvalidFile) -> builtins.list[str]:
        changed = self.remove_path(invalid.rel_path)
        self.invalid[invalid.rel_path] = invalid
        return changed

    def remove_path(self, rel_path: str) -> builtins.list[str]:
        """Forget whatever is at ``rel_path``; promote a shadowed duplicate if its id is now free,
        and give the files that shared its stem their shorter names back."""
        self.invalid.pop(rel_path, None)
        changed = self._unplace(rel_path)
        if self._parsed.pop(rel_path, None) is not None:
            stem = stem_of(rel_path)
            group = self._stems.get(stem)
            if group is not None:
                group.discard(rel_path)
                if group:
                    changed += self._rename_stem(stem)
                else:
                    del self._stems[stem]
        return changed

    def remove_paths_under(self, rel_dir: str) -> builtins.list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        changed: builtins.list[str] = []
        for path in [p for p in self.known_paths() if p.startswith(prefix)]:
            changed.extend(self.remove_path(path))
        return changed

    def _fill(self, items: Iterable[Memory | InvalidFile]) -> None:
        """Fill a new, empty store from a full scan (items in sorted path order)."""
        items = list(items)
        named = [m for m in items if isinstance(m, Memory) and _named_by_path(m)]
        for memory in named:  # group stems first: each file is named once
            self._parsed[memory.rel_path] = memory
            self._stems[stem_of(memory.rel_path)].add(memory.rel_path)
        ids: dict[str, str] = {}
        for group in self._stems.values():
            ids.update(qualified_ids(group))
        for item in items:
            if isinstance(item, InvalidFile):
                self.put_invalid(item)
            elif _named_by_path(item):
                wanted = ids[item.rel_path]
                self._place(item if item.id == wanted else dataclasses.replace(item, id=wanted))
            else:
                self._place(item)

    @classmethod
    def from_items(cls, items: Iterable[Memory | InvalidFile]) -> MemoryStore:
        """A new store from a full scan (items in sorted path order).

        There is no in-place rebuild: a running engine builds the new store
        here and swaps its reference in one assignment, so a query on another
        thread sees the old store or the new one, never a half-filled one.
        """
        store = cls()
        store._fill(items)
        return store

    def add_items(self, items: Iterable[Memory | InvalidFile]) -> builtins.list[str]:
        """``put`` / ``put_invalid`` each item in order (a cold build's chunk); the ids whose entry changed.

        Files named by their stem may rename files added earlier (``Templates``
        becomes ``Plugins.Templates`` once a second ``Templates.md`` arrives):
        their ids are among those returned.
        """
        changed: builtins.list[str] = []
        for item in items:
            changed += self.put_invalid(item) if isinstance(item, InvalidFile) else self.put(item)
        return changed

    # --- internals -------------------------------------------------------------
    def _rename_stem(self, stem: str) -> builtins.list[str]:
        """(Re)name every file of a stem group; return the ids that changed."""
        changed: builtins.list[str] = []
        for path, wanted in sorted(qualified_ids(self._stems[stem]).items()):
            current = self.by_path.get(path) or self._shadowed.get(path)
            if current is not None and current.id == wanted:
                continue
            if current is not None:
                changed += self._unplace(path)
            parsed = self._parsed[path]
            changed += self._place(parsed if parsed.id == wanted else dataclasses.replace(parsed, id=wanted))
        return changed

    def _place(self, memory: Memory) -> builtins.list[str]:
        owner = self.memories.get(memory.id)
        if owner is not None and owner.rel_path != memory.rel_path:
            self._shadowed[memory.rel_path] = memory
            self.invalid[memory.rel_path] = InvalidFile(
                memory.rel_path,
                f"duplicate id {memory.id!r}: also used by {owner.rel_path}; "
                f"{owner.rel_path} is served, give this file another id",
            )
            return []
        self._add(memory)
        return [memory.id]

    def _unplace(self, rel_path: str) -> builtins.list[str]:
        if self._shadowed.pop(rel_path, None) is not None:
            self.invalid.pop(rel_path, None)
            return []
        memory = self.by_path.pop(rel_path, None)
        if memory is None:
            return []
        self._by_stem_discard(memory)
        if self.memories.get(memory.id) is memory:
            del self.memories[memory.id]
            self._forget_loose(memory)
        changed = [memory.id]
        for path, waiting in sorted(self._shadowed.items()):
            if waiting.id == memory.id:
                del self._shadowed[path]
                self.invalid.pop(path, None)
                self._add(waiting)
                break
        return changed

    def compact(self, prepare: Callable[[Memory], None] | None = None) -> int:
        """Release the text of the memories added since the last call (issue 16); how many were released.

        The engine calls it once a batch is indexed and embedded: until then the
        index and the embeddings read the text from the object, afterwards a
        render reads it back from the file (``services/tier_source.py``).
        ``prepare`` is called first for each memory still holding its text: what
        queries would otherwise read the file back for is derived while it is here.
        """
        released = 0
        for path in list(self._unreleased):
            self._unreleased.discard(path)
            for memory in (self.by_path.get(path), self._parsed.get(path)):  # the parse, when renamed
                if memory is None or memory.released:
                    continue
                if prepare is not None:
                    prepare(memory)
                if memory.release_text(read_cold):
                    released += 1
        return released

    def _add(self, memory: Memory) -> None:
        if not memory.released:
            self._unreleased.add(memory.rel_path)
        self.memories[memory.id] = memory
        self.by_path[memory.rel_path] = memory
        stem = stem_of(memory.rel_path)
        groups.add(self._by_stem, _shared(stem.casefold(), memory.id), memory.rel_path)
        for key in _loose_names(memory):
            groups.add(self._loose, key, memory.id)

    def _by_stem_discard(self, memory: Memory) -> None:
        groups.discard(self._by_stem, stem_of(memory.rel_path).casefold(), memory.rel_path)

    def _forget_loose(self, memory: Memory) -> None:
        for key in _loose_names(memory):  # the object placed is the one removed: same hot fields, same keys
            groups.discard(self._loose, key, memory.id)
