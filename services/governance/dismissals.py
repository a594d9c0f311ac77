"""The findings a person dismissed, kept in ``.ctxos/dismissed.json`` with the checksums of their files.

A dismissed finding stays hidden until one of its files changes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text
from ..workspace import state_dir
from .findings import Finding

DISMISSED_FILENAME = "dismissed.json"
DISMISS_LOCK = threading.Lock()  # dismiss is a read-modify-write of dismissed.json


def dismissed_path(root: Path) -> Path:
    return state_dir(Path(root)) / DISMISSED_FILENAME


def load_dismissed(root: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(dismissed_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_dismissed(root: Path, data: Mapping[str, Any]) -> None:
    atomic_write_text(dismissed_path(root), json.dumps(dict(sorted(data.items())), indent=1) + "\n")


def subject_checksums(root: Path, finding: Finding, checksum_of: Mapping[str, str]) -> dict[str, str]:
    """Current checksum of each file a finding is about (memory checksum, or the raw bytes' sha256)."""
    result: dict[str, str] = {}
    for subject, path in zip(finding.subjects(), finding.paths):
        value = checksum_of.get(subject)
        if value is None:
            try:
                value = hashlib.sha256((Path(root) / path).read_bytes()).hexdigest()
            except OSError:
                value = "missing"
        result[subject] = value
    return result


def is_dismissed(root: Path, finding: Finding, dismissed: Mapping[str, Any], checksum_of: Mapping[str, str]) -> bool:
    """Dismissed, and none of its files changed since (a change brings the finding back)."""
    entry = dismissed.get(finding.fingerprint)
    if not entry:
        return False
    return bool(entry.get("checksums") == subject_checksums(root, finding, checksum_of))
