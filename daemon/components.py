"""The one list of daemon components and RPC method modules.

``main.py`` starts the components in this order and stops them in reverse.
A component is a class with ``name``, ``async start(ctx)`` and ``async stop()``
(``ctx`` is the :class:`~ctxos.daemon.context.DaemonContext`). An RPC method
module has ``register(registry)``.

``essential`` components must start or the daemon exits (no watcher, no
socket: no daemon worth running); the others are logged and reported in
``status`` as failed, and the daemon carries on without them (a taken HTTP
port or a missing display should not stop indexing).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .context import DaemonOptions


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    target: str  # "module:Class"
    essential: bool = False
    enabled: Callable[[DaemonOptions], bool] = lambda options: True

    def build(self) -> Any:
        module_name, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attr)()


COMPONENTS: list[ComponentSpec] = [
    # The watcher first, so no edit made while the engine loads is missed.
    ComponentSpec("watcher", "ctxos.daemon.watcher:WatcherComponent", essential=True),
    # The socket next: `ctxos start` returns as soon as it answers `status`.
    ComponentSpec("ipc", "ctxos.daemon.ipc_server:IpcServerComponent", essential=True),
    ComponentSpec("http", "ctxos.daemon.http_server:HttpServerComponent", enabled=lambda options: options.http),
    ComponentSpec("scheduler", "ctxos.daemon.scheduler:SchedulerComponent"),
    ComponentSpec("tray", "ctxos.daemon.tray:TrayComponent", enabled=lambda options: options.tray is not False),
]

RPC_METHOD_MODULES: list[str] = [
    "ctxos.daemon.rpc_methods",
    "ctxos.daemon.rpc_governance",
    "ctxos.daemon.rpc_agent_governance",
    "ctxos.daemon.rpc_inbox",
    "ctxos.daemon.rpc_history",
    "ctxos.daemon.rpc_import",
    "ctxos.daemon.http_login",
]


STOP_TIMEOUT_S = 10.0


async def stop_components(started: list[Any], what: str = "") -> None:
    """Stop ``started`` in reverse order, each within STOP_TIMEOUT_S; a failure is logged, never raised."""
    import asyncio
    import logging

    for component in reversed(started):
        try:
            await asyncio.wait_for(component.stop(), STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - stopping goes on regardless
            logging.getLogger("ctxos.daemon").exception(
                "%scomponent %s did not stop cleanly", what, getattr(component, "name", component)
            )


def register_rpc_methods(registry: Any) -> None:
    """Import every method module and let it register its methods."""
    for name in RPC_METHOD_MODULES:
        importlib.import_module(name).register(registry)
