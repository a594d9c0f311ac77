"""``get_skill``'s one rule: a skill is found by its exact name, or not at all.

An agent acts on the text ``get_skill`` returns, so a near miss must never be
answered with some other memory. A name matches, ignoring case and surrounding
space, in this order:

1. a memory's ``id``;
2. its file name (``deploy-checklist`` or ``deploy-checklist.md``) or its
   workspace-relative path (``04-skills/deploy-checklist.md``);
3. its title (the first heading).

The first of these levels that matches anything decides. When what it matched
is a skill (exactly one), that skill is the answer. When it matched a memory
of another type (a rule named exactly, say), the lookup is refused and says
what the memory is; it is never swapped for a skill. Nothing matching is an
error that lists the closest skills by name, so the agent can ask again with
an exact one. No fuzzy match is ever returned as the answer.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from .model import Memory

SKILL_TYPE = "skill"
MAX_SUGGESTIONS = 5


@dataclass(frozen=True)
class SkillMatch:
    """The skill a name resolved to, and which of the three keys matched."""

    memory: Memory
    matched_by: str  # "id" | "file name" | "title"


class SkillLookupError(LookupError):
    """No skill has this exact name; ``reason`` is ``not_found``, ``not_a_skill`` or ``ambiguous``."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        suggestions: list[str] | None = None,
        found: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.suggestions = list(suggestions or [])
        self.found = list(found or [])

    def to_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "suggestions": self.suggestions, "found": self.found}


@dataclass
class _Keys:
    """The folded names one memory answers to, per level."""

    memory: Memory
    by_level: dict[str, set[str]] = field(default_factory=dict)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def _keys(memory: Memory) -> _Keys:
    rel = memory.rel_path
    file_name = rel.rsplit("/", 1)[-1]
    stem = file_name[:-3] if file_name.lower().endswith(".md") else file_name
    rel_stem = rel[:-3] if rel.lower().endswith(".md") else rel
    names = {
        "id": {_fold(memory.id)},
        "file name": {_fold(file_name), _fold(stem), _fold(rel), _fold(rel_stem)},
        "title": {_fold(memory.title)} if memory.title.strip() else set(),
    }
    return _Keys(memory, names)


LEVELS: tuple[str, ...] = ("id", "file name", "title")


def _describe(memory: Memory) -> dict[str, str]:
    return {"id": memory.id, "type": memory.type, "path": memory.rel_path, "title": memory.title}


def _label(memory: Memory) -> str:
    title = memory.title.strip()
    return f"{memory.id} ({title})" if title and _fold(title) != _fold(memory.id) else memory.id


def find_skill(memories: Iterable[Memory], name: str) -> SkillMatch:
    """Resolve ``name`` to exactly one skill, or raise :class:`SkillLookupError` saying why not."""
    wanted = _fold(name or "")
    if not wanted:
        raise SkillLookupError("get_skill needs a name: a skill's id, file name or title", reason="not_found")
    keyed = [_keys(m) for m in memories]
    skills = [k.memory for k in keyed if k.memory.type == SKILL_TYPE]
    for level in LEVELS:
        hits = [k.memory for k in keyed if wanted in k.by_level[level]]
        if not hits:
            continue
        skill_hits = [m for m in hits if m.type == SKILL_TYPE]
        if len(skill_hits) == 1:
            return SkillMatch(skill_hits[0], level)
        if len(skill_hits) > 1:
            ids = sorted(m.id for m in skill_hits)
            raise SkillLookupError(
                f"{name!r} is the {level} of {len(ids)} skills ({', '.join(ids)}); ask for one by its id",
                reason="ambiguous",
                suggestions=ids,
                found=[_describe(m) for m in skill_hits],
            )
        other = hits[0]
        also = _later_skill_matches(keyed, wanted, level)
        hint = (
            f" A skill also answers to that name by a weaker key: {', '.join(also)}; "
            f"ask for it by its id if that is the one you want."
            if also
            else ""
        )
        raise SkillLookupError(
            f"{name!r} is a {other.type}, not a skill ({other.rel_path}, matched by {level}); get_skill returns "
            f"skills only. Read it with the memory://{other.id} resource.{hint}",
            reason="not_a_skill",
            suggestions=also,
            found=[_describe(m) for m in hits],
        )
    suggestions = closest_skills(skills, wanted)
    listed = ", ".join(_label(m) for m in suggestions)
    detail = (
        f" Closest skills by name: {listed}."
        if suggestions
        else (" There are no skills in this workspace." if not skills else " No skill has a similar name.")
    )
    raise SkillLookupError(
        f"no skill named {name!r} (by id, file name or title, ignoring case).{detail} "
        f"Ask again with an exact name, or use get_context to find a skill by topic.",
        reason="not_found",
        suggestions=[m.id for m in suggestions],
    )


def _later_skill_matches(keyed: list[_Keys], wanted: str, level: str) -> list[str]:
    later = LEVELS[LEVELS.index(level) + 1 :]
    return sorted(
        {k.memory.id for k in keyed if k.memory.type == SKILL_TYPE and any(wanted in k.by_level[lv] for lv in later)}
    )


def closest_skills(skills: list[Memory], wanted: str, limit: int = MAX_SUGGESTIONS) -> list[Memory]:
    """Skills whose id, file name or title is closest to ``wanted`` (containment first, then similarity)."""
    scored: dict[str, tuple[float, Memory]] = {}
    words = set(wanted.replace("-", " ").replace("_", " ").split())
    for memory in skills:
        best = 0.0
        for names in _keys(memory).by_level.values():
            for key in names:
                ratio = difflib.SequenceMatcher(None, wanted, key).ratio()
                if wanted in key or key in wanted:
                    ratio = max(ratio, 0.8)
                key_words = set(key.replace("-", " ").replace("_", " ").replace("/", " ").split())
                if words and words & key_words:
                    ratio = max(ratio, 0.6 + 0.2 * len(words & key_words) / len(words))
                best = max(best, ratio)
        if best >= 0.5:
            scored[memory.id] = (best, memory)
    ranked = sorted(scored.values(), key=lambda item: (-item[0], item[1].id))
    return [memory for _, memory in ranked[:limit]]
