"""``ctxos open`` (alias ``ctxos web``): open the web view with a one-time log-in link.

The link comes from the running daemon over its owner-only Unix socket (RPC
``web_login``), so only this user can get one. It carries a single-use code
that expires within a minute; visiting it sets the browser's session cookie
and redirects to the page, so no token ever sits in the browser's history or
in a log. ``--print`` prints the link instead of starting a browser (for
another browser, or a machine without one).
"""

from __future__ import annotations

import argparse
import webbrowser
from pathlib import Path
from typing import Literal, TypedDict

from ctxos.client import DaemonClient, DaemonError, DaemonNotRunning, RpcCallError
from ctxos.client.cli import CliError, require_workspace, resolve_workspace


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "open", aliases=["web"], help="open the web view in your browser (a one-time log-in link from the daemon)"
    )
    parser.add_argument(
        "--print", dest="print_only", action="store_true", help="print the one-time link instead of opening a browser"
    )
    parser.set_defaults(func=cmd_open)


class LoginLink(TypedDict):
    """The reply of RPC ``web_login`` (``expires_in_s`` is None when HTTP needs no credential)."""

    url: str
    auth: Literal["none", "token"]
    expires_in_s: int | None


def login_link(root: Path) -> LoginLink:
    """Ask the workspace's daemon for a one-time link."""
    client = DaemonClient.for_workspace(root)
    try:
        return client.call("web_login")
    except DaemonNotRunning as exc:
        raise CliError(
            f"no daemon is running for {root}; start it with `ctxos start`, then run `ctxos open` again", exit_code=3
        ) from exc
    except RpcCallError as exc:
        raise CliError(str(exc), exit_code=1) from exc
    except (DaemonError, OSError) as exc:
        raise CliError(f"cannot reach the daemon for {root}: {exc}", exit_code=1) from exc
    finally:
        client.close()


def cmd_open(args: argparse.Namespace) -> int:
    root = require_workspace(resolve_workspace(args.workspace))
    link = login_link(root)
    url = str(link["url"])
    if link.get("auth") == "none":
        note = "HTTP needs no credential here (daemon.http_auth: none)"
    else:
        note = f"one-time link, valid for {int(link.get('expires_in_s') or 60)} s"
    if args.print_only:
        print(url)
        print(f"# {note}")
        return 0
    if webbrowser.open(url):
        print(f"opened the web view in your browser ({note})")
    else:
        print(f"no browser found; open this link yourself ({note}):\n{url}")
    return 0
