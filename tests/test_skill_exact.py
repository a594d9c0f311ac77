"""``get_skill`` answers with the skill named exactly, or with an error: never with another memory.

The cases from the security review: an exact rule id used to return a skill that
merely talked about it, and a name no skill had returned an unrelated skill.
Engine-level checks run on the real engine; the last test asks a real daemon
process over its socket, which is what ``ctxos mcp`` and the HTTP tools reach.
"""

from __future__ import annotations

import pytest
from ctxos.client import RpcCallError
from ctxos.daemon.rpc import NOT_FOUND
from ctxos.services.engine import Engine
from ctxos.services.skill_lookup import SkillLookupError
from daemon_helpers import daemon_factory, memory_text  # noqa: F401  (fixture)

FILES = {
    "08-rules/memory-hygiene.md": memory_text(
        "memory-hygiene", "# Memory hygiene\nKeep memories short; archive stale ones.", type="rule"
    ),
    "04-skills/writing-good-memories.md": memory_text(
        "writing-good-memories",
        "# Writing good memories\nMemory hygiene in practice: one fact per memory.",
        type="skill",
        tags=["memory", "hygiene"],
    ),
    "04-skills/pdf-export.md": memory_text(
        "pdf-export", "# Export to PDF\nUse pandoc with the eisvogel template.", type="skill"
    ),
    "04-skills/brew.md": memory_text("brew", "# Tea\nBrew green tea at 80C.", type="skill"),
    "04-skills/steep.md": memory_text("steep", "# Tea\nSteep black tea for four minutes.", type="skill"),
}


@pytest.fixture
def engine(make_workspace):
    engine = Engine(make_workspace(FILES))
    engine.load()
    yield engine
    engine.close()


def _refusal(engine: Engine, name: str) -> SkillLookupError:
    with pytest.raises(SkillLookupError) as err:
        engine.get_skill(name)
    return err.value


def test_exact_rule_id_is_refused_as_a_rule_not_swapped_for_a_skill(engine) -> None:
    error = _refusal(engine, "memory-hygiene")
    assert error.reason == "not_a_skill"
    assert error.message.startswith("'memory-hygiene' is a rule, not a skill")
    assert error.found[0]["type"] == "rule" and error.found[0]["path"] == "08-rules/memory-hygiene.md"
    assert "writing-good-memories" not in error.suggestions  # no weaker key matches it exactly


def test_a_name_no_skill_has_is_an_error_listing_the_closest(engine) -> None:
    error = _refusal(engine, "pdf")
    assert error.reason == "not_found"
    assert error.suggestions[0] == "pdf-export"  # listed, not returned
    assert "Closest skills by name: pdf-export (Export to PDF)" in error.message


def test_id_file_name_title_in_any_case(engine) -> None:
    assert engine.find_skill("PDF-Export").matched_by == "id"
    assert engine.find_skill("pdf-export.md").memory.id == "pdf-export"
    assert engine.find_skill("04-skills/pdf-export").matched_by == "file name"
    match = engine.find_skill("  export to pdf ")
    assert (match.memory.id, match.matched_by) == ("pdf-export", "title")


def test_two_skills_with_one_title_are_ambiguous(engine) -> None:
    error = _refusal(engine, "tea")
    assert error.reason == "ambiguous" and error.suggestions == ["brew", "steep"]


@pytest.mark.slow
def test_real_daemon_get_skill_is_exact(make_workspace, daemon_factory) -> None:  # noqa: F811
    daemon = daemon_factory(make_workspace(FILES))
    ok = daemon.call("get_skill", name="Writing Good Memories")
    assert ok["id"] == "writing-good-memories" and ok["matched"] is True and ok["matched_by"] == "title"
    for name, reason in (("memory-hygiene", "not_a_skill"), ("pdf", "not_found"), ("tea", "ambiguous")):
        with pytest.raises(RpcCallError) as err:
            daemon.call("get_skill", name=name)
        assert err.value.code == NOT_FOUND and err.value.data["reason"] == reason, (name, err.value.data)
