# Hypothesis against the real processes (issue 15): `harness relay serve` and two paired `harness daemon run`
# are sent hellos, frames after authentication and pairing blobs that are nested, truncated, oversized, of the
# wrong types, replayed or out of order (tests/hostile_relay.py). After each input the relay and both daemons
# still run; after all of them nothing of either machine changed and the paired machines still exchange a
# question. The examples are few here; scripts/bench_relay_fuzz.py runs the same strategies 10,000 times each.
from __future__ import annotations

import base64
import json
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.io import pairing
from harness.io.relay import Frame, Notice
from harness.io.seal import SEALED
from tests import test_relay_processes
from tests.hostile_relay import (
    as_stranger,
    frames,
    hellos,
    pairing_blobs,
    pairing_request,
    send_hello,
    unknown_code_request,
)
from tests.test_relay_processes import World, ask_and_reach_b, files

# test_relay_processes' `world` fixture: a relay and two paired daemons (processes), a team across them
paired_world = test_relay_processes.world
EXAMPLES = settings(max_examples=60, deadline=None)


def welcomes(world: World) -> int:
    """Welcomes in the relay's record (its own messages; what came in may be anything)."""
    complete = world.record.read_text().rpartition("\n")[0]  # the relay may be mid-line
    lines = [json.loads(line) for line in complete.split("\n") if line]  # not splitlines: U+2028 is text
    return sum(1 for line in lines if line["direction"] == "out" and '"welcome"' in line["message"])


def all_running(world: World) -> bool:
    return world.relay.running and world.a.daemon.running and world.b.daemon.running


def settled(world: World) -> None:
    """Wait until A has handled every frame sent to it so far: it answers one more request, in order."""
    probe = pairing_request(pairing.identity(world.a.home).public, unknown_code_request())
    answered = lambda back: any(isinstance(e, Frame) for e in back)  # noqa: E731
    back = trio.run(lambda: as_stranger(world.url, world.a.address, [probe], until=answered))
    assert [e.blob[0] for e in back if isinstance(e, Frame)] == [pairing.PAIR_REPLY], back


def both_settled(world: World) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Both machines' files once they read the same for a second: after the fixture's question a loaded
    machine may still be writing what it owes (the desk's late looks, trace lines): no input's doing."""
    both = lambda: (files(world.a.home), files(world.b.home))  # noqa: E731
    return test_relay_processes.settled(both, "both machines' files", 1.0)


def unchanged_and_still_paired(world: World, before: tuple[dict[str, bytes], dict[str, bytes]]) -> None:
    settled(world)
    assert all_running(world)
    assert (files(world.a.home), files(world.b.home)) == before
    ask_and_reach_b(world, "q1")


def test_any_hello_is_refused_and_changes_nothing(paired_world: World) -> None:
    world = paired_world
    before = both_settled(world)
    welcomed = welcomes(world)

    @EXAMPLES
    @given(hello=hellos)
    def one(hello: str | bytes) -> None:
        back, _ = trio.run(send_hello, world.url, hello)
        assert back == []  # no welcome, nothing else: the connection is closed
        assert all_running(world)

    one()
    assert welcomes(world) == welcomed
    unchanged_and_still_paired(world, before)


def test_any_frame_after_authentication_gets_one_notice(paired_world: World) -> None:
    world = paired_world
    before = both_settled(world)

    @EXAMPLES
    @given(frame=frames)
    def one(frame: str | bytes) -> None:
        one_back = lambda back: len(back) == 1  # noqa: E731
        back = trio.run(lambda: as_stranger(world.url, world.a.address, [], raw=[frame], until=one_back))
        assert len(back) == 1 and isinstance(back[0], Notice), back
        assert back[0].kind in {"bad_frame", "too_large", "offline"}, back
        assert all_running(world)

    one()
    unchanged_and_still_paired(world, before)


def _recorded(world: World, kind: int) -> tuple[str, bytes]:
    """(sender, blob) of the first blob of `kind` the relay handed on (the pairing of the fixture)."""
    for way, message in world.seen():
        if way == "out" and "from" in message:
            blob = base64.b64decode(message["blob"])
            if blob[0] == kind:
                return message["from"], blob
    raise AssertionError(f"the relay handed on no blob of kind {kind:#x}")


def test_any_blob_to_a_daemon_is_refused_and_changes_nothing(paired_world: World) -> None:
    world = paired_world
    _, request = _recorded(world, pairing.PAIR_REQUEST)  # B's real request, its code long used
    _, reply = _recorded(world, pairing.PAIR_REPLY)
    before = both_settled(world)
    # Replayed and out of order: the used request again (A answers code_used), A's own reply sent back to
    # A, the request sent to B, who issued no code.
    one_back = lambda back: len(back) == 1  # noqa: E731
    back = trio.run(lambda: as_stranger(world.url, world.a.address, [request, reply], until=one_back))
    assert [e.blob[0] for e in back if isinstance(e, Frame)] == [pairing.PAIR_REPLY]
    trio.run(lambda: as_stranger(world.url, world.b.address, [request]))
    a_key = pairing.identity(world.a.home).public
    blobs = st.one_of(pairing_blobs(a_key), st.binary(max_size=200).map(lambda tail: bytes([SEALED]) + tail))

    @EXAMPLES
    @given(blob=blobs, to=st.sampled_from(["a", "b"]))
    def one(blob: bytes, to: str) -> None:
        machine: Any = world.a if to == "a" else world.b
        trio.run(lambda: as_stranger(world.url, machine.address, [blob]))
        assert all_running(world)

    one()
    unchanged_and_still_paired(world, before)
