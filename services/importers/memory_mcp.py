"""The JSONL file of Anthropic's memory MCP server (``@modelcontextprotocol/server-memory``).

Each line is ``{"type": "entity", "name", "entityType", "observations": [...]}`` or
``{"type": "relation", "from", "to", "relationType"}`` (the server's ``saveGraph``).
Every entity becomes one memory: its observations as a list, its relations as
``- relation_type [[Target]]`` lines, and the entities it relates to in ``related``
(so the link graph has the edges). Relations naming no entity are reported, and
kept as text. A line that is not JSON, or not an entity or relation, is reported
with its line number and skipped.

The memory type comes from ``entityType`` (``ENTITY_TYPES``): person, organization,
team, user, preference → ``context``; project → ``project``; decision → ``decision``;
tool, technique, skill, howto → ``skill``; task, todo → ``task``; rule, policy,
guideline → ``rule``; a type named like one of ours → that; anything else → ``resource``.
Ids are ``mcp-<name>`` slugs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..ontology import MEMORY_TYPES
from ..writes import slugify
from .plan import IMPORT_TAG, Draft

ENTITY_TYPES: dict[str, str] = {
    "person": "context",
    "people": "context",
    "organization": "context",
    "organisation": "context",
    "company": "context",
    "team": "context",
    "user": "context",
    "preference": "context",
    "event": "context",
    "project": "project",
    "decision": "decision",
    "tool": "skill",
    "technique": "skill",
    "skill": "skill",
    "howto": "skill",
    "task": "task",
    "todo": "task",
    "rule": "rule",
    "policy": "rule",
    "guideline": "rule",
}


def looks_like(path: Path) -> bool:
    """A ``.json``/``.jsonl`` file whose first non-empty line is an entity or relation record."""
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".json"):
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and record.get("type") in ("entity", "relation")
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return False


def entity_type(value: str) -> str:
    key = value.strip().lower()
    return ENTITY_TYPES.get(key) or (key if key in MEMORY_TYPES else "resource")


def read(path: Path) -> tuple[list[Draft], list[str]]:
    path = Path(path)
    warnings: list[str] = []
    entities: dict[str, dict[str, Any]] = {}
    relations: list[tuple[str, str, str]] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                warnings.append(f"{path.name} line {number}: not JSON ({exc}); skipped")
                continue
            kind = record.get("type") if isinstance(record, dict) else None
            if kind == "entity" and isinstance(record.get("name"), str) and record["name"].strip():
                entity = entities.setdefault(record["name"], {"entityType": "", "observations": []})
                entity["entityType"] = str(record.get("entityType") or entity["entityType"] or "")
                observations = record.get("observations") or []
                if isinstance(observations, list):
                    entity["observations"] += [str(o) for o in observations if str(o).strip()]
            elif kind == "relation" and all(isinstance(record.get(k), str) for k in ("from", "to", "relationType")):
                relations.append((record["from"], record["to"], record["relationType"]))
            else:
                warnings.append(f"{path.name} line {number}: neither an entity nor a relation; skipped")
    ids = {name: f"mcp-{slugify(name, 60)}" for name in entities}
    outgoing: dict[str, list[tuple[str, str]]] = {}
    for source, target, relation in relations:
        if source not in entities or target not in entities:
            missing = source if source not in entities else target
            warnings.append(
                f"relation {source!r} {relation} {target!r}: no entity named {missing!r}"
                + ("; kept as text" if source in entities else "; skipped")
            )
        if source in entities:
            outgoing.setdefault(source, []).append((relation, target))
    drafts = []
    for name, entity in entities.items():
        kind = entity_type(entity["entityType"])
        lines = [f"# {name}", ""]
        lines += [f"- {o}" for o in entity["observations"]] or [f"A {entity['entityType'] or 'entity'}."]
        links = outgoing.get(name, [])
        if links:
            lines += [
                "",
                "## Relations",
                *(f"- {rel} [[{ids[t]}|{t}]]" if t in ids else f"- {rel} [[{t}]]" for rel, t in links),
            ]
        first = entity["observations"][0] if entity["observations"] else ""
        l0 = (
            f"{name} ({entity['entityType']})" + (f" — {first}" if first else "")
            if entity["entityType"]
            else name + (f" — {first}" if first else "")
        )
        tags = [IMPORT_TAG, "memory-mcp"] + ([slugify(entity["entityType"], 40)] if entity["entityType"] else [])
        drafts.append(
            Draft(
                id=ids[name],
                type=kind,
                body="\n".join(lines) + "\n",
                l0=" ".join(l0.split())[:200],
                source=f"{path.name}#{name}",
                tags=tags,
                related=list(dict.fromkeys(ids[t] for _, t in links if t in ids and t != name)),
                extra={"title": name, "entity_type": entity["entityType"]},
            )
        )
    return drafts, warnings
