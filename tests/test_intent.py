"""Intent detection (issue 13): stemmed triggers, question patterns, the nearest-example classifier,
and accuracy on a labelled set of 88 queries (tests/fixtures/intent_queries.tsv)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxos.services.config import default_config
from ctxos.services.intent import detect_intent_detail
from ctxos.services.semantic import PrototypeClassifier, load_model

LABELLED = Path(__file__).resolve().parent / "fixtures" / "intent_queries.tsv"
TRIGGERS = default_config()["intent_triggers"]


def labelled() -> list[tuple[str, str]]:
    rows = []
    for line in LABELLED.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            intent, query = line.split("\t", 1)
            rows.append((intent, query))
    return rows


@pytest.fixture(scope="module")
def classifier():
    return PrototypeClassifier(load_model("wordllama"))


def test_labelled_set_covers_every_intent():
    rows = labelled()
    assert len(rows) >= 80
    assert {i for i, _ in rows} == {"debug", "brainstorm", "recall", "default"}
    assert all(sum(1 for i, _ in rows if i == intent) >= 20 for intent in ("debug", "brainstorm", "recall", "default"))


@pytest.mark.parametrize(
    "query,intent,shown",
    [
        ("why is this crashing", "debug", "'crash'"),
        ("what should we build next", "brainstorm", "what should we build"),
        ("what was the decision about X", "recall", "decision"),
    ],
)
def test_seed_examples(query, intent, shown, classifier):
    got = detect_intent_detail(query, TRIGGERS, classifier)
    assert got.intent == intent
    assert shown in got.reason and got.reason.endswith(f"→ {intent}")


def test_triggers_match_by_stem_and_count_once():
    got = detect_intent_detail("the upload keeps failing and failed again", TRIGGERS)
    assert got.intent == "debug" and got.scores["debug"] >= 1
    assert detect_intent_detail("postgres pool", TRIGGERS).intent == "default"


def test_broken_config_pattern_is_skipped_not_fatal():
    got = detect_intent_detail("anything at all", TRIGGERS, patterns={"debug": ["(unclosed"]})
    assert got.intent == "default"


def test_accuracy_on_the_labelled_set(classifier):
    rows = labelled()
    correct = sum(detect_intent_detail(q, TRIGGERS, classifier).intent == intent for intent, q in rows)
    accuracy = correct / len(rows)
    # Measured 84/88 (95 %) when written; the triggers were extended after a first look at the misses,
    # so this is in-sample (docs/engine.md#intent). Guard against regressions, not a target.
    assert accuracy >= 0.9, f"intent accuracy {accuracy:.2%}"


def test_classifier_abstains_when_unsure(classifier):
    assert classifier.classify("") is None
    guess = classifier.classify("the build broke after upgrading node")
    assert guess is not None and guess[0] == "debug"


def test_config_patterns_replace_the_built_in_ones(make_workspace):
    from ctxos.services.engine import Engine

    root = make_workspace({})
    (root / "_config.yaml").write_text('intent_patterns:\n  brainstorm: ["\\\\bshower thoughts\\\\b"]\n')
    engine = Engine(root)
    engine.load()
    assert engine.execute_context_query("shower thoughts on search", 300, record_access=False).intent == "brainstorm"
    # the built-in "what should we build" pattern is gone, and no trigger word matches
    result = engine.execute_context_query("what should we build next", 300, record_access=False)
    assert result.intent != "brainstorm" or "nearest example" in result.intent_reason
    engine.close()
