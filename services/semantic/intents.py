"""Nearest-prototype intent classifier on embeddings (seed: "classifier-based intent detection").

Used only when no trigger word or question pattern matched (intent.py):
the query is embedded and compared with a few example requests per intent;
the intent whose ``TOP`` nearest examples are most similar on average wins,
when that average reaches ``MIN_SIMILARITY`` and beats every other intent's
examples by ``MIN_MARGIN``. The examples below are not the labelled test queries
(tests/fixtures/intent_queries.tsv), so the reported accuracy is not
measured on the classifier's own examples.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .models import SemanticModel

TOP = 3
MIN_SIMILARITY = 0.33  # static embeddings are dominated by topic words: similarities are low
MIN_MARGIN = 0.1  # ... so an intent must beat every other intent's examples clearly
MEMO_SIZE = 256  # queries whose classification is remembered (a few KB)

PROTOTYPES: dict[str, tuple[str, ...]] = {
    "debug": (
        "the build is broken after the upgrade",
        "tests started failing on main",
        "the server returns a 500 internal error",
        "memory leak in the worker process",
        "login times out for some users",
        "the app freezes on startup",
        "stack trace null pointer in the parser",
        "deploy rolled back because of a regression",
        "sync stopped working yesterday",
        "the page renders blank in production",
        "segfault when loading the plugin",
        "the query is suddenly very slow",
    ),
    "brainstorm": (
        "ideas for the next release",
        "ways to make onboarding easier",
        "what could we try to grow usage",
        "possible directions for the roadmap",
        "alternatives to our current database",
        "how might we redesign the dashboard",
        "features users might love",
        "explore new pricing models",
        "creative names for the project",
        "options to cut infrastructure cost",
        "let's think about a better workflow",
        "what would an ideal setup look like",
    ),
    "recall": (
        "when did we switch to postgres",
        "who decided to drop the mobile app",
        "what did we agree on in the last meeting",
        "the reason we chose this vendor",
        "what happened at the offsite",
        "when was the migration finished",
        "what did she say about the trip",
        "where did we go on vacation last year",
        "the decision about billing",
        "what was discussed with the client",
        "how did the launch go",
        "what did he buy for his daughter",
    ),
    "default": (
        "postgres connection pool settings",
        "docker compose file for the api",
        "python virtual environment setup",
        "keyboard shortcuts for the editor",
        "how to configure the proxy",
        "markdown table syntax",
        "overview of the billing service",
        "api authentication tokens",
        "project structure and modules",
        "list of team members and roles",
        "how does the cache work",
        "coding style guide",
    ),
}


class PrototypeClassifier:
    """Embeds ``PROTOTYPES`` once per model; ``classify`` returns (intent, similarity, example) or None."""

    def __init__(self, model: SemanticModel, prototypes: dict[str, tuple[str, ...]] | None = None) -> None:
        self.model = model
        self._remembered = lru_cache(maxsize=MEMO_SIZE)(self._classify)  # per classifier: one model's answers
        table = prototypes or PROTOTYPES
        self.labels: list[str] = []
        self.examples: list[str] = []
        for intent, examples in table.items():
            for example in examples:
                self.labels.append(intent)
                self.examples.append(example)
        self.matrix = model.embed(self.examples)
        self._by_intent = {
            intent: np.array([i for i, lab in enumerate(self.labels) if lab == intent]) for intent in table
        }

    def scores(self, query: str) -> dict[str, tuple[float, int]]:
        """Per intent: mean similarity of its ``TOP`` nearest examples, and the index of the nearest."""
        vector = self.model.embed([query])[0]
        if not np.any(vector):
            return {}
        sims = np.einsum("ij,j->i", self.matrix, vector)  # no BLAS threads (see vectors._dot)
        out: dict[str, tuple[float, int]] = {}
        for intent, rows in self._by_intent.items():
            values = sims[rows]
            order = np.argsort(-values)[:TOP]
            out[intent] = (float(values[order].mean()), int(rows[order[0]]))
        return out

    def classify(self, query: str) -> tuple[str, float, str] | None:
        """The nearest prototypes' intent for ``query``, or None (remembered for the last ``MEMO_SIZE`` queries).

        A pure function of the query for this classifier (its model and examples are
        fixed): an agent asking the same thing again skips the query's embedding.
        """
        return self._remembered(query)

    def _classify(self, query: str) -> tuple[str, float, str] | None:
        scores = self.scores(query)
        if not scores:
            return None
        best = max(scores, key=lambda k: scores[k][0])
        value, nearest = scores[best]
        if best == "default" or value < MIN_SIMILARITY:
            return None
        runner_up = max((v for k, (v, _) in scores.items() if k != best), default=0.0)
        if value - runner_up < MIN_MARGIN:
            return None
        return best, value, self.examples[nearest]
