# Issue 15 (trust boundary, part 2) with every part a real process: a relay crowded by 1,000 strangers still
# serves two paired machines, and their daemons stay small. The crowd is a mix. 800 strangers prove a
# throw-away address each, send one sealed-looking frame to A or B (the daemon answers `unpaired`) and then
# hold their connection: the relay keeps those, so they are what is held while the exchange is measured. 200
# never finish the hello (half stay silent on TCP, half take the challenge and never answer), which the relay
# drops after its hello timeout: each is opened again at once, so the pending tier stays crowded during the
# exchange too. 200 stays below the relay's pending cap (256) so that the hello timeout, not the cap, is what
# drops them; 800 + 2 machines stays below its authenticated cap (1,024), so no connection is pushed out.
# The cap per identity is one connection: a stranger reconnecting with the same key replaces its own.
from __future__ import annotations

import contextlib
import json
import resource
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed

from harness.io.listeners import raise_open_files_limit
from harness.io.relay import HOST, Frame, RelayClient, RelayError, RelayLimits, connect_relay, open_ws
from harness.io.remote import UNPAIRED_BLOB
from harness.io.seal import SEALED, Identity
from tests import test_relay_processes
from tests.hostile_relay import WAIT
from tests.test_relay_processes import ANSWER, World, ask_and_reach_b, ok

# test_relay_processes' `world` fixture: a relay and two paired daemons (processes), a team across them
paired_world = test_relay_processes.world

AUTHENTICATED = 800
SILENT = 200  # half silent on TCP, half silent after the challenge
CONNECTING = 32  # strangers proving their address at once (past 256 pending, the relay closes the oldest)
REPEATS = 20  # connections of one throw-away identity
RSS_LIMIT_KB = 150 * 1024
LIMITS = RelayLimits()
JUNK = bytes([SEALED]) + bytes(64)  # looks sealed, from an address no daemon is paired with


def status_kb(pid: int, field: str) -> int:
    """A field of /proc/PID/status in kB: VmRSS (resident now) or VmHWM (the most it was ever)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def enough_descriptors(connections: int) -> None:
    """Raise this process's soft limit of open files to the hard one; skip if even that cannot hold the
    crowd (each stranger is one socket here)."""
    raise_open_files_limit()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < connections + 256:
        pytest.skip(f"`ulimit -n` is {soft}: {connections} connections do not fit")


class Crowd:
    """The strangers, held from their own thread (its own trio loop) until `release`, so that the test's
    thread drives the machines with the blocking CLI meanwhile. Counters are read from the test's thread."""

    def __init__(self, url: str, machines: list[str], authenticated: int, silent: int) -> None:
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.machines = machines
        self.answered = 0  # authenticated strangers whose frame the daemon answered (`unpaired`)
        self.refused: list[str] = []  # what came back instead of that answer (a notice such as `dropped`)
        self.held = 0  # authenticated strangers connected now
        self.lost: list[str] = []  # why the relay closed an authenticated stranger (it must not)
        self.silent_open = 0
        self.dropped = 0  # silent connections the relay closed
        self.longest = 0.0  # seconds the longest-lived silent connection lived
        self.overdue = 0  # silent connections still open WAIT seconds past the hello timeout
        self.failure: BaseException | None = None
        self._authenticated = authenticated
        self._silent = silent
        self._ready = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            trio.run(self._hold)
        except BaseException as error:  # re-raised in the test's thread by `wait` and `release`
            self.failure = error
            self._ready.set()

    async def _hold(self) -> None:
        connecting = trio.Semaphore(CONNECTING)
        async with trio.open_nursery() as nursery:
            for n in range(self._authenticated):
                nursery.start_soon(self._authenticated_one, self.machines[n % len(self.machines)], connecting)
            await self._until(
                lambda: self.answered + len(self.refused) == self._authenticated or bool(self.lost)
            )
            # Only now: the silent ones and the strangers still proving an address share the pending tier.
            for n in range(self._silent):
                nursery.start_soon(self._silent_one, n % 2 == 0)
            await self._until(lambda: self.silent_open == self._silent)
            self._ready.set()
            await trio.to_thread.run_sync(self._release.wait)
            nursery.cancel_scope.cancel()

    async def _until(self, gathered: Callable[[], bool]) -> None:
        """Until the crowd is `gathered`, or released (the test gave up waiting for it)."""
        while not gathered() and not self._release.is_set():
            await trio.sleep(0.05)

    async def _authenticated_one(self, to: str, connecting: trio.Semaphore) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                # Its frame's answer too under the semaphore: at most CONNECTING frames wait in a daemon's
                # queue on the relay (64 a connection), so none is dropped for a daemon slow on a loaded box.
                async with connecting:
                    client = await stack.enter_async_context(connect_relay(self.url, Identity.generate()))
                    self.held += 1
                    stack.callback(self._left)
                    await client.send(to, JUNK)
                    with trio.fail_after(WAIT):
                        answer = await client.receive()
                    if answer == Frame(to, UNPAIRED_BLOB):
                        self.answered += 1
                    else:
                        self.refused.append(repr(answer))
                while True:  # held: nothing more is expected, and the relay must not close it
                    await client.receive()
        except RelayError as error:
            self.lost.append(str(error))

    def _left(self) -> None:
        self.held -= 1

    async def _silent_one(self, upgraded: bool) -> None:
        """One slot of the pending tier: a connection that never proves an address, opened again as soon
        as the relay drops it."""
        while True:
            opened = trio.current_time()
            with trio.move_on_after(LIMITS.hello_timeout + WAIT) as overdue:
                if upgraded:
                    await self._silent_after_challenge()
                else:
                    await self._silent_tcp()
            self.dropped += not overdue.cancelled_caught
            self.overdue += overdue.cancelled_caught
            self.longest = max(self.longest, trio.current_time() - opened)

    async def _silent_tcp(self) -> None:
        stream = await trio.open_tcp_stream(HOST, self.port)
        self.silent_open += 1
        try:
            while await stream.receive_some():  # the relay sends nothing before the upgrade request
                pass
        except trio.BrokenResourceError:  # reset
            pass
        finally:
            self.silent_open -= 1
            await trio.aclose_forcefully(stream)

    async def _silent_after_challenge(self) -> None:
        async with open_ws(self.url, max_message_size=1 << 16) as ws:
            self.silent_open += 1
            try:
                await ws.get_message()  # the challenge, never answered
                await ws.get_message()
                raise AssertionError("the relay sent more than its challenge to a connection with no hello")
            except ConnectionClosed:
                pass
            finally:
                self.silent_open -= 1

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise AssertionError(f"the crowd's thread failed: {self.failure!r}") from self.failure

    def wait(self) -> None:
        gathered = self._ready.wait(120)
        self._raise_failure()
        assert gathered, (
            f"{self.held} strangers authenticated ({self.answered} answered, "
            f"{len(self.refused)} refused, {len(self.lost)} closed), "
            f"{self.silent_open} without a hello open"
        )

    def release(self) -> None:
        self._release.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the crowd's thread did not end"
        self._raise_failure()


@contextlib.contextmanager
def crowd(world: World) -> Iterator[Crowd]:
    """The 1,000 strangers held on `world`'s relay; released (and their thread's failure raised) after."""
    enough_descriptors(AUTHENTICATED + SILENT)
    strangers = Crowd(world.url, [world.a.address, world.b.address], AUTHENTICATED, SILENT)
    try:
        strangers.wait()
        yield strangers
    finally:
        strangers.release()


def alive(world: World) -> None:
    for process in (world.relay, world.a.daemon, world.b.daemon):
        assert process.running, process.text()[-3000:]


def eventually(predicate: Callable[[], object], what: str) -> None:
    test_relay_processes.eventually(predicate, what, LIMITS.hello_timeout + WAIT)


async def one_identity_many_times(url: str, to: str, count: int) -> list[str]:
    """Connect `count` times as one throw-away identity, keeping every connection: why the relay closed
    each earlier one, once the newest has had a frame answered by `to`'s daemon."""
    identity = Identity.generate()
    async with contextlib.AsyncExitStack() as stack:
        clients: list[RelayClient] = []
        for _ in range(count):
            clients.append(await stack.enter_async_context(connect_relay(url, identity)))
        newest = clients.pop()
        await newest.send(to, JUNK)
        with trio.fail_after(WAIT):
            assert await newest.receive() == Frame(to, UNPAIRED_BLOB)
        reasons = []
        for client in clients:
            with trio.fail_after(WAIT):
                try:
                    await client.receive()
                    reasons.append("still open")
                except RelayError as error:
                    reasons.append(str(error))
        return reasons


def test_one_identity_holds_one_connection(paired_world: World) -> None:
    """Issue 15: "The relay itself caps connections per identity". A stranger connecting again and again
    with the same key holds one connection (the newest); every earlier one is closed; the machines still
    talk."""
    world = paired_world
    reasons = trio.run(one_identity_many_times, world.url, world.a.address, REPEATS)
    assert len(reasons) == REPEATS - 1
    assert all("replaced by a newer connection" in reason for reason in reasons), reasons
    ask_and_reach_b(world, "q1")
    alive(world)


def test_an_exchange_completes_with_1000_strangers_held(paired_world: World) -> None:
    """Issue 15: "With 1,000 stranger connections held open on the relay, two paired machines still complete
    an exchange (ask on A, reply from B through `--machine`, answer on A), and the daemons' RSS stays under
    150 MB." And: the relay "drops connections that do not authenticate within a few seconds, and keeps
    serving paired machines while strangers hold connections"."""
    world = paired_world
    with crowd(world) as strangers:
        assert strangers.held == strangers.answered == AUTHENTICATED, (
            strangers.refused[:3],
            strangers.lost[:3],
        )
        ask_and_reach_b(world, "q1")
        replied = ok(world.bob("reply", "q1", ANSWER))
        assert replied["state"] == "answered" and replied["answer"]["text"] == ANSWER
        woke = ok(world.alice("wait", "q1", "--seconds", "30"))
        assert woke["reason"] == "answered" and woke["exchange"]["answer"]["text"] == ANSWER

        # Still crowded after the exchange: every authenticated stranger held, the silent ones dropped by
        # the hello timeout (each at least once) and opened again.
        alive(world)
        assert strangers.held == AUTHENTICATED and strangers.lost == [], strangers.lost[:3]
        eventually(lambda: strangers.dropped >= SILENT, "the relay to drop every silent connection once")
        assert strangers.overdue == 0, f"{strangers.overdue} silent connections outlived the hello timeout"
        for machine in (world.a, world.b):
            rss, peak = (status_kb(machine.daemon.pid, field) for field in ("VmRSS", "VmHWM"))
            assert rss < RSS_LIMIT_KB and peak < RSS_LIMIT_KB, (machine.name, rss, peak)

    assert world.relay.stop() == 0  # SIGTERM: the relay prints its counters as it leaves
    stats = json.loads(world.relay.text().splitlines()[-1])["stats"]
    # Every silent connection the crowd saw dropped was the hello timeout's: none was pushed out of the
    # pending tier by its cap, and no connection was pushed out of the authenticated one.
    assert stats["auth_timeouts"] >= strangers.dropped, (stats, strangers.dropped)
    assert not {"pending_evicted", "quiet_evicted", "slow_disconnects", "internal_errors"} & set(stats), stats
    assert stats["connections"] >= AUTHENTICATED + 2, stats
