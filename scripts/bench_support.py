# What the benchmark scripts share: one definition of a quantile (nearest rank, so p50/p99 mean the same in
# every script's output) and the bare WebSocket echo that RPC and relay round trips are measured against
# (over loopback TCP for the relay, over a Unix socket like the daemon's for the RPC).
from __future__ import annotations

import resource
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    wrap_client_stream,
    wrap_server_stream,
)

from harness.io.listeners import local_listener, open_local_stream


def children_cpu() -> float:
    """User + system seconds of this process's ended children: a child's CPU is the difference around it."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def quantile(samples: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1) of `samples`."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


async def echo(request: WebSocketRequest) -> None:
    """A trio-websocket handler that sends every message straight back: the baseline round trip."""
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except ConnectionClosed:
        pass


async def serve_local_echo(
    path: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """The bare echo on a Unix socket at `path`: trio-websocket with nothing of harness in between."""

    async def connection(stream: trio.SocketStream) -> None:
        async with trio.open_nursery() as nursery:
            await echo(await wrap_server_stream(nursery, stream))
            nursery.cancel_scope.cancel()

    await trio.serve_listeners(connection, [local_listener(path)], task_status=task_status)


@asynccontextmanager
async def open_local_websocket(path: Path) -> AsyncIterator[WebSocketConnection]:
    """A trio-websocket client over a Unix socket (a daemon's, or the echo's)."""
    stream = await open_local_stream(path)
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(nursery, stream, "localhost", "/")
        try:
            yield ws
        finally:
            await ws.aclose()
            nursery.cancel_scope.cancel()
