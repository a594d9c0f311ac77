"""Where a workspace's Whoosh index lives on disk and which schema it holds, without importing Whoosh.

``services/index.py`` (``MemoryIndex.open``) decides for real whether an index
is usable; this module lets the daemon's very first lines guess it (a committed
table of contents of the current schema) before anything heavy is imported:
when there is none, a cold build is coming and the builder processes can start
importing at once (``daemon/parse_pool.start_builders_early``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .ontology import STATE_FOLDER

SCHEMA_VERSION = "4"  # 4: text without positions (phrase=False)
SCHEMA_VERSION_FILE = "ctxos-schema-version"
INDEX_NAME = "memories"
INDEX_FOLDER = "index"  # under the state folder


def index_looks_built(root: Path) -> bool:
    """True when the workspace's default state folder holds a committed index of this schema.

    A guess, cheap enough for the daemon's first line: ``CTXOS_STATE_DIR`` is
    honoured, the fallback of a read-only workspace (``workspace.state_dir``)
    is not (such a workspace just looks unbuilt here). A wrong guess costs
    only time: an index that looks built but is not is rebuilt with builders
    started on demand, and builders started early for an index that turns out
    usable are stopped after the load.
    """
    override = os.environ.get("CTXOS_STATE_DIR")
    state = Path(override).expanduser() if override else Path(root) / STATE_FOLDER
    folder = state / INDEX_FOLDER
    try:
        if (folder / SCHEMA_VERSION_FILE).read_text().strip() != SCHEMA_VERSION:
            return False
        return any(folder.glob(f"_{INDEX_NAME}_*.toc"))
    except OSError:
        return False
