# The relay and two paired daemons under strangers, every part a real process on loopback (`harness relay
# serve`, two `harness daemon run` with their own data directories, paired with `harness pair`):
#  1. a quiet relay: the latency of one exchange (ask on A, reply from B through `--machine`, answer on A),
#     the baseline of every ratio below;
#  2. the fuzz suite's strategies (tests/hostile_relay.py) at 10,000 examples each: hellos (one connection
#     each), frames after authentication, and blobs to both daemons (nested, truncated, oversized, mistyped,
#     noise); relay and daemons must stay up and the exchange must still complete;
#  3. 1,000 strangers' authenticated connections held open on the relay while the two machines exchange.
# Printed: throughput of each fuzz phase, the exchange latency as a ratio against the quiet one, and the RSS
# of the relay and both daemons after each phase.
from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' processes and strategies

from harness.io import pairing
from harness.io.relay import Frame, Notice, connect_relay
from harness.io.seal import SEALED, Identity, fingerprint
from tests.hostile_relay import (
    WAIT,
    frames,
    hellos,
    pairing_blobs,
    pairing_request,
    send_hello,
    unknown_code_request,
)
from tests.test_relay_processes import TEAM_ID, World, harness, ok

BODY = "Which endpoint returns the vault state?"
ANSWER = "GET /v1/vault/state"
PROBE_EVERY = 50  # blobs to a daemon between two probes it must answer (the relay queues 64 per connection)
WINDOW = 32  # frames sent before their notices are read: half the relay's queue for this connection
CONNECTING = 64  # strangers proving their address at once (the relay closes the oldest past 256 pending)


def examples(strategy: st.SearchStrategy[object], count: int) -> list[object]:
    """`count` examples of `strategy`, drawn the way the fuzz suite draws them (generation only)."""
    drawn: list[object] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(value: object) -> None:
        drawn.append(value)

    draw()
    return drawn


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def memory(world: World) -> str:
    relay, a, b = (rss_mb(p.pid) for p in (world.relay, world.a.daemon, world.b.daemon))
    return f"RSS: relay {relay:6.1f} MB, daemon A {a:6.1f} MB, daemon B {b:6.1f} MB"


def alive(world: World) -> None:
    for process in (world.relay, world.a.daemon, world.b.daemon):
        assert process.running, process.text()[-3000:]


# --- setup --------------------------------------------------------------------------------------------------


async def probe(url: str, machine_public: bytes) -> bool:
    """Whether the machine with this key is on the relay and answers a pairing request (code_unknown)."""
    address = fingerprint(machine_public)
    async with connect_relay(url, Identity.generate()) as client:
        await client.send(address, pairing_request(machine_public, unknown_code_request()))
        with trio.move_on_after(WAIT):
            while True:
                event = await client.receive()
                if isinstance(event, Frame) and event.sender == address:
                    return True
                if isinstance(event, Notice) and event.kind == "offline":
                    return False
    return False


def wait_online(world: World) -> None:
    deadline = time.monotonic() + 60
    for machine in (world.a, world.b):
        key = pairing.identity(machine.home).public
        while not trio.run(probe, world.url, key):
            assert time.monotonic() < deadline, f"machine {machine.name} did not come back to the relay"
            time.sleep(0.2)


def set_up(tmp: Path) -> World:
    """The test suite's world: a relay, A and B paired through it, a team on A with alice (A) and bob (B).
    The relay is then restarted without `--record` (10,000 oversized frames would fill the disk)."""
    world = World(tmp)
    world.start_relay()
    code = ok(harness("pair", "create", "--relay", world.url, "--home", str(world.a.home)))
    world.start_daemon(world.a, wait=False)
    world.wait_relay()
    world.wait_daemon(world.a, 0)
    ok(harness("pair", "accept", code["code"], "--home", str(world.b.home)))
    world.start_daemon(world.b)
    members = [
        {"machineId": world.a.machine_id, "agentId": "agent-alice", "name": "alice"},
        {"machineId": world.b.machine_id, "agentId": "agent-bob", "name": "bob"},
    ]
    team = tmp / "team.json"
    team.write_text(json.dumps({"id": TEAM_ID, "name": "Bench", "members": members}))
    ok(harness("team", "--home", str(world.a.home), "create", "--file", str(team)))
    for name in ("alice", "bob"):
        world.keys[name] = ok(world.owner("key", name))["memberKey"]
    assert world.relay.stop() == 0
    world.relay.argv = [arg for arg in world.relay.argv if arg != "--record" and arg != str(world.record)]
    world.start_relay()
    world.wait_relay()
    wait_online(world)
    return world


# --- the exchange -------------------------------------------------------------------------------------------


def exchange(world: World, question: str) -> float:
    """Seconds for: alice asks on A, bob replies from B through --machine, alice's wait returns it."""
    start = time.perf_counter()
    ok(world.alice("ask", "bob", BODY, "--id", question))
    ok(world.bob("reply", question, ANSWER))
    woke = ok(world.alice("wait", question, "--seconds", "30"))
    assert woke["reason"] == "answered" and woke["exchange"]["answer"]["text"] == ANSWER, woke
    return time.perf_counter() - start


def exchanges(world: World, label: str, count: int) -> float:
    samples = [exchange(world, f"{label}{n}") for n in range(count)]
    return statistics.median(samples)


# --- fuzz phases --------------------------------------------------------------------------------------------


async def send_hellos(url: str, messages: list[object]) -> int:
    welcomed = 0
    for message in messages:
        assert isinstance(message, str | bytes)
        back, _ = await send_hello(url, message)
        welcomed += len(back)
    return welcomed


async def send_frames(url: str, messages: list[object]) -> int:
    """All frames on one authenticated connection, WINDOW at a time, each window's notices (one a frame)
    read before the next; the notices received."""
    got = 0
    async with connect_relay(url, Identity.generate()) as client:
        for start in range(0, len(messages), WINDOW):
            for message in messages[start : start + WINDOW]:
                assert isinstance(message, str | bytes)
                await client.ws.send_message(message)
            with trio.move_on_after(WAIT):
                while got < min(start + WINDOW, len(messages)):
                    assert isinstance(await client.receive(), Notice)
                    got += 1
    return got


async def send_blobs(url: str, world: World, blobs: list[object]) -> int:
    """All blobs to A and B alternately from one stranger, with a probe each daemon must answer every
    PROBE_EVERY blobs, so that the relay's per-connection queue never overflows; the probes answered."""
    machines = [(m.address, pairing.identity(m.home).public) for m in (world.a, world.b)]
    probes = 0
    async with connect_relay(url, Identity.generate()) as client:
        for start in range(0, len(blobs), PROBE_EVERY):
            for n, blob in enumerate(blobs[start : start + PROBE_EVERY]):
                assert isinstance(blob, bytes)
                await client.send(machines[n % 2][0], blob)
            for address, key in machines:
                await client.send(address, pairing_request(key, unknown_code_request()))
            answered: set[str] = set()
            with trio.fail_after(WAIT):
                while len(answered) < 2:
                    event = await client.receive()
                    if isinstance(event, Frame) and event.blob[0] == pairing.PAIR_REPLY:
                        answered.add(event.sender)
            probes += len(answered)
    return probes


Sender = Callable[[list[object]], Awaitable[object]]


def phase(world: World, name: str, drawn: list[object], send: Sender) -> None:
    start = time.perf_counter()
    result = trio.run(send, drawn)
    seconds = time.perf_counter() - start
    alive(world)
    count = len(drawn)
    print(f"{name:<28} {count:6d} in {seconds:7.1f} s ({count / seconds:6.0f}/s), all up; answers: {result}")


# --- strangers holding connections --------------------------------------------------------------------------


class Strangers:
    """`count` authenticated throw-away connections held open from their own thread until `release`."""

    def __init__(self, url: str, count: int) -> None:
        self._ready = threading.Event()
        self._release = threading.Event()
        self.held = 0
        self._thread = threading.Thread(target=trio.run, args=(self._hold, url, count), daemon=True)
        self._thread.start()

    async def _hold(self, url: str, count: int) -> None:
        connecting = trio.Semaphore(CONNECTING)
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(self._one, url, connecting)
            while self.held < count:
                await trio.sleep(0.05)
            self._ready.set()
            await trio.to_thread.run_sync(self._release.wait)
            nursery.cancel_scope.cancel()

    async def _one(self, url: str, connecting: trio.Semaphore) -> None:
        async with contextlib.AsyncExitStack() as stack:
            async with connecting:
                await stack.enter_async_context(connect_relay(url, Identity.generate()))
            self.held += 1
            await trio.sleep_forever()

    def wait(self) -> None:
        assert self._ready.wait(120), f"only {self.held} strangers connected"

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 examples, 100 strangers")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each line as it is measured
    count, strangers, rounds = (200, 100, 2) if args.quick else (10_000, 1_000, 5)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * strangers + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        world = set_up(Path(tmp))
        try:
            quiet = exchanges(world, "quiet", rounds)
            print(f"exchange, quiet relay: median {quiet * 1000:7.1f} ms of {rounds} (the ratios' baseline)")
            print(memory(world))

            a_key = pairing.identity(world.a.home).public
            sealed_noise = st.binary(max_size=200).map(lambda tail: bytes([SEALED]) + tail)
            url = world.url
            phase(world, "hellos, a connection each", examples(hellos, count), partial(send_hellos, url))
            phase(world, "frames after authentication", examples(frames, count), partial(send_frames, url))
            blobs = examples(st.one_of(pairing_blobs(a_key), sealed_noise), count)
            phase(world, "blobs to the two daemons", blobs, partial(send_blobs, url, world))
            after = exchanges(world, "fuzzed", rounds)
            print(f"exchange after the fuzz: median {after * 1000:7.1f} ms  ratio {after / quiet:5.2f}")
            print(memory(world))

            held = Strangers(world.url, strangers)
            held.wait()
            crowded = exchanges(world, "crowded", rounds)
            ratio = crowded / quiet
            print(f"exchange, {held.held} strangers held: median {crowded * 1000:.1f} ms, ratio {ratio:5.2f}")
            print(memory(world))
            held.release()
            alive(world)
            assert world.relay.stop() == 0  # it prints its counters as it leaves
            print("relay counters:", world.relay.text().splitlines()[-1])
        finally:
            world.close()


if __name__ == "__main__":
    main()
