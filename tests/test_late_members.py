# Issue 16 item 11, "late members learn their command": a team names an agent before it runs; its
# introduction expires after 24 h; attaching the agent later hands it a fresh introduction with its command
# prefix. A real daemon (its clock jumped a day, as the tests inject time) and real tmux on its own socket,
# with the fake Claude-like TUI as the agents.
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from harness.core import commands as c
from harness.core.effects import notice_id
from harness.core.errors import ErrorCode
from harness.core.limits import DEFAULT_LIMITS, HOUR_MS
from harness.core.records import NoticeKind, Team
from harness.core.team import reintroductions
from harness.io import home as homes
from harness.io.agents import AgentRegistry
from harness.io.daemon import now_ms
from harness.io.desk_runner import RunnerTiming
from harness.io.profiles import classify
from harness.io.terminal_port import ScreenState
from harness.io.tmux import ProcessRunner, TmuxTerminals, capture, new_session
from tests.team_helpers import TEAM, Driver
from tests.test_daemon import DEADLINE, Api, running, team_with_keys
from tests.test_desk_runner import intro, is_, until
from tests.test_tmux import FAKE_TUI, server  # noqa: F401  (fixture)

JOINED = "You joined team"


async def _agent(socket: str, tmp_path: Path, name: str) -> tuple[str, Path]:
    """A fake Claude-like TUI in a pane of its own, drawn idle: (pane, the log of what it was sent)."""
    control, log = tmp_path / f"{name}.control", tmp_path / f"{name}.jsonl"
    os.mkfifo(control)
    command = [sys.executable, str(FAKE_TUI), "--control", str(control), "--log", str(log)]
    pane = await new_session(socket, name, command, width=160, height=40, config="/dev/null")
    with trio.fail_after(DEADLINE):
        while classify("claude", await capture(ProcessRunner(socket), pane)).state is not ScreenState.IDLE:
            await trio.sleep(0.02)
    return pane, log


def _introductions(log: Path) -> list[str]:
    """Every introduction pasted into the agent's TUI."""
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [str(e["paste"]) for e in events if JOINED in str(e.get("paste", ""))]


async def test_an_agent_attached_after_its_introduction_expired_is_introduced_again(
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Seed: introductions and answer notices expire after 24 hours, and an introduction is how a member
    learns its command prefix. bob is named in the team before he runs; a day later his first introduction
    has expired, and attaching him delivers a fresh one with his prefix (this data directory, his key
    file). alice attached while her first introduction still waited: she gets that one, once."""
    skew = [0]  # the daemon's clock: real time, jumped a day on

    def clock() -> int:
        return now_ms() + skew[0]

    made: list[TmuxTerminals] = []

    def terminals(registry: AgentRegistry) -> TmuxTerminals:
        made.append(TmuxTerminals(registry.terminals, now_ms=clock))  # the screens' times are the daemon's
        return made[-1]

    home = tmp_path / "home"
    timing = RunnerTiming(poll_ms=50)
    try:
        async with running(home, clock=clock, terminals=terminals, runner_timing=timing) as daemon:
            owner = await Api.open(daemon)
            await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
            await until(lambda: is_(intro(daemon, "bob"), "queued"), DEADLINE)
            alice_pane, alice_log = await _agent(server, tmp_path, "alice")
            tmux = {"socket": server, "target": alice_pane}
            await owner("agent_register", agentId="agent-alice", name="alice", engine="claude", tmux=tmux)
            await until(
                lambda: is_(intro(daemon, "alice"), "delivered") or is_(intro(daemon, "alice"), "accepted"),
                DEADLINE,
            )

            skew[0] = daemon.limits.notice_ttl_ms + HOUR_MS
            await until(lambda: is_(intro(daemon, "bob"), "expired"), DEADLINE)
            bob_pane, bob_log = await _agent(server, tmp_path, "bob")
            tmux = {"socket": server, "target": bob_pane}
            await owner("agent_register", agentId="agent-bob", name="bob", engine="claude", tmux=tmux)
            with trio.fail_after(DEADLINE):
                while not _introductions(bob_log):
                    await trio.sleep(0.05)
            [fresh] = _introductions(bob_log)
            team: Team = daemon.durable.teams["t1"]
            bob = next(member for member in team.members.values() if member.name == "bob")
            key_file = homes.member_key_path(home, "t1", bob.id)
            assert f"--home {home}" in fresh and f"--team t1 --key-file {key_file}" in fresh
            assert key_file.read_text().strip() in team.keys  # the file the prefix names holds bob's key
            # The owner sees the fresh introduction go in, over the first one's expiry.
            await until(
                lambda: is_(intro(daemon, "bob"), "delivered") or is_(intro(daemon, "bob"), "accepted"),
                DEADLINE,
            )
            assert len(_introductions(alice_log)) == 1
    finally:
        for made_terminals in made:
            await made_terminals.aclose()


def introduction_shown(driver: Driver, member: str = "mem2") -> tuple[str, str | None] | None:
    view = driver.team.members[member].introduction
    return None if view is None else (view.state, view.reason)


def test_an_earlier_introductions_refusal_never_hides_that_a_later_one_went_in() -> None:
    """The first introduction's restated submit refused by a desk that no longer holds it, for its expiry or
    for a full desk, is a report of the earlier introduction: the view stays that of the fresh one, which
    went in; the fresh one's own progress, and a later re-introduction's, still show; a forged time in a
    re-introduction's id names no membership."""
    driver = Driver().create(2)
    first = notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)
    [fresh] = reintroductions(driver.team, "m-one", "agent2", driver.tick(), DEFAULT_LIMITS)
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, first, "expired", None))
    assert introduction_shown(driver) == ("expired", None)
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, fresh.notice_id, "delivered", None))
    for refused in ("expired", "delivery_records"):
        driver.ok(c.RecordDelivery(driver.tick(), TEAM, first, "rejected", refused))
        assert introduction_shown(driver) == ("delivered", None), refused
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, fresh.notice_id, "accepted", None))
    assert introduction_shown(driver) == ("accepted", None)
    [later] = reintroductions(driver.team, "m-one", "agent2", driver.tick(), DEFAULT_LIMITS)
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, later.notice_id, "rejected", "delivery_records"))
    assert introduction_shown(driver) == ("rejected", "delivery_records")  # the later one did not go in
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, fresh.notice_id, "read", "inbox"))
    assert introduction_shown(driver) == ("rejected", "delivery_records")  # nor does the earlier one hide it
    for forged in ("mem2~", "mem2~12x", "mem2~-5", "mem2~\u00b2", "mem2~" + "9" * 5000, "mem2~" + "9" * 16):
        forged_id = notice_id(TEAM, forged, NoticeKind.INTRODUCTION)
        driver.fails(c.RecordDelivery(driver.tick(), TEAM, forged_id, "read", None), ErrorCode.NOT_FOUND)


def test_the_owner_sees_a_fresh_introduction_over_the_first_ones_expiry() -> None:
    """A re-introduced member has two introductions and a desk reports both again after each restart: the
    ledger's view is of the fresh one once it was written, whatever order the reports come in; an archived
    team introduces nobody."""
    driver = Driver().create(2)
    [fresh] = reintroductions(driver.team, "m-one", "agent2", driver.tick(), DEFAULT_LIMITS)
    first = notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)
    assert (fresh.subject_id, fresh.membership_id, fresh.kind) == ("mem2", "mem2", NoticeKind.INTRODUCTION)
    assert fresh.notice_id != first and fresh.expires_at == driver.now + DEFAULT_LIMITS.notice_ttl_ms
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, fresh.notice_id, "delivered", None))
    driver.ok(c.RecordDelivery(driver.tick(), TEAM, first, "expired", None))
    view = driver.team.members["mem2"].introduction
    assert view is not None and view.state == "delivered"
    assert reintroductions(driver.team, "m-one", "agent-nobody", driver.tick(), DEFAULT_LIMITS) == ()
    driver.ok(c.ArchiveTeam(driver.tick(), TEAM))
    assert reintroductions(driver.team, "m-one", "agent2", driver.tick(), DEFAULT_LIMITS) == ()
