"""The one list of daemon components and RPC method modules.

``main.py`` starts the components in this order and stops them in reverse.
A component is a class with ``name``, ``async start(ctx)`` and ``async stop()``
(``ctx`` is the :class:`~ctxos.daemon.context.DaemonContext`). The RPC methods are the
use cases of ``services/api`` (each registered with its request model and how it must
run), plus the daemon's own method modules, which have ``register(registry)``.

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

from ctxos.services.api import OPERATIONS, Operation

from .context import DaemonContext, DaemonOptions
from .rpc import Handler, RpcRegistry


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

# Daemon-only RPC methods beyond the use cases (services/api): modules with ``register(registry)``.
RPC_METHOD_MODULES: list[str] = [
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


def register_rpc_methods(registry: RpcRegistry) -> None:
    """Register every use case (``services/api``) as an RPC method, then the daemon's own method modules."""
    for op in OPERATIONS.values():
        registry.register(
            op.name,
            use_case_handler(op),
            op.write,
            wait_ready=op.wait_ready,
            doc=op.doc,
            partial_ok=op.partial_ok,
            schema=op.request,
        )
    for name in RPC_METHOD_MODULES:
        importlib.import_module(name).register(registry)


def use_case_handler(op: Operation[Any]) -> Handler:
    """The registry's handler for a use case: params arrive checked by ``op.request``, so they are rebuilt
    into the model without a second validation, and the context is the use case's host."""

    def handler(ctx: DaemonContext, params: dict[str, Any]) -> Any:
        return op(ctx, op.request.model_construct(**params))

    handler.__doc__ = op.doc
    return handler
