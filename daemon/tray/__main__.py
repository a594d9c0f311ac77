"""``python -m ctxos.daemon.tray --workspace ROOT``: the tray in its own process (see process.py)."""

import sys

from .process import process_main

sys.exit(process_main())
