"""Owner-only folders for per-user state: the HTTP token, the workspace registry, the
parse-cache key, the daemon's sockets and locks.

Why one function: each of these folders guards something another local user must not
read or replace. A folder that is a symlink, not a folder, or owned by someone else is
refused rather than used; one of ours with looser permissions is tightened to 0700.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class PrivateDirError(OSError):
    """The folder cannot be trusted with private state (the message says why)."""


def ensure_private_dir(folder: Path) -> Path:
    """Create ``folder`` with mode 0700, or check that an existing one is ours and make it 0700."""
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PrivateDirError(f"{folder} is not a real folder")
    if info.st_uid != os.getuid():
        raise PrivateDirError(f"{folder} belongs to uid {info.st_uid}, not to you ({os.getuid()})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder
