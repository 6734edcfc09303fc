# The relay on a real loopback socket: it routes by proven address only, refuses oversized frames, reports
# offline destinations at once, and a peer that stops reading loses frames and then its connection without
# slowing anyone else.
from __future__ import annotations

import json

import nacl.public
import pytest
import trio

from harness.io.relay import (
    Frame,
    Notice,
    Relay,
    RelayClient,
    RelayError,
    RelayLimits,
    connect_relay,
    open_ws,
)
from harness.io.seal import Identity, b64, unb64

# Generous: the suite runs on a loaded two-core machine; a relay that never answers fails, never hangs.
DEADLINE = 30


async def start(nursery: trio.Nursery, limits: RelayLimits | None = None) -> tuple[Relay, str]:
    relay = Relay(limits or RelayLimits())
    port = await nursery.start(relay.serve, 0)
    return relay, f"ws://127.0.0.1:{port}"


async def received(client: RelayClient) -> Frame | Notice:
    with trio.fail_after(DEADLINE):
        return await client.receive()


async def test_routes_by_address_and_sets_from(nursery: trio.Nursery) -> None:
    relay, url = await start(nursery)
    a, b, c = Identity.generate(), Identity.generate(), Identity.generate()
    async with connect_relay(url, a) as ca, connect_relay(url, b) as cb, connect_relay(url, c) as cc:
        assert relay.connected() == sorted([a.address, b.address, c.address])
        await ca.send(b.address, b"for b")
        await cc.send(b.address, b"from c")
        got = [await received(cb), await received(cb)]
        assert got == [Frame(a.address, b"for b"), Frame(c.address, b"from c")]
        # A client cannot claim another sender: `from` is what the relay authenticated.
        await ca.ws.send_message(json.dumps({"to": b.address, "blob": "AAAA", "from": c.address}))
        assert await received(cb) == Frame(a.address, b"\x00\x00\x00")
        with trio.move_on_after(0.1):
            await cc.receive()
            pytest.fail("c received a frame that was not addressed to it")


async def test_wrong_key_cannot_take_an_address(nursery: trio.Nursery) -> None:
    """A hello that names the victim's public key with a proof made by another key is refused, and the victim
    still gets its address afterwards."""
    relay, url = await start(nursery)
    victim, forger = Identity.generate(), Identity.generate()
    async with open_ws(url, max_message_size=1 << 16) as ws:
        challenge = json.loads(await ws.get_message())
        assert challenge["type"] == "challenge"
        # The forger answers the challenge correctly with its own key, but claims the victim's.
        relay_key = nacl.public.PublicKey(unb64(challenge["relayKey"]))
        proof = nacl.public.Box(nacl.public.PrivateKey(forger.secret), relay_key).encrypt(
            b"harness-relay-v1" + unb64(challenge["nonce"])
        )
        hello = {"type": "hello", "publicKey": b64(victim.public), "proof": b64(bytes(proof))}
        await ws.send_message(json.dumps(hello))
        with pytest.raises(Exception, match=r"4001|authentication"):
            with trio.fail_after(DEADLINE):
                await ws.get_message()
        assert victim.address not in relay.connected()
    assert relay.stats["auth_failures"] == 1 and relay.connected() == []
    async with connect_relay(url, victim):
        assert relay.connected() == [victim.address]


async def test_offline_destination_is_reported_at_once(nursery: trio.Nursery) -> None:
    relay, url = await start(nursery)
    a, absent = Identity.generate(), Identity.generate()
    async with connect_relay(url, a) as ca:
        await ca.send(absent.address, b"anyone?", ref="r1")
        with trio.fail_after(DEADLINE):
            notice = await ca.receive()
    assert notice == Notice("offline", absent.address, "r1", notice.detail)
    assert relay.stats["offline"] == 1


async def test_oversized_frame_refused_connection_lives(nursery: trio.Nursery) -> None:
    relay, url = await start(nursery, RelayLimits(blob_bytes=1000))
    a, b = Identity.generate(), Identity.generate()
    async with connect_relay(url, a, blob_bytes=1000) as ca, connect_relay(url, b) as cb:
        await ca.send(b.address, b"x" * 1001, ref="big")
        with trio.fail_after(DEADLINE):
            notice = await ca.receive()
        assert isinstance(notice, Notice) and notice.kind == "too_large" and notice.ref == "big"
        await ca.send(b.address, b"x" * 1000)
        assert await received(cb) == Frame(a.address, b"x" * 1000)
    assert relay.stats["too_large"] == 1


async def test_slow_consumer_is_bounded_and_others_unaffected(nursery: trio.Nursery) -> None:
    limits = RelayLimits(queue_frames=4, queue_bytes=1 << 20, send_timeout=0.5, drop_limit=8)
    relay, url = await start(nursery, limits)
    fast, slow, other_a, other_b = (Identity.generate() for _ in range(4))
    # The slow peer connects and never reads; the WebSocket library stops reading its socket once its own
    # small message queue is full, so the relay's writes back up for real.
    async with (
        connect_relay(url, slow) as _never_reads,
        connect_relay(url, fast) as cf,
        connect_relay(url, other_a) as ca,
        connect_relay(url, other_b) as cb,
    ):
        blob = b"y" * 60_000
        dropped = 0
        with trio.fail_after(DEADLINE):
            for _ in range(400):
                await cf.send(slow.address, blob)
                # Meanwhile, unrelated traffic flows.
                await ca.send(other_b.address, b"ping")
                assert await received(cb) == Frame(other_a.address, b"ping")
                if slow.address not in relay.connected():
                    break
            else:
                pytest.fail("400 frames to a peer that never reads, and it is still connected")
            while dropped < relay.stats["dropped"]:  # every frame dropped is a notice to its sender
                event = await cf.receive()
                if isinstance(event, Notice) and event.kind == "dropped":
                    dropped += 1
        assert slow.address not in relay.connected()
    assert relay.stats["slow_disconnects"] >= 1
    assert relay.stats["dropped"] >= 1 and dropped == relay.stats["dropped"]
    assert relay.stats["notices_lost"] == 0


async def test_newer_connection_replaces_older(nursery: trio.Nursery) -> None:
    relay, url = await start(nursery)
    a, b = Identity.generate(), Identity.generate()
    async with connect_relay(url, a) as old, connect_relay(url, b) as cb, connect_relay(url, a) as new:
        await cb.send(a.address, b"hi")
        assert await received(new) == Frame(b.address, b"hi")
        with pytest.raises(RelayError):
            with trio.fail_after(DEADLINE):
                await old.receive()
    assert relay.stats["connections"] == 3
