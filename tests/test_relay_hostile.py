# The relay under strangers (issue 15): nothing a connection sends ends `harness relay serve` (finding 2: one
# nested hello did), every message is bounded before it is parsed, a connection that does not prove an
# address in time or sends too much first is closed, and the two caps (pending, authenticated) always admit a
# newcomer, so strangers holding connections cannot lock paired machines out. Also the client: a hostile or
# refusing relay is a RelayError, never a crash of the machine that connected to it.
from __future__ import annotations

import contextlib
import gc
import json
import weakref
from collections.abc import Callable

import pytest
import trio
from trio.testing import MockClock
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from harness.io.relay import HOST, Frame, Notice, Relay, RelayError, RelayLimits, connect_relay
from harness.io.seal import Identity, b64
from tests import test_relay_processes
from tests.hostile_relay import WAIT, as_stranger, nested, send_hello
from tests.test_relay_processes import World, ask_and_reach_b

# test_relay_processes' `world` fixture: a relay and two paired daemons (processes), a team across them
paired_world = test_relay_processes.world


async def start(nursery: trio.Nursery, limits: RelayLimits) -> tuple[Relay, str]:
    relay = Relay(limits)
    port = await nursery.start(relay.serve, 0)
    return relay, f"ws://{HOST}:{port}"


async def until(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not predicate():
            await trio.sleep(0.01)


# --- finding 2, with the real processes ---------------------------------------------------------------------


def test_finding_2_nested_hello_refused(paired_world: World) -> None:
    """A nested hello (no authentication needed) and nested frames after authentication used to end `harness
    relay serve` with RecursionError. Each is refused on its own connection, counted, and the relay keeps
    routing the paired machines' traffic."""
    world = paired_world
    deep = nested(5000)
    wrong_types = json.dumps({"type": "hello", "publicKey": 7, "proof": None})
    deep_field = json.dumps({"type": "hello", "publicKey": json.loads(nested(900, "{"))})
    for hello in (deep, wrong_types, deep_field):
        back, code = trio.run(send_hello, world.url, hello)
        assert (back, code) == ([], 4001), (back, code)  # no welcome: closed, authentication failed
        assert world.relay.running, world.relay.text()
    raw = [deep, json.dumps({"to": json.loads(nested(900)), "blob": b64(b"x")})]
    notices = trio.run(
        lambda: as_stranger(world.url, world.a.address, [], raw=raw, until=lambda back: len(back) == 2)
    )
    assert [n.kind for n in notices if isinstance(n, Notice)] == ["bad_frame", "bad_frame"], notices
    assert world.relay.running, world.relay.text()

    ask_and_reach_b(world, "q1")  # A -> relay -> B, and B's report back
    assert world.relay.stop() == 0  # SIGTERM: the relay prints its counters as it leaves
    stats = json.loads(world.relay.text().splitlines()[-1])["stats"]
    assert stats["hello_too_deep"] == 2 and stats["hello_shape"] == 1 and stats["auth_failures"] == 3, stats
    assert stats["frame_too_deep"] == 2 and stats["frames"] >= 2 and "internal_errors" not in stats, stats
    assert world.relay.text().count("refused (hello_too_deep)") == 1  # logged once, counted twice


# --- the caps, on a relay in this process -------------------------------------------------------------------


async def test_a_full_relay_admits_a_newcomer_and_closes_the_quietest(nursery: trio.Nursery) -> None:
    """A relay full of strangers' authenticated connections still admits whoever comes next (a paired
    machine reconnecting), and never closes the machines that keep routing frames."""
    relay, url = await start(nursery, RelayLimits(max_connections=4))
    a, b = Identity.generate(), Identity.generate()
    async with (
        connect_relay(url, a) as ca,
        connect_relay(url, b) as cb,
        contextlib.AsyncExitStack() as strangers,
    ):
        for _ in range(12):  # strangers keep arriving while a and b talk between their arrivals
            await strangers.enter_async_context(connect_relay(url, Identity.generate()))
            await ca.send(b.address, b"ping")
            assert await cb.receive() == Frame(a.address, b"ping")
            await cb.send(a.address, b"pong")
            assert await ca.receive() == Frame(b.address, b"pong")
        assert len(relay.connected()) == 4 and {a.address, b.address} <= set(relay.connected())
        newcomer = Identity.generate()
        async with connect_relay(url, newcomer) as cn:  # full, and still admitted
            await cn.send(a.address, b"hi")
            assert await ca.receive() == Frame(newcomer.address, b"hi")
    assert relay.stats["quiet_evicted"] == 11  # 15 connections through 4 slots; a and b never among them


async def test_pending_connections_are_capped_and_dropped_after_the_hello_timeout(
    nursery: trio.Nursery, mock_clock: MockClock
) -> None:
    # Real time flows, but the hello timeout comes only when the test jumps the clock past it: however slow
    # the machine, the newcomer arrives while the silent connections still wait.
    mock_clock.rate = 1.0
    hello_timeout = 3600.0
    relay, url = await start(nursery, RelayLimits(max_pending=4, hello_timeout=hello_timeout))
    silent = [await trio.open_tcp_stream(HOST, relay.port) for _ in range(10)]  # never say anything
    await until(lambda: relay.stats["pending_evicted"] == 6)
    assert relay.pending() == 4
    async with connect_relay(url, Identity.generate()) as client:  # a newcomer proves its address anyway
        assert client.address in relay.connected()
    assert relay.pending() == 3 and relay.stats["auth_timeouts"] == 0
    mock_clock.jump(hello_timeout)
    await until(lambda: relay.pending() == 0)
    assert relay.stats["pending_evicted"] == 7 and relay.stats["auth_timeouts"] == 3
    for stream in silent:  # each was closed by the relay
        with trio.fail_after(WAIT):
            assert await stream.receive_some() == b""
        await stream.aclose()


async def test_a_connection_sending_more_than_hello_bytes_before_its_welcome_is_closed(
    nursery: trio.Nursery,
) -> None:
    relay, url = await start(nursery, RelayLimits(hello_bytes=4096))
    back, _ = await send_hello(url, json.dumps({"type": "hello", "publicKey": "A" * 8000, "proof": ""}))
    assert back == [] and relay.stats["hello_too_large"] == 1 and relay.connected() == []


def unfinished_text_frame(declared: int, sent: int) -> bytes:
    """The start of one masked WebSocket text frame declaring `declared` payload bytes, with `sent` of them
    (the zero mask: the payload is plain ASCII)."""
    assert sent < declared
    return bytes([0x81, 0x80 | 127]) + declared.to_bytes(8, "big") + bytes(4) + b"a" * sent


async def test_strangers_trickling_unfinished_messages_hold_at_most_the_relay_wide_budget(
    nursery: trio.Nursery,
) -> None:
    """Strangers who authenticate and then send most of a message and never its end (found by a review:
    each held up to 2.8 MB, ~3 GB over 1,024 connections) share one budget with every queued frame: past
    it the connection that has held bytes the longest is closed, oldest first, and two machines that send
    and read at the pace of their link go on exchanging frames."""
    part = 60 << 10
    held_by_one = 14 + part  # the frame's header and the part of its payload
    limits = RelayLimits(blob_bytes=64 << 10, held_bytes=3 * held_by_one + 1000)
    relay, url = await start(nursery, limits)
    a, b = Identity.generate(), Identity.generate()
    async with (
        connect_relay(url, a, blob_bytes=limits.blob_bytes) as ca,
        connect_relay(url, b, blob_bytes=limits.blob_bytes) as cb,
        contextlib.AsyncExitStack() as stack,
    ):
        strangers = []
        for number in range(8):
            stranger = await stack.enter_async_context(connect_relay(url, Identity.generate()))
            await stranger.ws._stream.send_all(unfinished_text_frame(2 * part, part))
            strangers.append(stranger)
            await until(
                lambda n=number: relay.held() == min(n + 1, 3) * held_by_one
                and relay.stats["held_evicted"] == max(0, n + 1 - 3)
            )
        for stranger in strangers[:5]:  # the five that had held bytes the longest were closed
            with trio.fail_after(WAIT), pytest.raises(ConnectionClosed) as closed:
                await stranger.ws.get_message()
            assert closed.value.reason.code == 4008, closed.value.reason
        assert all(stranger.ws.closed is None for stranger in strangers[5:])

        blob = b"x" * (48 << 10)
        for _ in range(3):
            await ca.send(b.address, blob)
            with trio.fail_after(WAIT):
                assert await cb.receive() == Frame(a.address, blob)
            assert relay.held() <= limits.held_bytes
        assert {a.address, b.address} <= set(relay.connected())
        # Delivered frames and finished messages hold nothing: only the strangers still open do.
        still_open = [s for s in strangers if s.address in relay.connected()]
        assert relay.held() == len(still_open) * held_by_one and len(still_open) <= 2, relay.stats
        await stack.aclose()  # a connection that ends holds nothing either
        await until(lambda: relay.held() == 0)
    assert relay.stats["held_evicted"] >= 6, relay.stats  # room for a's frames came from strangers


async def test_a_connection_closed_for_the_budget_is_freed_by_reference_counts(nursery: trio.Nursery) -> None:
    """What a closed connection held is given back when it closes, not at the cyclic collector's next run,
    which counts objects, not bytes (a stranger's unfinished 2 MB message is one object): with the peer
    closed over by its own stream's read hook, a relay with a 64 MB budget grew to 292 MB
    (scripts/bench_relay_held.py)."""
    part = 60 << 10
    relay, url = await start(nursery, RelayLimits(blob_bytes=64 << 10, held_bytes=part + (part >> 1)))
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        async with contextlib.AsyncExitStack() as stack:
            first = await stack.enter_async_context(connect_relay(url, Identity.generate()))
            await first.ws._stream.send_all(unfinished_text_frame(2 * part, part))
            await until(lambda: relay.held() > 0)
            held_first = weakref.ref(relay._peers[first.address])
            second = await stack.enter_async_context(connect_relay(url, Identity.generate()))
            await second.ws._stream.send_all(unfinished_text_frame(2 * part, part))
            await until(lambda: relay.stats["held_evicted"] == 1 and first.address not in relay.connected())
            await until(lambda: held_first() is None)  # gone with no collection run
    finally:
        if was_enabled:
            gc.enable()


# --- the client against a hostile or refusing relay ---------------------------------------------------------


async def test_a_relay_refusing_the_handshake_is_a_relay_error(nursery: trio.Nursery) -> None:
    """A full or refusing relay answers the WebSocket handshake with an HTTP error: the client gets a
    RelayError (which the daemon retries), not an ExceptionGroup that ends it."""

    async def refuse(request: WebSocketRequest) -> None:
        await request.reject(503)

    server = await nursery.start(serve_websocket, refuse, HOST, 0, None)
    try:
        async with connect_relay(f"ws://{HOST}:{server.port}", Identity.generate()):
            raise AssertionError("a refused handshake connected")
    except RelayError as error:
        assert "503" in str(error)


async def test_a_hostile_relay_cannot_end_its_client(nursery: trio.Nursery) -> None:
    """A relay operator answering with nested JSON, wrong types or a low-order key: RelayError at connect;
    after the welcome, such messages are skipped and the next good frame is delivered."""
    identity = Identity.generate()
    challenges = [
        nested(5000),
        json.dumps({"relayKey": 1, "nonce": None}),
        json.dumps({"relayKey": b64(bytes(32)), "nonce": ""}),  # a low-order key
    ]

    async def hostile(request: WebSocketRequest) -> None:
        ws = await request.accept()
        if challenges:
            await ws.send_message(challenges.pop(0))
            return
        relay_key = b64(Identity.generate().public)
        await ws.send_message(json.dumps({"type": "challenge", "relayKey": relay_key, "nonce": ""}))
        await ws.get_message()
        await ws.send_message(json.dumps({"type": "welcome", "address": identity.address}))
        for junk in (nested(5000), json.dumps({"from": 1, "blob": []}), json.dumps({"notice": None})):
            await ws.send_message(junk)
        await ws.send_message(json.dumps({"from": "x" * 32, "blob": b64(b"fine")}))
        await trio.sleep_forever()

    server = await nursery.start(serve_websocket, hostile, HOST, 0, None)
    url = f"ws://{HOST}:{server.port}"
    for _ in range(3):
        try:
            async with connect_relay(url, identity):
                raise AssertionError("a hostile challenge connected")
        except RelayError:
            pass
    async with connect_relay(url, identity) as client:
        with trio.fail_after(WAIT):
            assert await client.receive() == Frame("x" * 32, b"fine")
