"""``python -m ctxos.client`` is the ``ctxos`` command (for environments without the script)."""

import sys

from ctxos.client.cli import main

sys.exit(main())
