"""The in-memory catalog of a workspace: valid memories by id and by path, and invalid files.

Duplicate ids are resolved here so every consumer sees one answer: the file
that held the id first keeps it (at a full scan: the first path in sorted
order), the other is listed as invalid naming both files, and it takes the id
over automatically when the first file goes away or changes its id.
"""
from __future__ import annotations

import re
from typing import Iterable

from .model import InvalidFile, Memory


def _link_key(text: str) -> str:
    """Loose form of a link target: case-folded, spaces/underscores as dashes."""
    return re.sub(r"[\s_]+", "-", text.strip().casefold())


class MemoryStore:
    """Memories by id (``memories``) and by path (``by_path``), invalid files by path."""

    def __init__(self) -> None:
        self.memories: dict[str, Memory] = {}
        self.by_path: dict[str, Memory] = {}
        self.invalid: dict[str, InvalidFile] = {}
        self._shadowed: dict[str, Memory] = {}     # path -> memory whose id is taken
        self._loose_ids: dict[str, str] = {}        # _link_key(id or stem or title) -> id
        self._loose_keys: dict[str, list[str]] = {}  # id -> its keys in _loose_ids

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

    def invalid_files(self) -> list[InvalidFile]:
        return sorted(self.invalid.values(), key=lambda f: f.rel_path)

    def known_paths(self) -> set[str]:
        return set(self.by_path) | set(self.invalid) | set(self._shadowed)

    def checksum_of(self, rel_path: str) -> str | None:
        memory = self.by_path.get(rel_path) or self._shadowed.get(rel_path)
        return memory.checksum if memory else None

    def resolve_link(self, target: str) -> str | None:
        """The id a link names: exact id, else a loose match on id, file stem or title.

        ``a|b`` (a wikilink with an alias) tries ``a`` then ``b``.
        """
        for side in target.split("|"):
            side = side.strip()
            if not side:
                continue
            if side in self.memories:
                return side
            found = self._loose_ids.get(_link_key(side))
            if found is not None and found in self.memories:
                return found
        return None

    # --- changing ------------------------------------------------------------
    def put(self, memory: Memory) -> list[str]:
        """Add or replace the memory at ``memory.rel_path``; return the ids whose entry changed."""
        changed = self.remove_path(memory.rel_path)
        self.invalid.pop(memory.rel_path, None)
        owner = self.memories.get(memory.id)
        if owner is not None and owner.rel_path != memory.rel_path:
            self._shadowed[memory.rel_path] = memory
            self.invalid[memory.rel_path] = InvalidFile(
                memory.rel_path, f"duplicate id {memory.id!r}: also used by {owner.rel_path}; "
                                 f"{owner.rel_path} is served, give this file another id")
            return changed
        self._add(memory)
        return sorted(set(changed) | {memory.id})

    def put_invalid(self, invalid: InvalidFile) -> list[str]:
        changed = self.remove_path(invalid.rel_path)
        self.invalid[invalid.rel_path] = invalid
        return changed

    def remove_path(self, rel_path: str) -> list[str]:
        """Forget whatever is at ``rel_path``; promote a shadowed duplicate if its id is now free."""
        self.invalid.pop(rel_path, None)
        if self._shadowed.pop(rel_path, None) is not None:
            return []
        memory = self.by_path.pop(rel_path, None)
        if memory is None:
            return []
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

    def remove_paths_under(self, rel_dir: str) -> list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        changed: list[str] = []
        for path in [p for p in self.known_paths() if p.startswith(prefix)]:
            changed.extend(self.remove_path(path))
        return changed

    def replace_all(self, items: Iterable[Memory | InvalidFile]) -> None:
        """Rebuild from a full scan (items in sorted path order)."""
        self.__init__()
        for item in items:
            if isinstance(item, Memory):
                self.put(item)
            else:
                self.put_invalid(item)

    def _add(self, memory: Memory) -> None:
        self.memories[memory.id] = memory
        self.by_path[memory.rel_path] = memory
        stem = memory.rel_path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        keys = [_link_key(name) for name in (memory.title, stem, memory.id) if name]
        for key in keys:
            self._loose_ids[key] = memory.id
        self._loose_keys[memory.id] = keys

    def _forget_loose(self, memory: Memory) -> None:
        for key in self._loose_keys.pop(memory.id, []):
            if self._loose_ids.get(key) == memory.id:
                del self._loose_ids[key]
