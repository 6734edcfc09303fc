# The delivery desk inside a real loopback daemon, driving scripted terminals: what an agent's screen shows
# decides when (and whether) a notice is pasted, exactly once, and the owner sees every delivery state.
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from harness.core import delivery as d
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import DeliveryView, Team
from harness.io import desk_runner
from harness.io.agents import AgentRegistry
from harness.io.daemon import Daemon, now_ms
from harness.io.desk_runner import RunnerTiming
from harness.io.journal_files import delivery_store_dir
from harness.io.team_delivery import DeliveryReport
from harness.io.terminal_port import Licence, Screen, ScreenState, WriteOutcome
from tests.test_daemon import SMALL, Api, running, team_with_keys

LIMITS = attrs.evolve(SMALL, write_settle_ms=50)
TIMING = RunnerTiming(poll_ms=20, turn_watch_ms=60_000)
S = ScreenState
DEADLINE = 60.0  # generous: the daemon's tasks share a loaded two-core machine


class FakeTerminals:
    """Scripted screens. `script[agent]` is consumed one state per look, then `screens[agent]` holds."""

    def __init__(self, screens: dict[str, ScreenState]) -> None:
        self.screens = screens
        self.script: dict[str, list[ScreenState]] = {}
        self.boundary: dict[str, ScreenState] = {}  # what the next write's own last look sees, once
        self.writes: list[tuple[str, str]] = []
        self.unsafe: list[tuple[str, ScreenState]] = []  # writes that met a screen other than idle
        self.turned: set[str] = set()  # agents whose screen shows a turn on what was written
        self.gate: trio.Event | None = None  # when set up, a write waits for it
        self.writing = trio.Event()

    def agents(self) -> Sequence[str]:
        return list(self.screens)

    async def observe(self, agent_id: str) -> Screen:
        script = self.script.get(agent_id)
        state = script.pop(0) if script else self.screens[agent_id]
        return Screen(state, now_ms(), (f"scripted {state}",), "")

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        """As TmuxTerminals: one more look right before the paste, and the paste only on its licence."""
        if agent_id in self.boundary:
            self.script.setdefault(agent_id, []).insert(0, self.boundary.pop(agent_id))
        screen = await self.observe(agent_id)
        allowed = licence is None or await licence(screen)
        if allowed and screen.state is not S.IDLE:
            self.unsafe.append((agent_id, screen.state))
        if not allowed or screen.state is not S.IDLE:
            return WriteOutcome.FAILED
        self.writes.append((agent_id, text))
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        return WriteOutcome.OK

    async def turn_matches(self, agent_id: str, text: str) -> bool:
        return agent_id in self.turned

    def written_to(self, agent_id: str) -> list[str]:
        return [text for agent, text in self.writes if agent == agent_id]


@asynccontextmanager
async def desk_daemon(home: Path, fake: FakeTerminals) -> AsyncIterator[Daemon]:
    def factory(registry: AgentRegistry) -> FakeTerminals:
        return fake

    async with running(home, LIMITS, terminals=factory, runner_timing=TIMING) as daemon:
        yield daemon
    assert fake.unsafe == [], "a write met a screen that was not idle"


async def until(check: Callable[[], bool], seconds: float = DEADLINE) -> None:
    with trio.fail_after(seconds):
        while not check():
            await trio.sleep(0.005)


def question_delivery(daemon: Daemon, question_id: str, team_id: str = "t1") -> DeliveryView | None:
    return daemon.durable.teams[team_id].exchanges[question_id].delivery


def answer_delivery(daemon: Daemon, question_id: str) -> DeliveryView | None:
    return daemon.durable.teams["t1"].exchanges[question_id].answer_delivery


def intro(daemon: Daemon, name: str) -> DeliveryView | None:
    team: Team = daemon.durable.teams["t1"]
    return next(m.introduction for m in team.members.values() if m.name == name)


def is_(view: DeliveryView | None, state: str, reason: str | None = "") -> bool:
    """`view` is in `state` (with `reason`, unless that is left "")."""
    return view is not None and view.state == state and reason in ("", view.reason)


async def local_team(daemon: Daemon) -> tuple[Api, dict[str, str]]:
    owner = await Api.open(daemon)
    keys = await team_with_keys(owner, people=("alice", "bob"), machine=daemon.machine_id)
    return owner, keys


async def test_written_once_when_idle_and_the_owner_sees_every_delivery_state(tmp_path: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.IDLE})
    async with desk_daemon(tmp_path, fake) as daemon:
        owner, keys = await local_team(daemon)
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        await until(lambda: is_(intro(daemon, "alice"), "queued", "busy"))
        fake.gate = trio.Event()
        fake.writing = trio.Event()
        alice = await Api.open(daemon, keys["alice"])
        asked = await alice("ask", "t1", id="q1", to="bob", text="Which endpoint?")
        assert asked["delivery"] is None or asked["delivery"]["state"] == "queued"
        await fake.writing.wait()
        await until(lambda: is_(question_delivery(daemon, "q1"), "writing"))
        fake.gate.set()
        await until(lambda: is_(question_delivery(daemon, "q1"), "delivered"))
        fake.turned.add("agent-bob")
        await until(lambda: is_(question_delivery(daemon, "q1"), "accepted"))
        view = await owner("status", "t1", questionId="q1")
        assert (
            view["delivery"]["state"] == "accepted" and view["state"] == "open"
        )  # input taken, not answered
        texts = fake.written_to("agent-bob")
        assert len(texts) == 2 and "Which endpoint?" in texts[1] and "--home" in texts[0]
        assert fake.written_to("agent-alice") == []  # busy all along
        await trio.sleep(0.2)
        assert len(fake.writes) == 2  # nothing is ever written twice
        # Issue 16, item 16: `team delivery` says when the one write began and when the idle screen that
        # licensed it was seen, as the desk recorded them (the spec's startedAt / seenAt).
        checked = await owner("delivery_check", "t1", questionId="q1")
        held = daemon.desk.desk.notices["t1/q1/question"] if daemon.desk is not None else None
        assert held is not None and held.started_at is not None and held.seen_at is not None
        times = (checked["delivery"]["startedAt"], checked["delivery"]["seenAt"])
        assert times == (held.started_at, held.seen_at)
        assert held.seen_at <= held.started_at


async def test_never_written_while_busy_draft_dialog_or_starting(tmp_path: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.IDLE, "agent-bob": S.BUSY})
    async with desk_daemon(tmp_path, fake) as daemon:
        await local_team(daemon)
        for state, reason in (
            (S.BUSY, "busy"),
            (S.DRAFT, "draft"),
            (S.DIALOG, "dialog"),
            (S.STARTING, "busy"),
            (S.SETTLING, "settling"),
        ):
            fake.screens["agent-bob"] = state
            await until(lambda r=reason: is_(intro(daemon, "bob"), "queued", r))
            await trio.sleep(0.1)
        assert fake.written_to("agent-bob") == []
        # Idle at the look but a draft at the write boundary: the recheck wins, the draft is never touched.
        fake.script["agent-bob"] = [S.IDLE, S.DRAFT]
        fake.screens["agent-bob"] = S.DRAFT
        await until(lambda: not fake.script["agent-bob"])
        await until(lambda: is_(intro(daemon, "bob"), "queued", "draft"))
        await trio.sleep(0.1)
        assert fake.written_to("agent-bob") == [] and is_(intro(daemon, "bob"), "queued", "draft")
        fake.screens["agent-bob"] = S.IDLE
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        assert len(fake.written_to("agent-bob")) == 1


async def test_a_crash_mid_write_leaves_it_unconfirmed_and_it_is_never_written_again(tmp_path: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.IDLE})
    fake.gate = trio.Event()  # the write never returns: the daemon dies inside it
    with trio.CancelScope() as crash:
        async with trio.open_nursery() as nursery:
            daemon = Daemon(
                tmp_path, limits=LIMITS, log=lambda line: None, terminals=lambda r: fake, runner_timing=TIMING
            )
            await nursery.start(daemon.run)
            await local_team(daemon)
            await fake.writing.wait()
            crash.cancel()  # WriteStarted is durable, WriteFinished never comes
    assert len(fake.writes) == 1
    entries = b"".join(p.read_bytes() for p in delivery_store_dir(tmp_path).glob("journal-*.jsonl"))
    assert b'"type":"write_started"' in entries and b'"type":"write_finished"' not in entries
    after = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.IDLE})
    async with desk_daemon(tmp_path, after) as daemon:
        await until(lambda: is_(intro(daemon, "bob"), "unconfirmed", "restart"))
        await trio.sleep(0.2)
        assert after.writes == []  # uncertain is never retried
        after.turned.add("agent-bob")  # the turn shows after all: it did land
        await until(lambda: is_(intro(daemon, "bob"), "accepted"))
        assert after.writes == []


async def test_pause_holds_and_resume_releases(tmp_path: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.IDLE, "agent-bob": S.BUSY})
    async with desk_daemon(tmp_path, fake) as daemon:
        owner, keys = await local_team(daemon)
        await until(lambda: is_(intro(daemon, "alice"), "delivered"))
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="later?")
        await owner("pause", "t1")
        await until(lambda: is_(question_delivery(daemon, "q1"), "held", "paused"))
        fake.screens["agent-bob"] = S.IDLE
        await trio.sleep(0.2)
        assert fake.written_to("agent-bob") == []
        await owner("resume", "t1")
        await until(lambda: is_(question_delivery(daemon, "q1"), "delivered"))
        assert len(fake.written_to("agent-bob")) == 2  # its introduction, then the question


async def test_reading_the_inbox_or_retrieving_the_answer_suppresses_unsent_notices(tmp_path: Path) -> None:
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.BUSY})
    async with desk_daemon(tmp_path, fake) as daemon:
        _, keys = await local_team(daemon)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id="q1", to="bob", text="read me in the inbox")
        await until(lambda: is_(question_delivery(daemon, "q1"), "queued"))
        assert [q["id"] for q in (await bob("inbox", "t1"))["questions"]] == ["q1"]
        # Unsent, so withdrawn (`read` is for a notice that was written and then read).
        await until(lambda: is_(question_delivery(daemon, "q1"), "withdrawn", "inbox"))
        assert is_(intro(daemon, "bob"), "withdrawn", "inbox")
        await bob("reply", "t1", questionId="q1", text="done")
        await until(lambda: is_(answer_delivery(daemon, "q1"), "queued"))
        assert (await alice("wait", "t1", questionId="q1", seconds=5))["reason"] == "answered"
        await until(lambda: is_(answer_delivery(daemon, "q1"), "withdrawn", "retrieved"))
        fake.screens["agent-bob"] = fake.screens["agent-alice"] = S.IDLE
        await until(lambda: is_(intro(daemon, "alice"), "delivered"))
        await trio.sleep(0.2)
        assert fake.written_to("agent-bob") == [] and len(fake.written_to("agent-alice")) == 1


async def test_agent_registry_actions(tmp_path: Path) -> None:
    tmux = {"socket": "harness-test", "target": "%3"}
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        made = await owner("agent_register", name="bob", engine="codex", tmux=tmux, cwd="/w")
        assert made["startedBy"] == "attached" and made["tmux"] == tmux and made["createdAt"] > 0
        again = await owner(
            "agent_register", agentId=made["agentId"], name="bob", engine="codex", tmux=tmux, cwd="/w"
        )
        assert again == made  # idempotent by agentId
        clash = await owner.error(
            "agent_register", agentId=made["agentId"], name="bob", engine="claude", tmux=tmux
        )
        assert clash.code == "conflict"
        assert (await owner.error("agent_register", name="x", engine="vim", tmux=tmux)).code == "bad_request"
        fixed = await owner(
            "agent_register", agentId="a-1", name="amy", engine="shell", tmux=tmux, startedBy="daemon"
        )
        listed = await owner("agent_list")
        assert [a["agentId"] for a in listed["agents"]] == [made["agentId"], "a-1"]
        assert listed["machineId"] == daemon.machine_id
        assert (await owner("agent_show", agentId="amy"))["agentId"] == fixed["agentId"]
        keys = await team_with_keys(owner, people=("alice",), machine=daemon.machine_id)
        member = Api(owner.client, None, keys["alice"])
        assert (await member.error("agent_list")).code == "unauthorized"
        assert (await owner("agent_remove", agentId="a-1"))["name"] == "amy"
        assert (await owner.error("agent_show", agentId="a-1")).code == "not_found"
    assert (tmp_path / "agents.json").stat().st_mode & 0o777 == 0o600
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        assert [a["name"] for a in (await owner("agent_list"))["agents"]] == ["bob"]


async def test_notices_the_desk_never_received_are_resubmitted_after_a_restart(tmp_path: Path) -> None:
    # The crash gap: the ledger made a question durable, the desk never journaled its submit. Losing the
    # desk's journal reproduces exactly that state on the next start.
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.BUSY})
    async with desk_daemon(tmp_path, fake) as daemon:
        _, keys = await local_team(daemon)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="still owed after the crash?")
        await until(lambda: is_(question_delivery(daemon, "q1"), "queued"))
    for entry in delivery_store_dir(tmp_path).iterdir():
        entry.unlink()
    fake.screens["agent-bob"] = S.IDLE
    async with desk_daemon(tmp_path, fake) as daemon:
        assert daemon.desk is not None
        await until(lambda: is_(question_delivery(daemon, "q1"), "delivered"))
        members = daemon.durable.teams["t1"].members.values()
        owed = {"t1/q1/question"} | {f"t1/{member.id}/introduction" for member in members}
        assert set(daemon.desk.desk.notices) == owed
        assert [text for text in fake.written_to("agent-bob") if "still owed" in text] != []


async def test_a_restated_notice_the_desk_holds_tells_the_owner_its_state_again(tmp_path: Path) -> None:
    # The owner's view went stale (a report overwritten while a machine was unreachable); the restatement
    # after its restart reaches the desk, which holds the notice and says again what became of it.
    fake = FakeTerminals({"agent-alice": S.BUSY, "agent-bob": S.IDLE})
    async with desk_daemon(tmp_path, fake) as daemon:
        await local_team(daemon)
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        assert daemon.desk is not None
        bob = next(n for n in daemon.desk.desk.notices.values() if n.agent_id == "agent-bob")
        await daemon.report(DeliveryReport("t1", bob.id, "queued", "offline"))
        await until(lambda: is_(intro(daemon, "bob"), "queued", "offline"))
        restated = d.Submit(
            0, "t1", bob.id, bob.kind, bob.subject_id, bob.membership_id, daemon.machine_id, bob.agent_id,
            bob.expires_at, "rendered anew",
        )  # fmt: skip
        await daemon.desk.submit(restated)
        await until(lambda: is_(intro(daemon, "bob"), "delivered"))
        written = fake.written_to("agent-bob")
        assert len(written) == 1 and "rendered anew" not in written[0]  # held once, its first text stands


async def test_a_desk_step_breaking_an_invariant_stops_the_desk_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: "the daemon, with invariants on, stops that team with `corrupt_state`", for the desk: a desk
    reducer that records q1's notice as delivered the moment it is submitted (no write, D-rules broken)
    stands in for a core bug. The step is never applied: the desk stops as corrupt_state, nothing more is
    typed into any terminal, and the ledger still holds the question, open."""
    original = d.step

    def faulty(desk: d.Desk, command: d.DeskCommand, limits: Limits) -> Any:
        outcome = original(desk, command, limits)
        if isinstance(command, d.Submit) and command.subject_id == "q1" and isinstance(outcome, Accepted):
            notice = outcome.state.notices[command.notice_id]
            delivered = attrs.evolve(notice, state=d.DeliveryState.DELIVERED)
            broken = attrs.evolve(outcome.state, notices=outcome.state.notices.set(notice.id, delivered))
            return attrs.evolve(outcome, state=broken)
        return outcome

    monkeypatch.setattr(desk_runner, "DESK_REDUCER", attrs.evolve(desk_runner.DESK_REDUCER, step=faulty))
    fake = FakeTerminals({"agent-alice": S.IDLE, "agent-bob": S.IDLE})
    async with running(tmp_path, LIMITS, terminals=lambda _: fake, runner_timing=TIMING, faults=1) as daemon:
        _owner, keys = await local_team(daemon)
        await until(
            lambda: is_(intro(daemon, "bob"), "delivered") and is_(intro(daemon, "alice"), "delivered")
        )
        writes = len(fake.writes)
        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="Which endpoint?")
        desk = daemon.desk
        assert desk is not None
        await until(lambda: desk.unavailable is not None)
        assert desk.unavailable is not None and desk.unavailable.startswith("corrupt_state")
        assert "t1/q1/question" not in desk.desk.notices  # never applied
        assert daemon.durable.teams["t1"].exchanges["q1"].state.value == "open"
        await trio.sleep(0.2)
        assert len(fake.writes) == writes  # nothing typed after the broken step
