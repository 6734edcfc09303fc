# What the benchmark scripts share: one definition of a quantile (nearest rank, so p50/p99 mean the same in
# every script's output) and the bare WebSocket echo that RPC and relay round trips are measured against.
from __future__ import annotations

from trio_websocket import ConnectionClosed, WebSocketRequest


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
