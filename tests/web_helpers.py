"""A small workspace built for the REST API and web view tests, and HTTP helpers.

The files are chosen so each view has something exact to show:
- two topical clusters (Rust skills and a baking corner) linked by ``related``
  and shared tags, so the graph has two communities;
- a rule, which every query loads first;
- an old, never-loaded context memory (a ``decay`` finding) and a scratch file
  past its TTL (a ``scratch_expired`` finding);
- an invalid file (broken YAML), skipped with a reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import write_files
from daemon_helpers import DaemonProcess, auth_headers, short_runtime_dir, start_daemon

# Valid memories in WORKSPACE_FILES (the graph has exactly these nodes).
MEMORY_IDS: tuple[str, ...] = (
    "no-secrets",
    "rust-error-handling",
    "rust-async",
    "rust-testing",
    "cli-tool",
    "sourdough",
    "oven-temps",
    "flour-choice",
    "old-laptop-setup",
    "todo-scratch",
)
INVALID_FILE = "05-resources/broken.md"

WORKSPACE_FILES: dict[str, str] = {
    "08-rules/no-secrets.md": """
        ---
        id: no-secrets
        type: rule
        l0: "Never commit secrets, tokens or passwords to git."
        importance: 0.9
        tags: [security, git]
        ---
        Never commit secrets. Keep tokens in the environment or a secret manager.
    """,
    "04-skills/rust-error-handling.md": """
        ---
        id: rust-error-handling
        type: skill
        l0: "Rust error handling: Result, the ? operator, anyhow for apps, thiserror for libraries."
        importance: 0.8
        tags: [rust, errors]
        related: [rust-async]
        ---
        <!-- L1 -->
        Return Result from fallible functions and propagate errors with the ? operator.
        Applications use anyhow; libraries define error enums with thiserror.
        <!-- L2 -->
        Add context with anyhow::Context (`.context("reading config")`). Never unwrap in library code.
        Map foreign errors with From impls so ? converts them. Log the error chain once, at the top.
    """,
    "04-skills/rust-async.md": """
        ---
        id: rust-async
        type: skill
        l0: "Async Rust with tokio: spawn tasks, never block the runtime."
        importance: 0.6
        tags: [rust, async]
        ---
        Use tokio::spawn for concurrent tasks; use spawn_blocking for blocking work.
    """,
    "04-skills/rust-testing.md": """
        ---
        id: rust-testing
        type: skill
        l0: "Testing Rust crates: unit tests in modules, integration tests in tests/."
        importance: 0.5
        tags: [rust, testing]
        related: [rust-error-handling]
        ---
        Put unit tests in a cfg(test) module; cargo test runs both kinds.
    """,
    "03-projects/cli-tool.md": """
        ---
        id: cli-tool
        type: project
        l0: "The grep-like CLI tool written in Rust."
        importance: 0.6
        tags: [rust, cli]
        related: [rust-error-handling, rust-testing, rust-async]
        ---
        A command-line search tool in Rust, built with clap; errors are reported with anyhow.
    """,
    "05-resources/sourdough.md": """
        ---
        id: sourdough
        type: resource
        l0: "Sourdough bread: starter, hydration and a long cold proof."
        importance: 0.5
        tags: [baking, bread]
        related: [oven-temps, flour-choice]
        ---
        Feed the starter the night before; 75% hydration; proof overnight in the fridge.
    """,
    "05-resources/oven-temps.md": """
        ---
        id: oven-temps
        type: resource
        l0: "Oven temperatures for bread and pastry."
        importance: 0.4
        tags: [baking, oven]
        related: [sourdough]
        ---
        Bread at 250 C with steam for 20 minutes, then 230 C. Pastry at 200 C.
    """,
    "06-decisions/flour-choice.md": """
        ---
        id: flour-choice
        type: decision
        l0: "We bake with a strong white flour plus 10% whole wheat."
        importance: 0.5
        tags: [baking, bread]
        related: [sourdough]
        ---
        Strong white flour gives structure; the whole wheat adds flavour and feeds the starter.
    """,
    "01-context/old-laptop-setup.md": """
        ---
        id: old-laptop-setup
        type: context
        l0: "How the old laptop was set up (Ubuntu 18.04, custom kernel)."
        importance: 0.3
        tags: [laptop]
        created: 2024-11-02
        modified: 2025-01-10T09:00:00
        ---
        The old laptop ran Ubuntu 18.04 with a custom kernel for the wifi card.
    """,
    "09-scratch/todo-scratch.md": """
        ---
        id: todo-scratch
        type: scratch
        l0: "Scratch notes: things to look at some day."
        importance: 0.2
        created: 2026-09-01
        modified: 2026-09-01T10:00:00
        ---
        Look at the flaky test; try the new linter.
    """,
    INVALID_FILE: "---\nid: [unclosed\n---\nbroken frontmatter\n",
}


# The scheduler's scratch expiry would archive todo-scratch on its own at start-up; the
# tests want the finding to stay until a person acts on it.
TEST_CONFIG = "governance:\n  scratch_auto_archive: false\n"


def build_workspace(root: Path, extra_config: str = "") -> Path:
    """Initialise ``root`` as a workspace (no examples), write the test files and ``_config.yaml``."""
    from ctxos.services.workspace import init_workspace

    root.mkdir(parents=True, exist_ok=True)
    init_workspace(root, seed_examples=False)
    write_files(root, WORKSPACE_FILES)
    (root / "_config.yaml").write_text(TEST_CONFIG + extra_config, encoding="utf-8")
    return root


def artifacts_dir() -> Path:
    """Where screenshots go: ``$CTXOS_TEST_ARTIFACTS`` or ``<repo>/test-artifacts`` (git-ignored)."""
    base = os.environ.get("CTXOS_TEST_ARTIFACTS")
    path = Path(base) if base else Path(__file__).resolve().parents[1] / "test-artifacts"
    path = path / "web"
    path.mkdir(parents=True, exist_ok=True)
    return path


class HttpResult:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def http(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout: float = 20.0,
    auth: bool = True,
) -> HttpResult:
    """One real HTTP request (urllib: no extra client library); errors are returned, not raised.

    Sends the stored token (``auth_headers``) unless ``auth=False`` or ``headers`` has its own Authorization.
    """
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    given = {key.lower() for key in (headers or {})}
    extra = auth_headers() if auth and "authorization" not in given else {}
    for key, value in {**extra, **(headers or {})}.items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return HttpResult(res.status, dict(res.headers), res.read())
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, dict(exc.headers), exc.read())


def api(url: str, method: str, path: str, body: Any = None) -> Any:
    """One REST call that must succeed; its JSON body."""
    result = http(method, url + path, body)
    assert result.status < 400, result.body
    return result.json()


@contextlib.contextmanager
def http_daemon(folder: Path) -> Iterator[DaemonProcess]:
    """A real daemon with HTTP on a free port over ``build_workspace(folder / "ws")``; stopped after."""
    proc = start_daemon(build_workspace(folder / "ws"), runtime_dir=short_runtime_dir(), http=True, debounce_ms=50)
    try:
        assert proc.http_url, f"the daemon serves no HTTP:\n{proc.output()[-3000:]}"
        yield proc
    finally:
        proc.stop()
