"""Shared by the MCP tests: a workspace with rules, skills, a protected memory, a
symlinked folder that leaves the workspace and a symlink into ``sources/``;
a disk snapshot to prove refusals change nothing; the refusal cases."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from daemon_helpers import auth_headers

TOOLS = {
    "get_context",
    "save_memory",
    "get_skill",
    "log_session",
    "review_memories",
    "flag_memory",
    "propose_merge",
    "draft_merge",
}

WORKSPACE_FILES = {
    "08-rules/no-secrets.md": """\
        ---
        id: no-secrets
        type: rule
        l0: Never commit secrets or tokens to the repository
        importance: 0.9
        always_load: true
        ---
        Never commit secrets; use the vault.
        """,
    "04-skills/deploy-checklist.md": """\
        ---
        id: deploy-checklist
        type: skill
        l0: How to deploy the web app safely
        tags: [deploy, release]
        ---
        # Deploy Checklist
        Run the release checklist before each deploy.
        <!-- L2 -->
        1. Run the tests. 2. Tag the release. 3. Watch the error dashboards for ten minutes.
        """,
    "04-skills/rust-errors.md": """\
        ---
        id: rust-errors
        type: skill
        l0: Rust error handling with thiserror and anyhow
        tags: [rust, errors]
        ---
        # Rust Error Handling
        Libraries use thiserror; binaries use anyhow with context.
        """,
    "03-projects/apollo.md": """\
        ---
        id: apollo
        type: project
        l0: Apollo is the billing service rewrite in Rust
        tags: [rust, billing]
        related: [rust-errors]
        ---
        Apollo replaces the old billing service. Deploys go through the deploy checklist.
        """,
    "01-context/profile.md": """\
        ---
        id: profile
        type: context
        l0: Who the user is and how they like to work
        protected: true
        ---
        Senior engineer; prefers short answers.
        """,
    "sources/paper.md": "# A source paper\nRead-only material.\n",
}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes, outside the derived-state folder, following no symlinks."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if ".ctxos" in path.parts:
            continue
        if path.is_symlink():
            out[rel] = b"-> " + os.readlink(path).encode()
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


def build_workspace(make_workspace, tmp_path: Path) -> Path:
    root = make_workspace(WORKSPACE_FILES)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.md").write_text("outside the workspace\n")
    # A type folder that is a symlink leaving the workspace, and a memory path that links into sources/.
    resources = root / "05-resources"
    if resources.exists():
        for child in resources.iterdir():
            child.unlink()
        resources.rmdir()
    resources.symlink_to(outside, target_is_directory=True)
    (root / "07-tasks").mkdir(exist_ok=True)
    (root / "07-tasks" / "linked.md").symlink_to(root / "sources" / "paper.md")
    return root


def refusal_cases(workspace: Path) -> list[tuple[dict, str]]:
    base = {"content": "overwrite attempt", "l0": "overwrite attempt"}
    return [
        ({**base, "type": "context", "id": "profile", "expected_version": 1}, "protected"),
        ({**base, "type": "skill", "id": "../sources/paper"}, "not allowed"),
        ({**base, "type": "skill", "id": "/etc/passwd"}, "not allowed"),
        ({**base, "type": "resource", "id": "victim"}, "leaves the workspace"),
        ({**base, "type": "task", "id": "linked"}, "symlink"),
        ({**base, "type": "skill", "id": "rust-errors"}, "expected_version"),
        ({**base, "type": "skill", "id": "rust-errors", "expected_version": 7}, "changed since you read it"),
    ]


@contextlib.asynccontextmanager
async def mcp_http_client(url: str, headers: dict[str, str] | None = None, **client_options: Any) -> AsyncIterator[Any]:
    """An SDK ``Client`` over Streamable HTTP at ``url``, sending ``headers`` (default: the stored token).

    ``client_options`` go to ``mcp.Client`` (``sampling_callback``, ``client_info``, ...). Use this, not
    ``Client(url)``: the daemon refuses HTTP without its credential.
    """
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=auth_headers() if headers is None else headers) as http_client:
        async with Client(streamable_http_client(url, http_client=http_client), **client_options) as client:
            yield client


# Two near-duplicate project memories (governance finds one consolidation): the agent-governance and
# map tests build merge proposals from them.
APOLLO_BODY = (
    "Apollo billing stores invoices in Postgres 14 with nightly backups to the S3 bucket "
    "billing-backups and keeps thirty days of point in time recovery."
)


def apollo_files() -> dict[str, str]:
    from daemon_helpers import memory_text

    return {
        "03-projects/apollo-db.md": memory_text("apollo-db", APOLLO_BODY, type="project", tags=["billing", "db"]),
        "03-projects/apollo-storage.md": memory_text(
            "apollo-storage", APOLLO_BODY + " Restores are tested monthly.", type="project", tags=["billing", "db"]
        ),
    }
