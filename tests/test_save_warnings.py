"""The write-time budget guard (issue 17): ``save_memory`` saves, and warns when the memory will not
load as intended, over a real MCP stdio session, the socket and REST; ``ctxos doctor`` lists the
memories that can never load at L1 under the default budget. Real daemon processes throughout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helpers import daemon_factory  # noqa: F401  (fixture)
from mcp import Client, StdioServerParameters
from mcp_types import Implementation
from web_helpers import http

pytestmark = [pytest.mark.slow]

CTXOS = shutil.which("ctxos") or str(Path(sys.executable).with_name("ctxos"))

DEPLOY_TEXT = (
    "We deploy the billing service with blue green releases every Tuesday after the full "
    "regression suite passes on staging and the on-call engineer signs off."
)
FILES = {
    "06-decisions/billing-deploys.md": f"""\
        ---
        id: billing-deploys
        type: decision
        l0: Billing deploys are blue-green on Tuesdays after the regression suite
        ---
        {DEPLOY_TEXT}
        """,
}


def _stdio(root: Path) -> StdioServerParameters:
    env = {
        "CTXOS_RUNTIME_DIR": os.environ["CTXOS_RUNTIME_DIR"],
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    return StdioServerParameters(command=CTXOS, args=["--workspace", str(root), "mcp", "--no-start"], env=env)


@pytest.mark.anyio
async def test_save_memory_warns_over_a_real_mcp_session(make_workspace, daemon_factory):  # noqa: F811
    root = make_workspace(FILES)
    daemon_factory(root)
    async with Client(_stdio(root), client_info=Implementation(name="warn-test", version="1")) as client:
        fine = await client.call_tool(
            "save_memory",
            {
                "type": "project",
                "l0": "Pelican indexes the product catalog every night",
                "content": "Pelican is the nightly catalog indexer; it runs at 02:00 UTC.",
            },
        )
        assert not fine.is_error and fine.structured_content["warnings"] == []
        assert "Warnings" not in fine.content[0].text

        long_l1 = " ".join(f"step {i}: check totals," for i in range(330))  # ~1,500 tokens, < 8,000 chars
        big = await client.call_tool(
            "save_memory",
            {
                "type": "resource",
                "l0": "Invoice reconciliation procedure for the finance team",
                "l1": long_l1,
                "content": "The full procedure.",
            },
        )
        assert not big.is_error, big.content
        kinds = [w["kind"] for w in big.structured_content["warnings"]]
        assert kinds == ["l1_over_share"], big.structured_content
        details = big.structured_content["warnings"][0]["details"]
        assert details["l1_tokens"] > details["l1_share_tokens"] == 1000 and details["default_budget"] == 4000
        assert "[l1_over_share]" in big.content[0].text and "shorter l1" in big.content[0].text
        assert (root / big.structured_content["path"]).is_file()  # a warning never blocks the save

        vague = await client.call_tool("save_memory", {"type": "scratch", "l0": "Notes", "content": "misc"})
        assert [w["kind"] for w in vague.structured_content["warnings"]] == ["no_usable_l0"]

        copy = await client.call_tool(
            "save_memory",
            {
                "type": "decision",
                "l0": "Billing deploys are blue-green on Tuesdays after regression tests",
                "content": DEPLOY_TEXT.replace("every Tuesday", "each Tuesday"),
            },
        )
        warning = copy.structured_content["warnings"]
        assert [w["kind"] for w in warning] == ["near_duplicate"], warning
        assert warning[0]["details"]["duplicates"][0]["id"] == "billing-deploys"
        assert "Update billing-deploys instead" in copy.content[0].text


def test_warnings_in_rpc_and_rest_and_doctor_lists_never_at_l1(make_workspace, daemon_factory):  # noqa: F811
    huge_l1 = " ".join(f"a{i}, b{i}, c{i}," for i in range(900))  # over the 3,600 tokens one memory can get
    root = make_workspace(
        {
            **FILES,
            "05-resources/giant-glossary.md": f"""\
        ---
        id: giant-glossary
        type: resource
        l0: Every acronym used in the finance systems
        ---
        {huge_l1}
        <!-- L2 -->
        More.
        """,
        }
    )
    daemon = daemon_factory(root, http=True)
    saved = daemon.call("save_memory", type="scratch", l0="Todo", content="later")
    assert [w["kind"] for w in saved["warnings"]] == ["no_usable_l0"]

    created = http(
        "POST", daemon.http_url + "/api/memories", {"type": "scratch", "l0": "x", "content": "something to remember"}
    )
    assert created.status == 201, created.body
    assert [w["kind"] for w in created.json()["warnings"]] == ["no_usable_l0"]

    doctor = json.loads(
        subprocess.run(
            [CTXOS, "--workspace", str(root), "doctor", "--json"], check=True, capture_output=True, text=True
        ).stdout
    )
    assert [m["id"] for m in doctor["never_load_at_l1"]] == ["giant-glossary"]
    item = doctor["never_load_at_l1"][0]
    assert item["l1_tokens"] > item["available"] == doctor["l1_budget"]["available"] == 3600
    text = subprocess.run(
        [CTXOS, "--workspace", str(root), "doctor"], check=True, capture_output=True, text=True
    ).stdout
    assert "1 memories can never load at L1" in text and "05-resources/giant-glossary.md" in text
