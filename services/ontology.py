"""The ontology: which memory types exist and which folder holds each.

Folder numbers are the default order of attention (rules first, scratch last),
so the renderer and the router can sort by ``TYPE_ORDER`` without knowing paths.
"""

from __future__ import annotations

TYPE_FOLDERS: dict[str, str] = {
    "context": "01-context",
    "daily": "02-daily",
    "project": "03-projects",
    "skill": "04-skills",
    "resource": "05-resources",
    "decision": "06-decisions",
    "task": "07-tasks",
    "rule": "08-rules",
    "scratch": "09-scratch",
}
FOLDER_TYPES: dict[str, str] = {folder: kind for kind, folder in TYPE_FOLDERS.items()}
MEMORY_TYPES: tuple[str, ...] = tuple(TYPE_FOLDERS)

# Folders with a role of their own (inbox and archive are not served; sources are, read-only).
STAGING_FOLDER = "inbox"  # staging area: not served until promoted
SOURCES_FOLDER = "sources"  # accepted references: served, marked as sources, read-only to agents
ARCHIVE_FOLDER = "_archive"  # archived memories: kept, excluded from context
STATE_FOLDER = ".ctxos"  # derived state only (a cache)
ALL_FOLDERS: tuple[str, ...] = (STAGING_FOLDER, SOURCES_FOLDER, *TYPE_FOLDERS.values())

# Rendering / attention order: rules first, then the numbered order, scratch last.
TYPE_ORDER: dict[str, int] = {
    "rule": 0,
    "context": 1,
    "daily": 2,
    "project": 3,
    "skill": 4,
    "resource": 5,
    "decision": 6,
    "task": 7,
    "scratch": 8,
}


def type_for_folder(top_folder: str) -> str | None:
    """Return the memory type a top-level folder implies, or None."""
    return FOLDER_TYPES.get(top_folder)
