# Measures what crossing machines costs: (a) a sealed `team` round trip between two nodes through the relay
# on loopback (seal, relay hop, open with a durable high-water mark, the peer's handler, and back) against a
# plain trio-websocket echo of a frame of the same size; (b) seal and open cost per frame on their own.
from __future__ import annotations

import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, open_websocket_url, serve_websocket

from harness.io import pairing
from harness.io.relay import Relay
from harness.io.remote import RemoteNode
from harness.io.rpc import result_frame
from harness.io.seal import Identity, ReceiveSession, SendSession

ROUND_TRIPS = 500
SEAL_FRAMES = 5000
FRAME = '{"type":"team","requestId":"r","action":"inbox","teamId":"t","pad":"' + "x" * 900 + '"}'


def percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    p50 = statistics.median(samples) * 1000
    p99 = samples[int(len(samples) * 0.99) - 1] * 1000
    return f"p50 {p50:.3f} ms  p99 {p99:.3f} ms"


async def echo_round_trips() -> list[float]:
    async def echo(request: WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            while True:
                await ws.send_message(await ws.get_message())
        except ConnectionClosed:
            pass

    samples = []
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, echo, "127.0.0.1", 0, None))
        async with open_websocket_url(f"ws://127.0.0.1:{server.port}") as ws:
            for _ in range(ROUND_TRIPS):
                start = time.perf_counter()
                await ws.send_message(FRAME)
                await ws.get_message()
                samples.append(time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    return samples


async def sealed_round_trips(tmp: Path) -> list[float]:
    async def handle(message: str) -> str:
        return result_frame("r", {"echo": len(message)})

    samples = []
    async with trio.open_nursery() as nursery:
        relay = Relay()
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        node_a = RemoteNode(tmp / "a", relay_url=url, log=lambda line: None)
        await nursery.start(node_a.run, handle)
        await node_a.wait_connected()
        await pairing.accept_code(tmp / "b", pairing.create_code(tmp / "a", url).text())
        node_b = RemoteNode(tmp / "b", log=lambda line: None)
        await nursery.start(node_b.run)
        await node_b.wait_connected()
        for _ in range(ROUND_TRIPS):
            start = time.perf_counter()
            await node_b.request(node_a.machine_id, {"ch": "team", "frame": FRAME})
            samples.append(time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    return samples


def seal_costs(tmp: Path) -> tuple[float, float]:
    a, b = Identity.generate(), Identity.generate()
    sender = SendSession(tmp / "s.json", a, b.public)
    receiver = ReceiveSession(tmp / "r.json", b, a.public)
    body = FRAME.encode()
    start = time.perf_counter()
    frames = [sender.seal(body) for _ in range(SEAL_FRAMES)]
    sealed = (time.perf_counter() - start) / SEAL_FRAMES
    start = time.perf_counter()
    for frame in frames:
        receiver.open(frame)
    opened = (time.perf_counter() - start) / SEAL_FRAMES
    return sealed, opened


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        echo = trio.run(echo_round_trips)
        sealed = trio.run(sealed_round_trips, Path(tmp))
        seal, open_ = seal_costs(Path(tmp))
    print(f"frame: {len(FRAME)} bytes; {ROUND_TRIPS} round trips each")
    print(f"plain loopback websocket echo:        {percentiles(echo)}")
    print(f"sealed request/response via relay:    {percentiles(sealed)}")
    print(f"seal per frame:  {seal * 1e6:.1f} us (a durable reservation every 1024 frames)")
    print(f"open per frame:  {open_ * 1e6:.1f} us (with the durable high-water mark: one fdatasync)")


if __name__ == "__main__":
    main()
