# What a restart restates to this machine's desk (io/delivery_router.py `restate_guards`, then
# `restate_notices_gradually`): it skips what the replayed desk would ignore (`_moot_here`), and only that. A
# crash can leave the desk's journal behind the ledger's; restoring an older copy of the desk's journal under
# a later ledger reproduces that gap in a real daemon, and the requests the restatement hands this desk are
# recorded at the router.
from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from harness.core import delivery as d
from harness.core import system
from harness.core.effects import SubmitNotice
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.records import Ledger
from harness.core.routing import RestatementPart
from harness.io.agents import AgentRegistry
from harness.io.daemon import Daemon
from harness.io.delivery_router import DeliveryRouter
from harness.io.desk_runner import DeskRunner
from harness.io.journal_files import delivery_store_dir
from harness.io.team_delivery import OwnerRequest
from harness.io.terminal_port import ScreenState
from tests.test_daemon import Api, member, running, team_with_keys
from tests.test_desk_runner import TIMING, FakeTerminals, question_delivery, until

# Questions must stay open however slow the machine (the default time to live is minutes).
LIMITS = attrs.evolve(DEFAULT_LIMITS, write_settle_ms=50)


def question(exchange_id: str) -> str:
    return f"t1/{exchange_id}/question"


@asynccontextmanager
async def busy_daemon(home: Path, limits: Limits = LIMITS) -> AsyncIterator[Daemon]:
    """A daemon whose agents' screens stay busy: every notice its desk holds stays where restarts put it."""
    fake = FakeTerminals({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.BUSY})

    def factory(registry: AgentRegistry) -> FakeTerminals:
        return fake

    async with running(home, limits, terminals=factory, runner_timing=TIMING) as daemon:
        yield daemon
    assert fake.writes == []


def desk_notices(daemon: Daemon) -> dict[str, d.DeliveryState]:
    assert daemon.desk is not None
    return {notice.id: notice.state for notice in daemon.desk.desk.notices.values()}


@attrs.define
class Restatement:
    """What the restatement handed this machine's desk (the guards before the daemon listens, then each
    team's notices while it serves), and the teams whose notices it has restated."""

    requests: list[OwnerRequest] = attrs.Factory(list)
    teams: list[str] = attrs.Factory(list)

    async def finished(self, teams: int = 1) -> list[OwnerRequest]:
        await until(lambda: len(self.teams) >= teams)
        return self.requests


def record_restatement(monkeypatch: pytest.MonkeyPatch) -> Restatement:
    """Record what the restatement hands this machine's desk, from now on (each part is handed over
    synchronously: nothing else sends while it is)."""
    recording = Restatement()
    restating = [False]
    restate, send = DeliveryRouter._restate, DeliveryRouter.send

    def recording_restate(
        router: DeliveryRouter, team_ids: list[str], machine: str | None, part: RestatementPart
    ) -> None:
        restating[0] = True
        try:
            restate(router, team_ids, machine, part)
        finally:
            restating[0] = False
        if part is RestatementPart.NOTICES:
            recording.teams.extend(team_ids)

    def recording_send(router: DeliveryRouter, machine_id: str, command: OwnerRequest) -> None:
        if restating[0] and machine_id == router.machine_id:
            recording.requests.append(command)
        send(router, machine_id, command)

    monkeypatch.setattr(DeliveryRouter, "_restate", recording_restate)
    monkeypatch.setattr(DeliveryRouter, "send", recording_send)
    return recording


def copy_desk(tmp_path: Path) -> Path:
    """A copy of the desk's journal as it is now, to restore under a later ledger (a desk left behind)."""
    before = tmp_path / "desk-before"
    shutil.copytree(delivery_store_dir(tmp_path), before)
    return before


def restore_desk(tmp_path: Path, before: Path) -> None:
    shutil.rmtree(delivery_store_dir(tmp_path))
    shutil.copytree(before, delivery_store_dir(tmp_path))


async def team_asked_q1_and_desk_copied(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Team t1 (alice, bob) with q1 asked and held by the desk; the members' keys and the desk's copy."""
    async with busy_daemon(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="q1, asked before the copy")
        await until(lambda: question("q1") in desk_notices(daemon))
    return keys, copy_desk(tmp_path)


def hold_restatement_back(monkeypatch: pytest.MonkeyPatch) -> tuple[trio.Event, list[str]]:
    """From the next start, each team's notices wait to be restated until the event is set; the list
    names the teams that reached their turn."""
    release = trio.Event()
    held: list[str] = []

    async def held_back(router: DeliveryRouter, team_id: str) -> None:
        held.append(team_id)
        await release.wait()

    monkeypatch.setattr(DeliveryRouter, "before_team", held_back)
    return release, held


def notice_ids(requests: list[OwnerRequest], kind: type[d.Submit] | type[d.Withdraw]) -> set[str]:
    return {request.notice_id for request in requests if isinstance(request, kind)}


async def test_a_restart_restates_what_the_desk_lacks_and_skips_what_it_would_ignore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed: "After a restart, known-unsent notices resume" — and a desk that already has a notice, or never
    had the one withdrawn, is not told again. The desk's journal is restored to before q3 and q4 were asked
    and q2 and q3 cancelled, under the ledger that recorded all of it:

    q1 open, the desk holds it: its submit is moot.        q2 cancelled, the desk holds it queued: withdrawn.
    q3 cancelled, the desk never held it: moot.            q4 open, the desk lacks it: submitted.
    q0 cancelled, the desk holds it withdrawn: moot (a withdrawal leaves it as it is)."""
    async with busy_daemon(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        for exchange_id in ("q0", "q1", "q2"):
            await alice("ask", "t1", id=exchange_id, to="bob", text=f"{exchange_id}, asked before the copy")
        await alice("cancel", "t1", questionId="q0")
        await until(lambda: {question("q1"), question("q2")} <= desk_notices(daemon).keys())
        await until(lambda: desk_notices(daemon).get(question("q0")) is d.DeliveryState.WITHDRAWN)
        introductions = {n for n in desk_notices(daemon) if n.endswith("/introduction")}
        assert len(introductions) == 2
    before = copy_desk(tmp_path)

    async with busy_daemon(tmp_path) as daemon:
        alice = await Api.open(daemon, keys["alice"])
        for exchange_id in ("q3", "q4"):
            await alice("ask", "t1", id=exchange_id, to="bob", text=f"{exchange_id}, asked after the copy")
        for exchange_id in ("q2", "q3"):
            await alice("cancel", "t1", questionId=exchange_id)
        withdrawn = {question("q2"): d.DeliveryState.WITHDRAWN, question("q3"): d.DeliveryState.WITHDRAWN}
        await until(lambda: withdrawn.items() <= desk_notices(daemon).items())
    restore_desk(tmp_path, before)

    recording = record_restatement(monkeypatch)
    async with busy_daemon(tmp_path) as daemon:
        restated = await recording.finished()
        exchanges = daemon.durable.teams["t1"].exchanges
        assert [exchanges[q].state.value for q in ("q0", "q1", "q2", "q3", "q4")] == [
            "cancelled", "open", "cancelled", "cancelled", "open"
        ]  # fmt: skip
        submitted, withdrawals = notice_ids(restated, d.Submit), notice_ids(restated, d.Withdraw)
        assert question("q2") in withdrawals, (
            f"the owed withdrawal of a notice the desk holds was skipped: {withdrawals}"
        )
        assert question("q3") not in withdrawals, "a notice the desk never held was withdrawn again"
        assert question("q0") not in withdrawals, "a notice the desk holds withdrawn was withdrawn again"
        assert question("q4") in submitted, f"a notice the desk lacks was not submitted again: {submitted}"
        assert submitted.isdisjoint({question("q1"), *introductions}), (
            f"notices the desk holds were submitted again: {sorted(submitted)}"
        )
        # What the desk does with it: the cancelled question can no longer be written, the owed one is back.
        await until(lambda: desk_notices(daemon).get(question("q2")) is d.DeliveryState.WITHDRAWN)
        await until(lambda: desk_notices(daemon).get(question("q4")) is d.DeliveryState.QUEUED)
        assert question("q3") not in desk_notices(daemon)


def view_of(daemon: Daemon, exchange_id: str) -> tuple[str, str | None] | None:
    view = question_delivery(daemon, exchange_id)
    return None if view is None else (view.state, view.reason)


REFUSED_FULL = ("rejected", "delivery_records")


def introduction_of(daemon: Daemon, name: str) -> tuple[str, tuple[str, str | None] | None]:
    """The member's introduction notice id and the owner's view of it."""
    team = daemon.durable.teams["t1"]
    member = next(m for m in team.members.values() if m.name == name)
    view = member.introduction
    return f"t1/{member.id}/introduction", None if view is None else (view.state, view.reason)


async def test_a_full_desk_is_not_asked_again_what_it_refused_and_the_owner_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the seed's bounds a full desk refuses every answer notice at each restart, and each refusal's
    report changes nothing: such a submit is skipped, but only when the owner already records that refusal.
    The desk's journal is restored to before q2 and q3 were asked, and the daemon restarts under a lower
    delivery-record bound, so the restored desk is full:

    q2 the desk took (the owner saw it queued), but it lacks it now: submitted, refused, the owner told.
    q3 the full desk refused, and the owner records that refusal: moot, not submitted again, and not even
    rendered (a full desk refuses a notice before it looks at its text).
    carol's introduction, refused the same way: submitted (its view is shared with re-introductions)."""
    roomy = attrs.evolve(LIMITS, delivery_records=4)  # two introductions, q1 and q2
    async with busy_daemon(tmp_path, roomy) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="q1, asked before the copy")
        await until(lambda: question("q1") in desk_notices(daemon))
    before = copy_desk(tmp_path)

    async with busy_daemon(tmp_path, roomy) as daemon:
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q2", to="bob", text="q2, taken by the desk")
        await until(lambda: question("q2") in desk_notices(daemon))
        await alice("ask", "t1", id="q3", to="bob", text="q3, refused by the full desk")
        await until(lambda: view_of(daemon, "q3") == REFUSED_FULL)
        assert view_of(daemon, "q2") != REFUSED_FULL
        await (await Api.open(daemon))("add", "t1", **member("carol", daemon.machine_id))
        await until(lambda: introduction_of(daemon, "carol")[1] == REFUSED_FULL)
    restore_desk(tmp_path, before)

    recording = record_restatement(monkeypatch)
    rendered: list[str] = []
    render = system.render_notice

    def recording_render(ledger: Ledger, effect: SubmitNotice, *args: Any) -> str:
        rendered.append(effect.notice_id)
        return render(ledger, effect, *args)

    monkeypatch.setattr(system, "render_notice", recording_render)
    async with busy_daemon(tmp_path, attrs.evolve(LIMITS, delivery_records=3)) as daemon:
        restated = await recording.finished()
        submitted = notice_ids(restated, d.Submit)
        assert question("q2") in submitted, f"a refusal the owner does not know of was skipped: {submitted}"
        assert question("q3") not in submitted, "a full desk was asked again what it refused, as recorded"
        assert question("q2") in rendered and question("q3") not in rendered, rendered
        # An introduction's view is shared with the member's re-introductions: never taken as recorded.
        assert introduction_of(daemon, "carol")[0] in submitted, f"an introduction was skipped: {submitted}"
        await until(lambda: view_of(daemon, "q2") == REFUSED_FULL)
        assert view_of(daemon, "q3") == REFUSED_FULL
        assert len(desk_notices(daemon)) == 3


async def test_a_stopped_desk_is_told_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A desk whose store cannot be read is stopped and answers each request itself (a submit is reported
    owed, `corrupt_state`, until the repair): nothing is moot there, not even the withdrawal of a notice
    its empty in-memory desk never held."""
    async with busy_daemon(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="q1, cancelled before the damage")
        await alice("cancel", "t1", questionId="q1")
        await until(lambda: desk_notices(daemon).get(question("q1")) is d.DeliveryState.WITHDRAWN)
    journals = sorted(delivery_store_dir(tmp_path).glob("journal-*.jsonl"))
    journals[0].write_bytes(b"not a journal entry\n" + journals[0].read_bytes())

    recording = record_restatement(monkeypatch)
    async with busy_daemon(tmp_path) as daemon:
        restated = await recording.finished()
        assert daemon.desk is not None and daemon.desk.unavailable is not None
        withdrawals = notice_ids(restated, d.Withdraw)
        assert question("q1") in withdrawals, f"a withdrawal skipped on a stopped desk: {withdrawals}"
        introductions = {n for n in notice_ids(restated, d.Submit) if n.endswith("/introduction")}
        assert len(introductions) == 2


async def test_the_daemon_serves_before_a_team_is_restated_and_restates_it_as_it_then_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start restates one team at a time while the daemon already serves. Held back before its team's
    part, the restatement waits while a request cancels a question whose notice the desk lacks; then it
    restates the team as it is by then: that notice is never handed to the desk, so no cancelled question
    can be written. (Routes derived at the start and handed over later would queue it after the cancel.)"""
    keys, before = await team_asked_q1_and_desk_copied(tmp_path)
    async with busy_daemon(tmp_path) as daemon:
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q5", to="bob", text="q5, asked after the copy")
        await until(lambda: question("q5") in desk_notices(daemon))
    restore_desk(tmp_path, before)

    release, held = hold_restatement_back(monkeypatch)
    recording = record_restatement(monkeypatch)
    async with busy_daemon(tmp_path) as daemon:
        await until(lambda: held == ["t1"])
        assert recording.teams == []  # listening, and t1 not restated yet
        status = await (await Api.open(daemon))("daemon_status", None)
        assert status["restatingTeams"] == 1
        alice = await Api.open(daemon, keys["alice"])
        assert (await alice("cancel", "t1", questionId="q5"))["state"] == "cancelled"
        release.set()
        restated = await recording.finished()
        assert question("q5") not in notice_ids(restated, d.Submit), "a cancelled question's notice restated"
        assert (await (await Api.open(daemon))("daemon_status", None))["restatingTeams"] == 0
        assert question("q1") in desk_notices(daemon)
        assert question("q5") not in desk_notices(daemon)


async def test_a_paused_teams_hold_reaches_a_lagging_desk_before_the_daemon_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed: "Pause holds new sends". The desk's journal is from before the pause; the
    team's notices are not restated yet (held back) when a member asks in the paused team: the desk was
    already told of the pause before the daemon listened, so it holds the new notice rather than queueing
    it for a write."""
    keys, before = await team_asked_q1_and_desk_copied(tmp_path)
    async with busy_daemon(tmp_path) as daemon:
        await (await Api.open(daemon))("pause", "t1")
        await until(lambda: desk_notices(daemon).get(question("q1")) is d.DeliveryState.HELD)
    restore_desk(tmp_path, before)

    release, _ = hold_restatement_back(monkeypatch)
    async with busy_daemon(tmp_path) as daemon:
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q9", to="bob", text="q9, asked in the paused team")
        await until(lambda: question("q9") in desk_notices(daemon))
        assert desk_notices(daemon)[question("q9")] is d.DeliveryState.HELD
        assert desk_notices(daemon)[question("q1")] is d.DeliveryState.HELD
        release.set()


async def test_a_lagging_desk_writes_nothing_before_the_guards_are_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed: "never deliver" what the owner ended. The desk's journal is from before q1 was cancelled (an
    older copy put back, or its last steps rode their next append and were lost with a crash), and bob's
    screen is idle. Its delivery worker held back, the daemon's desk has opened, yet it does not look at a
    terminal, let alone write, until the owner's withdrawal of q1 is applied; then q1 is withdrawn and
    nothing is typed."""
    keys, before = await team_asked_q1_and_desk_copied(tmp_path)
    async with busy_daemon(tmp_path) as daemon:
        await (await Api.open(daemon, keys["alice"]))("cancel", "t1", questionId="q1")
        await until(lambda: desk_notices(daemon).get(question("q1")) is d.DeliveryState.WITHDRAWN)
    restore_desk(tmp_path, before)

    release, opened, looking = trio.Event(), trio.Event(), trio.Event()
    run, open_desk, loop = DeliveryRouter.run, DeskRunner._open, DeskRunner._loop

    async def held_run(router: DeliveryRouter) -> None:
        await release.wait()
        await run(router)

    async def noted_open(desk: DeskRunner) -> None:
        await open_desk(desk)
        opened.set()

    async def noted_loop(desk: DeskRunner) -> None:
        looking.set()
        await loop(desk)

    monkeypatch.setattr(DeliveryRouter, "run", held_run)
    monkeypatch.setattr(DeskRunner, "_open", noted_open)
    monkeypatch.setattr(DeskRunner, "_loop", noted_loop)
    fake = FakeTerminals({"agent-alice": ScreenState.IDLE, "agent-bob": ScreenState.IDLE})
    daemon = Daemon(
        tmp_path, limits=LIMITS, log=lambda line: None, terminals=lambda r: fake, runner_timing=TIMING
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.run)
        await opened.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert not looking.is_set(), "the desk looked at terminals before the owner's guards reached it"
        assert desk_notices(daemon)[question("q1")] is d.DeliveryState.QUEUED  # the lagging copy
        release.set()
        await until(lambda: desk_notices(daemon).get(question("q1")) is d.DeliveryState.WITHDRAWN)
        await until(looking.is_set)
        daemon.stop()
    assert not [text for _, text in fake.writes if "q1" in text], fake.writes
