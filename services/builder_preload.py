"""What the cold build's forkserver imports before it forks builders: their code and the packaged model.

``daemon/parse_pool.start_builders_early`` starts the forkserver on the
daemon's first line with this module to preload (a forkserver's only hook is
importing modules). Importing it imports the builders' code
(``index_build``) and loads WordLlama into ``load_model``'s per-process copy,
with the ``tokenizers`` library held for bulk work (``WordLlamaModel.hold_library``),
so every builder forks with the model in memory instead of reading it at its
first chunk (~0.12 s each, on the cold start's critical path; the forkserver
has that time to spare while the daemon imports). A workspace configured
with another model never uses it, and the forkserver is stopped after the load.
"""

from __future__ import annotations

from .index_build import build_chunk
from .semantic import WORDLLAMA, ModelError, WordLlamaModel, load_model

__all__ = ["build_chunk"]

try:
    _model = load_model(WORDLLAMA)
except ModelError:  # not installed: builders and engine report it when they load it themselves
    _model = None
if isinstance(_model, WordLlamaModel):
    _model.hold_library()  # builders embed thousands of memories: the tokenizers library, loaded before the fork
