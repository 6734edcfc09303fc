# What the owner restates to paired machines (core `restatement`): remote notices live in the owner's memory
# until the destination's desk has them durably, so a restart of the owner in between must not lose them, nor
# the pause that was on its way; and notices owed to a machine before it was paired reach it once it is.
# Real daemons with separate data directories, a real relay on 127.0.0.1, in one trio run (the out-of-process
# suite is tests/test_relay_processes.py).
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core.records import NoticeKind
from harness.io.daemon import Daemon
from harness.io.relay import Relay
from tests.test_relay_daemons import eventually, fast_node, pair, request

TEAM_ID = "team0000000000000000000000000077"


@attrs.define(eq=False)
class Running:
    daemon: Daemon
    done: trio.Event

    async def stop(self) -> None:
        self.daemon.stop()
        await self.done.wait()
        assert self.daemon.internal_errors == 0


@attrs.define(eq=False)
class Machines:
    nursery: trio.Nursery
    relay: Relay
    url: str
    home_a: Path
    home_b: Path

    async def start(self, home: Path) -> Running:
        daemon = Daemon(home, remote=fast_node, log=lambda line: None)
        done = trio.Event()

        async def serve(task_status: trio.TaskStatus[Daemon]) -> None:
            try:
                await daemon.run(task_status=task_status)
            finally:
                done.set()

        await self.nursery.start(serve)
        return Running(daemon, done)

    async def pair(self, a: Daemon, b: Daemon) -> None:
        await pair(a, b, self.url)


@asynccontextmanager
async def machines(tmp_path: Path) -> AsyncIterator[Machines]:
    async with trio.open_nursery() as nursery:
        relay = Relay()
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        yield Machines(nursery, relay, url, tmp_path / "a", tmp_path / "b")
        nursery.cancel_scope.cancel()


def call(daemon: Daemon, action: str, key: str | None = None, **fields: Any) -> Any:
    return trio.to_thread.run_sync(lambda: request(daemon, action, key, team=TEAM_ID, **fields))


def notice_states(daemon: Daemon, team_id: str) -> dict[str, str]:
    assert daemon.desk is not None
    return {n.id: n.state.value for n in daemon.desk.desk.notices.values() if n.team_id == team_id}


def owner_view(daemon: Daemon, question: str) -> Callable[[], tuple[str, str | None] | None]:
    def view() -> tuple[str, str | None] | None:
        delivery = daemon.durable.teams[TEAM_ID].exchanges[question].delivery
        return None if delivery is None else (delivery.state, delivery.reason)

    return view


async def create_team(a: Daemon, b_machine: str) -> str:
    members = [
        {"machineId": a.machine_id, "agentId": "agent-alice", "name": "alice"},
        {"machineId": b_machine, "agentId": "agent-bob", "name": "bob"},
    ]
    await call(a, "create", id=TEAM_ID, name="Restated", members=members)
    return str((await call(a, "key", memberId="alice"))["memberKey"])


async def test_an_owner_restart_restates_the_notice_and_the_pause_its_outbox_lost(tmp_path: Path) -> None:
    async with machines(tmp_path) as world:
        a, b = await world.start(world.home_a), await world.start(world.home_b)
        await world.pair(a.daemon, b.daemon)
        b_machine = b.daemon.machine_id
        alice = await create_team(a.daemon, b_machine)
        introduction = f"{TEAM_ID}/{(await call(a.daemon, 'key', memberId='bob'))['memberId']}/introduction"
        await eventually(lambda: introduction in notice_states(b.daemon, TEAM_ID))

        # B goes away; A's question and pause for it wait in A's memory only, visibly `offline`.
        await b.stop()
        await eventually(lambda: world.relay.connected() == [a.daemon.node.identity.address])  # type: ignore[union-attr]
        await call(a.daemon, "ask", alice, id="q1", to="bob", text="Which port? (asked while B is down)")
        await eventually(lambda: owner_view(a.daemon, "q1")() == ("queued", "offline"))
        await call(a.daemon, "pause")
        await a.stop()  # ...and A stops before B is back: its outbox is gone

        b = await world.start(world.home_b)
        a = await world.start(world.home_a)
        question = f"{TEAM_ID}/q1/{NoticeKind.QUESTION.value}"
        await eventually(lambda: notice_states(b.daemon, TEAM_ID).get(question) == "held")
        assert b.daemon.desk is not None and TEAM_ID in b.daemon.desk.desk.held_teams
        await eventually(lambda: owner_view(a.daemon, "q1")() == ("held", "paused"))
        # Restated, not repeated: the desk holds each notice once, and the introduction kept its state.
        assert sorted(notice_states(b.daemon, TEAM_ID)) == sorted([introduction, question])

        await call(a.daemon, "resume")
        await eventually(lambda: notice_states(b.daemon, TEAM_ID).get(question) == "queued")
        await call(a.daemon, "cancel", alice, questionId="q1")
        await eventually(lambda: notice_states(b.daemon, TEAM_ID).get(question) == "withdrawn")
        for running in (a, b):
            await running.stop()


async def test_notices_owed_to_a_machine_reach_it_once_it_is_paired(tmp_path: Path) -> None:
    async with machines(tmp_path) as world:
        a, b = await world.start(world.home_a), await world.start(world.home_b)
        alice = await create_team(a.daemon, b.daemon.machine_id)
        await call(a.daemon, "ask", alice, id="q1", to="bob", text="Before we were paired")
        await eventually(lambda: owner_view(a.daemon, "q1")() == ("queued", "unpaired"))
        assert notice_states(b.daemon, TEAM_ID) == {}

        await world.pair(a.daemon, b.daemon)  # `pair create` on A, `pair accept` on B, both running
        question = f"{TEAM_ID}/q1/{NoticeKind.QUESTION.value}"
        await eventually(lambda: notice_states(b.daemon, TEAM_ID).get(question) == "queued")
        # B's desk reports it (no terminal there: it waits), replacing the owner's `unpaired`.
        waiting = {("queued", "pressure"), ("queued", "offline")}
        await eventually(lambda: owner_view(a.daemon, "q1")() in waiting)
        assert len(notice_states(b.daemon, TEAM_ID)) == 2  # bob's introduction and the question
        for running in (a, b):
            await running.stop()
