"""``ctxos service install|uninstall|status [--print]``: run the daemon as a user service.

The work is in ``ctxos.packaging.installer``; this module only parses
arguments, picks the workspace and prints the report.
"""

from __future__ import annotations

import argparse
import sys

from ctxos.client.cli import CliError, require_workspace, resolve_workspace
from ctxos.packaging import installer

STATUS_NOT_INSTALLED = 3  # LSB "program is not running" convention, as systemctl status uses


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "service",
        help="install the daemon as a systemd user service or launchd agent",
        description=(
            "Run the per-user daemon (`ctxos daemon --all`, every registered workspace) as a "
            "service: a systemd user unit on Linux, a launchd agent on macOS. One service per "
            "user; install also registers --workspace so the service serves it."
        ),
    )
    actions = parser.add_subparsers(dest="service_action", metavar="ACTION", required=True)
    for name, help_text in (
        ("install", "write the unit/plist (if new or changed) and enable and start it"),
        ("uninstall", "stop and disable the service and remove the file install wrote"),
        ("status", "show whether the service file is installed and what the service manager says"),
    ):
        p = actions.add_parser(name, help=help_text)
        p.add_argument(
            "--print", dest="print_only", action="store_true", help="show what would be written or run; change nothing"
        )
        p.add_argument(
            "--platform",
            choices=["linux", "darwin"],
            help="preview another platform's file (only with --print); default: this machine's",
        )
        p.set_defaults(func=run)


def _register(workspace) -> None:
    """The service serves registered workspaces: make sure this one is."""
    from ctxos.services.workspace_registry import RegistryError, add_workspace

    try:
        name, added = add_workspace(workspace)
    except (RegistryError, OSError) as exc:
        raise CliError(f"{workspace} could not be registered, so the service would not serve it: {exc}") from exc
    if added:
        print(f"registered {workspace} as '{name}' (ctxos workspace list)")


def run(args: argparse.Namespace) -> int:
    workspace = resolve_workspace(args.workspace)
    try:
        host = installer.detect_platform()
    except installer.ServiceError as exc:
        if not (args.print_only and args.platform):
            raise CliError(str(exc)) from exc
        host = None
    platform = args.platform or host
    if args.platform and args.platform != host and not args.print_only:
        raise CliError(f"--platform {args.platform} differs from this machine ({host}); use it with --print")
    try:
        plan = installer.make_plan(workspace, platform=platform)
        if args.print_only:
            sys.stdout.write(installer.describe_plan(plan, args.service_action))
            return 0
        if args.service_action == "install":
            require_workspace(workspace)
            _register(workspace)
            report = installer.install(plan)
        elif args.service_action == "uninstall":
            report = installer.uninstall(plan)
        else:
            state = installer.status(plan)
            print("\n".join(state.lines()))
            return 0 if state.installed else STATUS_NOT_INSTALLED
    except installer.ServiceError as exc:
        raise CliError(str(exc)) from exc
    print("\n".join(report.lines))
    return 0 if report.ok else 1
