"""The semantic signal from embeddings, offline (issue 13; docs/engine.md#semantic).

- ``models``: ``SemanticModel`` protocol; ``wordllama`` (default, shipped in
  its wheel), local ``fastembed:`` / ``sentence-transformers:`` folders;
- ``vectors``: ``VectorIndex``, one cached embedding per memory, nearest
  neighbours for candidates;
- ``scorer``: ``EmbeddingScorer``, cosine fused with keyword overlap;
- ``intents``: ``PrototypeClassifier``, nearest-prototype intent on embeddings.
"""

from .intents import PrototypeClassifier
from .models import LEXICAL, WORDLLAMA, ModelError, SemanticModel, WordLlamaModel, load_model
from .scorer import EmbeddingScorer
from .vectors import VectorIndex, embed_text

__all__ = [
    "LEXICAL",
    "WORDLLAMA",
    "ModelError",
    "SemanticModel",
    "WordLlamaModel",
    "load_model",
    "EmbeddingScorer",
    "PrototypeClassifier",
    "VectorIndex",
    "embed_text",
]
