"""The workspace on disk: creating it, finding its memory files, loading one.

Which files are memories is decided here and only here, so the scanner, the
watcher and the writers agree: every ``.md`` file below the root except the
staging folder (``inbox/``: not served until promoted), the archive, hidden
folders (``.ctxos/``, ``.git/`` ...) and the router files the daemon generates.
``sources/`` is served (read-only to agents: ``writes.safe_target``), marked as a
source wherever a memory is shown (``Memory.is_source``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as stat_module
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

from . import user_dirs
from .atomic import atomic_write_text
from .config import CONFIG_FILENAME, Config, default_config_text
from .memory_file import MemoryFileError, parse_memory
from .model import InvalidFile, Memory
from .ontology import ALL_FOLDERS, ARCHIVE_FOLDER, SOURCES_FOLDER, STAGING_FOLDER, STATE_FOLDER, type_for_folder

MEMORY_SUFFIXES = (".md", ".markdown")
# Generated at the workspace root by the router; never read back as memories.
GENERATED_ROOT_FILES = frozenset({"claude.md", "CLAUDE.md", "AGENTS.md", "GEMINI.md"})
SCAN_PROGRESS_EVERY = 250  # scan_workspace reports progress this often (files)
NOT_SERVED_FOLDERS = frozenset({STAGING_FOLDER, ARCHIVE_FOLDER})
SKIPPED_DIR_NAMES = frozenset({"node_modules", "__pycache__"})
GITIGNORE_TEXT = "# AI Context OS derived state (safe to delete; rebuilt from the files)\n.ctxos/\n"


def state_dir(root: Path) -> Path:
    """Where derived state lives: ``<root>/.ctxos``, unless that cannot be written.

    ``CTXOS_STATE_DIR`` overrides it. A read-only workspace (a mounted vault, a
    shared corpus) keeps its cache under ``$XDG_CACHE_HOME/ctxos/<hash>`` so
    it can still be indexed and queried without writing beside the files.
    """
    override = os.environ.get("CTXOS_STATE_DIR")
    if override:
        path = Path(override).expanduser()
    else:
        root = Path(root)
        path = root / STATE_FOLDER
        if not _writable(path if path.exists() else root):
            digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
            path = user_dirs.user_cache_dir() / digest
    path.mkdir(parents=True, exist_ok=True)
    return path


def _writable(path: Path) -> bool:
    """Writable for us *and* meant to be written: root passes ``os.access`` everywhere, so a
    folder whose owner-write bit is off (a shared, read-only corpus) also counts as read-only."""
    try:
        owner_may_write = bool(path.stat().st_mode & 0o200)
    except OSError:
        return False
    return owner_may_write and os.access(path, os.W_OK | os.X_OK)


def created_by_init(root: Path) -> bool:
    """Did ``ctxos init`` make this folder a workspace? Recorded by ``_config.yaml`` at its root:
    only ``init`` writes it (the daemon never does), and a person can see and delete it. A vault
    served as it is has none, so nothing generated is written into it (docs/file-format.md)."""
    return (Path(root) / CONFIG_FILENAME).is_file()


@dataclass
class InitReport:
    root: Path
    created: list[str]
    seeded_examples: bool

    def to_dict(self) -> dict[str, object]:
        return {"workspace": str(self.root), "created": self.created, "seeded_examples": self.seeded_examples}


def init_workspace(root: Path, seed_examples: bool = True) -> InitReport:
    """Create folders, ``_config.yaml``, ``.gitignore`` and, on first run, example memories.

    Idempotent: an existing file is never overwritten. Examples are seeded
    only when the workspace has no memory file yet (its first run).
    """
    root = Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    first_run = not any(True for _ in iter_memory_paths(root))
    for folder in ALL_FOLDERS:
        target = root / folder
        if not target.exists():
            target.mkdir(parents=True)
            created.append(folder + "/")
    for name, text in ((CONFIG_FILENAME, default_config_text()), (".gitignore", GITIGNORE_TEXT)):
        if _create_if_missing(root / name, text):
            created.append(name)
    seeded = False
    if seed_examples and first_run:
        for rel_path, text in example_memories():
            if _create_if_missing(root / rel_path, text):
                created.append(rel_path)
                seeded = True
    return InitReport(root, created, seeded)


def _create_if_missing(path: Path, text: str) -> bool:
    if path.exists() or path.is_symlink():
        return False
    atomic_write_text(path, text)
    return True


def example_memories() -> list[tuple[str, str]]:
    """(relative path, text) of the packaged examples; ``08-rules__x.md`` goes to ``08-rules/x.md``."""
    folder = resources.files("ctxos.services").joinpath("examples")
    items = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md") and "__" in entry.name:
            target_folder, filename = entry.name.split("__", 1)
            items.append((f"{target_folder}/{filename}", entry.read_text(encoding="utf-8")))
    return items


def relative_path(root: Path, path: Path | str) -> str | None:
    """POSIX path of ``path`` relative to ``root`` (lexically), or None when outside."""
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = Path(root) / candidate
    try:
        rel = Path(os.path.normpath(candidate)).relative_to(os.path.normpath(root))
    except ValueError:
        return None
    text = rel.as_posix()
    return None if text in ("", ".") else text


def _parts(rel_path: str) -> tuple[str, ...]:
    """``PurePosixPath(rel_path).parts`` without building a path object (run for every file at start)."""
    if rel_path.startswith("/"):
        return PurePosixPath(rel_path).parts
    return tuple(part for part in rel_path.split("/") if part and part != ".")


def is_memory_path(rel_path: str) -> bool:
    """Would a file at this workspace-relative path be a memory (if it parses)?"""
    parts = _parts(rel_path)
    if not parts or not parts[-1].lower().endswith(MEMORY_SUFFIXES):
        return False
    if len(parts) == 1 and parts[0] in GENERATED_ROOT_FILES:
        return False
    if parts[0] in NOT_SERVED_FOLDERS:
        return False
    return not any(part.startswith((".", "~")) or part in SKIPPED_DIR_NAMES for part in parts)


def is_ignored_dir(rel_dir: str) -> bool:
    """Folders the scanner never descends into (and the watcher may ignore)."""
    parts = _parts(rel_dir)
    if not parts:
        return False
    if parts[0] in NOT_SERVED_FOLDERS:
        return True
    return any(part.startswith(".") or part in SKIPPED_DIR_NAMES for part in parts)


def display_name(rel_path: str) -> str:
    """A path safe to show and to put in JSON: bytes that are not UTF-8 appear as ``\\xNN``."""
    try:
        rel_path.encode("utf-8")
        return rel_path
    except UnicodeEncodeError:
        return rel_path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def iter_memory_paths(root: Path, problems: list[InvalidFile] | None = None) -> Iterator[str]:
    """Workspace-relative paths of every candidate memory file, sorted per folder.

    Symlinked folders are not followed (so nothing is indexed twice and
    nothing outside the workspace leaks in); symlinked files are yielded and
    checked by ``load_memory``. A folder that cannot be listed (too deep for
    PATH_MAX, unreadable) is added to ``problems`` with the reason, never fatal.
    """
    root = Path(root)

    def on_error(exc: OSError) -> None:
        if problems is not None and exc.filename is not None:
            rel = relative_path(root, os.fsdecode(exc.filename)) or os.fsdecode(exc.filename)
            problems.append(InvalidFile(display_name(rel), f"folder cannot be read: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=on_error):
        rel_dir = relative_path(root, dirpath) or ""
        dirnames[:] = sorted(d for d in dirnames if not is_ignored_dir(f"{rel_dir}/{d}".lstrip("/")))
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}".lstrip("/")
            if is_memory_path(rel):
                yield rel


def folder_type(rel_path: str) -> str | None:
    parts = _parts(rel_path)
    return type_for_folder(parts[0]) if len(parts) > 1 else None


def load_memory(root: Path, rel_path: str, config: Config) -> Memory | InvalidFile | None:
    """Read and parse one file.

    Returns the ``Memory``, an ``InvalidFile`` with the reason, or ``None``
    when the file does not exist (deleted between listing and reading).
    """
    root = Path(root)
    shown = display_name(rel_path)
    if shown != rel_path:
        return InvalidFile(
            shown, "file name is not valid UTF-8 (shown with \\x escapes); rename the file so it can be served"
        )
    path = root / rel_path
    try:
        if len(os.fsencode(path)) >= 4096:
            return InvalidFile(
                rel_path, "path is longer than the system limit (PATH_MAX, 4096 bytes); move the file to a shorter path"
            )
        if any(len(os.fsencode(part)) > 255 for part in _parts(rel_path)):
            return InvalidFile(rel_path, "file name is longer than the system limit (NAME_MAX, 255 bytes)")
        # One lstat answers "symlink?" and, for a plain file (nearly all), "regular file?" too:
        # a cold build parses every file, and two more stats each were ~10 % of its parsing.
        stat = os.lstat(path)
        if stat_module.S_ISLNK(stat.st_mode):
            try:
                target = path.resolve(strict=True)
            except RuntimeError:
                return InvalidFile(rel_path, "symlink loop (the link points back to itself)")
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return InvalidFile(rel_path, "symlink loop (the link points back to itself)")
                if isinstance(exc, FileNotFoundError):
                    return InvalidFile(rel_path, "broken symlink (its target does not exist)")
                raise
            real_root = root.resolve()
            if not target.is_relative_to(real_root):
                return InvalidFile(rel_path, f"symlink points outside the workspace (to {target})")
            target_rel = target.relative_to(real_root).as_posix()
            if target_rel.split("/", 1)[0] == SOURCES_FOLDER and rel_path.split("/", 1)[0] != SOURCES_FOLDER:
                return InvalidFile(
                    rel_path,
                    f"symlink points into sources/ ({target_rel}); the source is served "
                    "from there, read-only, and not twice",
                )
            if not is_memory_path(target_rel):
                return InvalidFile(
                    rel_path,
                    "symlink points to a file that is not served as memory "
                    f"({target.relative_to(real_root).as_posix()})",
                )
            stat = path.stat()
        if not stat_module.S_ISREG(stat.st_mode):
            kind = (
                "a named pipe (FIFO)"
                if stat_module.S_ISFIFO(stat.st_mode)
                else "a socket"
                if stat_module.S_ISSOCK(stat.st_mode)
                else "a device"
                if stat_module.S_ISCHR(stat.st_mode) or stat_module.S_ISBLK(stat.st_mode)
                else "a folder"
                if stat_module.S_ISDIR(stat.st_mode)
                else "not a regular file"
            )
            return InvalidFile(rel_path, f"{kind}, not a regular file; only text files are memories")
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return InvalidFile(rel_path, "symlink loop (the link points back to itself)")
        return InvalidFile(rel_path, f"cannot be read: {exc.strerror or exc}")
    except (RuntimeError, ValueError) as exc:
        return InvalidFile(rel_path, f"cannot be read: {exc}")
    max_bytes = config.settings.limits.max_file_bytes
    try:
        return parse_memory(
            raw,
            rel_path=rel_path,
            path=path,
            folder_type=folder_type(rel_path),
            mtime=stat.st_mtime,
            max_bytes=max_bytes,
        )
    except MemoryFileError as exc:
        return InvalidFile(rel_path, str(exc))


def scan_workspace(
    root: Path,
    config: Config,
    progress: Callable[[int, int], None] | None = None,
    reuse: Callable[[str], Memory | None] | None = None,
) -> list[Memory | InvalidFile]:
    """Load every candidate file in sorted path order (deleted-while-listing files are dropped).

    ``progress(done, total)`` is called every ``SCAN_PROGRESS_EVERY`` files and at the end.
    ``reuse(rel_path)`` may return a still-valid earlier parse (``parse_cache``) instead of reading.
    """
    items: list[Memory | InvalidFile] = []
    problems: list[InvalidFile] = []
    paths = list(iter_memory_paths(root, problems))
    for done, rel_path in enumerate(paths, 1):
        loaded: Memory | InvalidFile | None = reuse(rel_path) if reuse is not None else None
        if loaded is None:
            loaded = load_memory(root, rel_path, config)
        if loaded is not None:
            items.append(loaded)
        if progress is not None and (done % SCAN_PROGRESS_EVERY == 0 or done == len(paths)):
            progress(done, len(paths))
    return items + problems


def load_memories(root: Path, rel_paths: list[str], config: Config) -> list[Memory | InvalidFile]:
    """``load_memory`` for each path, files gone meanwhile dropped: one unit of work for a parser process."""
    return [m for m in (load_memory(root, rel, config) for rel in rel_paths) if m is not None]
