"""Parsed memories kept between starts: a warm restart re-parses only the files that changed.

Measured at 10,000 memories (docs/engine.md "Warm start"): parsing every file
(YAML frontmatter, tiers, the derived summary line) is ~3.4 s of CPU, most of
a warm start; stat-ing every file and reading this cache back is ~0.6 s.

What is kept: each file's parse result (``Memory``) as ``load_memory`` gave
it, keyed by path, reused when the file's mtime and size are unchanged and it
is a plain file (not a symlink, whose target may have moved). Invalid files
are always re-read (few, and their reason may depend on other files).

Why it is safe to unpickle: the file sits in the workspace's state folder,
which a synced or shared workspace could let someone else write, and
unpickling runs code. So the cache is signed with HMAC-SHA256 under a key
only this user can read (``$XDG_STATE_HOME/ctxos/cache-key``, 0600, in a
0700 folder); a file whose signature does not verify is ignored and rebuilt.
The cache is also dropped when the configuration, the ``Memory`` fields or
``FORMAT`` change (``fingerprint``). Any problem reading or writing it only
costs a full parse.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import os
import pickle
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import user_dirs
from .atomic import atomic_write_bytes
from .config import Config
from .model import InvalidFile, Memory
from .private_dir import ensure_private_dir

log = logging.getLogger(__name__)

# 2: released memories (no tiers or frontmatter dict); 3: no absolute path; 4: slotted Memory; 5: type and tags
# interned; 6: heading tokens as one text
FORMAT = 6
CACHE_FILENAME = "parsed-memories.cache"
KEY_FILENAME = "cache-key"
_MAC_BYTES = 32


def key_path() -> Path:
    return user_dirs.user_state_dir() / KEY_FILENAME


def _key(create: bool) -> bytes | None:
    """This user's signing key (made on first use); None when it cannot be had safely."""
    path = key_path()
    try:
        info = path.lstat()
    except FileNotFoundError:
        if not create:
            return None
        try:
            ensure_private_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return _key(create=False)
        except OSError as exc:
            log.debug("no parse-cache key (%s): full parse at each start", exc)
            return None
        key = secrets.token_bytes(32)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        log.warning("%s is not a private file of yours; the parse cache is not used", path)
        return None
    try:
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) >= 16 else None


def parse_settings(config: Config) -> dict[str, Any]:
    """The settings a parse reads (``workspace.load_memory``): only the size cap a file is refused over.

    Everything else in ``_config.yaml`` (weights, synonyms, budgets, jobs, the
    model...) changes how memories are scored or served, not what a file parses
    into, so editing it keeps the parse cache and the block store: before, any
    edit made the next start parse every file inside the daemon and render every
    block from its file (at 100,000: ready in 25.0 s at 544 MiB idle instead of
    4.8 s at 356 MiB; docs/engine.md). A setting the parser starts to read
    belongs here.
    """
    return {"limits.max_file_bytes": config.settings.limits.max_file_bytes}


def fingerprint(config: Config) -> str:
    """What the parse depends on besides the file: ``parse_settings``, the Memory fields, this format."""
    fields = [f.name for f in dataclasses.fields(Memory)]
    text = json.dumps([FORMAT, fields, parse_settings(config)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def load(state: Path, fp: str, root: Path) -> dict[str, Memory]:
    """Path -> cached parse; empty when there is no valid cache (missing, foreign, other parse settings).

    Each memory's absolute ``path`` is ``root / rel_path`` again, rather than a
    pickled ``PosixPath`` (whose unpickling parses its parts anew: ~1 of the ~2 s
    a 100,000-memory cache took to read, twice what joining onto ``root`` costs),
    and it is joined when read (``Memory.__getattr__``), not held: every memory
    shares the one ``root`` (~35 MiB of ``Path`` objects at 100,000).
    """
    path = Path(state) / CACHE_FILENAME
    try:
        blob = path.read_bytes()
    except OSError:
        return {}
    key = _key(create=False)
    if key is None or len(blob) <= _MAC_BYTES:
        return {}
    mac, payload = blob[:_MAC_BYTES], memoryview(blob)[_MAC_BYTES:]  # no 14 MB copy at 10,000
    if not hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()):
        log.warning("%s is not signed by this user's key: ignored (rebuilt at the next save)", path)
        return {}
    try:
        stored_fp, entries = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - a cache: any failure means a full parse
        log.warning("parse cache unreadable (%s): full parse", exc)
        return {}
    if stored_fp != fp or not isinstance(entries, list):
        return {}
    root = Path(root)
    found: dict[str, Memory] = {}
    new = object.__new__
    try:
        for rel_path, fields in entries:
            memory = new(Memory)
            fields["_root"] = root  # ``path`` is joined on demand (``Memory.__getattr__``)
            memory.__setstate__(fields)
            found[rel_path] = memory
    except (TypeError, ValueError) as exc:  # signed by us, so only a bug gets here: a full parse
        log.warning("parse cache malformed (%s): full parse", exc)
        return {}
    return found


def save(state: Path, fp: str, memories: Iterable[Memory | InvalidFile]) -> bool:
    """Write the cache (signed, replaced atomically); False when it could not be."""
    key = _key(create=True)
    if key is None:
        return False
    entries = [(m.rel_path, _fields_without_path(m)) for m in memories if isinstance(m, Memory)]
    payload = pickle.dumps((fp, entries), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        atomic_write_bytes(
            Path(state) / CACHE_FILENAME, hmac.new(key, payload, hashlib.sha256).digest() + payload, mode=0o600
        )
    except OSError as exc:
        log.warning("could not write the parse cache (%s); the next start parses every file", exc)
        return False
    return True


def _fields_without_path(memory: Memory) -> dict[str, Any]:
    """The memory's attributes as pickled: everything but ``path`` (``load`` joins it onto the root)."""
    fields = memory.__getstate__()  # the set slots: a released memory's file is not read back
    fields.pop("path", None)  # unset once ``_root`` is known
    fields.pop("_root", None)  # ``load`` gives every memory the root it reads under
    return fields


def reusable(root: Path, rel_path: str, cached: Memory | None) -> bool:
    """True when ``cached`` still describes the file: a plain file with the same mtime and size."""
    if cached is None or cached.size <= 0:
        return False
    try:
        info = os.lstat(os.path.join(root, rel_path))  # no Path objects: called for every file at start
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_mtime == cached.mtime and info.st_size == cached.size
