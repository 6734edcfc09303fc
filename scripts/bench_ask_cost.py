# The cost of one ask, counted rather than timed (issue 18): a daemon in this process, a team of two members
# on this machine and no terminal attached (the notice waits `queued`, as for an agent that is not started).
# For one `ask`, from the request until the owner's view holds the desk's report, and for one `reply`
# through the same path, it counts what the disk and the event loop were made to do: fsync calls (files and
# directories), ledger and desk journal appends, team revisions, and the snapshots pushed to one watcher.
# Printed as figures and as ratios against the minimum the protocol needs (one durable append per ask).
from __future__ import annotations

import collections
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from harness.io import home as homes
from harness.io.client import Client
from harness.io.daemon import Daemon

ROUNDS = 8  # pending_per_sender: one sender keeps at most 8 questions open


class Counters:
    """os.fsync calls and journal appends, by kind, while `counting` is on."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.counting = False
        self._fsync = os.fsync

    def install(self) -> None:
        def fsync(fd: int) -> None:
            if self.counting:
                self.counts["fsync"] += 1
            self._fsync(fd)

        os.fsync = fsync

    def uninstall(self) -> None:
        os.fsync = self._fsync


def request(
    socket: Path, token: str, action: str, team: str | None = None, key: str | None = None, **fields: Any
) -> Any:
    with Client(socket) as client:
        owner = None if key else token
        return client.request(action, team_id=team, owner_token=owner, member_key=key, fields=fields)


async def settled(daemon: Daemon, team: str, question: str, *, answered: bool) -> None:
    def done() -> bool:
        found = daemon.durable.teams[team].exchanges.get(question)
        if found is None:
            return False
        view = found.answer_delivery if answered else found.delivery
        return view is not None

    with trio.fail_after(30):
        while not done():
            await trio.sleep(0.005)
    await trio.sleep(0.2)  # whatever else the step set off (a second report) lands in the count too


async def measure(home: Path) -> dict[str, float]:
    counters = Counters()
    counters.install()
    daemon = Daemon(home, log=lambda line: None)
    per: dict[str, float] = {}
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            token = homes.read_owner_token(home)
            socket = daemon.socket_path
            call: Callable[..., Any] = lambda *a, **k: trio.to_thread.run_sync(  # noqa: E731
                lambda: request(socket, token, *a, **k)
            )
            members = [
                {"machineId": daemon.machine_id, "agentId": f"agent-{n}", "name": n} for n in ("alice", "bob")
            ]
            await call("create", id="bench", name="bench", members=members)
            alice = (await call("key", "bench", memberId="alice"))["memberKey"]
            bob = (await call("key", "bench", memberId="bob"))["memberKey"]
            await trio.sleep(0.5)  # the introductions' reports settle before counting
            revision0 = daemon.durable.teams["bench"].revision
            counters.counting = True
            for n in range(ROUNDS):
                await call("ask", "bench", key=alice, id=f"q{n}", to="bob", text="Which port?")
                await settled(daemon, "bench", f"q{n}", answered=False)
            counters.counting = False
            per["fsyncs per ask (request to report recorded)"] = counters.counts["fsync"] / ROUNDS
            revision1 = daemon.durable.teams["bench"].revision
            per["team revisions per ask"] = (revision1 - revision0) / ROUNDS
            counters.counts.clear()
            counters.counting = True
            for n in range(ROUNDS):
                await call("reply", "bench", key=bob, questionId=f"q{n}", text="8080")
                await settled(daemon, "bench", f"q{n}", answered=True)
            counters.counting = False
            per["fsyncs per reply (request to continuation report)"] = counters.counts["fsync"] / ROUNDS
            per["team revisions per reply"] = (daemon.durable.teams["bench"].revision - revision1) / ROUNDS
            daemon.stop()
    finally:
        counters.uninstall()
    return per


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        figures = trio.run(measure, home)
    print(f"cost of one ask, {ROUNDS} rounds, no terminal attached (counts, not times):")
    for name, value in figures.items():
        print(f"  {name:55s} {value:6.2f}")
    print(
        "  ratio: fsyncs per ask / the one durable append an ask needs  "
        f"{figures['fsyncs per ask (request to report recorded)'] / 1:6.2f}"
    )


if __name__ == "__main__":
    main()
